"""Embedding throughput of ``tl.embed``'s core on real Baron cells, vs. a same-run GEMM.

Prints cells/s, tokens/s and achieved GFLOP/s (analytic encoder FLOPs / wall time) next to the
GFLOP/s of a float32 GEMM of matching shape ([batch tokens, d] @ [d, d_ff]) measured in the same
process, for random-initialised ``mini`` and ``base`` encoders (throughput does not depend on the
weights). Cells: Baron 2016 pancreas (≈1.8k genes/cell) and a 400-gene/cell subsample like the
paper's hPancreas.

A second, model-free table gives the padding waste of the batching on those real lengths (all
Baron cells by default): padding tokens / real tokens (two technical tokens per cell included) for
batches of the same size in the cells' (shuffled) input order vs. length-sorted ones, and
``tl.embed``'s actual batching (length-sorted and also cut at ``bj.settings.max_batch_tokens``
tokens per batch, so long cells come in smaller batches: "+cap"). Packed variable-length execution, which
would have no padding, is not implemented.

On CUDA (``--device cuda``) the model runs as ``tl.embed`` runs it there (bf16 autocast), the GEMM
reference is bf16, every cell set is used for ``base`` too, and each row also gives the fraction of
the best square bf16 GEMM rate measured in the same run ("peak"). Each rate is the fastest of
``--repeats`` passes over the cells (after a warm-up batch), since on a shared machine a single pass
can be slowed by other tenants. On CPU, ``base`` makes one pass over at most 64 cells. Fewer cells
would not be a fair sample: length-sorted batches of a handful of cells carry much more padding
than ``tl.embed``'s batches over a whole dataset do.

``--checkpoints NAME=CHECKPOINT ...`` times ``bj.tl.embed`` itself, end to end on the 1,074 bundled test cells, for each
checkpoint side by side in one process (the best of ``--repeats`` calls after a warm-up call): a bundled model's
cost per cell is every user's cost (issue 69: d = 256 against d = 128); the ratios to the first checkpoint are printed.

    python benchmarks/speed/bench_embed.py [--cells 256] [--batch-size 8] [--configs mini base]
        [--padding-batch-sizes 8 64] [--padding-cells 0 (all)] [--padding-only] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np

from benchmarks._common import (
    SHARED,
    best_time,
    encoder_flops_per_token,
    gemm_gflops,
    keep_per_row,
    machine,
    peak_gemm_gflops,
    write_csv,
)


def load_cells(n_cells: int, genes_per_cell: int | None, seed: int = 0):
    import anndata as ad

    import biomjepa as bj
    from biomjepa.data.stream import gather

    path = SHARED / "scrna" / "baron2016_pancreas_2142cells_raw.h5ad"
    adata = ad.read_h5ad(path) if path.exists() else bj.datasets.pancreas()
    adata = adata[np.random.default_rng(seed).permutation(adata.n_obs)[:n_cells]].copy()
    bj.pp.map_vocab(adata)
    cells = gather(adata, np.arange(adata.n_obs))
    if genes_per_cell is None:
        return cells
    from biomjepa.data.tokenize import TokenizedCells

    keep = keep_per_row(cells.indptr, genes_per_cell, np.random.default_rng(seed))  # values keep the full library
    kept = np.bincount(np.repeat(np.arange(len(cells)), np.diff(cells.indptr))[keep], minlength=len(cells))
    return TokenizedCells(np.r_[0, np.cumsum(kept)], cells.genes[keep], cells.values[keep], cells.library)


def run(
    cfg_name: str, cells, batch_size: int, label: str, device: str = "cpu", peak: float | None = None, repeats: int = 3,
    model=None, precision: str | None = None,
) -> dict:
    """One row: ``model`` (default: a random-initialised ``cfg_name`` preset) embedding ``cells``.

    ``precision`` (default: bf16 on CUDA, float32 on CPU, this benchmark's figures so far) as ``bj.settings.precision``.
    """
    import torch

    from biomjepa._device import dtype_label
    from biomjepa.model import BiomJEPA
    from biomjepa.nn import ModelConfig
    from biomjepa.tl._embed import embed_cells

    if model is None:
        torch.manual_seed(0)
        model = BiomJEPA(ModelConfig.preset(cfg_name)).eval()
    cfg = model.config
    dev = torch.device(device)
    precision = precision or ("bf16" if dev.type == "cuda" else "fp32")
    warm = cells.subset(np.arange(min(batch_size, len(cells))))
    embed_cells(model, warm, batch_size=batch_size, device=dev, precision=precision)  # warm-up (host arrays: synchronized)
    dt = best_time(lambda: embed_cells(model, cells, batch_size=batch_size, device=dev, precision=precision), repeats)
    tokens = int(cells.lengths.sum() + 2 * len(cells))
    gflops = encoder_flops_per_token(cfg) * tokens / dt / 1e9
    mean_len = int(cells.lengths.mean()) + 2
    gemm = gemm_gflops(batch_size * mean_len, cfg.d_model, cfg.d_ff, device=device)
    row = {
        "config": cfg_name, "cells": label, "n_cells": len(cells), "batch_size": batch_size,
        "mean_tokens": mean_len, "cells_per_s": len(cells) / dt, "tokens_per_s": tokens / dt,
        "gflops": gflops, "gemm_gflops": gemm, "fraction_of_gemm": gflops / gemm,
        "threads": torch.get_num_threads(), "device": device,
        "dtype": dtype_label(dev, precision),
    }
    if peak:
        row.update(peak_gflops=peak, fraction_of_peak=gflops / peak)
    return row


def padding_rows(sets: dict, batch_sizes: list[int]) -> list[dict]:
    """Padding waste of length-sorted vs. input-order batches, per cell set and batch size."""
    from biomjepa._settings import settings
    from biomjepa.data.collate import N_TECH, padding_waste, sorted_batches

    rows = []
    for label, cells in sets.items():
        lens = cells.lengths
        real = int((lens + N_TECH).sum())
        for bs in batch_sizes:
            schemes = {
                "unsorted": [np.arange(s, min(s + bs, len(lens))) for s in range(0, len(lens), bs)],
                "length-sorted": sorted_batches(lens, bs),
                "length-sorted+cap": sorted_batches(lens, bs, max_tokens=settings.max_batch_tokens),
            }
            for scheme, batches in schemes.items():
                waste = padding_waste(lens, batches)
                rows.append({
                    "cells": label, "n_cells": len(lens), "mean_tokens": real / len(lens), "batch_size": bs,
                    "batching": scheme, "batches": len(batches), "real_tokens": real,
                    "padding_tokens": round(waste * real), "padding_per_real": waste,
                    "computed_per_real": 1 + waste,
                })
    return rows


def embed_cost(checkpoints: dict[str, str], repeats: int, out: str) -> None:
    """Seconds per 1,000 cells of ``bj.tl.embed`` on the bundled test cells, per checkpoint, and the ratio to the
    first; written to ``results/<out>``."""
    import biomjepa as bj

    adata = bj.datasets.pancreas()
    bj.pp.map_vocab(adata)
    rows = []
    for name, ck in checkpoints.items():
        bj.tl.embed(adata, checkpoint=ck, key_added="X_cost")  # warm-up: loads and verifies the checkpoint
        t = best_time(lambda ck=ck: bj.tl.embed(adata, checkpoint=ck, key_added="X_cost"), repeats)
        rows.append({"checkpoint": name, "n_cells": adata.n_obs, "dim": adata.obsm["X_cost"].shape[1],
                     "s_per_1000_cells": 1000 * t / adata.n_obs, "cells_per_s": adata.n_obs / t})
        rows[-1]["ratio_to_first"] = rows[-1]["s_per_1000_cells"] / rows[0]["s_per_1000_cells"]
        print(f"{name:>10} {rows[-1]['dim']:4d}-d {rows[-1]['cells_per_s']:8.1f} cells/s "
              f"{rows[-1]['s_per_1000_cells']:6.2f} s per 1,000 cells  x{rows[-1]['ratio_to_first']:.2f}")
    print("wrote", write_csv([r | machine("cpu", "cpu_flags", "threads") for r in rows], out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--configs", nargs="+", default=["mini", "base"])
    p.add_argument("--padding-batch-sizes", type=int, nargs="+", default=[8, 64],
                   help="batch sizes of the padding table (64 = tl.embed's default)")
    p.add_argument("--padding-cells", type=int, default=0, help="cells for the padding table (0: all)")
    p.add_argument("--padding-only", action="store_true", help="only the (model-free) padding table")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (CUDA: bf16 autocast, bf16 GEMM reference)")
    p.add_argument("--repeats", type=int, default=3, help="passes over the cells; the fastest is kept")
    p.add_argument("--out", default="bench_embed.csv", help="CSV name under results/")
    p.add_argument("--checkpoints", nargs="+", default=None, metavar="NAME=CHECKPOINT",
                   help="only time bj.tl.embed end to end for these checkpoints (module docstring)")
    args = p.parse_args()
    if args.checkpoints:
        return embed_cost(dict(c.split("=", 1) for c in args.checkpoints), args.repeats, args.out)

    import pandas as pd

    n_pad = args.padding_cells or 10**9
    pad_sets = {"baron_full": load_cells(n_pad, None), "baron_400": load_cells(n_pad, 400)}
    pad = padding_rows(pad_sets, args.padding_batch_sizes)
    print("padding waste: padding tokens / real tokens (2 technical tokens per cell counted as real)")
    print(pd.DataFrame(pad).drop(columns=["real_tokens"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("wrote", write_csv(pad, "bench_embed_padding.csv"))
    if args.padding_only:
        return
    sets = {"baron_full": load_cells(args.cells, None), "baron_400": load_cells(args.cells, 400)}
    peak = None
    if args.device != "cpu":  # on a shared CPU one big GEMM is no steadier a ceiling than the same-shape one
        peak = peak_gemm_gflops(args.device)
        print(f"device {args.device}: best square bf16 GEMM measured now {peak:.1f} GFLOP/s")
    rows = []
    for cfg in args.configs:
        for label, cells in sets.items():
            slow = cfg == "base" and args.device == "cpu"  # ≈ 2 min per pass over 48 full-length cells
            n = min(len(cells), 64) if slow else len(cells)
            reps = 1 if slow else args.repeats
            rows.append(run(cfg, cells.subset(np.arange(n)), args.batch_size, label, args.device, peak, reps))
            r = rows[-1]
            print(
                f"{r['config']:>5} {r['cells']:>10} n={r['n_cells']:4d} tok/cell={r['mean_tokens']:5d} "
                f"{r['cells_per_s']:8.1f} cells/s {r['tokens_per_s']:10.0f} tok/s "
                f"{r['gflops']:7.1f} GFLOP/s  GEMM {r['gemm_gflops']:7.1f}  ratio {r['fraction_of_gemm']:.2f}"
                + (f"  of peak {r['fraction_of_peak']:.2f}" if peak else "")
            )
    print("wrote", write_csv(rows, args.out))


if __name__ == "__main__":
    main()
