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
bio-conservation / batch-correction scores can be added with :func:`scib_scores`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ._utils import frame, get_labels, get_rep, progress, resolve_reps, rows

if TYPE_CHECKING:
    from anndata import AnnData


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
    out = {"label_asw": float((silhouette_samples(Z, labels).mean() + 1) / 2)}
    if batches is not None:
        batches = np.asarray(batches)[idx]
        per_label = []
        for lab in np.unique(labels):
            m = labels == lab
            if len(np.unique(batches[m])) < 2 or m.sum() < 3:
                continue
            per_label.append(np.mean(1 - np.abs(silhouette_samples(Z[m], batches[m]))))
        out["batch_asw"] = float(np.mean(per_label)) if per_label else float("nan")
    return out


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
    use_reps
        ``obsm`` keys to score side by side.
    n_neighbors
        Neighbours per cell for the mixing share (15, as ``sc.pp.neighbors``' default).
    max_cells
        Silhouettes are computed on a seeded subsample of at most this many cells.
    baselines, layer
        See :func:`biomjepa.bench.add_baselines`.

    Returns
    -------
    Tidy table ``task, rep, setting, seed, metric, value`` with ``task="integration"``,
    ``setting="k=<n_neighbors>"`` and metrics ``cross_batch_share`` (1 = as mixed as chance) and, with
    ``label_key``, ``cross_batch_share_within_label``, ``label_asw`` and ``batch_asw``.
    """
    if not isinstance(n_neighbors, (int, np.integer)) or isinstance(n_neighbors, bool) or n_neighbors < 1:
        raise ValueError(f"n_neighbors must be an integer >= 1, got {n_neighbors!r}.")
    if not isinstance(max_cells, (int, np.integer)) or isinstance(max_cells, bool) or max_cells < 2:
        raise ValueError(f"max_cells must be an integer >= 2, got {max_cells!r}.")
    batches, valid = get_labels(adata, batch_key)
    labels = None
    if label_key is not None:
        labels, lvalid = get_labels(adata, label_key)
        valid &= lvalid
    idx = np.flatnonzero(valid)
    if len(np.unique(batches[idx])) < 2:
        raise ValueError(f"obs[{batch_key!r}] has a single batch among the scored cells; batch mixing needs two or more.")
    if len(idx) <= n_neighbors:
        raise ValueError(f"{len(idx)} cells with a batch{' and a label' if labels is not None else ''}: need more than "
                         f"n_neighbors={n_neighbors}.")
    reps = resolve_reps(adata, use_reps, baselines, layer)
    setting = f"k={int(n_neighbors)}"
    records = []
    for r in progress(reps, desc="integration"):
        Z, b = get_rep(adata, r)[idx], batches[idx]
        m = {"cross_batch_share": cross_batch_share(Z, b, n_neighbors=int(n_neighbors))}
        if labels is not None:
            lab = labels[idx]
            m["cross_batch_share_within_label"] = cross_batch_share(Z, b, n_neighbors=int(n_neighbors), groups=lab)
            m.update(silhouettes(Z, lab, b, max_cells=int(max_cells)))
        records += rows("integration", r, setting, None, m)
    return frame(records)
