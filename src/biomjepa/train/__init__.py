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
