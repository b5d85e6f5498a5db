"""Fixed feature statistics of a checkpoint's readout: the embedding on scanpy's scale, per cell.

Pooled readouts have very unequal feature scales (for ``biomjepa-mini`` v0.2, 5 of 256 features
carried 33–53 % of the variance), so Euclidean neighbours (``sc.pp.neighbors(use_rep=…)``) follow
a handful of features. A checkpoint may record a per-feature ``mean`` and ``scale`` measured on a
sample of its *training corpus* at export (``config.json`` key ``readout``); the model then returns
``(z − mean) / scale``; a record may also hold a ``whiten`` matrix ``W [d, d]`` (ZCA whitening of the
standardized corpus embeddings, shrunk towards the identity), and the model then returns
``((z − mean) / scale) @ W``, so no few directions dominate Euclidean distances. The statistics are
constants of the checkpoint, never fitted on the cells being embedded, so a cell's embedding does not
depend on which other cells it is embedded with. The bundled v0.5, v0.4 and v0.3 record a standardization, v0.2.1 a
standardization and a whitening.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._checks import check_readout_record


def readout_entry(mean: np.ndarray, scale: np.ndarray, *, n_cells: int, source: str,
                  whiten: np.ndarray | None = None) -> dict:
    """The ``config.json`` ``readout`` record for per-feature ``mean`` and ``scale`` (> 0, finite) and,
    optionally, a whitening matrix ``whiten [d, d]`` applied after them."""
    mean, scale = np.asarray(mean, np.float64), np.asarray(scale, np.float64)
    check_stats(mean.tolist(), scale.tolist(), len(mean), "readout")
    entry = {"standardize": True, "mean": [float(x) for x in mean], "scale": [float(x) for x in scale],
             "n_cells": int(n_cells), "source": source}
    if whiten is not None:
        entry["whiten"] = [[float(x) for x in row] for row in np.asarray(whiten, np.float64)]
    check_readout_record(entry, len(mean), "readout")
    return entry


def check_stats(mean, scale, dim: int, where: str) -> None:
    """Raise ``ValueError`` naming ``where`` unless ``mean``/``scale`` are ``dim`` finite numbers, scale > 0."""
    for key, vals in (("mean", mean), ("scale", scale)):
        if not isinstance(vals, list) or len(vals) != dim:
            raise ValueError(f"{where}.{key} must be a list of {dim} numbers (the embedding size).")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
            raise ValueError(f"{where}.{key} holds a non-finite or non-numeric value.")
    if min(scale) <= 0:
        raise ValueError(f"{where}.scale must be > 0 for every feature.")


def stats_tensors(entry: dict | None, dim: int, where: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """``(mean, scale, whiten or None)`` float32 tensors of a ``readout`` record (``None`` when absent or off)."""
    check_readout_record(entry, dim, where)
    if not entry or not entry.get("standardize"):
        return None
    check_stats(entry.get("mean"), entry.get("scale"), dim, where)
    w = entry.get("whiten")
    return (torch.tensor(entry["mean"], dtype=torch.float32), torch.tensor(entry["scale"], dtype=torch.float32),
            None if w is None else torch.tensor(w, dtype=torch.float32))


def feature_stats(Z: np.ndarray, chunk: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and standard deviation of embeddings ``Z [n, d]`` (scale floored at 1e-6), in float64,
    ``chunk`` rows at a time (no float64 copy of a large ``Z``)."""
    Z = np.asarray(Z)
    n = len(Z)
    if n == 0:
        raise ValueError("feature_stats needs at least one embedding.")
    parts = range(0, n, chunk)
    mean = sum(Z[i:i + chunk].sum(0, dtype=np.float64) for i in parts) / n
    var = sum(np.square(Z[i:i + chunk] - mean).sum(0) for i in parts) / n
    return mean, np.maximum(np.sqrt(var), 1e-6)
