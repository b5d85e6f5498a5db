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


@pytest.mark.slow
def test_write_obsm(atlas_inputs, tiny_checkpoint, reference, tmp_path):
    """Also issue 24: the copy was `.IN.h5ad.<pid>.tmp.h5ad`; a symlink planted under that name redirected it."""
    import os
    import shutil
    from pathlib import Path

    import anndata as ad

    inputs = [shutil.copy(p, tmp_path) for p in atlas_inputs]
    earlier = ad.read_h5ad(inputs[0])  # issue 57: an earlier embedding's record is replaced whole, map_vocab's stays
    earlier.uns["biomjepa"] = {"vocab": {"n_vars": 7}, "adapt": {"steps": 3}, "params": {"old": "yes"}}
    earlier.write_h5ad(inputs[0])
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
        record = adata.uns["biomjepa"]
        assert record["params"]["tool"] == "biomjepa embed" and "old" not in record["params"] and "adapt" not in record
        assert adata.n_obs == len(ref[name]) and adata.X.nnz > 0
    assert _run(inputs, store, tiny_checkpoint, write_obsm=True)["blocks"] == 0  # inputs still recognised
    assert ad.read_h5ad(inputs[0]).uns["biomjepa"]["vocab"] == {"n_vars": 7}


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


# -- issue 24: verify, then trust -------------------------------------------------------------------------
def _damage(store, how: str) -> None:
    """Damage block 1 of donor_a: a flipped byte in its rows' chunk, the chunk deleted, its done record garbled/deleted."""
    g = store / "donor_a"
    if how == "flip_chunk":
        p = g / "X_biomjepa" / "c" / "1" / "0"
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF
        p.write_bytes(bytes(data))
    elif how == "delete_chunk":
        (g / "X_biomjepa" / "c" / "1" / "0").unlink()
    elif how == "garble_done":
        (g / "done" / "c" / "1").write_bytes(b"\x00garbage\xff")
    elif how == "delete_done":
        (g / "done" / "c" / "1").unlink()
    elif how == "flip_names":
        p = g / "obs_names" / "c" / "1"
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0x01
        p.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip_chunk", "delete_chunk", "garble_done", "delete_done", "flip_names"])
def test_damaged_block_is_refused_on_read_and_repaired_by_a_rerun(reference, atlas_inputs, tiny_checkpoint, tmp_path,
                                                                  how):
    import shutil

    from biomjepa.embed.store import DamagedStore

    store = tmp_path / "s.zarr"
    shutil.copytree(reference[0], store)
    _damage(store, how)
    with pytest.raises(DamagedStore, match=rf"{store} is damaged.*donor_a block 1 \(rows 64..128\).*command again"):
        read_atlas(store)
    assert read_atlas(store, "donor_b").n_obs == 170  # an intact input still reads
    out = _run(atlas_inputs, store, tiny_checkpoint)
    assert out["repaired"] == ["donor_a block 1"] and out["blocks"] == 1 and out["complete"]
    ref = _arrays(reference[0])
    res = read_atlas(store)
    for k in ref:
        assert np.array_equal(res[k].obsm["X_biomjepa"], ref[k])
    assert list(res["donor_a"].obs_names) == list(read_atlas(reference[0], "donor_a").obs_names)
    assert _run(atlas_inputs, store, tiny_checkpoint)["repaired"] == []


@pytest.mark.slow
def test_the_command_says_it_repaired(reference, atlas_inputs, tiny_checkpoint, tmp_path, atlas_cli):
    import shutil

    store = tmp_path / "s.zarr"
    shutil.copytree(reference[0], store)
    _damage(store, "delete_chunk")
    r = atlas_cli([*atlas_inputs, "--store", str(store), "--checkpoint", tiny_checkpoint, "--block-rows", "64",
                   "--device", "cpu"])
    assert r.returncode == 0, r.stderr
    assert f"{store}: repaired 1 damaged block(s), embedded again: donor_a block 1" in r.stdout
    assert "complete, 470 cells" in r.stdout


def test_a_store_without_checksums_is_still_verified(reference, tmp_path):
    """Stores written before checksums: readable, every row written."""
    import shutil

    from biomjepa.embed.store import DamagedStore

    store = tmp_path / "old.zarr"
    shutil.copytree(reference[0], store)
    for name in ("donor_a", "donor_b"):
        shutil.rmtree(store / name / "checksum")
    assert np.array_equal(read_atlas(store, "donor_a").obsm["X_biomjepa"], _arrays(reference[0])["donor_a"])
    _damage(store, "delete_chunk")
    with pytest.raises(DamagedStore, match=r"donor_a block 1 .*rows missing"):
        read_atlas(store)


def test_read_atlas_names_a_missing_or_foreign_store(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no atlas store at .*nothing\.zarr.*biomjepa embed"):
        read_atlas(tmp_path / "nothing.zarr")
    (tmp_path / "damaged.zarr").mkdir()
    (tmp_path / "damaged.zarr" / "zarr.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"damaged.zarr cannot be opened.*overwrite=True"):
        read_atlas(tmp_path / "damaged.zarr")


@pytest.mark.slow
def test_an_input_changed_during_the_run_leaves_the_store_incomplete(atlas_inputs, tiny_checkpoint, tmp_path,
                                                                     monkeypatch):
    import os
    import shutil

    import biomjepa.embed.run as run

    inputs = [shutil.copy(p, tmp_path) for p in atlas_inputs]
    real = run._embed_blocks

    def edited_meanwhile(*args, **kw):
        cells = real(*args, **kw)
        st = os.stat(inputs[1])
        os.utime(inputs[1], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # another process rewrote it
        return cells

    monkeypatch.setattr(run, "_embed_blocks", edited_meanwhile)
    store = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match=r"donor_b.h5ad changed while the atlas was being embedded.*overwrite=True"):
        _run(inputs, store, tiny_checkpoint)
    assert not AtlasStore(store).root.attrs["complete"]
    monkeypatch.setattr(run, "_embed_blocks", real)
    with pytest.raises(ValueError, match="changed since the store was made"):
        _run(inputs, store, tiny_checkpoint)
    assert _run(inputs, store, tiny_checkpoint, overwrite=True)["complete"]


# -- issue 30: the atlas command reads .raw and log-normalized values as `biomjepa embed` does, in flags ----
@pytest.mark.filterwarnings("ignore:The input measures only", "ignore:input='lognorm' without library_size_key")
def test_use_raw_and_lognorm_inputs_embed_like_the_tools(atlas_inputs, tiny_checkpoint, tmp_path, capsys):
    import anndata as ad
    from scipy import sparse

    import biomjepa as bj
    from biomjepa.cli import main

    a = ad.read_h5ad(atlas_inputs[1])
    X = a.X.toarray()
    X[:, 0] = 1  # a gene with one count in every cell, as droplet cells have: the library size estimate is exact
    a.X = sparse.csr_matrix(X)
    processed = a.copy()
    processed.raw = a
    X = a.X.toarray().astype(np.float64)
    processed.X = sparse.csr_matrix(np.log1p(1e4 * X / X.sum(axis=1, keepdims=True)).astype(np.float32))
    processed.obs["total_counts"] = X.sum(axis=1)
    path = tmp_path / "processed.h5ad"
    processed.write_h5ad(path)
    cli = ["embed", str(path), "--checkpoint", tiny_checkpoint, "--device", "cpu", "--block-rows", "64"]
    assert main([*cli, "--store", str(tmp_path / "x.zarr")]) == 1
    err = capsys.readouterr().err
    assert f"{path}: X does not look like raw counts" in err and "pass --use-raw." in err
    assert "use_raw=True" not in err and "layer=" not in err and "map_vocab" not in err
    assert not (tmp_path / "x.zarr").exists()  # refused before the store was made with the wrong settings
    with pytest.raises(SystemExit) as exc:  # a usage error, before any work
        main([*cli, "--use-raw", "--layer", "counts", "--store", str(tmp_path / "y.zarr")])
    assert exc.value.code == 2 and "pass either --use-raw or --layer, not both" in capsys.readouterr().err
    bj.pp.map_vocab(a)
    want = bj.tl.embed(a, checkpoint=tiny_checkpoint, device="cpu", copy=True)
    for flags in (["--use-raw"], ["--input", "lognorm"], ["--input", "lognorm", "--library-size-key", "total_counts"]):
        store = tmp_path / f"{'_'.join(flags)}.zarr"
        assert main([*cli, *flags, "--store", str(store)]) == 0, capsys.readouterr().err
        got = read_atlas(store)["processed"].obsm["X_biomjepa"]
        np.testing.assert_allclose(got, want.obsm["X_biomjepa"], rtol=1e-4, atol=1e-5, err_msg=str(flags))
    assert read_atlas(tmp_path / "--use-raw.zarr")["processed"].uns["biomjepa"]["params"]["settings"]["layer"] == "raw.X"
    assert main([*cli, "--input", "lognorm", "--store", str(tmp_path / "--use-raw.zarr")]) == 1
    err = capsys.readouterr().err
    assert "settings.input: store has None, this run 'lognorm'" in err and "--overwrite" in err


def test_a_store_begun_before_the_whole_checkpoint_hash_still_resumes():
    """Its manifest's ``checkpoint_sha256`` held the weights' hash; the same weights resume, other weights do not."""
    from biomjepa.embed.store import manifest_differences

    new = {"format": 1, "checkpoint_sha256": "whole", "weights_sha256": "w", "embedding_dim": 8, "block_rows": 4,
           "settings": {}}
    legacy = {k: v for k, v in new.items() if k != "weights_sha256"} | {"checkpoint_sha256": "w"}
    assert manifest_differences(legacy, new) == []
    other = legacy | {"checkpoint_sha256": "other weights"}
    assert manifest_differences(other, new) == ["checkpoint_sha256: store has 'other weights', this run 'whole'"]
