"""``--write-obsm``: copy a complete store's embeddings back into each input ``.h5ad``.

Each input is copied to a temporary file next to it, ``obsm["X_biomjepa"]`` is written into the
copy block by block (never the whole matrix in memory) together with
``uns["biomjepa"]["params"]`` (the embedding's record, replaced whole: only ``bj.pp.map_vocab``'s
``uns["biomjepa"]["vocab"]`` stays), and the copy replaces the input (``os.replace``): a kill leaves the
input as it was. The store's manifest is then updated with the new size and mtime of each file,
so re-running the same command still recognises its inputs.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np

from .._files import atomic_path
from .store import KEY, OBSM, AtlasStore

logger = logging.getLogger(__name__)


def write_obsm_all(st: AtlasStore) -> None:
    """Write ``obsm["X_biomjepa"]`` into every input of the complete store ``st`` (see module docstring)."""
    if not st.root.attrs.get("complete", False):
        raise RuntimeError(f"{st.path} is not complete; obsm is written only once every block is done")
    for k, inp in enumerate(st.manifest["inputs"]):
        p = Path(inp["path"])
        stat = p.stat()
        if (stat.st_size, stat.st_mtime_ns) != (inp["size"], inp["mtime_ns"]):
            raise RuntimeError(f"{p} changed since it was embedded; not writing obsm into it")
        _write_one(st, inp, p)
        stat = p.stat()  # recorded at once, so a kill before the next input leaves the store resumable
        inputs = list(st.manifest["inputs"])
        inputs[k] = {**inp, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        st.manifest = {**st.manifest, "inputs": inputs}
        st.root.attrs[KEY] = st.manifest
        logger.info("wrote obsm[%r] into %s", OBSM, p)
    st.root.attrs["obsm_written"] = True


def _write_one(st: AtlasStore, inp: dict, path: Path) -> None:
    import h5py
    from anndata.io import read_elem, write_elem

    g = st.root[inp["name"]]
    with atomic_path(path, suffix=".h5ad") as tmp:  # a random name, created exclusively; renamed over the input
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
