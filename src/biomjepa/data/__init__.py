"""Data layer: vocabulary, identifier tables, AnnData/shard readers, tokenizer and collator.

Importing this package loads nothing heavy; each submodule loads on first use, so both
``from biomjepa.data.vocab import Vocab`` and ``biomjepa.data.vocab.Vocab`` work.
"""

from __future__ import annotations

import importlib

_SUBMODULES = {"anndata_source", "backends", "collate", "files", "graph", "idtable", "lognorm", "shards", "stream",
               "tokenize", "vocab"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'biomjepa.data' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBMODULES)
