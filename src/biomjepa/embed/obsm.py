"""``--write-obsm``: copy a complete store's embeddings back into each input ``.h5ad``.

Each input is copied to a temporary file next to it, ``obsm["X_biomjepa"]`` is written into the
copy block by block (never the whole matrix in memory) together with
``uns["biomjepa"]["params"]`` (the embedding's record, replaced whole: only ``bj.pp.map_vocab``'s
``uns["biomjepa"]["vocab"]`` stays), and the copy replaces the input (``os.replace``): a kill leaves the
input as it was. Before the rename the store's manifest records the copy's size and mtime as the input's
``pending`` identity (a rename keeps both); after it, the new size and mtime of the file and that it holds the
embedding (``obsm: true``), in one step with the rename that no stop signal parts
(:func:`~biomjepa._h5files.h5_written`; a full disk is one line, no copy left), so re-running the same command
still recognises its inputs and writes only those a stop left as they were (:func:`obsm_written_into` says
which). A process killed (or a record that failed, a full disk) between the rename and the record leaves the input new and its record old: the next run finds
the file's size and mtime to be the ``pending`` ones and records it then (:func:`settle_pending`), so the store
still resumes and the input is not written again. Every input is locked as the other
writers of a file lock it (:func:`inputs_locked`), before the first is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .._h5files import h5_written, in_child, locked_output
from .store import KEY, OBSM, AtlasStore

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def inputs_locked(paths: list[str]) -> Iterator[None]:
    """Hold the lock of each input ``write_obsm`` replaces (:func:`~biomjepa._files.output_lock`, that of ``biomjepa
    embed IN OUT``), all taken before any is written: another command writing one of them is refused, or refuses.
    The copies a run killed outright left beside an input (``.NAME.<random>.h5ad``) are removed where the input's
    lock file was there and is free, which proves that run dead (:func:`~biomjepa._h5files.locked_output`).

    Raises
    ------
    biomjepa._files.LockBusy
        Another process writes one of ``paths``; the message names the file and the process.
    """
    with contextlib.ExitStack() as stack:
        for p in paths:  # the partial copies a killed run left beside p go, where its lock proves it dead
            stack.enter_context(locked_output(p, what=f"The input {p}, which write_obsm=True replaces,", fix=(
                "Two commands writing one file keep only one's result: wait for that one to finish, or leave out "
                "write_obsm=True.")))
        yield


def obsm_written_into(manifest: dict) -> list[str]:
    """The inputs of a store's ``manifest`` that ``write_obsm`` has replaced by a copy holding the embedding."""
    return [i["path"] for i in manifest["inputs"] if i.get("obsm")]


def write_obsm_all(st: AtlasStore) -> None:
    """Write ``obsm["X_biomjepa"]`` into every input of the complete store ``st`` not yet holding it (see module
    docstring)."""
    if not st.root.attrs.get("complete", False):
        raise RuntimeError(f"{st.path} is not complete; obsm is written only once every block is done")
    with inputs_locked([i["path"] for i in st.manifest["inputs"]]):
        settle_pending(st)
        for k, inp in enumerate(st.manifest["inputs"]):
            if inp.get("obsm"):  # written by an earlier run that a stop ended
                continue
            p = Path(inp["path"])
            stat = p.stat()
            if (stat.st_size, stat.st_mtime_ns) != (inp["size"], inp["mtime_ns"]):
                raise RuntimeError(f"{p} changed since it was embedded; not writing obsm into it")
            _write_one(st, k, p)
            logger.info("wrote obsm[%r] into %s", OBSM, p)
        st.root.attrs["obsm_written"] = True


def settled(manifest: dict) -> dict:
    """``manifest`` with each input that holds a ``pending`` identity (a copy ``write_obsm`` was renaming over it)
    settled by the file there now: of the pending size and mtime, it is that copy, holding the embedding (recorded:
    ``obsm: true``); of the recorded ones, the rename never happened (the pending identity is dropped); else it is
    left as it is (the file changed, as :func:`~biomjepa.embed.store.manifest_differences` will say)."""
    inputs = []
    for inp in manifest.get("inputs", []):
        pending = inp.get("pending")
        if pending is not None:
            try:
                stat = os.stat(inp["path"])
                now = (stat.st_size, stat.st_mtime_ns)
            except OSError:
                now = None
            rest = {k: v for k, v in inp.items() if k != "pending"}
            if now == (pending["size"], pending["mtime_ns"]):
                inp = {**rest, "size": now[0], "mtime_ns": now[1], "obsm": True}
            elif now == (inp["size"], inp["mtime_ns"]):
                inp = rest
        inputs.append(inp)
    return {**manifest, "inputs": inputs}


def settle_pending(st: AtlasStore, *, write: bool = True) -> list[str]:
    """Settle the store's ``pending`` inputs (:func:`settled`) in ``st.manifest`` and, with ``write`` (the process
    holding the store's lock), in the store. Returns the inputs found written but not yet recorded."""
    new = settled(st.manifest)
    if new == st.manifest:
        return []
    found = [n["path"] for o, n in zip(st.manifest["inputs"], new["inputs"]) if n.get("obsm") and not o.get("obsm")]
    st.manifest = new
    if write:
        st.root.attrs[KEY] = new
    for path in found:
        logger.info("%s holds obsm[%r], written by a run that ended before recording it; recorded now", path, OBSM)
    return found


def _set_input(st: AtlasStore, k: int, entry: dict) -> None:
    """Input ``k``'s record is now ``entry``, in ``st.manifest`` and in the store (one atomic write of the manifest)."""
    inputs = list(st.manifest["inputs"])
    inputs[k] = entry
    st.manifest = {**st.manifest, "inputs": inputs}
    st.root.attrs[KEY] = st.manifest


def _pending(st: AtlasStore, k: int, tmp: Path) -> None:
    """Record the complete copy ``tmp``'s size and mtime as input ``k``'s ``pending`` identity, before the rename
    (which keeps both): a run ended between the rename and :func:`_record` leaves a file the next run knows."""
    stat = tmp.stat()
    _set_input(st, k, {**st.manifest["inputs"][k], "pending": {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}})


def _record(st: AtlasStore, k: int, path: Path) -> None:
    """Record in the manifest that input ``k`` is now ``path``'s new file, holding the embedding."""
    stat = path.stat()
    rest = {key: v for key, v in st.manifest["inputs"][k].items() if key != "pending"}
    _set_input(st, k, {**rest, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "obsm": True})


def _write_one(st: AtlasStore, k: int, path: Path) -> None:
    """Write input ``k`` (``path``) anew with the embedding: a copy, recorded as pending, renamed over it and
    recorded (see the module docstring)."""
    # a random name, created exclusively; renamed over the input, then _record() (no stop in between)
    with h5_written(path, what=f"the copy of {path.name} with obsm[{OBSM!r}]", replaced=lambda: _record(st, k, path),
                    fix="Free space there (a copy of each input is written beside it, then renamed over it); the "
                        "same command then writes the inputs not yet written.") as tmp:
        in_child(lambda: _write_copy(st, st.manifest["inputs"][k], path, tmp))  # a failed HDF5 write ends there
        _pending(st, k, tmp)  # last: the copy is complete and its size and mtime stay as they are through the rename


def _write_copy(st: AtlasStore, inp: dict, path: Path, tmp: Path) -> None:
    """``tmp``: a copy of the input ``path`` with ``obsm[OBSM]`` and the embedding's record."""
    import h5py
    from anndata.io import read_elem, write_elem

    g = st.root[inp["name"]]
    shutil.copyfile(path, tmp)
    with h5py.File(tmp, "r+") as f:
        names = np.asarray(read_elem(f["obs"][f["obs"].attrs["_index"]]))
        if not np.array_equal(names.astype(object), g["obs_names"][:].astype(object)):
            raise RuntimeError(f"{path}: obs_names differ from the store's; not writing obsm")
        obsm = f.require_group("obsm")
        if OBSM in obsm:
            del obsm[OBSM]
        Z = g[OBSM]
        rows = st.manifest["block_rows"]
        ds = obsm.create_dataset(OBSM, shape=Z.shape, dtype="float32", chunks=(min(rows, Z.shape[0]), Z.shape[1]))
        ds.attrs.update({"encoding-type": "array", "encoding-version": "0.2.0"})
        for block, (a, b) in enumerate(st.bounds(inp["name"])):
            ds[a:b] = st.read_block(inp["name"], block)[0]  # verified against its checksum
        uns = f.require_group("uns")
        prev = read_elem(uns["biomjepa"]) if "biomjepa" in uns else {}
        if "biomjepa" in uns:
            del uns["biomjepa"]
        params = {"tool": "biomjepa embed", **{k: v for k, v in st.manifest.items() if k != "inputs"}}
        params["precision"] = "bf16" if str(params["settings"].get("dtype", "")).startswith("bfloat16") else "fp32"
        kept = {"vocab": prev["vocab"]} if "vocab" in prev else {}  # map_vocab's report; the embedding's record
        write_elem(uns, "biomjepa", {**kept, "params": _h5_safe(params)})  # is replaced whole (issue 57)


def _h5_safe(d: dict) -> dict:
    """Nested dict with ``None`` values as strings (anndata cannot write ``None``)."""
    return {k: _h5_safe(v) if isinstance(v, dict) else ("None" if v is None else v) for k, v in d.items()}
