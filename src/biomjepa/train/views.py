"""Per-cell views for cheap training steps: a gene budget for the teacher's view of a cell.

The encoder's cost is linear in tokens, so a step's FLOPs follow the genes each network sees. A
*gene budget* keeps at most ``budget`` observed genes of every cell, drawn uniformly without
replacement (a gene-dropout view: the kept genes' values and the cell's library size are unchanged,
exactly as :meth:`~biomjepa.data.tokenize.TokenizedCells.drop_genes` leaves them). Blocks, targets
and the student's context are then sampled inside that view (``TrainConfig.teacher_genes``); the
student's context has its own cap (``TrainConfig.context_genes``, applied by the block sampler so that
DMT candidates only name positions the student sees).

A *depth-thinned* student view (``TrainConfig.thin_student``, :func:`thin_cells`) keeps the teacher's view as
measured and gives the student the same positions with binomially thinned counts, normalized as the
tokenizer normalizes any cell (:data:`~biomjepa.data.tokenize.SCALE`), so a shallow cell at training time
looks exactly like a shallow cell at inference time.
"""

from __future__ import annotations

import numpy as np

from ..data.tokenize import SCALE, TokenizedCells


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


def thin_cells(cells: TokenizedCells, low: float, rng: np.random.Generator) -> tuple[TokenizedCells, np.ndarray]:
    """``cells`` with binomially thinned counts, and bool ``[nnz]``: positions still observed.

    Each cell keeps a fraction ``f ~ U(low, 1)`` of its molecules: every count ``c`` of its view becomes
    ``Binomial(c, f)`` and so does the rest of its library (genes outside the view or the vocabulary), so the
    thinned library is what the thinned cell would have measured. Counts are recovered exactly from the
    normalized values (``c = expm1(v)·library/SCALE``, rounded). Positions and genes are kept (a thinned-out
    gene has value 0 and ``False`` in the mask); a cell that would lose every gene keeps its largest count.
    """
    lengths = cells.lengths
    cell = np.repeat(np.arange(len(cells)), lengths)
    frac = rng.uniform(low, 1.0, size=len(cells))
    counts = np.rint(np.expm1(cells.values.astype(np.float64)) * cells.library[cell] / SCALE).astype(np.int64)
    kept = rng.binomial(np.maximum(counts, 0), frac[cell])
    empty = np.bincount(cell, weights=kept, minlength=len(cells)) == 0
    if empty.any():  # a cell must keep a token: its most-expressed gene, one molecule
        top = _argmax_per_cell(counts, cells.indptr)
        kept[top[empty]] = 1
    view_total = np.bincount(cell, weights=counts, minlength=len(cells))
    rest = np.maximum(np.rint(cells.library - view_total), 0).astype(np.int64)
    library = np.bincount(cell, weights=kept, minlength=len(cells)) + rng.binomial(rest, frac)
    values = np.log1p(kept * np.repeat(SCALE / library, lengths)).astype(np.float32)
    return TokenizedCells(cells.indptr.copy(), cells.genes.copy(), values, library.astype(np.float64)), kept > 0


def _argmax_per_cell(x: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Flat position of each cell's largest entry (cells must be non-empty)."""
    n = len(indptr) - 1
    cell = np.repeat(np.arange(n), np.diff(indptr))
    order = np.lexsort((-x, cell))
    return order[indptr[:-1]]
