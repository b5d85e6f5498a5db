"""The atlas store: one zarr group per input, written block by block, with a record of finished blocks.

Layout of ``OUT.zarr`` (zarr v3, a directory)::

    OUT.zarr/                  attrs["biomjepa_atlas"]: the manifest (checkpoint, block_rows, settings,
                               inputs with path/size/mtime/n_obs); attrs["complete"]: bool
      <name>/                  one group per input (the file stem, made unique)
        X_biomjepa             float32 [n_obs, D], chunked (block_rows, D): one chunk per block
        n_genes                int32 [n_obs]: mapped genes per cell (the tokens the encoder saw)
        obs_names              str [n_obs]: the input's obs_names, in order
        done                   uint8 [n_blocks], one chunk per block: 1 once the block is written

A block's rows are written first and its ``done`` entry after, each as its own chunk file (zarr's
local store writes a chunk to a temporary file and renames it), so a process killed mid-block
leaves that block not done, and a re-run redoes exactly it.

One command at a time: the process that creates, overwrites and completes a store (rank 0) holds
an exclusive lock on ``.OUT.zarr.lock`` beside it (``OUT.zarr/.lock`` where the parent directory is
read-only) from before it looks at the store until it ends (:func:`lock_store`).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np

from .._files import Lock, lock

logger = logging.getLogger(__name__)

FORMAT = "biomjepa-atlas/1"
KEY = "biomjepa_atlas"
OBSM = "X_biomjepa"
#: Manifest entries that change the embedding of a cell; a store is only resumed when all match.
COMPARED = ("format", "checkpoint_sha256", "embedding_dim", "block_rows", "settings")
#: The lock file's name inside a store (used only where the store's parent directory is read-only).
INNER_LOCK = ".lock"


def lock_store(path: str | Path) -> Lock:
    """The exclusive lock of the store ``path`` for this process (see the module docstring).

    Raises
    ------
    biomjepa._files.LockBusy
        Another process holds it; the message names its pid, host and command.
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    beside = path.with_name(f".{path.name}.lock")
    where = beside if beside.exists() or os.access(parent, os.W_OK | os.X_OK) or not path.is_dir() else path / INNER_LOCK
    return lock(where, what=f"The atlas store {path}",
                fix="Two commands writing one store mix their embeddings, and --overwrite would delete it under the "
                    "other: wait for that one to finish, or give this one another --store.")


def block_bounds(n_obs: int, block_rows: int) -> list[tuple[int, int]]:
    """Row ranges ``[(start, stop), ...]`` of the blocks of an input with ``n_obs`` rows."""
    return [(a, min(a + block_rows, n_obs)) for a in range(0, n_obs, block_rows)]


def manifest_differences(old: dict, new: dict) -> list[str]:
    """Human-readable differences between the manifest of a store and that of this run."""
    diffs = [f"{k}: store has {old.get(k)!r}, this run {new.get(k)!r}" for k in COMPARED if old.get(k) != new.get(k)]
    strip = ("name", "path", "size", "mtime_ns")
    old_in = [{k: i.get(k) for k in strip} for i in old.get("inputs", [])]
    new_in = [{k: i.get(k) for k in strip} for i in new.get("inputs", [])]
    if [i["path"] for i in old_in] != [i["path"] for i in new_in]:
        diffs.append(f"inputs: store has {[i['path'] for i in old_in]}, this run {[i['path'] for i in new_in]}")
    else:
        diffs += [f"input {o['path']} changed since the store was made (size/mtime differ)"
                  for o, n in zip(old_in, new_in) if o != n]
    return diffs


class AtlasStore:
    """An opened atlas store (see the module docstring for the layout)."""

    def __init__(self, path: str | Path):
        import zarr

        self.path = Path(path)
        self.root = zarr.open_group(str(self.path), mode="a")
        self.manifest = dict(self.root.attrs[KEY])

    # -- creation and opening ---------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path, manifest: dict, obs_names: dict[str, np.ndarray]) -> AtlasStore:
        """Create the store (replacing a half-created one); the manifest is written last."""
        import zarr

        path = Path(path)
        for child in path.iterdir() if path.is_dir() else []:  # a lock file inside stays
            if child.name == INNER_LOCK:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        root = zarr.open_group(str(path), mode="a")
        root.attrs.update({KEY: {"format": FORMAT, "state": "creating"}, "complete": False})
        rows, dim = manifest["block_rows"], manifest["embedding_dim"]
        for inp in manifest["inputs"]:
            n = inp["n_obs"]
            g = root.create_group(inp["name"])
            g.attrs.update({"path": inp["path"]})
            g.create_array(OBSM, shape=(n, dim), chunks=(min(rows, n), dim), dtype="float32", fill_value=np.nan)
            g.create_array("n_genes", shape=(n,), chunks=(min(rows, n),), dtype="int32", fill_value=-1)
            names = g.create_array("obs_names", shape=(n,), chunks=(min(rows, n),), dtype=str)
            names[:] = np.asarray(obs_names[inp["name"]], dtype=str)
            g.create_array("done", shape=(len(block_bounds(n, rows)),), chunks=(1,), dtype="uint8", fill_value=0)
        root.attrs[KEY] = {**manifest, "state": "ready", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        return cls(path)

    @staticmethod
    def state(path: str | Path) -> str:
        """``"absent"``, ``"creating"``, ``"ready"``, or ``"foreign"`` (a directory that is not an atlas store)."""
        import zarr

        path = Path(path)
        if not path.exists() or (path.is_dir() and not [c for c in path.iterdir() if c.name != INNER_LOCK]):
            return "absent"
        try:
            attrs = zarr.open_group(str(path), mode="r").attrs
        except Exception:  # anything unreadable as a zarr group is foreign
            return "foreign"
        meta = attrs.get(KEY)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            return "foreign"
        return meta.get("state", "creating")

    # -- blocks -----------------------------------------------------------------------------------
    def bounds(self, name: str) -> list[tuple[int, int]]:
        return block_bounds(self._input(name)["n_obs"], self.manifest["block_rows"])

    def done(self, name: str) -> np.ndarray:
        """bool ``[n_blocks]``: which blocks of input ``name`` are written."""
        return self.root[name]["done"][:].astype(bool)

    def write_block(self, name: str, block: int, Z: np.ndarray, n_genes: np.ndarray) -> None:
        """Write block ``block`` of input ``name``: its rows first, then its ``done`` entry."""
        a, b = self.bounds(name)[block]
        g = self.root[name]
        g[OBSM][a:b] = Z
        g["n_genes"][a:b] = n_genes
        g["done"][block] = 1

    def missing(self) -> dict[str, int]:
        """Blocks not yet written, per input (inputs with none are left out)."""
        out = {i["name"]: int((~self.done(i["name"])).sum()) for i in self.manifest["inputs"]}
        return {k: v for k, v in out.items() if v}

    def mark_complete(self, **extra) -> None:
        self.root.attrs.update({"complete": True, **extra})

    def _input(self, name: str) -> dict:
        for inp in self.manifest["inputs"]:
            if inp["name"] == name:
                return inp
        raise KeyError(f"no input {name!r} in {self.path}; inputs: {[i['name'] for i in self.manifest['inputs']]}")


def read_atlas(store: str | Path, name: str | None = None):
    """Read an atlas store back: an AnnData (no ``X``) per input, indexed by the input's obs_names.

    Parameters
    ----------
    store
        Path of the zarr store written by ``biomjepa embed ... --store``.
    name
        One input's group name (the file stem); default: all inputs.

    Returns
    -------
    AnnData (for ``name``) or dict name → AnnData, each with ``.obsm["X_biomjepa"]`` (float32
    ``[n_obs, D]``), ``.obs["n_genes"]`` and ``.uns["biomjepa"]["params"]`` (the store's
    manifest). Raises when the store is not complete.
    """
    import anndata as ad
    import pandas as pd
    import zarr

    root = zarr.open_group(str(store), mode="r")
    meta = root.attrs.get(KEY)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{store} is not a biomjepa atlas store")
    if not root.attrs.get("complete", False):
        raise ValueError(f"{store} is not complete; run the same `biomjepa embed ... --store` command again to finish it")
    names = [i["name"] for i in meta["inputs"]]
    if name is not None and name not in names:
        raise KeyError(f"no input {name!r} in {store}; inputs: {names}")
    out = {}
    for n in [name] if name is not None else names:
        g = root[n]
        obs = pd.DataFrame({"n_genes": g["n_genes"][:]}, index=pd.Index(np.asarray(g["obs_names"][:], dtype=object)))
        adata = ad.AnnData(obs=obs, obsm={OBSM: g[OBSM][:]})
        adata.uns["biomjepa"] = {"params": {k: v for k, v in meta.items() if k != "inputs"}}
        out[n] = adata
    return out[name] if name is not None else out
