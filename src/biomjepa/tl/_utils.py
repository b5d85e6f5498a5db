"""Argument checks shared by the ``tl`` tools (one wording for one mistake)."""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from .._keys import TOKEN_KEY
from .._settings import settings


def check_batch_size(batch_size, *, default: int | None = None) -> int:
    """``batch_size`` as a positive ``int`` (``None`` → ``default`` or ``bj.settings.batch_size``).

    Refuses ``0``, negatives, non-integers (``2.7``) and booleans instead of silently replacing them.
    """
    if batch_size is None:
        return int(default if default is not None else settings.batch_size)
    if isinstance(batch_size, bool | np.bool_) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(
            f"batch_size must be a positive integer (cells per forward pass), got {batch_size!r}. "
            "Pass e.g. batch_size=64, or None for bj.settings.batch_size."
        )
    return int(batch_size)


def check_copy(adata, copy: bool) -> None:
    """``adata`` is an AnnData; ``copy=True`` on a backed one would load it whole through anndata: say so instead."""
    from .._checks import check_adata

    check_adata(adata)
    if copy and getattr(adata, "isbacked", False):
        raise ValueError(
            "copy=True is not supported for a backed AnnData (it would copy the whole file into memory). "
            "Either load it first (`adata = adata.to_memory()`) or keep copy=False: results are written "
            "into the backed object's obs/obsm/uns in memory."
        )


def actual_if_view(adata, tool: str) -> bool:
    """Make an in-memory view an AnnData of its own now, before the work, with one warning saying so.

    anndata would do the same at the first write, after minutes of work, with its own
    ``ImplicitModificationWarning`` (scanpy's tools behave so). The parent AnnData is unchanged; the values are the
    same. Returns whether ``adata`` was a view (the caller then re-reads what it took from it).
    """
    from anndata import AnnData

    if not (isinstance(adata, AnnData) and adata.is_view and not adata.isbacked):
        return False
    warnings.warn(
        f"`adata` is a view (a subset of another AnnData): {tool} writes its results into it, so it is made an "
        "AnnData of its own now (the parent AnnData is unchanged), as scanpy's tools do. Pass `adata[mask].copy()` "
        "to keep this warning away.",
        UserWarning,
        stacklevel=3,
    )
    adata._init_as_actual(adata.copy())  # what anndata (and scanpy's view_to_actual) do on a write into a view
    return True


def mapped_modality(adata, mod: str | None, token_key: str = TOKEN_KEY):
    """The AnnData a tool reads (``adata`` or a MuData modality), checked for ``bj.pp.map_vocab``'s column.

    For a MuData the error names the modality that lacks the column and the modalities that have it.
    """
    from ..data.anndata_source import get_modality, token_column
    from ..data.mapping import mapped_key

    target = get_modality(adata, mod)
    token_key = mapped_key(target, token_key)
    if hasattr(adata, "mod") and token_key not in target.var:
        name = mod or "rna"
        have = [k for k, m in adata.mod.items() if token_key in m.var]
        hint = f" Modalities that have it: {have}; pass `mod=` one of them." if have else ""
        raise KeyError(
            f"MuData modality {name!r} has no .var[{token_key!r}]. Run `bj.pp.map_vocab(mdata, mod={name!r})` "
            f"first.{hint}"
        )
    _current(target, token_column(target, token_key), token_key)
    return target


def _current(adata, token: np.ndarray, token_key: str) -> None:
    from ..data.anndata_source import check_report_current

    check_report_current(adata, token, token_key)


def mapped_source(
    adata,
    mod: str | None,
    *,
    layer: str | None,
    use_raw: bool,
    input: str = "counts",
    library_size_key: str | None = None,
    token_key: str = TOKEN_KEY,
):
    """``(target, source)``: the AnnData a tool writes into, and what it reads counts from.

    ``source`` is ``target``, its ``.raw`` (``use_raw=True``,
    :class:`~biomjepa.data.anndata_source.RawCounts`), or either read as log-normalized values
    (``input="lognorm"``, :class:`~biomjepa.data.lognorm.LogNormalized`); checked for ``bj.pp.map_vocab``'s
    column (:func:`~biomjepa.data.mapping.check_mapping` says which one is read when there is a choice).
    """
    from ..data.anndata_source import counts_view, get_modality, token_column
    from ..data.mapping import check_mapping, mapped_key

    target = get_modality(adata, mod)
    source = counts_view(target, layer=layer, use_raw=use_raw, input=input, library_size_key=library_size_key)
    if use_raw:
        key = mapped_key(source, token_key)
        _current(target, token_column(source, key), key)
    else:
        mapped_modality(adata, mod, token_key)  # its errors name the MuData modalities that are mapped
    check_mapping(source)
    return target, source


def input_params(source, input: str, library_size_key: str | None) -> dict:
    """What a tool records of the values it read: ``input`` (``"counts"``/``"reads"``/``"lognorm"``) and, for
    ``"lognorm"``, ``library_size_key`` (or ``"estimated"``) and the recovered ``target_sum`` (as ``bj.tl.embed``)."""
    if input != "lognorm":
        return {"input": input}
    return {"input": input, "library_size_key": library_size_key or "estimated", "target_sum": source.target_sum}


def labels_or_drop(adata, key: str, *, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``obs[key]`` as strings and the mask of cells that have a label; warns how many are dropped.

    Missing (NaN/None) and empty labels never become a ``"nan"`` group; ``what`` says what the
    dropped cells are left out of (as ``bj.bench`` does).
    """
    import pandas as pd

    col = adata.obs[key]
    if not isinstance(col, pd.Series):  # lazy AnnData (anndata.experimental.read_lazy): an xarray column
        col = pd.Series(np.asarray(col))
    valid = col.notna().to_numpy() & (col.astype(str).str.strip() != "").to_numpy()
    labels = col.astype(str).to_numpy(dtype=object)
    if not valid.all():
        warnings.warn(
            f"Dropping {int((~valid).sum())} of {len(valid)} cells without a label in obs[{key!r}] from {what}.",
            stacklevel=3,
        )
    return labels, valid


def case_hint(left_out: dict[str, list[str]], vocab) -> str:
    """Programme genes are matched as vocabulary symbols, exactly: name those whose upper-case form is one."""
    genes = [g for v in left_out.values() for g in v]
    cased = [g for g, k in zip(genes, vocab.index_of([str(g).upper() for g in genes])) if k >= 0 and g != g.upper()]
    if not cased:
        return ""
    return (f" {len(cased)} of them are vocabulary symbols in another case (e.g. {cased[:3]}): programme genes are "
            "matched as the vocabulary's (human, upper-case) symbols, so pass e.g. "
            "`{name: [g.upper() for g in genes]}`, or mouse genes through their human orthologs.")
