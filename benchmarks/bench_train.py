"""Training throughput of BioM-JEPA pretraining: cells/s, tokens/s and achieved GFLOP/s.

Synthetic cells (``--genes`` observed genes each, drawn from a random graph's component) through
the real loop (:class:`biomjepa.train.loop.Trainer`), timed per optimizer step after one warm-up
step. FLOPs are the matmul count: 6·P·tokens for the student and predictor (forward + backward)
and 2·P·tokens for the teacher (forward only), with P the per-token matmul parameters.

    PYTHONPATH=src python benchmarks/bench_train.py --preset mini --steps 5
    PYTHONPATH=src python benchmarks/bench_train.py --preset base --steps 2 --genes 3463 --batch 2
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


def matmul_params(d: int, d_ff: int, layers: int) -> int:
    return layers * (4 * d * d + 2 * d * d_ff)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="mini", choices=["mini", "base"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--genes", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    import _kit

    from biomjepa.train import TrainConfig
    from biomjepa.train.distributed import init_distributed
    from biomjepa.train.loop import Trainer

    _kit.UNIVERSE = max(4000, 2 * args.genes)
    tmp = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    from scipy import sparse

    n = args.batch * (args.steps + 1)
    g = np.stack([np.sort(rng.choice(_kit.UNIVERSE, args.genes, replace=False)) for _ in range(n)])
    X = sparse.csr_matrix((np.ones(g.size, np.float32) * 3, g.ravel(), np.arange(0, g.size + 1, args.genes)),
                          shape=(n, _kit.V))
    (tmp / "d").mkdir()
    np.savez(tmp / "d" / "s.npz", data=X.data, indices=X.indices.astype(np.int32), indptr=X.indptr.astype(np.int64),
             totals=np.full(n, 3.0 * args.genes), rows=np.arange(n))
    cfg = TrainConfig.from_dict({
        "preset": args.preset, "corpus": [str(tmp / "d" / "s.npz")], "cache_dir": str(tmp / "c"),
        "graph": _kit.make_graph(tmp), "out_dir": str(tmp / "r"), "batch_size": args.batch, "accumulation": 1,
        "steps": args.steps + 1, "min_block": int(0.1 * _kit.UNIVERSE), "max_block": int(0.4 * _kit.UNIVERSE),
        "min_context": 64, "progress": False, "tensorboard": False, "checkpoint_every": 10**9})
    tr = Trainer(cfg, init_distributed(cfg.device))
    data = tr.batches()
    rows, times = [], []
    for _ in range(args.steps + 1):
        t0 = time.perf_counter()
        rows.append(tr.train_step(data))
        times.append(time.perf_counter() - t0)
        tr.step += 1
    mc = cfg.model_config()
    enc = matmul_params(mc.d_model, mc.d_ff, mc.n_layers)
    dt = float(np.mean(times[1:]))
    teacher_tok = args.batch * (args.genes + 2)
    student_tok = np.mean([r["tokens_per_s"] * t for r, t in zip(rows[1:], times[1:])]) - teacher_tok
    flops = 6 * enc * student_tok + 2 * enc * teacher_tok
    print(f"preset={args.preset} device={tr.info.device} threads={torch.get_num_threads()} genes/cell={args.genes}")
    print(f"step {dt:.3f} s | cells/s {args.batch / dt:.2f} | tokens/s {(student_tok + teacher_tok) / dt:.0f} | "
          f"achieved {flops / dt / 1e9:.2f} GFLOP/s (encoder matmuls)")


if __name__ == "__main__":
    main()
