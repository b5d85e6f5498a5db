"""Raw counts → vocabulary-space tokens. One tokenizer for inference and training.

For each cell the observed genes are the nonzero, vocabulary-mapped genes, and the value of gene
``g`` is ``log(1 + 1e4 * c_g / total)`` where ``total`` is the cell's total count over **all**
genes of the input matrix (mapped or not), i.e. what a user's raw counts give. No token cap: every
observed gene is kept. The two technical tokens are added later by :mod:`biomjepa.data.collate`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

SCALE = 1e4


@dataclass
class TokenizedCells:
    """Ragged per-cell tokens in vocabulary space (a CSR matrix in disguise).

    Attributes
    ----------
    indptr
        ``[n + 1]`` int64 row pointers.
    genes
        ``[nnz]`` int64 vocabulary indices, ascending within each cell.
    values
        ``[nnz]`` float32 normalized values ``log1p(1e4 * c / total)``.
    library
        ``[n]`` float64 total counts per cell (all input genes).
    """

    indptr: np.ndarray
    genes: np.ndarray
    values: np.ndarray
    library: np.ndarray

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Number of observed gene tokens per cell, ``[n]``."""
        return np.diff(self.indptr)

    def subset(self, rows: np.ndarray) -> TokenizedCells:
        """Cells ``rows`` (any order), as a new :class:`TokenizedCells`."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, lens = self.indptr[rows], self.lengths[rows]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        take = np.repeat(starts - indptr[:-1], lens) + np.arange(indptr[-1])
        return TokenizedCells(indptr, self.genes[take], self.values[take], self.library[rows])

    def drop_genes(self, remove: np.ndarray) -> TokenizedCells:
        """Remove vocabulary genes from every cell's input.

        ``remove`` is a boolean ``[V]`` mask (or an array of vocabulary indices). Values of the
        remaining genes and the library size are unchanged (the cell is *not* re-normalized), so
        the only difference the model sees is the missing tokens.
        """
        remove = np.asarray(remove)
        if remove.dtype != bool:
            mask = np.zeros(int(max(self.genes.max(initial=0), remove.max(initial=0))) + 1, dtype=bool)
            mask[remove] = True
            remove = mask
        inside = self.genes < len(remove)
        keep = ~(inside & remove[np.where(inside, self.genes, 0)])
        cs = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
        indptr = cs[self.indptr]
        return TokenizedCells(indptr, self.genes[keep], self.values[keep], self.library.copy())

    def to_csr(self, n_genes: int) -> sparse.csr_matrix:
        """Normalized values as a ``[n, n_genes]`` CSR matrix."""
        return sparse.csr_matrix((self.values, self.genes, self.indptr), shape=(len(self), n_genes))


def concat_cells(parts: list[TokenizedCells]) -> TokenizedCells:
    """Stack :class:`TokenizedCells` one after another (an empty list gives zero cells)."""
    if not parts:
        return TokenizedCells(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0))
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [p.indptr[-1] for p in parts[:-1]])
    indptr = np.concatenate([[0]] + [p.indptr[1:] + o for p, o in zip(parts, offsets)]).astype(np.int64)
    return TokenizedCells(
        indptr,
        np.concatenate([p.genes for p in parts]),
        np.concatenate([p.values for p in parts]),
        np.concatenate([p.library for p in parts]),
    )


def token_matrix(token: np.ndarray, vocab_size: int) -> sparse.csr_matrix:
    """0/1 ``[n_vars, V]`` matrix mapping input columns onto vocabulary tokens (−1 rows empty).

    ``X @ M`` restricts counts to the vocabulary and sums input genes that map to the same token.
    """
    token = np.asarray(token, dtype=np.int64)
    rows = np.flatnonzero(token >= 0)
    data = np.ones(len(rows), dtype=np.float64)
    return sparse.csr_matrix((data, (rows, token[rows])), shape=(len(token), vocab_size))


def check_counts(X, *, where: str = "X") -> None:
    """Raise a clear error unless ``X`` holds finite, non-negative, integer raw counts.

    Every stored value is checked (NaN/Inf, negative, non-integer: log-normalized or scaled
    input), in slices of :data:`CHECK_SLICE` values so the temporary arrays stay small; integer
    matrices need only the sign check. Boolean matrices (presence/absence) are refused. Works on
    dense arrays and scipy sparse matrices without densifying them.
    """
    data = X.data if sparse.issparse(X) else np.asarray(X).ravel()
    if data.dtype == np.bool_:
        raise ValueError(
            f"{where} is a boolean (presence/absence) matrix, not raw counts; biomjepa needs integer counts. "
            "Pass `layer=` naming the layer that holds raw integer counts (e.g. layer='counts')."
        )
    if data.size == 0:
        return
    if np.issubdtype(data.dtype, np.integer):
        if data.min() < 0:
            raise ValueError(_NEGATIVE.format(where=where))
        return
    for start in range(0, data.size, CHECK_SLICE):
        _check_slice(data[start : start + CHECK_SLICE], where)


CHECK_SLICE = 1 << 20
_NEGATIVE = (
    "{where} contains negative values; biomjepa needs raw counts. "
    "Pass `layer=` naming the layer with raw counts (e.g. layer='counts')."
)


def _check_slice(values: np.ndarray, where: str) -> None:
    if not np.isfinite(values).all():
        raise ValueError(f"{where} contains NaN or Inf values; biomjepa needs finite raw counts.")
    if values.min() < 0:
        raise ValueError(_NEGATIVE.format(where=where))
    frac = values - np.rint(values)
    if np.abs(frac, out=frac).max() > 1e-4:
        raise ValueError(
            f"{where} does not look like raw counts (non-integer values, e.g. log-normalized data). "
            "Pass `layer=` naming the layer that holds raw integer counts (e.g. layer='counts')."
        )


def to_vocab_counts(X, token: np.ndarray, vocab_size: int) -> tuple[sparse.csr_matrix, np.ndarray]:
    """Restrict a block of raw-count rows to the vocabulary.

    Parameters
    ----------
    X
        ``[n, n_vars]`` raw counts (dense, CSR or CSC).
    token
        ``[n_vars]`` vocabulary index per input column, −1 = unmapped.
    vocab_size
        ``V``.

    Returns
    -------
    ``(counts [n, V] CSR float64, totals [n])`` with ``totals`` summed over all input columns.
    """
    X = sparse.csr_matrix(X, dtype=np.float64) if not sparse.issparse(X) else X.tocsr().astype(np.float64)
    totals = np.asarray(X.sum(axis=1)).ravel()
    counts = (X @ token_matrix(token, vocab_size)).tocsr()
    counts.eliminate_zeros()
    counts.sort_indices()
    return counts, totals


def tokenize(counts: sparse.csr_matrix, totals: np.ndarray) -> TokenizedCells:
    """Normalize vocabulary-space counts into :class:`TokenizedCells`.

    Raises
    ------
    ValueError
        If a cell has no mapped gene or a non-positive library size.
    """
    counts = counts.tocsr()
    counts.sort_indices()
    lengths = np.diff(counts.indptr)
    if np.any(lengths == 0):
        bad = np.flatnonzero(lengths == 0)
        raise ValueError(
            f"{len(bad)} cell(s) have no expressed gene in the vocabulary (first positions: "
            f"{bad[:5].tolist()}). Filter them first, e.g. `sc.pp.filter_cells(adata, min_genes=1)` "
            "after `bj.pp.map_vocab`, or subset to cells with mapped counts."
        )
    totals = np.asarray(totals, dtype=np.float64)
    scale = np.repeat(SCALE / totals, lengths)
    values = np.log1p(counts.data * scale).astype(np.float32)
    return TokenizedCells(
        counts.indptr.astype(np.int64), counts.indices.astype(np.int64), values, totals.copy()
    )
