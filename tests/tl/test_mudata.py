"""MuData input for every ``bj.tl`` tool: the ``mod`` modality is read and receives the results
(muon's convention), embeddings also go to the MuData's ``obsm``; and a muon WNN workflow on top."""

from __future__ import annotations

import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest

import biomjepa as bj
from biomjepa.data.vocab import Vocab

mudata = pytest.importorskip("mudata")


def _protein(obs_names, seed=0) -> ad.AnnData:
    """5 antibody counts per cell, high on one of three markers by the cell's group (a/b/c)."""
    rng = np.random.default_rng(seed)
    group = np.array([int(name[4:]) // 20 for name in obs_names])
    lam = np.full((len(obs_names), 5), 3.0)
    lam[np.arange(len(obs_names)), group] = 40.0
    p = ad.AnnData(rng.poisson(lam).astype(np.float32))
    p.obs_names, p.var_names = list(obs_names), [f"CD{i}" for i in range(5)]
    return p


@pytest.fixture
def mdata(counts_adata):
    """``rna`` = cells 0–49 (mapped), ``prot`` = cells 10–59: 60 cells, 10 of them without RNA."""
    rna = counts_adata[:50].copy()
    bj.pp.map_vocab(rna)
    return mudata.MuData({"rna": rna, "prot": _protein(counts_adata.obs_names[10:])})


def test_embed_writes_modality_and_mudata_obsm(mdata, tiny_checkpoint):
    ref = bj.tl.embed(mdata["rna"].copy(), checkpoint=tiny_checkpoint, copy=True).obsm["X_biomjepa"]
    out = bj.tl.embed(mdata, checkpoint=tiny_checkpoint, copy=True)
    assert isinstance(out, mudata.MuData) and "X_biomjepa" not in mdata["rna"].obsm  # copy leaves input alone
    np.testing.assert_allclose(out["rna"].obsm["X_biomjepa"], ref, atol=1e-5)
    assert out["rna"].uns["biomjepa"]["params"]["checkpoint_sha256"]
    joint = out.obsm["X_biomjepa"]
    assert joint.shape == (60, ref.shape[1]) and joint.dtype == np.float32
    rows = out.obs_names.get_indexer(out["rna"].obs_names)
    np.testing.assert_allclose(joint[rows], ref, atol=1e-5)
    assert np.isnan(np.delete(joint, rows, axis=0)).all()  # the 10 protein-only cells
    assert "X_biomjepa" not in out["prot"].obsm


def test_other_modality_and_errors(mdata, tiny_checkpoint):
    rna = mdata["rna"]
    md = mudata.MuData({"gex": rna.copy(), "prot": mdata["prot"]})
    bj.tl.embed(md, mod="gex", checkpoint=tiny_checkpoint)
    assert "X_biomjepa" in md["gex"].obsm and "X_biomjepa" in md.obsm
    with pytest.raises(KeyError, match="no modality 'rna'"):
        bj.tl.embed(md, checkpoint=tiny_checkpoint)
    with pytest.raises(KeyError, match="map_vocab"):
        bj.tl.embed(md, mod="prot", checkpoint=tiny_checkpoint)
    with pytest.raises(ValueError, match="only meaningful for MuData"):
        bj.tl.embed(rna, mod="rna", checkpoint=tiny_checkpoint)


def _takes_mod(name: str) -> bool:
    import inspect

    return "mod" in inspect.signature(getattr(bj.tl, name)).parameters


def _same_uns(a: dict, b: dict) -> None:
    for key, value in a.items():
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(value, b[key])
        elif key != "params":
            assert value == b[key] or (isinstance(value, float) and np.isnan(value) and np.isnan(b[key]))


def _most_detected(adata, n: int) -> list[str]:
    detected = (adata.X.toarray() > 0).mean(0)[:300]  # the first 300 vars are vocabulary genes
    return list(adata.var_names[:300][np.argsort(-detected, kind="stable")][:n])


def test_ablate_programme_on_mudata(mdata, tiny_checkpoint):
    genes = _most_detected(mdata["rna"], 6)
    kw = dict(groupby="group", n_cells=4, checkpoint=tiny_checkpoint, n_bins=3)
    ref = bj.tl.ablate_programme(mdata["rna"].copy(), genes, copy=True, **kw)
    out = bj.tl.ablate_programme(mdata, genes, copy=True, **kw)
    assert "ablation" in out["rna"].uns and "ablation" not in out.uns
    _same_uns(ref.uns["ablation"], out["rna"].uns["ablation"])
    np.testing.assert_array_equal(ref.obs["ablation_excess"], out["rna"].obs["ablation_excess"])


def test_finetune_on_mudata(mdata, tiny_checkpoint):
    kw = dict(label_key="group", checkpoint=tiny_checkpoint, batch_size=8, random_state=0)
    ref = bj.tl.finetune(mdata["rna"].copy(), copy=True, **kw)
    out = bj.tl.finetune(mdata, copy=True, **kw)
    key = "biomjepa_finetune"
    np.testing.assert_allclose(out["rna"].obsm[f"{key}_proba"], ref.obsm[f"{key}_proba"], atol=1e-5)
    assert out["rna"].obs[f"{key}_prediction"].equals(ref.obs[f"{key}_prediction"])
    assert out["rna"].uns[key]["classes"] == ref.uns[key]["classes"]


def test_perturbation_arithmetic_on_mudata():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_perturb import _toy

    toy = _toy()
    md = mudata.MuData(
        {"rna": toy.copy(), "prot": ad.AnnData(np.ones((toy.n_obs, 2), np.float32), obs=toy.obs[[]])}
    )
    with pytest.warns(UserWarning, match="no measured target"):
        ref = bj.tl.perturbation_arithmetic(toy, use_rep="X_rep", n_random=20, copy=True)
    with pytest.warns(UserWarning, match="no measured target"):
        bj.tl.perturbation_arithmetic(md, use_rep="X_rep", n_random=20)
    pd.testing.assert_frame_equal(
        md["rna"].uns["perturbation_arithmetic"]["table"], ref.uns["perturbation_arithmetic"]["table"]
    )


def test_programme_dependencies_on_mudata(counts_adata, tmp_path):
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
    from _kit import tiny_config

    from biomjepa.train import pretrain

    torch.set_num_threads(1)
    run = pretrain(tiny_config(tmp_path, steps=2, run_name="dep"))
    bj.pp.map_vocab(counts_adata)
    names = _most_detected(counts_adata, 10)
    progs = {"p1": names[:5], "p2": names[5:]}
    kw = dict(
        checkpoint=run, groupby="group", matched={"p1": "a", "p2": "b"}, n_random=1, n_cells=4, device="cpu"
    )
    ref = bj.tl.programme_dependencies(counts_adata, progs, copy=True, **kw)
    md = mudata.MuData({"rna": counts_adata, "prot": _protein(counts_adata.obs_names)})
    bj.tl.programme_dependencies(md, progs, **kw)
    pd.testing.assert_frame_equal(
        md["rna"].uns["programme_dependencies"]["matrix"], ref.uns["programme_dependencies"]["matrix"]
    )


def test_max_token_on_mudata(mdata, tiny_checkpoint):
    ref = bj.tl.max_token(mdata["rna"].copy(), groupby="group", checkpoint=tiny_checkpoint, copy=True)
    bj.tl.max_token(mdata, groupby="group", checkpoint=tiny_checkpoint)
    assert mdata["rna"].obs["max_token_gene"].equals(ref.obs["max_token_gene"])
    pd.testing.assert_frame_equal(
        mdata["rna"].uns["max_token"]["winner_fraction"], ref.uns["max_token"]["winner_fraction"]
    )


@pytest.mark.slow
def test_muon_wnn_on_biomjepa_and_protein(counts_adata, tiny_checkpoint):
    """The CITE-seq workflow: embed RNA, per-modality neighbours, muon WNN, Leiden, UMAP."""
    mu = pytest.importorskip("muon")
    sc = pytest.importorskip("scanpy")
    md = mudata.MuData({"rna": counts_adata, "prot": _protein(counts_adata.obs_names)})
    bj.pp.map_vocab(md)
    bj.tl.embed(md, checkpoint=tiny_checkpoint)
    sc.pp.neighbors(md["rna"], use_rep="X_biomjepa", n_neighbors=10)
    mu.prot.pp.clr(md["prot"])
    sc.pp.pca(md["prot"], n_comps=4)
    sc.pp.neighbors(md["prot"], n_neighbors=10)
    # muon builds a corrupt matrix (and crashes) when n_multineighbors >= n_obs: keep it small here
    mu.pp.neighbors(md, key_added="wnn", n_multineighbors=20)
    mu.tl.umap(md, neighbors_key="wnn", random_state=0)
    sc.tl.leiden(
        md, neighbors_key="wnn", flavor="igraph", n_iterations=2, directed=False, key_added="leiden_wnn"
    )
    assert md.obsp["wnn_connectivities"].shape == (60, 60) and md.obsm["X_umap"].shape == (60, 2)
    assert {"rna:mod_weight", "prot:mod_weight"} <= set(md.obs.columns)
    # the protein markers separate the three groups; WNN keeps that structure
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(counts_adata.obs["group"], md.obs["leiden_wnn"]) > 0.5


# --------------------------------------------------------------------------- a modality without map_vocab
@pytest.mark.filterwarnings("ignore:Programme genes not in the vocabulary")
@pytest.mark.filterwarnings("ignore:Cannot join columns")
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
