"""Training-batch collation: a :class:`BlockSample` → padded teacher/student batches + index tensors.

The teacher batch holds every observed gene (:func:`biomjepa.data.collate.collate`); the student
batch holds the context genes only (a context subset of the same :class:`TokenizedCells`, through
the same collate). Prediction *units* are what the predictor outputs one state for: the ``K``
blocks of a cell (``block``, ``random_block``, ``decoder``) or up to ``token_cap`` target genes
per cell (``token``). Each unit has a query id (block id or gene), a pooling mask over student
positions (DMT candidates, or all context) and a ragged list of teacher target positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..data.collate import N_TECH, Batch, collate
from ..data.tokenize import TokenizedCells
from .running import depth_covariates


@dataclass
class TrainInputs:
    """One micro-batch of ``n`` cells with ``U`` prediction units per cell.

    Attributes
    ----------
    teacher, student
        :class:`~biomjepa.data.collate.Batch` of all observed genes ``[n, Tt]`` / context ``[n, Ts]``.
    query
        long ``[n, U]`` vocabulary id of each unit's query (block id ``c_k`` or target gene).
    valid
        bool ``[n, U]`` units with ≥ 1 target gene.
    pool_mask
        bool ``[n, U, Ts]`` student positions each unit's pooling may attend to.
    tgt_unit, tgt_pos
        long ``[M]`` flat unit index ``i·U + u`` and padded teacher position of every target gene.
    tgt_gene, tgt_value
        long / float ``[M]`` vocabulary id and normalized expression of every target gene.
    stats
        coverage (mean ``|∪T|/|O|``), fallback fraction, DMT fallback fraction, token counts.
    depth
        float ``[n, 3]``: ``1``, log detected genes and log library size of the whole cell, before any gene
        budget (:func:`~biomjepa.train.running.depth_covariates`).
    """

    teacher: Batch
    student: Batch
    query: torch.Tensor
    valid: torch.Tensor
    pool_mask: torch.Tensor
    tgt_unit: torch.Tensor
    tgt_pos: torch.Tensor
    tgt_gene: torch.Tensor
    tgt_value: torch.Tensor
    stats: dict
    depth: torch.Tensor | None = None

    def to(self, device) -> TrainInputs:
        moved = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in self.__dict__.items()}
        return TrainInputs(**moved)


def context_cells(cells: TokenizedCells, context: np.ndarray) -> TokenizedCells:
    """The student's view: each cell restricted to its context genes (values and library unchanged)."""
    cs = np.concatenate([[0], np.cumsum(context, dtype=np.int64)])
    return TokenizedCells(cs[cells.indptr], cells.genes[context], cells.values[context], cells.library.copy())


def _student_positions(cells: TokenizedCells, context: np.ndarray) -> np.ndarray:
    """Padded student position of every observed token (−1 for hidden targets), ``[nnz]``."""
    cs = np.cumsum(context, dtype=np.int64)
    before = np.repeat(np.r_[0, cs][cells.indptr[:-1]], cells.lengths)
    return np.where(context, N_TECH + cs - 1 - before, -1)


def _ragged_to_flat(indptr: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))


def build_inputs(
    cells: TokenizedCells,
    sample,
    vocab_size: int,
    *,
    objective: str = "block",
    token_cap: int = 64,
    rng: np.random.Generator | None = None,
    whole: TokenizedCells | None = None,
    student_cells: TokenizedCells | None = None,
) -> TrainInputs:
    """Collate one micro-batch for ``objective`` from ``cells`` and their :class:`BlockSample`.

    ``whole``: the same cells before any gene budget, whose depth ``inputs.depth`` records (``cells``
    itself when omitted). ``student_cells``: what the student reads at the same positions, e.g. a
    depth-thinned copy (:func:`~biomjepa.train.views.thin_cells`; the sample's context must only name
    positions it observes); ``cells`` when omitted.
    """
    n, K = sample.n_cells, sample.n_targets
    teacher = collate(cells, vocab_size)
    student = collate(context_cells(cells if student_cells is None else student_cells, sample.context), vocab_size)
    spos = _student_positions(cells, sample.context)
    pair = _ragged_to_flat(sample.target_indptr)  # pair = i*K + k of each target entry
    cell = pair // K
    flat = cells.indptr[cell] + sample.target_pos
    if objective == "token":
        flat = np.unique(flat)  # a gene in several blocks is one token target
        unit_of, query, valid, U = _token_units(cells, cell, flat, token_cap, rng)
        keep = unit_of >= 0
        flat, unit = flat[keep], unit_of[keep]
        pool = student.gene_mask[:, None, :].expand(n, U, -1).clone()
    else:
        U, unit, query, valid = K, pair, sample.block_id.reshape(n, K), sample.valid.reshape(n, K)
        pool = _dmt_mask(sample, cells, spos, student.gene_mask)
    local = flat - cells.indptr[unit // U]
    stats = {
        "coverage": float(np.mean(sample.union_sizes / np.maximum(cells.lengths, 1))),
        "fallback": float(np.mean(sample.fallback)),
        "dmt_fallback": float(np.mean(sample.dmt_fallback)),
        "teacher_tokens": int(teacher.mask.sum()),
        "student_tokens": int(student.mask.sum()),
        "cells": n,
    }
    return TrainInputs(
        teacher=teacher,
        student=student,
        query=torch.as_tensor(np.asarray(query, np.int64)),
        valid=torch.as_tensor(np.asarray(valid, bool)),
        pool_mask=pool,
        tgt_unit=torch.as_tensor(unit, dtype=torch.long),
        tgt_pos=torch.as_tensor(N_TECH + local, dtype=torch.long),
        tgt_gene=torch.as_tensor(cells.genes[flat], dtype=torch.long),
        tgt_value=torch.as_tensor(cells.values[flat], dtype=torch.float32),
        stats=stats,
        depth=_depth(cells if whole is None else whole),
    )


def _depth(cells: TokenizedCells) -> torch.Tensor:
    return depth_covariates(torch.as_tensor(cells.lengths), torch.as_tensor(cells.library))


def _dmt_mask(sample, cells: TokenizedCells, spos: np.ndarray, gene_mask: torch.Tensor) -> torch.Tensor:
    """``[n, K, Ts]``: DMT candidates ``C ∩ N^coexp(c_k)``, or all context where that is empty."""
    n, K = sample.n_cells, sample.n_targets
    pool = torch.zeros(n, K, gene_mask.shape[1], dtype=torch.bool)
    pair = _ragged_to_flat(sample.dmt_indptr)
    flat = cells.indptr[pair // K] + sample.dmt_pos
    pool.view(n * K, -1)[torch.as_tensor(pair), torch.as_tensor(spos[flat])] = True
    fb = torch.as_tensor(np.asarray(sample.dmt_fallback, bool).reshape(n, K))
    return torch.where(fb[:, :, None], gene_mask[:, None, :], pool)


def _token_units(cells, cell, flat, cap, rng):
    """Token-IJEPA units: distinct target genes per cell, at most ``cap`` drawn uniformly (``rng``)."""
    n = len(cells)
    uniq = np.unique(flat)  # observed positions in ∪T (sorted → grouped by cell)
    ucell = np.searchsorted(cells.indptr, uniq, side="right") - 1
    rng = rng or np.random.default_rng(0)
    order = np.lexsort((rng.random(len(uniq)), ucell))
    uniq, ucell = uniq[order], ucell[order]
    start = np.searchsorted(ucell, np.arange(n))
    rank = np.arange(len(uniq)) - start[ucell]
    keep = rank < cap
    uniq, ucell, rank = uniq[keep], ucell[keep], rank[keep]
    U = max(1, int(rank.max(initial=-1)) + 1)
    slot = np.full(int(cells.indptr[-1]), -1, np.int64)
    slot[uniq] = ucell * U + rank
    query = np.zeros((n, U), np.int64)
    valid = np.zeros((n, U), bool)
    query[ucell, rank], valid[ucell, rank] = cells.genes[uniq], True
    return slot[flat], query, valid, U
