"""AnnData / MuData plumbing shared by the readers: the modality to use, the vocabulary column,
and writing a modality's per-cell results back onto its MuData.

Rows are read by :mod:`biomjepa.data.stream`, the package's one AnnData → tokens reader.
"""

from __future__ import annotations

import numpy as np

from .._keys import TOKEN_KEY


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
