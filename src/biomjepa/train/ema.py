"""The EMA teacher (the targets' running statistics, centre included, are in :mod:`~biomjepa.train.running`)."""

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
