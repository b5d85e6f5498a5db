"""Few-shot annotation (CellBench-LS within-dataset protocol): k labelled cells per class → SVM."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from .._docs import doc_params
from ._utils import DEFAULT_SEEDS, frame, get_labels, get_rep, progress, rows
from .baselines import resolve_reps

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)


def support_split(labels: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Label-stratified support set of ``k`` cells per class; every other cell of an evaluable class is held out.

    Classes are visited in sorted order and each draws ``k`` indices without replacement from one
    ``numpy.random.default_rng(seed)``, so the split depends only on ``labels``, ``k`` and ``seed``.
    Classes with fewer than ``k + 1`` cells cannot give a held-out cell and are skipped (returned).

    Parameters
    ----------
    labels
        ``[N]`` class labels.
    k
        Support cells per class.
    seed
        Seed of the generator.

    Returns
    -------
    ``(support, held_out, skipped)``: sorted index arrays and the skipped class names.
    """
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    skipped = [str(c) for c, n in zip(classes, counts) if n < k + 1]
    support = []
    for c, n in zip(classes, counts):
        if n >= k + 1:
            support.append(rng.choice(np.flatnonzero(labels == c), size=k, replace=False))
    support = np.sort(np.concatenate(support)) if support else np.array([], dtype=int)
    evaluable = ~np.isin(labels, skipped)
    held_out = np.setdiff1d(np.flatnonzero(evaluable), support)
    return support, held_out, skipped


def svm_scores(Z: np.ndarray, labels: np.ndarray, support: np.ndarray, held_out: np.ndarray, *, C: float = 1.0) -> dict[str, float]:
    """Fit ``StandardScaler`` + linear ``SVC(C)`` on the support cells and score the held-out cells.

    Parameters
    ----------
    Z
        ``[N, d]`` embedding.
    labels
        ``[N]`` labels.
    support
        Indices of the training cells.
    held_out
        Indices of the evaluation cells.
    C
        SVM regularization.

    Returns
    -------
    ``{"accuracy", "macro_f1", "macro_recall"}`` over the classes present in the held-out set.
    """
    from sklearn.metrics import accuracy_score, f1_score, recall_score
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    scaler = StandardScaler().fit(Z[support])
    clf = SVC(kernel="linear", C=C).fit(scaler.transform(Z[support]), labels[support])
    y, pred = labels[held_out], clf.predict(scaler.transform(Z[held_out]))
    present = np.unique(y)
    return {
        "accuracy": accuracy_score(y, pred),
        "macro_f1": f1_score(y, pred, labels=present, average="macro", zero_division=0),
        "macro_recall": recall_score(y, pred, labels=present, average="macro", zero_division=0),
    }


@doc_params
def annotation(
    adata: AnnData,
    *,
    label_key: str,
    use_reps: Sequence[str] | str = ("X_biomjepa", "X_pca"),
    shots: Sequence[int] = (1, 5, 9),
    seeds: Sequence[int] = DEFAULT_SEEDS,
    C: float = 1.0,
    baselines: Sequence[str] | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "reads", "lognorm"] = "counts",
    library_size_key: str | None = None,
) -> pd.DataFrame:
    """Few-shot cell-type annotation from frozen embeddings.

    For every ``k`` in ``shots`` and seed, :func:`support_split` draws ``k`` support cells per class
    (label-stratified, ``numpy.random.default_rng(seed)``; the same cells for every representation)
    and all remaining labelled cells are held out. A linear-kernel ``sklearn.svm.SVC(C=1)`` is fitted
    on the support embeddings after a ``StandardScaler`` fitted on the support set. Cells without a
    label are ignored. Classes with fewer than ``k + 1`` labelled cells are **skipped** for that ``k``
    (a warning lists them); fewer than two remaining classes is a ValueError.

    Parameters
    ----------
    {adata_bench}
    label_key
        ``obs`` column with the cell-type labels.
    {use_reps}
    shots
        Support cells per class.
    seeds
        Support-set seeds (paper: 42–46).
    C
        SVM regularization, identical for all representations.
    {baselines}
    {layer_baselines}

    Returns
    -------
    Tidy table ``task, rep, setting, seed, metric, value`` with ``task="annotation"``,
    ``setting="top{k}"`` and metrics ``accuracy``, ``macro_f1``, ``macro_recall``.
    """
    from .._checks import check_ints, check_number

    shots, seeds = check_ints("shots", shots), check_ints("seeds", seeds, low=0)
    C = check_number("C", C, low=0, low_open=True)
    reps = resolve_reps(adata, use_reps, baselines, layer, use_raw=use_raw, input=input,
                        library_size_key=library_size_key)
    labels, valid = get_labels(adata, label_key)
    idx = np.flatnonzero(valid)
    labels = labels[idx]
    Zs = {r: get_rep(adata, r)[idx] for r in reps}
    records = []
    jobs = [(k, s) for k in shots for s in seeds]
    for k, seed in progress(jobs, desc="annotation"):
        support, held_out, skipped = support_split(labels, int(k), int(seed))
        if skipped and seed == seeds[0]:
            warnings.warn(f"top{k}: skipping classes with fewer than {k + 1} labelled cells: {skipped}", stacklevel=2)
        if len(np.unique(labels[support])) < 2:
            raise ValueError(f"top{k}: fewer than two classes have at least {k + 1} labelled cells in obs[{label_key!r}].")
        for r in reps:
            records += rows("annotation", r, f"top{k}", int(seed), svm_scores(Zs[r], labels, support, held_out, C=C))
    return frame(records)
