"""Robustness of cell representations to sequencing depth: binomial thinning of the raw counts."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .._keys import OBSM_KEY, TOKEN_KEY, uns_key_of
from ._utils import frame, get_counts, get_labels, get_rep, progress, rows
from .baselines import BASELINE_KEYS

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)

TASK = "depth_robustness"


def depth_robustness(
    adata: AnnData,
    *,
    label_key: str,
    use_reps: Sequence[str] | str = (OBSM_KEY, BASELINE_KEYS["pca"]),
    fractions: Sequence[float] = (0.5, 0.2),
    layer: str | None = None,
    seed: int = 0,
    checkpoint: str | None = None,
    n_cells: int | None = None,
    batch_size: int | None = None,
    device: str = "auto",
) -> pd.DataFrame:
    """How well thinned cells find their own full-depth copy and their cell type among full-depth cells.

    For each fraction ``f`` the raw counts are thinned binomially (each count kept with probability
    ``f``, ``numpy.random.default_rng(seed).binomial``; sparse data stay sparse) and each representation
    is derived again from the thinned counts with the transform fitted at full depth:

    - a BioM-JEPA embedding (``obsm["X_biomjepa"]`` or any key with ``uns[key]["params"]`` written by
      :func:`biomjepa.tl.embed`) is re-embedded with the recorded checkpoint (or ``checkpoint``); the
      stored full-depth embedding is reused when it came from that checkpoint, layer and precision,
      otherwise the full-depth cells are embedded as well;
    - ``"X_pca50"`` (:func:`~biomjepa.bench.add_baselines`) is fitted on all cells at full depth (same
      HVGs, normalization, ``log1p`` and components) and applied to the thinned cells; ``obsm`` is not read.

    Features are standardized with the full-depth mean and s.d.; distances are cosine distances between
    each thinned cell and the full-depth cells.

    Parameters
    ----------
    adata
        AnnData with raw counts (after :func:`biomjepa.pp.map_vocab` for embedding reps). Not modified.
    label_key
        ``obs`` column with cell labels; cells without a label are dropped (with a warning).
    use_reps
        Representations to test; only re-derivable ones (see above) are accepted.
    fractions
        Fractions of counts kept, each in (0, 1] (1.0 is a sanity check: ``self_match`` ≈ 1).
    layer
        Layer with raw counts (None: X).
    seed
        Seed of the thinning (the same for every fraction) and of the ``n_cells`` subsample.
    checkpoint
        Checkpoint for re-embedding (default: the one recorded in the embedding's ``params``).
    n_cells
        Score a random subset of this many labelled cells (None: all).
    batch_size, device
        Passed to :func:`biomjepa.tl.embed`.

    Returns
    -------
    Tidy table ``task, rep, setting, seed, metric, value`` with ``task="depth_robustness"``,
    ``setting=f"thin{f}"`` and metrics ``nn_label_agreement`` (share of thinned cells whose nearest
    full-depth cell, their own copy excluded, has the same label), ``self_match`` (share whose nearest
    full-depth cell is their own copy) and ``relative_shift`` (median over cells of the distance to the
    own full-depth copy divided by the full-depth cell's median distance to the other full-depth cells).
    """
    from .._checks import check_adata, check_keys
    from ..data.tokenize import check_counts

    check_adata(adata)
    reps = check_keys("use_reps", use_reps)
    if not reps:
        raise ValueError("Nothing to score: `use_reps` is empty.")
    fracs = _check_fractions(fractions)
    kinds = {r: _rep_kind(adata, r) for r in reps}
    X = get_counts(adata, layer)
    check_counts(X, where="X" if layer is None else f"layers[{layer!r}]")
    cells, labels = _cells(adata, label_key, n_cells, seed)
    X_full = _csr(X[cells])
    makers = {
        r: _maker(adata, r, *kinds[r], X_full, cells, layer, checkpoint, batch_size, device) for r in reps
    }
    full = {r: makers[r](None) for r in reps}
    token = adata.var[TOKEN_KEY].to_numpy() if any(k == "embed" for k, _ in kinds.values()) else None
    out = {r: [] for r in reps}
    for f in progress(fracs, desc=TASK):
        X_thin = _thin(X_full, f, seed)
        query = _nonempty(X_thin, token, f)
        for r in reps:
            m = _match(full[r], makers[r](X_thin[query]), query, labels)
            out[r] += rows(TASK, r, f"thin{f}", seed, m)
            logger.info("%s thin%s: %s", r, f, ", ".join(f"{k}={v:.3f}" for k, v in m.items()))
    return frame([rec for r in reps for rec in out[r]])


def _check_fractions(fractions) -> list[float]:
    fracs = [fractions] if isinstance(fractions, Real) else list(fractions)
    if not fracs:
        raise ValueError("`fractions` is empty; pass fractions of counts to keep, e.g. (0.5, 0.2).")
    bad = [f for f in fracs if not isinstance(f, Real) or not 0 < f <= 1]
    if bad:
        raise ValueError(f"`fractions` must lie in (0, 1] (the share of counts kept); got {bad}.")
    return [float(f) for f in fracs]


def _embed_params(adata: AnnData, key: str) -> Mapping | None:
    """``params`` written by :func:`biomjepa.tl.embed` for obsm ``key``, or None."""
    entry = adata.uns.get(uns_key_of(key))
    params = entry.get("params") if isinstance(entry, Mapping) else None
    return params if isinstance(params, Mapping) and {"checkpoint", "pooling"} <= set(params) else None


def _rep_kind(adata: AnnData, key: str) -> tuple[str, Mapping | None]:
    if key == BASELINE_KEYS["pca"]:
        return "pca", None
    params = _embed_params(adata, key)
    if params is not None or key == OBSM_KEY:
        return "embed", params
    raise ValueError(
        f"Cannot re-derive obsm[{key!r}] from thinned counts. depth_robustness supports {BASELINE_KEYS['pca']!r} "
        f"(bj.bench.add_baselines) and embeddings written by bj.tl.embed ({OBSM_KEY!r}, or a `key_added` "
        f"with uns[key]['params']); drop {key!r} from `use_reps`."
    )


def _cells(adata: AnnData, label_key: str, n_cells: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the scored (labelled, optionally subsampled) cells and their labels."""
    labels, valid = get_labels(adata, label_key)
    if not valid.all():
        warnings.warn(f"dropping {(~valid).sum()} cells without a label in obs[{label_key!r}].", stacklevel=3)
    idx = np.flatnonzero(valid)
    if n_cells is not None:
        if int(n_cells) != n_cells or n_cells < 3:
            raise ValueError(f"`n_cells` must be an integer >= 3 (or None for all cells); got {n_cells!r}.")
        if n_cells < len(idx):
            idx = np.sort(np.random.default_rng(seed).choice(idx, int(n_cells), replace=False))
    if len(idx) < 3:
        raise ValueError(f"need at least 3 labelled cells; obs[{label_key!r}] labels {len(idx)}.")
    return idx, labels[idx]


def _csr(X):
    from scipy import sparse

    return X.tocsr() if sparse.issparse(X) else sparse.csr_matrix(X)


def _thin(X, fraction: float, seed: int):
    """Binomial thinning of CSR raw counts (a new matrix; ``X`` is not modified)."""
    from scipy import sparse

    data = np.random.default_rng(seed).binomial(np.rint(X.data).astype(np.int64), fraction)
    out = sparse.csr_matrix((data.astype(X.dtype), X.indices.copy(), X.indptr.copy()), shape=X.shape)
    out.eliminate_zeros()
    return out


def _nonempty(X_thin, token: np.ndarray | None, fraction: float) -> np.ndarray:
    """Thinned cells that still have counts (in vocabulary genes when an embedding is re-derived)."""
    Xm = X_thin if token is None else X_thin[:, np.flatnonzero(token >= 0)]
    keep = np.diff(Xm.tocsr().indptr) > 0
    if not keep.all():
        warnings.warn(
            f"thin{fraction}: {(~keep).sum()} cells have no counts left and are not scored.", stacklevel=3
        )
    if keep.sum() < 1:
        raise ValueError(f"no cell keeps any count at fraction {fraction}; use larger `fractions`.")
    return np.flatnonzero(keep)


def _maker(adata, key, kind, params, X_full, cells, layer, checkpoint, batch_size, device):
    """A function ``counts → [n, d]`` representation (``None``: the full-depth scored cells ``X_full``)."""
    if kind == "pca":
        from .baselines import fit_pca

        _, pca = fit_pca(adata, layer=layer)
        return lambda counts: pca.transform(X_full if counts is None else counts).astype(np.float64)
    return _embed_maker(adata, key, params, X_full, cells, layer, checkpoint, batch_size, device)


def _embed_maker(adata, key, params, X_full, cells, layer, checkpoint, batch_size, device):
    from .._device import resolve_device
    from .._pretrained import load_model
    from ..data.anndata_source import token_column

    token = token_column(adata)
    ckpt = checkpoint if checkpoint is not None else _recorded_checkpoint(params)
    try:
        model = load_model(ckpt)
    except FileNotFoundError as err:
        raise ValueError(
            f"Cannot load the checkpoint recorded for obsm[{key!r}] ({err}); pass `checkpoint=`."
        ) from None
    dev = resolve_device(device)

    def make(counts):
        import anndata as ad

        from ..tl import embed

        counts = X_full if counts is None else counts
        tmp = ad.AnnData(
            counts, var=pd.DataFrame({TOKEN_KEY: token}, index=np.arange(len(token)).astype(str))
        )
        embed(tmp, checkpoint=ckpt, batch_size=batch_size, device=str(dev))
        return tmp.obsm[OBSM_KEY].astype(np.float64)

    if key in adata.obsm and _reusable(params, model, dev, layer):
        stored = get_rep(adata, key)[cells]
        logger.info("%s: reusing the stored full-depth embedding", key)
        return lambda counts: stored if counts is None else make(counts)
    return make


def _recorded_hashes(params: Mapping) -> tuple[str, str]:
    """``(whole checkpoint's sha256, weights' sha256)`` recorded by :func:`biomjepa.tl.embed`; records made before
    ``weights_sha256`` existed held the weights' hash as ``checkpoint_sha256`` (whole: ``""``)."""
    if "weights_sha256" not in params:
        return "", str(params.get("checkpoint_sha256", ""))
    return str(params.get("checkpoint_sha256", "")), str(params["weights_sha256"])


def _recorded_checkpoint(params: Mapping | None) -> str | None:
    """A loadable reference to the checkpoint recorded by :func:`biomjepa.tl.embed` (None: the default): a registry
    name, or the recorded URL or directory pinned by the whole checkpoint's sha256 (an edited one is refused)."""
    if params is None:
        return None
    from pathlib import Path

    from .._pretrained import REGISTRY

    whole, weights = _recorded_hashes(params)

    def fits(entry: Mapping) -> bool:
        if whole and "checkpoint_sha256" in entry:
            return entry["checkpoint_sha256"] == whole
        return bool(weights) and entry.get("sha256") == weights

    name = str(params["checkpoint"])
    if name in REGISTRY and fits(REGISTRY[name]):
        return name
    for reg, entry in REGISTRY.items():
        if fits(entry):
            return reg
    if whole and "#" not in name and (name.startswith(("http://", "https://")) or Path(name).is_dir()):
        return f"{name}#sha256={whole}"
    return name


def _reusable(params: Mapping | None, model, dev, layer: str | None) -> bool:
    """Whether the stored embedding came from this model, counts layer and precision."""
    if params is None:
        return False
    from .._device import dtype_label

    dtype = dtype_label(dev)  # the label tl.embed records
    whole, _ = _recorded_hashes(params)  # the whole checkpoint: an edited config.json embeds differently
    return (
        bool(whole) and whole == model.info.get("checkpoint_sha256")
        and params.get("layer") == (layer or "X")
        and params.get("dtype") == dtype
    )


def _unit(Z: np.ndarray) -> np.ndarray:
    return Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12)


def _match(Z_full: np.ndarray, Z_thin: np.ndarray, query: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Nearest full-depth cells (cosine on full-depth-standardized features) of the thinned ``query`` cells."""
    mu, sd = Z_full.mean(0), Z_full.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    F, T = _unit((Z_full - mu) / sd), _unit((Z_thin - mu) / sd)
    n, q = len(F), len(T)
    nn_any, nn_other = np.empty(q, dtype=np.int64), np.empty(q, dtype=np.int64)
    shift = np.empty(q)
    step = max(1, 2**22 // n)
    for s in range(0, q, step):
        own = query[s : s + step]
        r = np.arange(len(own))
        D = 1.0 - T[s : s + step] @ F.T
        nn_any[s : s + step] = D.argmin(1)
        d_own = D[r, own].copy()
        D[r, own] = np.inf
        nn_other[s : s + step] = D.argmin(1)
        DF = 1.0 - F[own] @ F.T
        DF[r, own] = np.nan
        scale = np.nanmedian(DF, axis=1)
        shift[s : s + step] = np.divide(d_own, scale, out=np.full(len(own), np.nan), where=scale > 0)
    return {
        "nn_label_agreement": float(np.mean(labels[nn_other] == labels[query])),
        "self_match": float(np.mean(nn_any == query)),
        "relative_shift": float(np.nanmedian(shift)),
    }
