"""``embed_atlas`` in one process: store layout, agreement with ``bj.tl.embed``, resume, obsm, errors."""

from __future__ import annotations

import numpy as np
import pytest

from biomjepa.embed import embed_atlas, read_atlas
from biomjepa.embed.run import FAIL_ENV
from biomjepa.embed.store import AtlasStore


def _run(inputs, store, ckpt, **kw):
    return embed_atlas(inputs, store, checkpoint=ckpt, block_rows=64, device="cpu", rank=0, world=1, **kw)


def _arrays(store) -> dict[str, np.ndarray]:
    return {k: a.obsm["X_biomjepa"] for k, a in read_atlas(store).items()}


@pytest.fixture(scope="module")
def reference(atlas_inputs, tiny_checkpoint, tmp_path_factory):
    store = tmp_path_factory.mktemp("ref") / "ref.zarr"
    out = _run(atlas_inputs, store, tiny_checkpoint)
    return store, out


def test_store_layout_and_values(reference, atlas_inputs, tiny_checkpoint):
    import anndata as ad

    import biomjepa as bj

    store, out = reference
    assert out["complete"] and out["blocks"] == 5 + 3 and out["cells"] == 470
    res = read_atlas(store)
    assert list(res) == ["donor_a", "donor_b"]
    for path, emb in zip(atlas_inputs, res.values()):
        adata = ad.read_h5ad(path)
        assert list(emb.obs_names) == list(adata.obs_names)
        bj.pp.map_vocab(adata)
        bj.tl.embed(adata, checkpoint=tiny_checkpoint, device="cpu")
        Z = emb.obsm["X_biomjepa"]
        assert Z.dtype == np.float32 and np.isfinite(Z).all()
        np.testing.assert_allclose(Z, adata.obsm["X_biomjepa"], rtol=1e-4, atol=1e-5)
        assert (emb.obs["n_genes"].to_numpy() > 0).all()
    assert res["donor_a"].uns["biomjepa"]["params"]["block_rows"] == 64


def test_rerun_skips_everything(reference, atlas_inputs, tiny_checkpoint):
    store, _ = reference
    before = _arrays(store)
    out = _run(atlas_inputs, store, tiny_checkpoint)
    assert out["blocks"] == 0 and out["complete"]
    for k, Z in _arrays(store).items():
        assert np.array_equal(Z, before[k])


def test_killed_run_resumes_bit_identical(reference, atlas_inputs, tiny_checkpoint, tmp_path, monkeypatch):
    store = tmp_path / "s.zarr"
    monkeypatch.setenv(FAIL_ENV, "3")
    with pytest.raises(RuntimeError, match="testing hook"):
        _run(atlas_inputs, store, tiny_checkpoint)
    st = AtlasStore(store)
    assert st.missing() == {"donor_a": 2, "donor_b": 3} and not st.root.attrs["complete"]
    with pytest.raises(ValueError, match="not complete"):
        read_atlas(store)
    monkeypatch.delenv(FAIL_ENV)
    out = _run(atlas_inputs, store, tiny_checkpoint)
    assert out["blocks"] == 5 and out["complete"]
    ref = _arrays(reference[0])
    for k, Z in _arrays(store).items():
        assert np.array_equal(Z, ref[k]), k


def test_half_written_block_is_redone(reference, atlas_inputs, tiny_checkpoint, tmp_path, monkeypatch):
    """A kill between a block's rows and its done record: the block counts as not done."""
    store = tmp_path / "s.zarr"
    monkeypatch.setenv(FAIL_ENV, "1")
    with pytest.raises(RuntimeError):
        _run(atlas_inputs, store, tiny_checkpoint)
    st = AtlasStore(store)
    st.root["donor_a"]["X_biomjepa"][64:128] = 0.0  # rows of block 1 written, record not
    monkeypatch.delenv(FAIL_ENV)
    assert _run(atlas_inputs, store, tiny_checkpoint)["blocks"] == 7
    ref = _arrays(reference[0])
    assert all(np.array_equal(Z, ref[k]) for k, Z in _arrays(store).items())


def test_resume_refuses_a_different_command(reference, atlas_inputs, tiny_checkpoint):
    store, _ = reference
    with pytest.raises(ValueError, match="block_rows: store has 64, this run 32"):
        embed_atlas(atlas_inputs, store, checkpoint=tiny_checkpoint, block_rows=32, device="cpu", rank=0, world=1)
    with pytest.raises(ValueError, match="inputs: store has"):
        _run(atlas_inputs[:1], store, tiny_checkpoint)


def test_write_obsm(atlas_inputs, tiny_checkpoint, reference, tmp_path):
    """Also issue 24: the copy was `.IN.h5ad.<pid>.tmp.h5ad`; a symlink planted under that name redirected it."""
    import os
    import shutil
    from pathlib import Path

    import anndata as ad

    inputs = [shutil.copy(p, tmp_path) for p in atlas_inputs]
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    for p in map(Path, inputs):
        p.with_name(f".{p.name}.{os.getpid()}.tmp.h5ad").symlink_to(outside)
    store = tmp_path / "s.zarr"
    _run(inputs, store, tiny_checkpoint, write_obsm=True)
    assert outside.read_text() == "precious"
    ref = _arrays(reference[0])
    for path, name in zip(inputs, ref):
        adata = ad.read_h5ad(path)
        assert np.array_equal(adata.obsm["X_biomjepa"], ref[name])
        assert adata.uns["biomjepa"]["params"]["block_rows"] == 64
        assert adata.n_obs == len(ref[name]) and adata.X.nnz > 0
    assert _run(inputs, store, tiny_checkpoint, write_obsm=True)["blocks"] == 0  # inputs still recognised


def test_bad_inputs_and_stores(atlas_inputs, tiny_checkpoint, tmp_path):
    (tmp_path / "notes.h5ad").write_text("not hdf5")
    (tmp_path / "table.csv").write_text("a,b\n")
    for bad, msg in [("missing.h5ad", "no such file"), ("notes.h5ad", "not an .h5ad"), ("table.csv", "not an .h5ad"),
                     ("nothing*.h5ad", "no file matches")]:
        with pytest.raises((OSError, ValueError), match=msg):
            _run([str(tmp_path / bad)], tmp_path / "s.zarr", tiny_checkpoint)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _run(atlas_inputs, tmp_path / "no_dir" / "s.zarr", tiny_checkpoint)
    with pytest.raises(ValueError, match="not a directory"):
        _run(atlas_inputs, tmp_path / "table.csv", tiny_checkpoint)
    (tmp_path / "other.zarr").mkdir()
    (tmp_path / "other.zarr" / "precious.txt").write_text("x")
    with pytest.raises(ValueError, match="not a biomjepa atlas store"):
        _run(atlas_inputs, tmp_path / "other.zarr", tiny_checkpoint)
    assert (tmp_path / "other.zarr" / "precious.txt").exists()
    with pytest.raises(ValueError, match="single process"):
        embed_atlas(atlas_inputs, tmp_path / "x.zarr", overwrite=True, rank=0, world=2)


def test_glob_and_duplicate_stems(tmp_path, tiny_checkpoint, make_input):
    (tmp_path / "b").mkdir()
    a = make_input(tmp_path / "x.h5ad", 20, 0, 3)
    b = make_input(tmp_path / "b" / "x.h5ad", 30, 50, 4)
    out = _run([str(tmp_path / "*.h5ad"), str(b)], tmp_path / "s.zarr", tiny_checkpoint)
    assert out["cells"] == 50
    res = read_atlas(tmp_path / "s.zarr")
    assert {k: v.n_obs for k, v in res.items()} == {"x": 20, "x_2": 30}
    assert res["x"].obs_names[0].startswith("x_cell") and a.exists()
