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


class RawCounts:
    """``adata.raw`` as the readers see an AnnData: ``X``, ``var`` and ``var_names`` of ``.raw``, the cells of ``adata``.

    What ``use_raw=True`` reads (scanpy's convention); nothing is copied (a backed ``.raw`` stays on disk),
    and :func:`biomjepa.pp.map_vocab` with ``use_raw=True`` writes its column into ``adata.raw.var``.
    """

    where = "raw.X"  # how errors name the matrix

    def __init__(self, adata) -> None:
        self._adata = adata
        self.layers: dict = {}

    @property
    def X(self):
        return self._adata.raw.X

    @property
    def var(self):
        return self._adata.raw.var

    @property
    def var_names(self):
        return self._adata.raw.var_names

    @property
    def n_obs(self) -> int:
        return self._adata.n_obs

    @property
    def n_vars(self) -> int:
        return self._adata.raw.n_vars


def counts_view(
    adata,
    *,
    layer: str | None = None,
    use_raw: bool = False,
    input: str = "counts",
    library_size_key: str | None = None,
):
    """What the readers read: ``adata``, its ``.raw`` (:class:`RawCounts`, ``use_raw=True``), or either seen
    through :class:`~biomjepa.data.lognorm.LogNormalized` (``input="lognorm"``); clear errors otherwise."""
    check_source_args(layer=layer, use_raw=use_raw, input=input, library_size_key=library_size_key)
    source = adata
    if use_raw:
        if getattr(adata, "raw", None) is None:
            raise ValueError(
                "use_raw=True, but adata.raw is None (no .raw was kept). Pass use_raw=False and, if the counts "
                "are in a layer, layer= naming it."
            )
        source = RawCounts(adata)
    if input == "counts":
        return source
    from .lognorm import LogNormalized, estimate_warning

    if library_size_key is None:
        estimate_warning()
        return LogNormalized(source, None, None)
    return LogNormalized(source, library_sizes(adata, library_size_key), library_size_key)


def check_source_args(*, layer: str | None, use_raw: bool, input: str, library_size_key: str | None) -> None:
    """The arguments of :func:`counts_view` that need no data, checked (also before any work, by the atlas)."""
    if not isinstance(use_raw, bool):
        raise TypeError(f"use_raw must be True or False, got {use_raw!r}.")
    if input not in ("counts", "lognorm"):
        raise ValueError(f"input={input!r} is not an input kind; use 'counts' (raw counts) or 'lognorm' "
                         "(log1p(normalize_total) values).")
    if library_size_key is not None and input != "lognorm":
        raise ValueError(f"library_size_key={library_size_key!r} is only used with input='lognorm' (raw counts "
                         "carry their library sizes); drop it or pass input='lognorm'.")
    if use_raw and layer is not None:
        raise ValueError(
            f"use_raw=True reads adata.raw.X and cannot be combined with layer={layer!r}: pass either "
            "use_raw=True or layer=, not both."
        )


def library_sizes(adata, key: str) -> np.ndarray:
    """``obs[key]`` as positive, finite float64 library sizes, or an error naming ``library_size_key``."""
    import pandas as pd

    if key not in adata.obs:
        numeric = [c for c in adata.obs.columns if pd.api.types.is_numeric_dtype(adata.obs[c])]
        raise KeyError(f"library_size_key={key!r} is not a column of adata.obs (numeric columns: {numeric}).")
    values = np.asarray(adata.obs[key])
    if not np.issubdtype(values.dtype, np.number) or np.issubdtype(values.dtype, np.bool_):
        raise ValueError(f"library_size_key={key!r}: obs[{key!r}] must hold numbers (total counts per cell).")
    values = values.astype(np.float64)
    if not (np.isfinite(values).all() and (values > 0).all()):
        raise ValueError(
            f"library_size_key={key!r}: obs[{key!r}] must be a positive, finite total count for every cell "
            f"({int((~np.isfinite(values) | (values <= 0)).sum())} cells are not)."
        )
    return values


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
    """The ``var`` vocabulary-index column written by :func:`biomjepa.pp.map_vocab` (``.raw.var`` for :class:`RawCounts`)."""
    if key not in adata.var:
        if isinstance(adata, RawCounts):
            hint = " (adata.var has it: pass use_raw=False to read X)" if key in adata._adata.var else ""
            raise KeyError(f"Did not find .raw.var[{key!r}]. Run `bj.pp.map_vocab(adata, use_raw=True)` first{hint}.")
        raw = getattr(adata, "raw", None)
        if raw is not None and key in raw.var:
            raise KeyError(
                f"Did not find .var[{key!r}], but .raw.var has it: `bj.pp.map_vocab(adata, use_raw=True)` mapped the "
                "genes of adata.raw. Pass use_raw=True to read the counts there, or run `bj.pp.map_vocab(adata)` to "
                "read X."
            )
        raise KeyError(f"Did not find .var[{key!r}]. Run `bj.pp.map_vocab(adata)` first.")
    token = adata.var[key].to_numpy()
    if not np.issubdtype(token.dtype, np.integer):
        raise TypeError(f".var[{key!r}] must hold integer vocabulary indices; rerun `bj.pp.map_vocab`.")
    if (token >= 0).sum() == 0:
        raise ValueError(f".var[{key!r}] maps no gene to the vocabulary; check `bj.pp.map_vocab`'s report.")
    return token.astype(np.int64)
