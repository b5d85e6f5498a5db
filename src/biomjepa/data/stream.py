"""The one streaming reader: AnnData rows → checked, vocabulary-mapped, tokenized chunks.

Whatever holds the counts (an in-memory dense or sparse ``X``, a backed h5ad, a MuData modality
picked with :func:`~biomjepa.data.anndata_source.get_modality`, a dask array from anndata's lazy
readers, a layer of any of these, or their ``.raw`` seen through
:class:`~biomjepa.data.anndata_source.RawCounts` for ``use_raw=True``), every reader of raw counts in
the package goes through the three generators here, chunk by chunk, and never holds more than one
chunk of the input:

- :func:`iter_counts` yields ``(rows, block)`` raw blocks (scipy sparse or numpy);
- :func:`iter_vocab_counts` adds the raw-count check and the map onto the vocabulary
  (``(rows, counts [n, V] CSR, totals [n])``; what corpus preparation stores);
- :func:`iter_tokenized` adds the tokenizer (``(rows, TokenizedCells)``; what every ``tl`` tool
  and the training probe consume);
- :func:`iter_selected` / :func:`gather` do the same for chosen rows only (sampled cells, a
  training split), reading only the blocks that hold them.

``rows`` is always a ``slice`` of absolute row positions in the AnnData.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import numpy as np
from scipy import sparse

from .._keys import TOKEN_KEY
from .anndata_source import RawCounts, token_column
from .backends import is_dask, materialize
from .lognorm import LogNormalized
from .tokenize import TokenizedCells, check_counts, concat_cells, to_vocab_counts, tokenize

CHUNK = 4096


def count_matrix(adata, layer: str | None = None):
    """``adata.X`` or ``adata.layers[layer]``, with an error naming the layers that exist."""
    if layer is None:
        if adata.X is None:
            raw = " or use_raw=True (adata.raw holds a matrix)" if getattr(adata, "raw", None) is not None else ""
            raise ValueError(f"adata.X is None (this AnnData holds no main matrix): pass `layer=` naming the layer of "
                             f"raw counts (layers: {list(adata.layers)}){raw}, or set adata.X to the counts.")
        return adata.X
    if layer not in adata.layers:
        raise KeyError(f"Layer {layer!r} not found; available layers: {list(adata.layers)}. Pass `layer=` one of them.")
    return adata.layers[layer]


def where_label(layer: str | None, adata=None) -> str:
    """How error messages name the matrix being read (``X``, ``layers['counts']`` or ``raw.X``)."""
    if isinstance(adata, RawCounts):
        return RawCounts.where
    return "X" if layer is None else f"layers[{layer!r}]"


def _raw_hint(adata, mapped: bool = True, tool: bool = True) -> str:
    """A sentence pointing at ``use_raw=True`` when ``X``/a layer is refused but ``adata.raw`` holds counts
    (and at mapping its genes first when the reader needs ``mapped`` genes); for a corpus file (not a
    ``tool``, which reads ``X`` or a layer only), at writing those counts into a file of their own."""
    raw = None if isinstance(adata, RawCounts) else getattr(adata, "raw", None)
    if raw is None:
        return ""
    try:
        check_counts(materialize(raw.X[: min(adata.n_obs, CHUNK)]), where="raw.X")
    except (ValueError, TypeError, IndexError):
        return ""
    if not tool:
        return (" adata.raw.X does hold raw counts, but corpus files are read from X or a layer: write them to a "
                "file of their own first, e.g. `adata.raw.to_adata().write_h5ad('counts.h5ad')`.")
    after = ", after mapping its genes with `bj.pp.map_vocab(adata, use_raw=True)`" if mapped else ""
    return f" adata.raw.X does hold raw counts (scanpy's habit of keeping them in .raw): pass use_raw=True{after}."


_LOGNORM_HINT = (
    " If it holds log1p(normalize_total) values (sc.pp.normalize_total + sc.pp.log1p), pass input='lognorm', "
    "with library_size_key= naming an obs column of total counts if there is one."
)


def _row_bounds(X, chunk: int, start: int, stop: int) -> list[tuple[int, int]]:
    """Row ranges to read: ``chunk`` rows, cut at dask's own chunk edges so no block is read twice."""
    edges = set(range(start, stop, chunk))
    if is_dask(X):
        edges |= {int(e) for e in np.cumsum((0, *tuple(X.chunks[0]))) if start <= e < stop}
    cuts = sorted(edges | {stop})
    return [(a, b) for a, b in pairwise(cuts) if b > a]


def iter_counts(
    adata, *, layer: str | None = None, chunk: int = CHUNK, start: int = 0, stop: int | None = None
) -> Iterator[tuple[slice, object]]:
    """Yield ``(rows, block)`` of the raw matrix, ``chunk`` rows at a time, from ``start`` to ``stop``.

    Backed and dask-backed matrices are read one block at a time; nothing is densified (a dense
    ``X`` stays dense, one block at a time). Before each block, a stop signal that a command recorded is acted on
    (:func:`biomjepa._stops.stop_point`).
    """
    from .._stops import stop_point

    X = count_matrix(adata, layer)
    n = adata.n_obs
    stop = n if stop is None else min(int(stop), n)
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of rows, got {chunk!r}.")
    for a, b in _row_bounds(X, int(chunk), int(start), stop):
        stop_point()  # a stop signal a command recorded acts here, between blocks (biomjepa._stops)
        yield slice(a, b), materialize(X[a:b])


def iter_vocab_counts(
    adata,
    *,
    layer: str | None = None,
    token_key: str = TOKEN_KEY,
    chunk: int = CHUNK,
    start: int = 0,
    stop: int | None = None,
    vocab_size: int | None = None,
    token: np.ndarray | None = None,
    where: str | None = None,
    reads: bool = False,
) -> Iterator[tuple[slice, sparse.csr_matrix, np.ndarray]]:
    """Yield ``(rows, counts [n, V] CSR float64, totals [n])``: checked raw counts on the vocabulary.

    Every stored value of every block is checked (:func:`~biomjepa.data.tokenize.check_counts`);
    ``totals`` are library sizes over all input genes, mapped or not. ``adata`` may be a
    :class:`~biomjepa.data.anndata_source.RawCounts` (``use_raw=True``) or a
    :class:`~biomjepa.data.lognorm.LogNormalized` (``input="lognorm"``, whose counts are checked as they
    are made); a refused matrix's error points at ``use_raw=True`` when ``adata.raw`` holds counts. ``token`` (``[n_vars]``
    vocabulary index, −1 unmapped) replaces ``var[token_key]`` for callers that map genes
    themselves (the coexpression graph over unmapped files); ``where`` names the matrix in errors
    (default ``X`` / ``layers[...]``; corpus preparation adds the file name). ``reads`` (or a
    :class:`~biomjepa.data.reads.ReadCounts` ``adata``, ``input="reads"``): plate-based read counts, yielded
    as :func:`~biomjepa.data.reads.molecule_equivalents`.
    """
    from .reads import ReadCounts, molecule_equivalents, warn_if_reads, warn_if_umis
    from .vocab import Vocab

    token = token_column(adata, token_key, vocab_size) if token is None else np.asarray(token, dtype=np.int64)
    V = vocab_size or Vocab.default().size
    reads = reads or isinstance(adata, ReadCounts)
    tool, warned = where is None, False
    for rows, block in iter_checked_counts(adata, layer=layer, chunk=chunk, start=start, stop=stop, where=where):
        counts, totals = to_vocab_counts(block, token, V)
        if (tool or reads) and not warned and not isinstance(adata, LogNormalized):  # corpus files: reads too
            if reads:
                warn_if_umis(totals, where_label(layer, adata) if tool else where, corpus=not tool)
            else:
                warn_if_reads(totals, where_label(layer, adata))
            warned = True
        yield (rows, *molecule_equivalents(counts, totals)) if reads else (rows, counts, totals)


def iter_checked_counts(
    adata, *, layer: str | None = None, chunk: int = CHUNK, start: int = 0, stop: int | None = None,
    where: str | None = None, mapped: bool = True,
) -> Iterator[tuple[slice, object]]:
    """:func:`iter_counts` with every block checked as raw counts (what ``bj.bench`` baselines read).

    A :class:`~biomjepa.data.lognorm.LogNormalized` ``adata`` yields its pseudo-counts, checked as they
    are made. A refused block's error points at ``use_raw=True`` when ``adata.raw`` holds counts, else
    (for a tool, i.e. ``where`` not given) at ``input='lognorm'`` for non-integer values; ``mapped=False``
    for a reader that does not need ``bj.pp.map_vocab`` (the baselines).
    """
    tool = where is None  # a tool, which also takes input="lognorm" (corpus preparation does not)
    where = where or where_label(layer, adata)
    for rows, block in iter_counts(adata, layer=layer, chunk=chunk, start=start, stop=stop):
        if not isinstance(adata, LogNormalized):  # its pseudo-counts are checked as they are made
            try:
                check_counts(block, where=where)
            except ValueError as err:
                hint = _raw_hint(adata, mapped, tool) or (_LOGNORM_HINT if tool and "not look like raw counts" in str(err) else "")
                raise ValueError(f"{err}{hint}") from None
        yield rows, block


def _tokenize(counts: sparse.csr_matrix, totals: np.ndarray, rows: slice) -> TokenizedCells:
    """:func:`~biomjepa.data.tokenize.tokenize`, with errors naming the block's absolute rows."""
    try:
        return tokenize(counts, totals)
    except ValueError as err:
        raise ValueError(f"Cells {rows.start}..{rows.stop - 1}: {err}") from None


def iter_tokenized(
    adata,
    *,
    layer: str | None = None,
    token_key: str = TOKEN_KEY,
    chunk: int = CHUNK,
    start: int = 0,
    stop: int | None = None,
    token: np.ndarray | None = None,
) -> Iterator[tuple[slice, TokenizedCells]]:
    """Yield ``(rows, TokenizedCells)`` chunk by chunk: the package's one AnnData → tokens loop.

    ``token`` (``[n_vars]`` vocabulary index, −1 unmapped) replaces ``var[token_key]``, as in
    :func:`iter_vocab_counts`.

    Raises
    ------
    ValueError
        Naming the cells (absolute positions) when a chunk holds a cell with no mapped gene.
    """
    for rows, counts, totals in iter_vocab_counts(
        adata, layer=layer, token_key=token_key, chunk=chunk, start=start, stop=stop, token=token
    ):
        yield rows, _tokenize(counts, totals, rows)


def iter_selected(
    adata,
    rows: np.ndarray,
    *,
    layer: str | None = None,
    token_key: str = TOKEN_KEY,
    chunk: int = CHUNK,
) -> Iterator[tuple[np.ndarray, TokenizedCells]]:
    """Yield ``(positions, TokenizedCells)`` for the cells ``rows`` only, chunk by chunk.

    ``rows`` are sorted, unique absolute row positions; ``positions`` index into ``rows``. Only
    the ``chunk``-row blocks that hold a requested row are read, and only the requested rows of a
    block are tokenized, so memory is one block plus the cells of one block.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) and (np.any(np.diff(rows) <= 0) or rows[0] < 0 or rows[-1] >= adata.n_obs):
        raise ValueError(f"rows must be sorted, unique positions in 0..{adata.n_obs - 1}.")
    for start in np.unique(rows // chunk) * chunk:
        for sl, counts, totals in iter_vocab_counts(
            adata, layer=layer, token_key=token_key, chunk=chunk, start=int(start), stop=int(start) + chunk
        ):
            lo, hi = np.searchsorted(rows, [sl.start, sl.stop])
            if hi == lo:
                continue
            local = rows[lo:hi] - sl.start
            yield np.arange(lo, hi), _tokenize(counts[local], totals[local], sl)


def gather(
    adata, rows: np.ndarray, *, layer: str | None = None, token_key: str = TOKEN_KEY, chunk: int = CHUNK
) -> TokenizedCells:
    """The cells ``rows`` (sorted, unique) as one :class:`TokenizedCells`, read chunk by chunk.

    For the few cells a tool keeps in memory on purpose (a sample of cells to ablate, the
    training split of fine-tuning); everything else streams with :func:`iter_tokenized`.
    """
    parts = [cells for _, cells in iter_selected(adata, rows, layer=layer, token_key=token_key, chunk=chunk)]
    return concat_cells(parts)

