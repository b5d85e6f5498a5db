"""Hardening: the bad inputs users really send, swept across the public ``pp``/``tl``/``pl``/``bench`` API.

Every case asserts a clear, specific error (or the documented handling) *and* that the input
AnnData is unchanged afterwards (X, obs, var, obsm, layers, uns keys vs. a deep copy). Single
cases also live next to each function's own tests; this module is the one place that sweeps
them across the API. Models are random ``tiny`` checkpoints written to a temporary directory and
always passed explicitly (``checkpoint=``), never the default registry model.
"""

from __future__ import annotations

import json
import shutil
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import sparse

import biomjepa as bj
from biomjepa.data.vocab import Vocab
from biomjepa.model import CONFIG, WEIGHTS, BiomJEPA, CheckpointError, save_checkpoint
from biomjepa.nn import ModelConfig

N_CELLS, N_GENES = 40, 150
PROGRAMME_SIZE = 5


# --------------------------------------------------------------------------- fixtures and helpers
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    """A valid tiny checkpoint and its broken variants."""
    root = tmp_path_factory.mktemp("hardening_ckpt")
    torch.manual_seed(0)
    good = save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), root / "good")
    foreign = save_checkpoint(BiomJEPA(ModelConfig.preset("tiny", vocab_size=500)), root / "foreign_vocab")
    truncated = shutil.copytree(good, root / "truncated")
    data = (truncated / WEIGHTS).read_bytes()
    (truncated / WEIGHTS).write_bytes(data[: len(data) // 2])
    bad_json = shutil.copytree(good, root / "bad_json")
    text = (bad_json / CONFIG).read_text()
    (bad_json / CONFIG).write_text(text[: len(text) // 2])
    return {"good": str(good), "foreign_vocab": str(foreign), "truncated": str(truncated),
            "bad_json": str(bad_json), "missing": str(root / "does_not_exist")}


@pytest.fixture(scope="module")
def ckpt(checkpoints) -> str:
    return checkpoints["good"]


def symbols(n: int = N_GENES, start: int = 1000) -> list[str]:
    return [str(s) for s in Vocab.default().symbols[start : start + n]]


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


def programme() -> list[str]:
    return symbols(PROGRAMME_SIZE)


# The AnnData-reading tools, called with a checkpoint (cheap settings).
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


# --------------------------------------------------------------------------- empty data
@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0)])
def test_map_vocab_empty_anndata(shape):
    a = ad.AnnData(np.zeros(shape, dtype=np.float32))
    if shape[1]:
        a.var_names = symbols(shape[1])
    raises_unchanged(a, ValueError, r"AnnData is empty \(\d+ cells × \d+ genes\)", bj.pp.map_vocab)


def test_zero_cells_after_filtering(ckpt):
    raw = make_raw()
    empty_raw = raw[raw.obs["group"] == "none"].copy()
    raises_unchanged(empty_raw, ValueError, "AnnData is empty", bj.pp.map_vocab)
    mapped = make_mapped()
    empty = mapped[mapped.obs["group"] == "none"].copy()
    assert empty.n_obs == 0
    for tool in TOOLS.values():
        raises_unchanged(empty, ValueError, "adata has no cells", tool, ckpt)
    with pytest.raises(ValueError, match="adata has no cells"):  # before the training state is read
        bj.tl.programme_dependencies(empty, {"p": programme(), "q": symbols(3, 1100)}, checkpoint="unused",
                                     groupby="group", matched={"p": "a", "q": "b"})
    empty.obsm["X_rep"] = np.zeros((0, 4))
    raises_unchanged(empty, ValueError, r"obs\['group'\] has no valid labels", bj.bench.annotation,
                     label_key="group", use_reps=["X_rep"])
    screen = make_screen()
    empty_screen = screen[screen.obs["perturbation"] == "none"].copy()
    raises_unchanged(empty_screen, ValueError, "Found 0 control cells", bj.tl.perturbation_arithmetic,
                     use_rep="X_rep")


def test_cells_without_vocabulary_genes(ckpt):
    a = make_mapped("dense")
    a.X[3, :N_GENES] = 0  # cell 3 keeps only unmapped genes
    a.X[3, N_GENES] = 1
    for tool in TOOLS.values():
        raises_unchanged(a, ValueError, r"1 cell\(s\) have no expressed gene in the vocabulary.*filter_cells", tool, ckpt)


# --------------------------------------------------------------------------- gene identifiers
def test_integer_positions_as_gene_names(ckpt):
    a = make_raw()
    a.var["symbol"] = a.var_names.to_numpy()
    a.var_names = [str(i) for i in range(a.n_vars)]
    raises_unchanged(a, ValueError, r"integer positions.*gene_key=.*'symbol'", bj.pp.map_vocab)
    raises_unchanged(a, KeyError, r"Run `bj\.pp\.map_vocab\(adata\)` first", _embed, ckpt)
    bj.pp.map_vocab(a, gene_key="symbol")
    assert a.uns["biomjepa"]["vocab"]["n_matched"] == N_GENES


def test_mouse_symbols_with_default_species():
    a = ad.AnnData(np.ones((4, 8), dtype=np.float32))
    a.var_names = ["Gcg", "Ins1", "Ins2", "Sst", "Ppy", "Pdx1", "Iapp", "Nkx6-1"]
    raises_unchanged(a, ValueError, r'look like mouse genes.*species="mouse"', bj.pp.map_vocab)
    bj.pp.map_vocab(a, species="mouse")
    assert a.uns["biomjepa"]["vocab"]["methods"]["ortholog"] >= 5


def test_mixed_symbols_and_ensembl():
    a = ad.AnnData(np.ones((3, 4), dtype=np.float32))
    a.var_names = ["TP53", "ENSG00000111640.15", "ACTB", "ENSG00000105329"]  # TP53, GAPDH, ACTB, TGFB1
    bj.pp.map_vocab(a)
    report = a.uns["biomjepa"]["vocab"]
    assert report["id_type"] == "mixed" and report["n_matched"] == 4
    assert a.var["biomjepa_token"].tolist() == Vocab.default().index_of(["TP53", "GAPDH", "ACTB", "TGFB1"]).tolist()


def test_duplicated_var_names_are_summed(ckpt):
    """Documented handling: vars mapping to one token have their counts summed by the tokenizer."""
    a = make_raw("dense")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's "Variable names are not unique"
        dup = ad.concat([a, a[:, :10]], axis=1, merge="first")  # genes 0–9 twice, var_names duplicated
        dup.obs = a.obs.copy()
        assert not dup.var_names.is_unique
        bj.pp.map_vocab(dup)
        before = dup.copy()
        bj.tl.embed(dup, checkpoint=ckpt, device="cpu")
    assert dup.uns["biomjepa"]["vocab"]["n_duplicate_tokens"] == 10
    summed = a.copy()
    summed.X[:, :10] *= 2
    bj.pp.map_vocab(summed)
    bj.tl.embed(summed, checkpoint=ckpt, device="cpu")
    np.testing.assert_allclose(dup.obsm["X_biomjepa"], summed.obsm["X_biomjepa"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(_dense(dup.X), _dense(before.X))


# --------------------------------------------------------------------------- values
def _bad(kind: str) -> ad.AnnData:
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


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_non_count_values_refused(kind, tool, ckpt):
    a = _bad(kind)
    raises_unchanged(a, ValueError, BAD_VALUES[kind], TOOLS[tool], ckpt)


@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_map_vocab_maps_genes_whatever_the_values(kind):
    """Documented handling: ``map_vocab`` maps genes only; the tools validate the values."""
    a = _bad(kind)
    del a.var["biomjepa_token"], a.uns["biomjepa"]
    X = a.X.copy()
    bj.pp.map_vocab(a)
    assert a.uns["biomjepa"]["vocab"]["n_matched"] == N_GENES
    np.testing.assert_array_equal(a.X, X)


def test_layer_with_counts_is_the_fix(ckpt):
    a = _bad("log-normalized")
    a.layers["counts"] = make_raw("dense").X
    bj.tl.embed(a, checkpoint=ckpt, device="cpu", layer="counts")
    ref = make_mapped("dense")
    bj.tl.embed(ref, checkpoint=ckpt, device="cpu")
    np.testing.assert_array_equal(a.obsm["X_biomjepa"], ref.obsm["X_biomjepa"])


# --------------------------------------------------------------------------- matrix formats
def test_dense_csr_csc_backed_agree(ckpt, tmp_path):
    results = {}
    for fmt in ("dense", "csr", "csc"):
        a = make_mapped(fmt)
        before = a.copy()
        out = bj.tl.embed(a, checkpoint=ckpt, device="cpu", copy=True)
        bj.tl.max_token(a, checkpoint=ckpt, device="cpu", groupby="group")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fewer cells than n_cells
            bj.tl.ablate_programme(a, programme(), checkpoint=ckpt, device="cpu", n_cells=4)
        np.testing.assert_array_equal(_dense(a.X), _dense(before.X))  # X untouched
        assert type(a.X) is type(before.X)
        results[fmt] = (a.uns["biomjepa"]["vocab"]["count_fraction"], out.obsm["X_biomjepa"],
                        a.obs["max_token_gene"].tolist(), a.obs["ablation_excess"].to_numpy())
    make_raw("csr").write_h5ad(tmp_path / "raw.h5ad")
    backed = ad.read_h5ad(tmp_path / "raw.h5ad", backed="r")
    bj.pp.map_vocab(backed)
    bj.tl.embed(backed, checkpoint=ckpt, device="cpu")
    results["backed"] = (backed.uns["biomjepa"]["vocab"]["count_fraction"], backed.obsm["X_biomjepa"],
                         *results["csr"][2:])
    backed.file.close()
    ref = results["csr"]
    for fmt, res in results.items():
        assert res[0] == pytest.approx(ref[0]), fmt
        np.testing.assert_allclose(res[1], ref[1], rtol=1e-5, atol=1e-6, err_msg=fmt)
        assert res[2] == ref[2], fmt
        np.testing.assert_allclose(res[3], ref[3], rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=fmt)


# --------------------------------------------------------------------------- obs keys
def _missing_key_calls(ckpt):
    screen = make_screen()
    mapped = make_mapped()
    mapped.obsm["X_rep"] = np.random.default_rng(0).normal(size=(N_CELLS, 4))
    return [
        (mapped, KeyError, r"groupby='nope' is not a column of adata\.obs", _max_token, (ckpt,), {"groupby": "nope"}),
        (mapped, KeyError, r"groupby='nope' is not a column of adata\.obs", _ablate, (ckpt,), {"groupby": "nope"}),
        (mapped, KeyError, r"groupby='nope' is not a column of adata\.obs", bj.tl.programme_dependencies,
         ({"p": programme(), "q": symbols(3, 1100)},),
         {"checkpoint": "unused", "groupby": "nope", "matched": {"p": "a", "q": "b"}}),
        (mapped, KeyError, r"Did not find \.obs\['nope'\]", bj.tl.finetune, (), {"label_key": "nope", "checkpoint": ckpt}),
        (screen, KeyError, r"adata\.obs\['nope'\] not found; pass `perturbation_key=`", bj.tl.perturbation_arithmetic,
         (), {"perturbation_key": "nope", "use_rep": "X_rep"}),
        (screen, KeyError, r"adata\.obsm\['X_nope'\] not found", bj.tl.perturbation_arithmetic, (), {"use_rep": "X_nope"}),
        (mapped, KeyError, r"obs\['nope'\] not found; pass `label_key=`", bj.bench.annotation, (),
         {"label_key": "nope", "use_reps": ["X_rep"]}),
        (mapped, KeyError, r"obs\['nope'\] not found; pass `label_key=`", bj.bench.clustering, (),
         {"label_key": "nope", "use_reps": ["X_rep"]}),
        (mapped, KeyError, r"obsm\['X_biomjepa'\] not found; run `bj\.pp\.map_vocab` and `bj\.tl\.embed` first",
         bj.bench.annotation, (), {"label_key": "group", "use_reps": ["X_biomjepa"]}),
        (mapped, KeyError, r"Layer 'nope' not found", _embed, (ckpt,), {"layer": "nope"}),
    ]


def test_obs_and_obsm_keys_that_do_not_exist(ckpt):
    for adata, exc, match, fn, args, kwargs in _missing_key_calls(ckpt):
        raises_unchanged(adata, exc, match, fn, *args, **kwargs)


# --------------------------------------------------------------------------- one-cell groups
def test_categorical_groups_with_one_cell(ckpt):
    a = make_mapped()
    bj.tl.max_token(a, checkpoint=ckpt, device="cpu", groupby="group")
    wf = a.uns["max_token"]["winner_fraction"]
    assert list(wf.index) == ["a", "b", "solo"] and np.allclose(wf.sum(axis=1), 1.0)

    with pytest.warns(UserWarning, match=r"fewer than 2 cells are skipped: \['solo'\]"):
        bj.tl.ablate_programme(a, programme(), groupby="group", checkpoint=ckpt, device="cpu", n_cells=4)
    assert set(a.uns["ablation"]["groups"]["group"]) == {"a", "b"}
    raises_unchanged(a, ValueError, "Matched group 'solo' has 1 cell", bj.tl.ablate_programme,
                     {"p": programme(), "q": symbols(3, 1100)}, groupby="group", matched={"p": "solo"},
                     checkpoint=ckpt, device="cpu")
    raises_unchanged(a, ValueError, r"fewer than 3 cells cannot be split.*'solo' \(1\)", bj.tl.finetune,
                     label_key="group", checkpoint=ckpt, device="cpu")

    a.obsm["X_rep"] = np.random.default_rng(0).normal(size=(N_CELLS, 4))
    before = a.copy()
    with pytest.warns(UserWarning, match=r"skipping classes with fewer than 2 labelled cells: \['solo'\]"):
        df = bj.bench.annotation(a, label_key="group", use_reps=["X_rep"], shots=(1,), seeds=(42,))
    assert len(df) == 3
    assert_unchanged(a, before)

    screen = make_screen()
    with pytest.warns(UserWarning, match=r"fewer than min_cells=3 cells are dropped: \['E'\]"):
        bj.tl.perturbation_arithmetic(screen, use_rep="X_rep", n_random=5)
    assert screen.uns["perturbation_arithmetic"]["summary"]["n_doubles"] == 2


# --------------------------------------------------------------------------- checkpoints
CHECKPOINT_ERRORS = {
    "foreign_vocab": (CheckpointError, "was trained on another vocabulary"),
    "truncated": (CheckpointError, "is corrupted or truncated: sha256"),
    "bad_json": (CheckpointError, "is not valid JSON.*corrupted"),
    "missing": (FileNotFoundError, "neither a registered name.*Pass `checkpoint=`"),
}


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("which", list(CHECKPOINT_ERRORS))
def test_bad_checkpoints_refused(which, tool, checkpoints):
    exc, match = CHECKPOINT_ERRORS[which]
    raises_unchanged(make_mapped(), exc, match, TOOLS[tool], checkpoints[which])


def test_non_writable_cache_dir(monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(bj.settings, "cachedir", blocker / "cache")
    url = "http://127.0.0.1:9/ckpt#sha256=" + "0" * 64  # never contacted: the cache fails first
    raises_unchanged(make_mapped(), PermissionError, r"Cannot create the cache directory.*bj\.settings\.cachedir",
                     bj.tl.embed, checkpoint=url, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")
@pytest.mark.parametrize("tool", list(TOOLS))
def test_cuda_requested_without_cuda(tool, ckpt):
    raises_unchanged(make_mapped(), RuntimeError, r"device='cuda' was requested but CUDA is not available",
                     TOOLS[tool], ckpt, device="cuda")


# --------------------------------------------------------------------------- pl and bench
def test_plots_before_their_tool():
    a = make_mapped()
    for fn, tool in [(bj.pl.max_token, "max_token"), (bj.pl.ablate_programme, "ablate_programme"),
                     (bj.pl.programme_dependencies, "programme_dependencies"),
                     (bj.pl.perturbation_arithmetic, "perturbation_arithmetic")]:
        raises_unchanged(a, KeyError, rf"Run `bj\.tl\.{tool}", fn)
    with pytest.raises(ValueError, match=r"empty bj\.bench table"):
        bj.pl.bench(pd.DataFrame(columns=["task", "rep", "setting", "seed", "metric", "value"]))


def test_bench_refuses_non_finite_and_never_modifies(ckpt):
    a = make_mapped()
    rng = np.random.default_rng(0)
    a.obsm["X_rep"] = rng.normal(size=(N_CELLS, 4))
    before = a.copy()
    bj.bench.clustering(a, label_key="group", use_reps=["X_rep"])
    bj.bench.geometry(a, use_reps=["X_rep"])
    assert_unchanged(a, before)
    a.obsm["X_rep"][0, 0] = np.nan
    raises_unchanged(a, ValueError, r"obsm\['X_rep'\] must be a finite 2-D array", bj.bench.annotation,
                     label_key="group", use_reps=["X_rep"])


def test_copy_true_leaves_input_unchanged(ckpt):
    a = make_mapped()
    before = a.copy()
    out = bj.tl.embed(a, checkpoint=ckpt, device="cpu", copy=True)
    out = bj.tl.max_token(out, checkpoint=ckpt, device="cpu", groupby="group", copy=True)
    assert "X_biomjepa" in out.obsm and "max_token_gene" in out.obs
    assert_unchanged(a, before)
    json.dumps(out.uns["biomjepa"]["params"])  # plain, serialisable parameters
