"""Weak inputs of the ``tl`` tools (issue 14): each gets a clear error naming the argument and the
fix, a warning saying what was dropped, or now simply works (dask-backed X, one streaming reader)."""

from __future__ import annotations

import anndata as ad
import numpy as np
import pandas as pd
import pytest

import biomjepa as bj
from biomjepa.data.vocab import Vocab

pytestmark = [
    pytest.mark.filterwarnings("ignore:Programme genes not in the vocabulary"),
    pytest.mark.filterwarnings("ignore:Cannot join columns"),
    pytest.mark.filterwarnings("ignore:.*no measured target gene"),
    pytest.mark.filterwarnings("ignore:.*Wilcoxon test needs"),
]


@pytest.fixture
def h5ad_path(mapped, tmp_path):
    path = tmp_path / "mapped.h5ad"
    mapped.write_h5ad(path)
    return path


# --------------------------------------------------------------------------- L1 / L3 / P1: NaN labels
def _with_nan_groups(adata, n_nan=5):
    groups = adata.obs["group"].astype(object).to_numpy()
    groups[:n_nan] = np.nan
    adata.obs["group"] = groups
    return adata


def test_max_token_drops_nan_labels_with_a_warning(mapped, tiny_checkpoint):
    _with_nan_groups(mapped)
    with pytest.warns(UserWarning, match=r"Dropping 5 of 60 cells without a label in obs\['group'\]"):
        bj.tl.max_token(mapped, groupby="group", checkpoint=tiny_checkpoint)
    A = mapped.uns["max_token"]["winner_fraction"]
    assert "nan" not in A.index and set(A.index) == {"a", "b", "c"}
    assert mapped.obs["max_token_gene"].notna().all()  # every cell still gets its winner


def test_ablate_programme_never_samples_nan_labels(mapped, tiny_checkpoint):
    _with_nan_groups(mapped)
    with pytest.warns(UserWarning, match="Dropping 5 of 60 cells"):
        bj.tl.ablate_programme(mapped, {"p": list(mapped.var_names[:3])}, groupby="group", n_cells=4,
                               checkpoint=tiny_checkpoint)
    cells = mapped.uns["ablation"]["cells"]
    assert set(cells["group"]) == {"a", "b", "c"}
    assert not set(cells["cell"]) & set(mapped.obs_names[:5])


def test_perturbation_arithmetic_drops_nan_labels():
    singles = ["A", "B", "C", "E"]
    basis = {g: np.eye(6)[i] for i, g in enumerate(singles)}
    shifts = {"control": np.zeros(6), **basis, "A+B": basis["A"] + basis["B"]}
    labels = np.repeat(list(shifts), 4).astype(object)
    X = np.stack([shifts[lab] for lab in labels]) + 1.0
    labels = np.concatenate([labels, [np.nan] * 3])
    X = np.concatenate([X, np.full((3, 6), 50.0)])  # far-away unlabelled cells must not be a condition
    a = ad.AnnData(np.ones((len(labels), 2), np.float32))
    a.var_names = ["x", "y"]
    a.obs["perturbation"] = labels
    a.obsm["X_rep"] = X
    with pytest.warns(UserWarning, match=r"Dropping 3 of 27 cells without a label in obs\['perturbation'\]"):
        bj.tl.perturbation_arithmetic(a, use_rep="X_rep", n_random=5)
    t = a.uns["perturbation_arithmetic"]["table"]
    assert list(t["double"]) == ["A+B"] and "nan" not in a.uns["perturbation_arithmetic"]["params"]["covariate"]
    np.testing.assert_allclose(t["observed"], 1.0)


# --------------------------------------------------------------------------- M4: MuData modality
def test_mudata_names_the_modality_without_map_vocab(counts_adata, tiny_checkpoint):
    mudata = pytest.importorskip("mudata")
    rna = counts_adata.copy()
    genes = rna.copy()
    genes.var["biomjepa_token"] = Vocab.default().index_of(genes.var_names)
    md = mudata.MuData({"rna": rna, "genes": genes})
    prog = {"p": list(counts_adata.var_names[:3])}
    with pytest.raises(KeyError, match=r"modality 'rna'.*map_vocab\(mdata, mod='rna'\).*\['genes'\]"):
        bj.tl.ablate_programme(md, prog, checkpoint=tiny_checkpoint, n_cells=4)
    bj.tl.ablate_programme(md, prog, checkpoint=tiny_checkpoint, n_cells=4, mod="genes")
    assert "ablation" in md.mod["genes"].uns


# --------------------------------------------------------------------------- S4: batch_size
BAD_BATCH = [0, -3, 2.7, 2.0, True, "8"]


def _tools(adata, ckpt):
    return {
        "embed": lambda bs: bj.tl.embed(adata, checkpoint=ckpt, batch_size=bs),
        "max_token": lambda bs: bj.tl.max_token(adata, checkpoint=ckpt, batch_size=bs),
        "ablate_programme": lambda bs: bj.tl.ablate_programme(adata, ["X"], checkpoint=ckpt, batch_size=bs),
        "programme_dependencies": lambda bs: bj.tl.programme_dependencies(
            adata, {"p": ["X"], "q": ["Y"]}, checkpoint=ckpt, groupby="group", matched={}, batch_size=bs
        ),
        "finetune": lambda bs: bj.tl.finetune(adata, label_key="group", checkpoint=ckpt, batch_size=bs),
    }


@pytest.mark.parametrize("bad", BAD_BATCH, ids=repr)
@pytest.mark.parametrize("tool", ["embed", "max_token", "ablate_programme", "programme_dependencies", "finetune"])
def test_every_tool_refuses_a_bad_batch_size(mapped, tiny_checkpoint, tool, bad):
    before = (list(mapped.obs.columns), set(mapped.uns), set(mapped.obsm))
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        _tools(mapped, tiny_checkpoint)[tool](bad)
    assert (list(mapped.obs.columns), set(mapped.uns), set(mapped.obsm)) == before


def test_numpy_integer_batch_size_is_fine(mapped, tiny_checkpoint):
    bj.tl.embed(mapped, checkpoint=tiny_checkpoint, batch_size=np.int64(7))
    assert mapped.uns["biomjepa"]["params"]["batch_size"] == 7


# --------------------------------------------------------------------------- C4d: copy=True on backed data
def test_copy_on_backed_data_says_what_to_do(h5ad_path, tiny_checkpoint):
    backed = ad.read_h5ad(h5ad_path, backed="r")
    with pytest.raises(ValueError, match=r"copy=True is not supported for a backed AnnData.*to_memory\(\).*copy=False"):
        bj.tl.embed(backed, checkpoint=tiny_checkpoint, copy=True)
    with pytest.raises(ValueError, match="to_memory"):
        bj.tl.max_token(backed, checkpoint=tiny_checkpoint, copy=True)
    bj.tl.embed(backed, checkpoint=tiny_checkpoint)  # copy=False works on the backed object
    assert backed.obsm["X_biomjepa"].shape[0] == backed.n_obs
    backed.file.close()


# --------------------------------------------------------------------------- C3b: dask-backed X
def _lazy_inputs(path, n_vars):
    import h5py

    pytest.importorskip("dask")
    lazy = ad.experimental.read_lazy(path)
    f = h5py.File(path, "r")
    X = ad.experimental.read_elem_lazy(f["X"], chunks=(77, n_vars))
    assert type(X).__module__.startswith("dask")
    mem = ad.read_h5ad(path)
    return {"read_lazy": lazy, "read_elem_lazy": ad.AnnData(X, obs=mem.obs.copy(), var=mem.var.copy())}, f


def test_embed_and_max_token_on_dask_backed_x_equal_in_memory(counts_adata, tiny_checkpoint, tmp_path):
    big = ad.concat([counts_adata] * 3, merge="same", index_unique="-")  # 180 cells: several 77-row dask chunks
    big.var["biomjepa_token"] = Vocab.default().index_of(big.var_names)
    path = tmp_path / "big.h5ad"
    big.write_h5ad(path)
    bj.tl.embed(big, checkpoint=tiny_checkpoint)
    bj.tl.max_token(big, groupby="group", checkpoint=tiny_checkpoint)
    inputs, f = _lazy_inputs(path, big.n_vars)
    try:
        for name, lazy in inputs.items():
            bj.tl.embed(lazy, checkpoint=tiny_checkpoint)
            np.testing.assert_allclose(lazy.obsm["X_biomjepa"], big.obsm["X_biomjepa"], atol=1e-6, err_msg=name)
            bj.tl.max_token(lazy, groupby="group", checkpoint=tiny_checkpoint)
            for col in ("max_token_gene", "max_token_share", "max_token_top_expressed"):
                np.testing.assert_array_equal(np.asarray(lazy.obs[col]), big.obs[col].to_numpy(), err_msg=name)
            pd.testing.assert_frame_equal(lazy.uns["max_token"]["winner_fraction"],
                                          big.uns["max_token"]["winner_fraction"])
    finally:
        f.close()


def test_streamed_chunks_do_not_change_results(mapped, tiny_checkpoint, monkeypatch):
    """A tool reads chunk by chunk; 7-row chunks give the same answers as one chunk."""
    from biomjepa.data import stream

    ref = bj.tl.ablate_programme(mapped, {"p": list(mapped.var_names[:3])}, groupby="group", n_cells=5,
                                 checkpoint=tiny_checkpoint, copy=True).uns["ablation"]
    monkeypatch.setattr(stream.iter_tokenized, "__kwdefaults__", {**stream.iter_tokenized.__kwdefaults__, "chunk": 7})
    monkeypatch.setattr(stream.iter_selected, "__kwdefaults__", {**stream.iter_selected.__kwdefaults__, "chunk": 7})
    out = bj.tl.ablate_programme(mapped, {"p": list(mapped.var_names[:3])}, groupby="group", n_cells=5,
                                 checkpoint=tiny_checkpoint, copy=True).uns["ablation"]
    pd.testing.assert_frame_equal(out["cells"], ref["cells"], atol=1e-6)
    pd.testing.assert_frame_equal(out["null_sets"], ref["null_sets"])


# --------------------------------------------------------------------------- T4: non-h5ad corpus files
def test_corpus_preparation_names_a_file_that_is_not_h5ad(tmp_path):
    from biomjepa.data.shards import prepare_corpus

    csv = tmp_path / "counts.csv"
    csv.write_text("gene,cell1\nINS,3\n")
    with pytest.raises(ValueError, match=r"counts\.csv is not an \.h5ad file"):
        prepare_corpus(str(csv), tmp_path / "cache")
    fake = tmp_path / "fake.h5ad"
    fake.write_text("not hdf5 at all")
    with pytest.raises(ValueError, match=r"fake\.h5ad is named \.h5ad but is not an HDF5 file"):
        prepare_corpus([str(fake)], tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match=r"missing\.h5ad does not exist"):
        prepare_corpus(str(tmp_path / "missing.h5ad"), tmp_path / "cache")
