"""``bj.train``: BioM-JEPA pretraining (block-level JEPA, its controls, DDP via torchrun).

``bj.train.pretrain(config) -> run_dir``; ``bj.train.export(run_dir, out_dir)`` writes the
inference checkpoint; ``python -m biomjepa.train CONFIG.yaml --set key=value``.
"""

from __future__ import annotations

from ..data.shards import prepare_corpus
from .checkpoint import export
from .config import TrainConfig, load_config, preset
from .loop import pretrain

__all__ = ["TrainConfig", "export", "load_config", "pretrain", "prepare_corpus", "preset"]


def __getattr__(name: str):
    """Submodules load on first attribute access (``biomjepa.train.graph`` after ``import biomjepa``)."""
    import importlib
    import pkgutil

    if name in {m.name for m in pkgutil.iter_modules(__path__)}:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
