"""Baseline representations computed on request: PCA-50 of log-normalized HVGs and its UMAP."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._utils import get_counts

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)

#: obsm keys written by each baseline.
BASELINE_KEYS = {"pca": "X_pca50", "umap": "X_umap_pca50"}


def add_baselines(
    adata: AnnData,
    baselines: Sequence[str] = ("pca",),
    *,
    layer: str | None = None,
    n_comps: int = 50,
    n_top_genes: int = 2000,
    overwrite: bool = False,
) -> list[str]:
    """Write baseline embeddings into ``adata.obsm`` (the only change ``bj.bench`` ever makes to ``adata``).

    ``"pca"``: a copy of the raw counts in ``layers[layer]`` (or X) is normalized to 10⁴ counts per cell,
    ``log1p``-transformed, restricted to the ``n_top_genes`` highly variable genes (scanpy
    ``flavor="seurat"``; all genes when fewer) and projected on ``n_comps`` principal components
    (no scaling, ``svd_solver="arpack"``, ``random_state=0``). ``"umap"``: 2-D UMAP of that PCA
    (``sc.pp.neighbors`` with 15 neighbours, ``random_state=0``) — the paper's "UMAP" row. It implies
    ``"pca"``. Existing keys are reused unless ``overwrite``.

    Parameters
    ----------
    adata
        AnnData with raw counts.
    baselines
        Subset of ``("pca", "umap")``.
    layer
        Layer holding raw counts (None: X).
    n_comps
        Number of principal components (capped at ``min(n_obs, n_genes) - 1``).
    n_top_genes
        Highly variable genes kept before PCA.
    overwrite
        Recompute keys that already exist.

    Returns
    -------
    The obsm keys written or reused, in order. Writes ``adata.obsm["X_pca50"]`` and, for ``"umap"``,
    ``adata.obsm["X_umap_pca50"]``.
    """
    from .._checks import check_adata, check_int

    check_adata(adata)
    n_comps, n_top_genes = check_int("n_comps", n_comps), check_int("n_top_genes", n_top_genes)
    unknown = set(baselines) - set(BASELINE_KEYS)
    if unknown:
        raise ValueError(f"unknown baselines {sorted(unknown)}; choose from {sorted(BASELINE_KEYS)}.")
    want = ["pca"] + (["umap"] if "umap" in baselines else [])
    if overwrite or BASELINE_KEYS["pca"] not in adata.obsm:
        adata.obsm[BASELINE_KEYS["pca"]] = _pca50(adata, layer, n_comps, n_top_genes)
    if "umap" in want and (overwrite or BASELINE_KEYS["umap"] not in adata.obsm):
        adata.obsm[BASELINE_KEYS["umap"]] = _umap(adata.obsm[BASELINE_KEYS["pca"]])
    return [BASELINE_KEYS[b] for b in want]


def _pca50(adata: AnnData, layer: str | None, n_comps: int, n_top_genes: int):
    return fit_pca(adata, layer=layer, n_comps=n_comps, n_top_genes=n_top_genes)[0]


@dataclass(frozen=True)
class PCATransform:
    """The fitted PCA-50 baseline, reusable on new counts of the same genes (e.g. thinned cells).

    ``genes`` are column indices into ``adata.var`` (non-zero, highly variable), ``mean`` ``[g]`` the
    centring vector and ``components`` ``[g, k]`` the loadings of the log-normalized expression.
    """

    genes: np.ndarray
    mean: np.ndarray
    components: np.ndarray

    def transform(self, counts) -> np.ndarray:
        """Project raw counts ``[n, n_vars]`` (CSR or dense; not modified) → ``[n, k]`` float32.

        Same steps as the fit: normalize to 10⁴ counts per cell over all genes, ``log1p``, keep
        ``genes``, centre with ``mean``, project on ``components``. Empty cells stay at the origin
        of the normalized space.
        """
        from scipy import sparse

        X = sparse.csr_matrix(counts, dtype=np.float64)
        lib = np.asarray(X.sum(1)).ravel()
        scale = 1e4 / np.where(lib > 0, lib, 1.0)
        Y = sparse.diags(scale) @ X[:, self.genes]
        Y.data = np.log1p(Y.data)
        return np.asarray(Y @ self.components - self.mean @ self.components, dtype=np.float32)


def fit_pca(
    adata: AnnData, *, layer: str | None = None, n_comps: int = 50, n_top_genes: int = 2000
) -> tuple[np.ndarray, PCATransform]:
    """Fit the ``"pca"`` baseline of :func:`add_baselines` without writing into ``adata``.

    Returns
    -------
    ``(Z, transform)``: the ``[N, k]`` float32 embedding written to ``obsm["X_pca50"]`` and the fitted
    :class:`PCATransform` (``transform.transform(counts)`` reproduces ``Z`` to float32 precision).
    """
    import anndata as ad
    import scanpy as sc

    tmp = ad.AnnData(get_counts(adata, layer).astype(np.float32, copy=True))
    tmp.var_names = adata.var_names.astype(str)
    tmp.var_names_make_unique()
    sc.pp.normalize_total(tmp, target_sum=1e4)
    sc.pp.log1p(tmp)
    keep = np.asarray(tmp.X.sum(0)).ravel() > 0
    genes = np.flatnonzero(keep)
    tmp = tmp[:, keep].copy()
    if tmp.n_vars > n_top_genes:
        sc.pp.highly_variable_genes(tmp, n_top_genes=n_top_genes, flavor="seurat")
        hvg = tmp.var["highly_variable"].to_numpy()
        genes = genes[hvg]
        tmp = tmp[:, hvg].copy()
    n = min(n_comps, tmp.n_obs - 1, tmp.n_vars - 1)
    sc.pp.pca(tmp, n_comps=n, svd_solver="arpack", random_state=0)
    logger.info("PCA-%d baseline on %d genes", n, tmp.n_vars)
    mean = np.asarray(tmp.X.mean(0), dtype=np.float64).ravel()
    fitted = PCATransform(genes, mean, np.asarray(tmp.varm["PCs"], dtype=np.float64))
    return np.asarray(tmp.obsm["X_pca"], dtype=np.float32), fitted


def _umap(Z):
    import anndata as ad
    import numpy as np
    import scanpy as sc

    tmp = ad.AnnData(np.zeros((Z.shape[0], 1), dtype=np.float32))
    tmp.obsm["X_rep"] = np.asarray(Z)
    sc.pp.neighbors(tmp, use_rep="X_rep", n_neighbors=15, random_state=0)
    sc.tl.umap(tmp, random_state=0)
    return np.asarray(tmp.obsm["X_umap"], dtype=np.float32)
