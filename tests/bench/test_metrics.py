"""Metric functions against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from biomjepa import bench

# contingency of y = [0,0,0,1,1,1] vs c = [0,0,1,1,2,2]: [[2, 1, 0], [0, 1, 2]]
Y = [0, 0, 0, 1, 1, 1]
C = [0, 0, 1, 1, 2, 2]


def test_nmi_by_hand():
    # I = (2/3) log 2, H(Y) = log 2, H(C) = log 3
    assert bench.nmi(Y, C) == pytest.approx((4 / 3) * np.log(2) / (np.log(2) + np.log(3)))
    assert bench.nmi(Y, [5, 5, 5, 7, 7, 7]) == pytest.approx(1.0)


def test_ari_by_hand():
    # sum C(n_ab,2) = 2, rows 6, cols 3, C(6,2) = 15 -> (2 - 1.2) / (4.5 - 1.2)
    assert bench.ari(Y, C) == pytest.approx(0.8 / 3.3)
    assert bench.ari(Y, [1, 1, 1, 0, 0, 0]) == pytest.approx(1.0)


def test_hungarian_accuracy_by_hand():
    assert bench.hungarian_accuracy(Y, C) == pytest.approx(4 / 6)
    assert bench.hungarian_accuracy(Y, [1, 1, 1, 0, 0, 0]) == 1.0
    assert bench.hungarian_accuracy(["a", "a", "b", "b"], [0, 0, 0, 0]) == 0.5


@pytest.mark.parametrize("r", [1, 3, 7])
def test_isotropic_spectrum_gives_r(r):
    d = 10
    Z = np.zeros((2 * r, d))
    Z[:r, :r] = np.eye(r)
    Z[r:, :r] = -np.eye(r)
    Z = Z @ np.linalg.qr(np.random.default_rng(r).normal(size=(d, d)))[0]  # rotation-invariant
    assert bench.effective_rank(Z) == pytest.approx(r)
    assert bench.participation_ratio(Z) == pytest.approx(r)


def test_known_spectrum():
    # eigenvalues proportional to (2, 1, 1): p = (1/2, 1/4, 1/4)
    Z = np.vstack([np.diag([np.sqrt(2), 1, 1]), -np.diag([np.sqrt(2), 1, 1])])
    assert bench.effective_rank(Z) == pytest.approx(2**1.5)
    assert bench.participation_ratio(Z) == pytest.approx(16 / 6)
    assert bench.effective_rank(np.ones((5, 3))) == 0.0


def test_procrustes_rotated_copy_is_one():
    rng = np.random.default_rng(0)
    P = rng.normal(size=(50, 6))
    Q = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    assert bench.procrustes_similarity(P, P @ Q + 3.0) == pytest.approx(1.0)
    assert bench.procrustes_similarity(P, rng.normal(size=(50, 6))) < 0.6
    with pytest.raises(ValueError, match="same shape"):
        bench.procrustes_similarity(P, P[:, :3])


def test_knn_overlap_and_depth():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(40, 5))
    assert bench.knn_overlap(A, A) == 1.0
    assert bench.knn_overlap(A, 2 * A + 1) == 1.0
    depth = np.exp(rng.normal(size=200))
    Z = np.c_[10 * depth, rng.normal(size=(200, 3))]
    m = bench.depth_association(Z, depth, depth)
    assert m["abs_r_axis_total"] == pytest.approx(1.0, abs=1e-3)
    assert set(m) == {"abs_r_axis_total", "abs_r_axis_nnz", "abs_r_norm_total", "abs_r_norm_nnz", "depth_mean", "depth_nnz"}
    assert m["depth_nnz"] == pytest.approx((m["abs_r_axis_nnz"] + m["abs_r_norm_nnz"]) / 2)
    assert m["depth_mean"] == pytest.approx(np.mean([m[k] for k in ("abs_r_axis_total", "abs_r_axis_nnz", "abs_r_norm_total", "abs_r_norm_nnz")]))
    # depth_nnz only looks at detected genes: an embedding tracking total counts but not nnz scores ~0
    nnz = rng.permutation(depth)
    m = bench.depth_association(Z, depth, nnz)
    assert m["abs_r_axis_total"] > 0.99 and m["depth_nnz"] < 0.3


def test_summarize():
    import pandas as pd

    df = pd.DataFrame({"task": "t", "rep": "r", "setting": "s", "seed": [1, 2, 3], "metric": "m", "value": [1.0, 2.0, 3.0]})
    s = bench.summarize(df)
    assert s[["mean", "sd", "n"]].iloc[0].tolist() == [2.0, 1.0, 3]
    with pytest.raises(ValueError, match="missing columns"):
        bench.summarize(df.drop(columns="seed"))


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, biomjepa.bench; print(sorted(m for m in ('torch','scanpy','matplotlib','pynndescent') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
