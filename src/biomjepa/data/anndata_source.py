"""AnnData / MuData plumbing shared by the readers: the modality to use, what of it is read, the vocabulary column.

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
    reads_raw = True  # what biomjepa.data.mapping looks for (it does not import this module)

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
    through :class:`~biomjepa.data.lognorm.LogNormalized` (``input="lognorm"``) or
    :class:`~biomjepa.data.reads.ReadCounts` (``input="reads"``: plate-based read counts); clear errors otherwise."""
    check_source_args(layer=layer, use_raw=use_raw, input=input, library_size_key=library_size_key)
    if layer is not None and not use_raw and layer not in adata.layers:  # before a tool makes a view its own
        raise KeyError(f"Layer {layer!r} not found; available layers: {list(adata.layers)}. Pass `layer=` one of them.")
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
    if input == "reads":
        from .reads import ReadCounts

        return ReadCounts(source)
    from .lognorm import LogNormalized, estimate_warning

    if library_size_key is None:
        estimate_warning()  # each cell's library size is estimated from its values
    library = None if library_size_key is None else library_sizes(adata, library_size_key)
    return LogNormalized(source, library, library_size_key)


def check_source_args(*, layer: str | None, use_raw: bool, input: str, library_size_key: str | None) -> None:
    """The arguments of :func:`counts_view` that need no data, checked (also before any work, by the atlas)."""
    if not isinstance(use_raw, bool):
        raise TypeError(f"use_raw must be True or False, got {use_raw!r}.")
    if input not in ("counts", "reads", "lognorm"):
        raise ValueError(f"input={input!r} is not an input kind; use 'counts' (raw counts, droplet UMIs), 'reads' "
                         "(raw plate-based read counts: Smart-seq, C1, STRT) or 'lognorm' (log1p(normalize_total) "
                         "values).")
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


def token_column(adata, key: str = TOKEN_KEY, vocab_size: int | None = None) -> np.ndarray:
    """The ``var`` vocabulary-index column written by :func:`biomjepa.pp.map_vocab` (``.raw.var`` for :class:`RawCounts`),
    checked: integers, at least one gene mapped, none past the vocabulary (``vocab_size``, default the bundled one's).
    Without the default column, the one the latest ``map_vocab`` wrote (:func:`~biomjepa.data.mapping.mapped_key`)."""
    from .mapping import mapped_key, missing_hint

    key = mapped_key(adata, key)
    if key not in adata.var:
        if isinstance(adata, RawCounts):
            hint = " (adata.var has it: pass use_raw=False to read X)" if mapped_key(adata._adata, key) in \
                adata._adata.var else ""
            raise KeyError(f"Did not find .raw.var[{key!r}]. Run `bj.pp.map_vocab(adata, use_raw=True)` first{hint}."
                           f"{missing_hint(adata)}")
        raw = getattr(adata, "raw", None)
        if raw is not None and mapped_key(RawCounts(adata), key) in raw.var:
            raise KeyError(
                f"Did not find .var[{key!r}], but .raw.var has it: `bj.pp.map_vocab(adata, use_raw=True)` mapped the "
                "genes of adata.raw. Pass use_raw=True to read the counts there, or run `bj.pp.map_vocab(adata)` to "
                "read X."
            )
        raise KeyError(f"Did not find .var[{key!r}]. Run `bj.pp.map_vocab(adata)` first.{missing_hint(adata)}")
    token = adata.var[key].to_numpy()
    if not np.issubdtype(token.dtype, np.integer):
        raise TypeError(f".var[{key!r}] must hold integer vocabulary indices; rerun `bj.pp.map_vocab`.")
    if (token >= 0).sum() == 0:
        raise ValueError(f".var[{key!r}] maps no gene to the vocabulary; check `bj.pp.map_vocab`'s report.")
    if vocab_size is None:
        from .vocab import Vocab

        vocab_size = Vocab.default().size
    if token.max() >= vocab_size or token.min() < -1:
        bad = int(((token >= vocab_size) | (token < -1)).sum())
        raise ValueError(f".var[{key!r}] holds {bad} value(s) outside the vocabulary's indices (-1 = unmapped, 0.."
                         f"{vocab_size - 1}; found {int(token.min())}..{int(token.max())}): it was not written by "
                         "`bj.pp.map_vocab` for this vocabulary. Run `bj.pp.map_vocab(adata)` again.")
    return token.astype(np.int64)
