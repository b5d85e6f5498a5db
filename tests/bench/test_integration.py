"""bj.bench.integration: batch mixing and silhouettes on embeddings whose answer is known."""

from __future__ import annotations

import anndata as ad
import numpy as np
import pandas as pd
import pytest

import biomjepa as bj


def _adata(shift_batch: float, seed: int = 0) -> ad.AnnData:
    """Two cell types far apart × two batches, the second batch moved by ``shift_batch``."""
    rng = np.random.default_rng(seed)
    n = 200
    types = np.repeat(["T", "B"], n)
    batch = np.tile(np.repeat(["v2", "v3"], n // 2), 2)
    Z = rng.normal(size=(2 * n, 10)) + (types == "B")[:, None] * 20.0 + (batch == "v3")[:, None] * shift_batch
    a = ad.AnnData(np.zeros((2 * n, 3), np.float32), obs=pd.DataFrame({"batch": batch, "type": types},
                                                                     index=[f"c{i}" for i in range(2 * n)]))
    a.obsm["X_mixed"] = Z
    return a


def _values(df):
    return df.set_index("metric")["value"].to_dict()


def test_mixed_batches_score_near_one_and_separated_batches_near_zero():
    mixed = _values(bj.bench.integration(_adata(0.0), batch_key="batch", label_key="type", use_reps="X_mixed"))
    split = _values(bj.bench.integration(_adata(8.0), batch_key="batch", label_key="type", use_reps="X_mixed"))
    assert 0.85 < mixed["cross_batch_share_within_label"] < 1.15
    assert split["cross_batch_share_within_label"] < 0.05 and split["cross_batch_share"] < 0.05
    assert mixed["label_asw"] > 0.8 and split["label_asw"] > 0.6  # the two types stay apart either way
    assert mixed["batch_asw"] > 0.9 > split["batch_asw"] + 0.3


def test_integration_through_run_and_input_unchanged():
    a = _adata(0.0)
    before = a.copy()
    df = bj.bench.run(a, tasks=["integration"], use_reps="X_mixed", label_key="type",
                      task_kwargs={"integration": {"batch_key": "batch"}})
    assert set(df["metric"]) == {"cross_batch_share", "cross_batch_share_within_label", "label_asw", "batch_asw"}
    assert (df["task"] == "integration").all()
    np.testing.assert_array_equal(a.obsm["X_mixed"], before.obsm["X_mixed"])
    assert list(a.obs.columns) == list(before.obs.columns) and list(a.obsm) == list(before.obsm)


def test_bad_arguments_name_the_argument():
    a = _adata(0.0)
    with pytest.raises(KeyError, match="nope"):
        bj.bench.integration(a, batch_key="nope", use_reps="X_mixed")
    a.obs["one"] = "x"
    with pytest.raises(ValueError, match="single batch"):
        bj.bench.integration(a, batch_key="one", use_reps="X_mixed")
    with pytest.raises(ValueError, match="n_neighbors"):
        bj.bench.integration(a, batch_key="batch", use_reps="X_mixed", n_neighbors=0)


def test_labels_that_cannot_be_scored_are_clear_errors_or_warnings():
    """batch = label, a single label, labels confounded with batches, a rare type in three batches (issue 30):
    one message naming the argument, never NaN in the table nor a raw sklearn error."""
    a = _adata(0.0)
    with pytest.raises(ValueError, match=r"label_key='batch' is the batch_key"):
        bj.bench.integration(a, batch_key="batch", label_key="batch", use_reps="X_mixed")
    a.obs["one"] = "T"
    with pytest.raises(ValueError, match=r"obs\['one'\] \(label_key\) has a single label.*label_key=None"):
        bj.bench.integration(a, batch_key="batch", label_key="one", use_reps="X_mixed")
    a.obs["same"] = a.obs["batch"].map({"v2": "t2", "v3": "t3"})
    with pytest.warns(UserWarning, match=r"left out: no label of obs\['same'\] has cells from two or more batches"):
        df = bj.bench.integration(a, batch_key="batch", label_key="same", use_reps="X_mixed")
    assert set(df["metric"]) == {"cross_batch_share", "label_asw"} and df["value"].notna().all()
    b = _adata(0.0)
    b.obs["batch"] = np.array(["a", "b", "c"])[np.arange(b.n_obs) % 3]
    types = b.obs["type"].to_numpy().copy()
    types[:3] = "rare"  # three cells, one per batch: no batch silhouette for it, and no sklearn error
    b.obs["type"] = types
    df = bj.bench.integration(b, batch_key="batch", label_key="type", use_reps="X_mixed")
    assert df["value"].notna().all() and "batch_asw" in set(df["metric"])
