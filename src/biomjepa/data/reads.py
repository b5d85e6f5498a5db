"""Plate-based read counts (``input="reads"``; corpus spec ``counts: reads``) on the scale of droplet UMIs.

Smart-seq, C1 and STRT data count *reads*, 0.2–2.9 M per cell, where droplet data count molecules
(UMIs, 2–10 k per cell). Tokenized alike, ``log1p(1e4 · c / total)``, the two reach the encoder on
different scales: in a read-count cell most observed genes carry a few reads out of millions, so 45–85 %
of its tokens fall below ``log 2`` (a droplet cell's smallest value is ``log1p(1e4 / total)`` ≈ 1.1–1.8),
and its library token reads ``log10(total)`` ≈ 5.3–6.5 against 3.0–4.3
(``f5d7c3d:benchmarks/evaluation/value_scale.py`` printed both per source).

:func:`molecule_equivalents` puts a read-count cell on the scale of a droplet cell with
:data:`~biomjepa.data.tokenize.SCALE` (10,000) molecules: counts per 10,000 (``1e4 · c / total``),
genes under one such unit dropped (they would be a fraction of a molecule in that cell), library size
10,000. The kept genes' values are exactly those of the raw read counts (``log1p(1e4 · c / total)``);
only the sub-molecule genes and the library token change. Deterministic: no sampling.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from .tokenize import SCALE

#: the input kinds of raw integer counts: droplet UMIs as they are, plate reads through :func:`molecule_equivalents`
COUNT_KINDS = ("umi", "reads")


def molecule_equivalents(counts: sparse.csr_matrix, totals: np.ndarray, scale: float = SCALE
                         ) -> tuple[sparse.csr_matrix, np.ndarray]:
    """``(counts per scale [n, V] CSR, totals [n] = scale)`` of read counts, units under 1 dropped.

    ``counts`` are vocabulary-space read counts and ``totals`` each cell's reads over all input genes
    (:func:`~biomjepa.data.tokenize.to_vocab_counts`). Tokenizing the result gives the kept genes the
    values of the raw reads and the library token ``log10(scale)``. A cell whose every mapped gene falls
    under one unit keeps its largest one, so no cell loses all its tokens.
    """
    counts = counts.tocsr().astype(np.float64)
    totals = np.asarray(totals, dtype=np.float64)
    per = sparse.diags(scale / np.maximum(totals, 1.0)) @ counts
    per = per.tocsr()
    keep = per.data >= 1.0
    lengths = np.diff(per.indptr)
    cs = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    kept = cs[per.indptr[1:]] - cs[per.indptr[:-1]]
    for i in np.flatnonzero((kept == 0) & (lengths > 0)):  # rare: a very shallow cell on the vocabulary
        a, b = per.indptr[i], per.indptr[i + 1]
        keep[a + int(np.argmax(per.data[a:b]))] = True
    data = np.where(keep, per.data, 0.0)
    out = sparse.csr_matrix((data, per.indices, per.indptr), shape=per.shape)
    out.eliminate_zeros()
    return out, np.full(len(totals), float(scale))


#: median library size above which raw counts look like plate-based reads (droplet cells hold 1–30 k molecules)
READS_LIKE = 100_000


def warn_if_reads(totals: np.ndarray, where: str) -> None:
    """Warn when counts read as droplet UMIs have the library sizes of plate-based read counts."""
    import warnings

    if len(totals) and float(np.median(totals)) > READS_LIKE:
        warnings.warn(
            f"{where}: the median library size is {np.median(totals):,.0f}, the depth of plate-based read counts "
            "(Smart-seq, C1, STRT), not of droplet molecules (UMIs). Read counts reach the model on another value "
            "scale; pass input='reads' (in a training corpus entry: counts: reads) to read them as "
            "molecule equivalents.", UserWarning, stacklevel=4)


#: median library size under which counts declared as reads look like droplet molecules (UMIs)
UMI_LIKE = 50_000


def warn_if_umis(totals: np.ndarray, where: str, corpus: bool = False) -> None:
    """Warn when counts declared as plate-based reads (``input='reads'``; a training ``corpus`` entry's ``counts:
    reads``) have the library sizes of droplet molecule counts."""
    import warnings

    if len(totals) and float(np.median(totals)) < UMI_LIKE:
        said, fix = ("`counts: reads` in its corpus entry", "remove `counts: reads` from the entry") if corpus else \
            ("input='reads'", "pass input='counts'")
        warnings.warn(
            f"{where}: declared as read counts ({said}), but the median library size of its first {len(totals):,} "
            f"cells is {np.median(totals):,.0f} (under {UMI_LIKE:,}), the depth of droplet molecule counts (UMIs), not "
            "of plate-based reads (0.2-3 M per cell). Read as reads, genes under one count per 10,000 are dropped; "
            f"{fix} for droplet data.", UserWarning, stacklevel=4)


def check_count_kind(kind, where: str) -> str:
    """``kind`` if it is one of :data:`COUNT_KINDS`, else an error naming ``where`` and the choices."""
    if kind not in COUNT_KINDS:
        raise ValueError(f"{where}={kind!r} is not a kind of counts; use 'umi' (droplet molecule counts) or "
                         "'reads' (plate-based read counts: Smart-seq, C1, STRT).")
    return kind


class ReadCounts:
    """An AnnData (or :class:`~biomjepa.data.anndata_source.RawCounts`) whose raw integer counts are reads.

    It shows the readers the same matrices (checked as raw counts) and tells
    :func:`~biomjepa.data.stream.iter_vocab_counts` to pass them through :func:`molecule_equivalents`.
    Build it with :func:`~biomjepa.data.anndata_source.counts_view` (``input="reads"``).
    """

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name):  # X, layers, var, var_names, obs, n_obs, n_vars, raw, where ...
        if name == "_inner":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._inner, name)
