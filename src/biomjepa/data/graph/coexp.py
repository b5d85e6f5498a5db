"""Corpus coexpression, the second source of the gene graph.

* :func:`coexpression_adjacency` — streamed centred random projections (256 dims) of the
  log-normalized corpus approximating |Pearson|; top-64 per gene, symmetrized by ``max``.
* :func:`build_from_h5ad` — the same over h5ad files of raw counts, read backed in row chunks.

numpy/scipy only; AnnData is imported inside :func:`build_from_h5ad` only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
from scipy import sparse

from .table import _symmetric_topk

logger = logging.getLogger(__name__)

SCALE = 1e4


# --------------------------------------------------------------------------- coexpression
class _ProjectionStream:
    """±1 projection rows for the global cell stream, drawn in fixed blocks of ``rows`` cells.

    Block ``b`` comes from ``SeedSequence([seed, b])``, so the sketch does not depend on chunking.
    """

    def __init__(self, n_proj: int, seed: int, rows: int = 1024) -> None:
        self.n_proj, self.seed, self.rows = n_proj, seed, rows
        self._b, self._R = -1, None

    def _block(self, b: int) -> np.ndarray:
        if b != self._b:
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, b]))
            self._b = b
            self._R = rng.integers(0, 2, size=(self.rows, self.n_proj), dtype=np.int8) * 2.0 - 1.0
        return self._R

    def take(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of the infinite projection matrix, float64 ``[n, n_proj]``."""
        parts, pos = [], start
        while pos < stop:
            b, off = divmod(pos, self.rows)
            end = min(stop - pos, self.rows - off)
            parts.append(self._block(b)[off : off + end])
            pos += end
        return np.concatenate(parts) if parts else np.zeros((0, self.n_proj))


def _lognorm(chunk) -> sparse.csr_matrix:
    counts, totals = chunk if isinstance(chunk, tuple) else (chunk, None)
    X = sparse.csr_matrix(counts, dtype=np.float64, copy=True)
    totals = np.asarray(X.sum(axis=1)).ravel() if totals is None else np.asarray(totals, np.float64)
    scale = np.repeat(SCALE / np.where(totals > 0, totals, 1.0), np.diff(X.indptr))
    X.data = np.log1p(X.data * scale)
    return X


def coexpression_adjacency(
    chunks: Iterable,
    V: int,
    *,
    n_proj: int = 256,
    top_k: int = 64,
    seed: int = 0,
    block: int = 2048,
    min_cells: int = 1,
) -> sparse.csr_matrix:
    """Approximate-|Pearson| coexpression adjacency ``[V, V]`` (float32, symmetric), streamed.

    Reading of the paper: each cell is log-normalized, ``x = log1p(1e4 c / total)`` (``total`` =
    the chunk's row sums, or the totals given with it). Gene ``g``'s vector over all ``N`` cells is
    sketched with a shared random ±1 matrix ``R [N, n_proj]``: ``S[g] = Σ_chunks R_chunkᵀ X_chunk[:, g]``,
    with ``R``'s rows drawn in fixed blocks of 1,024 global rows from ``SeedSequence([seed, block])``
    (independent of chunk sizes). The per-gene sums and ``colsum(R)`` are accumulated too, so the
    sketch of the *centred* vector is exact afterwards: ``S[g] − mean_g · colsum(R)``. The |cosine|
    between centred sketches approximates |Pearson| (Johnson–Lindenstrauss). Exact top-``k`` per gene
    over the sketches in row blocks of ``block`` genes, then symmetrized by ``max``. Genes seen in
    fewer than ``min_cells`` cells (or with zero variance) get no neighbours and are nobody's neighbour.
    The corpus is never held in memory: state is ``O(V · n_proj)``.

    Parameters
    ----------
    chunks
        Iterable of raw-count CSR chunks in vocabulary space ``[n, V]``, or ``(counts, totals)`` pairs.
    """
    proj = _ProjectionStream(n_proj, seed)
    S = np.zeros((V, n_proj))
    gsum, ncell, colsum, N = np.zeros(V), np.zeros(V, np.int64), np.zeros(n_proj), 0
    for chunk in chunks:
        X = _lognorm(chunk)
        if X.shape[1] != V:
            raise ValueError(f"Coexpression chunks must be in vocabulary space [n, {V}]; got {X.shape}.")
        R = proj.take(N, N + X.shape[0])
        S += np.asarray(X.T @ R)
        gsum += np.asarray(X.sum(axis=0)).ravel()
        ncell += np.bincount(X.indices, minlength=V)
        colsum += R.sum(axis=0)
        N += X.shape[0]
    if N == 0:
        raise ValueError("coexpression_adjacency got no cells.")
    S -= np.outer(gsum / N, colsum)
    norm = np.linalg.norm(S, axis=1)
    ok = (ncell >= min_cells) & (norm > 1e-12)
    Sn = (S / np.where(ok, norm, 1.0)[:, None]).astype(np.float32)
    Sn[~ok] = 0.0
    logger.info("coexpression: %d cells, %d/%d genes with a sketch", N, ok.sum(), V)
    return _sketch_topk(Sn, ok, top_k, block)


def _sketch_topk(Sn: np.ndarray, ok: np.ndarray, top_k: int, block: int) -> sparse.csr_matrix:
    V = len(Sn)
    valid = np.flatnonzero(ok)
    k = min(top_k, len(valid) - 1)
    if k <= 0:
        return sparse.csr_matrix((V, V), dtype=np.float32)
    rows, cols, vals = [], [], []
    for start in range(0, len(valid), block):
        q = valid[start : start + block]
        sims = np.abs(Sn[q] @ Sn[valid].T)
        sims[np.arange(len(q)), np.arange(start, start + len(q))] = -1.0  # no self-edge
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        rows.append(np.repeat(q, k))
        cols.append(valid[part].ravel())
        vals.append(np.maximum(np.take_along_axis(sims, part, axis=1).ravel(), 1e-9))
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    return _symmetric_topk(r, c, v, V, top_k)


def build_from_h5ad(
    paths: Sequence[str | Path],
    *,
    tokens: Sequence[np.ndarray] | Callable[[np.ndarray], np.ndarray] | None = None,
    vocab_size: int | None = None,
    layer: str | None = None,
    chunk: int = 4096,
    **kwargs,
) -> sparse.csr_matrix:
    """:func:`coexpression_adjacency` over h5ad files of raw counts, read backed in row chunks.

    ``tokens``: one var → vocabulary index array per file (−1 unmapped), or a callable on
    ``var_names``. Default: ``var["biomjepa_token"]`` when the file has it (``bj.pp.map_vocab``),
    else human identifiers resolved with the same code as ``bj.pp.map_vocab``
    (:func:`biomjepa.data.idtable.resolve_identifiers`). Rows come from the package's one reader,
    :func:`biomjepa.data.stream.iter_vocab_counts` (raw counts checked, mapped onto the vocabulary;
    duplicate-mapped columns summed; library size = total over all input columns). Other keyword
    arguments go to :func:`coexpression_adjacency`.
    """
    import anndata as ad

    from ..._keys import TOKEN_KEY
    from ..idtable import resolve_identifiers
    from ..stream import iter_vocab_counts
    from ..vocab import Vocab

    vocab_size = vocab_size or Vocab.default().size

    def token_of(i, adata):
        if tokens is None:
            if TOKEN_KEY in adata.var:
                return adata.var[TOKEN_KEY].to_numpy()
            return resolve_identifiers(adata.var_names.to_numpy()).token
        return tokens(adata.var_names.to_numpy()) if callable(tokens) else tokens[i]

    def stream():
        for i, p in enumerate(paths):
            adata = ad.read_h5ad(p, backed="r")
            tok = np.asarray(token_of(i, adata), dtype=np.int64)
            logger.info("coexpression: %s, %d/%d vars mapped", p, (tok >= 0).sum(), len(tok))
            try:
                for _, counts, totals in iter_vocab_counts(
                    adata, layer=layer, chunk=chunk, vocab_size=vocab_size, token=tok, where=f"{p}:{layer or 'X'}"
                ):
                    yield counts, totals
            finally:
                adata.file.close()

    return coexpression_adjacency(stream(), vocab_size, **kwargs)
