"""Pretraining configuration: one frozen dataclass, YAML files that reject unknown keys, presets.

Every number the paper fixes is a default here (``base`` = the paper); the ones it leaves open are
our documented choices (AdamW betas (0.9, 0.95), weight decay 0.05, lr 1e-4 with linear warm-up and
cosine decay to ``min_lr``, DMT temperature τ = 0.1, EMA-centre rate 0.9 as in DINO, cosine
momentum ramp). ``python -m biomjepa.train CONFIG.yaml --set key=value`` overrides any key.
"""

from __future__ import annotations

import types
import typing
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

Objective = Literal["block", "token", "random_block", "decoder"]
PRESETS = ("tiny", "mini", "base")
#: Keys that older versions accepted, with why they are gone (a saved ``null`` is dropped silently).
REMOVED_KEYS = {
    "max_genes": "it was never implemented (every observed gene of a cell is always used); delete the key",
}


@dataclass(frozen=True)
class TrainConfig:
    """All settings of a pretraining run (see ``biomjepa/configs/base.yaml`` for the paper's values).

    Groups: run (``out_dir``, ``run_name``, ``seed``, ``steps``); data (``corpus``, ``cache_dir``,
    ``batch_size`` per rank, ``accumulation``, ``num_workers``, ``sort_pool``); graph/blocks
    (``graph``, ``n_targets``, ``min_block``, ``max_block``, ``min_context``, ``dmt_k``,
    ``random_ratio``); model (``model`` preset + ``model_overrides``; predictor ``pred_*``; ``tau``);
    objective and loss (``objective``, ``lambda_*``, ``var_gamma``, ``token_cap``); teacher
    (``momentum_*``, ``centre_rate``); optimisation (``lr`` …, ``grad_clip``); loop
    (``checkpoint_every``, ``max_bad_steps``, logging). A run resumes from its directory's latest
    state only when the corpus, the encoder config and the :data:`~biomjepa.train.checkpoint.RESUME_KEYS`
    match the saved ones; ``allow_resume_mismatch: true`` resumes anyway (the differences are logged).
    """

    # run
    out_dir: str = "runs"
    run_name: str | None = None
    seed: int = 42
    steps: int = 20_000
    stop_at: int | None = None  # end this invocation (checkpointed) after this step; resume later
    # data
    corpus: Any = None  # list of files / shard specs (dicts), a glob, or a prepared cache directory
    cache_dir: str | None = None
    batch_size: int = 8
    accumulation: int = 8
    num_workers: int = 0
    sort_pool: int = 64
    # graph and target blocks (paper: K = 4, 2,000–8,000, safeguard 512, 64-NN DMT)
    graph: str | None = None
    n_targets: int = 4
    min_block: int = 2000
    max_block: int = 8000
    min_context: int = 512
    dmt_k: int = 64
    random_ratio: tuple[float, float] | None = (0.104, 0.415)
    # per-cell token budgets (our addition; None = every observed gene, the paper): the teacher's view
    # of a cell keeps at most ``teacher_genes`` genes (blocks and context are drawn inside it), the
    # student's context at most ``context_genes`` (docs/pretraining_notes.md, "cheap steps")
    teacher_genes: int | None = None
    context_genes: int | None = None
    # model
    model: str = "base"
    model_overrides: dict = field(default_factory=dict)
    gene_init: Literal["random", "pca"] = "random"  # pca: loadings of the corpus' leading PCs
    gene_init_scale: float = 0.02
    pred_layers: int = 4
    pred_heads: int = 12
    pred_dropout: float = 0.05
    pred_width: int | None = None
    tau: float = 0.1
    # objective and loss
    objective: Objective = "block"
    lambda_align: float = 1.0
    lambda_cos: float = 0.0
    lambda_var: float = 0.05
    lambda_cov: float = 0.01
    var_gamma: float = 1.0
    lambda_embed_var: float = 0.0  # VICReg variance hinge on the student's pooled cell embedding
    lambda_embed_cov: float = 0.0  # VICReg covariance penalty on the student's pooled cell embedding
    target_norm: bool = False  # layer-normalize teacher token states before block means (I-JEPA)
    token_cap: int = 64
    # teacher
    momentum_start: float = 0.996
    momentum_end: float = 0.9997
    momentum_schedule: Literal["cosine", "linear"] = "cosine"
    centre_rate: float = 0.9
    target_centre: Literal["global", "gene"] = "global"  # gene: per-gene EMA centre of teacher states
    cell_centre: bool = False  # also subtract each cell's mean (gene-centred) target-token state
    target_scale: bool = False  # divide centred block targets by their batch RMS (unit-scale targets)
    cell_centre_depth: bool = False  # subtract only the depth-predicted part of each cell's target level
    # optimisation
    lr: float = 1e-4
    min_lr: float = 1e-6
    warmup_steps: int = 1000
    weight_decay: float = 0.05
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    # loop
    device: str = "auto"
    bf16: bool = True
    checkpoint_every: int = 1000
    keep_checkpoints: int = 2
    max_bad_steps: int = 10
    log_every: int = 1
    tensorboard: bool = True
    progress: bool = True
    log_cell_ids: bool = False
    allow_resume_mismatch: bool = False  # resume a state saved with another corpus/model config (logged)
    # held-out probe scored at every checkpoint (probe.csv): h5ad path, obs-name file, label column
    probe: str | None = None
    probe_obs: str | None = None
    probe_label_key: str | None = None
    probe_cells: int = 512

    def __post_init__(self) -> None:
        if self.objective not in typing.get_args(Objective):
            raise ValueError(f"objective must be one of {typing.get_args(Objective)}, got {self.objective!r}.")
        for name in ("steps", "batch_size", "accumulation", "n_targets", "pred_layers", "pred_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        _check_ranges(self)
        for name in ("teacher_genes", "context_genes"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 or null (no budget), got {getattr(self, name)}.")
        if self.cell_centre and self.cell_centre_depth:
            raise ValueError("cell_centre and cell_centre_depth exclude each other: the first removes the whole cell level, "
                             "the second only its depth-predicted part; set one of them.")
        if self.cell_centre_depth and self.target_centre != "gene":
            raise ValueError("cell_centre_depth=True needs target_centre='gene' (it centres per-gene-centred token states).")
        if self.cell_centre and self.target_centre != "gene":
            raise ValueError("cell_centre=True needs target_centre='gene' (it centres per-gene-centred token states).")
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}.")
        if self.random_ratio is not None:
            object.__setattr__(self, "random_ratio", tuple(float(x) for x in self.random_ratio))
        from .._settings import check_device

        object.__setattr__(self, "device", check_device(self.device, "device"))

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """Build from a mapping; unknown keys raise (with the list of known ones).

        A ``preset`` key (``tiny``/``mini``/``base``) starts from that preset's values.
        """
        return cls._from_mapping(d, "")

    @classmethod
    def _from_mapping(cls, d: dict, where: str) -> TrainConfig:
        d = dict(d or {})
        base = preset(d.pop("preset")) if "preset" in d else cls()
        for key, why in REMOVED_KEYS.items():
            if key in d and d.pop(key) is not None:
                raise ValueError(f"{where}TrainConfig key {key!r} was removed: {why}.")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"{where}Unknown TrainConfig keys {unknown}; known keys: {sorted(known)}.")
        return replace(base, **{k: _coerce(_field_type(k), v, k, where) for k, v in d.items()})

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        with open(path) as f:
            d = yaml.safe_load(f) or {}
        if not isinstance(d, dict):
            raise ValueError(f"{path} must hold a YAML mapping of TrainConfig keys.")
        return cls._from_mapping(d, f"{path}: ")

    def with_overrides(self, overrides: list[str] | None) -> TrainConfig:
        """Apply ``["key=value", ...]``; values are parsed as YAML and coerced to the key's type."""
        out = {}
        known = {f.name for f in fields(self)}
        for item in overrides or []:
            if "=" not in item:
                raise ValueError(f"--set expects key=value, got {item!r}.")
            key, raw = item.split("=", 1)
            key = key.strip()
            if key in REMOVED_KEYS:
                raise ValueError(f"--set {item}: TrainConfig key {key!r} was removed: {REMOVED_KEYS[key]}.")
            if key not in known:
                raise ValueError(f"Unknown TrainConfig key {key!r} in --set; known keys: {sorted(known)}.")
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError:
                value = raw  # not YAML: a plain string, checked against the key's type below
            out[key] = _coerce(_field_type(key), value, key, "--set ")
        return replace(self, **out)

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["random_ratio"] is not None:
            d["random_ratio"] = list(d["random_ratio"])
        return d

    def to_yaml(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    # ---------------------------------------------------------------- derived
    def model_config(self):
        """The encoder's :class:`~biomjepa.nn.ModelConfig` (preset + overrides)."""
        from ..nn.config import ModelConfig

        return ModelConfig.preset(self.model, **self.model_overrides)

    def block_config(self):
        """The sampler's :class:`~biomjepa.train.blocks.BlockConfig` (random mode for ``random_block``)."""
        from .blocks import BlockConfig

        random = self.objective == "random_block"
        return BlockConfig(
            n_targets=self.n_targets,
            min_block=self.min_block,
            max_block=self.max_block,
            min_context=self.min_context,
            mode="random" if random else "graph",
            dmt_k=self.dmt_k,
            random_ratio=self.random_ratio if random else None,
            max_context=self.context_genes,
        )


#: Range of every number a config may hold: (low, high, low inclusive, high inclusive); None = unbounded.
RANGES: dict[str, tuple] = {
    "seed": (0, None, True, None), "sort_pool": (1, None, True, None), "num_workers": (0, None, True, None),
    "min_block": (1, None, True, None), "max_block": (1, None, True, None), "min_context": (0, None, True, None),
    "dmt_k": (1, None, True, None), "gene_init_scale": (0, None, False, None), "pred_dropout": (0, 1, True, False),
    "pred_width": (1, None, True, None), "tau": (0, None, False, None), "lambda_align": (0, None, True, None),
    "lambda_cos": (0, None, True, None), "lambda_var": (0, None, True, None), "lambda_cov": (0, None, True, None),
    "var_gamma": (0, None, True, None), "lambda_embed_var": (0, None, True, None),
    "lambda_embed_cov": (0, None, True, None), "token_cap": (1, None, True, None),
    "momentum_start": (0, 1, True, True), "momentum_end": (0, 1, True, True), "centre_rate": (0, 1, True, True),
    "lr": (0, None, False, None), "min_lr": (0, None, True, None), "warmup_steps": (0, None, True, None),
    "weight_decay": (0, None, True, None), "beta1": (0, 1, True, False), "beta2": (0, 1, True, False),
    "grad_clip": (0, None, False, None), "checkpoint_every": (1, None, True, None),
    "keep_checkpoints": (1, None, True, None), "max_bad_steps": (1, None, True, None), "log_every": (1, None, True, None),
    "probe_cells": (2, None, True, None), "stop_at": (1, None, True, None),
}


def _check_ranges(cfg: TrainConfig) -> None:
    """Refuse NaN/Inf and out-of-range numbers, naming the key, its value and the allowed range."""
    import math

    for name, (lo, hi, lo_in, hi_in) in RANGES.items():
        v = getattr(cfg, name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"TrainConfig {name}={v!r}: expected a finite number.")
        bad = (lo is not None and (v < lo or (v == lo and not lo_in))) or \
              (hi is not None and (v > hi or (v == hi and not hi_in)))
        if bad:
            left = "unbounded" if lo is None else ("[" if lo_in else "(") + str(lo)
            right = "∞)" if hi is None else str(hi) + ("]" if hi_in else ")")
            raise ValueError(f"TrainConfig {name}={v!r} is out of range; allowed: {left}, {right}.")
    if cfg.min_block > cfg.max_block:
        raise ValueError(f"TrainConfig min_block={cfg.min_block} > max_block={cfg.max_block}; set min_block <= max_block.")
    if cfg.min_lr > cfg.lr:
        raise ValueError(f"TrainConfig min_lr={cfg.min_lr} > lr={cfg.lr}; the cosine schedule decays from lr to min_lr.")


_HINTS: dict | None = None


def _field_type(name: str):
    global _HINTS
    if _HINTS is None:
        _HINTS = typing.get_type_hints(TrainConfig)
    return _HINTS[name]


_BOOLS = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def _coerce(tp, value, key: str, where: str = ""):
    """Check a YAML/--set value against the key's annotated type; never guesses.

    ``int`` refuses 2.9 (2.0 and ``"1e4"`` are fine), ``float`` takes numbers and numeric strings
    (YAML reads ``1e-4`` as a string), ``bool`` only true/false/yes/no/1/0, ``str`` only strings or
    numbers; the error names the key, the value and the expected type.
    """
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if value is None and (tp is Any or type(None) in args):
        return value
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value, key, where) if len(inner) == 1 else value
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{where}{key} must be one of {args}, got {value!r}.")
        return value
    parsed = _parse(tp, origin, value)
    if parsed is _BAD:
        raise ValueError(
            f"{where}{key}={value!r} ({type(value).__name__}): expected {_type_name(tp)}."
        )
    return parsed


_BAD = object()


def _parse(tp, origin, value):
    """``value`` as ``tp``, or ``_BAD``."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower() if isinstance(value, (int, str)) else None
        return _BOOLS.get(text, _BAD)
    if isinstance(value, bool):
        return _BAD  # True is an int in Python; never a number here
    if tp is int or tp is float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return _BAD
        if not isinstance(value, (int, float)):
            return _BAD
        if tp is int:
            return int(value) if float(value).is_integer() else _BAD
        return float(value)
    if tp is str:
        return str(value) if isinstance(value, (str, int, float)) else _BAD
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(typing.get_args(tp)):
            return _BAD
        items = [_parse(float, None, v) for v in value]
        return _BAD if any(v is _BAD for v in items) else tuple(items)
    if tp is dict:
        return dict(value) if isinstance(value, dict) else _BAD
    return value


def _type_name(tp) -> str:
    if tp is int:
        return "an integer (e.g. 8; 2.5 is refused)"
    if tp is float:
        return "a number (e.g. 0.1 or 1e-4)"
    if tp is bool:
        return "a boolean: true/false, yes/no or 1/0"
    if tp is str:
        return "a string"
    if typing.get_origin(tp) is tuple:
        return f"a list of {len(typing.get_args(tp))} numbers, e.g. [0.1, 0.4]"
    if tp is dict:
        return "a mapping, e.g. {n_layers: 2}"
    return str(tp)


def preset(name: str) -> TrainConfig:
    """The bundled preset ``tiny`` (tests), ``mini`` (CPU, shared corpus) or ``base`` (the paper)."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; choose one of {PRESETS}.")
    text = resources.files("biomjepa.configs").joinpath(f"{name}.yaml").read_text()
    return TrainConfig.from_dict(yaml.safe_load(text) or {})


def load_config(config: TrainConfig | dict | str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """A :class:`TrainConfig` from an instance, a dict, a preset name or a YAML path, plus overrides."""
    if isinstance(config, TrainConfig):
        cfg = config
    elif isinstance(config, dict):
        cfg = TrainConfig.from_dict(config)
    elif str(config) in PRESETS:
        cfg = preset(str(config))
    else:
        cfg = TrainConfig.from_yaml(config)
    return cfg.with_overrides(overrides)


__all__ = ["TrainConfig", "load_config", "preset"]
