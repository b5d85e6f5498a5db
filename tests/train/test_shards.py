import os
import subprocess
import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from _kit import make_shards
from scipy import sparse

import biomjepa as bj
from biomjepa._files import LockBusy
from biomjepa.data.shards import Corpus, ShardStream, prepare_corpus
from biomjepa.data.vocab import Vocab


def _h5ad(path, n=30, seed=0, ensembl=False):
    rng = np.random.default_rng(seed)
    syms = [*Vocab.default().symbols[rng.choice(3000, 120, replace=False)], "NOT_A_GENE"]
    X = sparse.random(n, len(syms), density=0.4, format="csr", random_state=seed)
    X.data = np.ceil(X.data * 9)
    a = ad.AnnData(X=X.astype(np.float32), var=pd.DataFrame(index=syms),
                   obs=pd.DataFrame({"held_out": np.arange(n) % 5 == 0}, index=[f"c{i}" for i in range(n)]))
    a.layers["counts"] = a.X.copy()
    a.X = a.X * 0.5  # X is not counts: the spec names the layer
    a.write_h5ad(path)
    return a


def test_prepare_maps_like_map_vocab(tmp_path):
    a = _h5ad(tmp_path / "a.h5ad")
    (tmp_path / "drop.txt").write_text("c1\nc2\n")
    specs = [{"path": str(tmp_path / "a.h5ad"), "layer": "counts", "exclude_obs": "held_out"},
             {"path": str(tmp_path / "a.h5ad"), "layer": "counts", "exclude_obs": str(tmp_path / "drop.txt")}]
    cache = prepare_corpus(specs, tmp_path / "cache")
    corpus = Corpus(cache)
    assert prepare_corpus(specs, tmp_path / "cache") == cache  # cached
    z = corpus.load(0)
    assert not np.isin(z["rows"], np.flatnonzero(a.obs["held_out"])).any()
    assert not np.isin(corpus.load(1)["rows"], [1, 2]).any()
    ref = a.copy()
    ref.X = ref.layers["counts"]
    bj.pp.map_vocab(ref)
    tok = ref.var["biomjepa_token"].to_numpy()
    r = int(z["rows"][0])
    cells = corpus.cells(0, np.array([0]))
    row = ref.X[r].toarray().ravel()
    expect = np.sort(tok[(row > 0) & (tok >= 0)])
    np.testing.assert_array_equal(cells.genes, expect)
    np.testing.assert_allclose(cells.library, row.sum())  # library over all input genes
    with pytest.raises(ValueError, match="raw counts"):
        prepare_corpus([{"path": str(tmp_path / "a.h5ad")}], tmp_path / "cache2")


@pytest.mark.parametrize(("n_shards", "world", "workers"), [(4, 2, 1), (2, 2, 2)])
def test_units_disjoint_and_cover_epoch(tmp_path, n_shards, world, workers):
    corpus = Corpus(prepare_corpus(make_shards(tmp_path / "d", n_shards=n_shards, cells=20), tmp_path / "c"))
    units = world * workers
    seen = []
    for u in range(units):
        rows = [(s, r) for s, rr in corpus.unit_rows(7, 0, u, units) for r in rr]
        seen.append(set(rows))
    assert sum(len(s) for s in seen) == corpus.n_cells == len(set().union(*seen))
    plan1 = [(s, b.tolist()) for s, b in corpus.plan(7, 0, 0, units, 4, 2)]
    plan2 = [(s, b.tolist()) for s, b in corpus.plan(7, 0, 0, units, 4, 2)]
    assert plan1 == plan2
    assert {(s, r) for s, b in plan1 for r in b} == seen[0]
    assert plan1 != [(s, b.tolist()) for s, b in corpus.plan(7, 1, 0, units, 4, 2)]  # reshuffled per epoch


def test_stream_start_skips_exactly(tmp_path):
    corpus = Corpus(prepare_corpus(make_shards(tmp_path / "d", n_shards=2, cells=10), tmp_path / "c"))
    full = ShardStream(corpus, batch_size=3, seed=1, sort_pool=2)
    it = iter(full)
    first = [next(it).ids for _ in range(12)]  # crosses an epoch boundary
    it2 = iter(ShardStream(corpus, batch_size=3, seed=1, sort_pool=2, start=5))
    for a in first[5:]:
        np.testing.assert_array_equal(a, next(it2).ids)


def test_cache_is_prepared_again_when_an_input_changes(tmp_path):
    """Issue 24: replacing data.h5ad by another file reused the old shards silently (the key is path + options)."""
    import json

    spec = [{"path": str(tmp_path / "data.h5ad"), "layer": "counts"}]
    _h5ad(tmp_path / "data.h5ad", n=30, seed=0)
    cache = tmp_path / "cache"
    first = Corpus(prepare_corpus(spec, cache))
    assert first.n_cells == 30
    _h5ad(tmp_path / "data.h5ad", n=45, seed=1)  # another file under the same name
    corpus = Corpus(prepare_corpus(spec, cache))
    assert corpus.n_cells == 45 and corpus.meta["key"] == first.meta["key"]  # the key itself is unchanged
    # a manifest written before inputs were recorded is trusted as it is, and its inputs recorded
    man = cache / "manifest.json"
    meta = json.loads(man.read_text())
    recorded = meta.pop("inputs")
    man.write_text(json.dumps(meta))
    shard = (cache / "shard_00000.npz").stat().st_mtime_ns
    assert prepare_corpus(spec, cache) == cache
    unhashed = [{k: v for k, v in i.items() if k != "sha256"} for i in recorded]  # recorded as found: not hashed
    assert json.loads(man.read_text())["inputs"] == unhashed
    assert (cache / "shard_00000.npz").stat().st_mtime_ns == shard  # not prepared again


READ = """
import sys
from biomjepa.data.shards import Corpus, prepare_corpus
corpus = Corpus(prepare_corpus(sys.argv[1], sys.argv[2]))
print("reading", corpus.n_cells, flush=True)
sys.stdin.read()
"""
WRITE = """
import sys
from biomjepa._files import lock
held = lock(sys.argv[1] + "/.lock", what="test", fix="test")
print("writing", flush=True)
sys.stdin.read()
"""


def _child(code: str, *args) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert child.stdout.readline().split()[0] in ("reading", "writing")
    return child


def test_a_cache_read_by_a_run_is_not_rewritten_under_it(tmp_path):
    """Issue 24: run B (corpus=Y) rewrote the shards and manifest that run A (corpus=X, same cache_dir) had open."""
    x = str(Path(make_shards(tmp_path / "x", n_shards=2, cells=10)[0]).parent / "*.npz")
    _h5ad(tmp_path / "y.h5ad", n=30)
    y = [{"path": str(tmp_path / "y.h5ad"), "layer": "counts"}]
    cache = tmp_path / "cache"
    run_a = _child(READ, x, cache)
    try:
        before = {p.name: p.read_bytes() for p in cache.iterdir()}
        with pytest.raises(LockBusy, match=rf"(?s)must be prepared again \(it was prepared for another corpus.*"
                                           rf"pid {run_a.pid} .*reading it.*another `cache_dir`"):
            prepare_corpus(y, cache)
        assert {p.name: p.read_bytes() for p in cache.iterdir()} == before
        assert Corpus(prepare_corpus(x, cache)).n_cells == 20  # runs on the same corpus share the cache
    finally:
        run_a.kill()
        run_a.wait(timeout=30)
    assert Corpus(prepare_corpus(y, cache)).n_cells == 30  # A is gone: its lock went with it
    preparing = _child(WRITE, cache)
    try:
        with pytest.raises(LockBusy, match=rf"(?s)pid {preparing.pid} .*writing it.*preparing it"):
            Corpus(cache)
        with pytest.raises(LockBusy, match="writing it"):
            prepare_corpus(y, cache)
    finally:
        preparing.kill()
        preparing.wait(timeout=30)


def test_manifest_and_shards_never_follow_a_planted_symlink(tmp_path):
    """Issue 24: the manifest was written to `manifest.json.<pid>.tmp`; a symlink planted there redirected it."""
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    _h5ad(tmp_path / "a.h5ad")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"manifest.json.{os.getpid()}.tmp").symlink_to(outside)
    (cache / "shard_00000.npz").symlink_to(outside)  # the shard itself is written beside, then renamed
    corpus = Corpus(prepare_corpus([{"path": str(tmp_path / "a.h5ad"), "layer": "counts"}], cache))
    assert outside.read_text() == "precious"
    assert corpus.n_cells == 30 and not (cache / "shard_00000.npz").is_symlink()


# --------------------------------------------------------------------------- input files that are not h5ad
def test_corpus_preparation_names_a_file_that_is_not_h5ad(tmp_path):
    from biomjepa.data.shards import prepare_corpus

    csv = tmp_path / "counts.csv"
    csv.write_text("gene,cell1\nINS,3\n")
    with pytest.raises(ValueError, match=r"counts\.csv is not an \.h5ad file"):
        prepare_corpus(str(csv), tmp_path / "cache")
    fake = tmp_path / "fake.h5ad"
    fake.write_text("not hdf5 at all")
    with pytest.raises(ValueError, match=r"fake\.h5ad is not an \.h5ad file \(HDF5\) nor .* but a text file"):
        prepare_corpus([str(fake)], tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match=r"missing\.h5ad does not exist"):
        prepare_corpus(str(tmp_path / "missing.h5ad"), tmp_path / "cache")
