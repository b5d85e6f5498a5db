"""Preprocessing: ``bj.pp.map_vocab`` maps genes onto the model vocabulary."""

from __future__ import annotations

from ._vocab import map_vocab

__all__ = ["map_vocab"]
