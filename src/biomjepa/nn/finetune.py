"""The paper's partial fine-tuning protocol at the tensor level (Supp. "Matched efficiency benchmark").

Trainable: the **final encoder block**, the **direct parameters of every leaf LayerNorm** in the
encoder (the two in each block; the final block's come with the block) and a classification head

    LayerNorm(4D) → Linear(4D, 8D) → GELU → Linear(8D, C)

on the four-part pooled vector ``[last control ‖ second-last control ‖ gene max ‖ gene mean]``
(``4D`` = 3,072 for ``base``). Everything else (token embeddings, the other blocks' attention and
FFN weights) is frozen (``requires_grad=False``) and left out of the optimizer. For ``base`` with
``C = 13`` this is 7,121,664 encoder + 18,966,541 head = 26,088,205 trainable parameters, the
paper's count.

Control-token mapping. The paper follows scFoundation, whose input appends two control values
*after* the genes, ``[genes…, S (resolution), T (log10 total count)]``, so the *last* control
token is the library-size token and the *second-last* the resolution token. Our collator puts the
same two tokens *first* (:mod:`biomjepa.data.collate`: position 0 = resolution, id ``V``;
position 1 = log10 library size, id ``V + 1``), hence ``last → hidden[:, 1]`` and
``second-last → hidden[:, 0]``. Unlike the frozen embedding (:func:`~biomjepa.nn.max_top5_pool`),
this head input *does* include the technical tokens, as in the paper's protocol.

This module never imports anndata; :func:`biomjepa.tl.finetune` is the AnnData-aware layer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .encoder import Encoder

if TYPE_CHECKING:
    from ..data.collate import Batch
    from ..data.tokenize import TokenizedCells

#: normalization layers whose *direct* parameters are trainable (the paper's "leaf normalization").
NORM_TYPES: tuple[type[nn.Module], ...] = (nn.LayerNorm,)


def four_part_pool(hidden: torch.Tensor, gene_mask: torch.Tensor) -> torch.Tensor:
    """``hidden [B, T, D]``, ``gene_mask [B, T]`` → ``[B, 4D]``.

    ``[hidden[:, 1] (last control = library size) ‖ hidden[:, 0] (second-last control =
    resolution) ‖ per-feature max over gene tokens ‖ per-feature mean over gene tokens]``.
    Padding and technical tokens are excluded from max and mean; a cell without genes gets zeros.
    """
    gm = gene_mask[..., None]
    n = gene_mask.sum(1, keepdim=True)  # [B, 1]
    neg = torch.finfo(hidden.dtype).min
    gmax = hidden.masked_fill(~gm, neg).amax(1)
    gmax = torch.where(n > 0, gmax, torch.zeros_like(gmax))
    gmean = hidden.masked_fill(~gm, 0.0).sum(1) / n.clamp(min=1).to(hidden.dtype)
    return torch.cat([hidden[:, 1], hidden[:, 0], gmax, gmean], dim=-1)


class ClassifierHead(nn.Sequential):
    """``LayerNorm(d_in) → Linear(d_in, 2·d_in) → GELU → Linear(2·d_in, n_classes)``."""

    def __init__(self, d_in: int, n_classes: int) -> None:
        super().__init__(
            nn.LayerNorm(d_in), nn.Linear(d_in, 2 * d_in), nn.GELU(), nn.Linear(2 * d_in, n_classes)
        )


class FinetuneModel(nn.Module):
    """Encoder + four-part pooling + :class:`ClassifierHead`; ``forward(batch)`` → logits ``[B, C]``."""

    def __init__(self, encoder: Encoder, n_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = ClassifierHead(4 * encoder.config.d_model, n_classes)

    @property
    def config(self):
        return self.encoder.config

    def forward(self, batch: Batch) -> torch.Tensor:
        hidden = self.encoder(batch.gene_ids, batch.values, batch.mask)
        return self.head(four_part_pool(hidden, batch.gene_mask))


def encoder_trainable_names(encoder: Encoder) -> list[str]:
    """Names of the encoder parameters the protocol trains (final block + leaf LayerNorms).

    Norm parameters are selected *directly* (``recurse=False`` on each norm module), so a wrapper
    module can never unfreeze anything else by accident.
    """
    last = len(encoder.blocks) - 1
    names = {f"blocks.{last}.{n}" for n, _ in encoder.blocks[last].named_parameters()}
    for mname, module in encoder.named_modules():
        if isinstance(module, NORM_TYPES):
            names.update(f"{mname}.{p}" for p, _ in module.named_parameters(recurse=False))
    order = [n for n, _ in encoder.named_parameters()]
    return [n for n in order if n in names]


def mark_trainable(model: FinetuneModel) -> dict[str, int]:
    """Freeze everything but the protocol's parameters in place; returns :func:`count_trainable`."""
    keep = set(encoder_trainable_names(model.encoder))
    for name, p in model.encoder.named_parameters():
        p.requires_grad_(name in keep)
    for p in model.head.parameters():
        p.requires_grad_(True)
    return count_trainable(model)


def count_trainable(model: FinetuneModel) -> dict[str, int]:
    """``{"encoder", "head", "total"}`` numbers of parameters with ``requires_grad``."""
    enc = sum(p.numel() for p in model.encoder.parameters() if p.requires_grad)
    head = sum(p.numel() for p in model.head.parameters() if p.requires_grad)
    return {"encoder": enc, "head": head, "total": enc + head}


def make_optimizer(
    model: FinetuneModel,
    *,
    lr_head: float = 1e-3,
    lr_encoder: float = 5e-5,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
) -> torch.optim.AdamW:
    """AdamW over the trainable parameters only: encoder group at ``lr_encoder``, head at ``lr_head``."""
    enc = [p for p in model.encoder.parameters() if p.requires_grad]
    head = [p for p in model.head.parameters() if p.requires_grad]
    groups = [
        {"params": enc, "lr": lr_encoder, "name": "encoder"},
        {"params": head, "lr": lr_head, "name": "head"},
    ]
    return torch.optim.AdamW([g for g in groups if g["params"]], betas=betas, weight_decay=weight_decay)


def training_batches(
    lengths: np.ndarray, batch_size: int, rng: np.random.Generator, max_tokens: int | None = None
):
    """Length-sorted batches (padding per batch only), ties broken and batch order shuffled by ``rng``."""
    from ..data.collate import sorted_batches

    perm = rng.permutation(len(lengths))
    batches = [perm[b] for b in sorted_batches(np.asarray(lengths)[perm], batch_size, max_tokens=max_tokens)]
    return [batches[i] for i in rng.permutation(len(batches))]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_epoch(
    model: FinetuneModel,
    cells: TokenizedCells,
    labels: np.ndarray,
    optimizer: torch.optim.Optimizer,
    *,
    batch_size: int,
    rng: np.random.Generator,
    device: torch.device,
    max_tokens: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> dict[str, float]:
    """One pass over ``cells`` with integer ``labels [n]``: forward, cross-entropy, backward, step.

    In ``bj.settings.precision`` (:func:`biomjepa._device.autocast`; float32 by default, bf16 autocast with
    ``"bf16"``/``"auto"``); the loss is taken in float32. Returns ``{"loss" (mean
    per cell), "n_cells", "seconds"}``; ``seconds`` covers collation, forward, backward and the
    optimizer step (CUDA synchronized), i.e. the paper's ``t_step`` summed over the epoch.
    """
    from .._device import autocast
    from ..data.collate import collate

    model.train()
    y_all = torch.as_tensor(labels, dtype=torch.long)
    total, n = 0.0, 0
    _sync(device)
    t0 = time.perf_counter()
    for rows in training_batches(cells.lengths, batch_size, rng, max_tokens):
        batch = collate(cells, model.config.vocab_size, rows).to(device)
        y = y_all[rows].to(device)
        with autocast(device):
            logits = model(batch)
        loss = F.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += float(loss.detach()) * len(rows)
        n += len(rows)
        if progress is not None:
            progress(len(rows))
    _sync(device)
    return {"loss": total / max(n, 1), "n_cells": n, "seconds": time.perf_counter() - t0}


def predict_proba(
    model: FinetuneModel,
    cells: TokenizedCells,
    *,
    batch_size: int,
    device: torch.device,
    max_tokens: int | None = None,
) -> tuple[np.ndarray, float]:
    """Class probabilities ``[n, C]`` float32 in the cells' order, and the seconds it took.

    No-gradient encoding followed by the head (the paper's held-out throughput), through the one
    inference loop (:func:`biomjepa.nn.inference.map_batches`: length-sorted batches,
    ``torch.inference_mode``, ``bj.settings.precision``).
    """
    from .inference import map_batches

    model.eval()
    out = np.empty((len(cells), model.head[-1].out_features), dtype=np.float32)
    _sync(device)
    t0 = time.perf_counter()
    map_batches(
        cells, lambda batch: torch.softmax(model(batch).float(), dim=-1), (out,), vocab_size=model.config.vocab_size,
        batch_size=batch_size, device=device, max_tokens=max_tokens,
    )
    _sync(device)
    return out, time.perf_counter() - t0


def trainable_state(model: FinetuneModel) -> dict[str, torch.Tensor]:
    """Detached copies of the trainable parameters (to restore the best epoch)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def restore_state(model: FinetuneModel, state: dict[str, torch.Tensor]) -> None:
    """Copy a :func:`trainable_state` snapshot back into ``model`` in place."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)
