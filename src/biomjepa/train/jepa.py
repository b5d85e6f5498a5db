"""Student, predictor and DMT pooling of BioM-JEPA (the teacher is an EMA copy, see :mod:`.ema`).

Paper (Supp. "Block aggregation and BioM-JEPA loss"): ``H^s = f_θ(x_C)``; for block ``k`` the
query ``q_k = e(c_k) + m``; the student block state ``s_k = Σ_j a_kj h^s_j`` with
``a = softmax(cos(q_k, h^s_j)/τ)`` over ``C ∩ N^coexp_64(c_k)`` (all context when empty);
``t̂_k = p_φ(s_k)``.

Choices the paper leaves open (documented):

* ``e`` is a gene-position table ``[V, D]`` owned by the predictor, separate from the encoder's
  gene embedding (the query must not move the encoder's input space); ``m`` a learned vector.
* The predictor input is the ``K`` block states of a cell plus their queries, ``s_k + q_k``, as a
  length-``K`` sequence through ``pred_layers`` pre-LN linear-attention blocks
  (:class:`~biomjepa.nn.EncoderBlock`, dropout 0.05), one output per block (blocks of a cell can
  exchange information; invalid blocks are masked). Width = encoder width unless ``pred_width``
  is set (then linear in/out projections).
* The decoder control adds a linear head: ``v̂_g = ⟨W t̂_k + b, e(g)⟩ + b₀`` for target gene ``g``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.config import ModelConfig
from ..nn.encoder import Encoder, EncoderBlock
from ..nn.pooling import max_top5_pool, mean_state


def dmt_pool(query: torch.Tensor, hidden: torch.Tensor, pool_mask: torch.Tensor, tau: float) -> torch.Tensor:
    """Query-conditioned pooling: ``[n, U, D]`` queries over ``[n, T, D]`` states → ``[n, U, D]``.

    ``a_uj = softmax_j(cos(q_u, h_j)/τ)`` restricted to ``pool_mask [n, U, T]``; rows with no
    allowed position return 0.
    """
    cos = F.normalize(query, dim=-1) @ F.normalize(hidden, dim=-1).transpose(1, 2)  # [n, U, T]
    logits = (cos / tau).masked_fill(~pool_mask, -1e9)  # finite: no NaN gradients for empty rows
    attn = torch.softmax(logits, dim=-1) * pool_mask.any(-1, keepdim=True)
    return attn @ hidden


class Predictor(nn.Module):
    """Query embedding ``e`` + mask vector ``m`` and the narrow linear-attention predictor ``p_φ``."""

    def __init__(
        self, vocab_size: int, d_model: int, *, layers: int, heads: int, dropout: float, width: int | None
    ) -> None:
        super().__init__()
        width = width or d_model
        if width % heads:
            raise ValueError(f"pred_heads={heads} must divide the predictor width {width}.")
        self.query_embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.query_embedding.weight, std=0.02)
        self.mask_token = nn.Parameter(torch.randn(d_model) * 0.02)
        self.in_proj = nn.Linear(d_model, width) if width != d_model else nn.Identity()
        self.blocks = nn.ModuleList(EncoderBlock(width, heads, 4 * width, dropout) for _ in range(layers))
        self.out_proj = nn.Linear(width, d_model) if width != d_model else nn.Identity()

    def queries(self, ids: torch.Tensor) -> torch.Tensor:
        """``q = e(ids) + m``, ``[n, U]`` → ``[n, U, D]``."""
        return self.query_embedding(ids) + self.mask_token

    def forward(self, states: torch.Tensor, queries: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``[n, U, D]`` pooled states + queries (``valid [n, U]``) → predictions ``[n, U, D]``."""
        x = self.in_proj(states + queries)
        for block in self.blocks:
            x = block(x, valid)
        return self.out_proj(x)


class JEPA(nn.Module):
    """The trainable part (what DDP wraps): student encoder, predictor, optional decoder head.

    ``forward(inputs)`` returns the predicted unit states ``[n, U, D]`` for a
    :class:`~biomjepa.train.inputs.TrainInputs`.
    """

    def __init__(
        self,
        model: ModelConfig,
        *,
        pred_layers: int = 4,
        pred_heads: int = 12,
        pred_dropout: float = 0.05,
        pred_width: int | None = None,
        tau: float = 0.1,
        decoder: bool = False,
    ) -> None:
        super().__init__()
        self.config = model
        self.tau = tau
        self.student = Encoder(model)
        self.predictor = Predictor(
            model.vocab_size,
            model.d_model,
            layers=pred_layers,
            heads=pred_heads,
            dropout=pred_dropout,
            width=pred_width,
        )
        self.decoder_head = nn.Linear(model.d_model, model.d_model) if decoder else None
        self.decoder_bias = nn.Parameter(torch.zeros(())) if decoder else None

    @classmethod
    def from_train_config(cls, cfg) -> JEPA:
        return cls(
            cfg.model_config(),
            pred_layers=cfg.model.pred_layers,
            pred_heads=cfg.model.pred_heads,
            pred_dropout=cfg.model.pred_dropout,
            pred_width=cfg.model.pred_width,
            tau=cfg.model.tau,
            decoder=cfg.loss.objective == "decoder",
        )

    def forward(self, inputs, *, with_embedding: bool = False):
        """Predicted unit states ``[n, U, D]``; with ``with_embedding`` also the student's pooled
        cell embedding of its context (max ‖ top-5 mean, ``[n, 2D]``, as :func:`biomjepa.tl.embed`)."""
        s = inputs.student
        hidden = self.student(s.gene_ids, s.values, s.mask)
        q = self.predictor.queries(inputs.query)
        pooled = dmt_pool(q, hidden, inputs.pool_mask, self.tau)
        pred = self.predictor(pooled, q, inputs.valid)
        if not with_embedding:
            return pred
        return pred, (max_top5_pool(hidden, s.gene_mask) if with_embedding != "mean" else mean_state(hidden, s.gene_mask))

    def decode(self, pred: torch.Tensor, unit: torch.Tensor, gene: torch.Tensor) -> torch.Tensor:
        """Decoder control: expression of target genes ``gene [M]`` from their unit's state ``[M]``."""
        z = self.decoder_head(pred.reshape(-1, pred.shape[-1])[unit])
        return (z * self.predictor.query_embedding(gene)).sum(-1) + self.decoder_bias


@torch.no_grad()
def teacher_token_states(teacher: Encoder, inputs, n_units: int, *, norm: bool = False, with_cell: bool = False):
    """Teacher state of every target gene ``[M, D]`` (rows follow ``inputs.tgt_unit``); with ``with_cell``
    also each cell's mean state over every gene of the teacher's view, ``[n, D]`` (the same forward pass).

    The teacher sees every gene of its view of the cell (``inputs.teacher``: all observed genes, or
    ``data.teacher_genes`` of them under a gene budget); runs under ``no_grad`` and in float32 whatever the
    autocast around it (bf16 teacher states put errors larger than the target signal into the block means,
    ``shared/notes/target-diagnostic.md``). With ``norm=True`` every state is layer-normalized (no affine),
    as I-JEPA normalizes its targets.
    """
    t = inputs.teacher
    with torch.autocast(t.gene_ids.device.type, enabled=False):
        h = teacher(t.gene_ids, t.values.float(), t.mask).float()  # [n, Tt, D]
    if norm:
        h = F.layer_norm(h, h.shape[-1:])
    n, T, D = h.shape
    cell = torch.div(inputs.tgt_unit, n_units, rounding_mode="floor")
    rows = h.reshape(n * T, D)[cell * T + inputs.tgt_pos]
    return (rows, mean_state(h, t.gene_mask)) if with_cell else rows
