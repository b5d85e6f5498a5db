"""Cell embedding from gene-token states: per-feature max ‖ mean of the 5 largest values."""

from __future__ import annotations

import torch


def max_top5_pool(hidden: torch.Tensor, gene_mask: torch.Tensor, k: int = 5) -> torch.Tensor:
    """Pool ``hidden [B, T, D]`` over gene tokens ``gene_mask [B, T]`` → ``[B, 2D]``.

    The first half is the per-feature maximum, the second the per-feature mean of the ``k``
    largest values. Technical tokens and padding must be ``False`` in ``gene_mask``. A cell with
    fewer than ``k`` genes averages all of its genes; a cell with none gets zeros.
    """
    kk = min(k, hidden.shape[1])
    neg = torch.finfo(hidden.dtype).min
    top = hidden.masked_fill(~gene_mask[..., None], neg).topk(kk, dim=1).values  # [B, kk, D]
    n = gene_mask.sum(1).clamp(max=kk)  # [B]
    valid = (torch.arange(kk, device=hidden.device)[None, :] < n[:, None]).to(hidden.dtype)
    mean = (top * valid[..., None]).sum(1) / n.clamp(min=1)[:, None].to(hidden.dtype)
    first = torch.where(n[:, None] > 0, top[:, 0], torch.zeros_like(top[:, 0]))
    return torch.cat([first, mean], dim=-1)


def max_winners(hidden: torch.Tensor, gene_mask: torch.Tensor) -> torch.Tensor:
    """Position of the gene token supplying the per-feature maximum: ``[B, D]`` long."""
    neg = torch.finfo(hidden.dtype).min
    return hidden.masked_fill(~gene_mask[..., None], neg).argmax(dim=1)
