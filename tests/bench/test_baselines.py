"""Baselines a user would pick instead (HVG, scVI), batch_key checks and scib-metrics' scores."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biomjepa import bench


@pytest.fixture
def batched(blobs):
    """``blobs`` with two batches that cut across the cell types."""
    blobs.obs["batch"] = np.where(np.arange(blobs.n_obs) % 2 == 0, "v2", "v3")
    return blobs


def _unchanged(a, obsm_keys, obs_cols):
    assert list(a.obsm) == obsm_keys and list(a.obs.columns) == obs_cols


def _no_module(monkeypatch, name):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a, **k: None if n == name else real(n, *a, **k))


def test_hvg_is_the_log_normalized_hvgs_and_deterministic(blobs):
    keys = bench.add_baselines(blobs, ["hvg"], layer="counts", n_top_genes=50)
    assert keys == ["X_hvg"] and "X_pca50" not in blobs.obsm  # only what was asked for
    Z = blobs.obsm["X_hvg"]
    assert Z.shape == (blobs.n_obs, 50) and Z.dtype == np.float32 and isinstance(Z, np.ndarray)
    # the same genes as the PCA baseline, log1p(1e4 · counts / library size) of each
    _, pca = bench.baselines.fit_pca(blobs, layer="counts", n_top_genes=50)
    X = blobs.layers["counts"].toarray().astype(np.float64)
    expected = np.log1p(1e4 * X / X.sum(1, keepdims=True))[:, pca.genes]
    np.testing.assert_allclose(Z, expected, rtol=1e-5, atol=1e-5)
    again = blobs.copy()
    del again.obsm["X_hvg"]
    bench.add_baselines(again, ["hvg"], layer="counts", n_top_genes=50)
    np.testing.assert_array_equal(again.obsm["X_hvg"], Z)
    # reused unless overwrite
    blobs.obsm["X_hvg"] = Z + 1
    bench.add_baselines(blobs, ["hvg"], layer="counts", n_top_genes=50)
    np.testing.assert_array_equal(blobs.obsm["X_hvg"], Z + 1)
    bench.add_baselines(blobs, ["hvg"], layer="counts", n_top_genes=50, overwrite=True)
    np.testing.assert_array_equal(blobs.obsm["X_hvg"], Z)


def test_hvg_scored_with_the_same_protocol(blobs):
    df = bench.run(blobs, label_key="cell_type", tasks=["annotation", "clustering"], use_reps="X_emb",
                   baselines=["pca", "hvg"], layer="counts", seeds=(42,), task_kwargs={"annotation": {"shots": (5,)}})
    assert list(dict.fromkeys(df["rep"])) == ["X_emb", "X_pca50", "X_hvg"]
    ann = df[(df.task == "annotation") & (df.metric == "macro_f1")].set_index("rep")["value"]
    assert ann["X_hvg"] > 0.8  # the toy classes differ in their Poisson rates


def test_unknown_baseline_names_the_argument(blobs):
    keys, cols = list(blobs.obsm), list(blobs.obs.columns)
    with pytest.raises(ValueError, match=r"unknown baselines \['harmony'\].*`baselines=`.*'hvg', 'scvi'"):
        bench.add_baselines(blobs, ["pca", "harmony"])
    with pytest.raises(ValueError, match="unknown baselines"):
        bench.run(blobs, label_key="cell_type", tasks=["clustering"], use_reps="X_emb", baselines=["pca", "harmony"])
    _unchanged(blobs, keys, cols)


def test_batch_key_not_in_obs(batched):
    keys, cols = list(batched.obsm), list(batched.obs.columns)
    with pytest.raises(KeyError, match=r"batch_key='chemistry'.*`batch_key=`.*'batch'"):
        bench.add_baselines(batched, ["pca", "hvg"], batch_key="chemistry")
    with pytest.raises(KeyError, match="batch_key"):
        bench.run(batched, label_key="cell_type", batch_key="chemistry", use_reps="X_emb", baselines=["pca"])
    with pytest.raises(KeyError, match="`batch_key=`"):
        bench.integration(batched, batch_key="chemistry", use_reps="X_emb", baselines=["hvg"])
    with pytest.raises(ValueError, match="needs `batch_key=`"):
        bench.run(batched, label_key="cell_type", tasks=["integration"], use_reps="X_emb", baselines=["pca"])
    _unchanged(batched, keys, cols)


def test_missing_use_rep_fails_before_any_baseline_is_written(blobs):
    with pytest.raises(KeyError, match="X_nope"):
        bench.run(blobs, label_key="cell_type", tasks=["clustering"], use_reps=["X_nope"], baselines=["pca", "hvg"])
    assert "X_pca50" not in blobs.obsm and "X_hvg" not in blobs.obsm


def test_run_with_batch_key_adds_integration(batched):
    df = bench.run(batched, label_key="cell_type", batch_key="batch", tasks=None, use_reps="X_emb", baselines=["hvg"],
                   layer="counts", seeds=(42,), task_kwargs={"annotation": {"shots": (5,)}, "reconstruction": {
                       "budgets": (20,), "n_genes": 50, "max_epochs": 2}})
    assert list(dict.fromkeys(df["task"])) == ["annotation", "clustering", "reconstruction", "geometry", "integration"]
    integ = df[df.task == "integration"]
    assert set(integ["rep"]) == {"X_emb", "X_hvg"}
    assert {"cross_batch_share", "cross_batch_share_within_label", "label_asw", "batch_asw"} <= set(integ["metric"])
    # batches cut across the types at random: about as mixed as chance
    share = integ[integ.metric == "cross_batch_share_within_label"].set_index("rep")["value"]
    assert (share > 0.7).all()


def test_scvi_missing_is_a_clear_import_error(batched, monkeypatch):
    _no_module(monkeypatch, "scvi")
    keys = list(batched.obsm)
    with pytest.raises(ImportError, match=r'pip install "biomjepa\[scvi\]"'):
        bench.add_baselines(batched, ["pca", "scvi"], batch_key="batch")
    with pytest.raises(ImportError, match="scvi-tools"):
        bench.run(batched, label_key="cell_type", batch_key="batch", use_reps="X_emb", baselines=["hvg", "scvi"])
    assert list(batched.obsm) == keys  # not even the PCA / HVG baselines were written


def test_scvi_refuses_missing_batches(batched):
    batched.obs.loc[batched.obs_names[0], "batch"] = np.nan
    if importlib.util.find_spec("scvi") is None:
        pytest.skip("scvi-tools not installed (the ImportError comes first)")
    with pytest.raises(ValueError, match="missing values"):
        bench.add_baselines(batched, ["scvi"], batch_key="batch")
    assert "X_scvi" not in batched.obsm


def test_scib_missing_or_without_labels(batched, monkeypatch):
    with pytest.raises(ValueError, match="scib=True needs `label_key=`"):
        bench.integration(batched, batch_key="batch", use_reps="X_emb", scib=True)
    _no_module(monkeypatch, "scib_metrics")
    with pytest.raises(ImportError, match=r'pip install "biomjepa\[scib\]"'):
        bench.integration(batched, batch_key="batch", label_key="cell_type", use_reps="X_emb", scib=True)
    keys = list(batched.obsm)
    with pytest.raises(ImportError, match="scib-metrics"):
        bench.run(batched, label_key="cell_type", batch_key="batch", tasks=["integration"], use_reps="X_emb",
                  baselines=["hvg"], task_kwargs={"integration": {"scib": True}})
    assert list(batched.obsm) == keys


def test_no_import_cycle_between_utils_and_baselines():
    src = Path(bench.__file__).parent / "_utils.py"
    imported = {n.module for n in ast.walk(ast.parse(src.read_text())) if isinstance(n, ast.ImportFrom)}
    assert "baselines" not in imported and not any(m and m.endswith(".baselines") for m in imported)


def test_plot_names_the_baselines(batched):
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from biomjepa.pl._bench import bench as plot_bench

    bench.add_baselines(batched, ["pca", "hvg"], layer="counts")
    df = bench.integration(batched, batch_key="batch", use_reps=["X_emb", "X_pca50", "X_hvg"])
    ax = plot_bench(df)  # no labels: falls back to cross_batch_share
    assert ax.get_ylabel() == "cross_batch_share" and ax.get_title() == "integration"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["X_emb", "PCA-50", "HVG (log-norm.)"]
    plt.close("all")


@pytest.mark.slow
def test_scvi_baseline(batched):
    pytest.importorskip("scvi")
    import torch

    np.random.seed(7)
    torch.manual_seed(7)
    state = np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    keys = bench.add_baselines(batched, ["scvi"], layer="counts", batch_key="batch", scvi_max_epochs=2, scvi_n_latent=4)
    assert keys == ["X_scvi"] and batched.obsm["X_scvi"].shape == (batched.n_obs, 4)
    assert np.isfinite(batched.obsm["X_scvi"]).all()
    assert np.array_equal(np.random.get_state()[1], state[0]) and torch.equal(torch.get_rng_state(), state[1])
    first = batched.obsm["X_scvi"].copy()
    bench.add_baselines(batched, ["scvi"], layer="counts", batch_key="batch", scvi_max_epochs=2, scvi_n_latent=4,
                        overwrite=True)
    np.testing.assert_allclose(batched.obsm["X_scvi"], first, atol=1e-5)  # fixed seed
    df = bench.integration(batched, batch_key="batch", label_key="cell_type", use_reps="X_scvi")
    assert df["value"].notna().all()


@pytest.mark.slow
def test_scib_scores(batched):
    pytest.importorskip("scib_metrics")
    bench.add_baselines(batched, ["pca"], layer="counts")
    before = list(batched.obsm)
    df = bench.integration(batched, batch_key="batch", label_key="cell_type", use_reps=["X_emb", "X_pca50"],
                           layer="counts", scib=True)
    assert list(batched.obsm) == before
    scib = df[df.setting == "scib"]
    assert {"scib_bio_conservation", "scib_batch_correction", "scib_total", "scib_kbet_per_label"} <= set(scib.metric)
    v = scib.set_index(["rep", "metric"])["value"]
    for rep in ("X_emb", "X_pca50"):
        assert v[rep, "scib_total"] == pytest.approx(0.6 * v[rep, "scib_bio_conservation"]
                                                     + 0.4 * v[rep, "scib_batch_correction"])
    assert v["X_emb", "scib_bio_conservation"] > 0.5  # separated blobs keep the cell types
    assert isinstance(df, pd.DataFrame) and list(df.columns) == ["task", "rep", "setting", "seed", "metric", "value"]
