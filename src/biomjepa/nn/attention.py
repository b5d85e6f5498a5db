"""Bidirectional linear attention (Katharopoulos et al. 2020) with φ(u) = ELU(u) + 1.

For one head with queries, keys and values ``Q, K, V [n, d_h]``::

    y_i = φ(q_i)ᵀ [Σ_j φ(k_j) v_jᵀ] / (φ(q_i)ᵀ [Σ_j φ(k_j)] + eps)

after zeroing padded keys and values. The key–value summary ``[d_h, d_h]`` and the normalizer are
contracted once per head, so cost and memory grow linearly in the number of tokens.

Backends: ``linear_attention`` (pure PyTorch, CPU and CUDA; the reference and default) and
``naive_linear_attention`` (explicit O(n²) evaluation of the same formula, for tests only). For CPU
inference, :class:`LinearSelfAttention` streams its projections and the core over contiguous token
blocks (:func:`token_blocks`), so no whole-length temporary beyond its output exists.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def feature_map(u: torch.Tensor) -> torch.Tensor:
    """φ(u) = ELU(u) + 1 (strictly positive)."""
    # In place on ELU's fresh output: one tensor less to allocate and fault in. Autograd-safe,
    # ELU's backward reads its input, not its output.
    return F.elu(u).add_(1.0)


#: Elements of one ``[B, H, chunk, d_h]`` temporary of the chunked CPU inference path (4 MiB in
#: float32): cache-sized and below glibc's mmap thresholds, so temporaries are reused from the heap
#: instead of being mapped, page-faulted and unmapped on every call (whole-length temporaries made
#: the cost per token grow with the length: ≈1.7× from 1k to 16k tokens in one process).
CHUNK_ELEMENTS = 1 << 20


def linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """Linear attention over ``[B, H, T, d_h]`` tensors; ``mask`` ``[B, T]`` marks real tokens.

    The normalizer is carried as an extra column of the small ``[d_h, d_h + 1]`` key–value
    summary, so one matmul per head applies numerator and normalizer together. Padded tokens are
    removed by zeroing their φ(k) only: that drops them from Σ φ(k_j) v_jᵀ and from Σ φ(k_j)
    alike, so the values need no mask (for finite values this equals masking both). φ(k) is
    released before φ(q) is formed.

    On CPU without autograd, long inputs go through :func:`_chunked_linear_attention` (the same
    formula over token chunks of :data:`CHUNK_ELEMENTS`; equal up to float summation order).
    """
    b, h, t, dh = q.shape
    step = max(1, CHUNK_ELEMENTS // max(1, b * h * dh))
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if t > step and q.device.type == "cpu" and not needs_grad:
        return _chunked_linear_attention(q, k, v, mask, eps, step)
    k = feature_map(k)
    if mask is not None:
        k = k.mul_(mask[:, None, :, None].to(k.dtype))
    kt = k.transpose(-1, -2)  # [B, H, d_h, T]
    kv = torch.cat([kt @ v, kt.sum(-1, keepdim=True)], dim=-1)  # [B, H, d_h, d_h + 1]
    del k, kt  # free φ(k) (autograd keeps what it saved) before φ(q) and the output exist
    out = feature_map(q) @ kv  # [B, H, T, d_h + 1]
    return out[..., :-1] / (out[..., -1:] + eps)


def _kv_summary(k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Key–value summary ‖ normalizer ``[B, H, d_h, d_h + 1]`` of one token chunk (no autograd).

    ``k``, ``v`` ``[B, H, chunk, d_h]``; ``mask`` ``[B, chunk]`` or ``None``. φ(k) is formed in
    place of a fresh tensor and padded keys are zeroed there.
    """
    kc = feature_map(k)
    if mask is not None:
        kc.mul_(mask[:, None, :, None].to(kc.dtype))
    kct = kc.transpose(-1, -2)
    return torch.cat([kct @ v, kct.sum(-1, keepdim=True)], dim=-1)


def _apply_summary(q: torch.Tensor, kv: torch.Tensor, eps: float, out: torch.Tensor) -> torch.Tensor:
    """``φ(q) @ kv`` with the normalizer division written straight into ``out`` ``[B, H, chunk, d_h]``."""
    o = feature_map(q) @ kv  # [B, H, chunk, d_h + 1]
    return torch.div(o[..., :-1], o[..., -1:].add_(eps), out=out)


def _chunked_linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, eps: float, step: int
) -> torch.Tensor:
    """:func:`linear_attention` without autograd, ``step`` tokens at a time (bounded temporaries).

    Pass 1 accumulates the key–value summary ‖ normalizer ``[B, H, d_h, d_h + 1]`` over key
    chunks; pass 2 applies it to query chunks and divides straight into the preallocated output.
    The output is stored token-major (``[B, T, H, d_h]`` memory, returned as the ``[B, H, T, d_h]``
    view), so merging the heads afterwards (``y.transpose(1, 2).reshape(B, T, H·d_h)``) is free.
    """
    b, h, t, dh = q.shape
    kv = q.new_zeros(b, h, dh, dh + 1, dtype=torch.float32 if q.dtype == torch.bfloat16 else q.dtype)
    for s in range(0, t, step):
        kv += _kv_summary(k[..., s : s + step, :], v[..., s : s + step, :], None if mask is None else mask[:, s : s + step])
    out = q.new_empty(b, t, h, dh).transpose(1, 2)
    for s in range(0, t, step):
        _apply_summary(q[..., s : s + step, :], kv, eps, out[..., s : s + step, :])
    return out


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
        if streams(x, b * d, self.training):
            return self._forward_streamed(x, mask)
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = linear_attention(qkv[0], qkv[1], qkv[2], mask, self.eps)  # [B, H, T, d_h]
        y = y.transpose(1, 2).reshape(b, t, d)
        return self.dropout(self.out(y))

    def _forward_streamed(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """:meth:`forward` for CPU inference, in contiguous token blocks, projections included.

        Pass 1 projects keys and values block by block into each cell's key–value summary; pass 2
        projects queries, applies the summary and writes the output projection straight into the
        ``[B, T, D]`` output. A block (:func:`token_blocks`) is a run of whole cells or a token
        range of one cell, so every slice is contiguous (no gather copies) and no ``[B, T, 3D]``
        projection or other whole-length temporary exists.
        """
        b, t, d = x.shape
        h, dh = self.n_heads, d // self.n_heads
        x = x.contiguous()
        out = x.new_empty(b, t, d)  # the residual stream's dtype (float32 under autocast too)
        kv = x.new_zeros(b, h, dh, dh + 1)  # summed over blocks in float32 under autocast too
        w, bias = self.qkv.weight, self.qkv.bias
        if torch.is_autocast_enabled(x.device.type):  # cast input and weights once, not per block and pass
            low = torch.get_autocast_dtype(x.device.type)
            x, w, bias = x.to(low), w.to(low), bias.to(low)
        blocks = token_blocks(b, t, max(1, CHUNK_ELEMENTS // (2 * d)))
        for cells, toks in blocks:
            kvc = F.linear(x[cells, toks], w[d:], bias[d:])
            kvc = kvc.view(kvc.shape[0], kvc.shape[1], 2, h, dh).permute(2, 0, 3, 1, 4)
            kv[cells] += _kv_summary(kvc[0], kvc[1], None if mask is None else mask[cells, toks])
        for cells, toks in blocks:
            q = F.linear(x[cells, toks], w[:d], bias[:d])
            g, c = q.shape[:2]
            y = q.new_empty(g, c, h, dh)
            _apply_summary(q.view(g, c, h, dh).transpose(1, 2), kv[cells], self.eps, y.transpose(1, 2))
            _project_into(self.out, y.view(-1, d), out[cells, toks].view(-1, d))
        return out


def _project_into(linear: nn.Linear, y: torch.Tensor, out: torch.Tensor) -> None:
    """``out[:] = linear(y)`` for ``y`` ``[N, D]``, written straight into ``out`` when the dtypes agree.

    Under bf16 autocast ``y`` is bf16 while ``out`` (a slice of the float32 residual stream) is not,
    and ``addmm(..., out=...)`` bypasses autocast (it refuses mixed dtypes): there the projection
    runs as autocast's bf16 GEMM and its result is widened into ``out``.
    """
    if y.dtype == out.dtype == linear.weight.dtype:
        torch.addmm(linear.bias, y, linear.weight.t(), out=out)
    else:
        out.copy_(linear(y))


def token_blocks(b: int, t: int, per: int) -> list[tuple[slice, slice]]:
    """``(cells, tokens)`` slices covering a ``[b, t]`` batch in blocks of at most ``per`` tokens.

    Cells that fit go ``per // t`` whole cells at a time; longer cells go one at a time in
    ``per``-token ranges. Either way the block is contiguous in a contiguous ``[b, t, …]`` tensor.
    """
    if t <= per:
        g = max(1, per // t)
        return [(slice(i, min(i + g, b)), slice(0, t)) for i in range(0, b, g)]
    return [(slice(i, i + 1), slice(s, min(s + per, t))) for i in range(b) for s in range(0, t, per)]


def streams(x: torch.Tensor, elements_per_token: int, training: bool) -> bool:
    """Whether a block runs its streamed CPU inference path on ``x`` ``[B, T, …]``.

    Only on CPU, without autograd, outside training mode, and when the batch holds more than
    :data:`CHUNK_ELEMENTS` elements of its largest temporary (``elements_per_token`` per position,
    e.g. ``B·D``), i.e. when whole-length temporaries would exceed one chunk.
    """
    if x.device.type != "cpu" or training or torch.is_grad_enabled():
        return False
    return x.shape[1] > max(1, CHUNK_ELEMENTS // max(1, elements_per_token))
