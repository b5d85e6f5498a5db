"""``bj.train``: BioM-JEPA pretraining (block-level JEPA, its controls, DDP via torchrun).

``bj.train.pretrain(config) -> run_dir``; ``bj.train.export(run_dir, out_dir)`` writes the
inference checkpoint; ``python -m biomjepa.train CONFIG.yaml --set key=value``.
"""

from __future__ import annotations

from .checkpoint import export
from .config import TrainConfig, load_config, preset
from .loop import pretrain
from .shards import prepare_corpus

__all__ = ["TrainConfig", "export", "load_config", "pretrain", "prepare_corpus", "preset"]
