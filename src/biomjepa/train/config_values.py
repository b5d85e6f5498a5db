"""The numbers and types a :class:`~biomjepa.train.TrainConfig` accepts: ranges, and YAML/override values
checked against each key's annotated type (never guessed)."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

#: Keys that older versions accepted, with why they are gone (a saved ``null`` is dropped silently).
REMOVED_KEYS = {
    "max_genes": "it was never implemented (every observed gene of a cell is always used); delete the key",
}

#: Range of every number a config may hold: (low, high, low inclusive, high inclusive); None = unbounded.
RANGES: dict[str, tuple] = {
    "seed": (0, None, True, None), "sort_pool": (1, None, True, None), "num_workers": (0, None, True, None),
    "min_block": (1, None, True, None), "max_block": (1, None, True, None), "min_context": (0, None, True, None),
    "dmt_k": (1, None, True, None), "gene_init_scale": (0, None, False, None), "pred_dropout": (0, 1, True, False),
    "pred_width": (1, None, True, None), "tau": (0, None, False, None), "lambda_align": (0, None, True, None),
    "lambda_cos": (0, None, True, None), "lambda_var": (0, None, True, None), "lambda_cov": (0, None, True, None),
    "var_gamma": (0, None, True, None), "lambda_embed_var": (0, None, True, None),
    "lambda_embed_cov": (0, None, True, None), "token_cap": (1, None, True, None),
    "lambda_state_var": (0, None, True, None), "lambda_state_cov": (0, None, True, None), "state_gamma": (0, None, True, None),
    "lambda_nce": (0, None, True, None), "lambda_view_nce": (0, None, True, None), "nce_temperature": (0, None, False, None),
    "momentum_start": (0, 1, True, True), "momentum_end": (0, 1, True, True), "centre_rate": (0, 1, True, True),
    "lr": (0, None, False, None), "min_lr": (0, None, True, None), "warmup_steps": (0, None, True, None),
    "weight_decay": (0, None, True, None), "beta1": (0, 1, True, False), "beta2": (0, 1, True, False),
    "grad_clip": (0, None, False, None), "checkpoint_every": (1, None, True, None),
    "keep_checkpoints": (1, None, True, None), "max_bad_steps": (1, None, True, None), "log_every": (1, None, True, None),
    "probe_cells": (2, None, True, None), "stop_at": (1, None, True, None),
    "steps": (1, None, True, None), "batch_size": (1, None, True, None), "accumulation": (1, None, True, None),
    "n_targets": (1, None, True, None), "pred_layers": (1, None, True, None), "pred_heads": (1, None, True, None),
    "teacher_genes": (1, None, True, None), "context_genes": (1, None, True, None),
    "thin_student": (0, 1, False, True), "balance": (0, 1, True, True),
}


def check_ranges(cfg: dict) -> None:
    """Refuse NaN/Inf and out-of-range numbers of a flat config, naming the key, its value and the range."""
    import math

    for name, (lo, hi, lo_in, hi_in) in RANGES.items():
        v = cfg[name]
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
    if cfg["min_block"] > cfg["max_block"]:
        raise ValueError(f"TrainConfig min_block={cfg['min_block']} > max_block={cfg['max_block']}; "
                         "set min_block <= max_block.")
    if cfg["min_lr"] > cfg["lr"]:
        raise ValueError(f"TrainConfig min_lr={cfg['min_lr']} > lr={cfg['lr']}; the cosine schedule decays from lr "
                         "to min_lr.")


def check_places(run_name, corpus) -> None:
    """``run.run_name`` a name inside ``run.out_dir`` (not absolute, no ``..``: the run would be written
    elsewhere), and ``data.corpus`` of a type a corpus can be (a path, a glob, a spec, or a list of them):
    ``data.corpus: 5`` is refused here, in the config's words, not as Python's "not iterable"."""
    import os
    from pathlib import PurePath

    if run_name is not None:
        parts = PurePath(run_name).parts
        if not str(run_name).strip() or PurePath(run_name).is_absolute() or ".." in parts or str(run_name).startswith("~"):
            raise ValueError(f"run.run_name={run_name!r} must name a directory inside run.out_dir (e.g. run_name: "
                             "mouse-v2): an absolute path, '~' or '..' would put the run elsewhere. To write the run "
                             "somewhere else, set run.out_dir to that directory.")
    if corpus is None or isinstance(corpus, (str, os.PathLike)):
        return
    if isinstance(corpus, dict):
        entries = [("data.corpus", corpus)]
    elif isinstance(corpus, (list, tuple)):
        entries = [(f"data.corpus[{i}]", e) for i, e in enumerate(corpus)]
        if not entries:
            raise ValueError("data.corpus is an empty list: give h5ad/npz files, a glob, or a prepared cache.")
    else:
        raise ValueError(f"data.corpus={corpus!r} ({type(corpus).__name__}): expected an .h5ad/.npz file, a glob "
                         "('data/*.h5ad'), a prepared cache directory, or a list of files and specs "
                         "({path: FILE, species: mouse, ...}).")
    for where, entry in entries:
        if (isinstance(entry, dict) and "path" in entry) or isinstance(entry, (str, os.PathLike)):
            continue
        raise ValueError(f"{where}={entry!r}: expected a file path, a glob, or a spec with a `path` "
                         "({path: FILE, layer: ..., species: ..., gene_key: ...}).")


_BOOLS = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def coerce(tp, value, key: str, where: str = ""):
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
        return coerce(inner[0], value, key, where) if len(inner) == 1 else value
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


def load_yaml(text, where: str):
    """Parse a config's YAML ``text`` (a string or a stream) strictly: a key given twice in one mapping is an
    error (PyYAML keeps the last one silently), and a syntax error is a ``ValueError`` naming ``where``,
    the line and the column, not a PyYAML traceback."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise ValueError(
                        f"{where}key {key!r} is given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1}); "
                        "keep one of them."
                    )
                seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

    try:
        return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{where}not valid YAML{at}: {err.problem or err.context}.") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{where}not valid YAML: {err}.") from None
