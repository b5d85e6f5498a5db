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

#: The gene-mapping phrases of the library's messages (``bj.pp.map_vocab``, corpus preparation) -> the options
#: of every command that maps genes (``embed``, ``embed --store``, ``adapt``, ``graph``): the fix in flags, not Python.
GENE_FLAGS = {"`bj.pp.map_vocab(adata, gene_key='symbol')`": "pass --gene-key symbol",
              'pass species="mouse"': "pass --species mouse", 'species="mouse"': "--species mouse",
              'pass id_type="entrez"': "pass --id-type entrez", 'id_type="entrez"': "--id-type entrez",
              "Pass `gene_key=`": "Pass --gene-key", "`gene_key=`": "--gene-key", "gene_key= ": "--gene-key COLUMN ",
              "gene_key=": "--gene-key ", "species='": "--species '", "(gene_key=, species=)": "(--gene-key, --species)",
              r"~(?:[Ss]et )?`corpus(?:\[\d+\])?\.species: (\w+)`": r"pass --species \1",
              r"~(?:[Ss]et )?`corpus(?:\[\d+\])?\.id_type: (\w+)`": r"pass --id-type \1",
              r"~(?:[Ss]et )?`corpus(?:\[\d+\])?\.gene_key: COLUMN`": "pass --gene-key COLUMN",
              r"~(?:[Ss]et )?`corpus: \[\{path: [^,]*, species: (\w+)\}\]`": r"pass --species \1",
              r"~(?:[Ss]et )?`corpus: \[\{path: [^,]*, gene_key: COLUMN\}\]`": "pass --gene-key COLUMN",
              r"~(?<![.\w])species: (\w+)": r"--species \1"}

#: The phrases of the library's messages on reading counts and loading checkpoints (``bj.tl.embed``,
#: ``bj.tl.adapt``, the atlas) -> the options of every command that reads counts (``embed``, ``embed --store``,
#: ``adapt``): ``--input reads``, not ``input='reads'``.
READ_FLAGS = {" (in a training corpus entry: counts: reads)": "", r"~\binput='(\w+)'": r"--input \1",
              " or set `bj.settings.checkpoint`.": ".", "Pass `checkpoint=`": "Pass --checkpoint", "as `checkpoint=`": "as --checkpoint",
              "exported by `bj.train`": "exported by `biomjepa train --export`",
              "Use device='cpu' or 'auto'": "Use --device cpu or --device auto", r"~\bdevice='([\w:]+)'": r"--device \1"}

#: Pretraining presets accepted by ``biomjepa train`` in place of a YAML file (= ``train.config.PRESETS``).
TRAIN_PRESETS = ("tiny", "mini", "base")


def existing_file(value: str) -> str:
    """An existing, readable regular file (not a directory, a device or a pipe); otherwise an ``argparse``
    error naming the path."""
    from .._files import special_kind

    path = Path(value).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {value!r}")
    kind = special_kind(path)
    if kind is not None:
        raise argparse.ArgumentTypeError(f"{value!r} is {kind}, not a regular file; give the path of a file on disk"
                                         + (f", e.g. {value.rstrip('/')}/FILE" if path.is_dir() else ""))
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise argparse.ArgumentTypeError(f"cannot read {value!r} ({err.strerror or err}); check its permissions") from None
    return str(path)


def output_file(value: str, suffix: str = ".h5ad") -> str:
    """A regular ``suffix`` file that can be written: named ``*{suffix}``, not an existing directory, device,
    FIFO or socket (nor a link to one), in an existing writable directory, and not a read-only file; checked
    before any work so a long run never fails at its last step nor replaces ``/dev/null``."""
    import os

    from .._files import check_regular_target

    path = Path(value).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a directory; give the output file's name, e.g. {value}/out{suffix}")
    try:
        check_regular_target(path, what="OUTPUT")
    except OSError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if not path.name.lower().endswith(suffix):
        stem = path.name.rsplit(".", 1)[0] if "." in path.name.lstrip(".") else path.name
        raise argparse.ArgumentTypeError(
            f"OUTPUT {value!r} does not end in {suffix}: the file written is an AnnData {suffix} (HDF5), whatever "
            f"its name. Name it {str(path.with_name(stem + suffix))!r} (zarr: `biomjepa embed IN... --store OUT.zarr`; "
            "CSV: read the .h5ad and write obsm['X_biomjepa'] yourself)")
    link = f" (a link to {str(path.resolve())!r}, written through)" if path.is_symlink() else ""
    path = path.resolve() if link else path  # the link stays; its target is replaced
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"the directory of {value!r}{link} does not exist; create {str(parent)!r} first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into the directory {str(parent)!r} (permission denied)")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{value!r} exists and is not writable")
    return str(Path(value).expanduser()) if link else str(path)


def output_dir(value: str) -> str:
    """A directory to write into: an existing one, or a path that can be created (not an existing file, not
    under a file, and with a writable nearest existing directory); checked before any work."""
    import os

    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} exists and is a file, not a directory; give a directory "
                                         "(created if missing), or remove or rename the file")
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor != path and not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} cannot be created: {str(ancestor)!r} is a file, not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {str(ancestor)!r} (permission denied)")
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


def positive_seconds(value: str) -> float:
    """A finite number of seconds > 0."""
    import math

    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return seconds


def checkpoint_ref(value: str) -> str:
    """A checkpoint reference whose form is right and that names something: a registered name, an existing
    directory, or a URL, each optionally pinned with ``#sha256=<64 hex digits>`` (the key in any case); checked
    before any input is read (:func:`biomjepa._references.parse_reference`; nothing is loaded or downloaded)."""
    from .._pretrained import REGISTRY
    from .._references import parse_reference
    from .errors import in_flags

    try:
        parse_reference(value, registry=REGISTRY)
    except (OSError, ValueError) as err:
        flags = {**READ_FLAGS, " or sha256=.": ".", "`checkpoint=`": "--checkpoint", "checkpoint=": ""}
        raise argparse.ArgumentTypeError(in_flags(str(err), flags)) from None
    return value


def device_name(value: str) -> str:
    """``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (whether it is available here is checked when it is used)."""
    from .._settings import check_device

    try:
        return check_device(value, "--device")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a device; use auto, cpu, cuda, cuda:N (N = GPU index, "
                                         "e.g. cuda:0) or mps") from None


def h5ad_file(value: str) -> str:
    """An existing, readable ``.h5ad`` (HDF5) file; a missing, unreadable, empty, CSV or other file is a usage
    error naming it and what is expected (:func:`biomjepa.data.files.check_h5ad_file`)."""
    from ..data.files import check_h5ad_file

    try:
        return str(check_h5ad_file(value))
    except (OSError, ValueError) as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def corpus_file(value: str) -> str:
    """An ``.h5ad`` file or an ``.npz`` shard prepared by ``bj.train`` (checked by its signature)."""
    from ..data.files import check_h5ad_file

    try:
        return str(check_h5ad_file(value, allow_npz=True))
    except (OSError, ValueError) as err:
        raise argparse.ArgumentTypeError(str(err)) from None
