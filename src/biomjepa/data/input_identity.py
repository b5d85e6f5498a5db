"""Whether corpus files are the very ones a cache was prepared from, or a training state was saved on.

A file's record is ``{path, size, mtime_ns}``, read on every start at no cost, plus ``sha256``, its content's
digest, computed once when a cache is prepared (a second read of each file, after the conversion; logged with the
files' count and size) and carried into the training states saved on that cache. Copying a corpus (to another disk or machine, ``cp`` without ``-p``) keeps the
bytes and gives the files new modification times: a file of the recorded size whose mtime differs is the same file
when its bytes hash to the recorded digest (:func:`same_file`; hashed streamed, once per process and file version).
A file whose mtime matches is never hashed. A record without a digest (caches and states written before it was
recorded) compares size and mtime only, as before.
"""

from __future__ import annotations

import hashlib
import os

CHUNK = 1 << 20  # bytes read at a time while hashing
_DIGESTS: dict[tuple[str, int, int], str] = {}  # (real path, size, mtime_ns) → sha256, this process' hashes


def file_sha256(entry: dict) -> str | None:
    """The sha256 of the file ``entry["path"]`` while it still has the entry's size and mtime (``None``: it is gone,
    or changed before or while it was read)."""
    path = entry["path"]
    try:
        key = (os.path.realpath(path), *_stamp(path))
        if key[1:] != (entry["size"], entry["mtime_ns"]):
            return None
        if key not in _DIGESTS:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while block := f.read(CHUNK):
                    h.update(block)
            if _stamp(path) != key[1:]:  # written to while it was read
                return None
            _DIGESTS[key] = h.hexdigest()
    except OSError:
        return None
    return _DIGESTS[key]


def with_sha256(inputs: list[dict]) -> list[dict]:
    """``inputs`` with the ``sha256`` of every file that still is as recorded (what a cache's manifest records)."""
    out = []
    for entry in inputs:
        digest = entry.get("sha256") or file_sha256(entry)
        out.append({**entry, "sha256": digest} if digest else dict(entry))
    return out


def same_file(old: dict | None, new: dict | None) -> bool:
    """Whether record ``new`` (a file now) is the file of record ``old``: the same size, and the same mtime or,
    where ``old`` holds a digest, the same bytes."""
    if old is None or new is None:
        return old is new
    if old["size"] != new["size"]:
        return False
    if old["mtime_ns"] == new["mtime_ns"]:
        return True
    if not old.get("sha256"):  # recorded before digests were: size and mtime only
        return False
    return (new.get("sha256") or file_sha256(new)) == old["sha256"]


def changed(recorded: list[dict], now: list[dict]) -> list[str]:
    """Paths whose file differs between two records (:func:`same_file`), or that are in one only."""
    old, new = {i["path"]: i for i in recorded}, {i["path"]: i for i in now}
    return [p for p in dict.fromkeys([*old, *new]) if not same_file(old.get(p), new.get(p))]


def refreshed(recorded: list[dict], now: list[dict]) -> list[dict] | None:
    """The record to keep instead of ``recorded`` when its files were copied (:func:`changed` found none, but mtimes
    differ): ``now`` with the digests, so the next start compares mtimes again and hashes nothing. ``None``: keep it."""
    old = {i["path"]: i for i in recorded}
    if all(old.get(i["path"], {}).get("mtime_ns") == i["mtime_ns"] for i in now):
        return None
    return [{**i, "sha256": old[i["path"]]["sha256"]} if old.get(i["path"], {}).get("sha256") else dict(i) for i in now]


def undigested(recorded: list[dict], now: list[dict], paths: list[str]) -> list[str]:
    """Those of ``paths`` whose record in ``recorded`` holds no digest and whose size is the recorded one: a copy
    of such a file cannot be told from a change (a file of another size plainly changed)."""
    old, new = {i["path"]: i for i in recorded}, {i["path"]: i for i in now}
    return [p for p in paths if p in old and p in new and not old[p].get("sha256") and old[p]["size"] == new[p]["size"]]


def to_hash(recorded: list[dict], now: list[dict]) -> list[dict]:
    """The entries of ``now`` that :func:`changed` will hash: of the recorded size and another mtime, where the
    record holds a digest and ``now`` none, and not hashed yet by this process."""
    old = {i["path"]: i for i in recorded}
    return [n for n in now if (o := old.get(n["path"])) and o.get("sha256") and not n.get("sha256")
            and o["size"] == n["size"] and o["mtime_ns"] != n["mtime_ns"] and not _hashed(n)]


def unhashed(inputs: list[dict]) -> list[dict]:
    """The entries of ``inputs`` that :func:`with_sha256` will hash (no digest, none computed by this process)."""
    return [i for i in inputs if not i.get("sha256") and not _hashed(i)]


def size_text(nbytes: int) -> str:
    """``nbytes`` for a log line: ``"3.2 GB"``, ``"12.0 MB"``, ``"4.1 kB"``, ``"12 bytes"``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def _hashed(entry: dict) -> bool:
    return (os.path.realpath(entry["path"]), entry["size"], entry["mtime_ns"]) in _DIGESTS


def _stamp(path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns
