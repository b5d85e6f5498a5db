"""Linear vs. dense softmax attention at 512 … 16k tokens: core alone and whole encoder.

Same q, k, v (12 heads × 64 for ``base``), same batch, same process. Dense attention is
``torch.nn.functional.scaled_dot_product_attention``; the whole-encoder comparison swaps only the
attention core inside otherwise identical blocks. Reports best-of-3 wall time, the speed-up,
the fitted exponent of time in sequence length and, for the encoder, the FLOP-ratio bound
1 + n / (6 d) (FFN and projections cost the same in both). Peak memory is not measured yet.

    python benchmarks/bench_attention.py [--lengths 512 1024 2048 4096] [--d 768 --heads 12]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import write_csv


def timeit(fn, repeats: int = 3) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def core_times(n: int, d: int, heads: int) -> tuple[float, float]:
    import torch
    import torch.nn.functional as F

    from biomjepa.nn import linear_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, d // heads, generator=g) for _ in range(3))
    with torch.inference_mode():
        t_lin = timeit(lambda: linear_attention(q, k, v))
        t_dense = timeit(lambda: F.scaled_dot_product_attention(q, k, v))
    return t_lin, t_dense


class DenseSelfAttention:
    """Patch for LinearSelfAttention.forward using SDPA (same projections)."""

    @staticmethod
    def forward(self, x, mask=None):
        import torch.nn.functional as F

        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.out(y.transpose(1, 2).reshape(b, t, d))


def encoder_times(n: int, cfg) -> tuple[float, float]:
    import torch

    from biomjepa.nn import Encoder
    from biomjepa.nn.attention import LinearSelfAttention

    torch.manual_seed(0)
    enc = Encoder(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, n))
    vals = torch.rand(1, n)
    mask = torch.ones(1, n, dtype=torch.bool)
    with torch.inference_mode():
        t_lin = timeit(lambda: enc(ids, vals, mask), repeats=2)
        orig = LinearSelfAttention.forward
        LinearSelfAttention.forward = DenseSelfAttention.forward
        try:
            t_dense = timeit(lambda: enc(ids, vals, mask), repeats=2)
        finally:
            LinearSelfAttention.forward = orig
    return t_lin, t_dense


def main() -> None:
    from biomjepa.nn import ModelConfig

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    p.add_argument("--config", default="base")
    p.add_argument("--encoder-layers", type=int, default=1, help="layers in the whole-encoder comparison")
    p.add_argument("--max-encoder-len", type=int, default=8192)
    args = p.parse_args()
    cfg = ModelConfig.preset(args.config, n_layers=args.encoder_layers)
    rows = []
    for n in args.lengths:
        t_lin, t_dense = core_times(n, cfg.d_model, cfg.n_heads)
        row = {"tokens": n, "core_linear_ms": 1e3 * t_lin, "core_dense_ms": 1e3 * t_dense, "core_speedup": t_dense / t_lin}
        if n <= args.max_encoder_len:
            e_lin, e_dense = encoder_times(n, cfg)
            bound = 1 + n / (6 * cfg.d_model)
            row |= {"enc_linear_ms": 1e3 * e_lin, "enc_dense_ms": 1e3 * e_dense, "enc_speedup": e_dense / e_lin,
                    "flop_bound": bound, "fraction_of_bound": (e_dense / e_lin) / bound}
        rows.append(row)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    ns = np.array([r["tokens"] for r in rows], dtype=float)
    for key in ("core_linear_ms", "core_dense_ms"):
        slope = np.polyfit(np.log(ns[ns >= 1024]), np.log([r[key] for r in rows if r["tokens"] >= 1024]), 1)[0]
        print(f"fitted time exponent {key}: {slope:.2f}")
    print("wrote", write_csv(rows, "bench_attention.csv"))


if __name__ == "__main__":
    main()
