"""The sections of a :class:`~biomjepa.train.TrainConfig`, one frozen dataclass each.

Each part of the training code takes only the section it needs: the block sampler ``blocks``, the
loss ``loss`` and ``teacher``, the optimiser ``optim``, the loop ``loop``. :data:`FLAT` maps every key's
flat name (the names of configs and training states written before the sections, still what a state
saves) to ``(section, field)``.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Literal

Objective = Literal["block", "token", "random_block", "decoder"]


@dataclass(frozen=True)
class RunSection:
    """Where the run lives and how long it trains."""

    out_dir: str = "runs"
    run_name: str | None = None
    seed: int = 42
    steps: int = 20_000
    stop_at: int | None = None  # end this invocation (checkpointed) after this step; resume later


@dataclass(frozen=True)
class DataSection:
    """The corpus and how its cells are batched.

    Per-cell token budgets (our addition; None = every observed gene, the paper): the teacher's view of a
    cell keeps at most ``teacher_genes`` genes (blocks and context are drawn inside it), the student's
    context at most ``context_genes`` (docs/pretraining_notes.md, "cheap steps").

    ``thin_student`` (our addition; None = off): depth-thinned student views. The teacher sees the cell as
    measured; the student sees the same cell with its counts binomially thinned to a fraction ``f`` drawn per
    cell uniformly from ``[thin_student, 1]`` (genes thinned to zero leave the student's context), so the
    encoder is trained to give a shallow cell the representation of its deep self.
    """

    corpus: Any = None  # list of files / shard specs (dicts), a glob, or a prepared cache directory
    cache_dir: str | None = None
    batch_size: int = 8  # per rank
    accumulation: int = 8
    num_workers: int = 0  # loader processes; more than this process' CPU cores is refused before the run
    sort_pool: int = 64
    teacher_genes: int | None = None
    context_genes: int | None = None
    thin_student: float | None = None
    batching: Literal["shard", "source", "mixed"] = "shard"  # biomjepa.data.sampling.BATCHINGS
    balance: float = 1.0  # source weight ∝ n_s ** balance (1: every cell equally often, 0: every source)


@dataclass(frozen=True)
class BlocksSection:
    """The gene graph and the target blocks (paper: K = 4, 2,000–8,000 genes, safeguard 512, 64-NN DMT)."""

    graph: str | None = None
    n_targets: int = 4
    min_block: int = 2000
    max_block: int = 8000
    min_context: int = 512
    dmt_k: int = 64
    random_ratio: tuple[float, float] | None = (0.104, 0.415)

    def __post_init__(self) -> None:
        if self.random_ratio is not None:
            object.__setattr__(self, "random_ratio", tuple(float(x) for x in self.random_ratio))


@dataclass(frozen=True)
class ModelSection:
    """The encoder (``preset`` + ``overrides`` of its ModelConfig), its start, the predictor.

    ``init_from`` (None: a fresh encoder) starts the student and the teacher from a checkpoint's encoder: a
    registry name (``biomjepa-mini``), a checkpoint directory, or ``URL#sha256=…``, verified as ``bj.tl.embed``
    verifies it; ``preset`` + ``overrides`` must build the same encoder. ``gene_init`` then says what happens to
    the checkpoint's gene embeddings: ``checkpoint`` keeps them, ``pca`` replaces them with this corpus's PCA
    loadings; ``random`` (which would throw them away) is refused, as is ``checkpoint`` without ``init_from``.
    The predictor starts fresh (its gene queries from the encoder's gene embeddings).
    """

    preset: str = "base"
    overrides: dict = field(default_factory=dict)
    # pca: loadings of the corpus' leading PCs; pca_unit: the same directions, every gene at one norm (issue 69)
    gene_init: Literal["random", "pca", "pca_unit", "checkpoint"] = "random"
    gene_init_scale: float = 0.02
    init_from: str | None = None
    pred_layers: int = 4
    pred_heads: int = 12
    pred_dropout: float = 0.05
    pred_width: int | None = None
    tau: float = 0.1

    def __post_init__(self) -> None:
        if self.init_from is not None and self.gene_init == "random":
            raise ValueError(
                f"model.init_from={self.init_from!r} loads the checkpoint's gene embeddings, and model.gene_init='random' "
                "would replace them with random ones. Set model.gene_init: checkpoint (keep them) or pca (start them "
                "again from this corpus's principal components)."
            )
        if self.init_from is None and self.gene_init == "checkpoint":
            raise ValueError("model.gene_init='checkpoint' keeps the gene embeddings of model.init_from, which is not "
                             "set; set model.init_from, or gene_init: random / pca.")


@dataclass(frozen=True)
class LossSection:
    """The objective and the weights of its terms."""

    objective: Objective = "block"
    lambda_align: float = 1.0
    lambda_cos: float = 0.0
    lambda_var: float = 0.05
    lambda_cov: float = 0.01
    var_gamma: float = 1.0
    lambda_embed_var: float = 0.0  # VICReg variance hinge on the student's pooled cell embedding
    lambda_embed_cov: float = 0.0  # VICReg covariance penalty on the student's pooled cell embedding
    token_cap: int = 64
    lambda_state_var: float = 0.0  # VICReg variance hinge on the student's per-cell mean token state, over cells
    lambda_state_cov: float = 0.0  # VICReg covariance penalty on the same
    state_gamma: float = 0.1  # target s.d. of that hinge (token states' cell-to-cell s.d. is ≈ 0.05 at init)
    lambda_nce: float = 0.0  # cell-level InfoNCE: each cell's predictions must pick its own targets in the batch
    lambda_view_nce: float = 0.0  # InfoNCE: the student's mean context state must pick its cell's teacher mean state
    nce_temperature: float = 0.1  # temperature of both InfoNCE terms

    def __post_init__(self) -> None:
        if self.objective not in typing.get_args(Objective):
            raise ValueError(f"objective must be one of {typing.get_args(Objective)}, got {self.objective!r}.")


@dataclass(frozen=True)
class TeacherSection:
    """The EMA teacher and how its block states become targets (centring; see :mod:`~biomjepa.train.targets`)."""

    momentum_start: float = 0.996
    momentum_end: float = 0.9997
    momentum_schedule: Literal["cosine", "linear"] = "cosine"
    centre_rate: float = 0.9
    target_centre: Literal["global", "gene"] = "global"  # gene: per-gene EMA centre of teacher states
    target_norm: bool = False  # layer-normalize teacher token states before block means (I-JEPA)
    cell_centre: bool = False  # also subtract each cell's mean (gene-centred) target-token state
    target_scale: bool = False  # measured, not adopted: divide centred block targets by their batch RMS
    cell_centre_depth: bool = False  # measured, not adopted: subtract only the depth-predicted cell level
    depth_residual: bool = False  # remove the cell level's part predicted by whole-cell depth (running fit)
    target_std: bool = False  # divide targets by their running per-dimension s.d. (scale cannot shrink away)


@dataclass(frozen=True)
class OptimSection:
    """AdamW and the learning-rate schedule (linear warm-up, cosine decay to ``min_lr``)."""

    lr: float = 1e-4
    min_lr: float = 1e-6
    warmup_steps: int = 1000
    weight_decay: float = 0.05
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0


@dataclass(frozen=True)
class LoopSection:
    """Where the loop runs, when it checkpoints, what it logs, and what a resume may change."""

    device: str = "auto"
    precision: Literal["fp32", "bf16", "auto"] = "auto"  # bf16 autocast where the device multiplies bf16 natively
    bf16: bool | None = None  # superseded by precision (configs before it): false = precision fp32, true = precision
    checkpoint_every: int = 1000
    keep_checkpoints: int = 2
    max_bad_steps: int = 10
    log_every: int = 1
    tensorboard: bool = True
    progress: bool = True
    log_cell_ids: bool = False
    allow_resume_mismatch: bool = False  # resume a state saved with another corpus/model config (logged)

    def __post_init__(self) -> None:
        from .._settings import check_precision

        object.__setattr__(self, "precision", check_precision(self.precision, "loop.precision"))
        if self.bf16 is False and self.precision == "bf16":  # false means fp32; true defers to precision
            raise ValueError(f"loop.bf16={str(self.bf16).lower()} contradicts loop.precision={self.precision!r}; "
                             "loop.bf16 is the older key: delete it and keep loop.precision.")

    @property
    def amp(self) -> str:
        """The precision the training step asks for (:func:`biomjepa._device.resolve_precision` decides on the
        device): ``precision``, or ``"fp32"`` where an older config says ``bf16: false``."""
        return "fp32" if self.bf16 is False else self.precision


@dataclass(frozen=True)
class ProbeSection:
    """Held-out cells scored at every checkpoint (probe.csv): an h5ad path, an obs-name file, a label column.

    ``encoder``: which network the probe embeds with, the EMA ``teacher`` (what :func:`~biomjepa.train.export`
    writes by default) or the ``student`` (the one to export when the teacher is anchored, momentum 1).
    """

    path: str | None = None
    obs: str | None = None
    label_key: str | None = None
    cells: int = 512
    encoder: Literal["teacher", "student"] = "teacher"


SECTIONS = {
    "run": RunSection, "data": DataSection, "blocks": BlocksSection, "model": ModelSection, "loss": LossSection,
    "teacher": TeacherSection, "optim": OptimSection, "loop": LoopSection, "probe": ProbeSection,
}
#: flat names whose field is called otherwise inside its section
_RENAMED = {"model": ("model", "preset"), "model_overrides": ("model", "overrides"), "probe": ("probe", "path"),
            "probe_obs": ("probe", "obs"), "probe_label_key": ("probe", "label_key"), "probe_cells": ("probe", "cells"),
            "probe_encoder": ("probe", "encoder")}


def _flat_names() -> dict[str, tuple[str, str]]:
    from dataclasses import fields

    back = {v: k for k, v in _RENAMED.items()}
    out = {}
    for section, kind in SECTIONS.items():
        for f in fields(kind):
            out[back.get((section, f.name), f.name)] = (section, f.name)
    return out


#: flat key → (section, field), in section order
FLAT: dict[str, tuple[str, str]] = _flat_names()
