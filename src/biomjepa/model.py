"""``BiomJEPA``: an encoder plus its checkpoint metadata; safetensors + config.json, never pickle.

A checkpoint is a directory holding ``model.safetensors`` (encoder weights, float32 or bfloat16)
and ``config.json``::

    {"format": "biomjepa-checkpoint", "format_version": 1, "model": {...ModelConfig...},
     "vocab_hash": "...", "weights_sha256": "...", "weights_dtype": "float32",
     "biomjepa_version": "...", "provenance": {...}}

Loading verifies the weights' sha256 and the vocabulary hash and always restores float32.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .data.collate import Batch
from .nn.config import ModelConfig
from .nn.encoder import Encoder
from .nn.pooling import max_top5_pool

FORMAT = "biomjepa-checkpoint"
FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupted, or incompatible with this package."""


class BiomJEPA(nn.Module):
    """A frozen-embedding model: :class:`~biomjepa.nn.Encoder` + max/top-5 pooling.

    Attributes
    ----------
    config
        The :class:`~biomjepa.nn.ModelConfig`.
    info
        Checkpoint metadata (name, sha256, vocab hash, provenance) when loaded from disk.
    """

    def __init__(self, config: ModelConfig, info: dict | None = None) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.info = dict(info or {})

    def hidden(self, batch: Batch) -> torch.Tensor:
        """Token states ``[B, T, D]``."""
        return self.encoder(batch.gene_ids, batch.values, batch.mask)

    def forward(self, batch: Batch) -> torch.Tensor:
        """Cell embeddings ``[B, 2D]``."""
        return max_top5_pool(self.hidden(batch), batch.gene_mask)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_checkpoint(
    model: BiomJEPA | Encoder,
    path: str | os.PathLike,
    *,
    provenance: dict | None = None,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Write ``model``'s encoder to directory ``path`` (created); returns the directory.

    ``dtype=torch.bfloat16`` halves the file; loading restores float32. Files are written to a
    temporary name first and renamed, so a crash never leaves a half-written checkpoint.
    """
    from . import __version__
    from .data.vocab import Vocab

    encoder = model.encoder if isinstance(model, BiomJEPA) else model
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in encoder.state_dict().items()}
    tmp = path / (WEIGHTS + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": FORMAT})
    os.replace(tmp, path / WEIGHTS)
    vocab_hash = Vocab.default().hash if encoder.config.vocab_size == Vocab.default().size else None
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": encoder.config.to_dict(),
        "vocab_hash": vocab_hash,
        "weights_sha256": sha256_file(path / WEIGHTS),
        "weights_dtype": str(dtype).replace("torch.", ""),
        "biomjepa_version": __version__,
        "provenance": provenance or {},
    }
    tmp = path / (CONFIG + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True))
    os.replace(tmp, path / CONFIG)
    return path


def read_config(path: str | os.PathLike) -> dict:
    """Read and validate a checkpoint's ``config.json``."""
    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise CheckpointError(
            f"{path} is not a biomjepa checkpoint directory (expected {CONFIG} and {WEIGHTS}). "
            "Create one with `bj.train` export or `biomjepa.model.save_checkpoint`."
        )
    try:
        meta = json.loads((path / CONFIG).read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path / CONFIG} is not valid JSON ({err}); the checkpoint is corrupted.") from err
    if meta.get("format") != FORMAT or meta.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format {meta.get('format')!r} v{meta.get('format_version')}; this biomjepa "
            f"reads {FORMAT!r} up to v{FORMAT_VERSION}. Upgrade biomjepa."
        )
    return meta


def load_checkpoint(path: str | os.PathLike, *, name: str | None = None, verify: bool = True) -> BiomJEPA:
    """Load a checkpoint directory into a float32 :class:`BiomJEPA` in eval mode.

    Raises
    ------
    CheckpointError
        Missing files, a sha256 mismatch (corrupted/truncated weights), a vocabulary other than
        the bundled one, or weights that do not fit the recorded config.
    """
    from .data.vocab import Vocab

    path = Path(path)
    meta = read_config(path)
    digest = sha256_file(path / WEIGHTS)
    if verify and digest != meta.get("weights_sha256"):
        raise CheckpointError(
            f"{path / WEIGHTS} is corrupted or truncated: sha256 {digest[:12]}… does not match the "
            f"recorded {str(meta.get('weights_sha256'))[:12]}…. Download or export it again."
        )
    config = ModelConfig.from_dict(meta["model"])
    vocab = Vocab.default()
    if config.vocab_size != vocab.size or meta.get("vocab_hash") != vocab.hash:
        raise CheckpointError(
            f"{path} was trained on another vocabulary (hash {meta.get('vocab_hash')}, this package "
            f"uses {vocab.hash}). Use a checkpoint built on the bundled 19,264-gene vocabulary."
        )
    try:
        state = {k: v.float() for k, v in load_file(str(path / WEIGHTS)).items()}
    except Exception as err:  # safetensors raises several types for damaged files
        raise CheckpointError(f"Could not read {path / WEIGHTS} ({err}); the file is damaged.") from err
    info = {"name": name or str(path), "path": str(path), "sha256": digest, **meta}
    model = BiomJEPA(config, info)
    try:
        model.encoder.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"Weights in {path} do not match its config: {err}") from err
    return model.eval()
