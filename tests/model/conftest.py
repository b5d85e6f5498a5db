"""Fixtures of the checkpoint tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    """A random ``tiny`` checkpoint (seed 0) as a ``Path``: the same weights as the root ``ckpt`` fixture,
    in a directory of its own (these tests copy, edit and serve its files)."""
    import torch

    from biomjepa.model import BiomJEPA, save_checkpoint
    from biomjepa.nn import ModelConfig

    torch.manual_seed(0)
    return save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), tmp_path_factory.mktemp("ckpt") / "tiny")
