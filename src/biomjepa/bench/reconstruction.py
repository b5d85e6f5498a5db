"""Frozen-embedding reconstruction probe: embedding → canonical 400-gene log-normalized expression."""

from __future__ import annotations

import functools
import gzip
import logging
import warnings
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from .._docs import doc_params
from ._mlp import fit_mlp
from ._source import read_counts
from ._utils import DEFAULT_SEEDS, frame, get_labels, get_rep, progress, rows
from .baselines import resolve_reps

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)

REACTOME_FILE = "reactome_2024-09-18_vocab.gmt.gz"


@functools.lru_cache(maxsize=1)
def reactome_sets() -> dict[str, frozenset[str]]:
    """Bundled Reactome human pathways (2024-09-18, CC0), restricted to vocabulary genes, ≥ 5 genes each.

    Returns
    -------
    ``{"name (R-HSA-id)": frozenset of gene symbols}`` for 2,040 pathways.
    """
    raw = gzip.decompress(resources.files("biomjepa._data").joinpath(REACTOME_FILE).read_bytes()).decode()
    out = {}
    for line in raw.splitlines():
        f = line.split("\t")
        out[f"{f[0]} ({f[1]})"] = frozenset(f[2:])
    return out


def canonical_genes(adata: AnnData, *, layer: str | None = None, n_genes: int = 400, gene_key: str | None = None,
                    use_raw: bool = False, input: Literal["counts", "lognorm"] = "counts",
                    library_size_key: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The canonical target: the ``n_genes`` most variable genes of ``log1p(1e4 · counts / library size)``.

    Genes are ranked by the variance over all cells (labels unused) of the log-normalized counts in
    ``layers[layer]``, X or ``adata.raw`` (``use_raw``), read as ``input`` says (see
    :func:`biomjepa.bench.add_baselines`); ties keep ``var`` order, so the choice is deterministic.

    Parameters
    ----------
    adata
        AnnData with raw counts.
    layer, use_raw, input, library_size_key
        Where the counts are and what they hold, as for :func:`biomjepa.bench.add_baselines`.
    n_genes
        Target size (paper: 400).
    gene_key
        ``var`` column of gene symbols (None: ``var_names``; ``adata.raw.var`` with ``use_raw``).

    Returns
    -------
    ``(symbols [G], expression [N, G])`` with ``G = min(n_genes, expressed genes)``.
    """
    from scipy import sparse

    X = sparse.csr_matrix(read_counts(adata, layer=layer, use_raw=use_raw, input=input,
                                      library_size_key=library_size_key), dtype=np.float64)
    lib = np.asarray(X.sum(1)).ravel()
    X = sparse.diags(1e4 / np.maximum(lib, 1e-12)) @ X
    X.data = np.log1p(X.data)
    mean = np.asarray(X.mean(0)).ravel()
    var = np.asarray(X.multiply(X).mean(0)).ravel() - mean**2
    order = np.argsort(-var, kind="stable")
    order = order[var[order] > 0][:n_genes]
    if len(order) < n_genes:
        warnings.warn(f"only {len(order)} expressed genes available for the {n_genes}-gene target.", stacklevel=2)
    var = adata.raw.var if use_raw else adata.var
    names = (var[gene_key] if gene_key else var.index).astype(str).to_numpy()
    return names[order], X[:, order].toarray()


def budget_split(labels: np.ndarray, budget: int, seed: int, *, test_frac: float = 0.2, val_frac: float = 0.1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rare-safe class-wise split: held-out test cells per class, then up to ``budget`` training cells per class.

    Each class (sorted order, one ``default_rng(seed)``) is permuted; its first ``max(1, round(test_frac
    · n_c))`` cells are held out and the next ``min(budget, remaining)`` cells are training cells. The
    test set is therefore the same for every budget at a given seed and contains every class with ≥ 2
    cells (single-cell classes are dropped). ``val_frac`` of the training cells (at least one) are moved
    to a validation set for early stopping.

    Parameters
    ----------
    labels
        ``[N]`` class labels.
    budget
        Training cells per class (capped by availability).
    seed
        Split seed.
    test_frac
        Held-out fraction per class.
    val_frac
        Validation fraction of the training cells.

    Returns
    -------
    ``(train, val, test)`` index arrays.
    """
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        if len(idx) < 2:
            continue
        n_test = max(1, round(test_frac * len(idx)))
        test.append(idx[:n_test])
        train.append(idx[n_test : n_test + budget])
    train, test = np.concatenate(train), np.sort(np.concatenate(test))
    train = rng.permutation(train)
    n_val = max(1, round(val_frac * len(train)))
    return np.sort(train[n_val:]), np.sort(train[:n_val]), test


def _knn(X: np.ndarray, k: int) -> np.ndarray:
    if len(X) <= 5000:
        from sklearn.neighbors import NearestNeighbors

        return NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X, return_distance=False)[:, 1:]
    from pynndescent import NNDescent

    idx, _ = NNDescent(X, n_neighbors=k + 1, random_state=0, n_jobs=1).neighbor_graph
    return idx[:, 1:]


def knn_overlap(A: np.ndarray, B: np.ndarray, k: int = 15) -> float:
    """Mean fraction of shared ``k`` nearest neighbours of each cell in the two spaces (self excluded).

    Euclidean; exact (scikit-learn) up to 5,000 cells, pynndescent (``random_state=0``) above.

    Parameters
    ----------
    A
        ``[N, p]`` first space (truth).
    B
        ``[N, q]`` second space (prediction).
    k
        Neighbours per cell.

    Returns
    -------
    ``(1 / kN) Σ_i |N_k(a_i) ∩ N_k(b_i)|``.
    """
    k = min(k, len(A) - 1)
    na, nb = _knn(A, k), _knn(B, k)
    return float(np.mean([len(np.intersect1d(x, y)) for x, y in zip(na, nb)]) / k)


def _top_mask(X: np.ndarray, n: int) -> np.ndarray:
    mask = np.zeros(X.shape, dtype=bool)
    np.put_along_axis(mask, np.argsort(-X, axis=1, kind="stable")[:, :n], True, axis=1)
    return mask


def _rowwise_pearson(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    A, B = A - A.mean(1, keepdims=True), B - B.mean(1, keepdims=True)
    den = np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1)
    return np.divide((A * B).sum(1), den, out=np.full(len(A), np.nan), where=den > 0)


def reconstruction_scores(X: np.ndarray, Xhat: np.ndarray, train_mean: np.ndarray, genes: Sequence[str], *, k: int = 15) -> dict[str, float]:
    """Cell-wise Pearson, NRMSE, Top-50 overlap, Reactome programme correlation and kNN@k overlap.

    Parameters
    ----------
    X
        ``[N, G]`` true held-out expression.
    Xhat
        ``[N, G]`` prediction.
    train_mean
        ``[G]`` mean training expression (NRMSE reference).
    genes
        ``[G]`` gene symbols (for the Reactome programmes).
    k
        Neighbours for the kNN overlap.

    Returns
    -------
    ``pearson, nrmse, top50, reactome, knn15``. ``reactome`` is the median over programmes with ≥ 5 of
    the ``G`` genes of the across-cell Pearson correlation of mean programme expression (NaN when no
    programme qualifies).
    """
    n_top = min(50, X.shape[1])
    m = {
        "pearson": float(np.nanmean(_rowwise_pearson(X, Xhat))),
        "nrmse": float(np.sqrt(((Xhat - X) ** 2).sum() / ((X - train_mean) ** 2).sum())),
        "top50": float((_top_mask(X, n_top) & _top_mask(Xhat, n_top)).sum() / (n_top * len(X))),
    }
    pos = {g: i for i, g in enumerate(genes)}
    r = []
    for gs in reactome_sets().values():
        cols = [pos[g] for g in gs if g in pos]
        if len(cols) >= 5:
            q, qh = X[:, cols].mean(1), Xhat[:, cols].mean(1)
            if q.std() > 0 and qh.std() > 0:
                r.append(np.corrcoef(q, qh)[0, 1])
    m["reactome"] = float(np.median(r)) if r else float("nan")
    m[f"knn{k}"] = knn_overlap(X, Xhat, k)
    return m


@doc_params
def reconstruction(
    adata: AnnData,
    *,
    label_key: str,
    use_reps: Sequence[str] | str = ("X_biomjepa", "X_pca"),
    budgets: Sequence[int] = (100, 500, 700, 900),
    seeds: Sequence[int] = DEFAULT_SEEDS,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "lognorm"] = "counts",
    library_size_key: str | None = None,
    n_genes: int = 400,
    gene_key: str | None = None,
    max_epochs: int = 50,
    patience: int = 5,
    test_frac: float = 0.2,
    baselines: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Train the same MLP (512–1024–512, GELU, Adam 1e-3, batch 128) from each frozen embedding to expression.

    Target: :func:`canonical_genes` (top-``n_genes`` variance genes of log-normalized raw counts).
    Split: :func:`budget_split` per seed — a class-wise held-out set shared by all budgets and
    representations, training cells capped at ``budget`` per class, 10 % of them kept for early stopping
    (patience ``patience``, at most ``max_epochs`` epochs). Inputs are standardized with the training
    mean and s.d. Labels are used for stratification only; unlabelled cells are dropped.

    Parameters
    ----------
    adata
        AnnData with raw counts, embeddings and labels. Not modified, except for the baseline keys written
        when ``baselines`` is given.
    label_key
        ``obs`` column used to stratify the split.
    {use_reps}
    budgets
        Training cells per class.
    seeds
        Split and training seeds.
    n_genes
        Size of the canonical target.
    gene_key
        ``var`` column of gene symbols for Reactome (None: ``var_names``).
    {max_epochs}
    {patience}
    test_frac
        Held-out fraction per class.
    {baselines}
    {layer_baselines}

    Returns
    -------
    Tidy table ``task, rep, setting, seed, metric, value`` with ``task="reconstruction"``,
    ``setting="n{budget}"`` and metrics ``pearson, nrmse, top50, reactome, knn15``.
    """
    from sklearn.preprocessing import StandardScaler

    from .._checks import check_int, check_ints, check_number

    budgets, seeds = check_ints("budgets", budgets), check_ints("seeds", seeds, low=0)
    n_genes, max_epochs = check_int("n_genes", n_genes), check_int("max_epochs", max_epochs)
    patience, test_frac = check_int("patience", patience), check_number("test_frac", test_frac, low=0, high=1,
                                                                        low_open=True, high_open=True)
    reps = resolve_reps(adata, use_reps, baselines, layer, use_raw=use_raw, input=input,
                        library_size_key=library_size_key)
    labels, valid = get_labels(adata, label_key)
    idx = np.flatnonzero(valid)
    genes, Y = canonical_genes(adata, layer=layer, n_genes=n_genes, gene_key=gene_key, use_raw=use_raw, input=input,
                               library_size_key=library_size_key)
    labels, Y = labels[idx], Y[idx]
    Zs = {r: get_rep(adata, r)[idx] for r in reps}
    records = []
    jobs = [(b, s, r) for b in budgets for s in seeds for r in reps]
    for b, seed, r in progress(jobs, desc="reconstruction"):
        tr, va, te = budget_split(labels, int(b), int(seed), test_frac=test_frac)
        fit = np.concatenate([tr, va])
        Z = StandardScaler().fit(Zs[r][fit]).transform(Zs[r])
        predict = fit_mlp(Z, Y, tr, va, seed=int(seed), max_epochs=max_epochs, patience=patience)
        m = reconstruction_scores(Y[te], predict(Z[te]), Y[tr].mean(0), genes)
        records += rows("reconstruction", r, f"n{b}", int(seed), m)
    return frame(records)
