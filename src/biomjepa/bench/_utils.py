"""Shared helpers of :mod:`biomjepa.bench`: input checks, the tidy table format and progress bars."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger("biomjepa.bench")

#: Columns of every result table (tidy long format, one row per rep × setting × seed × metric).
COLUMNS = ["task", "rep", "setting", "seed", "metric", "value"]
DEFAULT_SEEDS = (42, 43, 44, 45, 46)


def get_rep(adata: AnnData, key: str) -> np.ndarray:
    """``adata.obsm[key]`` as a dense float64 array ``[N, d]``, or a KeyError saying how to make it."""
    if key not in adata.obsm:
        hint = {
            "X_pca": "pass `baselines=['pca']` (writes obsm['X_pca50']) or run `sc.pp.pca`",
            "X_pca50": "pass `baselines=['pca']`",
            "X_umap_pca50": "pass `baselines=['pca', 'umap']`",
            "X_hvg": "pass `baselines=['hvg']`",
            "X_scvi": "pass `baselines=['scvi']` (needs `pip install \"biomjepa[scvi]\"`)",
            "X_biomjepa": "run `bj.pp.map_vocab` and `bj.tl.embed` first",
        }.get(key, "compute it first")
        have = ", ".join(map(repr, adata.obsm.keys())) or "none"
        raise KeyError(f"obsm[{key!r}] not found; {hint}, or drop it from `use_reps` (available: {have}).")
    Z = adata.obsm[key]
    Z = Z.toarray() if hasattr(Z, "toarray") else np.asarray(Z)
    if Z.ndim != 2 or not np.all(np.isfinite(Z)):
        raise ValueError(f"obsm[{key!r}] must be a finite 2-D array; got shape {Z.shape} with non-finite values.")
    return Z.astype(np.float64, copy=False)


def get_labels(adata: AnnData, label_key: str, *, arg: str = "label_key") -> tuple[np.ndarray, np.ndarray]:
    """Labels as strings and the mask of cells that have one (NaN / empty labels are dropped).

    ``arg`` is the argument name the KeyError for a missing column tells the user to change.
    """
    from .._checks import check_adata

    check_adata(adata)
    if label_key not in adata.obs:
        have = ", ".join(map(repr, adata.obs.columns[:20]))
        raise KeyError(f"obs[{label_key!r}] not found; pass `{arg}=` one of the obs columns ({have}).")
    col = adata.obs[label_key]
    valid = col.notna().to_numpy() & (col.astype(str).str.strip() != "").to_numpy()
    labels = col.astype(str).to_numpy()
    if valid.sum() == 0:
        raise ValueError(f"obs[{label_key!r}] has no valid labels.")
    return labels, valid


def get_counts(adata: AnnData, layer: str | None):
    """Raw counts from ``layers[layer]`` (or X) as a CSR matrix or ndarray."""
    if layer is not None and layer not in adata.layers:
        raise KeyError(f"layers[{layer!r}] not found (available: {list(adata.layers.keys())}); pass `layer=None` to use X.")
    X = adata.layers[layer] if layer is not None else adata.X
    from scipy import sparse

    return X.tocsr() if sparse.issparse(X) else np.asarray(X)


def log_normalize(X) -> np.ndarray:
    """Dense ``log1p(1e4 · counts / library size)`` (empty cells stay zero)."""
    from scipy import sparse

    X = X.toarray() if sparse.issparse(X) else np.asarray(X, dtype=np.float64)
    lib = X.sum(1, keepdims=True)
    return np.log1p(1e4 * X / np.maximum(lib, 1e-12))


def progress(it: Iterable, *, desc: str, total: int | None = None) -> Iterable:
    """:func:`biomjepa._progress.progress_bar` (``bj.settings.progress``, on a terminal or in a notebook), not left."""
    from .._progress import progress_bar

    return progress_bar(it, desc=desc, total=total, leave=False)


def rows(task: str, rep: str, setting: str, seed: int | None, metrics: dict[str, float]) -> list[dict]:
    """Tidy rows of one evaluation."""
    return [dict(task=task, rep=rep, setting=setting, seed=seed, metric=m, value=float(v)) for m, v in metrics.items()]


def frame(records: list[dict]) -> pd.DataFrame:
    """The tidy result table with fixed column order and dtypes (``seed`` nullable integer)."""
    df = pd.DataFrame(records, columns=COLUMNS)
    df["seed"] = df["seed"].astype("Int64")
    df["value"] = df["value"].astype(float)
    return df


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Mean ± standard deviation over seeds of a :mod:`biomjepa.bench` result table.

    Parameters
    ----------
    df
        Tidy table from any ``bj.bench`` task (columns ``task, rep, setting, seed, metric, value``).

    Returns
    -------
    One row per ``task × rep × setting × metric`` with columns ``mean``, ``sd`` (sample s.d., ``ddof=1``;
    NaN for a single seed) and ``n`` (number of non-missing values), in first-appearance order.
    """
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"not a bj.bench result table; missing columns {missing}.")
    keys = ["task", "rep", "setting", "metric"]
    g = df.groupby(keys, sort=False, dropna=False)["value"]
    out = g.agg(mean="mean", sd="std", n="count").reset_index()
    return out
