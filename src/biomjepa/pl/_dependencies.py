"""``bj.pl.programme_dependencies``: heat map of directed programme dependencies ``I_{a→b}`` (Fig. 6c)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._docs import doc_params
from ._utils import stored_result

if TYPE_CHECKING:
    from anndata import AnnData
    from matplotlib.axes import Axes


@doc_params
def programme_dependencies(
    adata: AnnData,
    *,
    key: str = "programme_dependencies",
    cmap: str = "RdBu_r",
    annotate: bool = True,
    ax: Axes | None = None,
    show: bool | None = None,
) -> Axes:
    """Source programme (rows) × target programme (columns) heat map of ``I_{a→b}``.

    A diverging colour map centred at 0 with symmetric limits ``±max|I|``; red: ablating the
    source raises the target's prediction error beyond the matched-random expectation. Self pairs
    (the diagonal) are not evaluated and drawn grey. Descriptive: no significance is shown.

    Parameters
    ----------
    adata
        AnnData after :func:`biomjepa.tl.programme_dependencies`.
    key
        ``uns`` key of the result.
    cmap
        Diverging matplotlib colour map.
    annotate
        Write each value in its cell.
    {ax}
    {show}

    Returns
    -------
    The matplotlib Axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize

    res = stored_result(
        adata, key, "matrix",
        "bj.tl.programme_dependencies(adata, programmes, checkpoint=..., groupby=..., matched={programme: group})",
    )
    m = res["matrix"]
    vals = m.to_numpy(dtype=np.float64)
    lim = float(np.nanmax(np.abs(vals))) if np.isfinite(vals).any() else 1.0
    lim = lim if lim > 0 else 1.0
    if ax is None:
        side = 0.55 * max(len(m.columns), 3) + 1.8
        _, ax = plt.subplots(figsize=(side, 0.55 * max(len(m.index), 3) + 1.2))
    colours = plt.get_cmap(cmap).with_extremes(bad="0.85")
    im = ax.imshow(np.ma.masked_invalid(vals), cmap=colours, norm=Normalize(-lim, lim), aspect="auto")
    ax.set_xticks(np.arange(len(m.columns)), [str(c) for c in m.columns], rotation=45, ha="right")
    ax.set_yticks(np.arange(len(m.index)), [str(r) for r in m.index])
    ax.set_xlabel("target programme b")
    ax.set_ylabel("ablated context programme a")
    if annotate:
        for (i, j), v in np.ndenumerate(vals):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=7,
                        color="white" if abs(v) > 0.6 * lim else "black")
    ax.figure.colorbar(im, ax=ax, label="I(a→b): excess target error", shrink=0.8)
    if show:
        plt.show()
    return ax
