"""``bj.tl.embed``: contract, determinism, storage modes and bad input."""

from __future__ import annotations

import warnings

import anndata as ad
import numpy as np
import pytest
from _inputs import HUMAN, _bad, _dense, make, make_mapped, make_raw, symbols
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


def test_a_view_is_made_its_own_anndata_before_the_work_with_one_warning(mapped, tiny_checkpoint):
    parent_obsm = set(mapped.obsm)
    view = mapped[10:40]
    with pytest.raises(ValueError, match="batch_size"):  # a refused call leaves the view a view
        bj.tl.embed(view, checkpoint=tiny_checkpoint, batch_size=0)
    assert view.is_view
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bj.tl.embed(view, checkpoint=tiny_checkpoint)
    assert [str(w.message)[:40] for w in caught] == ["`adata` is a view (a subset of another A"]
    assert caught[0].filename == __file__  # points at the user's line
    assert not view.is_view and set(mapped.obsm) == parent_obsm  # the parent is unchanged
    own = mapped[10:40].copy()
    bj.tl.embed(own, checkpoint=tiny_checkpoint)
    np.testing.assert_array_equal(view.obsm["X_biomjepa"], own.obsm["X_biomjepa"])


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


@pytest.fixture
def edited(tiny_checkpoint, tmp_path):
    """``tiny_checkpoint`` with config.json edited (n_heads 2 → 4) and its manifest rewritten: the same weights,
    another (consistent) checkpoint that embeds differently."""
    import shutil
    from pathlib import Path

    from _inputs import edit_model_config

    from biomjepa.model import CONFIG, WEIGHTS, write_manifest

    path = Path(shutil.copytree(tiny_checkpoint, tmp_path / "edited"))
    edit_model_config(path, n_heads=4)
    write_manifest(path, [CONFIG, WEIGHTS])
    return str(path)


def test_key_added_one_rule_for_obsm_and_uns(mapped, tiny_checkpoint, edited):
    """Issue 46: an empty key used to replace obsm["X_biomjepa"] while its record went to uns[""]."""
    bj.tl.embed(mapped, checkpoint=tiny_checkpoint)
    first = mapped.obsm["X_biomjepa"].copy()
    with pytest.raises(ValueError, match=r"key_added must be a non-empty string.*empty string"):
        bj.tl.embed(mapped, checkpoint=edited, key_added="")
    assert np.array_equal(mapped.obsm["X_biomjepa"], first) and "" not in mapped.uns and "" not in mapped.obsm
    bj.tl.embed(mapped, checkpoint=edited, key_added="X_edited")  # another key: its own obsm and uns entries
    assert mapped.uns["X_edited"]["params"]["checkpoint"] == edited
    assert np.array_equal(mapped.obsm["X_biomjepa"], first)
    assert mapped.uns["biomjepa"]["params"]["checkpoint"] == tiny_checkpoint and "vocab" in mapped.uns["biomjepa"]
    bj.tl.embed(mapped, checkpoint=edited, key_added="X_biomjepa")  # the default key, named: the default pair
    assert "X_biomjepa" not in mapped.uns and mapped.uns["biomjepa"]["params"]["checkpoint"] == edited
    np.testing.assert_array_equal(mapped.obsm["X_biomjepa"], mapped.obsm["X_edited"])


def test_the_record_pins_the_whole_checkpoint(mapped, tiny_checkpoint, edited):
    """Issue 46: an edited config.json embeds differently, so the recorded hash covers every file; the weights'
    hash is recorded too, by its own name, and the recorded hash pins a local directory as it pins a URL."""
    from biomjepa.model import checkpoint_sha256

    a = bj.tl.embed(mapped, checkpoint=tiny_checkpoint, copy=True)
    b = bj.tl.embed(mapped, checkpoint=edited, copy=True)
    pa, pb = a.uns["biomjepa"]["params"], b.uns["biomjepa"]["params"]
    assert not np.allclose(a.obsm["X_biomjepa"], b.obsm["X_biomjepa"], atol=1e-4)
    assert pa["weights_sha256"] == pb["weights_sha256"]
    assert pa["checkpoint_sha256"] == checkpoint_sha256(tiny_checkpoint) != pb["checkpoint_sha256"]
    assert pb["checkpoint_sha256"] == checkpoint_sha256(edited)
    pinned = bj.tl.embed(mapped, checkpoint=f"{tiny_checkpoint}#sha256={pa['checkpoint_sha256']}", copy=True)
    np.testing.assert_array_equal(pinned.obsm["X_biomjepa"], a.obsm["X_biomjepa"])
    assert pinned.uns["biomjepa"]["params"]["checkpoint"] == tiny_checkpoint
    before = set(mapped.uns), set(mapped.obsm)
    with pytest.raises(ValueError, match=rf"has sha256 {pb['checkpoint_sha256']}, expected {pa['checkpoint_sha256']}"):
        bj.tl.embed(mapped, checkpoint=f"{edited}#sha256={pa['checkpoint_sha256']}")
    assert (set(mapped.uns), set(mapped.obsm)) == before


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


def _counts_in_raw(counts_adata):
    """``X`` log-normalized on 100 of the genes, the counts of all genes in ``.raw`` (scanpy's habit)."""
    a = counts_adata.copy()
    a.raw = a
    a = a[:, :100].copy()
    X = a.X.toarray()
    a.X = sparse.csr_matrix(np.log1p(1e4 * X / X.sum(axis=1, keepdims=True)).astype(np.float32))
    return a


def _snapshot(a):
    return a.X.copy(), a.raw.X.copy(), a.obs.copy(), a.var.copy(), a.raw.var.copy(), dict(a.uns), list(a.obsm)


def _unchanged(a, snap):
    X, raw_X, obs, var, raw_var, uns, obsm = snap
    np.testing.assert_array_equal(a.X.toarray(), X.toarray())
    np.testing.assert_array_equal(a.raw.X.toarray(), raw_X.toarray())
    assert a.obs.equals(obs) and a.var.equals(var) and a.raw.var.equals(raw_var)
    assert dict(a.uns).keys() == uns.keys() and list(a.obsm) == obsm


def test_use_raw_embeds_the_counts_in_raw(counts_adata, tiny_checkpoint):
    want = counts_adata.copy()
    bj.pp.map_vocab(want)
    bj.tl.embed(want, checkpoint=tiny_checkpoint)
    a = _counts_in_raw(counts_adata)
    bj.pp.map_vocab(a, use_raw=True)
    assert "biomjepa_token" in a.raw.var and "biomjepa_token" not in a.var
    snap = _snapshot(a)
    b = bj.tl.embed(a, checkpoint=tiny_checkpoint, use_raw=True, copy=True)
    _unchanged(a, snap)  # copy=True: the caller's AnnData is left alone
    np.testing.assert_allclose(b.obsm["X_biomjepa"], want.obsm["X_biomjepa"], rtol=1e-5, atol=1e-6)
    assert b.uns["biomjepa"]["params"]["layer"] == "raw.X"
    bj.tl.embed(a, checkpoint=tiny_checkpoint, use_raw=True)
    np.testing.assert_array_equal(a.obsm["X_biomjepa"], b.obsm["X_biomjepa"])
    np.testing.assert_array_equal(a.raw.X.toarray(), snap[1].toarray())


def test_use_raw_errors_name_the_fix_and_leave_adata_unchanged(counts_adata, tiny_checkpoint):
    a = _counts_in_raw(counts_adata)
    bj.pp.map_vocab(a)  # the genes of X only
    snap = _snapshot(a)
    with pytest.raises(ValueError, match=r"X does not look like raw counts.*adata\.raw\.X does hold raw counts.*use_raw=True"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint)
    with pytest.raises(KeyError, match=r"\.raw\.var\['biomjepa_token'\].*map_vocab\(adata, use_raw=True\)"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint, use_raw=True)
    with pytest.raises(ValueError, match=r"cannot be combined with layer='counts'"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint, use_raw=True, layer="counts")
    with pytest.raises(TypeError, match="use_raw must be True or False"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint, use_raw=1)
    _unchanged(a, snap)
    a.raw = None
    with pytest.raises(ValueError, match=r"adata\.raw is None"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint, use_raw=True)
    assert "X_biomjepa" not in a.obsm


def test_no_progress_bar_in_redirected_output(mapped, tiny_checkpoint, capsys, monkeypatch):
    """stderr redirected to a log (not a terminal, no notebook): no carriage returns nor redraws (issue 30)."""
    import sys

    from biomjepa._progress import interactive

    monkeypatch.setattr("biomjepa._settings.PROGRESS_DELAY", 0.0)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert not interactive()  # capsys' stderr is no terminal
    bj.tl.embed(mapped, checkpoint=tiny_checkpoint)
    err = capsys.readouterr().err
    assert "embed" not in err and "\r" not in err


def test_embed_after_mapping_raw_points_to_use_raw(counts_adata, tiny_checkpoint):
    """``map_vocab(use_raw=True)`` then ``embed()`` without it: the error names use_raw=True (issue 30)."""
    a = _counts_in_raw(counts_adata)
    bj.pp.map_vocab(a, use_raw=True)
    snap = _snapshot(a)
    with pytest.raises(KeyError, match=r"\.raw\.var has it.*Pass use_raw=True"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint)
    _unchanged(a, snap)
    b = counts_adata.copy()
    b.raw = b
    bj.pp.map_vocab(b)  # X mapped, raw not
    with pytest.raises(KeyError, match=r"adata\.var has it: pass use_raw=False"):
        bj.tl.embed(b, checkpoint=tiny_checkpoint, use_raw=True)


def test_progress_bar_follows_the_setting(mapped, tiny_checkpoint, capsys, monkeypatch):
    monkeypatch.setattr("biomjepa._settings.PROGRESS_DELAY", 0.0)  # a bar at once, however short the run
    monkeypatch.setattr("biomjepa._progress.interactive", lambda: True)  # as on a terminal
    assert bj.settings.progress is True  # on by default
    bj.tl.embed(mapped, checkpoint=tiny_checkpoint)
    assert "embed: 100%" in capsys.readouterr().err
    monkeypatch.setattr(bj.settings, "_progress", True)  # restored after the test
    bj.settings.progress = False
    bj.tl.embed(mapped, checkpoint=tiny_checkpoint)
    assert "embed" not in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"bj\.settings\.progress must be True or False"):
        bj.settings.progress = "no"


def test_torch_threads_follow_the_setting_and_are_put_back(mapped, tiny_checkpoint, monkeypatch):
    import torch

    from biomjepa import _device
    from biomjepa.tl import _embed

    seen = []
    real = _embed.embed_cells
    monkeypatch.setattr(_embed, "embed_cells", lambda *a, **k: (seen.append(torch.get_num_threads()), real(*a, **k))[1])
    monkeypatch.setattr(bj.settings, "_num_threads", "auto")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        bj.settings.num_threads = 1
        bj.tl.embed(mapped, checkpoint=tiny_checkpoint)
        bj.settings.num_threads = None  # torch's own count
        bj.tl.embed(mapped, checkpoint=tiny_checkpoint)
        bj.settings.num_threads = "auto"
        monkeypatch.setattr(_device, "auto_threads", lambda limit: 1)  # a busy machine
        bj.tl.embed(mapped, checkpoint=tiny_checkpoint)
        assert seen == [1, 2, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    for bad in (0, -2, 1.5, True, "all"):
        with pytest.raises(ValueError, match=r"bj\.settings\.num_threads must be 'auto', a positive integer, or None"):
            bj.settings.num_threads = bad
    from biomjepa._settings import _cpu_cores

    with pytest.raises(ValueError, match=rf"num_threads=4096 is more than the {_cpu_cores()} CPU cores"):
        bj.settings.num_threads = 4096  # 28x slower on 2 cores (issue 30): refused, the setting kept
    assert bj.settings.num_threads == "auto"
    bj.settings.num_threads = _cpu_cores()


def test_auto_threads_counts_the_cores_others_leave_idle(monkeypatch):
    from biomjepa import _device

    monkeypatch.setattr(_device.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_device, "_usable_cores", lambda: 2)
    for busy_share, want in ((1.0, 1), (0.5, 1), (0.2, 2), (0.0, 2)):  # share of both cores busy elsewhere
        ticks = iter([(0, 0), (int(100 * busy_share), 100)])
        monkeypatch.setattr(_device, "_cpu_ticks", lambda ticks=ticks: next(ticks))
        assert _device.auto_threads(2, window=0.0) == want, busy_share
    monkeypatch.setattr(_device, "_cpu_ticks", lambda: None)  # no /proc/stat: torch's own count
    assert _device.auto_threads(3, window=0.0) == 3


def _lognormalized(a):
    """``log1p(normalize_total(1e4))`` of ``a``'s counts, with ``obs['total_counts']``."""
    b = a.copy()
    X = b.X.toarray().astype(np.float64)
    b.obs["total_counts"] = X.sum(axis=1)
    b.X = sparse.csr_matrix(np.log1p(1e4 * X / X.sum(axis=1, keepdims=True)).astype(np.float32))
    return b


def test_lognorm_input_embeds_like_the_counts_everywhere(mapped, tiny_checkpoint, tmp_path):
    """In memory, backed, lazy (dask) and MuData: the embedding of the raw counts, input left unchanged."""
    ref = bj.tl.embed(mapped, checkpoint=tiny_checkpoint, copy=True).obsm["X_biomjepa"]
    b = _lognormalized(mapped)
    X_before = b.X.copy()
    out = bj.tl.embed(b, checkpoint=tiny_checkpoint, input="lognorm", library_size_key="total_counts", copy=True)
    np.testing.assert_array_equal(out.obsm["X_biomjepa"], ref)
    p = out.uns["biomjepa"]["params"]
    assert p["input"] == "lognorm" and p["library_size_key"] == "total_counts" and p["target_sum"] == pytest.approx(1e4)
    np.testing.assert_array_equal(b.X.toarray(), X_before.toarray())
    assert "X_biomjepa" not in b.obsm
    with pytest.warns(UserWarning, match="estimated"):
        bj.tl.embed(b, checkpoint=tiny_checkpoint, input="lognorm")
    np.testing.assert_array_equal(b.obsm["X_biomjepa"], ref)
    b.write_h5ad(tmp_path / "ln.h5ad")
    backed = ad.read_h5ad(tmp_path / "ln.h5ad", backed="r")
    bj.tl.embed(backed, checkpoint=tiny_checkpoint, input="lognorm", library_size_key="total_counts")
    np.testing.assert_array_equal(backed.obsm["X_biomjepa"], ref)
    backed.file.close()
    pytest.importorskip("dask")
    lazy = ad.experimental.read_lazy(tmp_path / "ln.h5ad")
    bj.tl.embed(lazy, checkpoint=tiny_checkpoint, input="lognorm", library_size_key="total_counts")
    np.testing.assert_array_equal(lazy.obsm["X_biomjepa"], ref)
    mudata = pytest.importorskip("mudata")
    md = mudata.MuData({"rna": _lognormalized(mapped)})
    bj.tl.embed(md, checkpoint=tiny_checkpoint, input="lognorm", library_size_key="total_counts")
    np.testing.assert_array_equal(md.mod["rna"].obsm["X_biomjepa"], ref)


def test_lognorm_input_errors_leave_adata_unchanged(mapped, tiny_checkpoint):
    b = _lognormalized(mapped)
    X = b.X.toarray()
    with pytest.raises(ValueError, match=r"does not look like raw counts.*pass input='lognorm'.*library_size_key="):
        bj.tl.embed(b, checkpoint=tiny_checkpoint)  # counts expected by default
    with pytest.raises(ValueError, match=r"input='lognormal' is not an input kind"):
        bj.tl.embed(b, checkpoint=tiny_checkpoint, input="lognormal")
    with pytest.raises(KeyError, match=r"library_size_key='n_counts' is not a column of adata\.obs"):
        bj.tl.embed(b, checkpoint=tiny_checkpoint, input="lognorm", library_size_key="n_counts")
    z = b.copy()
    z.X = sparse.csr_matrix(X - X.mean(axis=0))
    with pytest.raises(ValueError, match="scaled or z-scored"):
        bj.tl.embed(z, checkpoint=tiny_checkpoint, input="lognorm", library_size_key="total_counts")
    np.testing.assert_array_equal(b.X.toarray(), X)
    assert "X_biomjepa" not in b.obsm and "X_biomjepa" not in z.obsm and "params" not in z.uns["biomjepa"]


# ---------------------------------------------------- duplicated genes, counts in a layer, boolean matrices
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


def test_layer_with_counts_is_the_fix(ckpt):
    a = _bad("log-normalized")
    a.layers["counts"] = make_raw("dense").X
    bj.tl.embed(a, checkpoint=ckpt, device="cpu", layer="counts")
    ref = make_mapped("dense")
    bj.tl.embed(ref, checkpoint=ckpt, device="cpu")
    np.testing.assert_array_equal(a.obsm["X_biomjepa"], ref.obsm["X_biomjepa"])


def test_bool_matrix_is_refused_by_embed_not_silently_used(tiny_checkpoint):
    a = make(HUMAN * 3 + [f"G{i}" for i in range(3)])
    a.var_names_make_unique()
    a.X = a.X.astype(bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # suffix/low-count warnings of the synthetic names
        bj.pp.map_vocab(a)  # genes only: values are documented as not checked here
    with pytest.raises(ValueError, match=r"boolean.*layer="):
        bj.tl.embed(a, checkpoint=tiny_checkpoint)
    assert "X_biomjepa" not in a.obsm and a.X.dtype == bool


@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_bool_matrices_are_refused(fmt, ckpt):
    X = np.random.default_rng(0).random((6, 30)) > 0.5
    a = ad.AnnData(sparse.csr_matrix(X) if fmt == "csr" else X)
    a.var_names = symbols(30)
    bj.pp.map_vocab(a)
    with pytest.raises(ValueError, match="boolean"):
        bj.tl.embed(a, checkpoint=str(ckpt), device="cpu")
