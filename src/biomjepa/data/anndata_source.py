"""Read raw counts out of AnnData / backed AnnData / MuData in row chunks, in vocabulary space.

The only module of the inference path that touches AnnData objects; everything downstream sees
``scipy.sparse`` matrices and :class:`~biomjepa.data.tokenize.TokenizedCells`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from scipy import sparse

from .._keys import TOKEN_KEY
from .tokenize import TokenizedCells, check_counts, to_vocab_counts, tokenize

CHUNK = 4096


def get_modality(data, mod: str | None = None):
    """Return the AnnData to use: ``data`` itself, or a MuData modality (``mod`` or ``"rna"``)."""
    if hasattr(data, "mod"):
        key = mod or "rna"
        if key not in data.mod:
            raise KeyError(f"MuData has no modality {key!r} (has {list(data.mod)}); pass `mod=`.")
        return data.mod[key]
    if mod is not None:
        raise ValueError("`mod=` is only meaningful for MuData input.")
    return data


def write_joint_obsm(data, mod: str | None, key: str, values: np.ndarray) -> None:
    """Copy a modality's ``[n_mod, d]`` per-cell ``values`` into ``data.obsm[key]`` when ``data`` is a MuData.

    muon keeps embeddings that describe the cells on the MuData itself (``mdata.obsm["X_mofa"]``,
    ``mdata.obsm["X_umap"]``); cells missing from the modality get NaN, as in ``muon.tl.mofa``.
    A no-op for AnnData input.
    """
    if not hasattr(data, "mod"):
        return
    where = np.asarray(data.obsmap[mod or "rna"], dtype=np.int64)  # 1-based row in the modality, 0 = absent
    out = np.full((data.n_obs, values.shape[1]), np.nan, dtype=values.dtype)
    out[where > 0] = values[where[where > 0] - 1]
    data.obsm[key] = out


def token_column(adata, key: str = TOKEN_KEY) -> np.ndarray:
    """The ``var`` vocabulary-index column written by :func:`biomjepa.pp.map_vocab`."""
    if key not in adata.var:
        raise KeyError(f"Did not find .var[{key!r}]. Run `bj.pp.map_vocab(adata)` first.")
    token = adata.var[key].to_numpy()
    if not np.issubdtype(token.dtype, np.integer):
        raise TypeError(f".var[{key!r}] must hold integer vocabulary indices; rerun `bj.pp.map_vocab`.")
    if (token >= 0).sum() == 0:
        raise ValueError(f".var[{key!r}] maps no gene to the vocabulary; check `bj.pp.map_vocab`'s report.")
    return token.astype(np.int64)


def _matrix(adata, layer: str | None):
    if layer is None:
        return adata.X
    if layer not in adata.layers:
        raise KeyError(f"Layer {layer!r} not found; available layers: {list(adata.layers)}.")
    return adata.layers[layer]


def iter_rows(adata, layer: str | None = None, chunk: int = CHUNK) -> Iterator[tuple[slice, object]]:
    """Yield ``(row slice, block)`` of raw counts; backed files are read one chunk at a time."""
    X = _matrix(adata, layer)
    n = adata.n_obs
    for start in range(0, n, chunk):
        sl = slice(start, min(start + chunk, n))
        block = X[sl]
        if not sparse.issparse(block) and not isinstance(block, np.ndarray):
            block = sparse.csr_matrix(block.to_memory()) if hasattr(block, "to_memory") else np.asarray(block)
        yield sl, block


def tokenize_adata(
    adata, *, layer: str | None = None, token_key: str = TOKEN_KEY, chunk: int = CHUNK
) -> TokenizedCells:
    """Tokenize every cell of ``adata`` (validating counts chunk by chunk, never densifying X)."""
    from .vocab import Vocab

    token = token_column(adata, token_key)
    V = Vocab.default().size
    parts = []
    where = "X" if layer is None else f"layers[{layer!r}]"
    for _, block in iter_rows(adata, layer, chunk):
        check_counts(block, where=where)
        counts, totals = to_vocab_counts(block, token, V)
        parts.append((counts, totals))
    counts = sparse.vstack([p[0] for p in parts], format="csr") if parts else sparse.csr_matrix((0, V))
    totals = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
    return tokenize(counts, totals)
