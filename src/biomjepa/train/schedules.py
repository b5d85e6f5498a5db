"""Learning-rate and EMA-momentum schedules: pure functions of the step (nothing replayed on resume)."""

from __future__ import annotations

import math


def lr_at(step: int, *, lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up from 0 to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``total_steps``.

    ``step`` counts optimizer steps from 0; the value is the rate used *for* that step.
    """
    if warmup_steps > 0 and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    t = min(1.0, max(0.0, (step - warmup_steps) / span))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * t))


def momentum_at(step: int, *, start: float, end: float, total_steps: int, kind: str = "cosine") -> float:
    """EMA momentum rising from ``start`` (step 0) to ``end`` (step ``total_steps``).

    ``kind="cosine"`` (default, as BYOL/DINO): ``end − (end − start)·(1 + cos(π t))/2``;
    ``"linear"`` (as I-JEPA): ``start + (end − start)·t``, with ``t = step / total_steps`` clipped to [0, 1].
    """
    t = min(1.0, max(0.0, step / max(1, total_steps)))
    if kind == "linear":
        return start + (end - start) * t
    if kind != "cosine":
        raise ValueError(f"momentum schedule must be 'cosine' or 'linear', got {kind!r}.")
    return end - (end - start) * 0.5 * (1.0 + math.cos(math.pi * t))
