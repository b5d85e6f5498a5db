from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from biomjepa.data.collate import N_TECH, collate, padding_waste, sorted_batches
from biomjepa.data.tokenize import check_counts, to_vocab_counts, tokenize


def test_values_duplicates_and_totals():
    X = sparse.csr_matrix(np.array([[1, 3, 0, 6], [0, 0, 2, 2]], dtype=float))
    token = np.array([5, 5, -1, 2])  # two vars on token 5, one unmapped
    counts, totals = to_vocab_counts(X, token, 10)
    assert totals.tolist() == [10, 4]  # totals over all input genes, unmapped included
    cells = tokenize(counts, totals)
    assert cells.genes.tolist() == [2, 5, 2]
    np.testing.assert_allclose(cells.values[:2], np.log1p(1e4 * np.array([6, 4]) / 10), rtol=1e-6)
    np.testing.assert_allclose(cells.values[2], np.log1p(1e4 * 2 / 4), rtol=1e-6)


def test_no_token_cap_and_collate_layout():
    rng = np.random.default_rng(0)
    X = sparse.random(5, 3000, density=0.8, random_state=1, format="csr") * 10
    X.data = np.ceil(X.data)
    counts, totals = to_vocab_counts(X, np.arange(3000), 3000)
    cells = tokenize(counts, totals)
    assert cells.lengths.tolist() == np.diff(X.indptr).tolist()
    b = collate(cells, 3000, rows=np.array([3, 1]))
    assert b.gene_ids.shape[1] == N_TECH + cells.lengths[[3, 1]].max()
    assert b.gene_ids[:, 0].eq(3000).all() and b.gene_ids[:, 1].eq(3001).all()
    assert b.values[:, 0].eq(4.0).all()
    np.testing.assert_allclose(b.values[:, 1].numpy(), np.log10(totals[[3, 1]]), rtol=1e-6)
    assert not b.gene_mask[:, :N_TECH].any() and b.mask[:, :N_TECH].all()
    assert b.gene_mask.sum(1).tolist() == cells.lengths[[3, 1]].tolist()
    del rng


def test_subset_and_drop_genes():
    X = sparse.csr_matrix(np.array([[1, 1, 0, 1], [1, 0, 1, 1], [0, 0, 0, 5]], dtype=float))
    cells = tokenize(*to_vocab_counts(X, np.arange(4), 4))
    sub = cells.subset(np.array([2, 0]))
    assert sub.genes.tolist() == [3, 0, 1, 3]
    dropped = cells.drop_genes(np.array([3]))
    assert dropped.lengths.tolist() == [2, 2, 0]
    assert dropped.genes.tolist() == [0, 1, 0, 2]
    np.testing.assert_array_equal(dropped.library, cells.library)


@pytest.mark.parametrize(
    ("values", "match"),
    [([1.0, np.nan], "NaN"), ([1.0, -2.0], "negative"), ([0.5, 1.7], "raw counts"), ([1.0, np.inf], "Inf")],
)
def test_check_counts_rejects(values, match):
    with pytest.raises(ValueError, match=match):
        check_counts(sparse.csr_matrix(np.array([values])))


def test_empty_cell_is_a_clear_error():
    X = sparse.csr_matrix(np.array([[1, 0], [0, 0]], dtype=float))
    with pytest.raises(ValueError, match="no expressed gene"):
        tokenize(*to_vocab_counts(X, np.array([0, 1]), 2))


def test_sorted_batches_cover_all_and_reduce_padding():
    lengths = np.random.default_rng(0).integers(100, 3000, size=500)
    batches = sorted_batches(lengths, 16)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    naive = [np.arange(i, min(i + 16, 500)) for i in range(0, 500, 16)]
    assert padding_waste(lengths, batches) < padding_waste(lengths, naive) / 5
    capped = sorted_batches(lengths, 16, max_tokens=6000)
    assert all(len(b) * (lengths[b].max() + N_TECH) <= 6000 or len(b) == 1 for b in capped)


# --------------------------------------------------------------------------- every value is checked
def test_non_integer_values_after_the_first_200k_are_refused():
    raw = np.ones(250_000, dtype=np.float32)
    lognorm = np.log1p(np.full(100_000, 3.0, dtype=np.float32))  # a later, log-normalized part
    X = sparse.csr_matrix(np.concatenate([raw, lognorm])[None, :])
    with pytest.raises(ValueError, match="does not look like raw counts"):
        check_counts(X)
    check_counts(sparse.csr_matrix(np.ones((1, 350_000), dtype=np.float32)))
