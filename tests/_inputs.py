"""Small AnnData inputs and checks shared by the test modules that feed the public API bad input.

Test modules import these as ``from _inputs import ...`` (pytest puts ``tests/`` on ``sys.path`` when it
loads ``tests/conftest.py``, as it puts ``tests/train/`` there for ``_kit``). The checkpoints they are
used with are the ``checkpoints`` / ``ckpt`` fixtures of ``tests/conftest.py``: random ``tiny`` models
written to a temporary directory and always passed explicitly (``checkpoint=``), never the default
registry model.
"""

from __future__ import annotations

import json
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import biomjepa as bj
from biomjepa.data.vocab import Vocab
from biomjepa.model import CONFIG

N_CELLS, N_GENES = 40, 150
PROGRAMME_SIZE = 5
HUMAN = ["TP53", "GAPDH", "ACTB", "CD3E", "MS4A1", "LYZ", "CD14", "NKG7"]


# --------------------------------------------------------------------------- named genes
def make(names, X=None, fmt="csr", seed=0) -> ad.AnnData:
    """12 cells × ``names`` of Poisson(3) counts (or ``X``), as CSR, CSC or dense; cells ``c0``…"""
    rng = np.random.default_rng(seed)
    if X is None:
        X = rng.poisson(3.0, size=(12, len(names))).astype(np.float32)
    if fmt == "csr":
        X = sparse.csr_matrix(X)
    elif fmt == "csc":
        X = sparse.csc_matrix(X)
    a = ad.AnnData(X)
    a.var_names = list(names)
    a.obs_names = [f"c{i}" for i in range(a.n_obs)]
    return a


def idx(*symbols):
    """Vocabulary indices of ``symbols``."""
    return Vocab.default().index_of(list(symbols)).tolist()


def symbols(n: int = N_GENES, start: int = 1000) -> list[str]:
    """``n`` vocabulary symbols from position ``start``."""
    return [str(s) for s in Vocab.default().symbols[start : start + n]]


def programme() -> list[str]:
    return symbols(PROGRAMME_SIZE)


# --------------------------------------------------------------------------- count matrices
def make_raw(fmt: str = "csr", seed: int = 0) -> ad.AnnData:
    """40 cells × 150 vocabulary genes + 5 unmapped, Poisson counts; groups a (20), b (19), solo (1)."""
    rng = np.random.default_rng(seed)
    names = [*symbols(), *(f"NOTAGENE{i}" for i in range(5))]
    X = rng.poisson(1.0, size=(N_CELLS, len(names))).astype(np.float32)
    X[:, 0] += 1  # no cell without a vocabulary gene
    X = {"dense": X, "csr": sparse.csr_matrix(X), "csc": sparse.csc_matrix(X)}[fmt]
    a = ad.AnnData(X)
    a.var_names = names
    a.obs_names = [f"cell{i}" for i in range(N_CELLS)]
    a.obs["group"] = pd.Categorical(["a"] * 20 + ["b"] * 19 + ["solo"])
    return a


def make_mapped(fmt: str = "csr") -> ad.AnnData:
    """:func:`make_raw` after ``bj.pp.map_vocab``."""
    a = make_raw(fmt)
    bj.pp.map_vocab(a)
    return a


def make_screen() -> ad.AnnData:
    """A perturbation screen in an obsm representation: controls, 4 singles, 2 doubles, one 1-cell single."""
    rng = np.random.default_rng(1)
    labels = ["control"] * 8 + [g for g in ("A", "B", "C", "D", "A+B", "C+D") for _ in range(4)] + ["E"]
    a = ad.AnnData(np.zeros((len(labels), 4), dtype=np.float32))
    a.var_names = ["A", "B", "C", "D"]
    a.obs_names = [f"p{i}" for i in range(len(labels))]
    a.obs["perturbation"] = pd.Categorical(labels)
    a.obsm["X_rep"] = rng.normal(size=(len(labels), 6))
    return a


def _bad(kind: str) -> ad.AnnData:
    """:func:`make_mapped` (dense) whose X is log-normalized, or holds one negative, NaN or Inf value."""
    a = make_mapped("dense")
    if kind == "log-normalized":
        a.X = np.log1p(1e4 * a.X / a.X.sum(1, keepdims=True))
    elif kind == "negative":
        a.X[2, 5] = -1.0
    elif kind == "nan":
        a.X[2, 5] = np.nan
    elif kind == "inf":
        a.X[2, 5] = np.inf
    return a


BAD_VALUES = {
    "log-normalized": r"X does not look like raw counts .*layer=",
    "negative": r"X contains negative values.*layer=",
    "nan": "X contains NaN or Inf values",
    "inf": "X contains NaN or Inf values",
}


def _with_nan_groups(adata, n_nan=5):
    """``obs["group"]`` with its first ``n_nan`` labels set to NaN."""
    groups = adata.obs["group"].astype(object).to_numpy()
    groups[:n_nan] = np.nan
    adata.obs["group"] = groups
    return adata


# --------------------------------------------------------------------------- "raises, and changes nothing"
def _dense(X) -> np.ndarray:
    return X.toarray() if sparse.issparse(X) else np.asarray(X)


def _uns_keys(uns) -> dict:
    return {k: sorted(v) if isinstance(v, dict) else None for k, v in uns.items()}


def assert_unchanged(adata: ad.AnnData, before: ad.AnnData) -> None:
    """X (type and values, NaN == NaN), obs, var, obsm, layers and uns keys equal ``before``."""
    assert type(adata.X) is type(before.X)
    np.testing.assert_array_equal(_dense(adata.X), _dense(before.X))
    pd.testing.assert_frame_equal(adata.obs, before.obs)
    pd.testing.assert_frame_equal(adata.var, before.var)
    assert list(adata.obsm) == list(before.obsm)
    for k in before.obsm:
        np.testing.assert_array_equal(np.asarray(adata.obsm[k]), np.asarray(before.obsm[k]))
    assert list(adata.layers) == list(before.layers)
    assert _uns_keys(adata.uns) == _uns_keys(before.uns)


def raises_unchanged(adata, exc, match, fn, *args, **kwargs):
    """``fn(adata, ...)`` raises ``exc`` matching ``match`` and leaves ``adata`` as it was."""
    before = adata.copy()
    with pytest.raises(exc, match=match):
        fn(adata, *args, **kwargs)
    assert_unchanged(adata, before)


# --------------------------------------------------------------------------- the AnnData-reading tools
# Called with a checkpoint (cheap settings).
def _embed(a, ckpt, **kw):
    kw.setdefault("device", "cpu")
    return bj.tl.embed(a, checkpoint=ckpt, **kw)


def _max_token(a, ckpt, **kw):
    kw.setdefault("device", "cpu")
    return bj.tl.max_token(a, checkpoint=ckpt, **kw)


def _ablate(a, ckpt, **kw):
    kw.setdefault("device", "cpu")
    return bj.tl.ablate_programme(a, programme(), checkpoint=ckpt, n_cells=4, **kw)


TOOLS = {"embed": _embed, "max_token": _max_token, "ablate_programme": _ablate}


# --------------------------------------------------------------------------- checkpoints
def edit_model_config(path: Path, **model) -> None:
    """Overwrite keys of the ``model`` section of ``path/config.json`` (nothing else is rewritten)."""
    meta = json.loads((path / CONFIG).read_text())
    meta["model"].update(model)
    (path / CONFIG).write_text(json.dumps(meta))
