"""Per-cell token budgets: the teacher's gene budget and the student's context cap."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _kit import make_graph, tiny_config

from biomjepa.data.tokenize import TokenizedCells
from biomjepa.train.blocks import BlockConfig, block_rng, sample_blocks
from biomjepa.train.views import gene_budget, keep_mask


def _cells(lengths, seed=0):
    rng = np.random.default_rng(seed)
    genes = [np.sort(rng.choice(1500, n, replace=False)) for n in lengths]
    indptr = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    g = np.concatenate(genes).astype(np.int64)
    return TokenizedCells(indptr, g, rng.random(g.size).astype(np.float32) + 1, np.full(len(lengths), 1e4))


def test_gene_budget_keeps_at_most_budget_genes_with_their_values_and_library():
    cells = _cells([10, 300, 700])
    view = gene_budget(cells, 256, np.random.default_rng(1))
    assert view.lengths.tolist() == [10, 256, 256]
    for i in range(3):
        full = dict(zip(cells.genes[cells.indptr[i]:cells.indptr[i + 1]], cells.values[cells.indptr[i]:cells.indptr[i + 1]]))
        g = view.genes[view.indptr[i]:view.indptr[i + 1]]
        assert np.all(np.diff(g) > 0)  # still ascending within the cell
        assert all(full[x] == v for x, v in zip(g, view.values[view.indptr[i]:view.indptr[i + 1]]))
    np.testing.assert_array_equal(view.library, cells.library)


def test_gene_budget_is_uniform_and_draw_free_when_no_cell_exceeds_it():
    cells = _cells([400])
    hits = np.zeros(1500)
    for s in range(300):
        hits[gene_budget(cells, 100, np.random.default_rng(s)).genes] += 1
    seen = hits[cells.genes]
    assert abs(seen.mean() - 300 * 100 / 400) < 1 and seen.min() > 40  # every gene is drawn, about 1 in 4
    rng = np.random.default_rng(3)
    assert gene_budget(cells, 400, rng) is cells and gene_budget(cells, None, rng) is cells
    assert rng.random() == np.random.default_rng(3).random()  # no draw was made


def test_keep_mask_only_keeps_eligible_positions():
    indptr = np.array([0, 5, 12])
    eligible = np.array([1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1], bool)
    keep = keep_mask(indptr, eligible, 2, np.random.default_rng(0))
    assert not np.any(keep & ~eligible)
    assert keep[:5].sum() == 2 and keep[5:].sum() == 2


def test_context_cap_limits_the_student_and_dmt_candidates_stay_inside_it(tmp_path):
    from biomjepa.data.graph import GeneGraph

    graph = GeneGraph.load(make_graph(tmp_path))
    cells = _cells([600, 900, 80])
    cfg = BlockConfig(min_block=100, max_block=400, min_context=8, max_context=50)
    s = sample_blocks(cells.indptr, cells.genes, graph, cfg, block_rng(0, 0))
    per_cell = np.add.reduceat(s.context, cells.indptr[:-1])
    assert np.all(per_cell <= 50) and np.all(per_cell >= 1)
    for i in range(3):
        ctx = np.flatnonzero(s.context[cells.indptr[i]:cells.indptr[i + 1]])
        for k in range(cfg.n_targets):
            assert np.isin(s.dmt(i, k), ctx).all()
            assert not np.isin(s.targets(i, k), ctx).any() or s.fallback[i]


def test_budgets_reach_the_training_step_and_are_validated(tmp_path):
    from biomjepa.train.distributed import init_distributed
    from biomjepa.train.loop import Trainer

    cfg = tiny_config(tmp_path, teacher_genes=60, context_genes=12, min_context=4, batch_size=4, accumulation=1,
                      steps=2, checkpoint_every=100, tensorboard=False, progress=False)
    tr = Trainer(cfg, init_distributed("cpu"))
    inputs = tr._micro(next(tr.batches()))
    assert int(inputs.teacher.mask.sum(1).max()) <= 60 + 2  # + the two technical tokens
    assert int(inputs.student.gene_mask.sum(1).max()) <= 12
    with pytest.raises(ValueError, match="teacher_genes"):
        tiny_config(tmp_path, teacher_genes=0)


def _count_cells(n=40, seed=0):
    """Cells built from integer counts through the package's tokenizer (as the training corpus is)."""
    from scipy import sparse

    from biomjepa.data.tokenize import tokenize

    rng = np.random.default_rng(seed)
    X = sparse.random(n, 1500, density=0.2, random_state=seed, data_rvs=lambda k: rng.poisson(3, k) + 1).tocsr()
    totals = np.asarray(X.sum(1)).ravel() + rng.integers(0, 500, n)  # counts outside the vocabulary too
    return tokenize(X, totals), X, totals


def test_thin_cells_keeps_everything_at_fraction_one_and_counts_are_recovered_exactly():
    from biomjepa.train.views import thin_cells

    cells, _, totals = _count_cells()
    same, seen = thin_cells(cells, 1.0, np.random.default_rng(0))
    assert seen.all()
    np.testing.assert_array_equal(same.genes, cells.genes)
    np.testing.assert_allclose(same.library, totals)
    np.testing.assert_allclose(same.values, cells.values, rtol=1e-6)


def test_thin_cells_is_binomial_thinning_normalized_like_the_tokenizer():
    from biomjepa.data.tokenize import SCALE
    from biomjepa.train.views import thin_cells

    cells, X, totals = _count_cells(n=400)
    thin, seen = thin_cells(cells, 0.2, np.random.default_rng(1))
    cell = np.repeat(np.arange(len(cells)), cells.lengths)
    counts = np.rint(np.expm1(thin.values.astype(np.float64)) * thin.library[cell] / SCALE)
    assert np.all(counts <= X.data) and np.array_equal(counts > 0, seen)
    frac = thin.library / totals
    assert frac.min() >= 0.15 and frac.max() <= 1.0  # per-cell fraction drawn from [0.2, 1]
    assert abs(frac.mean() - 0.6) < 0.03 and frac.std() > 0.15  # U(0.2, 1): mean 0.6, s.d. 0.23
    kept_share = np.bincount(cell, weights=counts) / np.bincount(cell, weights=X.data)
    np.testing.assert_allclose(kept_share, frac, atol=0.1)  # the library thins with the genes
    assert np.all(np.add.reduceat(seen, cells.indptr[:-1]) >= 1)  # every cell keeps a gene


def test_context_stays_inside_the_eligible_positions(tmp_path):
    from biomjepa.data.graph import GeneGraph

    graph = GeneGraph.load(make_graph(tmp_path))
    cells = _cells([600, 900, 80])
    eligible = np.random.default_rng(5).random(cells.genes.size) < 0.3
    cfg = BlockConfig(min_block=100, max_block=400, min_context=8, max_context=50)
    s = sample_blocks(cells.indptr, cells.genes, graph, cfg, block_rng(0, 0), context_eligible=eligible)
    assert s.context.any() and not np.any(s.context & ~eligible)
    ref = sample_blocks(cells.indptr, cells.genes, graph, cfg, block_rng(0, 0))
    np.testing.assert_array_equal(s.target_pos, ref.target_pos)  # targets do not depend on the student's view
    for i in range(3):
        ctx = np.flatnonzero(s.context[cells.indptr[i]:cells.indptr[i + 1]])
        for k in range(cfg.n_targets):
            assert np.isin(s.dmt(i, k), ctx).all()


def test_thinned_student_views_reach_the_training_step(tmp_path):
    from biomjepa.train.distributed import init_distributed
    from biomjepa.train.loop import Trainer

    kw = dict(teacher_genes=60, min_context=4, batch_size=8, accumulation=1, steps=2, checkpoint_every=100,
              tensorboard=False, progress=False)
    plain = Trainer(tiny_config(tmp_path / "a", **kw), init_distributed("cpu"))
    thin = Trainer(tiny_config(tmp_path / "b", thin_student=0.1, **kw), init_distributed("cpu"))
    a, b = plain._micro(next(plain.batches())), thin._micro(next(thin.batches()))
    assert torch.equal(a.teacher.values, b.teacher.values)  # the teacher sees the cell as measured
    assert int(b.student.gene_mask.sum()) < int(a.student.gene_mask.sum())
    assert float(b.student.values[b.student.gene_mask].min()) > 0  # no thinned-out gene in the context
    with pytest.raises(ValueError, match="thin_student"):
        tiny_config(tmp_path, thin_student=0)
