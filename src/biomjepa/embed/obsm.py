"""``--write-obsm``: copy a complete store's embeddings back into each input ``.h5ad``.

Each input is copied to a temporary file next to it, ``obsm["X_biomjepa"]`` is written into the
copy block by block (never the whole matrix in memory) together with
``uns["biomjepa"]["params"]`` (the embedding's record, replaced whole: only ``bj.pp.map_vocab``'s
``uns["biomjepa"]["vocab"]`` stays), and the copy replaces the input (``os.replace``): a kill leaves the
input as it was. The store's manifest then records the new size and mtime of the file and that it holds the
embedding (``obsm: true``), in one step with the rename that no stop signal parts
(:func:`~biomjepa._files.atomic_path`), so re-running the same command still recognises its inputs and writes
only those a stop left as they were (:func:`obsm_written_into` says which). Every input is locked as the other
writers of a file lock it (:func:`inputs_locked`), before the first is written.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .._files import atomic_path, output_lock
from .store import KEY, OBSM, AtlasStore

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def inputs_locked(paths: list[str]) -> Iterator[None]:
    """Hold the lock of each input ``write_obsm`` replaces (:func:`~biomjepa._files.output_lock`, that of ``biomjepa
    embed IN OUT``), all taken before any is written: another command writing one of them is refused, or refuses.

    Raises
    ------
    biomjepa._files.LockBusy
        Another process writes one of ``paths``; the message names the file and the process.
    """
    with contextlib.ExitStack() as stack:
        for p in paths:
            stack.enter_context(output_lock(p, what=f"The input {p}, which write_obsm=True replaces,", fix=(
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
        for k, inp in enumerate(st.manifest["inputs"]):
            if inp.get("obsm"):  # written by an earlier run that a stop ended
                continue
            p = Path(inp["path"])
            stat = p.stat()
            if (stat.st_size, stat.st_mtime_ns) != (inp["size"], inp["mtime_ns"]):
                raise RuntimeError(f"{p} changed since it was embedded; not writing obsm into it")
            _write_one(st, inp, p, replaced=lambda k=k, p=p: _record(st, k, p))
            logger.info("wrote obsm[%r] into %s", OBSM, p)
        st.root.attrs["obsm_written"] = True


def _record(st: AtlasStore, k: int, path: Path) -> None:
    """Record in the manifest that input ``k`` is now ``path``'s new file, holding the embedding."""
    stat = path.stat()
    inputs = list(st.manifest["inputs"])
    inputs[k] = {**inputs[k], "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "obsm": True}
    st.manifest = {**st.manifest, "inputs": inputs}
    st.root.attrs[KEY] = st.manifest


def _write_one(st: AtlasStore, inp: dict, path: Path, replaced) -> None:
    import h5py
    from anndata.io import read_elem, write_elem

    g = st.root[inp["name"]]
    # a random name, created exclusively; renamed over the input, then replaced() records it (no stop in between)
    with atomic_path(path, suffix=".h5ad", replaced=replaced) as tmp:
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
