"""``bj.tl.adapt``: let a dataset's own cells teach the model, then embed them with what it learnt.

Self-supervised only: the cells' counts go through the package's one streaming reader into a
temporary corpus shard (:func:`biomjepa.data.shard_file.write_shard`), the training loop continues
pretraining the checkpoint on them with ``model.init_from`` (:func:`biomjepa.train.adapt.adapt_encoder`),
and the cells are embedded once with the adapted encoder, by :func:`biomjepa.tl.embed`'s own loop: that
pass gives both the readout's feature statistics, recorded in the checkpoint, and the embedding written to
``obsm``, standardized as the checkpoint standardizes it. No ``obs`` column is read.
"""

from __future__ import annotations

import copy as _copy
import logging
import math
import numbers
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from .._docs import doc_params
from .._keys import OBSM_KEY, TOKEN_KEY, UNS_KEY, uns_key_of
from .._settings import settings
from ..data.owners import marker
from ..data.resolved import resolve, store
from ._adapt_dirs import _claimed, _discard, _scratch

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)

#: fewest cells (with a mapped gene) adapt trains on: below it, a few dozen 64-cell batches repeat the same cells
MIN_CELLS = 200
MAP_ROWS = 8192  # rows mapped at a time by the adapted checkpoint's readout map
#: default steps: this many passes over the cells in 64-cell batches, within [MIN_STEPS, MAX_STEPS]. Chosen on the
#: validation tissues (v0.4 base, two CPU cores; whole runs of each length: benchmarks/results/
#: adapt_steps_validation.csv, adapt_vs_scvi_validation_steps100.csv and _v2.csv): mean few-shot F1 of sorted
#: PBMCs and Darmanis brain 0.776 at 50 steps, 0.777 at 75, 0.780 at 100, 0.779 at 150; mean Leiden ARI 0.829,
#: 0.843, 0.836, 0.802. 100 steps has the best F1, an ARI within 0.007 of the best, and a third less time than 150
#: (174 s against 257 s on PBMCs). The floor was 100 steps until issue 56: on the 420 brain cells 6 passes are 40 steps,
#: which gave the same F1 (0.904 +- 0.007) and Leiden ARI (0.852 +- 0.047 against 0.846 +- 0.030) as 100 steps over
#: three seeds, in 32 s instead of 55 s (scVI 22 s; adapt_vs_scvi_brain_steps40_v0.4.csv against
#: adapt_vs_scvi_three_tissues_v0.4.csv); only sets under 1,067 cells see the floor
EPOCHS, MIN_STEPS, MAX_STEPS = 6, 40, 1000


def default_steps(n_cells: int, batch_size: int = 64) -> int:
    """``steps=None``: :data:`EPOCHS` passes over ``n_cells`` in batches of ``batch_size``, clipped to
    [:data:`MIN_STEPS`, :data:`MAX_STEPS`] (1,074 cells: 101 steps)."""
    return int(min(MAX_STEPS, max(MIN_STEPS, math.ceil(EPOCHS * n_cells / batch_size))))


@doc_params
def adapt(
    adata: AnnData,
    checkpoint: str | None = None,
    *,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "reads", "lognorm"] = "counts",
    library_size_key: str | None = None,
    species: str = "human",
    steps: int | None = None,
    time_budget: float | None = None,
    out_dir: str | os.PathLike | None = None,
    seed: int = 0,
    mod: str | None = None,
    key_added: str = OBSM_KEY,
    copy: bool = False,
) -> AnnData | None:
    """Adapt a checkpoint to ``adata``'s own cells (self-supervised), then embed them with it.

    Continues pretraining the checkpoint's encoder on these cells alone with the package's training
    loop (``model.init_from``; the recipe of :mod:`biomjepa.train.adapt`: the ``mini`` preset's objective
    on 64-cell batches, gene embeddings re-initialised from these cells' principal components, the EMA teacher
    exported with the base's ``max_top5`` readout, ``2 * d_model`` features), writes the adapted encoder as an
    ordinary checkpoint directory, and embeds the cells with it (:func:`biomjepa.tl.embed`). Labels are never read.
    The same directory embeds query cells later: ``bj.tl.embed(query, checkpoint=out_dir)``; it reads them through
    the genes these cells detect (in at least 0.5 % of them), so adapt on cells that cover the query's genes: the
    checkpoint records the genes with counts in these cells (``provenance["adapted_genes"]`` of its ``config.json``),
    and ``bj.tl.embed`` warns when more than 5 % of a query's counts fall on other genes.
    Embeddings of an adapted checkpoint are comparable with each other (these cells and query cells embedded
    with it), not with embeddings from the base checkpoint or another adaptation.

    Rows are read chunk by chunk (backed AnnData works); genes without ``var["biomjepa_token"]`` are
    mapped with ``species`` (and the column written at the end, as :func:`biomjepa.pp.map_vocab` does).
    On one CPU thread a seed gives the same weights (``weights_sha256``) and embedding each time (``time_budget``
    aside); the whole checkpoint's hash differs, its provenance recording the run's paths and timings.
    Training and the embedding run in ``bj.settings.precision`` (recorded as ``precision``), so a later
    ``bj.tl.embed(adata, checkpoint=out_dir)`` in the same setting gives the same embedding. Ctrl-C or SIGTERM
    stop it with :class:`KeyboardInterrupt`; a stop or an error leaves no checkpoint directory, no scratch files
    and ``adata`` as it was (a signal that arrives as the call returns, once ``uns[...]["adapt"]`` is written, leaves
    the whole result); a second adapt on the same ``out_dir`` while one runs is refused at once, and the scratch
    directories that killed adapts left beside ``out_dir`` are removed (a warning names each).

    Parameters
    ----------
    adata
        AnnData with raw counts (in memory or ``backed="r"``), or a MuData (modality ``mod``), of at
        least :data:`MIN_CELLS` (200) cells.
    checkpoint
        Base checkpoint: registry name, directory or ``URL#sha256=…`` (default ``bj.settings.checkpoint``).
    {layer}
    {use_raw}
    {input}
    {library_size_key}
    species
        Species of the genes, used only when they are not mapped yet (see :func:`biomjepa.pp.map_vocab`).
    steps
        Training steps of 64 cells; default :func:`default_steps` (6 passes over the cells, 40–1,000 steps).
    time_budget
        Stop training after the first step that ends this many seconds after the call began (checked after
        every step; the learning-rate schedule stays that of ``steps``); the export and the embedding of the
        cells come on top.
    out_dir
        Directory for the adapted checkpoint (new or empty); default a new directory under
        ``bj.settings.cachedir / "adapted"``.
    seed
        Seed of training (predictor initialisation, batches, blocks, views).
    {mod}
    key_added
        ``obsm`` key of the embedding (default ``"X_biomjepa"``; parameters go to ``uns["biomjepa"]``, or to
        ``uns[key_added]`` for another key). A key holding another tool's results is refused before any work (the
        error names a free key); an earlier embedding under it is replaced whole.
    {copy_backed}

    Returns
    -------
    ``None`` or a copy (``copy=True``), with

    ``.obsm[key_added]``
        float32 ``[n_obs, 2·d_model]`` embedding by the adapted checkpoint (its readout's ``embedding_dim``),
        standardized with feature statistics measured on these cells, recorded in the checkpoint.
    ``.uns["biomjepa"]["params"]``
        what :func:`biomjepa.tl.embed` records (the checkpoint is the adapted one; ``tool``: ``"bj.tl.adapt"``).
    ``.uns["biomjepa"]["adapt"]``
        ``checkpoint`` (path), ``checkpoint_sha256``, ``weights_sha256``, ``base`` (reference, name and
        sha256s of the base checkpoint), ``steps``, ``steps_done``, ``seconds``, ``recipe``, ``seed``,
        ``n_cells``, ``time_budget``, ``precision`` (what training and the embedding ran in), ``phases``
        (seconds of each part: ``map`` the genes and check the input, load the ``base`` checkpoint, write the
        ``shard``, training ``setup``
        (corpus cache, gene graph, model) and ``steps``, embed the cells with the adapted encoder
        (``readout``: the one embedding pass, which also measures the feature statistics), ``export`` the
        checkpoint, ``write`` into ``adata``).
    ``.var["biomjepa_token"]``
        written only when the genes were not mapped before.
    """
    from .._stops import sigterm_interrupts, stops_held
    from ..data.idtable import map_var

    t0 = time.perf_counter()
    _check_args(steps, time_budget, seed)
    r = resolve(adata, "adapt", key_added, OBSM_KEY, mod=mod, copy=copy, layer=layer, use_raw=use_raw, input=input,
                library_size_key=library_size_key, mapped=False)  # before any work: another tool's results stay
    if r.target.n_obs < MIN_CELLS:
        raise ValueError(
            f"adata has {r.target.n_obs} cells; bj.tl.adapt needs at least {MIN_CELLS} cells (with a mapped gene) to "
            "learn from. Embed fewer cells with `bj.tl.embed` (the base checkpoint), or adapt on a larger dataset of the "
            "same tissue and embed these cells with its checkpoint: `bj.tl.embed(adata, checkpoint=out_dir)`."
        )
    mapped = r.token is not None
    if not mapped:  # mapped here as bj.pp.map_vocab maps them; its column is written at the end
        _, res = map_var(r.source.var_names, r.source.var, n_obs=r.source.n_obs, species=species)
        r = replace(r, token=np.asarray(res.token, dtype=np.int64))
    base = str(checkpoint if checkpoint is not None else settings.checkpoint)
    mapped_at = time.perf_counter()
    with sigterm_interrupts("bj.tl.adapt stopped by SIGTERM; nothing was written."):
        _check_base(base)  # may download: a stop there still removes the partial files
        phases = {"map": round(mapped_at - t0, 2), "base": round(time.perf_counter() - mapped_at, 2)}
        with _claimed(out_dir) as out:
            done = {}  # "placed": out holds this call's checkpoint (removed on a stop or an error); "written": the end
            try:
                r.own()  # after the argument, input and out_dir checks
                record, cells = _train(r, base, out, steps, seed, time_budget, t0, phases, done)
                _write(r, record, cells, mapped=mapped, species=species, done=done)
            except BaseException:  # a stop signal after "written" (as the call returns) leaves the whole result
                if not done.get("written"):
                    with stops_held():  # never cut in two by another signal
                        _discard(out, made=out_dir is None, placed=done.get("placed", False))
                raise
    return r.adata if copy else None


def _check_args(steps, time_budget, seed) -> None:
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1):
        raise ValueError(f"steps must be a positive integer (training steps of 64 cells), got {steps!r}; or None.")
    if time_budget is not None and (isinstance(time_budget, bool) or not isinstance(time_budget, numbers.Real)
                                    or not math.isfinite(time_budget) or time_budget <= 0):
        raise ValueError(f"time_budget must be a positive number of seconds, got {time_budget!r}; or None.")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}.")


def _check_base(base: str) -> None:
    """Load the base checkpoint now (cached for training), so a missing, damaged or mis-pinned one is refused before
    the cells are read."""
    from .._pretrained import load_model

    load_model(base)


def _train(r, base: str, out: Path, steps, seed: int, time_budget, t0: float, phases: dict,
           done: dict) -> tuple[dict, dict]:
    """Write the cells as a shard in a scratch directory beside ``out``, adapt, embed the cells with the adapted
    encoder, and remove the scratch; ``(record, embedded cells)`` (:func:`_embed_unstandardized`). ``done["placed"]``
    is set as the checkpoint is renamed to ``out``."""
    from .._stops import stops_held
    from ..data.shard_file import write_shard
    from ..train.adapt import adapt_encoder

    work = Path(_scratch(out))
    embedded = {}

    def readout_of(encoder_dir: Path) -> dict:
        embedded.update(_embed_unstandardized(r.source, r.layer, r.token, encoder_dir))
        return embedded["readout"]

    try:
        t = time.perf_counter()
        rows = write_shard(r.source, work / "cells.npz", layer=r.layer, token=r.token)
        phases["shard"] = round(time.perf_counter() - t, 2)
        _check_all_mapped(r.target.obs_names, rows)
        steps = default_steps(len(rows)) if steps is None else int(steps)
        logger.info("adapt: %d cells, %d steps from %s", len(rows), steps, base)
        record = adapt_encoder(work / "cells.npz", out, init_from=base, steps=steps, seed=seed,
                               time_budget=time_budget, started=t0, work_dir=work, readout_of=readout_of,
                               device=settings.device, precision=settings.precision, progress=settings.show_progress,
                               placed=lambda: done.update(placed=True))
        record["phases"] = phases | record["phases"]
        return record, embedded
    finally:
        with stops_held():  # the copy of the counts goes whole, whatever signal comes meanwhile
            shutil.rmtree(work, ignore_errors=True)


def _embed_unstandardized(source, layer, token, encoder_dir: Path) -> dict:
    """Embed every cell of ``source`` with the checkpoint at ``encoder_dir`` (no feature statistics) as
    :func:`biomjepa.tl.embed` would (its loop, device, precision and batch size); ``{"Z", "n_genes", "device",
    "precision", "batch_size", "readout"}``, ``readout`` the record of the per-feature statistics of ``Z``."""
    from .._device import resolve_device, resolve_precision
    from .._pretrained import load_model
    from ..nn.readout import feature_stats, readout_entry
    from ._embed import _embed_adata
    from ._utils import check_batch_size

    dev, bs = resolve_device("auto"), check_batch_size(None)
    precision = resolve_precision(None, dev)
    Z, n_genes = _embed_adata(load_model(str(encoder_dir)), source, layer=layer, batch_size=bs, device=dev,
                              precision=precision, token=token)
    mean, scale = feature_stats(Z)
    readout = readout_entry(mean, scale, n_cells=len(Z), source=f"bj.tl.adapt: the {len(Z)} adapted cells")
    return {"Z": Z, "n_genes": n_genes, "device": dev, "precision": precision, "batch_size": bs, "readout": readout}


def _map_readout(model, Z: np.ndarray) -> np.ndarray:
    """``Z`` (unmapped readouts) through the adapted checkpoint's own map, as its ``forward`` applies it."""
    import torch

    out = np.empty_like(Z)
    with torch.inference_mode():  # in row chunks, as tl.embed maps batch by batch: no whole-size temporaries
        for i in range(0, len(Z), MAP_ROWS):
            out[i : i + MAP_ROWS] = model.map_readout(torch.from_numpy(Z[i : i + MAP_ROWS])).numpy()
    return out


def _check_all_mapped(obs_names, rows: np.ndarray) -> None:
    """Refuse, before training, cells without counts in a mapped gene (``tl.embed`` could not embed them); the
    names are the AnnData's (the counts may be read through a wrapper: ``.raw``, log-normalized, reads)."""
    n = len(obs_names)
    if len(rows) == n:
        return
    missing = np.setdiff1d(np.arange(n), rows)
    names = ", ".join(map(str, obs_names[missing[:5]])) + (", …" if len(missing) > 5 else "")
    raise ValueError(
        f"{len(missing)} of the {n} cells have no counts in any mapped gene ({names}): they cannot be embedded, so "
        "nothing was trained. Drop them first, e.g. `adata = adata[np.asarray(adata[:, adata.var['biomjepa_token'] "
        ">= 0].X.sum(1)).ravel() > 0].copy()` after `bj.pp.map_vocab(adata)`."
    )


def _write(r, record: dict, cells: dict, *, mapped: bool, species, done: dict) -> None:
    """Map (if needed) and store the adapted checkpoint's embedding of the cells and its record as
    :func:`biomjepa.tl.embed` stores them (the record last, with ``done["written"]``: the call's result is whole);
    on any error or interrupt before that, undo every write."""
    from .._pretrained import load_model
    from .._stops import stops_held
    from ..pp import map_vocab
    from ._embed import _params

    target, uns_key = r.target, uns_key_of(r.key)
    before = {k: _copy.deepcopy(target.uns[k]) for k in {UNS_KEY, uns_key} if k in target.uns}
    had_obsm = r.key in target.obsm
    old_obsm = target.obsm[r.key] if had_obsm else None
    t = time.perf_counter()
    try:
        if not mapped:
            map_vocab(r.adata, layer=r.layer, use_raw=r.use_raw, species=species, mod=r.mod)
        model = load_model(record["path"])
        params = _params(model, cells["device"], r.matrix, cells["batch_size"], cells["n_genes"], cells["precision"])
        store(r, {"params": params | r.record | marker("adapt")}, obsm={"": _map_readout(model, cells["Z"])})
        record["phases"]["write"] = round(time.perf_counter() - t, 2)
        with stops_held():
            target.uns[uns_key]["adapt"] = {"checkpoint": record["path"], **{k: v for k, v in record.items() if k != "path"}}
            done["written"] = True
    except BaseException:
        if not done.get("written"):
            with stops_held():
                _undo(r, mapped=mapped, uns_key=uns_key, before=before, old_obsm=old_obsm, had_obsm=had_obsm)
        raise


def _undo(r, *, mapped, uns_key, before, old_obsm, had_obsm) -> None:
    """Give ``r.target`` back its var, obsm and uns as they were before :func:`_write`."""
    adata, target, key = r.adata, r.target, r.key
    if not mapped:
        var = target.raw.var if r.use_raw else target.var
        if TOKEN_KEY in var:
            del var[TOKEN_KEY]
    if had_obsm:
        target.obsm[key] = old_obsm
    elif key in target.obsm:
        del target.obsm[key]
        if hasattr(adata, "mod") and key in adata.obsm:
            del adata.obsm[key]
    for k in {UNS_KEY, uns_key}:
        if k in before:
            target.uns[k] = before[k]
        else:
            target.uns.pop(k, None)
