"""Teacher targets: block means of the EMA teacher's token states, centred (paper: global EMA centre).

:func:`make_targets` is the target side of a training step (:mod:`~biomjepa.train.objectives` compares the
student's predictions with it): :func:`centred_targets` with the run's bias-corrected centre
(:class:`~biomjepa.train.running.RunningTargets`), then optionally the depth-predictable part of each cell's
level removed (``teacher.depth_residual``) and each dimension divided by its running s.d.
(``teacher.target_std``). Two measured, not adopted, variants live in :mod:`~biomjepa.train.levers`.
"""

from __future__ import annotations

import torch

from ..nn.encoder import Encoder
from .jepa import teacher_token_states
from .levers import depth_fit
from .running import RunningTargets, depth_slopes


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
    states: torch.Tensor | None = None,
):
    """Centred block targets ``[n·U, D]`` and the statistics that update the centre.

    ``centre`` ``[D]`` (the paper's global EMA centre): ``t_k = mean_{g∈T_k} h_g − c``; the
    statistics are the uncentred unit means. ``centre`` ``[V, D]`` (per-gene centre): every token
    state is centred by its own gene's EMA state before the block mean, ``t_k = mean_{g∈T_k}(h_g −
    c_g)``: a gene's mean state (which genes the block holds) is not a target, the cell's level stays one;
    the statistics are per-gene sums ``[V, D]`` and counts ``[V]`` of the raw states.

    ``cell=True`` (``teacher.cell_centre``, the v0.2/v0.3 recipe, no longer the default) then subtracts each
    cell's mean centred target-token state over the same ``K`` blocks. That level is 97–99.9 % of the targets'
    cell-to-cell variance and carries the cell's identity; what is left is about 1/1000 of the token scale,
    smaller than the EMA centre's error (``shared/notes/target-diagnostic.md``).
    ``cell_depth=True`` (``teacher.cell_centre_depth``, measured, not adopted) subtracts only the part of that cell
    level that the batch's cells' depth predicts: the least-squares fit of the level on
    ``[1, log detected genes]`` across the micro-batch (:func:`depth_fit`), so what differs
    between cells of equal depth stays a target.
    """
    if states is None:  # else the caller's teacher_token_states(teacher, inputs, n_units, norm=norm)
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


@torch.no_grad()
def make_targets(teacher: Encoder, inputs, n_units: int, running: RunningTargets, cfg) -> tuple[torch.Tensor, dict, dict]:
    """The step's block targets ``[n·U, D]`` (float32), its statistics for ``running`` and diagnostics.

    ``cfg`` is the :class:`~biomjepa.train.sections.TeacherSection`. Returns ``(targets, stats, diag)``:
    ``stats`` maps each kind of :data:`~biomjepa.train.running.KINDS` the run keeps to ``(sums, counts)``
    (summed over micro-batches and ranks by the loop, then :meth:`RunningTargets.update`); ``diag`` holds
    ``token_rms`` (RMS of the teacher's token states), ``raw`` (the targets before the per-dimension
    scaling, to measure their energy) and ``cell_state`` (each cell's mean teacher state over its view, ``[n, D]``).
    """
    valid = inputs.valid.reshape(-1)
    states, cell_state = teacher_token_states(teacher, inputs, n_units, norm=cfg.target_norm, with_cell=True)
    targets, cstats = centred_targets(teacher, inputs, n_units, _centre(running, states, inputs), cell=cfg.cell_centre,
                                      cell_depth=cfg.cell_centre_depth, states=states)
    if running.centre.ndim == 1:  # global centre: the statistics are the uncentred unit means
        cstats = (cstats[valid].sum(0), valid.sum().to(cstats.dtype))
    stats = {"centre": cstats}
    if cfg.depth_residual:
        targets, stats["depth"] = _depth_residual(targets, inputs, n_units, running)
    raw = targets
    if cfg.target_std:
        t = targets[valid]
        stats["moments"] = (torch.stack([t.sum(0), t.pow(2).sum(0)]), torch.tensor(float(t.shape[0]), device=t.device))
        scale = running.scale_now()
        if scale is None:  # the first step: its own per-dimension s.d.
            scale = t.std(0, correction=0).clamp(min=1e-6) if t.shape[0] > 1 else torch.ones_like(t[0])
        targets = targets / scale
    token_rms = float(states.pow(2).mean().sqrt()) if states.numel() else 0.0
    return targets, stats, {"raw": raw, "token_rms": token_rms, "cell_state": cell_state}


def _centre(running: RunningTargets, states: torch.Tensor, inputs) -> torch.Tensor:
    """The running centre, with what the run has not seen yet (the first step; a gene's first time as a
    target) taken from this micro-batch itself, so no target is ever uncentred."""
    centre = running.centre_now()
    if centre.ndim == 1:
        if float(running.centre_w) > 0:
            return centre
        valid = inputs.valid.reshape(-1)
        means, _ = unit_means(states, inputs.tgt_unit, valid.numel())
        return means[valid].mean(0) if bool(valid.any()) else centre
    gene = inputs.tgt_gene
    if not bool((running.centre_w[gene] <= 0).any()):
        return centre
    sums = torch.zeros_like(centre).index_add_(0, gene, states)
    counts = torch.bincount(gene, minlength=centre.shape[0])
    new = (running.centre_w <= 0) & (counts > 0)
    centre = centre.clone()
    centre[new] = sums[new] / counts[new, None].to(sums.dtype)
    return centre


def _depth_residual(targets: torch.Tensor, inputs, n_units: int, running: RunningTargets):
    """Remove the depth-predicted part of each cell's level (mean of its valid block targets).

    The level is regressed on the whole cell's ``[1, log detected genes, log library]`` (``inputs.depth``,
    taken before any gene budget) with the running cross-products (this micro-batch's own on the first step);
    only the part that varies with depth is removed, ``(x − x̄)·β``, so the mean level stays.
    """
    n, U = inputs.valid.shape
    valid = inputs.valid.float()
    t = targets.reshape(n, U, -1)
    has = valid.sum(1) > 0
    level = (t * valid[..., None]).sum(1) / valid.sum(1, keepdim=True).clamp(min=1)  # [n, D]
    X = inputs.depth.to(t.device, torch.float32)[has]
    L = level[has]
    sums = X.T @ torch.cat([X, L], 1)  # [3, 3 + D]
    stats = (sums, torch.tensor(float(X.shape[0]), device=t.device))
    fit = running.depth_coef()
    if fit is None:  # the first step: this micro-batch's own fit
        fit = depth_slopes(sums / max(X.shape[0], 1))
    slopes, xbar = fit
    part = (inputs.depth.to(t.device, torch.float32)[:, 1:] - xbar) @ slopes  # [n, D]
    return (t - part[:, None, :]).reshape(n * U, -1), stats
