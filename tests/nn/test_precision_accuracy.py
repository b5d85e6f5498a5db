"""bf16 embeddings of the bundled model held to the bounds measured against float32 (issue 38).

``benchmarks/speed/bench_precision.py accuracy`` measured, on this repository's CPU (Xeon with AMX, torch 2.13):

* validation cells (1,072 held-out sorted PBMC): per-cell cosine min 0.9939 / mean 0.9975, 10-NN overlap 0.891,
  few-shot F1 0.674 against 0.671; bf16 at batch 7 against batch 64: cosine min 0.99997, 10-NN overlap 1.0;
* demo cells (1,074 pancreas, ``bj.datasets.pancreas()``): cosine min 0.9964 / mean 0.9984, 10-NN overlap 0.914,
  few-shot F1 0.778 against 0.783; batch 7 against batch 64: cosine min 0.99997, 10-NN overlap 1.0;
* the first 96 demo cells (batch 16; batch 7): cosine min 0.9974 / mean 0.9984, 10-NN overlap 0.956; 0.99998.

On an AMD EPYC with AVX512-BF16 (no AMX) the batch-7 against batch-16 cosine on the first 96 demo cells measured
0.99983 (issue 45): its bf16 GEMMs round their bf16 outputs after accumulating in a shape-dependent order, so the
batch bound is the lower of the two CPU kinds' figures with a margin (0.9997), not the Xeon's alone.

The tests fail when bf16 drifts beyond those bounds (with a margin for other CPUs, whose kernels accumulate in
another order): a change that rounds more (a bf16 residual stream, bf16 pooling or readout) or that lets the
batch size change a bf16 embedding. The fast test uses the first 96 demo cells (the golden set's cells).
"""

from __future__ import annotations

import numpy as np
import pytest

import biomjepa as bj
from biomjepa._device import cpu_bf16_units

#: cells re-embedded at another batch size (7: batches of 7, 7, 7, 3): bf16 is emulated, slowly, on CPUs without
#: bf16 units, and the invariance is per cell, so a slice of the cells checks it as well as all of them
BATCH_CHECK = 24
#: measured on the first 96 demo cells → the bound held (margin for other CPUs)
FAST = {"cosine_min": 0.995, "cosine_mean": 0.9975, "knn10": 0.90, "batch_cosine_min": 0.9997}
#: measured on all 1,074 demo cells → the bound held
DEMO = {"cosine_min": 0.994, "cosine_mean": 0.9975, "knn10": 0.88, "batch_cosine_min": 0.9997, "f1_drop": 0.02}


def _embed(adata, precision: str, batch_size: int, monkeypatch) -> np.ndarray:
    monkeypatch.setattr(bj.settings, "precision", precision)
    out = bj.tl.embed(adata, device="cpu", batch_size=batch_size, copy=True)
    assert out.uns["biomjepa"]["params"]["precision"] == precision
    return out.obsm["X_biomjepa"]


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _check(adata, bounds: dict, monkeypatch, batch: int, ref=None) -> tuple[np.ndarray, np.ndarray]:
    """``ref``: the float32 embedding at ``batch``, when one was made already (else it is made here)."""
    from biomjepa.bench.reconstruction import knn_overlap

    ref = _embed(adata, "fp32", batch, monkeypatch) if ref is None else ref
    got = _embed(adata, "bf16", batch, monkeypatch)
    other = _embed(adata[:BATCH_CHECK].copy(), "bf16", 7, monkeypatch)  # a cell's value needs no other cells
    cos = _cosine(ref, got)
    assert not np.array_equal(ref, got)  # bf16 really ran
    assert cos.min() >= bounds["cosine_min"], cos.min()
    assert cos.mean() >= bounds["cosine_mean"], cos.mean()
    assert knn_overlap(ref, got, 10) >= bounds["knn10"]
    assert _cosine(got[:BATCH_CHECK], other).min() >= bounds["batch_cosine_min"]  # batch size: rounding only
    return ref, got


def test_bf16_stays_within_its_measured_bound(monkeypatch):
    adata = bj.datasets.pancreas()[:96].copy()
    bj.pp.map_vocab(adata)
    _check(adata, FAST, monkeypatch, 16)


@pytest.mark.slow
@pytest.mark.skipif(not cpu_bf16_units(),
                    reason="bounds measured on CPUs with bf16 units (AMX, AVX512-BF16); without them bf16 is emulated "
                    "(over 7 minutes for these cells on an AVX2 EPYC) and precision='auto' never picks it")
def test_bf16_on_all_demo_cells(demo_embedded, monkeypatch):
    from biomjepa.bench.probe import few_shot_f1

    adata = demo_embedded  # its float32 embedding (CPU, batch 64) is the reference; tl.embed below copies
    params = adata.uns["biomjepa"]["params"]
    assert (params["precision"], params["batch_size"], params["device"]) == ("fp32", 64, "cpu")
    ref, got = _check(adata, DEMO, monkeypatch, 64, ref=adata.obsm["X_biomjepa"])
    labels = adata.obs["cell_type"].astype(str).to_numpy()
    assert few_shot_f1(got, labels) >= few_shot_f1(ref, labels) - DEMO["f1_drop"]
