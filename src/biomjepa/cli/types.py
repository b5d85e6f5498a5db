"""Argument types and help texts shared by the ``biomjepa`` subcommands: a bad value is a usage error (exit code 2)."""

from __future__ import annotations

import argparse
from pathlib import Path

CHECKPOINT_HELP = (
    "registry name, checkpoint directory (config.json + model.safetensors) or URL#sha256=HEX "
    "(default: bj.settings.checkpoint)"
)
BATCH_SIZE_HELP = "cells per forward pass (default: bj.settings.batch_size, 64)"
DEVICE_HELP = "auto (CUDA if available, else CPU), cpu, cuda or cuda:N; CUDA without CUDA is an error (default: auto)"
EPILOG = "exit codes: 0 success, 1 error while running (message on stderr), 2 usage error (bad arguments, missing files)"

#: Pretraining presets accepted by ``biomjepa train`` in place of a YAML file (= ``train.config.PRESETS``).
TRAIN_PRESETS = ("tiny", "mini", "base")


def existing_file(value: str) -> str:
    """An existing file (not a directory); otherwise an ``argparse`` error naming the path."""
    path = Path(value).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {value!r}")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"not a file: {value!r}")
    return str(path)


def output_file(value: str) -> str:
    """A file that can be written: not a directory, in an existing writable directory, and not a
    read-only file; checked before any work so a long run never fails at its last step."""
    import os

    path = Path(value).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a directory; give the output file's name, e.g. {value}/out.h5ad")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"the directory of {value!r} does not exist; create {str(parent)!r} first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into the directory {str(parent)!r} (permission denied)")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{value!r} exists and is not writable")
    return str(path)


def train_config(value: str) -> str:
    """A preset name (``tiny``, ``mini``, ``base``) or an existing YAML file."""
    if value in TRAIN_PRESETS:
        return value
    try:
        return existing_file(value)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{err}; give a YAML config file or a preset ({', '.join(TRAIN_PRESETS)})") from None


def _int_at_least(value: str, low: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if n < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {n}")
    return n


def positive_int(value: str) -> int:
    """An integer >= 1."""
    return _int_at_least(value, 1)


def non_negative_int(value: str) -> int:
    """An integer >= 0."""
    return _int_at_least(value, 0)


_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def _is_hdf5(path: Path) -> bool:
    """HDF5 signature at offset 0 or at a power-of-two user-block offset (512, 1024, …)."""
    try:
        with open(path, "rb") as f:
            if f.read(8) == _HDF5_MAGIC:
                return True
            size, offset = path.stat().st_size, 512
            while offset + 8 <= size:
                f.seek(offset)
                if f.read(8) == _HDF5_MAGIC:
                    return True
                offset *= 2
    except OSError:
        return False
    return False


def h5ad_file(value: str) -> str:
    """An existing ``.h5ad`` (HDF5) file; a text file, CSV, loom-less zarr … is a usage error naming it."""
    path = existing_file(value)
    if not _is_hdf5(Path(path)):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an .h5ad file (no HDF5 signature); convert it first, e.g. "
            "`anndata.read_csv(...)` / `scanpy.read_10x_mtx(...)` then `.write_h5ad('data.h5ad')`"
        )
    return path


def corpus_file(value: str) -> str:
    """An ``.h5ad`` file or an ``.npz`` shard prepared by ``bj.train`` (checked by its signature)."""
    path = existing_file(value)
    if value.endswith(".npz"):
        with open(path, "rb") as f:
            if f.read(4) == b"PK\x03\x04":
                return path
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid .npz shard (not a zip archive)")
    try:
        return h5ad_file(value)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{err}; corpus files are .h5ad files or .npz shards") from None
