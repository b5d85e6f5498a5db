"""``bj.pl.perturbation_arithmetic``: observed vs random-pair additivity per double (Fig. 6d)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._docs import doc_params
from ._utils import stored_result

if TYPE_CHECKING:
    from anndata import AnnData
    from matplotlib.axes import Axes


@doc_params
def perturbation_arithmetic(
    adata: AnnData,
    *,
    key: str = "perturbation_arithmetic",
    highlight: Sequence[str | tuple[str, str]] | None = None,
    ax: Axes | None = None,
    show: bool | None = None,
) -> Axes:
    """``C_ab`` of every double (teal) next to its random-pair mean ± s.d. (grey), sorted by ``C_ab``.

    Parameters
    ----------
    adata
        AnnData after :func:`biomjepa.tl.perturbation_arithmetic`.
    key
        ``uns`` key of the result.
    highlight
        Doubles to label, as condition labels (``"A+B"``) or gene pairs (``("A", "B")``, any order); one label may
        be given as a string.
    {ax}
    {show}

    Returns
    -------
    The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    res = stored_result(adata, key, "table", "bj.tl.perturbation_arithmetic")
    t = res["table"].sort_values("observed", kind="stable").reset_index(drop=True)
    want = _highlighted(t, highlight)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 0.12 * len(t) + 2.5), 3.5))
    x = np.arange(len(t))
    ax.errorbar(x, t["random_mean"], yerr=t["random_sd"], fmt="o", color="0.6", ms=3, lw=0.8,
                label="random pairs (mean ± s.d.)")
    ax.scatter(x, t["observed"], color="#1b9e9e", s=16, zorder=3, label="matched pair")
    for i in np.flatnonzero(want):
        ax.annotate(f"{t['a'][i]}–{t['b'][i]}", (x[i], t["observed"][i]), xytext=(-4, 4),
                    textcoords="offset points", ha="right", va="bottom", fontsize=7)
    ax.set_xticks([])
    ax.set_xlabel(f"double perturbations (n = {len(t)})")
    ax.set_ylabel("cos(δ_ab, δ_a + δ_b)")
    s = res.get("summary", {})
    p = s.get("wilcoxon_pvalue", np.nan)
    if p is not None and np.isfinite(p):
        ax.set_title(f"{s['n_beating']}/{s['n_doubles']} beat random; paired Wilcoxon P={p:.3g}", fontsize=9)
    ax.margins(y=0.12)
    ax.legend(frameon=False, fontsize=7, loc="best")
    if show:
        plt.show()
    return ax


def _highlighted(t, highlight) -> np.ndarray:
    if not highlight:
        return np.zeros(len(t), bool)
    if isinstance(highlight, str):  # one label, not its characters
        highlight = [highlight]
    labels = {h for h in highlight if isinstance(h, str)}
    pairs = {frozenset(h) for h in highlight if not isinstance(h, str)}
    want = np.array([d in labels or frozenset((a, b)) in pairs for d, a, b in zip(t["double"], t["a"], t["b"])])
    missing = labels - set(t["double"])
    if missing:
        import warnings

        warnings.warn(f"Highlighted doubles not in the table: {sorted(missing)}.", stacklevel=3)
    return want
