import numpy as np
import pytest
import torch
from _kit import make_graph, make_shards

from biomjepa.data.collate import N_TECH
from biomjepa.data.shards import Corpus, prepare_corpus
from biomjepa.train.blocks import block_rng, sample_blocks
from biomjepa.train.ema import make_teacher
from biomjepa.train.inputs import build_inputs
from biomjepa.train.jepa import JEPA, dmt_pool
from biomjepa.train.targets import teacher_targets


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("jepa")
    corpus = Corpus(prepare_corpus(make_shards(tmp / "d", n_shards=1, cells=6), tmp / "c"))
    from biomjepa.data.graph import GeneGraph
    from biomjepa.train.blocks import BlockConfig

    graph = GeneGraph.load(make_graph(tmp))
    cells = corpus.cells(0, np.arange(6))
    cfg = BlockConfig(min_block=20, max_block=60, min_context=10, dmt_k=16)
    return cells, sample_blocks(cells.indptr, cells.genes, graph, cfg, block_rng(0, 0)), graph


def test_dmt_pool_matches_formula():
    torch.manual_seed(0)
    q, h = torch.randn(1, 2, 4), torch.randn(1, 5, 4)
    mask = torch.tensor([[[True, False, True, True, False], [False] * 5]])
    out = dmt_pool(q, h, mask, 0.1)
    cos = torch.nn.functional.cosine_similarity(q[0, 0][None], h[0, [0, 2, 3]])
    a = torch.softmax(cos / 0.1, 0)
    torch.testing.assert_close(out[0, 0], (a[:, None] * h[0, [0, 2, 3]]).sum(0))
    assert torch.equal(out[0, 1], torch.zeros(4))


def test_inputs_index_the_right_tokens(setup):
    cells, sample, _ = setup
    inp = build_inputs(cells, sample, 19264)
    n, K = sample.n_cells, sample.n_targets
    assert inp.pool_mask.shape == (n, K, inp.student.gene_ids.shape[1])
    # targets point at teacher positions holding the target genes; never in the student's context
    cell = inp.tgt_unit // K
    assert torch.equal(inp.teacher.gene_ids[cell, inp.tgt_pos], inp.tgt_gene)
    for i in range(n):
        ctx = set(inp.student.gene_ids[i][inp.student.gene_mask[i]].tolist())
        tg = set(inp.tgt_gene[cell == i].tolist())
        assert sample.fallback[i] or not (ctx & tg)
        allowed = inp.student.gene_ids[i][inp.pool_mask[i].any(0)]
        assert set(allowed.tolist()) <= ctx
    assert torch.all(inp.student.gene_ids[:, :N_TECH] >= 19264)


def test_token_units(setup):
    cells, sample, _ = setup
    inp = build_inputs(cells, sample, 19264, objective="token", token_cap=7, rng=np.random.default_rng(0))
    assert inp.query.shape[1] <= 7 and inp.valid.sum(1).max() <= 7
    U = inp.query.shape[1]
    assert torch.equal(inp.query.reshape(-1)[inp.tgt_unit], inp.tgt_gene)
    assert len(np.unique(inp.tgt_unit.numpy())) == int(inp.valid.sum()) == len(inp.tgt_unit)
    assert U >= 1


def _tiny_jepa(cells, sample):
    """A seeded ``tiny`` JEPA, its EMA teacher and the inputs of ``sample``."""
    from biomjepa.nn import ModelConfig

    torch.manual_seed(0)
    model = JEPA(ModelConfig.preset("tiny"), pred_layers=1, pred_heads=2, pred_dropout=0.0)
    return model, make_teacher(model.student), build_inputs(cells, sample, 19264)


def test_forward_teacher_targets_and_grads(setup):
    cells, sample, _ = setup
    model, teacher, inp = _tiny_jepa(cells, sample)
    pred = model(inp)
    assert pred.shape == (sample.n_cells, sample.n_targets, 32)
    t, counts = teacher_targets(teacher, inp, sample.n_targets)
    assert not t.requires_grad
    np.testing.assert_array_equal(counts.numpy(), sample.target_sizes.reshape(-1))
    h = teacher(inp.teacher.gene_ids, inp.teacher.values, inp.teacher.mask)
    i, k = np.argwhere(sample.valid)[0]
    manual = h[i, N_TECH + torch.as_tensor(sample.targets(i, k))].mean(0)
    torch.testing.assert_close(t[i * sample.n_targets + k], manual)
    pred[torch.as_tensor(sample.valid)].pow(2).sum().backward()
    assert model.predictor.query_embedding.weight.grad is not None
    assert all(p.grad is None for p in teacher.parameters())


def test_centred_targets_global_and_per_gene(setup):
    """Global centre: block mean − c. Per-gene centre: mean over the block of (h_g − c_g), by hand."""
    from biomjepa.train.targets import centred_targets

    cells, sample, _ = setup
    _, teacher, inp = _tiny_jepa(cells, sample)
    K = sample.n_targets
    h = teacher(inp.teacher.gene_ids, inp.teacher.values, inp.teacher.mask)
    hn = torch.nn.functional.layer_norm(h, h.shape[-1:])
    i, k = np.argwhere(sample.valid)[0]
    pos = N_TECH + torch.as_tensor(sample.targets(i, k))
    genes = inp.teacher.gene_ids[i, pos]

    c = torch.randn(32)
    t, means = centred_targets(teacher, inp, K, c)
    torch.testing.assert_close(t[i * K + k], h[i, pos].mean(0) - c)
    torch.testing.assert_close(means[i * K + k], h[i, pos].mean(0))

    cg = torch.randn(19266, 32)
    t, (sums, counts) = centred_targets(teacher, inp, K, cg, norm=True)
    torch.testing.assert_close(t[i * K + k], (hn[i, pos] - cg[genes]).mean(0))
    # the statistics are raw (uncentred, normalized) per-gene sums and counts over all target tokens
    assert counts.sum() == len(inp.tgt_gene)
    g0 = int(inp.tgt_gene[0])
    torch.testing.assert_close(sums[g0] / counts[g0], hn.reshape(-1, 32)[
        (inp.tgt_unit // K * h.shape[1] + inp.tgt_pos)[inp.tgt_gene == g0]].mean(0))


def test_per_gene_running_centre_only_touches_seen_genes():
    from biomjepa.train.running import RunningTargets

    r = RunningTargets(3, 5, rate=0.9, device="cpu")
    r.centre.fill_(0.9)
    r.centre_w.fill_(0.9)  # every row warmed up to 1.0
    seen = torch.tensor([0.0, 2, 0, 1, 0])
    r.update({"centre": (torch.zeros(5, 3), seen)})
    torch.testing.assert_close(r.centre_now()[seen > 0], torch.full((2, 3), 0.81 / 0.91))
    torch.testing.assert_close(r.centre_now()[seen == 0], torch.ones(3, 3))


def test_cell_centred_targets_drop_the_cells_level(setup):
    """cell=True: every cell's (gene-centred) target tokens have mean zero, and a per-cell shift of
    the teacher states changes nothing (the depth-set level is no target)."""
    from biomjepa.train.targets import centred_targets

    cells, sample, _ = setup
    _, teacher, inp = _tiny_jepa(cells, sample)
    K = sample.n_targets
    cg = torch.randn(19266, 32)
    t, _ = centred_targets(teacher, inp, K, cg, cell=True)
    h = teacher(inp.teacher.gene_ids, inp.teacher.values, inp.teacher.mask)
    i, k = np.argwhere(sample.valid)[0]
    cell_rows = (inp.tgt_unit // K) == i
    flat = h.reshape(-1, 32)[(inp.tgt_unit // K * h.shape[1] + inp.tgt_pos)]
    centred = flat - cg[inp.tgt_gene]
    level = centred[cell_rows].mean(0)
    pos = N_TECH + torch.as_tensor(sample.targets(i, k))
    genes = inp.teacher.gene_ids[i, pos]
    torch.testing.assert_close(t[i * K + k], (h[i, pos] - cg[genes]).mean(0) - level)
    # a constant added to all of one cell's target states moves no target of that cell
    shifted = cg - torch.randn(1, 32)  # same as adding a constant to every state
    t2, _ = centred_targets(teacher, inp, K, shifted, cell=True)
    torch.testing.assert_close(t2, t)
