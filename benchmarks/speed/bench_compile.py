"""Does ``torch.compile`` pay off for embedding? Eager vs. compiled encoder, same inputs, same run.

For each ``--lengths`` value (tokens per cell, batch ``--batch-size``), the encoder runs eagerly
and through ``torch.compile(encoder, dynamic=True)``: the first compiled call (tracing and
code generation for a shape not seen before), the best of ``--repeats`` later calls, and the best
eager call, with the largest absolute difference of the outputs. ``tl.embed`` batches cells by
length, so almost every batch has a new length: what matters is the first-call cost per new
length against the time a compiled call saves. Inductor's on-disk cache starts empty (a fresh
``TORCHINDUCTOR_CACHE_DIR``), as in a user's first session; ``--warm-cache`` keeps the default one.

    python benchmarks/speed/bench_compile.py [--config mini] [--layers 4] [--lengths 1852 1700 1500 1300]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import torch

from benchmarks._common import best_time, write_csv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="mini")
    p.add_argument("--layers", type=int, default=None, help="encoder layers (default: the preset's)")
    p.add_argument("--lengths", type=int, nargs="+", default=[1852, 1700, 1500, 1300])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warm-cache", action="store_true", help="keep inductor's default on-disk cache")
    p.add_argument("--out", default=None, help="CSV name under results/ (default bench_compile_<config>.csv)")
    args = p.parse_args()

    if not args.warm_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bj_inductor_")

    from biomjepa.nn import Encoder, ModelConfig

    cfg = ModelConfig.preset(args.config, **({"n_layers": args.layers} if args.layers else {}))
    torch.manual_seed(0)
    enc = Encoder(cfg).eval()
    compiled = torch.compile(enc, dynamic=True)
    rows = []
    with torch.inference_mode():
        for t in args.lengths:
            b = args.batch_size
            inputs = (torch.randint(0, cfg.vocab_size, (b, t)), torch.rand(b, t), torch.ones(b, t, dtype=torch.bool))
            eager_out = enc(*inputs)
            t0 = time.perf_counter()
            comp_out = compiled(*inputs)
            first = time.perf_counter() - t0
            comp = best_time(lambda: compiled(*inputs), args.repeats)  # noqa: B023
            eager = best_time(lambda: enc(*inputs), args.repeats)  # noqa: B023
            rows.append({
                "config": args.config, "layers": cfg.n_layers, "batch_size": b, "tokens": t,
                "eager_ms": 1e3 * eager, "compiled_ms": 1e3 * comp, "speedup": eager / comp,
                "first_call_s": first, "calls_to_repay_first": first / max(eager - comp, 1e-9),
                "max_abs_diff": float((comp_out - eager_out).abs().max()), "threads": torch.get_num_threads(),
            })
            r = rows[-1]
            print(f"{args.config} × {cfg.n_layers} layers, {b} × {t} tokens: eager {r['eager_ms']:.0f} ms, compiled "
                  f"{r['compiled_ms']:.0f} ms ({r['speedup']:.2f}×), first call {first:.1f} s "
                  f"(repaid after {r['calls_to_repay_first']:.0f} calls), max |diff| {r['max_abs_diff']:.1e}",
                  flush=True)
    path = write_csv(rows, args.out or f"bench_compile_{args.config}.csv")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
