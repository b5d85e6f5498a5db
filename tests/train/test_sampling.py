"""Batch composition (data.batching, data.balance) and training inputs prepared in the loader's workers."""

import numpy as np
import pytest
import torch
from _kit import make_shards, tiny_config

from biomjepa.data.sampling import mixed_plan, source_plan
from biomjepa.data.shards import Corpus, ShardStream, prepare_corpus


@pytest.fixture
def corpus(tmp_path):
    # sources of 40, 10 and 10 cells
    paths = make_shards(tmp_path / "a", n_shards=1, cells=40, seed=1) + make_shards(tmp_path / "b", n_shards=2, cells=10,
                                                                                     seed=2)
    return Corpus(prepare_corpus(paths, tmp_path / "cache"))


def _sources(batches):
    return [{s for s, _ in b} for b in batches]


def test_source_batches_hold_one_source_and_follow_the_balance(corpus):
    take = 600
    natural = [next(b) for b in [source_plan(corpus.lengths, 3, 0, 1, 4, 2, 1.0)] for _ in range(take)]
    assert all(len(s) == 1 for s in _sources(natural))
    share = np.bincount([next(iter(s)) for s in _sources(natural)], minlength=3) / take
    assert share[0] == pytest.approx(40 / 60, abs=0.06)  # ∝ cells: every cell equally often
    plan = source_plan(corpus.lengths, 3, 0, 1, 4, 2, 0.0)
    even = np.bincount([next(iter(s)) for s in _sources(next(plan) for _ in range(take))], minlength=3) / take
    assert even == pytest.approx([1 / 3] * 3, abs=0.06)  # balance 0: every source equally often


def test_mixed_batches_draw_across_sources_and_cover_an_epoch(corpus):
    plan = mixed_plan(corpus.lengths, 3, 0, 1, 6, 2, 1.0)
    batches = [next(plan) for _ in range(10)]  # 60 cells: one epoch
    assert any(len(s) > 1 for s in _sources(batches))
    cells = {(s, int(r)) for b in batches for s, rows in b for r in rows}
    assert len(cells) == 60


@pytest.mark.parametrize("batching", ["source", "mixed"])
def test_stream_is_seeded_and_resumes_exactly(corpus, batching):
    def ids(start, n, seed=5):
        it = iter(ShardStream(corpus, batch_size=4, seed=seed, sort_pool=2, start=start, batching=batching, balance=0.5))
        return [next(it).ids.tolist() for _ in range(n)]

    full = ids(0, 12)
    assert ids(0, 12) == full
    assert ids(5, 7) == full[5:]
    assert ids(0, 12, seed=6) != full


def test_stream_refuses_an_unknown_batching_in_config_words(corpus):
    with pytest.raises(ValueError, match=r"data\.batching"):
        ShardStream(corpus, batch_size=4, seed=0, batching="tissue")
    with pytest.raises(ValueError, match=r"data\.balance"):
        ShardStream(corpus, batch_size=4, seed=0, batching="source", balance=2)


def test_inputs_prepared_in_workers_equal_those_prepared_in_process(tmp_path):
    """A micro-batch prepared in a loader worker is exactly what the main process prepares from the same cells at
    the same step (blocks, context, targets): seeded by the micro-batch's position, not by the worker."""
    import biomjepa.train.loop as loop
    from biomjepa.data.shards import CellBatch
    from biomjepa.data.tokenize import concat_cells
    from biomjepa.train.config import load_config
    from biomjepa.train.prepare import InputPreparer

    cfg = load_config(tiny_config(tmp_path, num_workers=2, accumulation=2))
    trainer = loop.Trainer(cfg, loop.init_distributed("cpu"))
    prepare = InputPreparer.of(cfg, trainer.graph, trainer.model.config.vocab_size, 0)
    data = trainer.batches()
    for j in range(5):
        inputs, ids = next(data)
        cells = concat_cells([trainer.corpus.cells(int(s), np.array([r])) for s, r in ids])  # shard rows = source rows
        again, _ = prepare(CellBatch(cells, ids), j // 2, j % 2)
        for key in ("query", "valid", "pool_mask", "tgt_unit", "tgt_pos", "tgt_gene", "tgt_value"):
            assert torch.equal(getattr(inputs, key), getattr(again, key)), (j, key)
        assert torch.equal(inputs.student.gene_ids, again.student.gene_ids)
    loop.unlock_run_dir(trainer.run_dir)
