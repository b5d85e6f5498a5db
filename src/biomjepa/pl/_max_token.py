"""``bj.pl.max_token``: heat map of max-token winner fractions, groups × genes (Fig. 6a)."""

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
def max_token(
    adata: AnnData,
    groupby: str | None = None,
    *,
    genes: Sequence[str] | None = None,
    n_genes: int = 20,
    key: str = "max_token",
    cmap: str = "viridis",
    ax: Axes | None = None,
    show: bool | None = None,
) -> Axes:
    """Winner fractions ``A_cg`` from :func:`biomjepa.tl.max_token` as a groups × genes heat map.

    Genes are those with the largest winner fraction in any group (``n_genes`` of them), or
    ``genes``; columns are ordered by the group in which a gene peaks (in row order), then by its
    largest winner fraction, so canonical markers line up on the diagonal.

    Parameters
    ----------
    adata
        AnnData after :func:`biomjepa.tl.max_token` with ``groupby``.
    groupby
        Must match the ``groupby`` of the stored result, if given (rows keep its order).
    genes
        Genes to show (absent ones show as zero columns).
    n_genes
        Number of genes when ``genes`` is not given.
    key
        ``uns`` key of the result.
    cmap
        Colour map.
    {ax}
    {show}

    Returns
    -------
    The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    from .._checks import check_int

    n_genes = check_int("n_genes", n_genes)
    res = stored_result(adata, key, "winner_fraction", "bj.tl.max_token(adata, groupby=...)")
    stored = res.get("params", {}).get("groupby")
    if groupby is not None and stored is not None and groupby != stored:
        raise ValueError(f"uns[{key!r}] was computed with groupby={stored!r}, not {groupby!r}.")
    A = res["winner_fraction"]
    if genes is None:
        cols = A.max(axis=0).sort_values(ascending=False, kind="stable").index[:n_genes]
        sub = A[cols]
        peak_row = np.argmax(sub.to_numpy(), axis=0)
        order = np.lexsort((-sub.max(axis=0).to_numpy(), peak_row))
        sub = sub.iloc[:, order]
    else:
        sub = A.reindex(columns=list(genes), fill_value=0.0)
    if ax is None:
        _, ax = plt.subplots(figsize=(0.35 * sub.shape[1] + 2.5, 0.35 * sub.shape[0] + 1.5))
    im = ax.imshow(sub.to_numpy(), aspect="auto", cmap=cmap, vmin=0, vmax=max(float(sub.to_numpy().max()), 1e-9))
    ax.set_xticks(range(sub.shape[1]), sub.columns, rotation=90, fontstyle="italic")
    ax.set_yticks(range(sub.shape[0]), sub.index)
    ax.set_xlabel("max-token winner gene")
    ax.set_ylabel(stored or groupby or "group")
    ax.figure.colorbar(im, ax=ax, label="winner fraction")
    if show:
        plt.show()
    return ax
