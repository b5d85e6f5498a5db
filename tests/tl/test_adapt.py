"""``bj.tl.adapt`` and ``biomjepa adapt``: self-supervised adaptation to a dataset's own cells (issue 39).

A random ``tiny`` checkpoint and 240 synthetic cells of three planted types, a few steps each.
"""

from __future__ import annotations

import json
import logging
import signal
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import sparse

import biomjepa as bj
from biomjepa.data.vocab import Vocab
from biomjepa.model import checkpoint_sha256, load_checkpoint

pytestmark = [pytest.mark.filterwarnings("ignore:The input measures only:UserWarning"),
              pytest.mark.usefixtures("own_cachedir")]  # tests/tl/conftest.py
N, G = 240, 400
#: width of an adapted embedding: the ``tiny`` base's d_model 32 × 2, the ``max_top5`` readout adapt exports
D = 64


def cells(n: int = N, seed: int = 0) -> ad.AnnData:
    """``n`` cells of three planted expression programmes over ``G`` vocabulary genes, at varied depths."""
    rng = np.random.default_rng(seed)
    lam = rng.gamma(0.5, 2, size=(3, G))
    kind = rng.integers(0, 3, n)
    X = rng.poisson(lam[kind] * rng.uniform(0.5, 2, size=(n, 1))).astype(np.float32)
    a = ad.AnnData(sparse.csr_matrix(X), var=pd.DataFrame(index=list(Vocab.default().symbols[:G])))
    a.obs_names = [f"c{i}" for i in range(n)]
    a.obs["cell_type"] = pd.Categorical(kind.astype(str))
    return a


def test_adapts_embeds_and_writes_a_checkpoint_that_embeds_other_cells(tmp_path, base):
    adata = cells()
    obs = adata.obs.copy()
    bj.tl.adapt(adata, base, steps=4, out_dir=tmp_path / "ck")
    out = tmp_path / "ck"
    assert sorted(p.name for p in out.iterdir()) == ["SHA256SUMS", "config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]  # the scratch directory is gone
    Z = adata.obsm["X_biomjepa"]
    assert Z.shape == (N, D) and np.isfinite(Z).all()
    rec = adata.uns["biomjepa"]["adapt"]
    assert rec["checkpoint"] == str(out) and rec["checkpoint_sha256"] == checkpoint_sha256(out)
    assert rec["base"]["checkpoint_sha256"] == checkpoint_sha256(base) and rec["base"]["ref"] == base
    assert (rec["steps"], rec["steps_done"], rec["seed"], rec["n_cells"]) == (4, 4, 0, N)
    assert rec["recipe"]["gene_init"] in ("checkpoint", "pca")
    assert adata.uns["biomjepa"]["params"]["checkpoint"] == str(out)
    pd.testing.assert_frame_equal(adata.obs, obs)
    prov = json.loads((out / "config.json").read_text())["provenance"]
    assert prov["source"] == "biomjepa.tl.adapt" and prov["init_from"]["checkpoint_sha256"] == checkpoint_sha256(base)
    assert prov["adapt"]["steps_done"] == 4
    assert not np.allclose(load_checkpoint(out).encoder.gene_embedding.weight.detach(),
                           load_checkpoint(base).encoder.gene_embedding.weight.detach())  # it learnt
    # standardized on the adapted cells (up to the readout's sample of them: all 240 here)
    np.testing.assert_allclose(Z.mean(0), 0, atol=1e-3)
    np.testing.assert_allclose(Z.std(0), 1, atol=1e-2)
    query = cells(30, seed=1)
    bj.pp.map_vocab(query)
    bj.tl.embed(query, checkpoint=str(out))
    assert query.obsm["X_biomjepa"].shape == (30, D)
    # the embedding adapt wrote is the one tl.embed gives later with its checkpoint, in the same precision
    assert adata.uns["biomjepa"]["params"]["precision"] == rec["precision"] == "fp32"
    same = adata.copy()
    bj.tl.embed(same, checkpoint=str(out))
    np.testing.assert_allclose(same.obsm["X_biomjepa"], Z, rtol=0, atol=1e-6)
    # other batches of the same cells: float32 kernels block by shape, standardized features amplify it
    # (an AVX512 EPYC measured 58 of 1,920 values beyond 1e-5): equal up to that rounding
    again = adata[:30].copy()
    bj.tl.embed(again, checkpoint=str(out))
    np.testing.assert_allclose(again.obsm["X_biomjepa"], Z[:30], rtol=0, atol=1e-4)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_trains_and_embeds_in_the_precision_set_and_records_it(tmp_path, base, monkeypatch, precision):
    import biomjepa.train.loop as loop

    real, used = loop.resolve_precision, []
    monkeypatch.setattr(loop, "resolve_precision", lambda *a: used.append(real(*a)) or used[-1])
    monkeypatch.setattr(bj.settings, "precision", precision)
    adata = cells()
    bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "ck")
    assert set(used) == {precision}  # every training step, not auto's choice
    assert adata.uns["biomjepa"]["adapt"]["precision"] == adata.uns["biomjepa"]["params"]["precision"] == precision
    later = adata.copy()
    bj.tl.embed(later, checkpoint=str(tmp_path / "ck"))
    np.testing.assert_allclose(later.obsm["X_biomjepa"], adata.obsm["X_biomjepa"], rtol=0, atol=1e-6)


def test_the_recipe_can_export_another_readout(tmp_path, base, monkeypatch):
    import biomjepa.train.adapt as train_adapt

    monkeypatch.setitem(train_adapt.RECIPE, "pooling", "mean_wmean")
    adata = cells()
    bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "ck")
    assert load_checkpoint(tmp_path / "ck").config.pooling == "mean_wmean"
    assert adata.uns["biomjepa"]["params"]["pooling"] == "mean_wmean"
    later = adata.copy()
    bj.tl.embed(later, checkpoint=str(tmp_path / "ck"))
    np.testing.assert_array_equal(later.obsm["X_biomjepa"], adata.obsm["X_biomjepa"])


def test_the_recipe_sets_the_scale_of_the_re_initialised_gene_embeddings(tmp_path, base, monkeypatch):
    """``gene_init_scale`` (a lever of issue 56) reaches the run: the cells' genes start at that standard deviation."""
    import biomjepa.train.adapt as train_adapt

    ids = torch.as_tensor(Vocab.default().index_of(list(cells().var_names)))
    spread = {}
    for scale in (0.02, 0.2):
        monkeypatch.setitem(train_adapt.RECIPE, "gene_init_scale", scale)
        adata = cells()
        bj.tl.adapt(adata, base, steps=1, out_dir=tmp_path / f"ck{scale}")
        assert adata.uns["biomjepa"]["adapt"]["recipe"]["gene_init_scale"] == scale
        spread[scale] = load_checkpoint(tmp_path / f"ck{scale}").encoder.gene_embedding.weight.detach()[ids].std()
    assert 5 < float(spread[0.2] / spread[0.02]) < 20


def test_the_default_restarts_the_gene_embeddings_from_the_cells_and_reads_out_the_bases_pooling(tmp_path, base):
    """The recipe chosen on the validation tissues: gene embeddings re-initialised from these cells' PCA loadings
    (not the base's), the EMA teacher exported, read out as ``max_top5`` (the base's readout; issue 56 on the v0.5
    base: the immune cells' graph +0.043 over ``max_top5_mean_wmean``, the others level); all recorded."""
    from biomjepa.train.adapt import RECIPE

    adata = cells()
    bj.tl.adapt(adata, base, steps=3, out_dir=tmp_path / "ck", seed=4)
    rec = adata.uns["biomjepa"]["adapt"]["recipe"]
    assert rec == {**RECIPE} and rec["gene_init"] == "pca" and rec["encoder"] == "teacher"
    ck, start = load_checkpoint(tmp_path / "ck"), load_checkpoint(base)
    assert ck.config.pooling == adata.uns["biomjepa"]["params"]["pooling"] == "max_top5"
    # the gene embeddings start again from the cells (3 steps alone move them far less than their own size)
    w, w0 = ck.encoder.gene_embedding.weight.detach(), start.encoder.gene_embedding.weight.detach()
    ids = torch.as_tensor(Vocab.default().index_of(list(adata.var_names)))
    assert (w[ids] - w0[ids]).norm() > 0.5 * w0[ids].norm()
    # the embedding is max ‖ top-5 mean, standardized per feature with these cells' statistics
    Z = adata.obsm["X_biomjepa"]
    assert Z.shape == (N, 2 * ck.config.d_model)
    np.testing.assert_allclose(Z.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(Z.std(0), 1, atol=5e-3)


def test_cells_without_a_mapped_gene_are_refused_before_training(tmp_path, base, monkeypatch):
    import biomjepa.train.adapt as train_adapt

    ref = cells(205)
    X = sparse.hstack([ref.X, np.ones((205, 1), np.float32)]).tolil()
    X[:5, :G] = 0  # five cells count only a gene outside the vocabulary
    adata = ad.AnnData(X.tocsr(), obs=ref.obs, var=pd.DataFrame(index=[*ref.var_names, "NOT_A_GENE_X"]))
    monkeypatch.setattr(train_adapt, "adapt_encoder", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(ValueError, match=r"5 of the 205 cells have no counts in any mapped gene \(c0, c1"):
        bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "ck")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["raw", "lognorm"])
def test_cells_without_a_mapped_gene_are_named_when_the_counts_are_read_through_a_wrapper(tmp_path, base,
                                                                                          monkeypatch, where):
    import biomjepa.train.adapt as train_adapt

    ref = cells(205)
    X = sparse.hstack([ref.X, np.ones((205, 1), np.float32)]).tolil()
    X[:3, :G] = 0  # three cells count only a gene outside the vocabulary
    adata = ad.AnnData(X.tocsr(), obs=ref.obs, var=pd.DataFrame(index=[*ref.var_names, "NOT_A_GENE_X"]))
    kw = {"use_raw": True} if where == "raw" else {"input": "lognorm", "library_size_key": "n_counts"}
    if where == "raw":
        adata.raw = adata.copy()
    else:
        adata.obs["n_counts"] = np.asarray(adata.X.sum(1)).ravel()
        adata.X = adata.X.multiply(1e4 / adata.obs["n_counts"].to_numpy()[:, None]).tocsr().log1p()
    monkeypatch.setattr(train_adapt, "adapt_encoder", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(ValueError, match=r"3 of the 205 cells have no counts in any mapped gene \(c0, c1, c2\)"):
        bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "ck", **kw)


def test_files_another_writer_puts_in_out_dir_are_never_removed(tmp_path, base, monkeypatch):
    import biomjepa.train.adapt as train_adapt

    original = train_adapt.adapt_encoder

    def meanwhile(cells_path, out, **kw):
        (out / "theirs.txt").write_text("not adapt's")  # written into the claimed, empty out_dir during training
        return original(cells_path, out, **kw)

    monkeypatch.setattr(train_adapt, "adapt_encoder", meanwhile)
    (tmp_path / "ck").mkdir()
    with pytest.raises(OSError):
        bj.tl.adapt(cells(), base, steps=2, out_dir=tmp_path / "ck")
    assert [p.name for p in (tmp_path / "ck").iterdir()] == ["theirs.txt"]


def test_a_second_adapt_on_the_same_out_dir_in_another_thread_is_refused(tmp_path, base, monkeypatch):
    import threading

    import biomjepa.train.adapt as train_adapt

    original, inside, leave = train_adapt.adapt_encoder, threading.Event(), threading.Event()

    def slow(*a, **k):
        inside.set()
        leave.wait(60)
        return original(*a, **k)

    monkeypatch.setattr(train_adapt, "adapt_encoder", slow)
    first = threading.Thread(target=bj.tl.adapt, args=(cells(), base), kwargs={"steps": 2, "out_dir": tmp_path / "ck"})
    first.start()
    try:
        assert inside.wait(60)
        second = cells()
        with pytest.raises(RuntimeError, match=r"another bj\.tl\.adapt of this process"):
            bj.tl.adapt(second, base, steps=2, out_dir=tmp_path / "ck")
        assert "X_biomjepa" not in second.obsm
    finally:
        leave.set()
        first.join()
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["SHA256SUMS", "config.json", "model.safetensors"]


def test_a_view_refused_for_its_out_dir_stays_a_view(tmp_path, base):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "mine.txt").write_text("x")
    view = cells(N + 10)[5 : N + 5]
    with pytest.raises(FileExistsError, match="not an empty directory"):
        bj.tl.adapt(view, base, steps=2, out_dir=tmp_path / "ck")
    assert view.is_view


def test_a_symlinked_out_dir_receives_the_checkpoint(tmp_path, base):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    adata = cells()
    bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "SHA256SUMS").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]  # no scratch, no lock file left


def test_a_second_adapt_on_the_same_out_dir_is_refused_before_training(tmp_path, base, monkeypatch):
    import subprocess
    import sys

    import biomjepa.train.adapt as train_adapt

    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"), str(tmp_path / ".ck.adapt.lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(train_adapt, "adapt_encoder", lambda *a, **k: pytest.fail("trained"))
        with pytest.raises(RuntimeError, match=r"Another bj\.tl\.adapt is writing"):
            bj.tl.adapt(cells(), base, steps=2, out_dir=tmp_path / "ck")
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "ck").exists()


def test_sigterm_while_the_shard_is_written_leaves_nothing(tmp_path, base, monkeypatch, known_dispositions):
    import biomjepa.data.shard_file as shard_file

    real = shard_file.write_shard

    def signalled(*a, **k):
        rows = real(*a, **k)
        signal.raise_signal(signal.SIGTERM)
        return rows

    monkeypatch.setattr(shard_file, "write_shard", signalled)
    adata = cells()
    before = adata.copy()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "ck")
    assert list(tmp_path.iterdir()) == []  # no hidden scratch copy of the counts, no lock, no checkpoint
    _assert_unchanged(adata, before)


def test_one_seed_one_result_on_one_thread(tmp_path, base):
    a, b, c = cells(), cells(), cells()
    bj.tl.adapt(a, base, steps=3, out_dir=tmp_path / "a", seed=1)
    bj.tl.adapt(b, base, steps=3, out_dir=tmp_path / "b", seed=1)
    bj.tl.adapt(c, base, steps=3, out_dir=tmp_path / "c", seed=2)
    ra, rb, rc = (x.uns["biomjepa"]["adapt"] for x in (a, b, c))
    assert ra["weights_sha256"] == rb["weights_sha256"] != rc["weights_sha256"]
    np.testing.assert_array_equal(a.obsm["X_biomjepa"], b.obsm["X_biomjepa"])
    # the second run read the first one's gene graph from the cache: the same result, without building it
    assert (ra["graph"], rb["graph"], rc["graph"]) == ("built", "cached", "built")


def test_the_graph_cache_keeps_the_newest_and_survives_an_unwritable_cache(tmp_path, base, monkeypatch):
    import biomjepa.train.adapt as train_adapt

    monkeypatch.setattr(train_adapt, "GRAPH_CACHE_KEEP", 1)
    for seed in (1, 2):
        bj.tl.adapt(cells(), base, steps=2, out_dir=tmp_path / f"s{seed}", seed=seed)
    kept = list((bj.settings.cachedir / train_adapt.GRAPH_CACHE).iterdir())
    assert len(kept) == 1 and not kept[0].name.startswith(".")
    adata = cells()
    bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "again", seed=2)
    assert adata.uns["biomjepa"]["adapt"]["graph"] == "cached"
    import biomjepa._version

    monkeypatch.setattr(biomjepa._version, "__version__", "99.0")  # another release builds its own graph
    adata = cells()
    bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "upgraded", seed=2)
    assert adata.uns["biomjepa"]["adapt"]["graph"] == "built"
    bj.tl.embed(adata, checkpoint=base)  # the base embedding replaces the adapted one: adapt's record goes with it
    assert "adapt" not in adata.uns["biomjepa"] and adata.uns["biomjepa"]["params"]["checkpoint"]
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "file" / "cache")  # under a file: cannot be made
    adata = cells()
    bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "uncached", seed=3)
    assert adata.uns["biomjepa"]["adapt"]["graph"] == "built"


def test_backed_input_is_read_in_chunks_and_gives_the_same_result(tmp_path, base, monkeypatch):
    import biomjepa.data.stream as stream

    adata = cells()
    bj.pp.map_vocab(adata)
    adata.write_h5ad(tmp_path / "in.h5ad")
    monkeypatch.setattr(stream, "CHUNK", 64)
    backed = ad.read_h5ad(tmp_path / "in.h5ad", backed="r")
    bj.tl.adapt(backed, base, steps=3, out_dir=tmp_path / "backed", seed=3)
    bj.tl.adapt(adata, base, steps=3, out_dir=tmp_path / "memory", seed=3)
    assert backed.uns["biomjepa"]["adapt"]["weights_sha256"] == adata.uns["biomjepa"]["adapt"]["weights_sha256"]
    np.testing.assert_array_equal(backed.obsm["X_biomjepa"], adata.obsm["X_biomjepa"])


def test_copy_and_key_added(tmp_path, base):
    adata = cells()
    out = bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "ck", copy=True, key_added="X_adapted")
    assert "X_adapted" not in adata.obsm and "biomjepa_token" not in adata.var
    assert out.obsm["X_adapted"].shape == (N, D) and out.uns["X_adapted"]["adapt"]["steps_done"] == 2


def test_a_view_is_made_its_own_anndata_before_training_with_one_warning(tmp_path, base):
    parent = cells(N + 10)
    view = parent[5 : N + 5]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bj.tl.adapt(view, base, steps=2, out_dir=tmp_path / "ck")
    views = [w for w in caught if "is a view" in str(w.message)]
    assert len(views) == 1 and views[0].filename == __file__
    assert not any("view" in type(w.message).__name__.lower() or "of view" in str(w.message) for w in caught)
    assert not view.is_view and view.obsm["X_biomjepa"].shape == (N, D)
    assert "X_biomjepa" not in parent.obsm and "biomjepa_token" not in parent.var


def test_counts_in_raw_or_a_layer_or_log_normalized(tmp_path, base):
    import scanpy as sc

    raw = cells()
    raw.raw = raw.copy()
    sc.pp.normalize_total(raw)
    sc.pp.log1p(raw)
    torch.set_num_threads(1)
    ref = cells()
    bj.tl.adapt(ref, base, steps=2, out_dir=tmp_path / "x", seed=5)
    bj.tl.adapt(raw, base, steps=2, out_dir=tmp_path / "raw", use_raw=True, seed=5)
    layer = cells()
    layer.layers["counts"] = layer.X.copy()
    layer.X = layer.X * 0.5
    bj.tl.adapt(layer, base, steps=2, out_dir=tmp_path / "layer", layer="counts", seed=5)
    lognorm = cells()
    total = np.asarray(lognorm.X.sum(1)).ravel()
    lognorm.obs["total_counts"] = total
    sc.pp.normalize_total(lognorm)
    sc.pp.log1p(lognorm)
    torch.set_num_threads(1)  # scanpy's normalize_total leaves torch on more threads: one result per seed needs one
    bj.tl.adapt(lognorm, base, steps=2, out_dir=tmp_path / "lognorm", input="lognorm", library_size_key="total_counts",
                seed=5)
    for other in (raw, layer, lognorm):
        assert other.uns["biomjepa"]["adapt"]["weights_sha256"] == ref.uns["biomjepa"]["adapt"]["weights_sha256"]
        np.testing.assert_allclose(other.obsm["X_biomjepa"], ref.obsm["X_biomjepa"], atol=1e-4)
    assert "biomjepa_token" in raw.raw.var and "biomjepa_token" not in raw.var


def test_plate_reads_are_learnt_as_molecule_equivalents(tmp_path, base):
    adata = cells()
    adata.X = adata.X * 300  # a plate's read depth
    bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "ck", input="reads")
    assert adata.obsm["X_biomjepa"].shape == (N, D) and adata.uns["biomjepa"]["params"]["input"] == "reads"


def test_a_mudata_modality(tmp_path, base):
    mudata = pytest.importorskip("mudata")
    m = mudata.MuData({"rna": cells()})
    bj.tl.adapt(m, base, steps=2, out_dir=tmp_path / "ck")
    assert m["rna"].obsm["X_biomjepa"].shape == (N, D) and m.obsm["X_biomjepa"].shape == (N, D)
    assert m["rna"].uns["biomjepa"]["adapt"]["n_cells"] == N


def test_the_default_directory_is_new_under_the_cache_and_removed_when_stopped(tmp_path, base, monkeypatch):
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    adata = cells()
    bj.tl.adapt(adata, base, steps=2)
    out = adata.uns["biomjepa"]["adapt"]["checkpoint"]
    assert str(tmp_path / "cache" / "adapted") in out and (Path(out) / "SHA256SUMS").is_file()
    with pytest.raises(ValueError, match="at least 200"):
        bj.tl.adapt(cells(150), base, steps=2)
    assert [p.name for p in (tmp_path / "cache" / "adapted").iterdir()] == [Path(out).name]


def test_too_few_cells_are_refused_naming_the_minimum(tmp_path, base):
    with pytest.raises(ValueError, match="at least 200 cells"):
        bj.tl.adapt(cells(150), base, steps=2, out_dir=tmp_path / "ck")
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("bad", [{"steps": 0}, {"steps": 2.5}, {"time_budget": -1}, {"seed": -1}])
def test_bad_arguments(tmp_path, base, bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        bj.tl.adapt(cells(), base, out_dir=tmp_path / "ck", **bad)


def test_refuses_an_existing_checkpoint_directory(tmp_path, base):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text("{}")
    with pytest.raises(FileExistsError, match="not an empty directory"):
        bj.tl.adapt(cells(), base, steps=2, out_dir=tmp_path / "ck")


def test_default_steps_scale_with_the_cells():
    from biomjepa.tl._adapt import default_steps

    assert default_steps(200) == 40 and default_steps(420) == 40 and default_steps(1074) == 101 and default_steps(10**6) == 1000
    assert default_steps(2000) > default_steps(1074)


def test_time_budget_stops_early_with_a_whole_checkpoint(tmp_path, base):
    adata = cells()
    bj.tl.adapt(adata, base, steps=40, time_budget=1e-6, out_dir=tmp_path / "ck")
    rec = adata.uns["biomjepa"]["adapt"]
    assert rec["steps_done"] == 1 and rec["steps"] == 40 and rec["time_budget"] == 1e-6  # checked after every step
    assert load_checkpoint(tmp_path / "ck").info["provenance"]["adapt"]["steps_done"] == 1


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_leaves_no_checkpoint_and_the_anndata_unchanged(tmp_path, base, monkeypatch, signum, caplog,
                                                                      known_dispositions):
    import biomjepa.train.loop as loop

    real, calls = loop.compute_objective, []

    def signalled(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            signal.raise_signal(signum)
        return real(*a, **k)

    monkeypatch.setattr(loop, "compute_objective", signalled)
    caplog.set_level(logging.INFO, logger="biomjepa")
    adata = cells()
    before = adata.copy()
    with pytest.raises(KeyboardInterrupt, match=signal.Signals(signum).name):
        bj.tl.adapt(adata, base, steps=20, out_dir=tmp_path / "ck")
    assert len(calls) == 2  # it stopped at the step the signal arrived in
    assert list(tmp_path.iterdir()) == []  # no checkpoint, no scratch directory
    _assert_unchanged(adata, before)
    assert "run the same command" not in caplog.text  # the scratch run is gone: nothing to resume
    stopped = [r for r in caplog.records if "stopped" in r.getMessage() and r.levelno >= logging.INFO]
    assert stopped == []  # said once, by the KeyboardInterrupt's message, not also by the training loop


def test_an_interrupt_while_embedding_undoes_every_write(tmp_path, base, monkeypatch):
    import biomjepa.tl._embed as embed_module

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(embed_module, "embed_cells", interrupted)
    adata = cells()
    adata.uns["biomjepa"] = {"note": "kept"}
    before = adata.copy()
    with pytest.raises(KeyboardInterrupt):
        bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "ck")
    _assert_unchanged(adata, before)
    assert adata.uns["biomjepa"] == {"note": "kept"}
    assert list(tmp_path.iterdir()) == []  # the checkpoint it had written is removed with the rest


def test_an_interrupt_after_the_checkpoint_is_in_place_undoes_every_write(tmp_path, base, monkeypatch):
    import biomjepa.tl._adapt as embed_module

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(embed_module, "store", interrupted)  # after the rename, while adata is written
    adata = cells()
    before = adata.copy()
    with pytest.raises(KeyboardInterrupt):
        bj.tl.adapt(adata, base, steps=2, out_dir=tmp_path / "ck")
    _assert_unchanged(adata, before)
    assert list(tmp_path.iterdir()) == []


def test_the_cells_are_embedded_once_and_the_time_of_each_part_recorded(tmp_path, base, monkeypatch):
    import biomjepa.tl._embed as embed_module

    real, embedded = embed_module.embed_cells, []
    monkeypatch.setattr(embed_module, "embed_cells", lambda m, c, **k: embedded.append(len(c)) or real(m, c, **k))
    adata = cells()
    bj.tl.adapt(adata, base, steps=3, out_dir=tmp_path / "ck")
    assert sum(embedded) == N  # one pass: the readout's statistics and the embedding come from it
    phases = adata.uns["biomjepa"]["adapt"]["phases"]
    assert list(phases) == ["map", "base", "shard", "setup", "steps", "readout", "export", "write"]
    assert all(isinstance(v, float) and v >= 0 for v in phases.values())
    before_training_ended = phases["map"] + phases["base"] + phases["shard"] + phases["setup"] + phases["steps"]
    assert before_training_ended <= adata.uns["biomjepa"]["adapt"]["seconds"] + 0.05  # parts, not more than the whole
    # that one pass is what tl.embed gives later with the checkpoint, bit for bit
    later = adata.copy()
    bj.tl.embed(later, checkpoint=str(tmp_path / "ck"))
    np.testing.assert_array_equal(later.obsm["X_biomjepa"], adata.obsm["X_biomjepa"])
    assert later.uns["biomjepa"]["params"] == adata.uns["biomjepa"]["params"] | {"tool": "bj.tl.embed"}
    assert adata.uns["biomjepa"]["params"]["tool"] == "bj.tl.adapt"  # the writer, one owner (issue 57)


def _assert_unchanged(adata, before) -> None:
    assert list(adata.var.columns) == list(before.var.columns)
    assert list(adata.obsm) == list(before.obsm) and list(adata.uns) == list(before.uns)
    assert (adata.X != before.X).nnz == 0


def test_cli_adapt_writes_the_checkpoint_and_the_embedding(tmp_path, base, capsys):
    from biomjepa.cli.app import main

    adata = cells()
    adata.write_h5ad(tmp_path / "in.h5ad")
    code = main(["adapt", str(tmp_path / "in.h5ad"), "--out", str(tmp_path / "ck"),
                 "--checkpoint", base, "--steps", "2", "--embed", str(tmp_path / "out.h5ad")])
    assert code == 0, capsys.readouterr().err
    out = ad.read_h5ad(tmp_path / "out.h5ad")
    assert out.obsm["X_biomjepa"].shape == (N, D)
    assert out.uns["biomjepa"]["adapt"]["checkpoint_sha256"] == checkpoint_sha256(tmp_path / "ck")
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:  # issue 68: a non-empty --out is a usage error, found before any work
        main(["adapt", str(tmp_path / "in.h5ad"), "--out", str(tmp_path / "ck"), "--checkpoint", base, "--steps", "2"])
    assert exit_.value.code == 2 and "not an empty directory" in capsys.readouterr().err


def test_cli_adapt_refuses_a_bad_time_budget_as_a_usage_error_before_reading(tmp_path, base, capsys, monkeypatch):
    import biomjepa.data.stream as stream
    from biomjepa.cli.app import main

    cells().write_h5ad(tmp_path / "in.h5ad")
    monkeypatch.setattr(stream, "iter_checked_counts", lambda *a, **k: pytest.fail("read the cells"))
    for bad in ("-5", "0", "nan", "soon"):
        with pytest.raises(SystemExit) as exit_:
            main(["adapt", str(tmp_path / "in.h5ad"), "--out", str(tmp_path / "ck"), "--checkpoint", base,
                  "--time-budget", bad])
        assert exit_.value.code == 2 and "--time-budget" in capsys.readouterr().err


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), KeyboardInterrupt("bj.tl.adapt stopped by SIGTERM; nothing "
                                                                        "was written.")])
def test_cli_adapt_stopped_says_so_once_and_keeps_a_path_named_out_dir(tmp_path, base, capsys, monkeypatch, raised):
    from biomjepa.cli.app import main

    cells().write_h5ad(tmp_path / "in.h5ad")

    def stopped(*a, **k):
        raise raised

    monkeypatch.setattr(bj.tl, "adapt", stopped)
    out = tmp_path / "out_dir"
    code = main(["adapt", str(tmp_path / "in.h5ad"), "--out", str(out), "--checkpoint", base])
    err = capsys.readouterr().err
    said = "biomjepa adapt: stopped by " + ("SIGTERM" if str(raised) else "SIGINT")
    assert code == (143 if str(raised) else 130)
    assert f"{said}; no checkpoint was written to {out}." in err and "nothing was written" not in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_bad_base_checkpoint_is_refused_before_the_cells_are_read(tmp_path, base, monkeypatch):
    import biomjepa.data.shard_file as shard_file

    monkeypatch.setattr(shard_file, "write_shard", lambda *a, **k: pytest.fail("wrote the shard"))
    adata = cells()
    with pytest.raises(FileNotFoundError, match="neither a registered name"):
        bj.tl.adapt(adata, str(tmp_path / "missing"), steps=2, out_dir=tmp_path / "ck")
    with pytest.raises(ValueError, match=r"expected 0{64}"):
        bj.tl.adapt(adata, base + "#sha256=" + "0" * 64, steps=2, out_dir=tmp_path / "ck")
    assert list(tmp_path.iterdir()) == []


def test_the_pretraining_health_check_neither_warns_nor_misleads_an_adapt_user(caplog):
    import logging
    import warnings

    from biomjepa.train.adapt import _health_logged
    from biomjepa.train.health import LearningHealth

    with caplog.at_level(logging.INFO), warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning reaches the user
        with _health_logged():
            LearningHealth(10)._warn("r2", "the predictor's R² on its targets is -64.918")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "judge an adaptation by its embedding" in caplog.text
