"""Why log-normalized values were refused (``input="lognorm"``): each message names the cause and its fix.

:class:`~biomjepa.data.lognorm.LogNormalized` refuses a block when the row sums of ``expm1(x)`` differ
between cells (:func:`sum_message`) or when the pseudo-counts are not integers (:func:`integer_message`).
Several different mistakes look alike at that point; these functions tell them apart from the values
themselves (a second log base, an empty cell, no normalization, groups normalized apart, library sizes
counted over other genes) so the error says what happened and what to run, only when it is refused.
The thresholds of those checks and the two tests they share with the messages (:func:`smallest_nonzero`,
:func:`first_non_integer`) live here too, so this module imports nothing of :mod:`~biomjepa.data.lognorm`
(no import circle).
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

INTEGER_TOL = 0.01  # |c - round(c)| allowed (float32 log values carry ~1e-6 relative error)
INTEGER_SHARE = 0.99  # share of a cell's values that must be integers (after the library size)
SUM_TOL = 1e-3  # relative spread allowed between cells' expm1 row sums (one target sum T)

_MAX_GROUPS = 10  # distinct target sums still read as "groups normalized separately"


def sum_message(E: sparse.csr_matrix, sums: np.ndarray, T: float, bad: np.ndarray, rows: slice, where: str) -> str:
    """The error for cells whose ``expm1`` row sums differ from the target sum ``T`` (``bad``: block rows)."""
    first = rows.start + int(bad[0])
    empty = bad[sums[bad] == 0]
    if len(empty):
        return (
            f"Cell {rows.start + int(empty[0])} has no nonzero value in {where} ({len(empty)} such cells in rows "
            f"{rows.start}..{rows.stop - 1}): an empty cell has no library size and no genes to embed. Remove "
            "empty cells first, e.g. `sc.pp.filter_cells(adata, min_genes=1)`."
        )
    base = _other_log_base(E)
    if base is not None:
        return (
            f"{where} holds log{base}(1 + x) values, not natural-log ones: the row sums of {base}**{where} - 1 are "
            f"all equal (one target sum), those of expm1({where}) are not (cell {first}). input='lognorm' reads "
            f"sc.pp.log1p's natural log: multiply the values by ln {base} first, e.g. "
            f"`adata.X.data *= np.log({base})` for a sparse X (ln(1 + x) = log{base}(1 + x) · ln {base})."
        )
    if np.abs(E.data - np.rint(E.data)).max(initial=0.0) <= 1e-3:
        return (
            f"{where} holds log1p of counts that were never normalized: expm1({where}) gives whole numbers whose "
            f"row sums differ from cell to cell (cell {first}: {sums[bad[0]]:.6g}). Pass those counts with "
            f"input='counts' (e.g. `adata.X.data = np.rint(np.expm1(adata.X.data))`)."
        )
    groups = _groups(sums[bad])
    if len(groups) <= _MAX_GROUPS and len(bad) >= 2 * len(groups):
        shown = ", ".join(f"{g:.6g}" for g in sorted([T, *groups])[:4])
        return (
            f"{where} was normalized in groups with different target sums: the row sums of expm1({where}) take "
            f"{len(groups) + 1} distinct values in rows {rows.start}..{rows.stop - 1} ({shown}; cell {first} sums to "
            f"{sums[bad[0]]:.6g}), as when batches "
            "are normalized separately (sc.pp.normalize_total with its default target_sum=None uses each batch's "
            "median) and then concatenated. Bring every cell to one target sum first: `adata.X.data = "
            "np.expm1(adata.X.data)`, `sc.pp.normalize_total(adata, target_sum=1e4)`, `sc.pp.log1p(adata)`."
        )
    return (
        f"{where} is not log1p(normalize_total) of these genes with one target sum: the row sums of "
        f"expm1({where}) should all equal T = {T:.6g}, but cell {first} sums to {sums[bad[0]]:.6g} ({len(bad)} "
        f"cells in rows {rows.start}..{rows.stop - 1} differ, by unrelated amounts). Genes selected after "
        "normalizing (e.g. highly variable genes) or per-cell scaling cause this: pass the full log-normalized "
        "matrix, or raw counts with input='counts'."
    )


def integer_message(
    E: sparse.csr_matrix, T: float, library: np.ndarray, estimate: np.ndarray, cell: int, rows: slice, where: str,
    key: str | None,
) -> str:
    """The error for block row ``cell`` whose pseudo-counts ``expm1 · library / T`` are not integers."""
    at = rows.start + cell
    row = E[cell]
    if key is not None and first_non_integer(row / smallest_nonzero(row)[0]) is None:
        ratio = library[cell] / estimate[cell]
        why = (
            "more than the matrix's genes hold, so it also counts genes that are not in the matrix: it was "
            "computed before genes were removed (e.g. scanpy's total_counts from sc.pp.calculate_qc_metrics, then "
            "sc.pp.filter_genes or a gene subset, then normalize_total)"
            if ratio > 1 else
            "fewer than the matrix's own genes hold, so it is not these cells' total count (a number of genes such "
            "as n_genes_by_counts, a total over some of the genes, or a column of other cells)"
        )
        return (
            f"obs[{key!r}] does not match the library sizes {where} was normalized with: in cell {at} it holds "
            f"{library[cell]:.6g}, the values themselves give {estimate[cell]:.6g} counts; {why}. Leave "
            "library_size_key out: the library sizes are then read from the values (exact for the genes in the "
            "matrix, with a warning)."
        )
    k = _smallest_count(row)
    if key is None and k is not None:
        return (
            f"Cell {at} of {where} has no gene with exactly one count: its values are whole multiples of 1/{k} of "
            f"its smallest one (its smallest count is {k}), so its library size cannot be read from the values. "
            "Pass library_size_key= naming an obs column of total counts, or remove the cell."
        )
    after = f" with obs[{key!r}] as library sizes" if key is not None else ""
    return (
        f"{where} does not look like log1p(c · T / Σc) of integer counts c: in cell {at}, expm1({where}){after} "
        "does not give whole numbers, nor whole multiples of the cell's smallest value, so the values are not "
        "log-normalized counts (imputed, smoothed, batch-corrected or otherwise transformed). Pass raw counts "
        "with input='counts', or the log-normalized values from before that step (a layer, or .raw)."
    )


def _other_log_base(E: sparse.csr_matrix) -> int | None:
    """2 or 10 when ``b ** x - 1`` (``x = log1p(E)``) has one row sum for every nonempty row, else ``None``."""
    x = np.log1p(E.data)
    for base in (2, 10):
        S = sparse.csr_matrix((np.expm1(x * np.log(base)), E.indices, E.indptr), shape=E.shape)
        sums = np.asarray(S.sum(axis=1)).ravel()
        sums = sums[sums > 0]
        if len(sums) and np.abs(sums - np.median(sums)).max() <= SUM_TOL * np.median(sums):
            return base
    return None


def _groups(values: np.ndarray) -> list[float]:
    """Distinct values of ``values`` up to ``SUM_TOL`` (relative), sorted."""
    out: list[float] = []
    for v in np.sort(values):
        if not out or v - out[-1] > SUM_TOL * out[-1]:
            out.append(float(v))
    return out


def _smallest_count(row: sparse.csr_matrix, up_to: int = 9) -> int | None:
    """The smallest ``k ≤ up_to`` with ``k · row / min(row)`` integer (the cell's smallest count), else ``None``."""
    unit = row.data.min()
    for k in range(2, up_to + 1):
        if first_non_integer(row * (k / unit)) is None:
            return k
    return None


def smallest_nonzero(E: sparse.csr_matrix) -> np.ndarray:
    """Per row, the smallest stored value (``inf`` for an empty row)."""
    out = np.full(E.shape[0], np.inf)
    has = np.diff(E.indptr) > 0
    out[has] = np.minimum.reduceat(E.data, E.indptr[:-1][has])
    return out


def first_non_integer(C: sparse.csr_matrix) -> int | None:
    """The first row of ``C`` whose stored values are not integers in more than ``1 - INTEGER_SHARE`` of places."""
    if C.data.size == 0:
        return None
    off = (np.abs(C.data - np.rint(C.data)) > INTEGER_TOL).astype(np.int64)
    lengths = np.diff(C.indptr)
    cells = np.flatnonzero(lengths > 0)
    share_off = np.add.reduceat(off, C.indptr[cells]) / lengths[cells]
    bad = share_off > 1 - INTEGER_SHARE
    return int(cells[np.argmax(bad)]) if bad.any() else None
