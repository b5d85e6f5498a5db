"""Input files checked before any work: each refusal names the file, what it is, and what is expected.

:func:`check_h5ad_file` is what every reader of a user's ``.h5ad`` asks first (``biomjepa embed``,
``bench``, the atlas command, corpus files): a missing file, a directory, an unreadable file, an
empty file, a text (CSV/TSV) file or any other non-HDF5 file each get their own message instead of
h5py's ``OSError: Unable to open file (file signature not found)`` or a raw errno.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._files import special_kind

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_CONVERT = ("convert it first, e.g. `anndata.read_csv(...)` / `scanpy.read_10x_mtx(...)` / `scanpy.read_10x_h5(...)` "
            "then `.write_h5ad('data.h5ad')`")


def check_h5ad_file(path: str | os.PathLike, *, what: str = "", allow_npz: bool = False) -> Path:
    """``path`` as a :class:`~pathlib.Path` when it is a readable HDF5 (``.h5ad``) file, else a clear error.

    ``what`` starts every message (e.g. ``"Corpus file "``); ``allow_npz`` also accepts a prepared
    ``.npz`` shard (a zip archive).

    Raises
    ------
    FileNotFoundError, IsADirectoryError, PermissionError
        No such file; a directory (with the glob that names its files); a file that cannot be read.
    ValueError
        A device, FIFO or socket (``/dev/stdin``); an empty file, a text file (CSV, TSV, MTX) or any other file without an HDF5 signature.
    """
    p = Path(path).expanduser()
    name = f"{what}{path}" if what else repr(str(path))
    if not p.exists():
        raise FileNotFoundError(f"{name} does not exist (no such file)" if what else f"no such file: {name}")
    if p.is_dir():
        raise IsADirectoryError(f"{name} is a directory, not a file; name its files, e.g. '{str(path).rstrip('/')}/*.h5ad'")
    kind = special_kind(p)
    if kind is not None:  # /dev/stdin, a FIFO, a device: HDF5 is read by seeking, which they cannot do
        raise ValueError(f"{name} is {kind}, not a regular file: an .h5ad is read by seeking back and forth, which "
                         "a pipe or a device cannot do. Save it to a file first (e.g. `cat > in.h5ad`) and name that.")
    try:
        with open(p, "rb") as f:
            head = f.read(512)
            hdf5 = _hdf5_signature(f, head)
    except OSError as err:
        raise type(err)(f"{name} cannot be read ({err.strerror or err}); check its permissions") from None
    if hdf5:
        _check_anndata_layout(p, name)
        return p
    if allow_npz and head[:4] == b"PK\x03\x04":
        return p
    expected = "an .h5ad file (HDF5) nor a prepared .npz shard" if allow_npz else "an .h5ad file (HDF5, written by anndata)"
    if not head:
        raise ValueError(f"{name} is not {expected} but an empty file (0 bytes); was it written completely?")
    if _is_text(head):
        first = head.split(b"\n", 1)[0][:60].decode("utf-8", "replace")
        raise ValueError(f"{name} is not {expected} but a text file (first line: {first!r}): {_CONVERT}")
    raise ValueError(f"{name} is not {expected} (no HDF5 signature): {_CONVERT}")


def _check_anndata_layout(p: Path, name: str) -> None:
    """An HDF5 file without the ``obs`` and ``var`` that anndata writes into every ``.h5ad`` is refused naming what it
    holds; one laid out as Cell Ranger's ``filtered_feature_bc_matrix.h5`` (a ``matrix`` group, or v2's genome
    groups of ``barcodes``/``genes``) with how to convert it."""
    import h5py

    try:
        with h5py.File(p, "r") as f:
            keys = set(f.keys())
            v2 = any(isinstance(f[k], h5py.Group) and {"barcodes", "genes"} <= set(f[k].keys()) for k in keys)
    except OSError:
        return  # anndata reports what it cannot read
    if {"obs", "var"} <= keys:
        return
    if not ("matrix" in keys or v2):
        held = ", ".join(sorted(keys)[:8]) + (", …" if len(keys) > 8 else "") if keys else "nothing"
        raise ValueError(f"{name} is an HDF5 file but not an AnnData .h5ad: it holds {held}, not the obs and var "
                         f"that anndata writes into every .h5ad; {_CONVERT}")
    raise ValueError(
        f"{name} is a 10x Genomics (Cell Ranger) .h5 file, not an .h5ad. Convert it first, e.g. "
        f"`python -c \"import scanpy as sc; sc.read_10x_h5('{p}').write_h5ad('{p.with_suffix('.h5ad')}')\"`, "
        "and name the .h5ad."
    )


def _hdf5_signature(f, head: bytes) -> bool:
    """HDF5 signature at offset 0 or at a power-of-two user-block offset (512, 1024, …)."""
    if head[:8] == HDF5_MAGIC:
        return True
    size, offset = os.fstat(f.fileno()).st_size, 512
    while offset + 8 <= size:
        f.seek(offset)
        if f.read(8) == HDF5_MAGIC:
            return True
        offset *= 2
    return False


def _is_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:  # a character cut at the end of the 512 bytes read is still text
        if err.start < len(head) - 3:
            return False
        text = head[: err.start].decode("utf-8")
    return all(c.isprintable() or c in "\n\r\t" for c in text)
