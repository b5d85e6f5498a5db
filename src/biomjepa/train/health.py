"""Does the run learn? Per-step target diagnostics and the warnings :func:`~biomjepa.train.pretrain` gives.

:func:`target_diagnostics` measures, on the valid units of a micro-batch, the targets against the
predictions the student made *before* its optimiser step on that batch (so they are held out):

* ``tgt_rms_rel``: RMS of the (unscaled) targets relative to the RMS of the teacher's token states;
* ``tgt_energy``: mean squared distance of a target from the batch's mean target (cell-to-cell and
  block-to-block variation; a teacher that forgets the cells drives it down);
* ``r2``: the predictor's R² on the targets, ``1 − Σ‖t̂ − t‖² / Σ‖t − t̄‖²``;
* ``procrustes_cos``: the paper's Fig. 2a similarity: predictions rotated onto targets by the
  orthogonal-Procrustes solution fitted on the first half of the batch's cells, mean cosine on the other half;
* ``pred_sd``, ``tgt_sd``: root of the mean per-dimension variance of predictions / targets over units;
* ``tgt_rank``: effective rank of the targets (``effective_rank`` of the log is the predictions').

:class:`LearningHealth` reads these per-step rows and warns (once per kind, naming the numbers) when after
warm-up the predictor's R² stays ≤ 0, the predictions collapse, or the targets' energy or rank keeps falling.
"""

from __future__ import annotations

import logging
import warnings
from collections import deque

import numpy as np
import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)
DIAG_FIELDS = ["tgt_rms_rel", "tgt_energy", "r2", "procrustes_cos", "pred_sd", "tgt_sd", "tgt_rank"]


class TrainingHealthWarning(UserWarning):
    """A pretraining run shows a sign that it does not learn (see :class:`LearningHealth`)."""


def effective_rank(z: torch.Tensor) -> float:
    """``exp(H(λ/Σλ))`` of the covariance eigenvalues ``λ`` of ``z [N, D]`` (NaN when ``N < 2``)."""
    z = z.detach().float()
    if z.shape[0] < 2:
        return float("nan")
    zc = z - z.mean(0)
    ev = torch.linalg.eigvalsh(zc.T @ zc / (z.shape[0] - 1)).clamp(min=0)
    p = ev / ev.sum().clamp(min=1e-12)
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def procrustes_cosine(pred: torch.Tensor, target: torch.Tensor, fit: torch.Tensor) -> float:
    """Mean cosine of ``pred @ R`` with ``target`` on the rows not in ``fit``; ``R`` the orthogonal map
    minimising ``‖pred[fit] R − target[fit]‖`` (SVD of ``pred[fit]ᵀ target[fit]``). NaN without both halves."""
    if int(fit.sum()) < 2 or int((~fit).sum()) < 1:
        return float("nan")
    u, _, vt = torch.linalg.svd(pred[fit].T @ target[fit], full_matrices=False)
    rotated = pred[~fit] @ (u @ vt)
    return float(F.cosine_similarity(rotated, target[~fit], dim=-1).mean())


@torch.no_grad()
def target_diagnostics(pred: torch.Tensor, target: torch.Tensor, raw: torch.Tensor, token_rms: float,
                       cell: torch.Tensor) -> dict[str, float]:
    """The diagnostics above for valid units: ``pred``, ``target`` (what the loss compares) and ``raw``
    (targets before any per-dimension scaling) ``[N, D]``; ``cell [N]`` each unit's cell in the batch.
    Computed in float32 whatever the autocast around it (bf16 has no SVD or eigensolver on CUDA)."""
    with torch.autocast(pred.device.type, enabled=False):
        return _diagnostics(pred.detach().float(), target.detach().float(), raw.detach().float(), token_rms, cell)


def _diagnostics(pred, target, raw, token_rms: float, cell) -> dict[str, float]:
    if pred.shape[0] < 2:
        return {k: float("nan") for k in DIAG_FIELDS}
    tc = target - target.mean(0)
    sst = float(tc.pow(2).sum())
    r2 = 1.0 - float((pred - target).pow(2).sum()) / sst if sst > 0 else float("nan")
    half = cell < (int(cell.max()) + 1) / 2
    return {
        "tgt_rms_rel": float(raw.pow(2).mean().sqrt()) / max(token_rms, 1e-12),
        "tgt_energy": float((raw - raw.mean(0)).pow(2).sum(1).mean()),
        "r2": r2,
        "procrustes_cos": procrustes_cosine(pred, target, half),
        "pred_sd": float(pred.var(0).mean().sqrt()),
        "tgt_sd": float(target.var(0).mean().sqrt()),
        "tgt_rank": effective_rank(raw),
    }


class LearningHealth:
    """Warns when a run shows that it does not learn; call :meth:`observe` with every logged row.

    After ``warmup`` steps, at the end of every window of ``window`` steps it compares window means:
    R² ≤ 0 in the window; ``pred_sd / tgt_sd`` below ``collapse`` (predictions near-constant next to their
    targets); the targets' energy or effective rank lower than in each of the previous ``falls`` windows
    and below ``drop`` × its best window since warm-up. Each kind warns once (:class:`TrainingHealthWarning`,
    also logged); :attr:`warned` lists the kinds.
    """

    def __init__(self, warmup: int, *, window: int = 100, collapse: float = 0.1, drop: float = 0.5,
                 falls: int = 3) -> None:
        self.warmup, self.window, self.collapse, self.drop, self.falls = warmup, max(1, window), collapse, drop, falls
        self.rows: list[dict] = []
        self.history: deque[dict] = deque(maxlen=10_000)
        self.warned: list[str] = []

    def observe(self, row: dict) -> None:
        step = int(row["step"])
        if step < self.warmup:
            return
        self.rows.append(row)
        if len(self.rows) < self.window:
            return
        mean = {k: float(np.nanmean([r.get(k, np.nan) for r in self.rows])) for k in DIAG_FIELDS}
        mean["step"] = step
        self.rows = []
        self.history.append(mean)
        self._check(mean)

    def _check(self, m: dict) -> None:
        if m["r2"] <= 0:
            self._warn("r2", f"the predictor's R² on its targets is {m['r2']:.3f} ≤ 0 over steps "
                       f"{m['step'] - self.window + 1}–{m['step']} (after {self.warmup} warm-up steps): it predicts "
                       "no better than the batch's mean target")
        if m["tgt_sd"] > 0 and m["pred_sd"] / m["tgt_sd"] < self.collapse:
            self._warn("collapse", f"the predictions collapse: their s.d. {m['pred_sd']:.3g} is "
                       f"{m['pred_sd'] / m['tgt_sd']:.3f} of the targets' ({m['tgt_sd']:.3g}) at step {m['step']}")
        for key, name in (("tgt_energy", "energy"), ("tgt_rank", "effective rank")):
            past = [h[key] for h in list(self.history)[:-1]]
            if len(past) < self.falls:
                continue
            falling = all(m[key] < p for p in past[-self.falls:])
            if falling and m[key] < self.drop * max(past):
                self._warn(key, f"the targets' {name} keeps falling: {m[key]:.3g} at step {m['step']}, from "
                           f"{max(past):.3g} (lower than each of the previous {self.falls} windows of "
                           f"{self.window} steps): the teacher is forgetting what differs between cells")

    def _warn(self, kind: str, text: str) -> None:
        if kind in self.warned:
            return
        self.warned.append(kind)
        msg = f"Pretraining may not be learning: {text}. See docs/pretraining_notes.md, 'Does the run learn?'."
        logger.warning(msg)
        warnings.warn(msg, TrainingHealthWarning, stacklevel=3)
