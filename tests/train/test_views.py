"""Per-cell token budgets: the teacher's gene budget and the student's context cap."""

from __future__ import annotations

import numpy as np
import pytest
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
    inputs = tr._micro(next(tr.batches()), 0)
    assert int(inputs.teacher.mask.sum(1).max()) <= 60 + 2  # + the two technical tokens
    assert int(inputs.student.gene_mask.sum(1).max()) <= 12
    with pytest.raises(ValueError, match="teacher_genes"):
        tiny_config(tmp_path, teacher_genes=0)
