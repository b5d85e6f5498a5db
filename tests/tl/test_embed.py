"""``bj.tl.embed``: contract, determinism, storage modes and bad input."""

from __future__ import annotations

import anndata as ad
import numpy as np
import pytest
from scipy import sparse

import biomjepa as bj


@pytest.fixture
def mapped(counts_adata):
    bj.pp.map_vocab(counts_adata)
    return counts_adata


def test_embed_writes_documented_keys_only(mapped, tiny_checkpoint):
    before_X = mapped.X.copy()
    before_obs, before_var = mapped.obs.copy(), mapped.var.copy()
    bj.tl.embed(mapped, checkpoint=tiny_checkpoint)
    Z = mapped.obsm["X_biomjepa"]
    assert Z.shape == (60, 64) and Z.dtype == np.float32 and np.isfinite(Z).all()
    p = mapped.uns["biomjepa"]["params"]
    assert p["checkpoint_sha256"] and p["device"] == "cpu" and p["dtype"] == "float32"
    assert p["vocab_hash"] == bj.data.vocab.Vocab.default().hash
    assert (before_X != mapped.X).nnz == 0
    assert mapped.obs.equals(before_obs) and mapped.var.equals(before_var)


def test_batch_size_and_order_invariance(mapped, tiny_checkpoint):
    outs = []
    for bs in (1, 7, 64):
        a = bj.tl.embed(mapped, checkpoint=tiny_checkpoint, batch_size=bs, copy=True)
        outs.append(a.obsm["X_biomjepa"])
    old = bj.settings.max_batch_tokens
    bj.settings.max_batch_tokens = 200  # forces tiny batches on long cells
    try:
        outs.append(bj.tl.embed(mapped, checkpoint=tiny_checkpoint, batch_size=64, copy=True).obsm["X_biomjepa"])
    finally:
        bj.settings.max_batch_tokens = old
    perm = np.random.default_rng(1).permutation(mapped.n_obs)
    shuffled = bj.tl.embed(mapped[perm].copy(), checkpoint=tiny_checkpoint, batch_size=7, copy=True)
    outs.append(shuffled.obsm["X_biomjepa"][np.argsort(perm)])
    for other in outs[1:]:
        np.testing.assert_allclose(other, outs[0], atol=1e-5, rtol=0)


def test_dense_csc_backed_and_mudata_agree(mapped, tiny_checkpoint, tmp_path):
    ref = bj.tl.embed(mapped, checkpoint=tiny_checkpoint, copy=True).obsm["X_biomjepa"]
    for X in (mapped.X.toarray(), sparse.csc_matrix(mapped.X)):
        a = mapped.copy()
        a.X = X
        np.testing.assert_allclose(bj.tl.embed(a, checkpoint=tiny_checkpoint, copy=True).obsm["X_biomjepa"], ref, atol=1e-5)
    mapped.write_h5ad(tmp_path / "a.h5ad")
    backed = ad.read_h5ad(tmp_path / "a.h5ad", backed="r")
    bj.tl.embed(backed, checkpoint=tiny_checkpoint)
    np.testing.assert_allclose(backed.obsm["X_biomjepa"], ref, atol=1e-5)
    mudata = pytest.importorskip("mudata")
    md = mudata.MuData({"rna": mapped.copy()})
    bj.tl.embed(md, checkpoint=tiny_checkpoint)
    np.testing.assert_allclose(md.mod["rna"].obsm["X_biomjepa"], ref, atol=1e-5)


def test_layer_and_key_added(mapped, tiny_checkpoint):
    a = mapped.copy()
    a.layers["counts"] = a.X.copy()
    a.X = sparse.csr_matrix(np.log1p(a.X.toarray()))
    with pytest.raises(ValueError, match="layer="):
        bj.tl.embed(a, checkpoint=tiny_checkpoint)
    bj.tl.embed(a, checkpoint=tiny_checkpoint, layer="counts", key_added="X_bj")
    assert "X_bj" in a.obsm and a.uns["X_bj"]["params"]["layer"] == "counts"


def test_requires_map_vocab(counts_adata, tiny_checkpoint):
    with pytest.raises(KeyError, match="map_vocab"):
        bj.tl.embed(counts_adata, checkpoint=tiny_checkpoint)


@pytest.mark.parametrize("bad", [np.nan, -1.0, np.inf])
def test_bad_values_leave_adata_unchanged(mapped, tiny_checkpoint, bad):
    X = mapped.X.toarray()
    X[3, 2] = bad
    a = mapped.copy()
    a.X = sparse.csr_matrix(X)
    keys = set(a.obsm), set(a.uns)
    with pytest.raises(ValueError):
        bj.tl.embed(a, checkpoint=tiny_checkpoint)
    assert (set(a.obsm), set(a.uns)) == keys


def test_empty_cell_error_names_the_fix(mapped, tiny_checkpoint):
    X = mapped.X.toarray()
    X[5] = 0
    a = mapped.copy()
    a.X = sparse.csr_matrix(X)
    with pytest.raises(ValueError, match="filter_cells"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint)
    assert "X_biomjepa" not in a.obsm


def test_cuda_requested_without_cuda(mapped, tiny_checkpoint):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        bj.tl.embed(mapped, checkpoint=tiny_checkpoint, device="cuda")


@pytest.mark.shared
@pytest.mark.slow
def test_real_baron_and_kang(shared_data, tiny_checkpoint):
    baron = ad.read_h5ad(shared_data / "scrna" / "baron2016_pancreas_2142cells_raw.h5ad")[:300].copy()
    bj.pp.map_vocab(baron)
    bj.tl.embed(baron, checkpoint=tiny_checkpoint)
    assert baron.obsm["X_biomjepa"].shape == (300, 64)
    assert baron.uns["biomjepa"]["params"]["n_genes_median"] > 1000
    kang = ad.read_h5ad(shared_data / "scrna" / "kang2018_pbmc_8684cells_raw.h5ad")[:300].copy()
    bj.pp.map_vocab(kang)
    assert kang.uns["biomjepa"]["vocab"]["id_type"].lower().startswith("ensembl")
    bj.tl.embed(kang, checkpoint=tiny_checkpoint)
    assert np.isfinite(kang.obsm["X_biomjepa"]).all()
