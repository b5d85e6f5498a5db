"""``embed_atlas``: embed many h5ad inputs into one atlas store, block by block, on one rank of many.

Every input is cut into fixed blocks of ``block_rows`` rows; the blocks of all inputs, in input
order, are numbered ``0..B-1`` and block ``g`` belongs to rank ``g % world``. A rank embeds its
blocks that are not yet ``done`` in the store, each through the package's one streaming reader
(:func:`biomjepa.data.stream.iter_tokenized`, rows ``start..stop`` of the backed file) and
:func:`biomjepa.nn.inference.embed_cells`. A block is always embedded whole by the same code,
whatever the number of ranks or the run that does it, so the store's contents do not depend on
either, bit for bit. Ranks share nothing but the store: no collective, no process group. Rank 0
creates (or checks) the store first, and at the end waits until every block is done, marks the
store complete and, with ``write_obsm``, copies the result into each input's ``obsm``. Rank 0
holds the store's lock (:func:`biomjepa.embed.store.lock_store`) from before it looks at the store
to the end, so a second command on the same store (``--overwrite`` included) stops with an error
naming the first instead of writing or deleting under it.

Verify, then trust: a rank skips a block only when it reads back intact (its done record and its
checksum, :meth:`~biomjepa.embed.store.AtlasStore.read_block`); a damaged one is embedded again and
reported (``repaired``). Before the store is marked complete, rank 0 checks that no input changed
(size and mtime) since the run started, so a file edited during the run never leaves a complete
store mixing rows of its two versions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import time
from pathlib import Path

import numpy as np

from .._stops import stops_held
from ..data.adapted_genes import OutsideShare
from .inputs import AtlasInput, check_read_args, input_source, open_input, resolve_inputs
from .obsm import inputs_locked, settle_pending, write_obsm_all
from .store import FORMAT, AtlasStore, lock_store, manifest_differences

logger = logging.getLogger(__name__)

BLOCK_ROWS = 8192
#: Testing hook: ``"K"`` makes every rank raise after writing K blocks, ``"R:K"`` only rank R.
FAIL_ENV = "BIOMJEPA_ATLAS_FAIL_AFTER"


def dist_env(rank: int | None = None, world: int | None = None) -> tuple[int, int, int]:
    """``(rank, world, local_rank)`` from the arguments, else torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``."""
    world = int(os.environ.get("WORLD_SIZE", "1")) if world is None else int(world)
    rank = int(os.environ.get("RANK", "0")) if rank is None else int(rank)
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside 0..{world - 1} (world size {world})")
    return rank, world, int(os.environ.get("LOCAL_RANK", str(rank)))


def check_store_path(store: str | Path) -> Path:
    """The store's directory must exist and be writable; checked before any work."""
    p = Path(store).expanduser()
    parent = p.parent if str(p.parent) else Path(".")
    if p.exists() and not p.is_dir():
        raise ValueError(f"store={str(p)!r} exists and is not a directory (a zarr store is a directory)")
    if not parent.is_dir():
        raise FileNotFoundError(f"the directory of store={str(p)!r} does not exist; create {str(parent)!r} first")
    target = p if p.exists() else parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write the store {str(p)!r}: {str(target)!r} is not writable")
    return p


def embed_atlas(
    inputs: list[str],
    store: str | Path,
    *,
    checkpoint: str | None = None,
    block_rows: int = BLOCK_ROWS,
    batch_size: int | None = None,
    device: str = "auto",
    layer: str | None = None,
    use_raw: bool = False,
    input: str = "counts",
    library_size_key: str | None = None,
    gene_key: str | None = None,
    species: str = "human",
    id_type: str = "auto",
    precision: str | None = None,
    write_obsm: bool = False,
    overwrite: bool = False,
    rank: int | None = None,
    world: int | None = None,
    wait_timeout: float = 3600.0,
) -> dict:
    """Embed the cells of ``inputs`` (``.h5ad`` paths or globs) into the zarr ``store``; resumable.

    Run it once per rank (``torchrun --nproc_per_node=N -m biomjepa.embed``) or in one process;
    re-running the same call skips the blocks already written. Parameters not described are those
    of :func:`biomjepa.pp.map_vocab` and :func:`biomjepa.tl.embed` (``use_raw``, ``input`` and
    ``library_size_key`` as there: ``adata.raw``'s counts, log-normalized values).

    Parameters
    ----------
    block_rows
        Rows per block: the unit of work, of resumption and of the store's chunks.
    precision
        ``"fp32"``, ``"bf16"`` or ``"auto"`` (:func:`biomjepa._device.resolve_precision`); ``None``:
        ``bj.settings.precision``. Recorded in the manifest's ``dtype``, so a store is resumed only in the
        precision it was started with.
    write_obsm
        Once the store is complete, replace each input by a copy with ``obsm["X_biomjepa"]`` and
        ``uns["biomjepa"]["params"]`` (rank 0; temporary file + rename).
    overwrite
        Start a store that exists again from nothing (one process only; never a store that another
        command holds).
    rank, world
        Default: torchrun's ``RANK`` and ``WORLD_SIZE`` (a single process without them).
    wait_timeout
        Seconds ranks other than 0 wait for rank 0 to create the store.

    Returns
    -------
    dict: this rank's ``rank``, ``world``, ``blocks``, ``cells``, ``seconds``, ``cells_per_s``,
    ``peak_rss_mib``, ``repaired`` (the damaged blocks it embedded again, ``"name block k"``), the
    store's ``complete`` flag and (rank 0) ``n_obs`` over all inputs.

    Raises
    ------
    biomjepa._files.LockBusy
        Another command holds the store (rank 0 holds its lock while it runs); names that process.

    Warns
    -----
    UserWarning
        An adapted checkpoint (its ``provenance.adapted_genes``): more than 5 % of the counts of the cells this call
        embedded fall on genes its adaptation never detected (:mod:`biomjepa.data.adapted_genes`); said once, at
        the end, with the share.
    """
    from .._device import resolve_device, resolve_precision
    from .._pretrained import load_model
    from .._settings import settings

    rank, world, local = dist_env(rank, world)
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    if overwrite and world > 1:
        raise ValueError("overwrite=True needs a single process; delete the store (rm -r) before a multi-process run")
    inps = resolve_inputs(list(inputs), writable=write_obsm)
    store = check_store_path(store)
    read_kw = check_read_args(layer=layer, use_raw=use_raw, input=input, library_size_key=library_size_key)
    # rank 0 creates, overwrites and completes the store: it holds the store's lock throughout (and write_obsm's
    # inputs' locks: a command writing one of them is refused now, not after the embedding)
    held = inputs_locked([i.path for i in inps]) if rank == 0 and write_obsm else contextlib.nullcontext()
    with lock_store(store) if rank == 0 else contextlib.nullcontext(), held:
        dev = resolve_device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = _cuda(local)
        model, precision = load_model(checkpoint), resolve_precision(precision, dev)
        bs = int(batch_size or settings.batch_size)
        wanted = _manifest(model, inps, block_rows=block_rows, batch_size=bs, dev=dev, read_kw=read_kw,
                           gene_key=gene_key, species=species, id_type=id_type, precision=precision)
        map_kw = {"gene_key": gene_key, "species": species, "id_type": id_type, "layer": layer, "use_raw": use_raw}
        st = _open_store(store, wanted, inps, rank=rank, overwrite=overwrite, wait_timeout=wait_timeout, map_kw=map_kw,
                         read_kw=read_kw)

        t0 = time.perf_counter()
        todo, repaired = _my_blocks(st, rank, world)
        cells = _embed_blocks(st, todo, model, inps, rank=rank, map_kw=map_kw, batch_size=bs, device=dev,
                              read_kw=read_kw, precision=precision)
        seconds = time.perf_counter() - t0
        out = {"rank": rank, "world": world, "blocks": len(todo), "cells": cells, "seconds": seconds,
               "cells_per_s": cells / seconds if seconds > 0 else 0.0, "repaired": repaired,
               "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "complete": False}
        if rank == 0:
            _finish(st, inps, wait_timeout=None)
            if write_obsm and not st.root.attrs.get("obsm_written", False):
                write_obsm_all(st)
            out["n_obs"] = sum(i["n_obs"] for i in st.manifest["inputs"])
            out["complete"] = True
    return out


def _cuda(local_rank: int):
    import torch

    return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))


def _manifest(model, inps, *, block_rows, batch_size, dev, read_kw, gene_key, species, id_type, precision) -> dict:
    from .._device import dtype_label
    from .._settings import settings
    from .._version import __version__
    from ..data.vocab import Vocab

    source = {"layer": "raw.X" if read_kw["use_raw"] else read_kw["layer"] or "X"}
    if read_kw["input"] != "counts":  # absent for counts: stores made before these options resume unchanged
        source |= {"input": read_kw["input"], "library_size_key": read_kw["library_size_key"] or "estimated"}
    return {
        "format": FORMAT,
        "checkpoint": model.info.get("name", "unnamed"),
        "checkpoint_sha256": model.info.get("checkpoint_sha256", ""),  # every file: an edited config.json differs
        "weights_sha256": model.info.get("sha256", ""),
        "embedding_dim": int(model.config.embedding_dim),
        "block_rows": int(block_rows),
        "settings": {
            **source, "gene_key": gene_key or "var_names", "species": species, "id_type": id_type,
            "batch_size": batch_size, "max_batch_tokens": settings.max_batch_tokens,
            "dtype": dtype_label(dev, precision),  # float32 / bfloat16-autocast: a store resumes in its precision
            "pooling": model.config.pooling, "vocab_hash": Vocab.default().hash,
        },
        "biomjepa_version": __version__,
        "inputs": [i.fingerprint() for i in inps],
    }


def _open_store(store: Path, wanted: dict, inps: list[AtlasInput], *, rank, overwrite, wait_timeout, map_kw, read_kw):
    """Rank 0 creates the store or checks that it was made by this very command; others wait for it."""
    if rank != 0:  # rank 0 creates or checks the store; the others only wait until it is ready
        deadline = time.monotonic() + wait_timeout
        while AtlasStore.state(store) != "ready":
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {rank}: rank 0 did not create {store} within {wait_timeout:.0f} s")
            time.sleep(0.5)
    else:
        state = AtlasStore.state(store)
        if state == "foreign":
            raise ValueError(f"store={str(store)!r} exists and is not a biomjepa atlas store; give a new path")
        if state != "ready" or overwrite:
            return _create_store(store, wanted, inps, map_kw, read_kw)
    st = AtlasStore(store)
    settle_pending(st, write=rank == 0)  # an input write_obsm renamed but a killed run did not record: recorded now
    diffs = manifest_differences(st.manifest, wanted)
    if diffs:
        raise ValueError(f"the store {str(store)!r} was made by a different command, so it cannot be resumed: "
                         + "; ".join(diffs) + ". Use overwrite=True to start it again, or another store.")
    return st


def _create_store(store: Path, wanted: dict, inps: list[AtlasInput], map_kw: dict, read_kw: dict) -> AtlasStore:
    obs_names, n_obs = {}, []
    for inp in inps:
        adata = open_input(inp, **map_kw)  # maps genes now: a bad input fails before any embedding
        _check_first_rows(input_source(adata, inp, read_kw), inp, read_kw)  # and so do .raw, the values
        obs_names[inp.name] = adata.obs_names.to_numpy()
        n_obs.append(adata.n_obs)
        adata.file.close()
        if not n_obs[-1]:
            raise ValueError(f"{inp.path} has no cells")
    wanted = {**wanted, "inputs": [{**i, "n_obs": n} for i, n in zip(wanted["inputs"], n_obs)]}
    logger.info("creating %s for %d inputs, %d cells", store, len(inps), sum(n_obs))
    return AtlasStore.create(store, wanted, obs_names)


def _check_first_rows(source, inp: AtlasInput, read_kw: dict, rows: int = 64) -> None:
    """Read the first ``rows`` cells as the blocks will be read: counts refused (log values, no ``--use-raw``)
    stop the command before the store is created with settings that would then need overwrite=True."""
    from ..data.stream import iter_tokenized

    try:
        for _ in iter_tokenized(source, layer=read_kw["layer"], chunk=rows, stop=min(rows, source.n_obs)):
            pass
    except ValueError as err:
        raise ValueError(f"{inp.path}: {err}") from None


def _my_blocks(st: AtlasStore, rank: int, world: int) -> tuple[list[tuple[str, int]], list[str]]:
    """This rank's blocks to embed (global block ``g``, inputs in order, belongs to rank ``g % world``), and
    which of them were recorded as written but are damaged (recorded as not written now, then repaired)."""
    mine, damaged, g = [], [], 0
    complete = st.root.attrs.get("complete", False)  # then every block was written: a missing record is damage
    for inp in st.manifest["inputs"]:
        name, records = inp["name"], st.records(inp["name"])
        done = records == 1
        own = [b for b in range(len(done)) if (g + b) % world == rank]
        g += len(done)
        bad = st.verify(name, [b for b in own if done[b]])
        for b in own:
            if records[b] not in (0, 1) or (complete and records[b] == 0):
                bad[b] = "its done record is damaged or missing"
        for b, why in bad.items():
            a, z = st.bounds(name)[b]
            logger.warning("%s: block %d of %s (rows %d..%d) is damaged (%s); embedding it again",
                           st.path, b, name, a, z, why)
            st.reset(name, b)
            damaged.append(f"{name} block {b}")
        mine += [(name, b) for b in own if not done[b] or b in bad]
    if damaged and rank == 0:
        st.root.attrs["complete"] = False
    return mine, damaged


def _embed_blocks(st, todo, model, inps, *, rank, map_kw, batch_size, device, read_kw, precision) -> int:
    """Embed and write the blocks ``todo``; returns the number of cells embedded. An adapted checkpoint's warning
    about genes outside its adaptation comes once, at the end, over these cells (:class:`~biomjepa.data.adapted_genes.
    OutsideShare`: blocks written before are not read again); a stop signal waits until the block being written is
    written whole (:func:`~biomjepa._stops.stops_held`)."""
    from tqdm.auto import tqdm

    from .._progress import interactive
    from .._settings import settings
    from ..data.stream import iter_tokenized
    from ..nn.inference import embed_cells

    by_name = {i.name: i for i in inps}
    watch = OutsideShare.of(model)  # an adapted checkpoint: how much of these cells it never learnt
    fail_after = _fail_after(rank)
    opened: dict[str, object] = {}
    cells = 0
    total = sum(b - a for name, i in todo for a, b in [st.bounds(name)[i]])
    bar = tqdm(total=total, unit="cell", disable=not (settings.show_progress and interactive()),
               desc=f"embed rank {rank}")
    for k, (name, block) in enumerate(todo):
        if name not in opened:  # one input open at a time
            _close(opened)
            opened = {name: open_input(by_name[name], **map_kw)}
            source = input_source(opened[name], by_name[name], read_kw)
        a, b = st.bounds(name)[block]
        Z = np.empty((b - a, st.manifest["embedding_dim"]), dtype=np.float32)
        n_genes = np.empty(b - a, dtype=np.int32)
        try:
            for rows, tok in iter_tokenized(source, layer=read_kw["layer"], chunk=b - a, start=a, stop=b):
                sl = slice(rows.start - a, rows.stop - a)
                Z[sl] = embed_cells(model, tok, batch_size=batch_size, device=device, max_tokens=settings.max_batch_tokens,
                                    precision=precision)
                n_genes[sl] = tok.lengths
                if watch is not None:
                    watch.add(tok)
        except ValueError as err:  # the counts of this input refused: say which file
            raise ValueError(f"{by_name[name].path}: {err}") from None
        with stops_held():  # so a stop leaves whole blocks only, and no write of zarr's still under way
            st.write_block(name, block, Z, n_genes, opened[name].obs_names[a:b].to_numpy())
        cells += b - a
        bar.update(b - a)
        logger.info("rank %d: %s block %d (rows %d..%d) written", rank, name, block, a, b)
        if fail_after is not None and k + 1 >= fail_after:
            raise RuntimeError(f"rank {rank}: stopping after {k + 1} blocks ({FAIL_ENV} testing hook)")
    bar.close()
    _close(opened)
    if watch is not None:
        watch.warn(model.info.get("name", "unnamed"), tool="embed_atlas")
    return cells


def _close(opened: dict) -> None:
    for adata in opened.values():
        adata.file.close()


def _fail_after(rank: int) -> int | None:
    value = os.environ.get(FAIL_ENV, "").strip()
    if not value:
        return None
    who, _, k = value.rpartition(":")
    return int(k) if who in ("", str(rank)) else None


def _finish(st: AtlasStore, inps: list[AtlasInput], *, wait_timeout: float | None) -> None:
    """Rank 0: wait until every block of every input is done, check the inputs, then mark the store complete."""
    t0, last_log = time.monotonic(), 0.0
    while missing := st.missing():
        waited = time.monotonic() - t0
        if wait_timeout is not None and waited > wait_timeout:
            raise TimeoutError(f"blocks still missing after {waited:.0f} s: {missing}; run the command again to finish")
        if waited - last_log > 60:
            logger.info("waiting for other ranks: blocks missing %s", missing)
            last_log = waited
        time.sleep(1.0)
    _check_unchanged(inps)
    if not st.root.attrs.get("complete", False):
        with stops_held():
            st.mark_complete(completed=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def _check_unchanged(inps: list[AtlasInput]) -> None:
    """Refuse to complete a store when an input's size or mtime changed since this run started."""
    changed = []
    for inp in inps:
        try:
            st = os.stat(inp.path)
            now = (st.st_size, st.st_mtime_ns)
        except OSError:
            now = None
        if now != (inp.size, inp.mtime_ns):
            changed.append(inp.path)
    if changed:
        raise ValueError(
            f"{', '.join(changed)} changed while the atlas was being embedded (size or modification time differ from "
            "the start of this run), so the store may mix rows of two versions and is left incomplete. Once the "
            "file is final, run it again with overwrite=True."
        )
