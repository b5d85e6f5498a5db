"""Pretraining configuration: a frozen dataclass of sections, YAML files that reject unknown keys, presets.

Every number the paper fixes is a default here (``base`` = the paper); the ones it leaves open are
our documented choices (AdamW betas (0.9, 0.95), weight decay 0.05, lr 1e-4 with linear warm-up and
cosine decay to ``min_lr``, DMT temperature τ = 0.1, EMA-centre rate 0.9 as in DINO, cosine
momentum ramp). A YAML config holds one mapping per section::

    run: {seed: 42, steps: 20000}
    data: {corpus: [...], batch_size: 8}
    optim: {lr: 1.0e-4}

``python -m biomjepa.train CONFIG.yaml --set optim.lr=3e-4`` overrides any key (``--set lr=3e-4``
too: a bare key names the one section that holds it). Configs written before the sections (one flat
mapping, e.g. ``lr: 1.0e-4``) still load, with one :class:`FutureWarning` naming the new places.
Training states keep saving :meth:`TrainConfig.flat`, so runs started before still resume.
"""

from __future__ import annotations

import typing
import warnings
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

import yaml

from .config_values import REMOVED_KEYS, check_places, check_ranges, coerce, load_yaml
from .sections import (
    FLAT,
    SECTIONS,
    BlocksSection,
    DataSection,
    LoopSection,
    LossSection,
    ModelSection,
    Objective,
    OptimSection,
    ProbeSection,
    RunSection,
    TeacherSection,
)

PRESETS = ("tiny", "mini", "base")


@dataclass(frozen=True)
class TrainConfig:
    """All settings of a pretraining run, in sections (``biomjepa/configs/base.yaml`` holds the paper's values).

    Sections: ``run`` (where and how long), ``data`` (corpus and batches), ``blocks`` (graph and target
    blocks), ``model`` (encoder preset and predictor), ``loss`` (objective and weights), ``teacher``
    (EMA and target centring), ``optim`` (AdamW and schedule), ``loop`` (device, checkpoints, logging)
    and ``probe`` (held-out cells scored at every checkpoint). Each part of the training code is handed
    only its section. A run resumes from its directory's latest state only when the corpus, the encoder
    config and the :data:`~biomjepa.train.checkpoint.RESUME_KEYS` match the saved ones;
    ``loop.allow_resume_mismatch: true`` resumes anyway (the differences are logged).
    """

    run: RunSection = field(default_factory=RunSection)
    data: DataSection = field(default_factory=DataSection)
    blocks: BlocksSection = field(default_factory=BlocksSection)
    model: ModelSection = field(default_factory=ModelSection)
    loss: LossSection = field(default_factory=LossSection)
    teacher: TeacherSection = field(default_factory=TeacherSection)
    optim: OptimSection = field(default_factory=OptimSection)
    loop: LoopSection = field(default_factory=LoopSection)
    probe: ProbeSection = field(default_factory=ProbeSection)

    def __post_init__(self) -> None:
        for name, kind in SECTIONS.items():
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"TrainConfig.{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}.")
        check_ranges(self.flat())
        check_places(self.run.run_name, self.data.corpus)
        t = self.teacher
        if t.cell_centre and t.cell_centre_depth:
            raise ValueError("teacher.cell_centre and teacher.cell_centre_depth exclude each other: the first removes the "
                             "whole cell level, the second only its depth-predicted part; set one of them.")
        lo = self.loss
        if lo.lambda_view_nce and (lo.lambda_embed_var or lo.lambda_embed_cov):
            raise ValueError("loss.lambda_view_nce (a contrast of the student's per-cell mean state) and "
                             "loss.lambda_embed_var/cov (VICReg on its max-pooled embedding) need different student "
                             "readouts; set one of them.")
        if lo.lambda_view_nce and lo.objective == "decoder":
            raise ValueError("loss.lambda_view_nce needs a teacher; the decoder objective has none. Set "
                             "loss.objective='block' or lambda_view_nce=0.")
        if (lo.lambda_state_var or lo.lambda_state_cov) and (lo.lambda_embed_var or lo.lambda_embed_cov):
            raise ValueError("loss.lambda_state_var/cov (VICReg on the student's per-cell state) and "
                             "loss.lambda_embed_var/cov (on its pooled embedding) exclude each other; set one pair.")
        if t.depth_residual and (t.cell_centre or t.cell_centre_depth):
            raise ValueError("teacher.depth_residual removes the depth-predicted part of each cell's level, which "
                             "teacher.cell_centre / cell_centre_depth already remove; set one of them.")
        for name in ("cell_centre", "cell_centre_depth"):
            if getattr(t, name) and t.target_centre != "gene":
                raise ValueError(f"teacher.{name}=True needs teacher.target_centre='gene' (it centres per-gene-centred "
                                 "token states).")
        from .._settings import check_device

        object.__setattr__(self, "loop", replace(self.loop, device=check_device(self.loop.device, "device")))

    def __getattr__(self, name: str):  # only reached when normal lookup fails: the flat names of old code
        if name.startswith("__") or name not in FLAT:
            raise AttributeError(f"TrainConfig has no attribute {name!r}")
        section, key = FLAT[name]
        warnings.warn(f"TrainConfig.{name} is now TrainConfig.{section}.{key}; the flat attribute will be removed.",
                      FutureWarning, stacklevel=2)
        return getattr(getattr(self, section), key)

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """Build from a mapping of sections (flat keys of older configs accepted with a warning).

        Unknown keys raise (with the list of known ones). A ``preset`` key (``tiny``/``mini``/``base``)
        starts from that preset's values.
        """
        return cls._from_mapping(d, "")

    @classmethod
    def from_flat(cls, d: dict) -> TrainConfig:
        """From the flat mapping a training state saves (:meth:`flat`); no warning (it is the storage form)."""
        return cls._from_mapping(d, "", warn=False)

    @classmethod
    def _from_mapping(cls, d: dict, where: str, warn: bool = True) -> TrainConfig:
        d = dict(d or {})
        base = preset(d.pop("preset")) if "preset" in d else cls()
        flat, legacy = _flatten(d, where)
        if legacy and warn:
            moved = ", ".join(f"{k} → {FLAT[k][0]}.{FLAT[k][1]}" for k in legacy)
            warnings.warn(f"{where}flat TrainConfig keys are deprecated; put them in their sections: {moved}.",
                          FutureWarning, stacklevel=3)
        return base.replace(**{k: coerce(_field_type(k), v, k, where) for k, v in flat.items()})

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        with open(path) as f:
            d = load_yaml(f, f"{path}: ") or {}
        if not isinstance(d, dict):
            raise ValueError(f"{path} must hold a YAML mapping of TrainConfig sections.")
        return cls._from_mapping(d, f"{path}: ")

    def replace(self, **flat_values) -> TrainConfig:
        """A copy with values set by key (``lr=…``, the same as ``optim={…, "lr": …}``)."""
        per_section: dict[str, dict] = {}
        for key, value in flat_values.items():
            section, name = FLAT[_known(key, "")]
            per_section.setdefault(section, {})[name] = value
        return replace(self, **{s: replace(getattr(self, s), **v) for s, v in per_section.items()})

    def with_overrides(self, overrides: list[str] | None) -> TrainConfig:
        """Apply ``["section.key=value", ...]`` (or a bare ``key=value``); values parsed as YAML, type-checked."""
        out = {}
        for item in overrides or []:
            if "=" not in item:
                raise ValueError(f"an override must be key=value, got {item!r}.")
            key, raw = (part.strip() for part in item.split("=", 1))
            key = _flat_key(key, f"override {item}: ")
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError:
                value = raw  # not YAML: a plain string, checked against the key's type below
            out[key] = coerce(_field_type(key), value, key, "override ")
        return self.replace(**out)

    def flat(self) -> dict:
        """``{key: value}`` over every section (the form training states save and resume checks compare)."""
        out = {}
        for key, (section, name) in FLAT.items():
            value = getattr(getattr(self, section), name)
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def to_dict(self) -> dict:
        """``{section: {key: value}}``, the YAML layout."""
        flat = self.flat()
        return {s: {FLAT[k][1]: flat[k] for k in FLAT if FLAT[k][0] == s} for s in SECTIONS}

    def to_yaml(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    # ---------------------------------------------------------------- derived
    def model_config(self):
        """The encoder's :class:`~biomjepa.nn.ModelConfig` (preset + overrides)."""
        from ..nn.config import ModelConfig

        return ModelConfig.preset(self.model.preset, **self.model.overrides)

    def block_config(self):
        """The sampler's :class:`~biomjepa.train.blocks.BlockConfig` (random mode for ``random_block``)."""
        from .blocks import BlockConfig

        b, random = self.blocks, self.loss.objective == "random_block"
        return BlockConfig(n_targets=b.n_targets, min_block=b.min_block, max_block=b.max_block,
                           min_context=b.min_context, mode="random" if random else "graph", dmt_k=b.dmt_k,
                           random_ratio=b.random_ratio if random else None, max_context=self.data.context_genes)


def _known(key: str, where: str) -> str:
    """``key`` if it is a flat key; the error names the removed or unknown key and lists the known ones."""
    if key in REMOVED_KEYS:
        raise ValueError(f"{where}TrainConfig key {key!r} was removed: {REMOVED_KEYS[key]}.")
    if key not in FLAT:
        known = sorted(f"{s}.{n}" for s, n in FLAT.values())
        raise ValueError(f"{where}Unknown TrainConfig key {key!r}; known keys: {known}.")
    return key


def _flat_key(key: str, where: str) -> str:
    """The flat key of ``section.field`` (or of a bare flat key)."""
    if "." not in key:
        return _known(key, where)
    match = [k for k, sn in FLAT.items() if f"{sn[0]}.{sn[1]}" == key]
    if not match:
        known = sorted(f"{s}.{n}" for s, n in FLAT.values())
        raise ValueError(f"{where}Unknown TrainConfig key {key!r}; known keys: {known}.")
    return match[0]


def _flatten(d: dict, where: str) -> tuple[dict, list[str]]:
    """``{flat key: value}`` from a mapping of sections and/or (deprecated) flat keys; also the flat ones."""
    out, legacy = {}, []
    for key, value in d.items():
        if key in SECTIONS and value is None:  # `optim:` with nothing under it: an empty section
            continue
        if key in SECTIONS and key not in FLAT and not isinstance(value, dict):
            raise ValueError(f"{where}section {key!r} must be a mapping of its keys (`{key}:` then indented "
                             f"`key: value` lines), got {type(value).__name__} {value!r}.")
        if key in SECTIONS and isinstance(value, dict) and not (key == "model" and value == {}):
            for name, v in value.items():
                match = [k for k, (s, n) in FLAT.items() if s == key and n == name]
                if not match:
                    if name in REMOVED_KEYS:
                        _known(name, where)
                    known = sorted(n for s, n in FLAT.values() if s == key)
                    raise ValueError(f"{where}Unknown TrainConfig keys ['{key}.{name}']; section {key!r} holds {known}.")
                out[match[0]] = v
        elif key in REMOVED_KEYS:
            if value is not None:
                raise ValueError(f"{where}TrainConfig key {key!r} was removed: {REMOVED_KEYS[key]}.")
        else:
            if key not in FLAT:
                known = sorted([*SECTIONS, "preset"])
                raise ValueError(f"{where}Unknown TrainConfig keys [{key!r}]; a config holds the sections {known}.")
            out[key] = value
            legacy.append(key)
    return out, legacy


_HINTS: dict = {}


def _field_type(key: str):
    if not _HINTS:
        for section, kind in SECTIONS.items():
            hints = typing.get_type_hints(kind)
            for flat, (s, name) in FLAT.items():
                if s == section:
                    _HINTS[flat] = hints[name]
    return _HINTS[key]


def preset(name: str) -> TrainConfig:
    """The bundled preset ``tiny`` (tests), ``mini`` (CPU, shared corpus) or ``base`` (the paper)."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; choose one of {PRESETS}.")
    text = resources.files("biomjepa.configs").joinpath(f"{name}.yaml").read_text()
    return TrainConfig._from_mapping(load_yaml(text, f"preset {name}: ") or {}, f"preset {name}: ")


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


__all__ = ["Objective", "TrainConfig", "load_config", "preset"]
