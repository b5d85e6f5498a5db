"""``bj.bench.run``: several benchmark tasks on the same representations, one tidy table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from .._docs import doc_params
from ._source import check_source, source_kwargs
from ._utils import DEFAULT_SEEDS, progress
from .baselines import resolve_reps
from .integration import check_scib

if TYPE_CHECKING:
    from anndata import AnnData

TASKS = ("annotation", "clustering", "reconstruction", "perturbation", "geometry", "integration")
DEFAULT_TASKS = ("annotation", "clustering", "reconstruction", "geometry")
_NEEDS_LABELS = {"annotation", "clustering", "reconstruction"}


@doc_params
def run(
    adata: AnnData,
    *,
    label_key: str | None = None,
    batch_key: str | None = None,
    tasks: Sequence[str] | None = None,
    use_reps: Sequence[str] | str = ("X_biomjepa", "X_pca"),
    baselines: Sequence[str] | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "lognorm"] = "counts",
    library_size_key: str | None = None,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    baseline_kwargs: Mapping[str, Any] | None = None,
    task_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> pd.DataFrame:
    """Run several ``bj.bench`` tasks and concatenate their tidy tables.

    Baselines are computed once, before any task, on all cells of ``adata`` (the cells the model
    embedded) and scored alongside ``use_reps`` with the same protocol (same support sets, k-means
    seeds, neighbours).

    Parameters
    ----------
    adata
        AnnData with embeddings (and labels / counts as the tasks need). Not modified, except for the
        baseline keys written when ``baselines`` is given.
    label_key
        ``obs`` label column (required by annotation, clustering and reconstruction).
    batch_key
        ``obs`` batch column (chemistry, donor): the ``"scvi"`` baseline is trained with it as its batch,
        and the ``"integration"`` task (added to the default tasks) scores batch mixing over it.
    tasks
        Any of ``"annotation", "clustering", "reconstruction", "perturbation", "geometry", "integration"``
        (None: the first four, with ``"integration"`` when ``batch_key`` is given). ``integration`` uses
        ``label_key`` when given.
    {use_reps}
    {baselines}
    {layer_baselines}
    seeds
        Seeds of every seeded task.
    {baseline_kwargs}
    task_kwargs
        Extra keyword arguments per task, e.g. ``{"perturbation": {"perturbation_key": "condition"},
        "reconstruction": {"budgets": (100,)}, "integration": {"scib": True}}``.

    Returns
    -------
    The concatenated table (columns ``task, rep, setting, seed, metric, value``); perturbation's split is
    kept in ``attrs["split"]``.
    """
    from . import annotation, clustering, geometry, integration, perturbation, reconstruction

    task_kwargs = {t: dict(kw) for t, kw in (task_kwargs or {}).items()}
    if tasks is None:
        tasks = DEFAULT_TASKS + (("integration",) if batch_key is not None else ())
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    unknown = set(tasks) - set(TASKS)
    if unknown:
        raise ValueError(f"unknown tasks {sorted(unknown)}; choose from {list(TASKS)}.")
    if _NEEDS_LABELS & set(tasks) and label_key is None:
        raise ValueError(f"tasks {sorted(_NEEDS_LABELS & set(tasks))} need `label_key=`.")
    if "integration" in tasks:
        ikw = task_kwargs.setdefault("integration", {})
        if batch_key is not None:
            ikw.setdefault("batch_key", batch_key)
        if "batch_key" not in ikw:
            raise ValueError("task 'integration' needs `batch_key=` (the obs column with each cell's batch).")
        batch_key = ikw["batch_key"] if batch_key is None else batch_key
        if ikw.get("scib"):
            check_scib(ikw.get("label_key", label_key))
    # every argument is checked here, before a baseline is written into adata
    src = source_kwargs(layer, use_raw, input, library_size_key)
    check_source(adata, **src)
    reps = resolve_reps(adata, use_reps, baselines, **src, batch_key=batch_key, **dict(baseline_kwargs or {}))
    funcs = {"annotation": annotation, "clustering": clustering, "reconstruction": reconstruction,
             "perturbation": perturbation, "geometry": geometry, "integration": integration}
    frames, attrs = [], {}
    for t in progress(tasks, desc="bench"):
        kw: dict[str, Any] = {"use_reps": reps, **src}
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
