"""Bidirectional linear attention (Katharopoulos et al. 2020) with φ(u) = ELU(u) + 1.

For one head with queries, keys and values ``Q, K, V [n, d_h]``::

    y_i = φ(q_i)ᵀ [Σ_j φ(k_j) v_jᵀ] / (φ(q_i)ᵀ [Σ_j φ(k_j)] + eps)

after zeroing padded keys and values. The key–value summary ``[d_h, d_h]`` and the normalizer are
contracted once per head, so cost and memory grow linearly in the number of tokens.

Backends: ``linear_attention`` (pure PyTorch, CPU and CUDA; the reference and default) and
``naive_linear_attention`` (explicit O(n²) evaluation of the same formula, for tests only).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def feature_map(u: torch.Tensor) -> torch.Tensor:
    """φ(u) = ELU(u) + 1 (strictly positive)."""
    return F.elu(u) + 1.0


def linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """Linear attention over ``[B, H, T, d_h]`` tensors; ``mask`` ``[B, T]`` marks real tokens.

    The normalizer is computed in the same matmul as the numerator by appending a column of
    ones to the values (one contraction, one application per head).
    """
    q, k = feature_map(q), feature_map(k)
    ones = torch.ones_like(v[..., :1])
    v1 = torch.cat([v, ones], dim=-1)  # [B, H, T, d_h + 1]
    if mask is not None:
        m = mask[:, None, :, None].to(k.dtype)
        k = k * m
        v1 = v1 * m
    kv = k.transpose(-1, -2) @ v1  # [B, H, d_h, d_h + 1]
    out = q @ kv  # [B, H, T, d_h + 1]
    return out[..., :-1] / (out[..., -1:] + eps)


def naive_linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """Reference O(n²) evaluation of :func:`linear_attention` (tests only)."""
    q, k = feature_map(q), feature_map(k)
    if mask is not None:
        m = mask[:, None, :, None].to(k.dtype)
        k, v = k * m, v * m
    a = q @ k.transpose(-1, -2)  # [B, H, T, T]
    return (a @ v) / (a.sum(-1, keepdim=True) + eps)


class LinearSelfAttention(nn.Module):
    """Multi-head linear self-attention: fused q/k/v projection (with bias) and output projection."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.n_heads, self.eps = n_heads, eps
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` ``[B, T, D]``, ``mask`` ``[B, T]`` → ``[B, T, D]``."""
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = linear_attention(qkv[0], qkv[1], qkv[2], mask, self.eps)  # [B, H, T, d_h]
        y = y.transpose(1, 2).reshape(b, t, d)
        return self.dropout(self.out(y))
