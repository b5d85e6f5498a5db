"""bf16 against float32 embeddings of the bundled model: what ``bj.settings.precision = "bf16"`` changes.

On the validation cells (the held-out sorted-PBMC cells, ``../shared/data``; skipped without it) and the bundled
demo cells (``bj.datasets.pancreas()``, 1,074 cells), ``tl.embed`` runs in float32 and in bf16 (CPU autocast) at
batch size 64, and in bf16 at batch size 7 (other padded shapes: batch-size invariance within the bf16
tolerance). One row per set and comparison: per-cell cosine (min, 1st percentile, mean), max |difference|
relative to the float32 embedding's largest entry, 10-NN overlap (Euclidean, as ``sc.pp.neighbors`` sees them),
and for the labelled sets the few-shot (k = 5) macro-F1 of each embedding (``protocol.few_shot_f1``) and
their difference. The float32 batch-7 row is the reference for what batch size alone changes in float32.

    python benchmarks/speed/precision_accuracy.py [--sets validation demo] [--out precision_accuracy.csv]

``tests/nn/test_precision_accuracy.py`` holds bf16 on the demo cells to the bounds measured here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np

from benchmarks._common import SHARED, write_csv


def load_set(name: str):
    """``(adata mapped to the vocabulary, label column)`` of ``validation`` or ``demo``; ``None`` if absent."""
    import biomjepa as bj
    from benchmarks.protocol import test_cells, validation_cells

    if name != "demo" and not (SHARED / "scrna" / "pbmc_sorted_2140cells_raw.h5ad").is_file():
        return None
    a = test_cells() if name == "demo" else validation_cells()
    bj.pp.map_vocab(a)
    return a, "cell_type"


def embed(adata, precision: str, batch_size: int, checkpoint: str | None = None) -> tuple[np.ndarray, float]:
    import biomjepa as bj

    before = bj.settings.precision
    bj.settings.precision = precision
    try:
        t0 = time.perf_counter()
        out = bj.tl.embed(adata, checkpoint=checkpoint, device="cpu", batch_size=batch_size, copy=True)
        seconds = time.perf_counter() - t0
    finally:
        bj.settings.precision = before
    assert out.uns["biomjepa"]["params"]["precision"] == precision
    return out.obsm["X_biomjepa"], seconds


def compare(ref: np.ndarray, got: np.ndarray, k: int = 10) -> dict:
    """Per-cell cosine, relative max difference and k-NN overlap of ``got`` against ``ref`` (``[n, d]`` each)."""
    from biomjepa.bench.reconstruction import knn_overlap

    cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    return {"cosine_min": float(cos.min()), "cosine_p01": float(np.percentile(cos, 1)), "cosine_mean": float(cos.mean()),
            "max_abs_rel": float(np.abs(got - ref).max() / np.abs(ref).max()), f"knn{k}_overlap": knn_overlap(ref, got, k)}


def measure(name: str, checkpoint: str | None = None) -> list[dict]:
    from benchmarks.protocol import few_shot_f1

    loaded = load_set(name)
    if loaded is None:
        print(f"{name}: ../shared/data not found, skipped")
        return []
    adata, key = loaded
    labels = adata.obs[key].astype(str).to_numpy()
    Z, secs = {}, {}
    for prec, bs in (("fp32", 64), ("bf16", 64), ("bf16", 7), ("fp32", 7)):
        Z[prec, bs], secs[prec, bs] = embed(adata, prec, bs, checkpoint)
        print(f"{name}: {prec} batch {bs}: {secs[prec, bs]:.1f} s", flush=True)
    f1 = {c: few_shot_f1(Z[c], labels) for c in (("fp32", 64), ("bf16", 64))}
    rows = []
    for got, ref, what in ((("bf16", 64), ("fp32", 64), "bf16 vs fp32 (batch 64)"),
                           (("bf16", 7), ("fp32", 64), "bf16 batch 7 vs fp32 batch 64"),
                           (("bf16", 7), ("bf16", 64), "bf16 batch 7 vs bf16 batch 64 (batch invariance)"),
                           (("fp32", 7), ("fp32", 64), "fp32 batch 7 vs fp32 batch 64 (reference)")):
        row = {"set": name, "n_cells": adata.n_obs, "comparison": what, **compare(Z[ref], Z[got]),
               "seconds_ref": secs[ref], "seconds": secs[got]}
        if what.startswith("bf16 vs fp32"):
            row |= {"f1_fp32": f1["fp32", 64], "f1_bf16": f1["bf16", 64], "f1_diff": f1["bf16", 64] - f1["fp32", 64]}
        rows.append(row)
        print({k: round(v, 5) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    import torch

    import biomjepa as bj
    from biomjepa._device import cpu_bf16_units

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", nargs="+", default=["validation", "demo"], choices=["validation", "demo"])
    p.add_argument("--checkpoint", default=None, help="registry name or directory (default: the bundled model)")
    p.add_argument("--out", default="precision_accuracy.csv", help="CSV name under benchmarks/results/")
    args = p.parse_args(argv)
    bj.settings.progress = False
    rows = [r for name in args.sets for r in measure(name, args.checkpoint)]
    for r in rows:
        r |= {"torch": torch.__version__, "bf16_units": " ".join(cpu_bf16_units()) or "none"}
    print(f"wrote {write_csv(rows, args.out)}")


if __name__ == "__main__":
    main()
