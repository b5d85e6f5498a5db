"""Training-state checkpoints (atomic, resumable) and export of the inference checkpoint.

A state file ``run_dir/checkpoints/step_XXXXXXXX.pt`` holds student + predictor (``model``),
``teacher``, ``optimizer``, ``step``, ``consumed`` micro-batches, ``centre``, ``bad_steps``, RNG
states (torch, CUDA, numpy, python) and the config. It is written to a temporary file and renamed,
then ``LATEST`` (a text file naming it) is replaced the same way, so a crash never leaves a torn
checkpoint. Rank 0 writes; the state is identical across ranks (DDP + all-reduced centre).
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import numpy as np
import torch

logger = logging.getLogger(__name__)
LATEST = "LATEST"


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_state(run_dir: str | os.PathLike, state: dict, *, keep: int = 2) -> Path:
    """Atomically write ``state`` (must hold ``step``) and point ``LATEST`` at it; keep the last ``keep``."""
    ckdir = Path(run_dir) / "checkpoints"
    ckdir.mkdir(parents=True, exist_ok=True)
    path = ckdir / f"step_{int(state['step']):08d}.pt"
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    tmp = ckdir / (LATEST + ".tmp")
    tmp.write_text(path.name)
    os.replace(tmp, ckdir / LATEST)
    old = sorted(ckdir.glob("step_*.pt"))[:-keep] if keep > 0 else []
    for p in old:
        p.unlink(missing_ok=True)
    return path


def latest_state(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint ``LATEST`` names, or ``None``."""
    ptr = Path(run_dir) / "checkpoints" / LATEST
    if not ptr.is_file():
        return None
    path = ptr.parent / ptr.read_text().strip()
    return path if path.is_file() else None


def load_state(path: str | os.PathLike, map_location="cpu") -> dict:
    """Load a training-state file (our own files: ``weights_only=False`` for numpy RNG state)."""
    return torch.load(path, map_location=map_location, weights_only=False)


def export(source, out_dir: str | os.PathLike, *, which: str = "teacher", dtype=torch.float32) -> Path:
    """Write the inference checkpoint (:func:`biomjepa.model.save_checkpoint`) of a run.

    Parameters
    ----------
    source
        A run directory (its latest state), a state file, or a loaded state dict.
    out_dir
        Checkpoint directory to create; loadable by :func:`biomjepa.model.load_checkpoint` and
        ``bj.tl.embed(adata, checkpoint=out_dir)``.
    which
        ``"teacher"`` (EMA encoder, default: the usual JEPA choice) or ``"student"``; recorded in
        the provenance together with the step, the training config and the corpus.
    """
    from ..model import save_checkpoint
    from ..nn.config import ModelConfig
    from ..nn.encoder import Encoder

    if which not in ("teacher", "student"):
        raise ValueError(f"which must be 'teacher' or 'student', got {which!r}.")
    state = source
    if not isinstance(source, dict):
        p = Path(source)
        path = latest_state(p) if p.is_dir() else p
        if path is None:
            raise FileNotFoundError(f"No training checkpoint under {p}; train first (`python -m biomjepa.train`).")
        state = load_state(path)
    encoder = Encoder(ModelConfig.from_dict(state["model_config"]))
    if which == "teacher":
        weights = state["teacher"]
    else:
        weights = {k[len("student."):]: v for k, v in state["model"].items() if k.startswith("student.")}
    encoder.load_state_dict(weights)
    prov = {
        "source": "biomjepa.train",
        "encoder": which,
        "step": int(state["step"]),
        "objective": state["config"].get("objective"),
        "config": state["config"],
        "corpus": state.get("corpus", {}),
    }
    return save_checkpoint(encoder, out_dir, provenance=prov, dtype=dtype)
