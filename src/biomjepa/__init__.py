"""BioM-JEPA: joint-embedding prediction of graph-connected gene blocks in single cells.

``import biomjepa as bj`` is light: torch, scanpy and matplotlib are imported only when a
function that needs them runs. ``bj.train``, ``bj.bench``, ``bj.datasets`` and ``bj.embed`` (atlas embedding into a zarr store)
load on first use.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING

from . import pl, pp, tl
from ._settings import settings

try:  # the installed distribution's metadata: one version, set in pyproject.toml
    __version__ = _version("biomjepa")
except PackageNotFoundError:  # pragma: no cover - a source tree on sys.path, never installed
    __version__ = "0.0.0+unknown"

_LAZY = {"train", "bench", "datasets", "nn", "data", "embed"}

if TYPE_CHECKING:
    from . import bench, datasets, embed, train


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    if name == "load_model":
        from ._pretrained import load_model

        return load_model
    raise AttributeError(f"module 'biomjepa' has no attribute {name!r}")


__all__ = ["__version__", "bench", "datasets", "embed", "load_model", "pl", "pp", "settings", "tl", "train"]
