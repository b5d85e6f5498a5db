"""``biomjepa.data.lognorm``: log1p(normalize_total) values read as the counts they came from, or refused."""

from __future__ import annotations

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
    with pytest.raises(ValueError, match=r"not whole multiples of the smallest one.*library_size_key="):
        tokens(view)
    b.obs["n_genes"] = (b.X > 0).sum(axis=1).A1.astype(float)
    with pytest.raises(ValueError, match=r"obs\['n_genes'\] does not fit X"):
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
