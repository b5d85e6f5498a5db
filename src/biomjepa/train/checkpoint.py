"""Training-state checkpoints (atomic, resumable, loaded without pickle code) and export of the inference checkpoint.

A state file ``run_dir/checkpoints/step_XXXXXXXX.pt`` holds student + predictor (``model``),
``teacher``, ``optimizer``, ``step``, ``consumed`` micro-batches, ``centre``, ``bad_steps``, RNG
states (torch, CUDA, numpy, python) and the config. It is written to a temporary file (a random
name, created exclusively: :func:`biomjepa._files.atomic_path`) and renamed, then ``LATEST`` (a text file naming it) is replaced the same way,
so a crash never leaves a torn checkpoint. Rank 0 writes; the state is identical across ranks (DDP
+ all-reduced centre).

Everything in a state is a tensor, a number, a string or a list/tuple/dict of those, so
:func:`load_state` reads it with ``torch.load(weights_only=True)``: a crafted ``step_*.pt`` cannot
run code. :func:`resume_mismatch` names what differs between a saved state and a new config;
:func:`config_changes` lists the training settings a resumed run changes (recorded in the state's
``config_changes``, :mod:`biomjepa.train.resume`). States written before either was added load the same.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import warnings
from pathlib import Path

import numpy as np
import torch

from .._files import atomic_dir, atomic_path, no_space_error, write_text_atomic

logger = logging.getLogger(__name__)
LATEST = "LATEST"
#: TrainConfig keys a resumed run must share with its saved state (besides the encoder's ModelConfig
#: and the prepared corpus): what is trained, on what, and the shapes of the saved tensors.
RESUME_KEYS = ("corpus", "objective", "pred_layers", "pred_heads", "pred_width", "target_centre", "cell_centre",
               "cell_centre_depth", "depth_residual", "target_std", "target_scale", "teacher_genes", "context_genes",
               "thin_student", "init_from")


def rng_state() -> dict:
    """The global RNG states as tensors and plain containers (loadable with ``weights_only=True``)."""
    _, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(gauss)},
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore :func:`rng_state` (also the numpy tuple of states written before biomjepa 0.2)."""
    torch.set_rng_state(torch.as_tensor(state["torch"]).cpu())  # a state loaded onto CUDA works too
    np.random.set_state(_numpy_state(state["numpy"]))
    random.setstate(tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.as_tensor(s).cpu() for s in state["cuda"]])


def _numpy_state(saved) -> tuple:
    if isinstance(saved, dict):
        keys = np.asarray(torch.as_tensor(saved["keys"]).cpu().numpy(), dtype=np.uint32)
        return "MT19937", keys, int(saved["pos"]), int(saved["has_gauss"]), float(saved["cached_gaussian"])
    return tuple(saved)  # pre-0.2: ("MT19937", uint32 ndarray, pos, has_gauss, cached_gaussian)


def save_state(run_dir: str | os.PathLike, state: dict, *, keep: int = 2) -> Path:
    """Atomically write ``state`` (must hold ``step``) and point ``LATEST`` at it; keep the last ``keep``."""
    ckdir = Path(run_dir) / "checkpoints"
    ckdir.mkdir(parents=True, exist_ok=True)
    path = ckdir / f"step_{int(state['step']):08d}.pt"
    try:
        with atomic_path(path) as tmp:
            _write_state(state, tmp)
        write_text_atomic(ckdir / LATEST, path.name)
    except OSError as err:
        full = no_space_error(err, ckdir, what=f"the training state of step {state['step']}", fix=_resume_fix(run_dir, keep))
        if full is None:
            raise
        raise full from err
    old = sorted(ckdir.glob("step_*.pt"))[:-keep] if keep > 0 else []
    for p in old:
        p.unlink(missing_ok=True)
    return path


def _write_state(state: dict, tmp: Path) -> None:
    """``torch.save`` into an open file: a write error is the ``OSError`` itself (ENOSPC for a full disk),
    where torch given a path reports ``[enforce fail at inline_container.cc] unexpected pos``."""
    with open(tmp, "wb") as f:
        torch.save(state, f)


def _resume_fix(run_dir, keep: int) -> str:
    """What to do after a state could not be written: which state is intact, and how to go on."""
    previous = latest_state(run_dir)
    kept = f"{previous.name} is intact" if previous is not None else "No earlier state was saved"
    kept_there = f"its last {keep} states: lower keep_checkpoints" if keep > 0 else "every state: set keep_checkpoints"
    return (f"{kept} (a partly written state is never kept). Free space on that disk (the run keeps {kept_there}), "
            f"or move {Path(run_dir)} to a larger disk and point out_dir there; then run the same command again to "
            "resume.")


def latest_state(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint ``LATEST`` names, or ``None``."""
    ptr = Path(run_dir) / "checkpoints" / LATEST
    if not ptr.is_file():
        return None
    path = ptr.parent / ptr.read_text().strip()
    return path if path.is_file() else None


def load_latest_state(run_dir: str | os.PathLike, map_location="cpu") -> tuple[Path, dict] | None:
    """``(path, state)`` of the newest intact state of ``run_dir``, or ``None`` when it has none.

    The state ``LATEST`` names is tried first, then every other ``step_*.pt``, newest first. A
    file that cannot be read (truncated by a full disk or a killed copy) is skipped with a warning
    naming it; a file holding foreign Python objects is refused (:func:`load_state`).

    Raises
    ------
    ValueError
        State files exist but none can be read.
    """
    ckdir = Path(run_dir) / "checkpoints"
    first = latest_state(run_dir)
    candidates = ([first] if first else []) + sorted((p for p in ckdir.glob("step_*.pt") if p != first), reverse=True)
    bad = []
    for path in candidates:
        try:
            state = load_state(path, map_location=map_location)
        except ValueError:
            raise
        except Exception as err:  # torch/zipfile/pickle raise many types for a damaged file
            bad.append(f"{path.name} ({type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''})")
            continue
        if not isinstance(state, dict) or "step" not in state:
            bad.append(f"{path.name} (not a training state)")
            continue
        if bad:
            warnings.warn(
                f"Training state {bad[0]} in {ckdir} is damaged or truncated; resuming from the previous intact "
                f"one, {path.name} (step {state['step']}). Damaged: {'; '.join(bad)}.",
                UserWarning,
                stacklevel=2,
            )
        return path, state
    if bad:
        raise ValueError(
            f"No training state in {ckdir} can be read; all are damaged or truncated: {'; '.join(bad)}. Delete the "
            "damaged files to start the run from step 0, or train into a new `run_name`/`out_dir`."
        )
    return None


def _numpy_rng_globals() -> list:
    """Exactly what pickling a numpy ``uint32`` array needs (``np.random.get_state()`` before 0.2)."""
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct
    return [_reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load_state(path: str | os.PathLike, map_location="cpu") -> dict:
    """Load a training-state file with ``torch.load(weights_only=True)``; never runs pickled code.

    States written before biomjepa 0.2 hold the numpy RNG state as a ``uint32`` array; for those
    (and only when the plain load fails) the load is retried, still with ``weights_only=True``,
    with numpy's array-reconstruction globals allowed (:func:`torch.serialization.safe_globals`),
    and the state is converted to the current form.

    Raises
    ------
    ValueError
        The file holds other Python objects (not a state written by :func:`save_state`).
    """
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        if "numpy" not in str(err) or not hasattr(torch.serialization, "safe_globals"):
            raise _unsafe(path, err) from None
        try:
            with torch.serialization.safe_globals(_numpy_rng_globals()):
                state = torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as err2:
            raise _unsafe(path, err2) from None
    rng = state.get("rng") if isinstance(state, dict) else None
    if isinstance(rng, dict) and isinstance(rng.get("numpy"), (tuple, list)):
        _, keys, pos, has_gauss, gauss = rng["numpy"]
        rng["numpy"] = {"keys": torch.as_tensor(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                        "has_gauss": int(has_gauss), "cached_gaussian": float(gauss)}
    return state


def _unsafe(path, err) -> ValueError:
    return ValueError(
        f"{path} is not a biomjepa training state that can be loaded safely: it holds Python objects other "
        f"than tensors, numbers, strings and containers ({str(err).splitlines()[-1][:200]}). It was not written "
        "by biomjepa.train (or was altered); refusing to unpickle it."
    )


def _plain(value):
    """A JSON-normalised copy (tuples → lists, sorted keys) for comparing configs."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def resume_mismatch(
    saved: dict, *, config: dict | None = None, model_config: dict | None = None, corpus_key: str | None = None
) -> list[str]:
    """``"key: saved → new"`` for each setting in which a new run differs from the ``saved`` state.

    Each of the encoder's ``model_config`` (reported as ``model.KEY``), the :data:`RESUME_KEYS` of
    the training ``config`` and the prepared ``corpus_key`` is compared when given.
    """
    return [m["text"] for m in mismatches(saved, config=config, model_config=model_config, corpus_key=corpus_key)]


def mismatches(
    saved: dict, *, config: dict | None = None, model_config: dict | None = None, corpus_key: str | None = None
) -> list[dict]:
    """``{key, old, new, text}`` of every difference :func:`resume_mismatch` reports."""
    from ..nn.config import ModelConfig

    out = []
    if model_config is not None and "model_config" in saved:
        old_mc = ModelConfig.from_dict(saved.get("model_config", {})).to_dict()  # older states: defaults filled in
        for k in sorted(set(old_mc) | set(model_config)):
            if _plain(old_mc.get(k)) != _plain(model_config.get(k)):
                text = f"model.{k}: {old_mc.get(k)!r} → {model_config.get(k)!r}"
                out.append(_mismatch(f"model.{k}", old_mc.get(k), model_config.get(k), text))
    old = saved.get("config", {})
    for k in RESUME_KEYS if config is not None else ():
        if k in old and _plain(old[k]) != _plain(config.get(k)):
            out.append(_mismatch(k, old[k], config.get(k), f"{k}: {_short(old[k])} → {_short(config.get(k))}"))
    old_key = saved.get("corpus", {}).get("key")
    if corpus_key is not None and old_key is not None and old_key != corpus_key:
        out.append(_mismatch("corpus key", old_key, corpus_key, f"corpus key (prepared shards): {old_key} → {corpus_key}"))
    return out


def _mismatch(key: str, old, new, text: str) -> dict:
    return {"key": key, "old": _plain(old), "new": _plain(new), "text": text}


#: TrainConfig keys that steer one invocation (where it runs, logs and checkpoints, when it stops),
#: not what is trained: resuming with other values is not a change of the run.
RUN_KEYS = ("out_dir", "run_name", "stop_at", "cache_dir", "device", "checkpoint_every", "keep_checkpoints",
            "max_bad_steps", "log_every", "tensorboard", "progress", "log_cell_ids", "allow_resume_mismatch",
            "probe", "probe_obs", "probe_label_key", "probe_cells", "probe_encoder")
#: Keys that decide which cells the next steps see (the data stream is a function of them and of
#: the step): a resumed run with other values is refused unless ``allow_resume_mismatch``.
DATA_ORDER_KEYS = ("seed", "batch_size", "accumulation", "num_workers", "sort_pool")


def config_changes(saved: dict, config: dict, *, step: int) -> list[dict]:
    """``{step, key, old, new}`` for each training setting (lr, schedules, loss weights, seed, ...) a resumed run changes.

    Keys the saved config lacks (added since it was written) are not changes; nor are the
    :data:`RUN_KEYS`, nor the :data:`RESUME_KEYS` and the encoder config (which
    :func:`resume_mismatch` compares). Values are JSON-normalised, so a state holding them still
    loads with ``weights_only=True``.
    """
    old = saved.get("config", {})
    skip = {*RUN_KEYS, *RESUME_KEYS, "model", "model_overrides"}
    out = []
    for k, new in config.items():
        if k in skip or k not in old or _plain(old[k]) == _plain(new):
            continue
        out.append({"step": int(step), "key": k, "old": _plain(old[k]), "new": _plain(new)})
    return out


def describe_change(change: dict) -> str:
    """``"step 250: lr 0.001 → 0.0005"``."""
    return f"step {change['step']}: {change['key']} {_short(change['old'])} → {_short(change['new'])}"


def _short(value, n: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 1] + "…"


#: The files of an inference checkpoint directory: ``export(..., overwrite=True)`` replaces only a
#: directory holding nothing else.
CHECKPOINT_FILES = ("config.json", "model.safetensors", "SHA256SUMS")


def check_export_dir(out_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """``out_dir`` as a Path, or an error when :func:`export` may not write there.

    Refused: a file; an existing, non-empty directory unless ``overwrite``; and, even with
    ``overwrite``, a directory holding anything but a checkpoint's files (it would be deleted).
    """
    p = Path(out_dir)
    if p.exists() and not p.is_dir():
        raise FileExistsError(f"export: {p} exists and is not a directory; give a new directory for the checkpoint.")
    names = sorted(c.name for c in p.iterdir()) if p.is_dir() else []
    if not names:
        return p
    if not overwrite:
        raise FileExistsError(
            f"export: {p} already exists ({', '.join(names[:5])}{', …' if len(names) > 5 else ''}) and export never "
            "replaces a checkpoint silently. Pass overwrite=True to "
            "replace it, or give another directory."
        )
    foreign = [n for n in names if n not in CHECKPOINT_FILES and not n.endswith(".tmp")]  # + a crash's temporaries
    if foreign:
        raise FileExistsError(
            f"export: {p} holds files that are not part of a checkpoint ({', '.join(foreign[:5])}), so "
            "overwrite=True would delete them; give another directory, or empty it yourself."
        )
    return p


def encoder_weights(state: dict, which: str = "teacher") -> dict:
    """The ``"teacher"``'s (EMA) or the ``"student"``'s encoder weights of a loaded training state."""
    if which == "teacher":
        return state["teacher"]
    return {k[len("student."):]: v for k, v in state["model"].items() if k.startswith("student.")}


def export(
    source, out_dir: str | os.PathLike, *, which: str = "teacher", dtype=torch.float32, pooling: str | None = None,
    readout: dict | None = None, overwrite: bool = False, provenance: dict | None = None,
) -> Path:
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
    dtype
        Storage dtype of the weights (loading always restores float32).
    pooling
        Readout recorded in the checkpoint (:data:`biomjepa.nn.pooling.POOLINGS`); default: the
        run's model config (``max_top5``, the paper's, unless overridden).
    readout
        Fixed feature statistics to record (:func:`biomjepa.nn.readout.readout_entry`, measured on
        the training corpus, e.g. by ``scripts/export_bundled.py --feature-cells``); the checkpoint
        then returns standardized embeddings.
    overwrite
        Replace ``out_dir`` when it already holds a checkpoint (the new one is written beside it
        and swapped in once complete). Without it, an existing non-empty ``out_dir`` is refused.
    provenance
        More entries for the checkpoint's provenance (``bj.tl.adapt`` records its recipe there).

    The provenance always names the base checkpoint of a run started with ``model.init_from``
    (``init_from``: reference, name, ``checkpoint_sha256``, ``weights_sha256``; ``None`` for a fresh encoder).
    """
    from dataclasses import replace

    from ..model import save_checkpoint
    from ..nn.config import ModelConfig
    from ..nn.encoder import Encoder

    if which not in ("teacher", "student"):
        raise ValueError(f"which must be 'teacher' or 'student', got {which!r}.")
    out_dir = check_export_dir(out_dir, overwrite=overwrite)
    state = source
    if not isinstance(source, dict):
        p = Path(source)
        path = latest_state(p) if p.is_dir() else p
        if path is None:
            raise FileNotFoundError(f"No training checkpoint under {p}; train first (`python -m biomjepa.train`).")
        state = load_state(path)
    mc = ModelConfig.from_dict(state["model_config"])
    encoder = Encoder(mc if pooling is None else replace(mc, pooling=pooling))
    encoder.load_state_dict(encoder_weights(state, which))
    prov = {
        "source": "biomjepa.train",
        "encoder": which,
        "step": int(state["step"]),
        "objective": state["config"].get("objective"),
        "config": state["config"],
        "corpus": state.get("corpus", {}),
        "init_from": state.get("init_from"),
        **(provenance or {}),
    }
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return save_checkpoint(encoder, out_dir, provenance=prov, dtype=dtype, readout=readout)
    with atomic_dir(out_dir) as tmp:
        save_checkpoint(encoder, tmp, provenance=prov, dtype=dtype, readout=readout)
    return out_dir
