"""Pretraining step throughput: cells/s, tokens/s and achieved GFLOP/s against a same-run GEMM.

Synthetic cells (``--genes`` observed genes each, drawn from a random graph's component) go
through the real loop (:class:`biomjepa.train.loop.Trainer`: block sampling, teacher forward,
student + predictor forward and backward, AdamW, EMA and centre updates), timed per optimizer step
after one warm-up step. The matmul FLOPs of a step are counted, not estimated: one extra step runs
under :class:`torch.utils.flop_counter.FlopCounterMode` (forward and backward, teacher, student and
predictor), giving FLOPs per processed token (teacher + student tokens), which times the timed
steps' tokens/s is the achieved rate. The reference is a float32 GEMM of shape
``[batch·genes, d] @ [d, d_ff]`` measured in the same process. Prints a table, writes
``results/bench_train_<preset>.csv``.

    python benchmarks/bench_train.py --preset mini --steps 5
    python benchmarks/bench_train.py --preset base --steps 2 --genes 1800 --batch 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "train"))


def _step_tokens(row: dict) -> float:
    """Teacher + student tokens of the step a loop row describes (its rates times its own duration)."""
    return row["tokens_per_s"] / row["cells_per_s"] * row["_cells"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mini", choices=["mini", "base"])
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps (after one warm-up)")
    ap.add_argument("--genes", type=int, default=1500, help="observed genes per synthetic cell")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    ap.add_argument("--out", default=None, help="CSV name under results/ (default bench_train_<preset>.csv)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import _kit
    from _common import gemm_gflops, write_csv
    from torch.utils.flop_counter import FlopCounterMode

    from biomjepa.train import TrainConfig
    from biomjepa.train.distributed import init_distributed
    from biomjepa.train.loop import Trainer

    _kit.UNIVERSE = max(4000, 2 * args.genes)
    tmp = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    from scipy import sparse

    n = args.batch * (args.steps + 2)
    g = np.stack([np.sort(rng.choice(_kit.UNIVERSE, args.genes, replace=False)) for _ in range(n)])
    X = sparse.csr_matrix((np.ones(g.size, np.float32) * 3, g.ravel(), np.arange(0, g.size + 1, args.genes)),
                          shape=(n, _kit.V))
    (tmp / "d").mkdir()
    np.savez(tmp / "d" / "s.npz", data=X.data, indices=X.indices.astype(np.int32), indptr=X.indptr.astype(np.int64),
             totals=np.full(n, 3.0 * args.genes), rows=np.arange(n))
    cfg = TrainConfig.from_dict({
        "preset": args.preset, "corpus": [str(tmp / "d" / "s.npz")], "cache_dir": str(tmp / "c"),
        "graph": _kit.make_graph(tmp), "out_dir": str(tmp / "r"), "batch_size": args.batch, "accumulation": 1,
        "steps": args.steps + 2, "min_block": int(0.1 * _kit.UNIVERSE), "max_block": int(0.4 * _kit.UNIVERSE),
        "min_context": 64, "progress": False, "tensorboard": False, "checkpoint_every": 10**9})
    tr = Trainer(cfg, init_distributed(cfg.device))
    data = tr.batches()

    def step() -> tuple[dict, float]:
        t0 = time.perf_counter()
        row = tr.train_step(data)
        dt = time.perf_counter() - t0
        tr.step += 1
        return row | {"_cells": args.batch * cfg.accumulation}, dt

    step()  # warm-up
    timed = [step() for _ in range(args.steps)]
    with FlopCounterMode(display=False) as counter:
        counted, _ = step()
    flops_per_token = counter.get_total_flops() / _step_tokens(counted)

    dt = float(np.mean([t for _, t in timed]))
    tokens = float(np.mean([_step_tokens(r) for r, _ in timed]))
    mc = cfg.model_config()
    gflops = flops_per_token * tokens / dt / 1e9
    gemm = gemm_gflops(args.batch * args.genes, mc.d_model, mc.d_ff)
    row = {
        "preset": args.preset, "device": str(tr.info.device), "threads": torch.get_num_threads(),
        "batch_size": args.batch, "genes_per_cell": args.genes, "timed_steps": args.steps,
        "step_s": dt, "cells_per_s": args.batch / dt, "tokens_per_s": tokens / dt,
        "flops_per_token": flops_per_token, "gflops": gflops, "gemm_gflops": gemm, "fraction_of_gemm": gflops / gemm,
        "loss_first": timed[0][0]["loss"], "loss_last": timed[-1][0]["loss"],
    }
    path = write_csv([row], args.out or f"bench_train_{args.preset}.csv")
    print(f"preset={args.preset} device={row['device']} threads={row['threads']} batch={args.batch} "
          f"genes/cell={args.genes}")
    print(f"step {dt:.3f} s | {row['cells_per_s']:.2f} cells/s | {row['tokens_per_s']:.0f} tokens/s | "
          f"{flops_per_token / 1e6:.1f} MFLOP/token (counted) | {gflops:.1f} GFLOP/s | same-run GEMM "
          f"{gemm:.1f} GFLOP/s | ratio {row['fraction_of_gemm']:.2f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
