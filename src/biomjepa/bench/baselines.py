"""Baselines a user would pick instead of BioM-JEPA, computed on request on the same cells.

``"pca"`` (PCA-50 of log-normalized HVGs), ``"umap"`` (its 2-D UMAP), ``"hvg"`` (the log-normalized
HVGs themselves) and ``"scvi"`` (an scVI latent space, optional extra ``biomjepa[scvi]``); and
:func:`resolve_reps`, which every ``bj.bench`` task calls to add them to the representations it scores.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from ._source import check_source, read_counts, source_kwargs
from ._utils import get_rep

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)

#: obsm keys written by each baseline.
BASELINE_KEYS = {"pca": "X_pca50", "umap": "X_umap_pca50", "hvg": "X_hvg", "scvi": "X_scvi"}
SCVI_HINT = 'pip install "biomjepa[scvi]"'


def add_baselines(
    adata: AnnData,
    baselines: Sequence[str] = ("pca",),
    *,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "reads", "lognorm"] = "counts",
    library_size_key: str | None = None,
    n_comps: int = 50,
    n_top_genes: int = 2000,
    batch_key: str | None = None,
    scvi_max_epochs: int | None = None,
    scvi_n_latent: int = 10,
    random_state: int = 0,
    overwrite: bool = False,
) -> list[str]:
    """Write baseline embeddings into ``adata.obsm`` (the only change ``bj.bench`` ever makes to ``adata``).

    Every baseline starts from a copy of the counts in ``layers[layer]``, ``X`` or ``adata.raw`` of all
    cells of ``adata`` — the cells the model embedded — read as ``bj.tl.embed`` reads them (``input=``:
    raw counts are checked, log-normalized values are taken as such, through the counts they came
    from, and never normalized twice; anything else is refused), normalized to 10⁴ counts per cell,
    ``log1p``-transformed and restricted to the ``n_top_genes`` highly variable genes (scanpy ``flavor="seurat"`` over all
    cells, genes with no count dropped first; all genes when fewer). From there:

    - ``"hvg"``: those log-normalized HVG values themselves, ``[N, n_top_genes]`` float32 (dense only
      for the HVG columns: 100,000 cells × 2,000 genes take 0.8 GB);
    - ``"pca"``: projected on ``n_comps`` principal components (no scaling, ``svd_solver="arpack"``);
    - ``"umap"``: 2-D UMAP of that PCA (``sc.pp.neighbors`` with 15 neighbours) — the paper's "UMAP"
      row; it implies ``"pca"``;
    - ``"scvi"``: scvi-tools ``SCVI`` (``n_latent=scvi_n_latent``, its other defaults) trained on the
      raw counts of the same HVGs with ``scvi.settings.seed = random_state`` and, when ``batch_key`` is
      given, that column as scVI's batch; its latent mean. Needs ``pip install "biomjepa[scvi]"``.
      The global random states it seeds are restored afterwards.

    Existing keys are reused unless ``overwrite`` (a reused ``X_scvi`` keeps the ``batch_key`` it was
    trained with). Every argument is checked before anything is computed, and nothing is written
    unless every requested baseline was computed.

    Parameters
    ----------
    adata
        AnnData with raw counts.
    baselines
        Subset of ``("pca", "umap", "hvg", "scvi")``.
    layer, use_raw, input, library_size_key
        Where the counts are and what they are, as for :func:`biomjepa.tl.embed`: ``layer`` (None: X),
        ``use_raw=True`` for ``adata.raw``, ``input="lognorm"`` for ``log1p(normalize_total)`` values
        (``library_size_key``: ``obs`` column of total counts, else estimated; only scVI's counts use it).
    n_comps
        Number of principal components (capped at ``min(n_obs, n_genes) - 1``).
    n_top_genes
        Highly variable genes kept (every baseline).
    batch_key
        ``obs`` column with each cell's batch (chemistry, donor), given to scVI (no missing values then).
        The other baselines ignore it (they are not batch-corrected).
    scvi_max_epochs
        scVI training epochs (None: scvi-tools' default ``min(400, 400 · 20,000 / n_cells)``). Each
        epoch is one pass over the cells; a small value (e.g. 50) bounds CPU time.
    scvi_n_latent
        scVI latent dimensions.
    random_state
        Seed of PCA, UMAP and scVI.
    overwrite
        Recompute keys that already exist.

    Returns
    -------
    The obsm keys written or reused, in request order (``"umap"`` after ``"pca"``). Writes
    ``adata.obsm["X_pca50"]``, ``["X_umap_pca50"]``, ``["X_hvg"]``, ``["X_scvi"]`` as requested.
    """
    want = check_baselines(adata, baselines, batch_key=batch_key)
    from .._checks import check_int

    src = source_kwargs(layer, use_raw, input, library_size_key)
    check_source(adata, **src)

    n_comps, n_top_genes = check_int("n_comps", n_comps), check_int("n_top_genes", n_top_genes)
    scvi_max_epochs = check_int("scvi_max_epochs", scvi_max_epochs, none_ok=True)
    scvi_n_latent, random_state = check_int("scvi_n_latent", scvi_n_latent), check_int("random_state", random_state, low=0)
    todo = [b for b in want if overwrite or BASELINE_KEYS[b] not in adata.obsm]
    new: dict[str, np.ndarray] = {}
    if set(todo) - {"umap"}:
        counts = read_counts(adata, **src)
        X_hvg, genes = _lognorm_hvg(counts, adata.var_names, n_top_genes)
    if "hvg" in todo:
        new["hvg"] = np.asarray(X_hvg.toarray() if hasattr(X_hvg, "toarray") else X_hvg, dtype=np.float32)
    if "pca" in todo:
        new["pca"] = _pca(X_hvg, genes, n_comps, random_state)[0]
    if "umap" in todo:
        new["umap"] = _umap(new["pca"] if "pca" in new else adata.obsm[BASELINE_KEYS["pca"]], random_state)
    if "scvi" in todo:
        new["scvi"] = _scvi(adata, counts[:, genes], batch_key, scvi_max_epochs, scvi_n_latent, random_state)
    for b, Z in new.items():
        adata.obsm[BASELINE_KEYS[b]] = Z
    return [BASELINE_KEYS[b] for b in want]


def check_baselines(adata: AnnData, baselines: Sequence[str] | str, *, batch_key: str | None = None) -> list[str]:
    """The requested baselines in computing order (``"umap"`` adds ``"pca"``), or a clear error.

    Checks that ``adata`` is an AnnData, every name is known, ``batch_key`` (when given) is an ``obs``
    column and, for ``"scvi"``, that scvi-tools can be imported and the batches have no missing value.
    """
    from .._checks import check_adata

    check_adata(adata)
    names = [baselines] if isinstance(baselines, str) else list(baselines)
    unknown = [b for b in names if b not in BASELINE_KEYS]
    if unknown:
        raise ValueError(f"unknown baselines {unknown}: pass `baselines=` a subset of {list(BASELINE_KEYS)}.")
    if batch_key is not None and batch_key not in adata.obs:
        have = ", ".join(map(repr, adata.obs.columns[:20])) or "none"
        raise KeyError(f"batch_key={batch_key!r} is not an obs column; pass `batch_key=` one of ({have}) or None.")
    if "scvi" in names and batch_key is not None and adata.obs[batch_key].isna().any():
        raise ValueError(f"obs[{batch_key!r}] (batch_key) has missing values, which scVI cannot use as a batch; "
                         "fill them or subset the cells first.")
    if "scvi" in names:
        import importlib.util

        if importlib.util.find_spec("scvi") is None:
            raise ImportError(f"baselines=['scvi'] needs scvi-tools, which is not installed: {SCVI_HINT}, or drop "
                              "'scvi' from `baselines`.")
    if "umap" in names and "pca" not in names:
        names.insert(names.index("umap"), "pca")
    return list(dict.fromkeys(names))


def resolve_reps(adata: AnnData, use_reps: Sequence[str] | str, baselines: Sequence[str] | None,
                 layer: str | None = None, **baseline_kwargs) -> list[str]:
    """Compute the requested baselines (:func:`add_baselines` with ``baseline_kwargs``); return the reps to score.

    ``use_reps`` keys come first, then the baseline keys not already among them. Every argument and every
    ``use_reps`` key (unless a requested baseline writes it) is checked before any baseline is computed.
    """
    from .._checks import check_keys

    reps = check_keys("use_reps", use_reps)
    names = check_baselines(adata, baselines or [], batch_key=baseline_kwargs.get("batch_key"))
    if not reps and not names:
        raise ValueError("Nothing to score: `use_reps` is empty and no `baselines` were requested.")
    written = {BASELINE_KEYS[b] for b in names}
    for r in reps:
        if r not in written:
            get_rep(adata, r)[:0]  # raise on a missing key before computing any baseline
    if names:
        reps += [k for k in add_baselines(adata, names, layer=layer, **baseline_kwargs) if k not in reps]
    for r in reps:
        get_rep(adata, r)[:0]
    return reps


def lognorm_hvg(adata: AnnData, *, layer: str | None = None, use_raw: bool = False,
                input: Literal["counts", "reads", "lognorm"] = "counts", library_size_key: str | None = None,
                n_top_genes: int = 2000):
    """``log1p(normalize_total(counts, 1e4))`` of the highly variable genes and their column indices.

    The counts are read as :func:`add_baselines` reads them (``layer``, ``use_raw``, ``input``,
    ``library_size_key``). Genes without any count are dropped, then scanpy
    ``highly_variable_genes(flavor="seurat")`` picks ``n_top_genes`` of the rest (all of them when
    fewer). Normalization uses every gene.

    Returns
    -------
    ``(X, genes)``: ``[N, g]`` float32 CSR and the ``[g]`` indices into ``adata.var`` (``adata.raw.var``
    with ``use_raw``).
    """
    src = source_kwargs(layer, use_raw, input, library_size_key)
    names = adata.raw.var_names if use_raw and adata.raw is not None else adata.var_names
    return _lognorm_hvg(read_counts(adata, **src), names, n_top_genes)


def _lognorm_hvg(counts, var_names, n_top_genes: int):
    import anndata as ad
    import scanpy as sc

    tmp = ad.AnnData(counts.astype(np.float32, copy=True))
    tmp.var_names = var_names.astype(str)
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
    return tmp.X, genes


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
    adata: AnnData, *, layer: str | None = None, use_raw: bool = False,
    input: Literal["counts", "reads", "lognorm"] = "counts", library_size_key: str | None = None,
    n_comps: int = 50, n_top_genes: int = 2000, random_state: int = 0
) -> tuple[np.ndarray, PCATransform]:
    """Fit the ``"pca"`` baseline of :func:`add_baselines` without writing into ``adata``.

    ``layer``, ``use_raw``, ``input`` and ``library_size_key`` say where the counts are, as there.

    Returns
    -------
    ``(Z, transform)``: the ``[N, k]`` float32 embedding written to ``obsm["X_pca50"]`` and the fitted
    :class:`PCATransform` (``transform.transform(counts)`` reproduces ``Z`` to float32 precision).
    """
    X, genes = lognorm_hvg(adata, layer=layer, use_raw=use_raw, input=input, library_size_key=library_size_key,
                           n_top_genes=n_top_genes)
    return _pca(X, genes, n_comps, random_state)


def _pca(X, genes: np.ndarray, n_comps: int, random_state: int) -> tuple[np.ndarray, PCATransform]:
    import anndata as ad
    import scanpy as sc

    tmp = ad.AnnData(X)
    n = min(n_comps, tmp.n_obs - 1, tmp.n_vars - 1)
    sc.pp.pca(tmp, n_comps=n, svd_solver="arpack", random_state=random_state)
    logger.info("PCA-%d baseline on %d genes", n, tmp.n_vars)
    mean = np.asarray(tmp.X.mean(0), dtype=np.float64).ravel()
    fitted = PCATransform(genes, mean, np.asarray(tmp.varm["PCs"], dtype=np.float64))
    return np.asarray(tmp.obsm["X_pca"], dtype=np.float32), fitted


def _scvi(adata: AnnData, counts, batch_key: str | None, max_epochs: int | None,
          n_latent: int, random_state: int) -> np.ndarray:
    """scVI latent mean ``[N, n_latent]`` float32 of ``counts`` ``[N, g]`` (the HVGs; see :func:`add_baselines`)."""
    import anndata as ad
    import pandas as pd
    from scipy import sparse

    from .._settings import settings

    counts = sparse.csr_matrix(counts, dtype=np.float32)
    obs = pd.DataFrame(index=adata.obs_names.astype(str))
    if batch_key is not None:
        obs["batch"] = adata.obs[batch_key].astype(str).to_numpy()
    tmp = ad.AnnData(counts, obs=obs)
    tmp.obs_names_make_unique()
    device = settings.device
    accelerator = {"auto": "auto", "cpu": "cpu"}.get(device, "gpu")
    devices = [int(device.split(":")[1])] if device.startswith("cuda:") else "auto"
    import scvi

    with _restored_random_state(), _quiet(["lightning", "lightning.pytorch", "lightning.fabric", "scvi"]):
        scvi.settings.seed = random_state
        scvi.model.SCVI.setup_anndata(tmp, batch_key="batch" if batch_key is not None else None)
        model = scvi.model.SCVI(tmp, n_latent=n_latent)
        model.train(max_epochs=max_epochs, accelerator=accelerator, devices=devices,
                    enable_progress_bar=settings.show_progress)
        Z = model.get_latent_representation()
    logger.info("scVI baseline (%d latent, %s epochs) on %d genes", n_latent, max_epochs or "default", counts.shape[1])
    return np.asarray(Z, dtype=np.float32)


@contextmanager
def _quiet(names: list[str]):
    """Raise these loggers to WARNING (device banners, "Seed set to") and silence lightning's two notices
    about its own internals (a deprecated isinstance check, the logging interval), unless
    ``bj.settings.verbosity`` >= 2."""
    import warnings

    from .._settings import settings

    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    try:
        with warnings.catch_warnings():
            if settings.verbosity < 2:
                for lg in loggers:
                    lg.setLevel(logging.WARNING)
                warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
                warnings.filterwarnings("ignore", message=r".*smaller than the logging interval")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


@contextmanager
def _restored_random_state():
    """Put back the Python, numpy and torch global random states (and cuDNN flags, env) that scVI's seeding sets."""
    import os
    import random

    import torch

    py, npy, env = random.getstate(), np.random.get_state(), dict(os.environ)
    cudnn = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn
        for k in set(os.environ) - set(env):
            del os.environ[k]
        os.environ.update(env)


def _umap(Z, random_state: int = 0):
    import anndata as ad
    import scanpy as sc

    tmp = ad.AnnData(np.zeros((Z.shape[0], 1), dtype=np.float32))
    tmp.obsm["X_rep"] = np.asarray(Z)
    sc.pp.neighbors(tmp, use_rep="X_rep", n_neighbors=15, random_state=random_state)
    sc.tl.umap(tmp, random_state=random_state)
    return np.asarray(tmp.obsm["X_umap"], dtype=np.float32)
