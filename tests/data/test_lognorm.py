"""``biomjepa.data.lognorm``: log1p(normalize_total) values read as the counts they came from, or refused."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from scipy import sparse

from biomjepa.data.anndata_source import counts_view
from biomjepa.data.stream import iter_tokenized
from biomjepa.data.vocab import Vocab


@pytest.fixture
def mapped(counts_adata):
    counts_adata.var["biomjepa_token"] = Vocab.default().index_of(counts_adata.var_names)
    return counts_adata


def lognorm(a, target_sum=1e4):
    """``log1p(normalize_total(target_sum))`` of ``a.X`` as scanpy computes it; ``obs['total_counts']``."""
    b = a.copy()
    X = b.X.toarray().astype(np.float64)
    totals = X.sum(axis=1)
    b.obs["total_counts"] = totals
    b.X = sparse.csr_matrix(np.log1p(X * (target_sum / totals)[:, None]).astype(np.float32))
    return b


def tokens(view, chunk=16):
    return [cells for _, cells in iter_tokenized(view, chunk=chunk)]


def _same(a, b):
    for f in ("indptr", "genes", "values", "library"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


@pytest.mark.parametrize("target_sum", [1e4, 1e6, 2345.0])
def test_lognorm_reads_as_the_counts_it_came_from(mapped, target_sum):
    want = tokens(mapped)
    b = lognorm(mapped, target_sum)
    with pytest.warns(UserWarning, match=r"library size.*estimated as T / the smallest nonzero expm1 value"):
        estimated = counts_view(b, input="lognorm")
    for got in (tokens(estimated), tokens(counts_view(b, input="lognorm", library_size_key="total_counts"))):
        for g, w in zip(got, want, strict=True):
            _same(g, w)
    assert estimated.target_sum == pytest.approx(target_sum, rel=1e-5)


def test_scaled_subset_and_non_count_values_are_refused(mapped):
    b = lognorm(mapped)
    z = b.copy()
    X = z.X.toarray()
    z.X = (X - X.mean(axis=0)) / (X.std(axis=0) + 1e-6)  # sc.pp.scale
    with pytest.raises(ValueError, match=r"X contains negative values: scaled or z-scored"):
        tokens(counts_view(z, input="lognorm", library_size_key="total_counts"))
    hvg = b[:, :100].copy()  # genes selected after normalizing
    with pytest.raises(ValueError, match=r"one target sum.*Genes selected after normalizing"):
        tokens(counts_view(hvg, input="lognorm", library_size_key="total_counts"))
    smooth = b.copy()
    rng = np.random.default_rng(0)
    E = smooth.X.toarray()
    E[E > 0] = rng.gamma(2.0, 1.0, size=int((E > 0).sum()))  # positive, not counts
    E = np.log1p(1e4 * E / E.sum(axis=1, keepdims=True))
    smooth.X = sparse.csr_matrix(E)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        view = counts_view(smooth, input="lognorm")
    with pytest.raises(ValueError, match=r"nor whole multiples of the cell's smallest value.*input='counts'"):
        tokens(view)
    b.obs["n_genes"] = (b.X > 0).sum(axis=1).A1.astype(float)
    with pytest.raises(ValueError, match=r"obs\['n_genes'\] does not match .* not these cells' total count"):
        tokens(counts_view(b, input="lognorm", library_size_key="n_genes"))


def test_argument_errors_name_the_argument(mapped):
    b = lognorm(mapped)
    with pytest.raises(ValueError, match=r"input='log' is not an input kind"):
        counts_view(b, input="log")
    with pytest.raises(ValueError, match=r"library_size_key='total_counts' is only used with input='lognorm'"):
        counts_view(b, library_size_key="total_counts")
    with pytest.raises(KeyError, match=r"library_size_key='libsize' is not a column of adata\.obs.*total_counts"):
        counts_view(b, input="lognorm", library_size_key="libsize")
    b.obs["bad"] = b.obs["total_counts"].to_numpy().copy()
    b.obs.loc[b.obs_names[3], "bad"] = 0.0
    with pytest.raises(ValueError, match=r"library_size_key='bad'.*positive, finite.*1 cells"):
        counts_view(b, input="lognorm", library_size_key="bad")
    b.obs["group_str"] = "x"
    with pytest.raises(ValueError, match=r"must hold numbers"):
        counts_view(b, input="lognorm", library_size_key="group_str")


def _quiet_view(a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return counts_view(a, input="lognorm", **kw)


def _refusal(a, key):
    with pytest.raises(ValueError) as err:
        tokens(_quiet_view(a, library_size_key=key))
    return str(err.value)


@pytest.mark.parametrize("key", [None, "total_counts"])
def test_refusals_name_the_cause_and_the_fix(mapped, key):
    """Each way log-normalized values go wrong is named as itself, with what to run (issue 30)."""
    b = lognorm(mapped)
    log2 = b.copy()
    log2.X.data /= np.float32(np.log(2))  # sc.pp.log1p(base=2)
    assert re.search(r"X holds log2\(1 \+ x\) values, not natural-log.*\*= np\.log\(2\)", _refusal(log2, key))
    empty = lognorm(mapped)
    empty.X = sparse.csr_matrix(np.where(np.arange(60)[:, None] == 5, 0, empty.X.toarray()))
    assert re.search(r"Cell 5 has no nonzero value in X.*sc\.pp\.filter_cells", _refusal(empty, key))
    half = b.copy()
    half.X = half.X.toarray().astype(np.float16)
    assert re.search(r"X is float16.*float32", _refusal(half, key))
    raw_log = mapped.copy()
    raw_log.obs["total_counts"] = 1.0
    raw_log.X = raw_log.X.copy()
    raw_log.X.data = np.log1p(raw_log.X.data)  # sc.pp.log1p without normalize_total
    assert re.search(r"log1p of counts that were never normalized.*input='counts'", _refusal(raw_log, key))


def test_batches_normalized_apart_are_named_and_the_fix_works(mapped):
    """normalize_total per batch (target_sum=None: each batch's median), then concatenated (issue 30)."""
    import anndata as ad

    parts = [lognorm(mapped[mapped.obs["group"] == g], target_sum=t) for g, t in zip("abc", (1e4, 2e3, 5e4), strict=True)]
    b = ad.concat(parts, merge="same")
    for key in (None, "total_counts"):
        msg = _refusal(b, key)
        assert re.search(r"normalized in groups with different target sums.*2 distinct values in rows 16\.\.31 \(2000, 10000; cell 20 sums to 2000", msg)
    X = b.X.toarray().astype(np.float64)  # the fix the message gives, in numpy
    E = np.expm1(X)
    b.X = sparse.csr_matrix(np.log1p(1e4 * E / E.sum(axis=1, keepdims=True)).astype(np.float32))
    for got, want in zip(tokens(_quiet_view(b, library_size_key="total_counts")), tokens(mapped), strict=True):
        _same(got, want)


def test_total_counts_from_before_filter_genes(mapped):
    """scanpy's total_counts (calculate_qc_metrics) taken before filter_genes disagrees with the values (issue 30)."""
    b = mapped.copy()
    b.obs["total_counts"] = np.asarray(b.X.sum(axis=1)).ravel()
    b = b[:, 40:].copy()  # sc.pp.filter_genes after the QC metrics, then normalize_total + log1p
    kept = b.copy()
    totals = np.asarray(b.X.sum(axis=1)).ravel()
    b.X = sparse.csr_matrix(np.log1p(b.X.toarray() * (1e4 / totals)[:, None]).astype(np.float32))
    msg = _refusal(b, "total_counts")
    assert re.search(r"obs\['total_counts'\] does not match the library sizes X was normalized with.*"
                     r"before genes were removed.*filter_genes.*Leave library_size_key out", msg)
    for got, want in zip(tokens(_quiet_view(b)), tokens(kept), strict=True):  # the fix: what the counts give
        _same(got, want)


def test_estimated_library_sizes_do_what_the_warning_says(mapped):
    """The warning says which cells are refused and which get a wrong estimate; both happen as said (issue 30)."""
    with pytest.warns(UserWarning, match="without library_size_key") as record:
        counts_view(lognorm(mapped), input="lognorm")
    said = str(record[0].message)
    assert "refused unless all its counts are multiples of k" in said and "k times too small" in said
    X = mapped.X.toarray()
    X[7] = 0
    X[7, :3] = (2, 3, 5)  # smallest count 2, others not multiples: refused, naming the cell's smallest count
    odd = lognorm(mapped)
    odd.X = lognorm(_with(mapped, X)).X
    assert re.search(r"Cell 7 of X has no gene with exactly one count.*smallest count is 2.*library_size_key=",
                     _refusal(odd, None))
    X[7, :3] = (2, 4, 6)  # all multiples of 2: taken as 1, 2, 3, library size 6 instead of 12, as the warning says
    even = lognorm(_with(mapped, X))
    library = np.concatenate([c.library for c in tokens(_quiet_view(even))])
    assert library[7] == 6 and library[8] == X[8].sum()


def _with(a, X):
    b = a.copy()
    b.X = sparse.csr_matrix(X)
    return b
