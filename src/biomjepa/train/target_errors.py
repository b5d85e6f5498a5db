"""Teacher-target prediction errors of a programme block, from a full training state.

The training side of :func:`biomjepa.tl.programme_dependencies`, behind one public function,
:func:`programme_errors` (the only name ``tl`` imports from ``train``; a structure test checks
it): it rebuilds the student, predictor and teacher with the training code
(:class:`~biomjepa.train.jepa.JEPA`, :func:`~biomjepa.train.ema.make_teacher`), runs a programme
as the single target block of each cell through the training collation
(:func:`~biomjepa.train.inputs.build_inputs`), so every model step is the one used in
pretraining, and returns plain arrays. No AnnData here.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

STATE_KEYS = ("model", "teacher", "centre", "config", "model_config", "step")

__all__ = ["programme_errors"]


def programme_errors(
    checkpoint: str | os.PathLike | dict,
    jobs: Iterable[tuple[Any, np.ndarray, int, list[np.ndarray]]],
    *,
    graph=None,
    device="cpu",
    batch_size: int = 64,
    max_tokens: int | None = None,
) -> tuple[list[np.ndarray], dict]:
    """Teacher-target errors ``ε = ‖t̂ − t‖²`` of programme blocks under context removals.

    Parameters
    ----------
    checkpoint
        A full training state: run directory, ``checkpoints/step_*.pt`` file or loaded state dict.
        Inference exports and ``decoder`` runs are refused with an error saying why.
    jobs
        ``(cells, target, block_id, removals)`` per target programme:
        :class:`~biomjepa.data.tokenize.TokenizedCells` (each cell expressing ≥ 1 gene of
        ``target``), the programme's vocabulary ids, its block query id and the vocabulary-id arrays
        removed from the student context (an empty array: no ablation). Consumed after the
        training state is loaded and checked.
    graph
        Gene graph for the DMT neighbourhoods (a ``GeneGraph`` or its saved directory); default:
        the run's.
    device
        Torch device.
    batch_size, max_tokens
        Cells per forward pass, and the cap on ``cells × longest cell`` tokens of one batch.

    Returns
    -------
    ``(errors, info)``: one float64 ``[len(removals), n_cells]`` array per job, and
    ``{"source", "step", "objective"}`` of the training state.
    """
    mods = load_training_modules(checkpoint, graph=graph, device=device)
    errors = [
        target_errors(mods, cells, target, block_id, removals, batch_size=batch_size, device=device,
                      max_tokens=max_tokens)
        for cells, target, block_id, removals in jobs
    ]
    return errors, {"source": mods.source, "step": mods.step, "objective": mods.objective}


@dataclass
class TrainingModules:
    """Student + predictor (``jepa``), ``teacher``, EMA ``centre`` (``[D]``, or ``[V, D]`` per gene) and the DMT table of a run.

    ``coexp`` is the coexpression neighbour table truncated to the run's ``dmt_k`` (``None`` for
    ``random_block`` runs, whose pooling always uses the whole context).
    """

    jepa: Any
    teacher: Any
    centre: Any
    coexp: Any
    objective: str
    step: int
    source: str
    target_norm: bool = False


def load_training_modules(checkpoint: str | os.PathLike | dict, *, graph=None, device="cpu") -> TrainingModules:
    """Rebuild the modules of a training state (run directory, ``step_*.pt`` file or loaded dict).

    ``graph``: a :class:`~biomjepa.data.graph.GeneGraph`, a directory saved by ``GeneGraph.save``
    or ``None`` (the run's ``graph`` setting, else its corpus cache ``graph/``).
    """
    import torch

    from .config import TrainConfig
    from .ema import make_teacher
    from .jepa import JEPA

    state, source, run_dir = _read_state(checkpoint)
    cfg = TrainConfig.from_flat(state["config"])
    if cfg.loss.objective == "decoder":
        raise ValueError(
            "This training state is a `decoder` control run: its predictor was never trained to predict "
            "teacher states, so teacher-target errors are undefined. Use a `block` (BioM-JEPA) run."
        )
    if cfg.loss.objective == "token":
        warnings.warn("Token-IJEPA run: its predictor was trained with gene queries, not block ids; "
                      "errors use the programme's block id as query.", stacklevel=3)
    cfg = cfg.replace(model_overrides=dict(state["model_config"]))  # the stored encoder config wins
    jepa = JEPA.from_train_config(cfg)
    jepa.load_state_dict(state["model"])
    teacher = make_teacher(jepa.student)
    teacher.load_state_dict(state["teacher"])
    coexp = None
    if cfg.loss.objective != "random_block":
        coexp = _open_graph(graph, cfg, run_dir).coexp_topk(cfg.blocks.dmt_k)
    centre = torch.as_tensor(state["centre"], dtype=torch.float32)
    return TrainingModules(jepa.to(device).eval(), teacher.to(device).eval(), centre.to(device), coexp,
                           cfg.loss.objective, int(state["step"]), source, cfg.teacher.target_norm)


def _read_state(checkpoint) -> tuple[dict, str, Path | None]:
    """``(state, display name, run directory or None)``; clear errors for inference exports."""
    from .checkpoint import latest_state, load_state

    if isinstance(checkpoint, dict):
        state, source, run_dir = checkpoint, "state dict", None
    else:
        p = Path(checkpoint).expanduser()
        fix = ("pass the training run directory (holding checkpoints/LATEST) or one of its "
               "checkpoints/step_*.pt files, as written by `python -m biomjepa.train`.")
        if (p / "model.safetensors").is_file() or p.suffix == ".safetensors" or p.name == "config.json":
            raise ValueError(
                f"{p} is an inference export (config.json + model.safetensors): it holds the encoder only, but "
                f"programme_dependencies needs the student, predictor and teacher of a full training state; {fix}"
            )
        path = latest_state(p.parent if p.name == "checkpoints" else p) if p.is_dir() else p
        if path is None or not path.is_file():
            raise FileNotFoundError(f"No training state at {p}; {fix}")
        state, source, run_dir = load_state(path), str(path), path.parent.parent
    missing = [k for k in STATE_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"{source} is not a full training state (missing {missing}); expected the dict saved by "
                         "biomjepa.train.checkpoint.save_state.")
    return state, source, run_dir


def _open_graph(graph, cfg, run_dir: Path | None):
    """The run's gene graph: ``graph`` if given, else ``cfg.graph``, else the corpus cache's ``graph/``."""
    from ..data.graph import GRAPH_DIR, find_graph
    from .setup import run_dir_of

    search = []
    if graph is None:
        data = cfg.data
        search = [Path(cfg.blocks.graph)] if cfg.blocks.graph else []
        if isinstance(data.corpus, str):
            search.append(Path(data.corpus) / GRAPH_DIR)
        if data.cache_dir:
            search.append(Path(data.cache_dir) / GRAPH_DIR)
        search += [d / "corpus" / GRAPH_DIR for d in (run_dir, run_dir_of(cfg)) if d is not None]
    return find_graph(graph, search=search, need="The run's gene graph is needed for the DMT neighbourhoods")


def target_errors(
    mods: TrainingModules,
    cells,
    target: np.ndarray,
    block_id: int,
    removals: list[np.ndarray],
    *,
    batch_size: int,
    device,
    max_tokens: int | None = None,
) -> np.ndarray:
    """``ε = ‖t̂ − t‖²`` of target programme ``target`` for every cell, under every context removal.

    Parameters
    ----------
    mods
        :class:`TrainingModules`.
    cells
        :class:`~biomjepa.data.tokenize.TokenizedCells`; each should express ≥ 1 gene of ``target``.
    target
        Vocabulary ids of the programme; ``T = target ∩ observed`` is the cell's single target block.
    block_id
        The block's query id ``c``.
    removals
        Vocabulary id arrays removed from the student context (an empty array: no ablation).

    Returns
    -------
    float64 ``[len(removals), n]``; the teacher target ``t`` (centred) is the same for every removal.
    """
    import torch

    from ..nn.inference import map_cells
    from .inputs import build_inputs
    from .targets import centred_targets

    device = torch.device(device)
    V = mods.jepa.config.vocab_size
    near = np.zeros(V, bool)
    if mods.coexp is not None:
        near[mods.coexp.neighbours(int(block_id))] = True
    if len(removals) == 0:
        return np.empty((0, len(cells)))

    def step(sub):  # [B, len(removals)] float64 for one length-sorted batch of cells
        in_t = np.isin(sub.genes, target)
        t, errors = None, []
        for genes in removals:
            sample = block_sample(sub, in_t, ~in_t & ~np.isin(sub.genes, genes), int(block_id), near, len(target))
            inputs = build_inputs(sub, sample, V, objective="block").to(device)
            if t is None:
                t = centred_targets(mods.teacher, inputs, 1, mods.centre, norm=mods.target_norm)[0]
            pred = mods.jepa(inputs)[:, 0].float()
            errors.append((pred - t).pow(2).sum(-1).double())
        return torch.stack(errors, dim=1)

    (out,) = map_cells(cells, step, (np.empty((len(cells), len(removals))),), batch_size=batch_size, device=device,
                       max_tokens=max_tokens)
    return np.ascontiguousarray(out.T)


def block_sample(cells, in_t: np.ndarray, context: np.ndarray, block_id: int, near: np.ndarray, n_candidates: int):
    """A one-target :class:`~biomjepa.train.blocks.BlockSample`: target positions ``in_t``, ``context``.

    DMT candidates are the context genes in ``near`` (``N^coexp(c)``), all context where none is.
    """
    from .blocks import BlockSample

    n, lengths = len(cells), cells.lengths
    owner = np.repeat(np.arange(n), lengths)
    local = np.arange(len(cells.genes)) - np.repeat(cells.indptr[:-1], lengths)
    t_count = np.bincount(owner[in_t], minlength=n)
    sel = context & near[cells.genes]
    d_count = np.bincount(owner[sel], minlength=n)

    def col(v):
        return np.full((n, 1), v, np.int64)

    return BlockSample(
        indptr=cells.indptr, context=context, target_indptr=np.r_[0, np.cumsum(t_count)], target_pos=local[in_t],
        block_id=col(block_id), seed_gene=col(-1), requested=col(n_candidates), candidate_size=col(n_candidates),
        valid=(t_count > 0)[:, None], fallback=np.zeros(n, bool), nominal_context=lengths - t_count,
        dmt_indptr=np.r_[0, np.cumsum(d_count)], dmt_pos=local[sel], dmt_fallback=(d_count == 0)[:, None],
    )
