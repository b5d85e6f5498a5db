"""``bj.bench.depth_robustness`` on the bundled pancreas cells: PCA re-projection and re-embedding."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

import biomjepa as bj
from biomjepa import bench


@pytest.fixture(scope="module")
def pancreas():
    """The bundled 1,074 pancreas cells after ``bj.pp.map_vocab`` (shared: tests must not modify it)."""
    a = bj.datasets.pancreas()
    bj.pp.map_vocab(a)
    return a


@pytest.fixture
def small(pancreas):
    """A copy of 60 random pancreas cells."""
    idx = np.sort(np.random.default_rng(0).choice(pancreas.n_obs, 60, replace=False))
    return pancreas[idx].copy()


def _state(a):
    return a.X.data.copy(), a.X.indices.copy(), sorted(a.obsm), sorted(a.uns), a.obs.copy()


def _unchanged(a, state):
    data, indices, obsm, uns, obs = state
    assert np.array_equal(a.X.data, data) and np.array_equal(a.X.indices, indices)
    assert sorted(a.obsm) == obsm and sorted(a.uns) == uns
    pd.testing.assert_frame_equal(a.obs, obs)


def test_pca_thinning_200_cells(pancreas):
    state = _state(pancreas)
    df = bench.depth_robustness(pancreas, label_key="cell_type", use_reps="X_pca50", fractions=(1.0, 0.5, 0.2), n_cells=200)
    _unchanged(pancreas, state)
    assert "X_pca50" not in pancreas.obsm
    assert list(df.columns) == ["task", "rep", "setting", "seed", "metric", "value"]
    assert set(df.task) == {"depth_robustness"} and set(df.setting) == {"thin1.0", "thin0.5", "thin0.2"}
    assert (df.seed == 0).all() and len(df) == 3 * 3
    v = df.set_index(["setting", "metric"])["value"]
    assert v["thin1.0", "self_match"] == 1.0 and v["thin1.0", "relative_shift"] == pytest.approx(0.0, abs=1e-6)
    # measured (seed 0): agreement 0.910 / 0.900 / 0.845, self-match 1.00 / 1.00 / 0.99
    assert v["thin0.5", "nn_label_agreement"] > 0.85 and v["thin0.5", "self_match"] > 0.97
    assert v["thin0.2", "nn_label_agreement"] > 0.8 and v["thin0.2", "self_match"] > 0.95
    assert 0 < v["thin0.5", "relative_shift"] < v["thin0.2", "relative_shift"] < 0.5
    again = bench.depth_robustness(pancreas, label_key="cell_type", use_reps=["X_pca50"], fractions=0.2, n_cells=200)
    pd.testing.assert_frame_equal(again.reset_index(drop=True), df[df.setting == "thin0.2"].reset_index(drop=True))


def test_pca_transform_reproduces_baseline(small):
    Z, pca = bench.baselines.fit_pca(small)
    bench.add_baselines(small)
    assert np.array_equal(small.obsm["X_pca50"], Z)
    np.testing.assert_allclose(pca.transform(small.X), Z, atol=1e-3)


def test_reembed_tiny_checkpoint(small, tiny_checkpoint, caplog):
    bj.tl.embed(small, checkpoint=tiny_checkpoint, device="cpu")
    state = _state(small)
    stored = small.obsm["X_biomjepa"].copy()
    with caplog.at_level(logging.INFO, logger="biomjepa.bench.depth"):
        df = bench.depth_robustness(small, label_key="cell_type", use_reps=["X_biomjepa", "X_pca50"],
                                    fractions=(1.0, 0.2), device="cpu")
    assert "reusing the stored full-depth embedding" in caplog.text
    _unchanged(small, state)
    assert np.array_equal(small.obsm["X_biomjepa"], stored)
    v = df.set_index(["rep", "setting", "metric"])["value"]
    assert set(df.rep) == {"X_biomjepa", "X_pca50"} and len(df) == 2 * 2 * 3
    assert v["X_biomjepa", "thin1.0", "self_match"] == 1.0
    assert v["X_biomjepa", "thin1.0", "relative_shift"] < 1e-3
    assert v["X_biomjepa", "thin0.2", "relative_shift"] > v["X_biomjepa", "thin1.0", "relative_shift"]
    # an explicit checkpoint gives the same numbers; without a recorded one it re-embeds full depth too
    del small.uns["biomjepa"]
    again = bench.depth_robustness(small, label_key="cell_type", use_reps="X_biomjepa", fractions=(1.0, 0.2),
                                   checkpoint=tiny_checkpoint, device="cpu")
    np.testing.assert_allclose(again["value"], df[df.rep == "X_biomjepa"]["value"], atol=1e-6)


def test_bad_arguments(small):
    kw = dict(label_key="cell_type", use_reps="X_pca50")
    for bad in [(0.0,), (0.5, 1.5), (), (-0.1,)]:
        with pytest.raises(ValueError, match=r"fractions"):
            bench.depth_robustness(small, fractions=bad, **kw)
    with pytest.raises(KeyError, match=r"obs\['nope'\] not found"):
        bench.depth_robustness(small, label_key="nope", use_reps="X_pca50")
    small.obsm["X_emb"] = np.zeros((small.n_obs, 3))
    with pytest.raises(ValueError, match=r"Cannot re-derive obsm\['X_emb'\].*'X_pca50'.*bj\.tl\.embed"):
        bench.depth_robustness(small, label_key="cell_type", use_reps=["X_pca50", "X_emb"])
    with pytest.raises(ValueError, match="use_reps` is empty"):
        bench.depth_robustness(small, label_key="cell_type", use_reps=[])
    with pytest.raises(ValueError, match="n_cells"):
        bench.depth_robustness(small, n_cells=1, **kw)
    small.uns["biomjepa"] = {"params": {"checkpoint": "/no/such/checkpoint", "pooling": "max+top5mean"}}
    with pytest.raises(ValueError, match="pass `checkpoint=`"):
        bench.depth_robustness(small, label_key="cell_type", use_reps="X_biomjepa")
    logged = small.copy()
    logged.X = logged.X.log1p()
    with pytest.raises(ValueError, match="raw counts"):
        bench.depth_robustness(logged, **kw)
    with pytest.raises(KeyError, match=r"layers\['counts'\] not found"):
        bench.depth_robustness(small, layer="counts", **kw)


def test_missing_labels_and_dense_counts(small):
    a = small.copy()
    a.X = a.X.toarray()
    a.obs["cell_type"] = a.obs["cell_type"].astype(object)
    a.obs.iloc[:5, a.obs.columns.get_loc("cell_type")] = np.nan
    with pytest.warns(UserWarning, match=r"dropping 5 cells without a label"):
        df = bench.depth_robustness(a, label_key="cell_type", use_reps="X_pca50", fractions=(0.5,))
    ref = bench.depth_robustness(small[5:].copy(), label_key="cell_type", use_reps="X_pca50", fractions=(0.5,))
    assert df["value"].notna().all() and len(df) == len(ref) == 3
