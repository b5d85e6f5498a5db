"""``bj.bench.run``: several benchmark tasks on the same representations, one tidy table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from ._utils import DEFAULT_SEEDS, progress, resolve_reps

if TYPE_CHECKING:
    from anndata import AnnData

TASKS = ("annotation", "clustering", "reconstruction", "perturbation", "geometry", "integration")
_NEEDS_LABELS = {"annotation", "clustering", "reconstruction"}


def run(
    adata: AnnData,
    *,
    label_key: str | None = None,
    tasks: Sequence[str] = ("annotation", "clustering", "reconstruction", "geometry"),
    use_reps: Sequence[str] | str = ("X_biomjepa", "X_pca"),
    baselines: Sequence[str] | None = None,
    layer: str | None = None,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    task_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> pd.DataFrame:
    """Run several ``bj.bench`` tasks and concatenate their tidy tables.

    Baselines are computed once, before any task, and scored alongside ``use_reps``.

    Parameters
    ----------
    adata
        AnnData with embeddings (and labels / counts as the tasks need). Not modified, except for the
        baseline keys written when ``baselines`` is given.
    label_key
        ``obs`` label column (required by annotation, clustering and reconstruction).
    tasks
        Any of ``"annotation", "clustering", "reconstruction", "perturbation", "geometry", "integration"``
        (``integration`` needs ``task_kwargs={"integration": {"batch_key": ...}}``; it uses ``label_key`` when given).
    use_reps
        ``obsm`` keys to score.
    baselines
        Baselines to compute and add, see :func:`biomjepa.bench.add_baselines`.
    layer
        Layer with raw counts (baselines, reconstruction target, geometry depth); None: X.
    seeds
        Seeds of every seeded task.
    task_kwargs
        Extra keyword arguments per task, e.g. ``{"perturbation": {"perturbation_key": "condition"},
        "reconstruction": {"budgets": (100,)}}``.

    Returns
    -------
    The concatenated table (columns ``task, rep, setting, seed, metric, value``); perturbation's split is
    kept in ``attrs["split"]``.
    """
    from . import annotation, clustering, geometry, integration, perturbation, reconstruction

    unknown = set(tasks) - set(TASKS)
    if unknown:
        raise ValueError(f"unknown tasks {sorted(unknown)}; choose from {list(TASKS)}.")
    if _NEEDS_LABELS & set(tasks) and label_key is None:
        raise ValueError(f"tasks {sorted(_NEEDS_LABELS & set(tasks))} need `label_key=`.")
    task_kwargs = dict(task_kwargs or {})
    reps = resolve_reps(adata, use_reps, baselines, layer)
    funcs = {"annotation": annotation, "clustering": clustering, "reconstruction": reconstruction,
             "perturbation": perturbation, "geometry": geometry, "integration": integration}
    frames, attrs = [], {}
    for t in progress(list(tasks), desc="bench"):
        kw: dict[str, Any] = {"use_reps": reps, "layer": layer}
        if t in _NEEDS_LABELS or (t == "integration" and label_key is not None):
            kw["label_key"] = label_key
        if t not in ("geometry", "integration"):
            kw["seeds"] = seeds
        kw.update(task_kwargs.get(t, {}))
        df = funcs[t](adata, **kw)
        attrs.update(df.attrs)
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out.attrs = attrs
    return out
