"""Expression- and detection-matched random gene sets (shared by the programme analyses).

Genes observed in the data (detected in at least one cell) are placed on a 2-D grid of
``n_bins`` quantile bins of mean normalized expression × ``n_bins`` quantile bins of detection
frequency. A matched random set replaces every programme gene by a gene drawn uniformly from the
same grid cell, without replacement, never drawing a gene of any programme analysed together. When a grid cell is
exhausted the search widens to the ring of cells at Chebyshev distance 1, 2, … and the widening
is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def check_null_args(n_random, n_cells, n_bins, random_state) -> tuple[int, int, int, int]:
    """``n_random``, ``n_cells``, ``n_bins`` and ``random_state`` of a programme analysis, checked before any data are
    read: whole numbers (``n_cells`` >= 2, ``random_state`` >= 0, the others >= 1); the error names the argument."""
    from .._checks import check_int

    return (check_int("n_random", n_random, example=1), check_int("n_cells", n_cells, low=2, example=24),
            check_int("n_bins", n_bins, example=10), check_int("random_state", random_state, low=0, example=0))


def quantile_bins(x: np.ndarray, n_bins: int) -> np.ndarray:
    """Quantile bin index ``0..n_bins-1`` of every value of ``x`` (ties share a bin).

    Edges are the interior ``1/n_bins, …, (n_bins-1)/n_bins`` quantiles of ``x``; a value goes to
    the number of edges it is greater than or equal to, so heavily tied values (e.g. many genes
    detected in exactly one cell) fall into one bin and some bins may stay empty.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}.")
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return np.zeros(0, dtype=np.int64)
    edges = np.quantile(x, np.linspace(0, 1, n_bins + 1)[1:-1])
    return np.searchsorted(edges, x, side="right").astype(np.int64)


def expression_bins(mean: np.ndarray, detection: np.ndarray, n_bins: int = 10) -> np.ndarray:
    """``[G, 2]`` (mean-expression bin, detection bin) of each gene, quantiles over the given genes."""
    return np.stack([quantile_bins(mean, n_bins), quantile_bins(detection, n_bins)], axis=1)


@dataclass
class MatchedSet:
    """One matched random set: ``genes[k]`` replaces programme gene ``k``.

    ``widened`` lists ``(programme gene, replacement, Chebyshev distance)`` for draws taken from a
    neighbouring bin because the programme gene's own bin was exhausted.
    """

    genes: np.ndarray
    widened: list[tuple[int, int, int]] = field(default_factory=list)


def matched_random_set(
    programme: np.ndarray,
    genes: np.ndarray,
    bins: np.ndarray,
    rng: np.random.Generator,
    *,
    exclude: np.ndarray | None = None,
) -> MatchedSet:
    """Draw one random gene set matched bin-by-bin to ``programme``.

    Parameters
    ----------
    programme
        Gene ids (any integer ids, e.g. vocabulary indices) of the programme; each must be in ``genes``.
    genes
        ``[G]`` candidate gene ids (the genes observed in the data).
    bins
        ``[G, 2]`` bins of ``genes`` from :func:`expression_bins`.
    rng
        Random generator (the draw is reproducible given its state).
    exclude
        Further gene ids never drawn (e.g. the genes of every programme analysed together).

    Returns
    -------
    A :class:`MatchedSet` of the same size as ``programme``.
    """
    programme = np.asarray(programme, dtype=np.int64)
    genes = np.asarray(genes, dtype=np.int64)
    pos = {int(g): i for i, g in enumerate(genes)}
    missing = [int(g) for g in programme if int(g) not in pos]
    if missing:
        raise ValueError(f"Programme genes {missing[:10]} are not among the candidate genes.")
    available = ~np.isin(genes, programme)
    if exclude is not None:
        available &= ~np.isin(genes, np.asarray(exclude, dtype=np.int64))
    if available.sum() < len(programme):
        raise ValueError(
            f"Only {int(available.sum())} non-programme genes are observed; cannot draw a matched "
            f"random set of size {len(programme)}."
        )
    out = np.empty(len(programme), dtype=np.int64)
    widened: list[tuple[int, int, int]] = []
    for k, g in enumerate(programme):
        b = bins[pos[int(g)]]
        dist = np.abs(bins - b).max(axis=1)  # Chebyshev distance on the bin grid
        radius = 0
        while True:
            cand = np.flatnonzero(available & (dist <= radius))
            if len(cand):
                break
            radius += 1
        pick = int(rng.choice(cand))
        available[pick] = False
        out[k] = genes[pick]
        if radius:
            widened.append((int(g), int(genes[pick]), radius))
    return MatchedSet(out, widened)


def gene_stats(csr) -> tuple[np.ndarray, np.ndarray]:
    """Mean value (zeros included) and detection frequency of every column of a ``[n, G]`` CSR matrix."""
    n = max(csr.shape[0], 1)
    mean = np.asarray(csr.sum(axis=0)).ravel() / n
    detection = np.bincount(csr.indices[csr.data != 0], minlength=csr.shape[1]) / n
    return mean, detection


def scan_gene_stats(adata, *, layer: str | None, vocab_size: int, programmes: dict | None = None):
    """One streamed pass over ``adata``: per-gene mean normalized value and detection frequency.

    Same numbers as :func:`gene_stats` on every tokenized cell (zeros included), accumulated chunk
    by chunk (float64) so the dataset is never tokenized at once. With ``programmes``
    (``{name: vocabulary ids}``), also ``{name: [n_obs] bool}``: cells expressing ≥ 1 of its genes.

    Returns
    -------
    ``(mean [V], detection [V], hits)``
    """
    from ..data.stream import iter_tokenized

    total, detected = np.zeros(vocab_size), np.zeros(vocab_size, np.int64)
    hits = {k: np.zeros(adata.n_obs, bool) for k in (programmes or {})}
    for rows, cells in iter_tokenized(adata, layer=layer):
        total += np.bincount(cells.genes, weights=cells.values, minlength=vocab_size)
        detected += np.bincount(cells.genes[cells.values != 0], minlength=vocab_size)
        for name, ids in (programmes or {}).items():
            hits[name][rows] = count_in(cells, ids) > 0
    n = max(adata.n_obs, 1)
    return total / n, detected / n, hits


def count_in(cells, genes: np.ndarray) -> np.ndarray:
    """Per cell of :class:`~biomjepa.data.tokenize.TokenizedCells`, how many of ``genes`` it expresses, ``[n]``."""
    owner = np.repeat(np.arange(len(cells)), cells.lengths)
    return np.bincount(owner[np.isin(cells.genes, genes)], minlength=len(cells))
