"""The EMA teacher and the EMA centre of the targets."""

from __future__ import annotations

import copy

import torch
from torch import nn


def make_teacher(student: nn.Module) -> nn.Module:
    """A deep copy of ``student`` with ``requires_grad_(False)``, in eval mode (never backpropagated)."""
    teacher = copy.deepcopy(student)
    teacher.requires_grad_(False)
    return teacher.eval()


@torch.no_grad()
def ema_update(teacher: nn.Module, student: nn.Module, momentum: float) -> None:
    """``ξ ← μ ξ + (1 − μ) θ`` over parameters and floating buffers (same order in both modules)."""
    t_params = [p for p in teacher.parameters()]
    s_params = [p.detach() for p in student.parameters()]
    if len(t_params) != len(s_params):
        raise ValueError("teacher and student have different parameter lists.")
    torch._foreach_mul_(t_params, momentum)
    torch._foreach_add_(t_params, s_params, alpha=1.0 - momentum)
    for tb, sb in zip(teacher.buffers(), student.buffers()):
        if tb.is_floating_point():
            tb.mul_(momentum).add_(sb.detach(), alpha=1.0 - momentum)


@torch.no_grad()
def update_centre(centre: torch.Tensor, batch_mean: torch.Tensor, rate: float) -> torch.Tensor:
    """``c ← rate · c + (1 − rate) · mean(targets)`` (DINO-style), in place; returns ``centre``.

    ``batch_mean`` is the mean of the *uncentred* teacher block states of the step (all-reduced
    across ranks by the loop so every rank keeps the same centre).
    """
    return centre.mul_(rate).add_(batch_mean.to(centre.dtype), alpha=1.0 - rate)


@torch.no_grad()
def update_centre_rows(centre: torch.Tensor, rows: torch.Tensor, means: torch.Tensor, rate: float) -> torch.Tensor:
    """Per-gene centre: ``c_g ← rate · c_g + (1 − rate) · mean_g`` for the genes ``rows`` (bool ``[V]``).

    A gene's first update starts from zero, like the global centre at step 0.
    """
    centre[rows] = centre[rows] * rate + means.to(centre.dtype) * (1.0 - rate)
    return centre
