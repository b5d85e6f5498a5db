"""Embedding geometry (effective rank, participation ratio), depth association and Procrustes similarity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from .._docs import doc_params
from ._source import read_counts, source_kwargs
from ._utils import frame, get_rep, progress, rows
from .baselines import resolve_reps

if TYPE_CHECKING:
    from anndata import AnnData


def covariance_spectrum(Z: np.ndarray) -> np.ndarray:
    """Eigenvalues (descending, ≥ 0) of the covariance of the centred matrix ``Z`` ``[N, d]``.

    Parameters
    ----------
    Z
        ``[N, d]`` matrix (rows = samples).

    Returns
    -------
    ``[min(N, d)]`` eigenvalues, from the singular values of the centred matrix.
    """
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[0] < 2:
        raise ValueError(f"need a 2-D matrix with at least two rows; got shape {Z.shape}.")
    s = np.linalg.svd(Z - Z.mean(0), compute_uv=False)
    return s**2 / (Z.shape[0] - 1)


def effective_rank(Z: np.ndarray) -> float:
    """Effective rank ``exp(-Σ p_r log p_r)``, ``p_r = λ_r / Σ λ`` of the centred covariance spectrum.

    Parameters
    ----------
    Z
        ``[N, d]`` matrix. Isotropic variance in ``r`` dimensions gives ``r``.

    Returns
    -------
    Effective rank in ``[1, min(N - 1, d)]`` (0 for a constant matrix).
    """
    lam = covariance_spectrum(Z)
    if lam.sum() <= 0:
        return 0.0
    p = lam / lam.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def participation_ratio(Z: np.ndarray) -> float:
    """Participation ratio ``(Σ λ)² / Σ λ²`` of the centred covariance spectrum.

    Parameters
    ----------
    Z
        ``[N, d]`` matrix.

    Returns
    -------
    Participation ratio (0 for a constant matrix).
    """
    lam = covariance_spectrum(Z)
    denom = (lam**2).sum()
    return float(lam.sum() ** 2 / denom) if denom > 0 else 0.0


def procrustes_similarity(P: np.ndarray, T: np.ndarray) -> float:
    """Mean row cosine between ``P R*`` and ``T`` after orthogonal Procrustes on the centred matrices.

    ``R* = argmin_{RᵀR = I} ||P R − T||_F`` (``scipy.linalg.orthogonal_procrustes``); rows with zero norm
    contribute cosine 0.

    Parameters
    ----------
    P
        ``[n, d]`` prediction matrix.
    T
        ``[n, d]`` target (teacher) matrix.

    Returns
    -------
    ``S_Proc`` in [-1, 1]; 1 when ``T`` is a rotated copy of ``P``.
    """
    from scipy.linalg import orthogonal_procrustes

    P, T = np.asarray(P, dtype=np.float64), np.asarray(T, dtype=np.float64)
    if P.shape != T.shape or P.ndim != 2:
        raise ValueError(f"P and T must be 2-D with the same shape; got {P.shape} and {T.shape}.")
    P, T = P - P.mean(0), T - T.mean(0)
    R, _ = orthogonal_procrustes(P, T)
    PR = P @ R
    norm = np.linalg.norm(PR, axis=1) * np.linalg.norm(T, axis=1)
    cos = np.divide((PR * T).sum(1), norm, out=np.zeros(len(P)), where=norm > 0)
    return float(cos.mean())


def _abs_r(a: np.ndarray, b: np.ndarray) -> float:
    if np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(abs(np.corrcoef(a, b)[0, 1]))


def depth_association(Z: np.ndarray, total_counts: np.ndarray, n_detected: np.ndarray) -> dict[str, float]:
    """Absolute Pearson ``|r|`` of total counts and detected genes with the leading-axis score and the embedding norm.

    The paper's two depth diagnostics correlate the number of detected genes with the leading embedding
    axis and with the embedding norm; ``depth_nnz`` is their mean.

    Parameters
    ----------
    Z
        ``[N, d]`` embedding.
    total_counts
        ``[N]`` counts per cell.
    n_detected
        ``[N]`` detected (non-zero) genes per cell.

    Returns
    -------
    ``abs_r_axis_total, abs_r_axis_nnz, abs_r_norm_total, abs_r_norm_nnz``, their mean ``depth_mean`` and
    ``depth_nnz``, the mean of ``abs_r_axis_nnz`` and ``abs_r_norm_nnz`` (NaN when both are NaN).
    The leading axis is the first principal direction of the centred embedding.
    """
    Zc = Z - Z.mean(0)
    _, _, vt = np.linalg.svd(Zc, full_matrices=False)
    u, norm = Zc @ vt[0], np.linalg.norm(Z, axis=1)
    m = {
        "abs_r_axis_total": _abs_r(u, total_counts),
        "abs_r_axis_nnz": _abs_r(u, n_detected),
        "abs_r_norm_total": _abs_r(norm, total_counts),
        "abs_r_norm_nnz": _abs_r(norm, n_detected),
    }
    m["depth_mean"] = _nanmean(list(m.values()))
    m["depth_nnz"] = _nanmean([m["abs_r_axis_nnz"], m["abs_r_norm_nnz"]])
    return m


def _nanmean(values: list[float]) -> float:
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")


def _depth(adata: AnnData, src: dict) -> tuple[np.ndarray, np.ndarray]:
    plain = src["layer"] is None and not src["use_raw"] and src["input"] == "counts"
    if plain and {"total_counts", "n_genes_by_counts"} <= set(adata.obs.columns):
        return adata.obs["total_counts"].to_numpy(float), adata.obs["n_genes_by_counts"].to_numpy(float)
    X = read_counts(adata, **src)
    total = np.asarray(X.sum(1)).ravel().astype(float)
    nnz = np.asarray((X > 0).sum(1)).ravel().astype(float)
    return total, nnz


@doc_params
def geometry(
    adata: AnnData,
    *,
    use_reps: Sequence[str] | str = ("X_biomjepa", "X_pca"),
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "lognorm"] = "counts",
    library_size_key: str | None = None,
    baselines: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Effective rank, participation ratio and sequencing-depth association of each embedding.

    Depth is taken from ``obs["total_counts"]`` and ``obs["n_genes_by_counts"]`` (scanpy QC names) when
    ``layer`` is None and both exist, otherwise computed from the counts in ``layers[layer]``, X or
    ``adata.raw`` (``use_raw``), read as ``input`` says (``"lognorm"``: the counts the values came from).

    Parameters
    ----------
    adata
        AnnData with embeddings in ``obsm``. Not modified, except for the baseline keys written when
        ``baselines`` is given.
    {use_reps}
    {layer_baselines}
    {baselines}

    Returns
    -------
    Tidy table ``task, rep, setting, seed, metric, value`` with ``task="geometry"``, ``setting="all"``,
    ``seed`` missing (deterministic) and metrics ``effective_rank, participation_ratio, abs_r_axis_total,
    abs_r_axis_nnz, abs_r_norm_total, abs_r_norm_nnz, depth_mean, depth_nnz`` (``depth_nnz``: mean ``|r|`` of
    detected genes with the leading axis and the norm, the paper's two depth diagnostics).
    """
    reps = resolve_reps(adata, use_reps, baselines, layer, use_raw=use_raw, input=input,
                        library_size_key=library_size_key)
    total, nnz = _depth(adata, source_kwargs(layer, use_raw, input, library_size_key))
    records = []
    for r in progress(reps, desc="geometry"):
        Z = get_rep(adata, r)
        m = {"effective_rank": effective_rank(Z), "participation_ratio": participation_ratio(Z)}
        m.update(depth_association(Z, total, nnz))
        records += rows("geometry", r, "all", None, m)
    return frame(records)
