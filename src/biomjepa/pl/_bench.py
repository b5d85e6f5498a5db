"""``bj.pl.bench``: mean ± s.d. over seeds of a ``bj.bench`` table, per setting and representation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

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
}


def bench(
    data: pd.DataFrame,
    *,
    metric: str | None = None,
    task: str | None = None,
    ax: Axes | None = None,
    show: bool | None = None,
) -> Axes:
    """Point plot of one metric: x = setting (e.g. ``top1/top5/top9``), one colour per representation.

    Points are means over seeds, error bars one standard deviation (none for a single seed).

    Parameters
    ----------
    data
        Tidy table from any ``bj.bench`` task or :func:`biomjepa.bench.run`.
    metric
        Metric to plot (default: the task's headline metric — annotation ``macro_f1``, clustering ``avgbio``,
        reconstruction ``pearson``, perturbation ``pearson_lfc_all``, geometry ``effective_rank``).
    task
        Task to plot when ``data`` holds several (default: the first one).
    ax
        Axes to draw into (new figure otherwise).
    show
        Call ``plt.show()`` after drawing.

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
    metric = metric or DEFAULT_METRIC.get(task, sub["metric"].iloc[0])
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
        ax.errorbar(x, r["mean"], yerr=r["sd"].fillna(0), fmt="o", capsize=3, ms=5, lw=1, label=rep)
    ax.set_xticks(np.arange(len(settings)), settings)
    ax.set_xlabel("setting")
    ax.set_ylabel(metric)
    ax.set_title(task)
    ax.legend(frameon=False, fontsize=8)
    if show:
        plt.show()
    return ax
