"""Checks of the arguments a user gives a public function, made where they enter.

Each raises one clear exception (``TypeError`` for a wrong type, ``ValueError`` for a value out of
range) whose message names the argument, what was given and what is allowed, before any data are
read or written, so a bad argument never surfaces as a library's traceback nor leaves half a result.
"""

from __future__ import annotations

import math
import numbers


def check_adata(adata, name: str = "adata") -> None:
    """``adata`` is an AnnData (or a MuData); a ``TypeError`` naming ``name`` otherwise, and a ``ValueError`` for a
    view of a backed AnnData (anndata can neither write into it nor copy it without a file name)."""
    from anndata import AnnData

    if isinstance(adata, AnnData) and adata.is_view and adata.isbacked:
        raise ValueError(
            f"`{name}` is a view of a backed AnnData (a subset of a file opened with backed='r'): anndata cannot "
            "write results into it, nor copy it without a file. Load the subset first: "
            f"`{name} = {name}.to_memory()`, or write it to its own file: `{name}.copy(filename='subset.h5ad')`."
        )
    if isinstance(adata, AnnData) or type(adata).__name__ == "MuData":
        return
    raise TypeError(
        f"`{name}` must be an AnnData (cells × genes), got {type(adata).__name__}. Wrap a matrix with "
        "`anndata.AnnData(X, obs=..., var=...)` or read a file with `anndata.read_h5ad(path)`."
    )


def check_int(name: str, value, *, low: int = 1, none_ok: bool = False, example: int | None = None) -> int | None:
    """An integer ``>= low`` (a bool or a float is refused); ``None`` passes when ``none_ok``. The message ends with
    the fix: pass e.g. ``name=example`` (default ``low``)."""
    if value is None and none_ok:
        return None
    fix = f"Pass a whole number, e.g. `{name}={low if example is None else example}`."
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer >= {low}, got {value!r}. {fix}")
    if value < low:
        raise ValueError(f"`{name}` must be an integer >= {low}, got {value}. {fix}")
    return int(value)


def check_ints(name: str, values, *, low: int = 1) -> list[int]:
    """A non-empty sequence of integers ``>= low``."""
    seq = [values] if isinstance(values, numbers.Integral) and not isinstance(values, bool) else values
    try:
        seq = list(seq)
    except TypeError:
        raise TypeError(f"`{name}` must be a sequence of integers >= {low}, got {values!r}.") from None
    if not seq:
        raise ValueError(f"`{name}` is empty; give at least one integer >= {low}.")
    return [check_int(f"{name}[{i}]", v, low=low) for i, v in enumerate(seq)]


def check_keys(name: str, values) -> list[str]:
    """A key or a sequence of keys (``use_reps``), each a string and each once: a repeated key would score or
    write everything twice. A ``TypeError`` / ``ValueError`` naming ``name`` and the repeated key otherwise."""
    keys = [values] if isinstance(values, str) else values
    try:
        keys = list(keys)
    except TypeError:
        raise TypeError(f"`{name}` must be a key or a list of keys (strings), got {values!r}.") from None
    wrong = [k for k in keys if not isinstance(k, str)]
    if wrong:
        raise TypeError(f"`{name}` must hold keys (strings), got {wrong[0]!r} in {keys!r}.")
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"`{name}` lists {', '.join(map(repr, twice))} more than once ({keys!r}); every result row "
                         "would be repeated. List each key once.")
    return keys


def check_number(name: str, value, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> float:
    """A finite real number in the range ``low``..``high`` (each end open or closed)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a number, got {value!r}.")
    value = float(value)
    bad = not math.isfinite(value)
    bad |= low is not None and (value < low or (low_open and value == low))
    bad |= high is not None and (value > high or (high_open and value == high))
    if bad:
        left = "(-inf" if low is None else ("(" if low_open else "[") + f"{low:g}"
        right = "inf)" if high is None else f"{high:g}" + (")" if high_open else "]")
        raise ValueError(f"`{name}` must be a finite number in {left}, {right}, got {value!r}.")
    return value


def check_readout_record(entry, dim: int, where: str) -> None:
    """A checkpoint's ``readout`` record read strictly: absent (None), or a mapping whose ``standardize`` is a
    JSON boolean and, when true, whose ``mean`` / ``scale`` are ``dim`` numbers that stay finite in float32
    (``scale`` at least float32's smallest normal number, so ``x / scale`` cannot overflow). A ``ValueError``
    naming ``where`` and the key otherwise (``"false"`` as a string was taken as true; a list was read as off)."""
    import numpy as np

    if entry is None:
        return
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be a record (a JSON object with 'standardize', 'mean', 'scale'), "
                         f"got {type(entry).__name__}.")
    flag = entry.get("standardize", False)
    if not isinstance(flag, bool):
        raise ValueError(f"{where}.standardize must be true or false (a JSON boolean), got {flag!r}.")
    if not flag:
        return
    f32 = np.finfo(np.float32)
    for key in ("mean", "scale"):
        vals = entry.get(key)
        if not isinstance(vals, list) or len(vals) != dim:
            raise ValueError(f"{where}.{key} must be a list of {dim} numbers (the embedding size).")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
            raise ValueError(f"{where}.{key} holds a non-finite or non-numeric value.")
        if max(abs(v) for v in vals) > f32.max:
            raise ValueError(f"{where}.{key} holds a value beyond float32's range ({f32.max:.3g}).")
    _check_whiten(entry.get("whiten"), dim, where)
    if min(entry["scale"]) < f32.tiny:
        raise ValueError(f"{where}.scale must be > 0 for every feature, and at least {f32.tiny:.3g} (float32's smallest "
                         "normal number) so that dividing by it stays finite.")


def _check_whiten(w, dim: int, where: str) -> None:
    """A readout record's optional ``whiten``: ``dim`` rows of ``dim`` finite numbers (float32 range)."""
    import numpy as np

    if w is None:
        return
    if not isinstance(w, list) or len(w) != dim or not all(isinstance(r, list) and len(r) == dim for r in w):
        raise ValueError(f"{where}.whiten must be a {dim} × {dim} matrix (a list of {dim} lists of {dim} numbers).")
    a = np.asarray(w, dtype=object)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in a.ravel()):
        raise ValueError(f"{where}.whiten holds a non-numeric value.")
    a = a.astype(np.float64)
    if not np.isfinite(a).all() or np.abs(a).max() > np.finfo(np.float32).max:
        raise ValueError(f"{where}.whiten holds a non-finite value or one beyond float32's range.")


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by this function's caller point at the first frame outside
    biomjepa (the user's line), however deep inside the package it is raised."""
    import os
    import sys

    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level
