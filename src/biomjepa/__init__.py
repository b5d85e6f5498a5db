"""BioM-JEPA: joint-embedding prediction of graph-connected gene blocks in single cells.

``import biomjepa as bj`` is light: torch, scanpy and matplotlib are imported only when a
function that needs them runs. ``bj.pp``, ``bj.tl``, ``bj.pl``, ``bj.train``, ``bj.bench``,
``bj.datasets``, ``bj.embed`` (atlas embedding into a zarr store), ``bj.model`` and ``bj.cli`` load on
first use (as do the submodules of ``bj.nn``, ``bj.train`` and ``bj.data``), so that
importing a lower layer (``biomjepa.model``, ``biomjepa.data``) never loads the AnnData tools.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._settings import settings
from ._version import __version__

_LAZY = {"pp", "tl", "pl", "train", "bench", "datasets", "nn", "data", "embed", "model", "cli"}

if TYPE_CHECKING:
    from . import bench, datasets, embed, pl, pp, tl, train


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    if name == "load_model":
        from ._pretrained import load_model

        return load_model
    raise AttributeError(f"module 'biomjepa' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY | {"load_model"})


__all__ = ["__version__", "bench", "datasets", "embed", "load_model", "pl", "pp", "settings", "tl", "train"]
