"""Cell embedding from gene-token states.

``max_top5`` (the paper; the readout of the bundled ``biomjepa-mini`` v0.5, v0.4 and v0.3): per-feature max ‖ mean of the 5
largest values over gene tokens.

``centred_max_top5`` (our departure, tried for ``biomjepa-mini`` v0.2 on validation cells, see
``docs/pretraining_notes.md``): the same after subtracting each cell's mean gene-token state.
Without a final norm the token states of a cell share one cell-wide component (set largely by how
many genes are detected); max pooling passes it straight into the embedding, where it becomes the
leading axis. Subtracting the cell's mean first keeps what distinguishes the cell's genes from
each other and drops that shared level.

``centred_wmean_max`` (the readout of ``biomjepa-mini`` v0.2 / v0.2.1): expression-weighted mean of the centred
states ‖ their per-feature max.

``centred_wmean_q90`` (the first v0.3 attempt, not shipped): expression-weighted mean of the centred states ‖ their per-feature
90th percentile over the cell's genes. The maximum of ``n`` token states grows with ``n`` (an
extreme-value statistic), so a cell with more detected genes reads out larger; a fixed quantile of
the same states does not grow with ``n``.

``mean_wmean`` (issue 28): each cell's mean gene-token state ‖ the expression-weighted mean of the centred
states. Targets that keep the cell level (the paper's global centre, no cell centring) are block means of
token states, so the cell's mean state is exactly what training shapes; the second half adds what
distinguishes the cell's expressed genes. Both halves are smooth statistics (no per-feature maximum, which
grows with the number of detected genes). Not invariant to a cell-wide shift: the level is kept on purpose.

``max_top5_mean_wmean`` (issue 44; the readout ``bj.tl.adapt`` exported until issue 56 chose ``max_top5``): ``max_top5`` ‖ ``mean_wmean``, ``[B, 4D]``.
Chosen on validation tissues (sorted PBMCs, Darmanis brain), where an adapted encoder read out with both kept
``max_top5``'s Leiden clusters on PBMCs and ``mean_wmean``'s few-shot F1 on them and its clusters on brain
(``benchmarks/results/adapt_curve_validation_v0.4_both.csv``). Per-feature standardization (the checkpoint's
readout statistics) puts both halves on one scale.
"""

from __future__ import annotations

import torch

POOLINGS = ("max_top5", "centred_max_top5", "centred_wmean_max", "centred_wmean_q90", "mean_wmean",
            "max_top5_mean_wmean")


def pooled_width(kind: str) -> int:
    """Size of the readout ``kind``'s cell embedding in units of ``d_model`` (4 for ``max_top5_mean_wmean``, else 2)."""
    if kind not in POOLINGS:
        raise ValueError(f"Unknown pooling {kind!r}; choose one of {POOLINGS}.")
    return 4 if kind == "max_top5_mean_wmean" else 2


def mean_state(hidden: torch.Tensor, gene_mask: torch.Tensor) -> torch.Tensor:
    """Each cell's mean state over its gene tokens (``gene_mask [B, T]``) → ``[B, D]`` (zeros for no genes)."""
    g = gene_mask[..., None].to(hidden.dtype)
    return (hidden * g).sum(1) / g.sum(1).clamp(min=1)


def centre_states(hidden: torch.Tensor, gene_mask: torch.Tensor) -> torch.Tensor:
    """``hidden [B, T, D]`` minus each cell's mean over its gene tokens (``gene_mask [B, T]``); a new tensor."""
    return hidden - mean_state(hidden, gene_mask)[:, None, :]


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


def weighted_mean(hidden: torch.Tensor, gene_mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``Σ_g v_g h_g / Σ_g v_g`` over gene tokens (``values [B, T]`` ≥ 0) → ``[B, D]``."""
    w = (values * gene_mask).to(hidden.dtype)[..., None]
    return (hidden * w).sum(1) / w.sum(1).clamp(min=torch.finfo(hidden.dtype).tiny)


def masked_quantile(hidden: torch.Tensor, gene_mask: torch.Tensor, q: float) -> torch.Tensor:
    """Per-feature ``q``-quantile of ``hidden [B, T, D]`` over each cell's gene tokens → ``[B, D]``.

    The lower order statistic at rank ``floor(q · (n − 1))`` of the ``n`` gene tokens (no
    interpolation); a cell with no genes gets zeros.
    """
    neg = torch.finfo(hidden.dtype).min
    desc = hidden.masked_fill(~gene_mask[..., None], neg).sort(dim=1, descending=True).values  # [B, T, D]
    n = gene_mask.sum(1)  # [B]
    rank = torch.floor((1.0 - q) * (n - 1).clamp(min=0).to(torch.float64) + 1e-9).long()  # from the top
    out = desc.gather(1, rank[:, None, None].expand(-1, 1, desc.shape[-1]))[:, 0]
    return torch.where(n[:, None] > 0, out, torch.zeros_like(out))


def pool(hidden: torch.Tensor, gene_mask: torch.Tensor, values: torch.Tensor, kind: str = "max_top5") -> torch.Tensor:
    """Pool token states into ``[B, w·D]`` cell embeddings with the readout ``kind`` (see :data:`POOLINGS`;
    ``w`` = :func:`pooled_width`)."""
    if kind == "max_top5":
        return max_top5_pool(hidden, gene_mask)
    if kind not in POOLINGS:
        raise ValueError(f"Unknown pooling {kind!r}; choose one of {POOLINGS}.")
    if kind == "max_top5_mean_wmean":
        return torch.cat([max_top5_pool(hidden, gene_mask), pool(hidden, gene_mask, values, "mean_wmean")], -1)
    if kind == "mean_wmean":
        # sums over a padded token axis round differently for other padded lengths (other batches) in float32, and a
        # per-feature standardization amplifies that: summed in float64, a cell reads out the same in any batch
        h = hidden.double()
        out = torch.cat([mean_state(h, gene_mask), weighted_mean(centre_states(h, gene_mask), gene_mask, values)], -1)
        return out.to(hidden.dtype)
    c = centre_states(hidden, gene_mask)
    if kind == "centred_max_top5":
        return max_top5_pool(c, gene_mask)
    if kind == "centred_wmean_q90":
        return torch.cat([weighted_mean(c, gene_mask, values), masked_quantile(c, gene_mask, 0.9)], -1)
    return torch.cat([weighted_mean(c, gene_mask, values), max_top5_pool(c, gene_mask)[:, : c.shape[-1]]], -1)


def winner_states(hidden: torch.Tensor, gene_mask: torch.Tensor, kind: str = "max_top5") -> torch.Tensor:
    """The token states whose per-feature maximum the readout ``kind`` takes (centred for centred readouts)."""
    return hidden if kind in ("max_top5", "max_top5_mean_wmean") else centre_states(hidden, gene_mask)


def max_winners(hidden: torch.Tensor, gene_mask: torch.Tensor) -> torch.Tensor:
    """Position of the gene token supplying the per-feature maximum: ``[B, D]`` long."""
    neg = torch.finfo(hidden.dtype).min
    return hidden.masked_fill(~gene_mask[..., None], neg).argmax(dim=1)
