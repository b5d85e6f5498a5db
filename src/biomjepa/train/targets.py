"""Teacher targets: block means of the EMA teacher's token states, centred (paper: global EMA centre).

``centred_targets`` is the target side of a training step; :mod:`~biomjepa.train.objectives` compares
the student's predictions with it. Two measured, not adopted, variants live in :mod:`~biomjepa.train.levers`.
"""

from __future__ import annotations

import torch

from ..nn.encoder import Encoder
from .jepa import teacher_token_states
from .levers import depth_fit


def unit_means(states: torch.Tensor, unit: torch.Tensor, n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of ``states [M, D]`` per unit index ``unit [M]`` → ``([n_rows, D], counts [n_rows])``."""
    sums = torch.zeros(n_rows, states.shape[1], device=states.device).index_add_(0, unit, states)
    counts = torch.bincount(unit, minlength=n_rows).to(states.dtype)
    return sums / counts.clamp(min=1)[:, None], counts


@torch.no_grad()
def teacher_targets(
    teacher: Encoder, inputs, n_units: int, *, norm: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean teacher state over each unit's target genes (uncentred): ``([n·U, D], counts [n·U])``."""
    states = teacher_token_states(teacher, inputs, n_units, norm=norm)
    return unit_means(states, inputs.tgt_unit, inputs.valid.numel())


@torch.no_grad()
def centred_targets(
    teacher: Encoder,
    inputs,
    n_units: int,
    centre: torch.Tensor,
    *,
    norm: bool = False,
    cell: bool = False,
    cell_depth: bool = False,
):
    """Centred block targets ``[n·U, D]`` and the statistics that update the centre.

    ``centre`` ``[D]`` (the paper's global EMA centre): ``t_k = mean_{g∈T_k} h_g − c``; the
    statistics are the uncentred unit means. ``centre`` ``[V, D]`` (per-gene centre): every token
    state is centred by its own gene's EMA state before the block mean, ``t_k = mean_{g∈T_k}(h_g −
    c_g)``, so a target carries what is specific to this cell, not which genes the block holds;
    the statistics are per-gene sums ``[V, D]`` and counts ``[V]`` of the raw states.

    ``cell=True`` (our addition, ``teacher.cell_centre``) then subtracts each cell's mean
    centred target-token state, so a level shared by all of a cell's genes (its depth, read from
    the count-1 values and the library token that the student sees too) is not a target.
    ``cell_depth=True`` (``teacher.cell_centre_depth``, measured, not adopted) subtracts only the part of that cell
    level that the batch's cells' depth predicts: the least-squares fit of the level on
    ``[1, log detected genes]`` across the micro-batch (:func:`depth_fit`), so what differs
    between cells of equal depth stays a target.
    """
    states = teacher_token_states(teacher, inputs, n_units, norm=norm)
    rows = inputs.valid.numel()
    if centre.ndim == 1:
        means, _ = unit_means(states, inputs.tgt_unit, rows)
        return means - centre, means
    gene = inputs.tgt_gene
    centred = states - centre[gene]
    if cell or cell_depth:
        cells = torch.div(inputs.tgt_unit, n_units, rounding_mode="floor")
        level, _ = unit_means(centred, cells, inputs.valid.shape[0])
        if cell_depth:
            level = depth_fit(level, inputs.teacher.mask.sum(1).to(level.dtype))
        centred = centred - level[cells]
    targets, _ = unit_means(centred, inputs.tgt_unit, rows)
    sums = torch.zeros_like(centre).index_add_(0, gene, states)
    counts = torch.bincount(gene, minlength=centre.shape[0]).to(states.dtype)
    return targets, (sums, counts)
