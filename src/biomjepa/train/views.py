"""Per-cell views for cheap training steps: a gene budget for the teacher's view of a cell.

The encoder's cost is linear in tokens, so a step's FLOPs follow the genes each network sees. A
*gene budget* keeps at most ``budget`` observed genes of every cell, drawn uniformly without
replacement (a gene-dropout view: the kept genes' values and the cell's library size are unchanged,
exactly as :meth:`~biomjepa.data.tokenize.TokenizedCells.drop_genes` leaves them). Blocks, targets
and the student's context are then sampled inside that view (``TrainConfig.teacher_genes``); the
student's context has its own cap (``TrainConfig.context_genes``, applied by the block sampler so that
DMT candidates only name positions the student sees).
"""

from __future__ import annotations

import numpy as np

from ..data.tokenize import TokenizedCells


def keep_mask(indptr: np.ndarray, eligible: np.ndarray, budget: int, rng: np.random.Generator) -> np.ndarray:
    """bool ``[nnz]``: at most ``budget`` of each cell's ``eligible`` positions, uniformly at random.

    Cells with ``≤ budget`` eligible positions keep them all. Draws one uniform key per position
    from ``rng`` (so the result depends only on the generator's state and the inputs).
    """
    n = len(indptr) - 1
    lengths = np.diff(indptr)
    cell = np.repeat(np.arange(n), lengths)
    key = rng.random(int(indptr[-1]))
    key[~eligible] = 2.0  # never chosen before an eligible position
    order = np.lexsort((key, cell))  # per cell, eligible positions first, in random order
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size) - np.repeat(indptr[:-1], lengths)
    return eligible & (rank < budget)


def gene_budget(cells: TokenizedCells, budget: int | None, rng: np.random.Generator) -> TokenizedCells:
    """``cells`` with at most ``budget`` observed genes each (uniform, without replacement).

    Returns ``cells`` itself when ``budget`` is ``None`` or no cell exceeds it (no generator draw
    is made then, so runs without a budget keep their block-sampling stream).
    """
    if budget is None or cells.lengths.max(initial=0) <= budget:
        return cells
    keep = keep_mask(cells.indptr, np.ones(cells.genes.size, bool), budget, rng)
    cs = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    return TokenizedCells(cs[cells.indptr], cells.genes[keep], cells.values[keep], cells.library.copy())
