"""``bj.datasets.pancreas()``: the bundled demo cells carry gene symbols, not R's ``make.names`` spellings (issue 46)."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

import biomjepa as bj
from biomjepa.data.idtable import r_names

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pancreas():
    return bj.datasets.pancreas()


def test_map_vocab_on_the_demo_does_not_warn_about_r_spellings(pancreas):
    """The package's own demo must not ship names its own check flags (it warned about 75 on every call)."""
    adata = pancreas.copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bj.pp.map_vocab(adata)
    r_spelling = [str(w.message) for w in caught if "make.names" in str(w.message)]
    assert not r_spelling, r_spelling
    report = adata.uns["biomjepa"]["vocab"]
    assert report["n_r_names_unmapped"] == 0 and report["r_names_examples"] == []
    # no name left that the check recognises, even one an alias maps (NKX2.2 → NKX2-2)
    assert not r_names(adata.var_names.to_series(), np.full(adata.n_vars, -1)).any()
    assert adata.var.loc[["HLA-A", "HLA-DRA", "NKX2-2", "ERV3-1"], "biomjepa_token"].ge(0).all()


def test_the_source_spelling_is_kept_for_the_renamed_genes(pancreas):
    assert pancreas.shape == (1074, 20_125) and pancreas.var_names.is_unique
    assert list(pancreas.var.columns) == ["original_name"]
    renamed = pancreas.var["original_name"].dropna().astype(str)
    assert len(renamed) == 128
    assert renamed["HLA-A"] == "HLA.A" and renamed["NKX2-2"] == "NKX2.2"
    np.testing.assert_array_equal(renamed.index.str.replace("-", ".", regex=False), renamed.to_numpy())
    assert "ABHD14A.ACY1" in pancreas.var_names  # not a vocabulary symbol: kept as the source spells it


@pytest.mark.shared
def test_rebuilds_from_the_shared_file(pancreas, shared_data):
    """``scripts/make_demo_data.py`` rebuilds the bundled file: same cells, counts, obs and var."""
    import anndata as ad

    spec = importlib.util.spec_from_file_location("make_demo_data", ROOT / "scripts" / "make_demo_data.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rebuilt = script.build_demo(ad.read_h5ad(shared_data / "scrna" / "baron2016_pancreas_2142cells_raw.h5ad"))
    assert (rebuilt.obs_names == pancreas.obs_names).all() and (rebuilt.var_names == pancreas.var_names).all()
    assert rebuilt.obs.equals(pancreas.obs) and rebuilt.var.equals(pancreas.var)
    assert (rebuilt.X != pancreas.X).nnz == 0 and rebuilt.X.dtype == pancreas.X.dtype == np.float32
    assert list(pancreas.obs_names) == bj.datasets.heldout_cells("baron2016_pancreas")
