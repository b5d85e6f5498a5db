"""The one batched inference loop (``biomjepa.nn.inference``): rows back in input order whatever the
batching, under ``torch.inference_mode`` and the one precision choice, and bit-identical to the per-tool
loops it replaced (``tl.embed``, ``tl.max_token``, ``predict_proba``, the training probe)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import biomjepa as bj
from biomjepa._device import autocast, dtype_label
from biomjepa.data.collate import collate, sorted_batches
from biomjepa.data.tokenize import TokenizedCells
from biomjepa.model import BiomJEPA, load_checkpoint
from biomjepa.nn import embed_cells, map_batches, map_cells

CPU = torch.device("cpu")


def _cells(n: int = 23, seed: int = 0) -> TokenizedCells:
    """``n`` cells with 1–40 distinct vocabulary genes each (lengths vary, so batches re-order them)."""
    rng = np.random.default_rng(seed)
    genes = [np.sort(rng.choice(2000, size=int(rng.integers(1, 41)), replace=False)) for _ in range(n)]
    indptr = np.r_[0, np.cumsum([len(g) for g in genes])].astype(np.int64)
    values = rng.uniform(0.1, 3.0, size=indptr[-1]).astype(np.float32)
    return TokenizedCells(indptr, np.concatenate(genes).astype(np.int64), values, rng.uniform(500, 5000, n))


@pytest.fixture(scope="module")
def model(tiny_checkpoint) -> BiomJEPA:
    """The conftest's random-init ``tiny`` checkpoint (what ``tl.embed(checkpoint=...)`` loads too)."""
    return load_checkpoint(tiny_checkpoint).eval()


def _old_loop(cells, vocab_size, readout, out, batch_size, max_tokens=None):
    """The loop each tool carried before (``tl/_embed.py:embed_cells`` at bb5f3b6, the same in the others)."""
    with torch.inference_mode(), autocast(CPU):
        for rows in sorted_batches(cells.lengths, batch_size, max_tokens=max_tokens):
            got = readout(collate(cells, vocab_size, rows).to(CPU))
            for array, tensor in zip(out, got if isinstance(got, tuple) else (got,)):
                array[rows] = tensor.cpu().numpy()
    return out


@pytest.mark.parametrize("batch_size", [1, 4, 7, 64])
@pytest.mark.parametrize("max_tokens", [None, 60])
def test_rows_come_back_in_input_order(batch_size, max_tokens):
    cells = _cells()
    seen = []

    def step(sub):
        seen.append(len(sub))
        first = torch.from_numpy(sub.genes[sub.indptr[:-1]])
        return torch.from_numpy(sub.library), first, torch.from_numpy(sub.lengths)

    out = (np.empty(len(cells)), np.empty(len(cells), np.int64), np.empty(len(cells), np.int64))
    library, first, lengths = map_cells(cells, step, out, batch_size=batch_size, device="cpu", max_tokens=max_tokens)
    np.testing.assert_array_equal(library, cells.library)
    np.testing.assert_array_equal(first, cells.genes[cells.indptr[:-1]])
    np.testing.assert_array_equal(lengths, cells.lengths)
    assert sum(seen) == len(cells) and max(seen) <= batch_size
    assert len(seen) == len(sorted_batches(cells.lengths, batch_size, max_tokens=max_tokens))


def test_embedding_does_not_depend_on_cell_order_or_batch_size(model):
    cells = _cells()
    ref = embed_cells(model, cells, batch_size=len(cells), device=CPU)
    perm = np.random.default_rng(1).permutation(len(cells))
    for bs in (1, 5):
        np.testing.assert_allclose(embed_cells(model, cells.subset(perm), batch_size=bs), ref[perm], rtol=0, atol=1e-5)
    # one batch in another order holds the same padded rows: equal bit for bit
    np.testing.assert_array_equal(embed_cells(model, cells.subset(perm), batch_size=len(cells)), ref[perm])


def test_same_embeddings_as_the_previous_loop_and_tl_embed(model, counts_adata, tiny_checkpoint):
    from biomjepa.data.stream import gather
    from biomjepa.tl import _embed

    cells = _cells()
    old = _old_loop(cells, model.config.vocab_size, lambda b: model(b).float(),
                    (np.empty((len(cells), model.config.embedding_dim), np.float32),), batch_size=4)[0]
    np.testing.assert_array_equal(embed_cells(model, cells, batch_size=4), old)
    np.testing.assert_array_equal(_embed.embed_cells(model, cells, batch_size=4), old)
    # tl.embed (reader → the loop) writes exactly what the loop gives on the same tokens
    with pytest.warns(UserWarning, match="vocab_coverage"):  # 300 genes: a panel, as the warning says
        bj.pp.map_vocab(counts_adata)
    bj.tl.embed(counts_adata, checkpoint=tiny_checkpoint, batch_size=8, device="cpu")
    direct = embed_cells(model, gather(counts_adata, np.arange(counts_adata.n_obs)), batch_size=8, device=CPU)
    np.testing.assert_array_equal(counts_adata.obsm["X_biomjepa"], direct)


def test_same_winners_probabilities_and_probe_as_the_previous_loops(model):
    from biomjepa.bench.probe import ProbeSet, probe_embeddings
    from biomjepa.nn.finetune import FinetuneModel, predict_proba
    from biomjepa.nn.pooling import POOLINGS, pool, pooled_width, winner_states
    from biomjepa.tl._max_token import _winners, max_token_shares

    cells, n, V = _cells(), 23, model.config.vocab_size

    def winners(b):
        _, w, s = max_token_shares(winner_states(model.hidden(b).float(), b.gene_mask, model.config.pooling),
                                   b.gene_mask, b.gene_ids)
        return w, s

    old = _old_loop(cells, V, winners, (np.empty(n, np.int64), np.empty(n, np.float32)), 3, bj.settings.max_batch_tokens)
    for got, want in zip(_winners(model, cells, batch_size=3, device=CPU), old):
        np.testing.assert_array_equal(got, want)

    torch.manual_seed(3)
    ft = FinetuneModel(model.encoder, 4).eval()
    old = _old_loop(cells, V, lambda b: torch.softmax(ft(b).float(), dim=-1), (np.empty((n, 4), np.float32),), 5)[0]
    np.testing.assert_array_equal(predict_proba(ft, cells, batch_size=5, device=CPU)[0], old)

    enc = model.encoder

    def readout(b):
        h = enc(b.gene_ids, b.values, b.mask).float()
        return tuple(pool(h, b.gene_mask, b.values, k) for k in POOLINGS)

    out = tuple(np.empty((n, pooled_width(k) * enc.config.d_model), np.float32) for k in POOLINGS)
    old = _old_loop(cells, V, readout, out, 6, bj.settings.max_batch_tokens)
    enc.train()
    got = probe_embeddings(enc, ProbeSet(cells, np.zeros(n), np.zeros(n), None), batch_size=6)
    assert enc.training  # put back as it was
    enc.eval()
    for kind, want in zip(POOLINGS, old):
        np.testing.assert_array_equal(got[kind], want)


def test_runs_under_inference_mode_and_the_one_precision_choice(model):
    cells, states = _cells(5), []

    def readout(batch):
        states.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled(), torch.is_autocast_enabled("cuda")))
        return model(batch)

    (Z,) = map_batches(cells, readout, (np.empty((5, model.config.embedding_dim), np.float32),),
                       vocab_size=model.config.vocab_size, batch_size=2, device=CPU)
    assert states and all(s == (True, False, False) for s in states)  # CPU: float32, no autocast
    assert not torch.is_inference_mode_enabled()
    assert np.isfinite(Z).all()
    with pytest.raises(ValueError, match="2 tensors for 1 output"):
        map_cells(cells, lambda sub: (torch.zeros(len(sub)), torch.zeros(len(sub))), (np.empty(5),),
                  batch_size=2, device=CPU)


def test_one_precision_choice_and_its_label():
    """Inference follows bj.settings.precision (float32 by default, on every device); "auto" is bf16 on CUDA."""
    cuda = torch.device("cuda")
    assert dtype_label(CPU) == "float32" and dtype_label(cuda) == "float32"
    assert dtype_label(cuda, "auto") == dtype_label(CPU, "bf16") == "bfloat16-autocast"
    assert isinstance(autocast(CPU), contextlib.nullcontext)
    assert isinstance(autocast(cuda, "fp32"), contextlib.nullcontext)  # training with loop.precision fp32
    with autocast(CPU, "bf16"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_empty_cells_give_empty_rows(model):
    empty = _cells().subset(np.zeros(0, np.int64))
    assert embed_cells(model, empty).shape == (0, model.config.embedding_dim)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_probe_runs_in_the_precision_of_embed(model, monkeypatch):
    """On CUDA with precision "auto" the loop enters bf16 autocast for every caller: the probe gives the
    embedding ``tl.embed``'s loop gives, and both stay near the float32 CPU values."""
    import copy

    from biomjepa.bench.probe import ProbeSet, probe_embeddings

    monkeypatch.setattr(bj.settings, "precision", "auto")
    cells, seen, dev = _cells(), [], torch.device("cuda")
    map_cells(cells, lambda sub: (seen.append(torch.is_autocast_enabled("cuda")), torch.zeros(len(sub)))[1],
              (np.empty(len(cells)),), batch_size=8, device=dev)
    assert seen and all(seen)
    cpu = embed_cells(copy.deepcopy(model), cells, batch_size=8, device=CPU)
    gpu_model = copy.deepcopy(model)
    gpu = embed_cells(gpu_model, cells, batch_size=8, device=dev)
    probe = probe_embeddings(gpu_model.encoder, ProbeSet(cells, np.zeros(len(cells)), np.zeros(len(cells)), None),
                             batch_size=8)[model.config.pooling]
    np.testing.assert_allclose(probe, gpu, rtol=0, atol=1e-6 * np.abs(gpu).max())
    assert not np.array_equal(gpu, cpu)  # bf16 on CUDA, not float32
    np.testing.assert_allclose(gpu, cpu, rtol=0, atol=0.05 * np.abs(cpu).max())
