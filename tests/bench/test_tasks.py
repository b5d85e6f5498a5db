"""The AnnData-facing tasks on synthetic data: shape, reproducibility, errors, input untouched."""

from __future__ import annotations

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from _inputs import N_CELLS, assert_unchanged, make_mapped, raises_unchanged

import biomjepa as bj
from biomjepa import bench

REPS = ["X_emb", "X_noise"]


def _snapshot(a):
    return a.X.copy(), a.obs.copy(), {k: v.copy() for k, v in a.obsm.items()}, dict(a.uns), list(a.layers)


def _same(a, snap):
    X, obs, obsm, uns, layers = snap
    assert (a.X != X).nnz == 0
    pd.testing.assert_frame_equal(a.obs, obs)
    assert set(a.obsm) == set(obsm) and all(np.array_equal(a.obsm[k], v) for k, v in obsm.items())
    assert dict(a.uns) == uns and list(a.layers) == layers


def test_annotation_table_and_reproducible(blobs):
    snap = _snapshot(blobs)
    df = bench.annotation(blobs, label_key="cell_type", use_reps=REPS, shots=(1, 5), seeds=(42, 43))
    _same(blobs, snap)
    assert list(df.columns) == ["task", "rep", "setting", "seed", "metric", "value"]
    assert len(df) == 2 * 2 * 2 * 3
    s = bench.summarize(df).set_index(["rep", "setting", "metric"])["mean"]
    assert s["X_emb", "top5", "macro_f1"] > 0.95 > s["X_noise", "top5", "macro_f1"]
    again = bench.annotation(blobs, label_key="cell_type", use_reps=REPS, shots=(1, 5), seeds=(42, 43))
    pd.testing.assert_frame_equal(df, again)


def test_support_split_stratified():
    labels = np.array(["a"] * 10 + ["b"] * 5 + ["c"] * 3)
    sup, held, skipped = bench.support_split(labels, 3, 42)
    assert skipped == ["c"] and len(sup) == 6
    assert (labels[sup] == "a").sum() == 3 and (labels[sup] == "b").sum() == 3
    assert len(np.intersect1d(sup, held)) == 0 and len(held) == 9
    assert np.array_equal(sup, bench.support_split(labels, 3, 42)[0])


def test_too_few_cells_per_class(blobs):
    with pytest.warns(UserWarning, match=r"skipping classes .*\['rare'\]"):
        df = bench.annotation(blobs, label_key="cell_type", use_reps="X_emb", shots=(15,), seeds=(42,))
    assert df["value"].notna().all()
    with pytest.raises(ValueError, match="fewer than two classes"), pytest.warns(UserWarning, match="skipping"):
        bench.annotation(blobs, label_key="cell_type", use_reps="X_emb", shots=(40,), seeds=(42,))


def test_bad_keys(blobs):
    with pytest.raises(KeyError, match=r"baselines=\['pca'\]"):
        bench.annotation(blobs, label_key="cell_type", use_reps=["X_pca"])
    with pytest.raises(KeyError, match="label_key"):
        bench.clustering(blobs, label_key="nope", use_reps=REPS)
    with pytest.raises(ValueError, match="unknown tasks"):
        bench.run(blobs, label_key="cell_type", tasks=["annotation", "bogus"], use_reps=REPS)


def test_clustering(blobs):
    snap = _snapshot(blobs)
    df = bench.clustering(blobs, label_key="cell_type", use_reps=REPS, seeds=(42,))
    _same(blobs, snap)
    v = df.set_index(["rep", "metric"])["value"]
    assert v["X_emb", "accuracy"] == 1.0 and v["X_emb", "nmi"] == pytest.approx(1.0)
    assert v["X_emb", "avgbio"] == pytest.approx((v["X_emb", "nmi"] + v["X_emb", "ari"] + v["X_emb", "asw"]) / 3)
    assert v["X_noise", "ari"] < 0.2


def test_geometry(blobs):
    snap = _snapshot(blobs)
    df = bench.geometry(blobs, use_reps=REPS, layer="counts")
    _same(blobs, snap)
    assert df["seed"].isna().all() and len(df) == 2 * 8
    v = df.set_index(["rep", "metric"])["value"]
    for r in REPS:
        assert v[r, "depth_nnz"] == pytest.approx((v[r, "abs_r_axis_nnz"] + v[r, "abs_r_norm_nnz"]) / 2)
    er = df[df.metric == "effective_rank"].set_index("rep")["value"]
    assert 1 <= er["X_emb"] <= 8 and er["X_noise"] > 4


def test_budget_split_rare_safe():
    labels = np.array(["a"] * 50 + ["b"] * 6 + ["c"] * 2 + ["d"])
    tr, va, te = bench.budget_split(labels, 10, 42)
    assert set(labels[te]) == {"a", "b", "c"}  # single-cell class d is not evaluable
    assert not set(tr) & set(te) and not set(va) & set(te) and not set(tr) & set(va)
    assert (labels[np.r_[tr, va]] == "a").sum() == 10
    _, _, te2 = bench.budget_split(labels, 30, 42)
    assert np.array_equal(te, te2)  # same held-out cells for every budget


def test_reconstruction(blobs):
    snap = _snapshot(blobs)
    kw = dict(label_key="cell_type", use_reps=REPS, budgets=(10, 20), seeds=(42,), layer="counts", n_genes=100, max_epochs=8)
    df = bench.reconstruction(blobs, **kw)
    _same(blobs, snap)
    assert set(df.metric) == {"pearson", "nrmse", "top50", "reactome", "knn15"}
    assert df["value"].notna().all()
    v = df[df.setting == "n20"].set_index(["rep", "metric"])["value"]
    assert v["X_emb", "pearson"] > v["X_noise", "pearson"]
    pd.testing.assert_frame_equal(df, bench.reconstruction(blobs, **kw))


def test_canonical_genes_and_reactome(blobs):
    genes, Y = bench.canonical_genes(blobs, layer="counts", n_genes=50)
    assert len(genes) == 50 and Y.shape == (blobs.n_obs, 50)
    assert np.allclose(Y[:, 0].var(), Y.var(0).max())
    sets = bench.reactome_sets()
    assert len(sets) > 1000 and all(len(g) >= 5 for g in sets.values())


def test_perturbation(screen):
    snap = screen.obsm["X_emb"].copy()
    kw = dict(use_reps="X_emb", shots=(1, 5), seeds=(42,), max_epochs=80, patience=80)
    df = bench.perturbation(screen, **kw)
    assert np.array_equal(screen.obsm["X_emb"], snap)
    assert df.attrs["split"] == {"train": ["A", "A+B", "B", "C", "C+D"], "unseen_single": ["D"], "unseen_combo": ["B+C"]}
    assert {"mse_lfc_all", "pearson_lfc_unseen_single", "pearson_lfc_unseen_combo", "top50_response_all",
            "sign_agreement_all", "mse_expr_unseen_combo"} <= set(df.metric)
    v = df[df.setting == "top5"].set_index("metric")["value"]
    assert v["pearson_lfc_unseen_combo"] > 0.5  # B+C = B + C, both seen as singles
    pd.testing.assert_frame_equal(df, bench.perturbation(screen, **kw))
    with pytest.raises(ValueError, match="no control cells"):
        bench.perturbation(screen, use_reps="X_emb", control="ctrl")


def test_perturbation_split_rules():
    s = bench.perturbation_split(["control", *list("ABCDEFGH"), "A+B", "C+D", "E+F"], split_seed=3)
    assert len(s["unseen_single"]) == 2 and len(s["unseen_combo"]) == 1
    assert not set(s["train"]) & set(s["unseen_single"] + s["unseen_combo"])


def test_baselines_and_run(blobs):
    before = set(blobs.obsm)
    df = bench.run(blobs, label_key="cell_type", tasks=["annotation", "clustering", "geometry"], use_reps=["X_emb"],
                   baselines=["pca"], layer="counts", seeds=(42,), task_kwargs={"annotation": {"shots": (5,)}})
    assert set(blobs.obsm) - before == {"X_pca50"} and blobs.obsm["X_pca50"].shape[0] == blobs.n_obs
    assert set(df.task) == {"annotation", "clustering", "geometry"} and set(df.rep) == {"X_emb", "X_pca50"}
    with pytest.raises(ValueError, match="unknown baselines"):
        bench.add_baselines(blobs, ["tsne"])


# ------------------------------------------------------ dtypes, non-finite representations, input untouched
def test_perturbation_keeps_expression_in_float32(monkeypatch):
    import importlib

    pb = importlib.import_module("biomjepa.bench.perturbation")  # bj.bench.perturbation is the function
    seen = []
    real = pb.fit_mlp
    monkeypatch.setattr(pb, "fit_mlp", lambda X, Y, *a, **k: (seen.append(Y.dtype), real(X, Y, *a, **k))[1])
    rng = np.random.default_rng(0)
    pert = np.array(["ctrl"] * 30 + ["A"] * 10 + ["B"] * 10 + ["C"] * 10 + ["A+B"] * 10)
    a = ad.AnnData(rng.poisson(2.0, size=(len(pert), 20)).astype(np.float64))
    a.obs["perturbation"] = pert
    a.obsm["X_rep"] = rng.normal(size=(len(pert), 4))
    pb.perturbation(a, use_reps=["X_rep"], perturbation_key="perturbation", control="ctrl", shots=[1], seeds=[0],
                    max_epochs=2, baselines=(), hidden=(8,))
    assert seen and all(dt == np.float32 for dt in seen)


def test_bench_refuses_non_finite_and_never_modifies(ckpt):
    a = make_mapped()
    rng = np.random.default_rng(0)
    a.obsm["X_rep"] = rng.normal(size=(N_CELLS, 4))
    before = a.copy()
    bj.bench.clustering(a, label_key="group", use_reps=["X_rep"])
    bj.bench.geometry(a, use_reps=["X_rep"])
    assert_unchanged(a, before)
    a.obsm["X_rep"][0, 0] = np.nan
    raises_unchanged(a, ValueError, r"obsm\['X_rep'\] must be a finite 2-D array", bj.bench.annotation,
                     label_key="group", use_reps=["X_rep"])
