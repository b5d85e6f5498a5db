"""Clustering: k-means with the true number of classes; NMI, ARI, ASW, AvgBio and Hungarian accuracy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from .._docs import doc_params
from ._utils import DEFAULT_SEEDS, frame, get_labels, get_rep, progress, rows
from .baselines import resolve_reps

if TYPE_CHECKING:
    from anndata import AnnData


def _contingency(y, c) -> np.ndarray:
    from sklearn.metrics.cluster import contingency_matrix

    return contingency_matrix(np.asarray(y), np.asarray(c))


@doc_params
def nmi(y, c) -> float:
    """Normalized mutual information with the arithmetic mean of entropies, ``2 I(Y;C) / (H(Y) + H(C))``.

    Parameters
    ----------
    {y_true}
    {c_clusters}

    Returns
    -------
    NMI in [0, 1].
    """
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(y, c, average_method="arithmetic"))


@doc_params
def ari(y, c) -> float:
    """Adjusted Rand index (chance-corrected pair counting).

    Parameters
    ----------
    {y_true}
    {c_clusters}

    Returns
    -------
    ARI (1 = identical partitions, ~0 = chance).
    """
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(y, c))


@doc_params
def hungarian_accuracy(y, c) -> float:
    """Cluster accuracy under the optimal one-to-one cluster → label matching (``linear_sum_assignment``).

    Parameters
    ----------
    {y_true}
    c
        Cluster assignments (their number may differ from the number of labels; unmatched clusters count
        as errors).

    Returns
    -------
    ``max_π (1/N) Σ_i 1[y_i = π(c_i)]``.
    """
    from scipy.optimize import linear_sum_assignment

    M = _contingency(y, c)
    r, col = linear_sum_assignment(M, maximize=True)
    return float(M[r, col].sum() / M.sum())


def cluster_scores(Z: np.ndarray, labels: np.ndarray, seed: int, *, asw_max_cells: int = 20_000) -> dict[str, float]:
    """k-means (true class count, ``n_init=10``, ``random_state=seed``) and the five clustering metrics.

    Parameters
    ----------
    Z
        ``[N, d]`` embedding.
    labels
        ``[N]`` true labels (used only for scoring).
    seed
        k-means seed (also the silhouette subsample seed).
    asw_max_cells
        Silhouette is computed on a seeded random subsample of at most this many cells.

    Returns
    -------
    ``{"nmi", "ari", "asw", "avgbio", "accuracy"}``. ``asw`` is the plain mean silhouette width
    (Euclidean, in [-1, 1]) of the predicted clusters, as in the paper's formula (no ``(s+1)/2`` rescaling);
    ``avgbio = (nmi + ari + asw) / 3``.
    """
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    n_classes = len(np.unique(labels))
    pred = KMeans(n_clusters=n_classes, n_init=10, random_state=seed).fit_predict(Z)
    if len(np.unique(pred)) > 1:
        n = min(len(Z), asw_max_cells)
        asw = silhouette_score(Z, pred, sample_size=n if n < len(Z) else None, random_state=seed)
    else:
        asw = 0.0
    m = {"nmi": nmi(labels, pred), "ari": ari(labels, pred), "asw": float(asw)}
    m["avgbio"] = (m["nmi"] + m["ari"] + m["asw"]) / 3
    m["accuracy"] = hungarian_accuracy(labels, pred)
    return m


@doc_params
def clustering(
    adata: AnnData,
    *,
    label_key: str,
    use_reps: Sequence[str] | str = ("X_biomjepa", "X_pca"),
    seeds: Sequence[int] = DEFAULT_SEEDS,
    asw_max_cells: int = 20_000,
    baselines: Sequence[str] | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "lognorm"] = "counts",
    library_size_key: str | None = None,
) -> pd.DataFrame:
    """Cluster each embedding with k-means (k = number of true classes) and score the assignment.

    Labels are withheld from clustering and only used for scoring; cells without a label are dropped.
    NMI (arithmetic normalization), ARI, mean silhouette width (ASW, of the predicted clusters on the
    embedding, unscaled in [-1, 1]) and Hungarian-matched accuracy are computed from the same
    assignment; AvgBio is the mean of NMI, ARI and ASW (CellBench).

    Parameters
    ----------
    {adata_bench}
    label_key
        ``obs`` column with the true labels.
    {use_reps}
    seeds
        k-means seeds.
    asw_max_cells
        Silhouette subsample size (exact below it).
    {baselines}
    {layer_baselines}

    Returns
    -------
    Tidy table ``task, rep, setting, seed, metric, value`` with ``task="clustering"``,
    ``setting="kmeans"`` and metrics ``nmi, ari, asw, avgbio, accuracy``.
    """
    from .._checks import check_int, check_ints

    seeds, asw_max_cells = check_ints("seeds", seeds, low=0), check_int("asw_max_cells", asw_max_cells, low=2)
    reps = resolve_reps(adata, use_reps, baselines, layer, use_raw=use_raw, input=input,
                        library_size_key=library_size_key)
    labels, valid = get_labels(adata, label_key)
    idx = np.flatnonzero(valid)
    labels = labels[idx]
    if len(np.unique(labels)) < 2:
        raise ValueError(f"obs[{label_key!r}] needs at least two classes to score a clustering.")
    records = []
    for r in progress(reps, desc="clustering"):
        Z = get_rep(adata, r)[idx]
        for seed in seeds:
            records += rows("clustering", r, "kmeans", int(seed), cluster_scores(Z, labels, int(seed), asw_max_cells=asw_max_cells))
    return frame(records)
