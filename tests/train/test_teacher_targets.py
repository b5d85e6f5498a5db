"""The EMA teacher's side of a training step (issue 55, item 2): what it computes and what the targets read.

Per micro-batch the teacher runs once, without autograd, in float32 whatever the step's autocast, over every token
of its view (linear attention mixes them all, so no layer may run on the target tokens alone); the targets are then
exactly the block means of its final token states at the target positions minus the centre, and the view
contrast's per-cell state is exactly the mean of its final states over every gene token of the view. These tests
hold the step's targets bit-identical (``torch.equal``) to that definition on the ``mini`` recipe's data path
(gene budget with padding, thinned student view, global centre) at the ``tiny`` size, in the streamed CPU path
that ``mini``-sized views take and in the plain one: any change that makes the teacher do less work must keep them.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _kit import make_graph, make_shards

from biomjepa.nn import attention
from biomjepa.train.sections import LossSection, TeacherSection

K = 4  # blocks per cell, as the mini recipe
MINI = TeacherSection(target_centre="global", target_norm=False, cell_centre=False)  # the v0.5 recipe's targets


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    """A tiny JEPA, its teacher (moved off the student, as after EMA steps), a warmed global centre and the
    inputs of one 8-cell micro-batch prepared as the loop prepares them (gene budget, thinned student, blocks)."""
    from biomjepa.data.graph import GeneGraph
    from biomjepa.data.shards import Corpus, prepare_corpus
    from biomjepa.nn import ModelConfig
    from biomjepa.train.blocks import BlockConfig
    from biomjepa.train.ema import make_teacher
    from biomjepa.train.jepa import JEPA
    from biomjepa.train.prepare import InputPreparer
    from biomjepa.train.running import RunningTargets

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("teacher_targets")
    corpus = Corpus(prepare_corpus(make_shards(tmp / "d", n_shards=1, cells=8), tmp / "c"))
    graph = GeneGraph.load(make_graph(tmp))
    blocks = BlockConfig(n_targets=K, min_block=30, max_block=300, min_context=8, dmt_k=16)
    # a 120-gene budget on cells of 50-200 genes: some cells are cut to it, shorter ones are padded
    prepare = InputPreparer(graph, blocks, 19264, seed=0, rank=0, teacher_genes=120, thin_student=0.2,
                            objective="block", token_cap=64)
    inputs, _ = prepare(SimpleNamespace(cells=corpus.cells(0, np.arange(8)), ids=np.arange(8)), 0, 0)
    assert not bool(inputs.teacher.mask.all()), "the batch should hold padding"
    torch.manual_seed(0)
    model = JEPA(ModelConfig.preset("tiny"), pred_layers=1, pred_heads=2, pred_dropout=0.0)
    teacher = make_teacher(model.student)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.02 * torch.randn_like(p))
    running = RunningTargets(32, None, rate=0.9, device="cpu")
    running.update({"centre": (0.5 * torch.randn(32), torch.tensor(5.0))})
    return SimpleNamespace(model=model, teacher=teacher, inputs=inputs, running=running)


def reference(teacher, inputs, centre):
    """The definition: one forward over the whole view, then block means of final states − centre; the
    per-cell mean over gene tokens; the target-token rows themselves."""
    t = inputs.teacher
    with torch.no_grad():
        h = teacher(t.gene_ids, t.values, t.mask)
    n, T, D = h.shape
    rows = h.reshape(n * T, D)[torch.div(inputs.tgt_unit, K, rounding_mode="floor") * T + inputs.tgt_pos]
    units = inputs.valid.numel()
    sums = torch.zeros(units, D).index_add_(0, inputs.tgt_unit, rows)
    means = sums / torch.bincount(inputs.tgt_unit, minlength=units).float().clamp(min=1)[:, None]
    g = t.gene_mask[..., None].float()
    return means - centre, means, (h * g).sum(1) / g.sum(1).clamp(min=1), rows


@pytest.fixture(params=["plain", "streamed"])
def path(request, monkeypatch):
    """``streamed``: chunks small enough that the tiny teacher takes the streamed CPU path that every ``mini``
    teacher view takes in training (64 cells × 514 tokens), with token ranges of single cells."""
    if request.param == "streamed":
        monkeypatch.setattr(attention, "CHUNK_ELEMENTS", 4096)
    return request.param


def test_targets_are_the_block_means_of_one_whole_view_forward(step, path):
    from biomjepa.train.targets import make_targets

    t = step.inputs.teacher
    with torch.no_grad():
        assert attention.streams(torch.empty(*t.gene_ids.shape, 32), t.gene_ids.shape[0] * 32, False) == (
            path == "streamed")
    targets, stats, diag = make_targets(step.teacher, step.inputs, K, step.running, MINI)
    want, means, cell, rows = reference(step.teacher, step.inputs, step.running.centre_now())
    assert torch.equal(targets, want)
    assert torch.equal(diag["raw"], want)
    assert torch.equal(diag["cell_state"], cell)
    valid = step.inputs.valid.reshape(-1)
    assert torch.equal(stats["centre"][0], means[valid].sum(0))
    assert diag["token_rms"] == float(rows.pow(2).mean().sqrt())


def test_one_float32_teacher_forward_without_autograd(step, path):
    """Under the step's bf16 autocast (``loop.precision`` auto on bf16 CPUs, CUDA) the teacher still runs once, in
    eval mode, without grad, in float32: the targets are bit-identical to those of a float32 step."""
    from biomjepa.train.objectives import compute_objective
    from biomjepa.train.targets import make_targets

    calls = []
    hook = step.teacher.register_forward_hook(
        lambda m, a, out: calls.append((torch.is_grad_enabled(), m.training, out.dtype, out.requires_grad)))
    loss = LossSection(lambda_var=1.0, lambda_cov=0.04, lambda_view_nce=1.0)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            terms, _ = compute_objective(step.model, step.teacher, step.inputs, step.running, loss, MINI)
            bf16 = make_targets(step.teacher, step.inputs, K, step.running, MINI)
    finally:
        hook.remove()
    assert calls == [(False, False, torch.float32, False)] * 2  # one forward per objective, one per make_targets
    assert torch.isfinite(terms.total) and terms.total.requires_grad
    fp32 = make_targets(step.teacher, step.inputs, K, step.running, MINI)
    assert torch.equal(bf16[0], fp32[0]) and torch.equal(bf16[2]["cell_state"], fp32[2]["cell_state"])
    assert bf16[0].grad_fn is None and bf16[2]["cell_state"].grad_fn is None


def test_every_token_of_the_view_shapes_the_targets(step):
    """Linear attention mixes the whole view: a gene in no target block still moves the targets of its cell (the
    teacher cannot run on the target tokens alone), and no other cell's."""
    from biomjepa.data.collate import N_TECH
    from biomjepa.train.targets import make_targets

    inp = step.inputs
    cell0 = torch.div(inp.tgt_unit, K, rounding_mode="floor") == 0
    free = inp.teacher.gene_mask[0].clone()
    free[inp.tgt_pos[cell0]] = False
    assert free.any(), "cell 0 should observe a gene outside its target blocks"
    j = int(torch.nonzero(free)[0])
    assert j >= N_TECH
    values = inp.teacher.values.clone()
    values[0, j] += 1.0
    moved = SimpleNamespace(**{**inp.__dict__, "teacher": SimpleNamespace(**{**inp.teacher.__dict__, "values": values})})
    before = make_targets(step.teacher, inp, K, step.running, MINI)[0].reshape(-1, K, 32)
    after = make_targets(step.teacher, moved, K, step.running, MINI)[0].reshape(-1, K, 32)
    assert not torch.allclose(before[0][inp.valid[0]], after[0][inp.valid[0]], atol=1e-6)
    torch.testing.assert_close(before[1:], after[1:], rtol=0, atol=1e-6)
