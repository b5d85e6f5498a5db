"""``biomjepa.data.stream``: the one reader; chosen rows and small chunks give the same tokens."""

from __future__ import annotations

import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from _inputs import (
    BAD_VALUES,
    N_GENES,
    TOOLS,
    _bad,
    _dense,
    make_mapped,
    make_raw,
    programme,
    raises_unchanged,
)

import biomjepa as bj
from biomjepa.data.stream import gather, iter_selected, iter_tokenized, iter_vocab_counts
from biomjepa.data.tokenize import concat_cells
from biomjepa.data.vocab import Vocab


@pytest.fixture
def mapped(counts_adata):
    counts_adata.var["biomjepa_token"] = Vocab.default().index_of(counts_adata.var_names)
    return counts_adata


def _same(a, b):
    for f in ("indptr", "genes", "values", "library"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


def test_chunks_concatenate_to_one_pass(mapped):
    (_, whole), = list(iter_tokenized(mapped, chunk=1000))
    parts = list(iter_tokenized(mapped, chunk=7))
    assert [r.start for r, _ in parts] == list(range(0, 60, 7))
    _same(concat_cells([c for _, c in parts]), whole)


def test_selected_rows_equal_subset(mapped):
    (_, whole), = list(iter_tokenized(mapped))
    rows = np.array([0, 3, 8, 9, 30, 59])
    got = list(iter_selected(mapped, rows, chunk=8))
    assert np.concatenate([p for p, _ in got]).tolist() == list(range(len(rows)))
    assert len(got) == 4  # only the 8-row blocks holding a chosen row are read
    _same(gather(mapped, rows, chunk=8), whole.subset(rows))
    assert len(gather(mapped, np.zeros(0, np.int64))) == 0
    with pytest.raises(ValueError, match="sorted, unique"):
        gather(mapped, np.array([3, 1]))


def test_explicit_token_and_where(mapped):
    token = np.full(mapped.n_vars, -1)
    token[:10] = np.arange(10)
    (_, counts, totals), = list(iter_vocab_counts(mapped, token=token, vocab_size=10))
    assert counts.shape == (60, 10)
    np.testing.assert_allclose(totals, np.asarray(mapped.X.sum(1)).ravel())
    mapped.X[0, 0] = 0.5
    with pytest.raises(ValueError, match=r"myfile\.h5ad:X does not look like raw counts"):
        list(iter_vocab_counts(mapped, where="myfile.h5ad:X"))


def test_streamed_gene_stats_match_the_whole_matrix(mapped):
    from biomjepa.tl._null import gene_stats, scan_gene_stats

    V = Vocab.default().size
    (_, whole), = list(iter_tokenized(mapped))
    mean, det = gene_stats(whole.to_csr(V))
    ids = {"p": np.array([1000, 1001, 1002])}
    smean, sdet, hits = scan_gene_stats(mapped, layer=None, vocab_size=V, programmes=ids)
    np.testing.assert_allclose(smean, mean, rtol=1e-6)
    np.testing.assert_array_equal(sdet, det)
    owner = np.repeat(np.arange(len(whole)), whole.lengths)
    expect = np.zeros(len(whole), bool)
    expect[owner[np.isin(whole.genes, ids["p"])]] = True
    np.testing.assert_array_equal(hits["p"], expect)


def _lognorm_with_counts_in_raw(counts_adata, n_genes=100):
    """scanpy's habit: counts kept in ``.raw`` (all genes), ``X`` log-normalized on a subset of genes."""
    from biomjepa.data.anndata_source import RawCounts

    a = counts_adata.copy()
    a.raw = a
    a = a[:, :n_genes].copy()
    X = a.X.toarray()
    a.X = np.log1p(1e4 * X / X.sum(axis=1, keepdims=True)).astype(np.float32)
    a.var["biomjepa_token"] = Vocab.default().index_of(a.var_names)
    a.raw.var["biomjepa_token"] = Vocab.default().index_of(a.raw.var_names)
    return a, RawCounts(a)


def test_raw_counts_read_like_the_same_counts_in_x(mapped):
    a, raw = _lognorm_with_counts_in_raw(mapped)
    (_, want), = list(iter_tokenized(mapped))
    (_, got), = list(iter_tokenized(raw))
    _same(got, want)  # every gene of .raw, library sizes over all of them
    _same(gather(raw, np.array([2, 40]), chunk=16), want.subset(np.array([2, 40])))
    assert raw.n_obs == 60 and raw.n_vars == mapped.n_vars and a.n_vars == 100


def test_refused_x_points_at_raw_when_raw_holds_counts(mapped):
    a, _ = _lognorm_with_counts_in_raw(mapped)
    with pytest.raises(ValueError, match=r"X does not look like raw counts.*adata\.raw\.X does hold raw counts.*use_raw=True"):
        next(iter_tokenized(a))
    a.raw = None  # no .raw: the message points at input='lognorm' instead
    with pytest.raises(ValueError, match=r"layer='counts'\)\. If it holds log1p\(normalize_total\) values.*input='lognorm'"):
        next(iter_tokenized(a))


def test_counts_view_errors():
    import anndata as ad

    from biomjepa.data.anndata_source import counts_view

    a = ad.AnnData(np.ones((3, 2), dtype=np.float32))
    assert counts_view(a) is a
    with pytest.raises(ValueError, match=r"use_raw=True, but adata\.raw is None"):
        counts_view(a, use_raw=True)
    a.raw = a
    with pytest.raises(ValueError, match=r"cannot be combined with layer='counts'"):
        counts_view(a, layer="counts", use_raw=True)
    with pytest.raises(TypeError, match="use_raw must be True or False"):
        counts_view(a, use_raw="yes")


# ----------- what every tool reads through the stream: empty cells, non-count values, formats, dask, chunks
def test_cells_without_vocabulary_genes(ckpt):
    a = make_mapped("dense")
    a.X[3, :N_GENES] = 0  # cell 3 keeps only unmapped genes
    a.X[3, N_GENES] = 1
    for tool in TOOLS.values():
        raises_unchanged(a, ValueError, r"1 cell\(s\) have no expressed gene in the vocabulary.*filter_cells", tool, ckpt)


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_non_count_values_refused(kind, tool, ckpt):
    a = _bad(kind)
    raises_unchanged(a, ValueError, BAD_VALUES[kind], TOOLS[tool], ckpt)


def test_dense_csr_csc_backed_agree(ckpt, tmp_path):
    results = {}
    for fmt in ("dense", "csr", "csc"):
        a = make_mapped(fmt)
        before = a.copy()
        out = bj.tl.embed(a, checkpoint=ckpt, device="cpu", copy=True)
        bj.tl.max_token(a, checkpoint=ckpt, device="cpu", groupby="group")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fewer cells than n_cells
            bj.tl.ablate_programme(a, programme(), checkpoint=ckpt, device="cpu", n_cells=4)
        np.testing.assert_array_equal(_dense(a.X), _dense(before.X))  # X untouched
        assert type(a.X) is type(before.X)
        results[fmt] = (a.uns["biomjepa"]["vocab"]["count_fraction"], out.obsm["X_biomjepa"],
                        a.obs["max_token_gene"].tolist(), a.obs["ablation_excess"].to_numpy())
    make_raw("csr").write_h5ad(tmp_path / "raw.h5ad")
    backed = ad.read_h5ad(tmp_path / "raw.h5ad", backed="r")
    bj.pp.map_vocab(backed)
    bj.tl.embed(backed, checkpoint=ckpt, device="cpu")
    results["backed"] = (backed.uns["biomjepa"]["vocab"]["count_fraction"], backed.obsm["X_biomjepa"],
                         *results["csr"][2:])
    backed.file.close()
    ref = results["csr"]
    for fmt, res in results.items():
        assert res[0] == pytest.approx(ref[0]), fmt
        np.testing.assert_allclose(res[1], ref[1], rtol=1e-5, atol=1e-6, err_msg=fmt)
        assert res[2] == ref[2], fmt
        np.testing.assert_allclose(res[3], ref[3], rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=fmt)


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


@pytest.mark.filterwarnings("ignore:Programme genes not in the vocabulary")
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
