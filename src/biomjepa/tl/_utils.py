"""Argument checks shared by the ``tl`` tools (one wording for one mistake); what they check of the input AnnData is
:func:`biomjepa.data.resolved.resolve`'s."""

from __future__ import annotations

import numbers
import warnings

import numpy as np

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
