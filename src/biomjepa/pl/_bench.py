"""``bj.pl.bench``: mean ± s.d. over seeds of a ``bj.bench`` table, per setting and representation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._docs import doc_params

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

#: metric shown when ``metric=None``, per task.
DEFAULT_METRIC = {
    "annotation": "macro_f1",
    "clustering": "avgbio",
    "reconstruction": "pearson",
    "perturbation": "pearson_lfc_all",
    "geometry": "effective_rank",
    "integration": "cross_batch_share_within_label",
}
#: fallbacks when the default metric is absent (an integration table scored without labels).
FALLBACK_METRIC = {"integration": "cross_batch_share"}
#: legend names of the obsm keys ``bj.tl.embed`` and ``bj.bench.add_baselines`` write; others are shown as is.
REP_LABELS = {
    "X_biomjepa": "BioM-JEPA",
    "X_pca50": "PCA-50",
    "X_hvg": "HVG (log-norm.)",
    "X_scvi": "scVI",
    "X_umap_pca50": "UMAP (PCA-50)",
}


@doc_params
def bench(
    data: pd.DataFrame,
    *,
    metric: str | None = None,
    task: str | None = None,
    ax: Axes | None = None,
    show: bool | None = None,
) -> Axes:
    """Point plot of one metric: x = setting (e.g. ``top1/top5/top9``), one colour per representation.

    Points are means over seeds, error bars one standard deviation (none for a single seed). BioM-JEPA
    and the baselines of :func:`biomjepa.bench.add_baselines` (PCA-50, HVG, scVI) keep the same colour
    and legend name in every plot; other ``obsm`` keys follow them in the colour cycle.

    Parameters
    ----------
    data
        Tidy table from any ``bj.bench`` task or :func:`biomjepa.bench.run`.
    metric
        Metric to plot (default: the task's headline metric — annotation ``macro_f1``, clustering ``avgbio``,
        reconstruction ``pearson``, perturbation ``pearson_lfc_all``, geometry ``effective_rank``,
        integration ``cross_batch_share_within_label``, else ``cross_batch_share``).
    task
        Task to plot when ``data`` holds several (default: the first one).
    {ax}
    {show}

    Returns
    -------
    The matplotlib Axes.
    """
    import matplotlib.pyplot as plt
    import pandas as pd

    from ..bench import summarize

    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"`data` must be the DataFrame a bj.bench task returns (e.g. `bj.bench.run(adata, ...)`, or "
                        f"`pd.read_csv` of a saved one), got {type(data).__name__}.")
    if len(data) == 0:
        raise ValueError("empty bj.bench table; nothing to plot.")
    tasks = list(dict.fromkeys(data["task"]))
    task = task or tasks[0]
    if task not in tasks:
        raise ValueError(f"task {task!r} not in the table (has {tasks}).")
    sub = data[data["task"] == task]
    if metric is None:
        metric = DEFAULT_METRIC.get(task, sub["metric"].iloc[0])
        if metric not in set(sub["metric"]):
            metric = FALLBACK_METRIC.get(task, sub["metric"].iloc[0])
    s = summarize(sub[sub["metric"] == metric])
    if len(s) == 0:
        raise ValueError(f"metric {metric!r} not found for task {task!r}; have {sorted(sub['metric'].unique())}.")
    settings, reps = list(dict.fromkeys(s["setting"])), list(dict.fromkeys(s["rep"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 1.1 * len(settings) + 1.8), 3.2))
    width = 0.7 / max(len(reps), 1)
    for j, rep in enumerate(reps):
        r = s[s["rep"] == rep].set_index("setting").reindex(settings)
        x = np.arange(len(settings)) + (j - (len(reps) - 1) / 2) * width
        ax.errorbar(x, r["mean"], yerr=r["sd"].fillna(0), fmt="o", capsize=3, ms=5, lw=1, color=_colour(rep, reps),
                    label=REP_LABELS.get(rep, rep))
    ax.set_xticks(np.arange(len(settings)), settings)
    ax.set_xlabel("setting")
    ax.set_ylabel(metric)
    ax.set_title(task)
    ax.legend(frameon=False, fontsize=8)
    if show:
        plt.show()
    return ax


def _colour(rep: str, reps: list[str]) -> str:
    """A fixed colour (``C0``…) per known rep, the next free ones for the others in order of appearance."""
    known = list(REP_LABELS)
    if rep in known:
        return f"C{known.index(rep)}"
    others = [r for r in reps if r not in known]
    return f"C{(len(known) + others.index(rep)) % 10}"
