"""``bj.tl.max_token``: which gene supplies each cell's max-pooled representation (Fig. 6a)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

import numpy as np

from .._docs import doc_params
from .._settings import settings
from ..data.owners import marker
from ..data.resolved import resolve, store
from ._utils import check_batch_size, labels_or_drop

if TYPE_CHECKING:
    import pandas as pd
    import torch
    from anndata import AnnData

logger = logging.getLogger(__name__)


def max_token_shares(
    hidden: torch.Tensor, gene_mask: torch.Tensor, gene_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Max-token contributions ``u_ig`` and each cell's winner, from token states.

    ``u_ig`` is the share of the ``D`` feature dimensions in which gene token ``g`` supplies the
    per-feature maximum over the cell's gene tokens (technical tokens and padding, ``False`` in
    ``gene_mask``, are excluded). The winner is ``argmax_g u_ig``; ties go to the gene with the
    lowest vocabulary index.

    Parameters
    ----------
    hidden
        ``[B, T, D]`` token states.
    gene_mask
        ``[B, T]`` bool, gene tokens only.
    gene_ids
        ``[B, T]`` long vocabulary index of each token.

    Returns
    -------
    ``(u [B, T] float, winner_id [B] long, winner_share [B] float)``; ``u`` is 0 off the gene tokens.
    """
    import torch

    from ..nn.pooling import max_winners

    b, t, d = hidden.shape
    pos = max_winners(hidden, gene_mask)  # [B, D]
    counts = torch.zeros(b, t, dtype=torch.long, device=hidden.device)
    counts.scatter_add_(1, pos, torch.ones_like(pos))
    counts = counts.masked_fill(~gene_mask, 0)
    big = int(gene_ids.max()) + 2 if gene_ids.numel() else 2
    # lexicographic key: most dimensions first, then the lowest vocabulary index
    key = counts * big + (big - 1 - gene_ids)
    key = key.masked_fill(~gene_mask, -1)
    best = key.argmax(dim=1)  # [B]
    winner = gene_ids.gather(1, best[:, None])[:, 0]
    share = counts.gather(1, best[:, None])[:, 0].to(torch.float32) / d
    return counts.to(torch.float32) / d, winner, share


def top_expressed(cells) -> np.ndarray:
    """Vocabulary index of each cell's most-expressed gene (largest normalized value; ties → lowest index).

    The trivial baseline for max-token winners: what "name the cell's highest gene" gives.
    """
    lengths = cells.lengths
    cell = np.repeat(np.arange(len(cells)), lengths)
    # sort by cell, then value descending, then vocabulary index ascending; first entry per cell wins
    order = np.lexsort((cells.genes, -cells.values, cell))
    return cells.genes[order[cells.indptr[:-1]]]


def winner_fraction(winners: np.ndarray, groups: np.ndarray) -> pd.DataFrame:
    """``A_cg``: fraction of the cells of group ``c`` whose winner is gene ``g`` (groups × genes)."""
    import pandas as pd

    tab = pd.crosstab(pd.Series(groups, name="group"), pd.Series(winners, name="gene"))
    return tab.div(tab.sum(axis=1), axis=0).astype(np.float64)


@doc_params
def max_token(
    adata: AnnData,
    *,
    groupby: str | None = None,
    checkpoint: str | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "reads", "lognorm"] = "counts",
    library_size_key: str | None = None,
    batch_size: int | None = None,
    device: str = "auto",
    mod: str | None = None,
    key_added: str = "max_token",
    copy: bool = False,
) -> AnnData | None:
    """Max-token winner gene of every cell and, per group, the winner fractions ``A_cg``.

    Cells are read, tokenized and encoded chunk by chunk as in :func:`biomjepa.tl.embed` (backed
    and dask-backed AnnData included). For cell ``i`` and observed
    gene ``g``, ``u_ig`` is the share of the ``d`` feature dimensions in which ``g``'s final-layer
    token state is the per-feature maximum over the cell's gene tokens (the max half of the
    pooled embedding; technical tokens excluded). The winner is ``argmax_g u_ig`` (ties → lowest
    vocabulary index). With ``groupby``, ``A_cg`` is the fraction of group ``c``'s cells whose
    winner is ``g`` (paper, Supplementary "Max-token cell-type programmes").

    Parameters
    ----------
    {adata_counts}
    groupby
        ``obs`` column with cell groups (e.g. cell types) for the winner-fraction matrix; cells
        without a label (NaN) are left out of the fractions, with a warning saying how many.
    {checkpoint}
    {layer}
    {use_raw}
    {input}
    {library_size_key}
    {batch_size}
    {device}
    {mod}
    key_added
        Prefix of the ``obs`` columns and ``uns`` key. A key holding another tool's results is refused before any work
        (the error names a free key); this tool's own earlier results under it are replaced whole.
    {copy_backed}

    Returns
    -------
    ``None`` or a copy (``copy=True``), with (for a MuData, in its modality ``.mod[mod]``)

    ``.obs[f"{key_added}_gene"]``
        winner gene symbol per cell.
    ``.obs[f"{key_added}_share"]``
        the winner's ``u_ig`` (share of feature dimensions it supplies).
    ``.obs[f"{key_added}_top_expressed"]``
        the cell's most-expressed gene (the trivial baseline a winner should be compared with).
    ``.obs[f"{key_added}_is_top_expressed"]``
        whether the winner is also the cell's most-expressed gene.
    ``.uns[key_added]["winner_fraction"]``
        (with ``groupby``) DataFrame groups × winner genes, rows sum to 1.
    ``.uns[key_added]["top_expressed_fraction"]``
        (with ``groupby``) the same for the most-expressed gene of each cell (the baseline).
    ``.uns[key_added]["params"]``
        ``tool`` (``"bj.tl.max_token"``, the key's owner), groupby, checkpoint, layer, ``input`` (as
        :func:`biomjepa.tl.embed` records it), batch size, device, tie rule.
    """
    from .._device import resolve_device
    from .._pretrained import load_model
    from ..data.vocab import Vocab

    bs = check_batch_size(batch_size)
    r = resolve(adata, "max_token", key_added, "max_token", mod=mod, copy=copy, layer=layer, use_raw=use_raw,
                input=input, library_size_key=library_size_key)  # before any work: another tool's results stay
    if r.target.n_obs == 0:
        raise ValueError("adata has no cells.")
    if groupby is not None and groupby not in r.target.obs:
        raise KeyError(f"groupby={groupby!r} is not a column of adata.obs ({list(r.target.obs.columns)[:10]}).")
    dev = resolve_device(device)
    model = load_model(checkpoint)
    winner, share, top = _stream_winners(model, r.source, layer=r.layer, batch_size=bs, device=dev)
    vocab_symbols = np.asarray(Vocab.default().symbols, dtype=object)
    symbols, top = vocab_symbols[winner], vocab_symbols[top]
    result = {"params": {
        **marker("max_token"), "groupby": groupby, "checkpoint": model.info.get("name", "unnamed"), "layer": r.matrix,
        "batch_size": bs, "device": str(dev), "contribution": "share of max-pooled feature dimensions",
        "ties": "lowest vocabulary index", **r.record,
    }}
    if groupby is not None:
        groups, valid = labels_or_drop(r.target, groupby, what="the winner fractions")
        result["winner_fraction"] = winner_fraction(symbols[valid], groups[valid])
        result["top_expressed_fraction"] = winner_fraction(top[valid], groups[valid])
    store(r, result, obs={"_gene": symbols.astype(str), "_share": share.astype(np.float64),
                          "_top_expressed": top.astype(str), "_is_top_expressed": symbols == top})
    return r.adata if copy else None


def _stream_winners(model, adata, *, layer, batch_size: int, device) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Winner id, its share and the most-expressed gene id of every cell, ``[n]`` each, chunk by chunk."""
    from .._device import cpu_threads
    from .._progress import progress_bar
    from ..data.stream import iter_tokenized

    n = adata.n_obs
    winner, share, top = np.empty(n, np.int64), np.empty(n, np.float32), np.empty(n, np.int64)
    with progress_bar(total=n, unit="cell", desc="max_token") as bar, cpu_threads(device):
        for rows, cells in iter_tokenized(adata, layer=layer):
            winner[rows], share[rows] = _winners(model, cells, batch_size=batch_size, device=device)
            top[rows] = top_expressed(cells)
            bar.update(rows.stop - rows.start)
    return winner, share, top


def _winners(model, cells, *, batch_size: int, device) -> tuple[np.ndarray, np.ndarray]:
    """Winner vocabulary index ``[n]`` and share ``[n]`` for every cell of ``cells`` (the one inference loop)."""
    from ..nn.inference import map_batches
    from ..nn.pooling import winner_states

    model = model.to(device).eval()

    def readout(batch):
        hidden = winner_states(model.hidden(batch).float(), batch.gene_mask, model.config.pooling)
        _, w, s = max_token_shares(hidden, batch.gene_mask, batch.gene_ids)
        return w, s

    out = (np.empty(len(cells), dtype=np.int64), np.empty(len(cells), dtype=np.float32))
    winner, share = map_batches(cells, readout, out, vocab_size=model.config.vocab_size, batch_size=batch_size,
                                device=device, max_tokens=settings.max_batch_tokens)
    return winner, share
