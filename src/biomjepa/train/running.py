"""Running statistics of the teacher's targets, bias-corrected EMAs updated after each step.

Every statistic is an exponential moving average ``s ← r·s + (1−r)·x`` that starts at zero, with its
*weight* ``w ← r·w + (1−r)`` kept beside it; what training reads is ``s / w`` (Adam's bias correction),
so the first steps see the mean of what was observed, not a fraction of it (the note
``shared/notes/target-diagnostic.md`` measured 71 % of a per-gene centre missing over the first ten steps
of a zero-start EMA). All statistics are float32 and are updated from the step's all-reduced sums, after
the step (no target sees a statistic that its own batch moved).

* ``centre``: the EMA centre of the targets, ``[D]`` (the paper's global centre) or ``[V+2, D]`` (per gene,
  only the rows of genes that were targets in the step move, each with its own weight).
* ``moments`` (``teacher.target_std``): per-dimension mean and mean square of the centred block targets over
  units, so targets are divided by their running per-dimension s.d.: a teacher whose cell-to-cell
  variation shrinks does not make the alignment loss smaller.
* ``depth`` (``teacher.depth_residual``): the least-squares fit of each cell's level (mean of its block
  targets) on the whole cell's ``[1, log detected genes, log library size]``, from running cross-products over
  every step so far, so the depth-predictable part of the level is removed with coefficients estimated on far
  more than one micro-batch.
"""

from __future__ import annotations

import torch

#: the statistics' names, in the order the loop all-reduces them
KINDS = ("centre", "moments", "depth")
N_DEPTH = 3  # 1, log detected genes, log library size


class RunningTargets:
    """The run's running target statistics; :meth:`update` takes a step's summed statistics."""

    def __init__(self, d_model: int, vocab_rows: int | None, *, rate: float, device, std: bool = False,
                 depth: bool = False) -> None:
        shape = (vocab_rows, d_model) if vocab_rows else (d_model,)
        self.rate = rate
        self.centre = torch.zeros(shape, device=device)
        self.centre_w = torch.zeros(shape[:-1], device=device)
        self.moments = torch.zeros(2, d_model, device=device) if std else None
        self.moments_w = torch.zeros((), device=device)
        self.depth = torch.zeros(N_DEPTH, N_DEPTH + d_model, device=device) if depth else None
        self.depth_w = torch.zeros((), device=device)

    # ---------------------------------------------------------------- what the targets read
    def centre_now(self) -> torch.Tensor:
        """The bias-corrected centre (rows never seen stay 0)."""
        w = self.centre_w.clamp(min=1e-12)
        return self.centre / (w if self.centre.ndim == 1 else w[:, None])

    def scale_now(self) -> torch.Tensor | None:
        """Per-dimension s.d. of the targets ``[D]`` (None without ``target_std`` or before the first update)."""
        if self.moments is None or float(self.moments_w) <= 0:
            return None
        m = self.moments / self.moments_w
        return (m[1] - m[0] ** 2).clamp(min=0).sqrt().clamp(min=1e-6)

    def depth_coef(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(slopes [2, D], mean covariates [2])`` of the cell level on log detected genes and log library
        size (None before data)."""
        if self.depth is None or float(self.depth_w) <= 0:
            return None
        return depth_slopes(self.depth / self.depth_w)

    # ---------------------------------------------------------------- updates
    @torch.no_grad()
    def update(self, stats: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Fold one step's ``{kind: (sums, counts)}`` into the EMAs (kinds absent from ``stats`` stay)."""
        r = self.rate
        if "centre" in stats:
            sums, counts = stats["centre"]
            seen = counts > 0
            if self.centre.ndim == 1:
                if bool(seen):
                    self.centre.mul_(r).add_(sums / counts, alpha=1 - r)
                    self.centre_w.mul_(r).add_(1 - r)
            else:
                self.centre[seen] = self.centre[seen] * r + sums[seen] / counts[seen, None] * (1 - r)
                self.centre_w[seen] = self.centre_w[seen] * r + (1 - r)
        for kind in ("moments", "depth"):
            own = getattr(self, kind)
            if own is None or kind not in stats:
                continue
            sums, count = stats[kind]
            if float(count) > 0:
                own.mul_(r).add_(sums / count, alpha=1 - r)
                w = getattr(self, f"{kind}_w")
                w.mul_(r).add_(1 - r)

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        out = {"centre": self.centre.detach().cpu(), "centre_w": self.centre_w.detach().cpu()}
        for kind in ("moments", "depth"):
            if getattr(self, kind) is not None:
                out[kind] = getattr(self, kind).detach().cpu()
                out[f"{kind}_w"] = getattr(self, f"{kind}_w").detach().cpu()
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restore; a state written before the weights existed (``centre`` only) counts as fully warmed up
        (weight 1), so an old run resumes with exactly the centre it had."""
        self.centre.copy_(state["centre"])
        self.centre_w.copy_(state["centre_w"] if "centre_w" in state else torch.ones_like(self.centre_w))
        for kind in ("moments", "depth"):
            if getattr(self, kind) is not None and kind in state:
                getattr(self, kind).copy_(state[kind])
                getattr(self, f"{kind}_w").copy_(state[f"{kind}_w"])


def depth_covariates(n_detected: torch.Tensor, library: torch.Tensor) -> torch.Tensor:
    """``[n, 3]``: ``1``, log detected genes and log library size of the whole cell (before any gene budget)."""
    one = torch.ones_like(n_detected, dtype=torch.float32)
    return torch.stack([one, n_detected.float().clamp(min=1).log(), library.float().clamp(min=1).log()], 1)


def depth_slopes(moments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Least squares of the level on the two depth covariates from the means ``[3, 3 + D]`` of ``x xᵀ`` and
    ``x L`` (``x = [1, log genes, log library]``), in centred coordinates: ``(slopes [2, D], x̄ [2])``.

    Centred, because the covariates' means (≈ 7–9) dwarf their spread: a ridge scaled by the uncentred
    moments shrank the slopes and left a third of the depth in the level (measured on the validation cells).
    """
    xbar, lbar = moments[0, 1:N_DEPTH], moments[0, N_DEPTH:]
    sxx = moments[1:N_DEPTH, 1:N_DEPTH] - torch.outer(xbar, xbar)
    sxl = moments[1:N_DEPTH, N_DEPTH:] - torch.outer(xbar, lbar)
    ridge = 1e-6 * sxx.diagonal().sum().clamp(min=1e-12) * torch.eye(N_DEPTH - 1, device=moments.device)
    return torch.linalg.solve(sxx + ridge, sxl), xbar
