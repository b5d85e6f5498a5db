"""Levers that were measured and not adopted, kept in one place outside the core loss path.

Each is off by default and switched on by one :class:`~biomjepa.train.sections.TeacherSection` key;
the measurements are in ``docs/pretraining_notes.md`` (2026-11-23, commits c07f7d8 to 786c465) and
``benchmarks/results/pretrain_levers.csv``:

* ``teacher.target_scale`` (:func:`unit_rms`): 400 steps of the v0.2 recipe, 512 validation cells:
  F1 0.611 vs 0.620 without it, effective rank 15.5 vs 15.7, depth association 0.25 vs 0.27 → no gain.
* ``teacher.cell_centre_depth`` (:func:`depth_fit`): 1,500 steps on the v0.2 schedule, all 1,072
  validation cells (``benchmarks/results/probe_cell_centre_depth_long.csv``): F1 0.606 / 0.622 / 0.601
  at 500 / 1,000 / 1,500 steps vs 0.602 / 0.601 / 0.598 for v0.2, rank and depth alike → not adopted.
"""

from __future__ import annotations

import torch


def depth_fit(level: torch.Tensor, detected: torch.Tensor) -> torch.Tensor:
    """Least-squares fit of ``level [n, D]`` on ``[1, log detected [n]]`` across the ``n`` cells.

    The part of each cell's level that its depth (detected genes) predicts linearly within the
    batch. With fewer than 3 cells, or cells of one depth, only the batch mean is fitted.
    """
    x = detected.clamp(min=1).log()
    x = x - x.mean()
    mean = level.mean(0, keepdim=True)
    ss = (x * x).sum()
    if level.shape[0] < 3 or float(ss) <= 1e-12:
        return mean.expand_as(level)
    slope = (x[:, None] * (level - mean)).sum(0, keepdim=True) / ss  # [1, D]
    return mean + x[:, None] * slope



def unit_rms(targets: torch.Tensor) -> torch.Tensor:
    """``targets [N, D]`` divided by their root-mean-square entry (``teacher.target_scale``).

    Gene- and cell-centred block targets are small (RMS ≈ 0.02 for ``mini``) next to the variance
    hinge's γ = 1, so the hinge, not the alignment, sets the predictions' scale. Rescaled targets
    have RMS 1: the hinge and the alignment then ask for the same scale. A scalar per batch, no
    gradient; the EMA centre still sees the unscaled statistics.
    """
    rms = targets.detach().pow(2).mean().sqrt().clamp(min=1e-8)
    return targets / rms
