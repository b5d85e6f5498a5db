"""Linear vs. dense softmax attention at 512 … 16k tokens: time and peak memory, core and encoder.

Same q, k, v (12 heads × 64 for ``base``), same batch, same run. Dense attention is
``torch.nn.functional.scaled_dot_product_attention`` (on CPU, PyTorch picks its fused flash-style
kernel, whose memory is O(n); ``--dense-backend math`` forces the O(n²) reference instead); the
whole-encoder comparison swaps only the attention core inside otherwise identical blocks
(``--encoder-layers`` of them, default 1, so dense stays feasible at 16k).

Each (length, core|encoder, linear|dense) measurement runs in a fresh subprocess of this script:
inputs (and the encoder) are built, the RSS high-water mark is reset (``/proc/self/clear_refs``),
the baseline ``VmRSS`` is read, one forward pass runs, and ``VmHWM`` − baseline is its peak memory
(MiB; first call in the process, so it includes any one-time workspace). The same process then
times best-of-``--repeats`` further calls (the first call is the warm-up). Reports the speed-ups,
the encoder's FLOP-ratio bound 1 + n / (6 d) (FFN and projections cost the same in both), and the
fitted log–log exponents of time and memory in n over n ≥ ``--fit-from`` (issue 7 asked the linear path's exponents
≤ 1.05, a core speed-up ≥ 4 at 4k and ≥ 15 at 16k tokens and ≥ 0.9 of the bound in the encoder).

Allocator note: glibc serves tensors above its mmap threshold (≤ 32 MiB) with fresh mappings that
are page-faulted (and zeroed by the kernel) on every call, a per-element cost that grows the
apparent exponent at large n (the linear core itself keeps its temporaries small; its output, and
the encoder's FFN activations, are not). ``--malloc-reuse`` runs the measurements with
``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` raised so freed memory is reused, which
separates that effect from the arithmetic's scaling.

    python benchmarks/speed/bench_attention.py [--lengths 512 1024 … 16384] [--config base]
        [--encoder-layers 1] [--max-encoder-len 16384] [--fit-from 2048] [--repeats 3] [--malloc-reuse]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import (
    best_time,
    fit_exponent,
    memory_mib,
    peak_memory_mib,
    reset_peak_memory,
    sync,
    write_csv,
)

MARK = "@@measure "


class DenseSelfAttention:
    """Patch for LinearSelfAttention.forward using SDPA (same projections)."""

    @staticmethod
    def forward(self, x, mask=None):
        import torch.nn.functional as F

        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.out(y.transpose(1, 2).reshape(b, t, d))


def _workload(spec: dict):
    """Build the inputs of one measurement; return the zero-argument forward to measure.

    On CUDA (``spec["device"]``) the core runs on bf16 q, k, v and the encoder under bf16 autocast,
    as ``tl.embed`` runs there; on the CPU everything is float32.
    """
    import torch
    import torch.nn.functional as F

    from biomjepa._device import autocast
    from biomjepa.nn import Encoder, ModelConfig, linear_attention
    from biomjepa.nn.attention import LinearSelfAttention

    dev = torch.device(spec.get("device", "cpu"))
    cfg = ModelConfig.preset(spec["config"], n_layers=spec["layers"])
    n, dense = spec["n"], spec["kind"] == "dense"
    if spec["scope"] == "core":
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, cfg.n_heads, n, cfg.d_model // cfg.n_heads, generator=g).to(dev, dtype) for _ in range(3))
        if dense:
            return lambda: F.scaled_dot_product_attention(q, k, v)
        return lambda: linear_attention(q, k, v)
    torch.manual_seed(0)
    enc = Encoder(cfg).eval().to(dev)
    ids = torch.randint(0, cfg.vocab_size, (1, n), device=dev)
    vals = torch.rand(1, n, device=dev)
    mask = torch.ones(1, n, dtype=torch.bool, device=dev)
    if dense:  # this process measures only dense: no need to restore
        LinearSelfAttention.forward = DenseSelfAttention.forward

    def forward():
        with autocast(dev, "bf16" if dev.type == "cuda" else "fp32"):
            return enc(ids, vals, mask)

    return forward


def longest_cell(spec: dict) -> dict:
    """Child side: the whole encoder (``spec["config"]``, all its layers) on one cell of n, 2n, 4n … tokens.

    Doubles from ``spec["n"]`` up to ``spec["max_n"]`` and stops at the first length that runs out
    of memory (CUDA) or takes longer than ``spec["max_s"]`` seconds. Returns every length tried
    with its time and peak memory (CUDA: allocated in all; CPU: above the RSS before the call) and the
    longest that ran (``longest``).
    """
    import time

    import torch

    from biomjepa._device import autocast
    from biomjepa.nn import Encoder, ModelConfig

    dev = torch.device(spec.get("device", "cpu"))
    torch.manual_seed(0)
    enc = Encoder(ModelConfig.preset(spec["config"])).eval().to(dev)
    rows, n, longest = [], spec["n"], 0
    while n <= spec["max_n"]:
        try:
            with torch.inference_mode(), autocast(dev, "bf16" if dev.type == "cuda" else "fp32"):
                ids = torch.randint(0, enc.config.vocab_size, (1, n), device=dev)
                vals, mask = torch.rand(1, n, device=dev), torch.ones(1, n, dtype=torch.bool, device=dev)
                gc.collect()
                reset_peak_memory(dev)
                base = 0.0 if dev.type == "cuda" else memory_mib(dev)
                t0 = time.perf_counter()
                enc(ids, vals, mask)
                sync(dev)
                seconds = time.perf_counter() - t0
            peak = peak_memory_mib(dev) - base
        except torch.OutOfMemoryError:
            rows.append({"tokens": n, "seconds": float("nan"), "peak_mib": float("nan"), "fits": False})
            break
        finally:
            ids = vals = mask = None
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        rows.append({"tokens": n, "seconds": seconds, "peak_mib": peak, "fits": True})
        longest = n
        if seconds > spec["max_s"]:
            break
        n *= 2
    return {"rows": rows, "longest": longest, "threads": torch.get_num_threads()}


def measure(spec: dict) -> dict:
    """Child side: peak memory of the first forward above the built inputs (CUDA: ``max_memory_allocated``; CPU:
    ``VmHWM`` − ``VmRSS``), then its best-of-``repeats`` time (synchronized)."""
    import contextlib

    import torch

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    if spec["scope"] == "longest":
        return longest_cell(spec)
    ctx = contextlib.nullcontext()
    if spec["kind"] == "dense" and spec["dense_backend"] == "math":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        ctx = sdpa_kernel(SDPBackend.MATH)
    fn, dev = _workload(spec), torch.device(spec.get("device", "cpu"))

    def call():
        fn()
        sync(dev)

    with torch.inference_mode(), ctx:
        gc.collect()
        exact = reset_peak_memory(dev)
        base = memory_mib(dev)
        call()
        peak = peak_memory_mib(dev) - base
        seconds = best_time(call, spec["repeats"])
    return {"seconds": seconds, "peak_mib": peak, "hwm_reset": exact, "baseline_mib": base,
            "threads": torch.get_num_threads()}


MALLOC_REUSE = {"MALLOC_MMAP_THRESHOLD_": str(4 << 30), "MALLOC_TRIM_THRESHOLD_": str(64 << 30)}


def run_child(spec: dict) -> dict:
    """Run one measurement in a fresh interpreter (this script with the hidden ``--_measure``)."""
    env = os.environ | (MALLOC_REUSE if spec["malloc_reuse"] else {})
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--_measure", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"measurement {spec} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(MARK) :])


def compare_rows(args, d_model: int) -> tuple[list[dict], bool]:
    """Linear against dense per length, core and (up to ``--max-encoder-len``) encoder, each measured in a child."""
    base = {"config": args.config, "layers": args.encoder_layers, "repeats": args.repeats, "threads": args.threads,
            "dense_backend": args.dense_backend, "malloc_reuse": args.malloc_reuse, "device": args.device}
    rows, exact = [], True
    for n in args.lengths:
        row = {"tokens": n}
        for scope in ["core"] + (["enc"] if n <= args.max_encoder_len else []):
            for kind in ("linear", "dense"):
                r = run_child(base | {"n": n, "scope": "core" if scope == "core" else "encoder", "kind": kind})
                exact &= r["hwm_reset"]
                row |= {f"{scope}_{kind}_ms": 1e3 * r["seconds"], f"{scope}_{kind}_mib": r["peak_mib"],
                        "threads": r["threads"]}
                print(f"  n={n:6d} {scope:>4} {kind:>6}: {1e3 * r['seconds']:10.1f} ms  peak +{r['peak_mib']:8.1f} MiB",
                      flush=True)
            row[f"{scope}_speedup"] = row[f"{scope}_dense_ms"] / row[f"{scope}_linear_ms"]
            row[f"{scope}_mem_ratio"] = row[f"{scope}_dense_mib"] / max(row[f"{scope}_linear_mib"], 1e-9)
        row |= {k: base[k] for k in ("config", "layers", "dense_backend", "malloc_reuse")}
        if "enc_linear_ms" in row:
            row["flop_bound"] = 1 + n / (6 * d_model)
            row["fraction_of_bound"] = row["enc_speedup"] / row["flop_bound"]
        rows.append(row)
    return rows, exact


def exponent_rows(df, fit_from: int) -> list[dict]:
    """Log–log slopes in n of time and memory, per scope and kind, over n ≥ ``fit_from``."""
    rows = []
    for scope in ("core", "enc"):
        for kind in ("linear", "dense"):
            for what, unit in (("time", "ms"), ("memory", "mib")):
                col = f"{scope}_{kind}_{unit}"
                if col in df:
                    ok = df[col].notna()
                    rows.append({"scope": scope, "kind": kind, "quantity": what, "fit_from": fit_from,
                                 "points": int((df.tokens[ok] >= fit_from).sum()),
                                 "exponent": fit_exponent(df.tokens[ok], df[col][ok], fit_from)})
    return rows


COLS = ["tokens", "core_linear_ms", "core_dense_ms", "core_speedup", "core_linear_mib", "core_dense_mib", "enc_linear_ms",
        "enc_dense_ms", "enc_speedup", "flop_bound", "fraction_of_bound", "enc_linear_mib", "enc_dense_mib"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    p.add_argument("--config", default="base")
    p.add_argument("--encoder-layers", type=int, default=1, help="layers in the whole-encoder comparison")
    p.add_argument("--max-encoder-len", type=int, default=16384, help="longest n for the whole encoder")
    p.add_argument("--fit-from", type=int, default=2048, help="fit exponents over n >= this")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per measurement (best is kept)")
    p.add_argument("--threads", type=int, default=0, help="torch threads in each measurement (0: default)")
    p.add_argument("--dense-backend", choices=["auto", "math"], default="auto",
                   help="SDPA backend for dense: PyTorch's choice, or the O(n²)-memory math reference")
    p.add_argument("--malloc-reuse", action="store_true",
                   help="measure with glibc's mmap/trim thresholds raised (freed memory reused, no per-call page faults)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (CUDA: bf16, peak = max_memory_allocated)")
    p.add_argument("--out", default="bench_attention.csv")
    p.add_argument("--_measure", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._measure:
        print(MARK + json.dumps(measure(json.loads(args._measure))), flush=True)
        return

    import pandas as pd

    from biomjepa.nn import ModelConfig

    cfg = ModelConfig.preset(args.config, n_layers=args.encoder_layers)
    rows, exact = compare_rows(args, cfg.d_model)
    df = pd.DataFrame(rows)
    print(f"\n{args.config}: d={cfg.d_model}, {cfg.n_heads} heads × {cfg.d_model // cfg.n_heads}, "
          f"encoder {args.encoder_layers} layer(s), threads={rows[0]['threads']}, dense SDPA backend={args.dense_backend}, "
          f"malloc reuse={args.malloc_reuse}; time = best of repeats, memory = peak RSS above the built inputs/model (MiB)")
    print(df[[c for c in COLS if c in df]].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    ex_rows = exponent_rows(df, args.fit_from)
    ex = pd.DataFrame(ex_rows)
    print(f"\nfitted exponents (log–log slope in n, n ≥ {args.fit_from}):")
    print(ex.pivot_table(index=["scope", "kind"], columns="quantity", values="exponent")
          .to_string(float_format=lambda v: f"{v:.3f}"))
    if not exact:
        print("note: VmHWM could not be reset here; memory peaks are lower bounds from the baseline onward")
    print("wrote", write_csv(rows, args.out), "and", write_csv(ex_rows, args.out.replace(".csv", "_exponents.csv")))


if __name__ == "__main__":
    main()
