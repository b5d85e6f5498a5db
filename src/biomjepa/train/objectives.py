"""Objectives: block-level BioM-JEPA loss and its controls, with loss components in :class:`LossTerms`.

``L = λ2·(1/|B|) Σ ‖t̂ − t‖² + λs·(1/|B|) Σ ‖t̂/‖t̂‖ − t/‖t‖‖² + λv·L_var + λc·L_cov`` (paper,
Supp. "Block aggregation and BioM-JEPA loss") over the valid units ``B`` of the step, with
``L_var = (1/d) Σ_r max(0, γ − sd(T̂_·r))`` (``sd = sqrt(var + 1e-4)`` as in VICReg, unbiased
variance) and ``L_cov = (1/d) Σ_{r≠s} Cov(T̂)_rs²``.

* ``block`` / ``random_block``: units = blocks, target = centred mean teacher state over ``T``.
* ``token``: units = target genes (≤ ``token_cap`` per cell), target = centred teacher state of
  the gene; same loss with per-token alignment (token-IJEPA).
* ``decoder``: units = graph blocks; normalized expression of every target gene is predicted from
  its block state (:meth:`JEPA.decode`); loss = MSE on values. No teacher alignment.

Two contrastive terms between the cells of a micro-batch (our additions, issue 28; InfoNCE on cosine
similarity, temperature ``nce_temperature``, the other cells as negatives):

* ``loss.lambda_nce``: each cell's predicted blocks, summed, must pick out that cell's own summed targets,
  so that targets which stop telling cells apart cost loss (:func:`cell_contrast`);
* ``loss.lambda_view_nce``: the student's mean token state over its context must pick out the teacher's
  mean state over its own view of the same cell, each centred on the batch (:func:`view_contrast`): two
  views of a cell (the teacher's genes and the student's, thinned with ``data.thin_student``) must agree
  on the cell, whatever genes and depth each saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .health import target_diagnostics
from .levers import unit_rms
from .running import RunningTargets
from .sections import LossSection, TeacherSection
from .targets import make_targets

VAR_EPS = 1e-4


@dataclass
class LossTerms:
    """Loss components of one micro-batch; ``total`` carries the gradient, the rest are logged."""

    total: torch.Tensor
    align: torch.Tensor
    cosine: torch.Tensor
    var: torch.Tensor
    cov: torch.Tensor
    extra: dict = field(default_factory=dict)

    def scalars(self) -> dict[str, float]:
        """Every component as a float (``loss``, ``align``, …, plus ``extra``)."""
        out = {"loss": self.total, "align": self.align, "cosine": self.cosine, "var": self.var, "cov": self.cov}
        out.update(self.extra)
        return {k: float(v.detach()) if torch.is_tensor(v) else float(v) for k, v in out.items()}


def alignment(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over units of the squared L2 distance, ``[N, D]`` → scalar."""
    return (pred - target).pow(2).sum(-1).mean()


def cosine_term(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over units of ``‖t̂/‖t̂‖ − t/‖t‖‖²``."""
    return (F.normalize(pred, dim=-1) - F.normalize(target, dim=-1)).pow(2).sum(-1).mean()


def variance_hinge(z: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """``(1/d) Σ_r max(0, γ − sd_r)`` over the ``N`` rows of ``z [N, d]`` (0 when ``N < 2``)."""
    if z.shape[0] < 2:
        return z.sum() * 0.0
    sd = torch.sqrt(z.var(dim=0) + VAR_EPS)
    return F.relu(gamma - sd).mean()


def covariance_penalty(z: torch.Tensor) -> torch.Tensor:
    """``(1/d) Σ_{r≠s} Cov(z)_rs²`` (unbiased covariance; 0 when ``N < 2``)."""
    n, d = z.shape
    if n < 2:
        return z.sum() * 0.0
    zc = z - z.mean(0)
    cov = zc.T @ zc / (n - 1)
    off = cov - torch.diag(torch.diagonal(cov))
    return off.pow(2).sum() / d


def jepa_loss(pred: torch.Tensor, target: torch.Tensor, cfg: LossSection) -> LossTerms:
    """BioM-JEPA loss on valid units: ``pred``, ``target`` ``[N, D]`` (``target`` already centred, no grad)."""
    pred, target = pred.float(), target.float()
    align = alignment(pred, target)
    cos = cosine_term(pred, target)
    var = variance_hinge(pred, cfg.var_gamma)
    cov = covariance_penalty(pred)
    total = cfg.lambda_align * align + cfg.lambda_cos * cos + cfg.lambda_var * var + cfg.lambda_cov * cov
    return LossTerms(total, align.detach(), cos.detach(), var.detach(), cov.detach())


def info_nce(p: torch.Tensor, t: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``i`` of ``p [n, D]`` must pick row ``i`` of ``t [n, D]`` (no gradient) by cosine similarity /
    ``temperature``: ``(cross-entropy, top-1 accuracy)``; both 0 with fewer than 2 rows."""
    if p.shape[0] < 2:
        zero = p.sum() * 0.0
        return zero, zero.detach()
    logits = F.normalize(p, dim=-1) @ F.normalize(t.detach(), dim=-1).T / temperature
    labels = torch.arange(p.shape[0], device=p.device)
    return F.cross_entropy(logits, labels), (logits.argmax(1) == labels).float().mean().detach()


def view_contrast(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """InfoNCE between two views of the same cells: the student's per-cell state ``[n, D]`` must pick out the
    teacher's state of the same cell ``[n, D]``; each side is first centred on the batch's mean (the state
    every cell shares would otherwise make all cosines ≈ 1). Returns ``(loss, top-1 accuracy)``."""
    return info_nce(student - student.mean(0), teacher - teacher.mean(0), temperature)


def cell_contrast(pred: torch.Tensor, target: torch.Tensor, cell: torch.Tensor,
                  temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """InfoNCE between cells: ``pred``, ``target`` ``[N, D]`` valid units, ``cell [N]`` each unit's cell.

    Units are summed per cell (cells without a valid unit drop out); the logits are the cosine similarities
    of every cell's summed prediction with every cell's summed target, divided by ``temperature``, and the
    loss is the cross-entropy of picking the cell's own target (the other cells of the micro-batch are the
    negatives; the target carries no gradient). Returns ``(loss, top-1 accuracy)``; both 0 with < 2 cells.
    """
    n = int(cell.max()) + 1 if cell.numel() else 0
    p = pred.new_zeros(n, pred.shape[-1]).index_add(0, cell, pred)
    t = target.new_zeros(n, target.shape[-1]).index_add(0, cell, target)
    keep = torch.bincount(cell, minlength=n) > 0
    return info_nce(p[keep], t[keep], temperature)


def _state_regularizer(terms: LossTerms, state: torch.Tensor | None, cfg: LossSection) -> None:
    """VICReg terms on the student encoder's per-cell mean token state ``[n, D]`` across the cells of the
    micro-batch: ``λ_sv · L_var(state; γ_s) + λ_sc · L_cov(state)``. The teacher is an EMA of this encoder,
    so this keeps the cell-to-cell variation the targets are made of from shrinking away, and spreads it
    over many directions. Added to ``terms.total`` in place."""
    if state is None:
        return
    state = state.float()
    sv, sc = variance_hinge(state, cfg.state_gamma), covariance_penalty(state)
    terms.total = terms.total + cfg.lambda_state_var * sv + cfg.lambda_state_cov * sc
    terms.extra.update(state_var=sv.detach(), state_cov=sc.detach(), state_sd=state.std(0).mean().detach())


def _embedding_regularizer(terms: LossTerms, emb: torch.Tensor | None, cfg: LossSection) -> None:
    """Optional VICReg terms on the student's pooled cell embedding ``emb [n, 2D]`` (our addition).

    ``λ_ev · L_var(emb) + λ_ec · L_cov(emb)`` on the per-feature standardized-by-nothing pooled
    context embedding: it spreads the embedding that users get over many directions instead of the
    one depth-related axis that max pooling otherwise favours. Added to ``terms.total`` in place.
    """
    if emb is None or not (cfg.lambda_embed_var > 0 or cfg.lambda_embed_cov > 0):
        return
    emb = emb.float()
    ev, ec = variance_hinge(emb, cfg.var_gamma), covariance_penalty(emb)
    terms.total = terms.total + cfg.lambda_embed_var * ev + cfg.lambda_embed_cov * ec
    terms.extra.update(embed_var=ev.detach(), embed_cov=ec.detach())


def compute_objective(
    model, teacher, inputs, running: RunningTargets, loss: LossSection, targets: TeacherSection
) -> tuple[LossTerms, dict]:
    """One micro-batch: teacher targets → student predictions → loss, with the target diagnostics.

    ``model`` is a :class:`JEPA` (possibly DDP-wrapped), ``teacher`` its EMA encoder, ``running`` the
    run's target statistics. Returns the :class:`LossTerms` (the diagnostics of
    :func:`~biomjepa.train.health.target_diagnostics` in ``extra``) and ``aux``: ``stats`` (the step's
    ``{kind: (sums, counts)}`` for :meth:`RunningTargets.update`; ``{}`` for the decoder) and ``pred``
    (valid predictions, detached).
    """
    if loss.objective == "decoder":
        return _decoder_objective(model, inputs, loss)
    valid = inputs.valid.reshape(-1)
    target, stats, diag = make_targets(teacher, inputs, inputs.valid.shape[1], running, targets)
    target = unit_rms(target[valid]) if targets.target_scale else target[valid]
    pred, emb = _student_predictions(model, inputs, loss)
    terms = jepa_loss(pred[valid], target, loss)
    if loss.lambda_state_var > 0 or loss.lambda_state_cov > 0:
        _state_regularizer(terms, emb, loss)
    else:
        _embedding_regularizer(terms, emb, loss)
    if loss.lambda_view_nce > 0:
        vn, vacc = view_contrast(emb.float(), diag["cell_state"].float(), loss.nce_temperature)
        terms.total = terms.total + loss.lambda_view_nce * vn
        terms.extra.update(view_nce=vn.detach(), view_nce_acc=vacc)
    cell = torch.arange(inputs.valid.shape[0], device=valid.device).repeat_interleave(inputs.valid.shape[1])[valid]
    if loss.lambda_nce > 0:
        nce, acc = cell_contrast(pred[valid].float(), target.float(), cell, loss.nce_temperature)
        terms.total = terms.total + loss.lambda_nce * nce
        terms.extra.update(nce=nce.detach(), nce_acc=acc)
    terms.extra.update(target_diagnostics(pred[valid], target, diag["raw"][valid], diag["token_rms"], cell))
    return terms, {"pred": pred[valid].detach(), "stats": stats}


def _student_predictions(model, inputs, loss: LossSection) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The predictor's unit states ``[n·U, D]`` and, when the embedding, state or view terms are on, the
    student's pooled context (``[n, 2D]``) or its per-cell mean token state (``[n, D]``)."""
    state = loss.lambda_state_var > 0 or loss.lambda_state_cov > 0 or loss.lambda_view_nce > 0
    reg = "mean" if state else (loss.lambda_embed_var > 0 or loss.lambda_embed_cov > 0)
    out = model(inputs, with_embedding=reg)
    pred, emb = out if reg else (out, None)
    return pred.reshape(-1, pred.shape[-1]), emb


def _decoder_objective(model, inputs, loss: LossSection) -> tuple[LossTerms, dict]:
    """Decoder control: MSE of the target genes' values predicted from their block state (no teacher)."""
    reg = loss.lambda_embed_var > 0 or loss.lambda_embed_cov > 0
    out = model(inputs, with_embedding=reg)
    pred, emb = out if reg else (out, None)
    core = model.module if hasattr(model, "module") else model  # DDP wraps the JEPA; decode is not a forward
    vhat = core.decode(pred, inputs.tgt_unit, inputs.tgt_gene).float()
    flat_pred = pred.reshape(-1, pred.shape[-1])
    mse = F.mse_loss(vhat, inputs.tgt_value) if vhat.numel() else flat_pred.sum() * 0.0
    zero = mse.detach() * 0.0
    terms = LossTerms(mse, zero, zero, zero, zero, {"recon": mse.detach()})
    _embedding_regularizer(terms, emb, loss)
    return terms, {"pred": flat_pred[inputs.valid.reshape(-1)].detach(), "stats": {}}
