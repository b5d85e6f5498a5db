"""The atlas store: one zarr group per input, written block by block, with a record of finished blocks.

Layout of ``OUT.zarr`` (zarr v3, a directory)::

    OUT.zarr/                  attrs["biomjepa_atlas"]: the manifest (checkpoint, block_rows, settings,
                               inputs with path/size/mtime/n_obs); attrs["complete"]: bool
      <name>/                  one group per input (the file stem, made unique)
        X_biomjepa             float32 [n_obs, D], chunked (block_rows, D): one chunk per block
        n_genes                int32 [n_obs]: mapped genes per cell (the tokens the encoder saw)
        obs_names              str [n_obs]: the input's obs_names, in order
        checksum               uint64 [n_blocks], one chunk per block: the block's checksum
        done                   uint8 [n_blocks], one chunk per block: 1 once the block is written

A block's rows, n_genes and obs_names are written first, then its checksum (BLAKE2b of the three),
then its ``done`` entry, each as its own chunk file (zarr's local store writes a chunk to a
temporary file and renames it), so a process killed mid-block leaves that block not done, and a
re-run redoes exactly it.

Verify, then trust: a block counts as written only when its done record reads 1 and its rows
match its checksum (:meth:`AtlasStore.read_block`). :func:`read_atlas` verifies every block and
refuses a store with a damaged one (a flipped byte, a deleted chunk, a damaged done record),
naming the store, the blocks and the fix; a re-run of the command verifies the blocks it would
skip and embeds a damaged one again (:func:`biomjepa.embed.run.embed_atlas` reports the repair).
Stores written before checksums existed are verified for readable, fully written rows only.

One command at a time: the process that creates, overwrites and completes a store (rank 0) holds
an exclusive lock on ``.OUT.zarr.lock`` beside it (``OUT.zarr/.lock`` where the parent directory is
read-only) from before it looks at the store until it ends (:func:`lock_store`), and removes that file as it
ends, done or failed (a killed command leaves it, unlocked: the next command takes it).
"""

from __future__ import annotations

import hashlib
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
CHECKSUM = "checksum"


class DamagedBlock(ValueError):
    """A block of an atlas store that is not (correctly) written; the message says how."""


class DamagedStore(ValueError):
    """An atlas store whose data cannot be trusted; the message names the store, the damage and the fix."""


def block_checksum(Z: np.ndarray, n_genes: np.ndarray, obs_names) -> int:
    """BLAKE2b (64 bit, never 0) of a block's rows ``[n, D]`` float32, ``n_genes`` int32 and obs_names."""
    h = hashlib.blake2b(digest_size=8)
    h.update(np.ascontiguousarray(Z, dtype=np.float32).tobytes())
    h.update(np.ascontiguousarray(n_genes, dtype=np.int32).tobytes())
    h.update("\0".join(map(str, obs_names)).encode())
    return int.from_bytes(h.digest(), "little") | 1  # 0 is the fill value: "no record"


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
    return lock(where, what=f"The atlas store {path}", remove=True,
                fix="Two commands writing one store mix their embeddings, and overwrite=True would delete it under the "
                    "other: wait for that one to finish, or give this one another store.")


def block_bounds(n_obs: int, block_rows: int) -> list[tuple[int, int]]:
    """Row ranges ``[(start, stop), ...]`` of the blocks of an input with ``n_obs`` rows."""
    return [(a, min(a + block_rows, n_obs)) for a in range(0, n_obs, block_rows)]


def manifest_differences(old: dict, new: dict) -> list[str]:
    """Human-readable differences between the manifest of a store and that of this run.

    A store begun before ``weights_sha256`` existed (before commit c8b9d53, 2026-11-27) holds the weights' hash as
    ``checkpoint_sha256``: it is compared with this run's ``weights_sha256``, so such a store can still be resumed."""
    if "weights_sha256" not in old and "weights_sha256" in new:
        old = {**old, "checkpoint_sha256": new["checkpoint_sha256"]
               if old.get("checkpoint_sha256") == new["weights_sha256"] else old.get("checkpoint_sha256")}
    diffs = [f"{k}: store has {old.get(k)!r}, this run {new.get(k)!r}" for k in COMPARED
             if k != "settings" and old.get(k) != new.get(k)]
    was, now = old.get("settings") or {}, new.get("settings") or {}
    diffs += [f"settings.{k}: store has {was.get(k)!r}, this run {now.get(k)!r}" for k in sorted(set(was) | set(now))
              if was.get(k) != now.get(k)]
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
            n_blocks = len(block_bounds(n, rows))
            g.create_array(CHECKSUM, shape=(n_blocks,), chunks=(1,), dtype="uint64", fill_value=0)
            g.create_array("done", shape=(n_blocks,), chunks=(1,), dtype="uint8", fill_value=0)
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
        """bool ``[n_blocks]``: which blocks of input ``name`` are recorded as written (an unreadable record: not)."""
        return self.records(name) == 1

    def records(self, name: str) -> np.ndarray:
        """int ``[n_blocks]``: the done records of input ``name``, ``-1`` where a record cannot be read."""
        arr = self.root[name]["done"]
        try:
            return arr[:].astype(np.int64)
        except Exception:  # a damaged chunk: read the records one by one
            return np.array([_safe_int(arr, b) for b in range(arr.shape[0])], dtype=np.int64)

    def write_block(self, name: str, block: int, Z: np.ndarray, n_genes: np.ndarray, obs_names) -> None:
        """Write block ``block`` of input ``name``: rows, n_genes and obs_names, then its checksum, then ``done``."""
        a, b = self.bounds(name)[block]
        g = self.root[name]
        names = np.asarray(obs_names, dtype=str)
        g[OBSM][a:b] = Z
        g["n_genes"][a:b] = n_genes
        g["obs_names"][a:b] = names
        if CHECKSUM in g:  # stores written before checksums have none
            g[CHECKSUM][block] = block_checksum(Z, n_genes, names)
        g["done"][block] = 1

    def read_block(self, name: str, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows ``[n, D]``, n_genes and obs_names of a written block, verified against its checksum.

        Raises
        ------
        DamagedBlock
            The block is not written, unreadable, or differs from its checksum.
        """
        a, b = self.bounds(name)[block]
        return _read_block(self.root[name], block, a, b)

    def verify(self, name: str, blocks) -> dict[int, str]:
        """Blocks among ``blocks`` of input ``name`` recorded as written but damaged: block → what is wrong."""
        bad = {}
        for block in blocks:
            try:
                self.read_block(name, block)
            except DamagedBlock as err:
                bad[block] = str(err)
        return bad

    def reset(self, name: str, block: int) -> None:
        """Record a block as not written (before it is embedded again)."""
        self.root[name]["done"][block] = 0

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


def _safe_int(arr, i: int) -> int:
    try:
        return int(arr[i])
    except Exception:  # an unreadable record
        return -1


def _read_block(g, block: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        done = int(g["done"][block])
        Z = np.asarray(g[OBSM][a:b])
        n_genes = np.asarray(g["n_genes"][a:b])
        names = np.asarray(g["obs_names"][a:b], dtype=object)
        want = int(g[CHECKSUM][block]) if CHECKSUM in g else None
    except Exception as err:  # zstd/zarr/json errors of a damaged chunk
        first = str(err).splitlines()[0][:120] if str(err) else ""
        raise DamagedBlock(f"unreadable ({type(err).__name__}: {first})") from None
    if done != 1:
        raise DamagedBlock("not written (no done record)" if done == 0 else f"its done record is damaged ({done})")
    if want is None:  # a store written before checksums: at least every row written
        if np.isnan(Z).all(axis=1).any():
            raise DamagedBlock("rows missing (a deleted or unwritten chunk)")
    elif want == 0:
        raise DamagedBlock("its checksum record is missing")
    elif want != block_checksum(Z, n_genes, names):
        raise DamagedBlock("its contents differ from its checksum (a damaged or replaced chunk)")
    return Z, n_genes, names


def read_atlas(store: str | Path, name: str | None = None):
    """Read an atlas store back, verified: an AnnData (no ``X``) per input, indexed by the input's obs_names.

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
    manifest).

    Raises
    ------
    FileNotFoundError
        No store at ``store``.
    ValueError
        Not an atlas store, or not complete.
    DamagedStore
        (a ``ValueError``) A block is unreadable, not written or differs from its checksum; the
        message names the blocks. Running the same command again re-embeds them.
    """
    import anndata as ad
    import pandas as pd

    meta, root = _open_for_reading(store)
    names = [i["name"] for i in meta["inputs"]]
    if name is not None and name not in names:
        raise KeyError(f"no input {name!r} in {store}; inputs: {names}")
    out, damaged = {}, []
    for n in [name] if name is not None else names:
        parts = _read_input(root, n, meta, damaged)
        if parts is None:
            continue
        Z, n_genes, obs_names = parts
        obs = pd.DataFrame({"n_genes": n_genes}, index=pd.Index(obs_names))
        adata = ad.AnnData(obs=obs, obsm={OBSM: Z})
        adata.uns["biomjepa"] = {"params": {k: v for k, v in meta.items() if k != "inputs"}}
        out[n] = adata
    if damaged:
        listed = "; ".join(damaged[:5]) + (f"; (+{len(damaged) - 5} more)" if len(damaged) > 5 else "")
        raise DamagedStore(
            f"the atlas store {store} is damaged, so it is not read: {listed}. Run the same embed_atlas call or "
            "`biomjepa embed` command again: it verifies every block and embeds the damaged ones again."
        )
    return out[name] if name is not None else out


def _open_for_reading(store):
    import zarr

    if not Path(store).is_dir():
        raise FileNotFoundError(f"no atlas store at {store}; write one with embed_atlas(inputs, store) or `biomjepa embed`")
    if not (Path(store) / "zarr.json").is_file():
        raise ValueError(f"{store} is not a biomjepa atlas store (no zarr.json); give the store written by embed_atlas or `biomjepa embed`")
    try:
        root = zarr.open_group(str(store), mode="r")
        meta = root.attrs.get(KEY)
        complete = root.attrs.get("complete", False)
    except Exception as err:  # damaged zarr.json
        raise DamagedStore(f"the atlas store {store} cannot be opened ({type(err).__name__}: {err}); its metadata is "
                           "damaged. Run the embedding again with overwrite=True to rebuild it.") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{store} is not a biomjepa atlas store")
    if not complete:
        raise ValueError(f"{store} is not complete; run the same embedding (embed_atlas or `biomjepa embed`) again to finish it")
    return meta, root


def _read_input(root, name: str, meta: dict, damaged: list[str]):
    """``(Z, n_genes, obs_names)`` of one input, every block verified; ``None`` (and ``damaged`` extended) if not."""
    inp = next(i for i in meta["inputs"] if i["name"] == name)
    bounds = block_bounds(inp["n_obs"], meta["block_rows"])
    try:
        g = root[name]
    except Exception:
        damaged.append(f"input {name}: its group is missing (rebuild the store with overwrite=True)")
        return None
    Z = np.empty((inp["n_obs"], meta["embedding_dim"]), dtype=np.float32)
    n_genes = np.empty(inp["n_obs"], dtype=np.int32)
    obs_names = np.empty(inp["n_obs"], dtype=object)
    before = len(damaged)
    for block, (a, b) in enumerate(bounds):
        try:
            Z[a:b], n_genes[a:b], obs_names[a:b] = _read_block(g, block, a, b)
        except DamagedBlock as err:
            damaged.append(f"{name} block {block} (rows {a}..{b}): {err}")
    return None if len(damaged) > before else (Z, n_genes, obs_names)
