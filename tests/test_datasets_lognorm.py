"""``bj.datasets.pbmc_chemistries()``: bundled log-normalized PBMCs (no counts) that ``input="lognorm"`` reads."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

import biomjepa as bj

ROOT = Path(__file__).resolve().parents[1]
FEW = np.r_[0:3, 300:303, 600:603]  # three cells of each chemistry


@pytest.fixture(scope="module")
def pbmc():
    return bj.datasets.pbmc_chemistries()


def test_shape_and_annotations(pbmc):
    assert pbmc.shape == (900, 19_974)
    assert pbmc.var_names.is_unique and pbmc.obs_names.is_unique
    assert list(pbmc.obs.columns) == ["chemistry", "total_counts"]
    assert list(pbmc.obs["chemistry"].cat.categories) == ["3prime_v2", "3prime_v3", "5prime"]
    assert pbmc.obs["chemistry"].value_counts().to_dict() == {
        "3prime_v2": 300,
        "3prime_v3": 300,
        "5prime": 300,
    }
    assert pbmc.uns["log1p"] == {"base": None} and "10x Genomics" in pbmc.uns["source"]
    lib = pbmc.obs["total_counts"].to_numpy()
    assert (lib >= 1000).all() and np.array_equal(lib, np.rint(lib))


def test_no_counts_anywhere_only_log1p_normalize_total(pbmc):
    assert pbmc.raw is None and len(pbmc.layers) == 0 and not pbmc.obsm and not pbmc.varm
    X = pbmc.X
    assert sparse.isspmatrix_csr(X) and X.dtype == np.float32 and X.data.min() > 0
    assert np.mean(X.data != np.rint(X.data)) > 0.99  # not counts
    E = X.astype(np.float64)
    E.data = np.expm1(E.data)
    np.testing.assert_allclose(np.asarray(E.sum(axis=1)).ravel(), 1e4, rtol=1e-4)  # normalize_total(1e4)
    C = sparse.diags(pbmc.obs["total_counts"].to_numpy(np.float64) / 1e4) @ E  # the counts they came from
    assert np.abs(C.data - np.rint(C.data)).max() < 0.01
    assert np.rint(C.data).min() == 1


def test_embeds_with_input_lognorm_and_known_or_estimated_library(pbmc):
    few = pbmc[FEW].copy()
    bj.pp.map_vocab(few)
    with pytest.raises(ValueError, match="does not look like raw counts"):
        bj.tl.embed(few, device="cpu")  # input="counts" is the default: refused
    out = bj.tl.embed(few, input="lognorm", library_size_key="total_counts", device="cpu", copy=True)
    p = out.uns["biomjepa"]["params"]
    assert p["input"] == "lognorm" and p["library_size_key"] == "total_counts"
    assert p["target_sum"] == pytest.approx(1e4, rel=1e-5)
    Z = out.obsm["X_biomjepa"]
    assert Z.shape[0] == len(FEW) and np.isfinite(Z).all()
    with pytest.warns(UserWarning, match="estimated"):
        est = bj.tl.embed(few, input="lognorm", device="cpu", copy=True)
    assert est.uns["biomjepa"]["params"]["library_size_key"] == "estimated"
    np.testing.assert_array_equal(
        est.obsm["X_biomjepa"], Z
    )  # every cell has a one-count gene: estimate exact


@pytest.mark.shared
def test_rebuilds_from_the_shared_raw_counts_and_embeds_like_them(pbmc, shared_data):
    import anndata as ad

    spec = importlib.util.spec_from_file_location(
        "make_pbmc_chemistries", ROOT / "scripts" / "make_pbmc_chemistries.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    source = shared_data / "scrna" / "pbmc_10x_1kv2_1kv3_5prime_2860cells_raw.h5ad"
    rebuilt = script.build(source)
    assert (rebuilt.obs_names == pbmc.obs_names).all() and (rebuilt.var_names == pbmc.var_names).all()
    # the same cells and stored entries; values within float32 rounding (scanpy/numpy versions may differ by 1 ulp)
    assert (rebuilt.X.indptr == pbmc.X.indptr).all() and (rebuilt.X.indices == pbmc.X.indices).all()
    np.testing.assert_allclose(rebuilt.X.data, pbmc.X.data, rtol=1e-6, atol=1e-6)
    raw = ad.read_h5ad(source)[pbmc.obs_names[FEW]].copy()
    np.testing.assert_array_equal(
        np.asarray(raw.X.sum(axis=1)).ravel(), pbmc.obs["total_counts"].to_numpy()[FEW]
    )
    few = pbmc[FEW].copy()
    for a in (raw, few):
        bj.pp.map_vocab(a)
    bj.tl.embed(raw, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # known library sizes: no estimate warning
        bj.tl.embed(few, input="lognorm", library_size_key="total_counts", device="cpu")
    np.testing.assert_array_equal(few.obsm["X_biomjepa"], raw.obsm["X_biomjepa"])
