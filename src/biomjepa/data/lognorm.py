"""Log-normalized input (``input="lognorm"``): ``log1p(normalize_total(target_sum=T))`` values read as counts.

Many public datasets ship only ``x = log1p(c · T / Σc)``. That *is* the model's input value (up to the
constant ``T``), so nothing is lost but the library size ``L = Σc`` for the technical token: each cell's
``T`` is the row sum of ``expm1(x)`` (one ``T`` for all cells), and the counts are
``c = expm1(x) · L / T``. :class:`LogNormalized` shows an AnnData (or its ``.raw``) to the streaming
reader with these pseudo-counts in place of ``X`` / a layer, so every tool tokenizes them exactly as it
tokenizes raw counts: ``log1p(1e4 · c / L) = log1p(1e4 / T · expm1(x))``.

``L`` comes from ``obs[library_size_key]``, or is estimated as ``T / u`` with ``u`` the cell's smallest
nonzero ``expm1(x)``: exact when the cell has a gene with exactly one count, which nearly every droplet
cell has. Either way ``c`` must come out as integers, which refuses scaled, z-scored or otherwise
transformed data.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from ._lognorm_messages import (
    INTEGER_SHARE,
    INTEGER_TOL,
    SUM_TOL,
    first_non_integer,
    integer_message,
    smallest_nonzero,
    sum_message,
)
from .backends import materialize

__all__ = ["INTEGER_SHARE", "INTEGER_TOL", "SUM_TOL", "LogNormalized", "estimate_warning"]



class LogNormalized:
    """``inner`` (an AnnData or :class:`~biomjepa.data.anndata_source.RawCounts`) with log-normalized ``X``
    and layers read as pseudo-counts ``expm1(x) · L / T`` (see the module docstring).

    ``library`` is ``[n_obs]`` library sizes or ``None`` (estimated per cell); ``library_key`` is the
    ``obs`` column they came from, named in errors. Build it with
    :func:`~biomjepa.data.anndata_source.counts_view` (``input="lognorm"``).
    """

    def __init__(self, inner, library: np.ndarray | None, library_key: str | None) -> None:
        self._inner = inner
        self._library = library
        self._library_key = library_key
        self.target_sum: float | None = None  # T, from the first block read

    @property
    def X(self):
        return _PseudoCounts(self, self._inner.X, getattr(self._inner, "where", "X"))

    @property
    def layers(self) -> dict:
        return {k: _PseudoCounts(self, v, f"layers[{k!r}]") for k, v in self._inner.layers.items()}

    @property
    def var(self):
        return self._inner.var

    @property
    def var_names(self):
        return self._inner.var_names

    @property
    def n_obs(self) -> int:
        return self._inner.n_obs

    @property
    def n_vars(self) -> int:
        return self._inner.n_vars

    def counts(self, block, rows: slice, where: str) -> sparse.csr_matrix:
        """Pseudo-counts ``[n, n_vars]`` CSR float64 of log-normalized ``block`` (cells ``rows``), checked."""
        E = _expm1(block, where)
        sums = np.asarray(E.sum(axis=1)).ravel()
        T = self._target_sum(E, sums, rows, where)
        estimate = T / smallest_nonzero(E)
        library = estimate if self._library is None else self._library[rows]
        C = (sparse.diags(library / T) @ E).tocsr()
        cell = first_non_integer(C)
        if cell is not None:
            raise ValueError(integer_message(E, T, library, estimate, cell, rows, where, self._library_key))
        C.data = np.rint(C.data)  # the counts themselves: tokens then equal those of the raw counts
        C.eliminate_zeros()
        return C

    def _target_sum(self, E: sparse.csr_matrix, sums: np.ndarray, rows: slice, where: str) -> float:
        if self.target_sum is None and len(sums):
            self.target_sum = float(np.median(sums))
        T = self.target_sum
        bad = np.flatnonzero(np.abs(sums - T) > SUM_TOL * T) if T else np.arange(len(sums))
        if len(bad):
            raise ValueError(sum_message(E, sums, T, bad, rows, where))
        return T


def estimate_warning() -> None:
    """Say that the library sizes are estimated, how, and what it costs."""
    import warnings

    warnings.warn(
        "input='lognorm' without library_size_key: each cell's library size (the library-size token; the gene "
        "values do not need it) is estimated as T / the smallest nonzero expm1 value of the cell, i.e. assuming "
        "the cell has a gene with exactly one count, and the counts this gives are checked to be whole numbers. "
        "It is the cell's total over the genes in the matrix, as normalize_total counted them (scanpy's "
        "total_counts may also count genes removed before normalizing). A cell whose smallest count is k > 1 is "
        "refused unless all its counts are multiples of k (say 2, 4, 6): the values cannot tell those from 1, 2, "
        "3, and such a cell's estimate is k times too small. Droplet cells nearly always have a one-count gene: "
        "the estimate equals the total count of every one of the 900 bundled PBMCs and 1,074 pancreas cells. "
        "Pass library_size_key= (an obs column of total counts, e.g. 'total_counts') to use known library "
        "sizes instead.",
        UserWarning,
        stacklevel=5,
    )


class _PseudoCounts:
    """Row-sliceable stand-in for a log-normalized matrix: ``M[a:b]`` gives checked pseudo-counts."""

    def __init__(self, view: LogNormalized, matrix, where: str) -> None:
        self._view, self._matrix, self._where = view, matrix, where
        self.shape = matrix.shape

    def __getitem__(self, rows: slice) -> sparse.csr_matrix:

        return self._view.counts(materialize(self._matrix[rows]), rows, self._where)


def _expm1(block, where: str) -> sparse.csr_matrix:
    """``expm1`` of a block as CSR float64, refusing negative (scaled, z-scored) and non-finite values."""
    if np.dtype(getattr(block, "dtype", np.float64)) == np.float16:
        raise ValueError(
            f"{where} is float16: log values stored in half precision keep about 3 significant digits, too few "
            "to give back the counts they came from (between 4 and 8 they are 0.004 apart, so expm1 is off by up to 0.2%). "
            "input='lognorm' needs float32 or float64 values: compute them again in float32 (casting float16 "
            "back does not restore the lost digits), or pass raw counts with input='counts'."
        )
    X = sparse.csr_matrix(block, dtype=np.float64) if not sparse.issparse(block) else block.tocsr().astype(np.float64)
    if not np.isfinite(X.data).all():
        raise ValueError(f"{where} contains NaN or Inf values; input='lognorm' needs finite log1p(normalize_total) values.")
    if X.data.size and X.data.min() < 0:
        raise ValueError(
            f"{where} contains negative values: scaled or z-scored data (sc.pp.scale, regress_out), not "
            "log1p(normalize_total). input='lognorm' needs the values before scaling; keep them in a layer "
            "(layer=) or in .raw (use_raw=True)."
        )
    X.data = np.expm1(X.data)
    X.eliminate_zeros()
    return X
