"""Shared helpers for the benchmark scripts: analytic FLOP counts and a same-run GEMM baseline."""

from __future__ import annotations

import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results"


def encoder_flops_per_token(cfg) -> float:
    """Forward FLOPs per token (multiply-add = 2) of the encoder, analytically.

    Per layer: q,k,v,o projections 8·d², FFN 4·d·d_ff, linear-attention core 4·d·(d_h + 1)
    (key–value summary and its application, normalizer column included). Plus the value
    embedding 2·b + 2·b² + 2·b·d (b = value bins). LayerNorms, GELU and biases are ignored.
    """
    d, f, b = cfg.d_model, cfg.d_ff, cfg.n_value_bins
    dh = d // cfg.n_heads
    per_layer = 8 * d * d + 4 * d * f + 4 * d * (dh + 1)
    return cfg.n_layers * per_layer + 2 * b + 2 * b * b + 2 * b * d


def gemm_gflops(m: int, k: int, n: int, repeats: int = 5) -> float:
    """Achieved GFLOP/s of a float32 ``[m, k] @ [k, n]`` matmul measured now (best of ``repeats``)."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * m * k * n / best / 1e9


def write_csv(rows: list[dict], name: str) -> Path:
    import pandas as pd

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return path
