"""``bj.tl.embed``: frozen BioM-JEPA cell embeddings into ``obsm["X_biomjepa"]``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

import numpy as np

from .._docs import doc_params
from .._keys import OBSM_KEY
from .._settings import settings
from ..data.adapted_genes import OutsideShare
from ..data.owners import marker
from ..data.resolved import resolve, store
from ..data.stream import iter_tokenized
from ._utils import check_batch_size

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)


@doc_params
def embed(
    adata: AnnData,
    *,
    checkpoint: str | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "reads", "lognorm"] = "counts",
    library_size_key: str | None = None,
    batch_size: int | None = None,
    device: str = "auto",
    mod: str | None = None,
    key_added: str | None = None,
    copy: bool = False,
) -> AnnData | None:
    """Embed cells with a frozen BioM-JEPA encoder.

    Every observed, vocabulary-mapped gene of a cell is a token (no cap). Rows are read in
    chunks (backed AnnData supported), tokenized, grouped into length-sorted batches padded only
    to their longest cell, encoded under ``torch.inference_mode`` in ``bj.settings.precision`` (default
    ``"fp32"``; ``"bf16"``/``"auto"``: bf16 GEMMs, about 1.5× faster on a CPU with AMX, per-cell cosine
    ≥ 0.994 to float32) and pooled with the readout the checkpoint records (:mod:`biomjepa.nn.pooling`, technical
    tokens excluded; the bundled v0.5: ``max_top5``, the paper's per-feature max ‖ mean of the 5 largest
    gene-token states), then mapped with the checkpoint's fixed feature statistics when it records them
    (:mod:`biomjepa.nn.readout`; v0.5: standardization measured on its training corpus). Results do not
    depend on ``batch_size`` or cell order. With a checkpoint of :func:`biomjepa.tl.adapt`, which records the genes its
    cells detected, a warning gives the share of these cells' counts on other genes when it exceeds 5 %: their
    gene embeddings stayed as initialised.

    Parameters
    ----------
    adata
        AnnData (in memory, ``backed="r"``, or with a dask ``X`` from ``anndata.experimental.read_lazy``)
        or MuData with raw counts, after :func:`biomjepa.pp.map_vocab`.
        For a MuData, the modality ``mod`` is embedded and the results are written into it (and the
        embedding also into the MuData's ``obsm``, as muon does).
    {checkpoint}
    {layer}
    {use_raw}
    {input}
    {library_size_key}
    {batch_size}
    {device}
    {mod}
    key_added
        ``obsm`` key of the embedding, a non-empty string. The default (``None`` or ``"X_biomjepa"``) writes
        ``obsm["X_biomjepa"]`` and ``uns["biomjepa"]["params"]``; another key writes ``obsm[key_added]`` and
        ``uns[key_added]["params"]``, leaving the default embedding and its record as they are. A key holding
        another tool's results is refused before any work (the error names a free key); an earlier embedding under
        it (of ``bj.tl.embed`` or :func:`biomjepa.tl.adapt`) is replaced whole.
    {copy_backed}

    Returns
    -------
    ``None`` or a copy (``copy=True``), with

    ``.obsm["X_biomjepa"]`` (or ``.obsm[key_added]``)
        float32 ``[n_obs, 2·d_model]`` embedding (1,536 for the base model).
    ``.uns["biomjepa"]["params"]`` (or ``.uns[key_added]["params"]``)
        ``tool`` (``"bj.tl.embed"``; ``"bj.tl.adapt"`` for adapt's, the key's owner), checkpoint name,
        ``checkpoint_sha256`` (the whole checkpoint, every file:
        :func:`biomjepa.model.checkpoint_sha256`, what ``checkpoint="DIR#sha256=…"`` pins) and ``weights_sha256``
        (its ``model.safetensors`` only), vocab hash, device, dtype and ``precision`` (``"fp32"``/``"bf16"``, what
        ``bj.settings.precision`` resolved to), pooling, the matrix read (``layer``:
        ``"X"``, a layer name or ``"raw.X"``), ``input`` (with ``"lognorm"``: ``library_size_key`` or
        ``"estimated"``, and the recovered ``target_sum``), genes used per cell.

    For a MuData, both are written to ``.mod[mod]`` (where ``sc.pp.neighbors(mdata[mod],
    use_rep="X_biomjepa")`` and muon's WNN look for them), and ``.obsm["X_biomjepa"]`` of the
    MuData holds the same rows (NaN for cells absent from the modality).
    """
    from .._device import resolve_device, resolve_precision
    from .._pretrained import load_model

    bs = check_batch_size(batch_size)
    r = resolve(adata, "embed", key_added, OBSM_KEY, mod=mod, copy=copy, layer=layer, use_raw=use_raw, input=input,
                library_size_key=library_size_key)
    if r.target.n_obs == 0:
        raise ValueError("adata has no cells to embed.")
    dev = resolve_device(device)
    model = load_model(checkpoint)
    r.own()  # after the checks, so a refused call leaves a view as it was
    precision = resolve_precision(None, dev)
    outside = OutsideShare.of(model)  # an adapted checkpoint: how much of these cells it never learnt
    Z, n_genes = _embed_adata(model, r.source, layer=r.layer, batch_size=bs, device=dev, precision=precision,
                              token=r.token, watch=outside)
    if outside is not None:
        outside.warn(model.info.get("name", "unnamed"))
    store(r, {"params": _params(model, dev, r.matrix, bs, n_genes, precision) | r.record}, obsm={"": Z})
    return r.adata if copy else None


def _params(model, dev, layer, batch_size, n_genes, precision: str = "fp32") -> dict:
    from .._device import dtype_label
    from ..data.vocab import Vocab

    info = model.info
    return {
        **marker("embed"),
        "checkpoint": info.get("name", "unnamed"),
        "checkpoint_sha256": info.get("checkpoint_sha256", ""),  # every file: config.json edits change it
        "weights_sha256": info.get("sha256", ""),
        "vocab_hash": Vocab.default().hash,
        "device": str(dev),
        "dtype": dtype_label(dev, precision),
        "precision": precision,
        "pooling": model.config.pooling,
        "layer": layer or "X",
        "batch_size": batch_size,
        "embedding_dim": model.config.embedding_dim,
        "n_genes_median": float(np.median(n_genes)),
        "n_genes_min": int(n_genes.min()),
        "n_genes_max": int(n_genes.max()),
    }


def _embed_adata(model, adata, *, layer, batch_size, device, precision=None,
                 token: np.ndarray | None = None, watch: OutsideShare | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Stream ``adata`` in row chunks → (embeddings ``[n, 2D]`` float32, genes per cell ``[n]``); ``token``
    replaces ``var["biomjepa_token"]`` (:func:`~biomjepa.data.stream.iter_tokenized`); ``watch`` sees every chunk."""
    from .._device import cpu_threads
    from .._progress import progress_bar

    Z = np.empty((adata.n_obs, model.config.embedding_dim), dtype=np.float32)
    n_genes = np.empty(adata.n_obs, dtype=np.int64)
    with progress_bar(total=adata.n_obs, unit="cell", desc="embed") as bar, cpu_threads(device):
        for sl, cells in iter_tokenized(adata, layer=layer, token=token):
            Z[sl] = embed_cells(model, cells, batch_size=batch_size, device=device, max_tokens=settings.max_batch_tokens,
                                precision=precision)
            n_genes[sl] = cells.lengths
            if watch is not None:
                watch.add(cells)
            bar.update(sl.stop - sl.start)
    logger.info("Embedded %d cells on %s", adata.n_obs, device)
    return Z, n_genes


def embed_cells(model, cells, *, batch_size: int = 64, device=None, max_tokens: int | None = None,
                precision: str | None = None) -> np.ndarray:
    """:func:`biomjepa.nn.inference.embed_cells`: ``TokenizedCells`` → ``[n, 2D]`` float32, in the cells' order.

    The ``tl`` name of the one inference loop's embedding (``tl.ablate_programme`` and ``_embed_adata``
    call it here, so a test can watch every embedding ``tl`` makes).
    """
    from ..nn.inference import embed_cells as embed_tokenized

    return embed_tokenized(model, cells, batch_size=batch_size, device=device, max_tokens=max_tokens, precision=precision)
