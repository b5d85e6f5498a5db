"""``bj.pl.ablate_programme``: matched vs other-identity excess shift per programme (Fig. 6b)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._docs import doc_params
from ._utils import stored_result

if TYPE_CHECKING:
    from anndata import AnnData
    from matplotlib.axes import Axes


@doc_params
def ablate_programme(
    adata: AnnData,
    *,
    key: str = "ablation",
    ax: Axes | None = None,
    show: bool | None = None,
) -> Axes:
    """Paired matched/other-identity mean excess displacement per programme.

    Each programme is a line joining its matched-identity mean excess to the mean excess of the
    other identities' cells; the title reports the paired Wilcoxon test across programmes.

    Parameters
    ----------
    adata
        AnnData after :func:`biomjepa.tl.ablate_programme` with ``matched``.
    key
        ``uns`` key of the result.
    {ax}
    {show}

    Returns
    -------
    The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    res = stored_result(
        adata, key, "matched", "bj.tl.ablate_programme(adata, programmes, groupby=..., matched={programme: group})"
    )
    m, test = res["matched"], res["test"]
    if ax is None:
        _, ax = plt.subplots(figsize=(3.2, 4.0))
    x = np.array([0.0, 1.0])
    for _, row in m.iterrows():
        y = [row["other_excess"], row["matched_excess"]]
        ax.plot(x, y, color="0.6", lw=1, zorder=1)
        ax.scatter(x, y, c=["0.5", "#1b9e9e"], s=28, zorder=2)
        ax.annotate(str(row["programme"]), (1.0, row["matched_excess"]), xytext=(5, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.axhline(0, color="0.8", lw=0.8, ls="--", zorder=0)
    ax.set_xticks(x, ["other identities", "matched identity"])
    ax.set_xlim(-0.4, 1.6)
    ax.set_ylabel("excess embedding shift (D − D̃)")
    p = test.get("pvalue", np.nan)
    ax.set_title(f"paired Wilcoxon n={test['n']}, P={p:.3g}" if np.isfinite(p) else f"n={test['n']} programmes",
                 fontsize=9)
    if show:
        plt.show()
    return ax
