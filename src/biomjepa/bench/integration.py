"""Batch integration: do cells of one type from different batches (chemistries, donors) mix?

``cross_batch_share``: for each cell, the share of its ``k`` nearest neighbours (Euclidean, the cell
itself excluded) that come from another batch, divided by the share expected if neighbours were drawn
at random from all other cells (``(N − N_b) / (N − 1)`` for a cell of batch ``b``); averaged over cells.
1 = as mixed as chance, 0 = every neighbour from the cell's own batch. With ``label_key`` the same
is also computed *within* each label (neighbours and expectation restricted to cells of the same
label: ``cross_batch_share_within_label``), which does not reward mixing different cell types.

``label_asw``: silhouette width of the labels (Euclidean), rescaled to ``(s + 1) / 2`` in [0, 1]
as in scib (higher = cell types better separated). ``batch_asw``: scib's batch silhouette: per
label, ``1 − |s_batch|`` averaged over its cells, then over labels (1 = batches mixed within types).
When ``scib-metrics`` is installed (``pip install "biomjepa[scib]"``) its aggregate
bio-conservation / batch-correction scores are added with ``scib=True`` or :func:`scib_scores`
(its ``Benchmarker``, not a re-implementation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from .._docs import doc_params
from ._source import source_kwargs
from ._utils import frame, get_labels, get_rep, progress, rows
from .baselines import fit_pca, resolve_reps

if TYPE_CHECKING:
    from anndata import AnnData

SCIB_HINT = 'pip install "biomjepa[scib]"'


def cross_batch_share(Z: np.ndarray, batches: np.ndarray, *, n_neighbors: int = 15, groups: np.ndarray | None = None) -> float:
    """Observed / expected share of other-batch neighbours, averaged over cells (see the module docstring).

    With ``groups`` the neighbours of a cell are searched among cells of its own group only (cells
    of groups with a single batch or fewer than ``n_neighbors + 1`` cells are skipped).
    """
    from sklearn.neighbors import NearestNeighbors

    batches = np.asarray(batches)
    if groups is None:
        groups = np.zeros(len(Z), dtype=int)
    scores = []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        b = batches[idx]
        if len(idx) <= n_neighbors or len(np.unique(b)) < 2:
            continue
        nn = NearestNeighbors(n_neighbors=n_neighbors + 1).fit(Z[idx])
        nbr = nn.kneighbors(Z[idx], return_distance=False)[:, 1:]
        observed = (b[nbr] != b[:, None]).mean(1)
        _, inv, counts = np.unique(b, return_inverse=True, return_counts=True)
        expected = (len(idx) - counts[inv]) / (len(idx) - 1)
        scores.append(observed / expected)
    return float(np.mean(np.concatenate(scores))) if scores else float("nan")


def silhouettes(Z: np.ndarray, labels: np.ndarray, batches: np.ndarray | None, *, max_cells: int = 20_000,
                seed: int = 0) -> dict[str, float]:
    """``label_asw`` ((s + 1) / 2 of the labels) and, with ``batches``, scib's ``batch_asw``."""
    from sklearn.metrics import silhouette_samples

    rng = np.random.default_rng(seed)
    idx = np.arange(len(Z)) if len(Z) <= max_cells else np.sort(rng.choice(len(Z), max_cells, replace=False))
    Z, labels = Z[idx], np.asarray(labels)[idx]
    out = {"label_asw": float((silhouette_samples(Z, labels).mean() + 1) / 2) if _silhouette_ok(labels) else np.nan}
    if batches is not None:
        batches = np.asarray(batches)[idx]
        per_label = []
        for lab in np.unique(labels):
            m = labels == lab
            if not _silhouette_ok(batches[m]):  # silhouettes need 2 .. n - 1 groups
                continue
            per_label.append(np.mean(1 - np.abs(silhouette_samples(Z[m], batches[m]))))
        out["batch_asw"] = float(np.mean(per_label)) if per_label else float("nan")
    return out


def _silhouette_ok(groups: np.ndarray) -> bool:
    """Whether a silhouette is defined: between 2 and ``n - 1`` distinct groups among ``n`` cells."""
    return 2 <= len(np.unique(groups)) <= len(groups) - 1


def _label_checks(batches: np.ndarray, labels: np.ndarray, n_neighbors: int, label_key: str) -> set[str]:
    """The label metrics that no group of these cells can give (warned about and left out), or a clear error."""
    import warnings

    names = np.unique(labels)
    if len(names) < 2:
        raise ValueError(f"obs[{label_key!r}] (label_key) has a single label ({names[0]!r}) among the scored cells; "
                         "label silhouettes need two or more. Pass label_key=None to score batch mixing only.")
    mixed = [lab for lab in names if len(np.unique(batches[labels == lab])) >= 2]
    drop = set()
    if not any((labels == lab).sum() > n_neighbors for lab in mixed):
        drop.add("cross_batch_share_within_label")
    if not any(_silhouette_ok(batches[labels == lab]) for lab in mixed):
        drop.add("batch_asw")
    if drop:
        warnings.warn(f"{sorted(drop)} left out: no label of obs[{label_key!r}] has cells from two or more batches "
                      f"(the within-label share also needs more than n_neighbors={n_neighbors} cells of such a label). "
                      "Labels that coincide with the batches cannot show mixing within a cell type.", UserWarning,
                      stacklevel=3)
    return drop


@doc_params
def integration(
    adata: AnnData,
    *,
    batch_key: str,
    label_key: str | None = None,
    use_reps: Sequence[str] | str = ("X_biomjepa", "X_pca"),
    n_neighbors: int = 15,
    max_cells: int = 20_000,
    baselines: Sequence[str] | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "lognorm"] = "counts",
    library_size_key: str | None = None,
    scib: bool = False,
    baseline_kwargs: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Batch mixing and label separation of each embedding (``bj.bench`` task ``"integration"``).

    Parameters
    ----------
    adata
        AnnData with embeddings in ``obsm`` and the batch (and label) columns in ``obs``. Not
        modified, except for the baseline keys written when ``baselines`` is given.
    batch_key
        ``obs`` column naming each cell's batch (e.g. the 10x chemistry or the donor); ≥ 2 batches.
    label_key
        ``obs`` column with cell types; adds ``label_asw``, ``batch_asw`` and the within-label mixing.
    {use_reps}
    n_neighbors
        Neighbours per cell for the mixing share (15, as ``sc.pp.neighbors``' default).
    max_cells
        Silhouettes are computed on a seeded subsample of at most this many cells.
    baselines
        See :func:`biomjepa.bench.add_baselines`; ``"scvi"`` is trained with ``batch_key`` as its batch.
    {layer_baselines}
    scib
        Also score with scib-metrics' ``Benchmarker`` (:func:`scib_scores`; needs ``label_key`` and
        ``pip install "biomjepa[scib]"``).
    {baseline_kwargs}

    Returns
    -------
    Tidy table ``task, rep, setting, seed, metric, value`` with ``task="integration"``,
    ``setting="k=<n_neighbors>"`` and metrics ``cross_batch_share`` (1 = as mixed as chance) and, with
    ``label_key``, ``cross_batch_share_within_label``, ``label_asw`` and ``batch_asw``; with ``scib``
    also the ``setting="scib"`` rows of :func:`scib_scores`.
    """
    if not isinstance(n_neighbors, (int, np.integer)) or isinstance(n_neighbors, bool) or n_neighbors < 1:
        raise ValueError(f"n_neighbors must be an integer >= 1, got {n_neighbors!r}.")
    if not isinstance(max_cells, (int, np.integer)) or isinstance(max_cells, bool) or max_cells < 2:
        raise ValueError(f"max_cells must be an integer >= 2, got {max_cells!r}.")
    if label_key is not None and label_key == batch_key:
        raise ValueError(f"label_key={label_key!r} is the batch_key: pass label_key= the obs column of cell types "
                         "(mixing is scored within each type), or label_key=None.")
    batches, valid = get_labels(adata, batch_key, arg="batch_key")
    labels = None
    if label_key is not None:
        labels, lvalid = get_labels(adata, label_key)
        valid &= lvalid
    if scib:
        check_scib(label_key)
    idx = np.flatnonzero(valid)
    if len(np.unique(batches[idx])) < 2:
        raise ValueError(f"obs[{batch_key!r}] has a single batch among the scored cells; batch mixing needs two or more.")
    if len(idx) <= n_neighbors:
        raise ValueError(f"{len(idx)} cells with a batch{' and a label' if labels is not None else ''}: need more than "
                         f"n_neighbors={n_neighbors}.")
    src = source_kwargs(layer, use_raw, input, library_size_key)
    drop = _label_checks(batches[idx], labels[idx], int(n_neighbors), label_key) if labels is not None else set()
    reps = resolve_reps(adata, use_reps, baselines, **src, **{"batch_key": batch_key, **(baseline_kwargs or {})})
    setting = f"k={int(n_neighbors)}"
    records = []
    for r in progress(reps, desc="integration"):
        Z, b = get_rep(adata, r)[idx], batches[idx]
        m = {"cross_batch_share": cross_batch_share(Z, b, n_neighbors=int(n_neighbors))}
        if labels is not None:
            lab = labels[idx]
            m["cross_batch_share_within_label"] = cross_batch_share(Z, b, n_neighbors=int(n_neighbors), groups=lab)
            m.update(silhouettes(Z, lab, b, max_cells=int(max_cells)))
            m = {k: v for k, v in m.items() if k not in drop}
        records += rows("integration", r, setting, None, m)
    out = frame(records)
    if scib:
        scores = scib_scores(adata, batch_key=batch_key, label_key=label_key, use_reps=reps, **src)
        out = pd.concat([out, scores], ignore_index=True)
    return out


def check_scib(label_key: str | None) -> None:
    import importlib.util

    if label_key is None:
        raise ValueError("scib=True needs `label_key=` (scib-metrics scores bio conservation against cell-type labels).")
    if importlib.util.find_spec("scib_metrics") is None:
        raise ImportError(f"scib=True needs scib-metrics, which is not installed: {SCIB_HINT}, or pass scib=False.")


@doc_params
def scib_scores(
    adata: AnnData,
    *,
    batch_key: str,
    label_key: str,
    use_reps: Sequence[str] | str = ("X_biomjepa", "X_pca"),
    pre_integrated: str | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "lognorm"] = "counts",
    library_size_key: str | None = None,
    benchmarker_kwargs: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """scib-metrics' bio-conservation and batch-correction scores of each embedding (its ``Benchmarker``).

    Runs ``scib_metrics.benchmark.Benchmarker`` on the cells with a batch and a label, with its default
    metrics unless ``benchmarker_kwargs`` says otherwise, and reads ``get_results(min_max_scale=False)``:
    unscaled scores, so a rep's scores do not depend on which other reps are compared. Needs
    ``pip install "biomjepa[scib]"``.

    Parameters
    ----------
    adata
        AnnData with embeddings in ``obsm``, batch and label columns in ``obs``. Not modified.
    batch_key, label_key
        ``obs`` columns with each cell's batch and cell type.
    {use_reps}
    pre_integrated
        ``obsm`` key of an unintegrated embedding for scib's PCR comparison (None: PCA-50 of the
        log-normalized HVGs of the counts of the scored cells, as ``baselines=["pca"]``).
    {layer_baselines}
    benchmarker_kwargs
        Extra ``Benchmarker`` arguments, e.g. ``{"bio_conservation_metrics":
        BioConservation(nmi_ari_cluster_labels_leiden=True)}`` for Leiden NMI / ARI.

    Returns
    -------
    Tidy table with ``task="integration"``, ``setting="scib"`` and one metric per scib-metrics score,
    named ``scib_<metric>`` (e.g. ``scib_kbet_per_label``, ``scib_nmi_ari_cluster_labels_kmeans_ari``),
    plus the aggregates ``scib_bio_conservation``, ``scib_batch_correction`` and ``scib_total``
    (0.6 · bio + 0.4 · batch, scib's weighting).
    """
    import anndata as ad

    from .._settings import settings

    check_scib(label_key)
    batches, valid = get_labels(adata, batch_key, arg="batch_key")
    labels, lvalid = get_labels(adata, label_key)
    idx = np.flatnonzero(valid & lvalid)
    if len(np.unique(batches[idx])) < 2:
        raise ValueError(f"obs[{batch_key!r}] has a single batch among the labelled cells; scib needs two or more.")
    reps = resolve_reps(adata, use_reps, None, None)
    if pre_integrated is None:
        X_pre = fit_pca(adata[idx], layer=layer, use_raw=use_raw, input=input, library_size_key=library_size_key)[0]
    else:
        X_pre = get_rep(adata, pre_integrated)[idx]
    from scib_metrics.benchmark import Benchmarker

    tmp = ad.AnnData(np.zeros((len(idx), 1), np.float32),
                     obs=pd.DataFrame({"batch": batches[idx], "label": labels[idx]}, index=adata.obs_names[idx].astype(str)))
    names = {r: f"rep{i}" for i, r in enumerate(reps)}  # obsm keys scib can use whatever the user's keys are
    for r, k in names.items():
        tmp.obsm[k] = get_rep(adata, r)[idx].astype(np.float32)
    tmp.obsm["X_pre"] = np.asarray(X_pre, dtype=np.float32)
    bm = Benchmarker(tmp, batch_key="batch", label_key="label", embedding_obsm_keys=list(names.values()),
                     pre_integrated_embedding_obsm_key="X_pre", progress_bar=settings.show_progress,
                     **dict(benchmarker_kwargs or {}))
    bm.benchmark()
    res = bm.get_results(min_max_scale=False, clean_names=False)
    records = []
    for r, k in names.items():
        m = {"scib_" + str(c).lower().replace(" ", "_"): float(res.loc[k, c]) for c in res.columns}
        records += rows("integration", r, "scib", None, m)
    return frame(records)
