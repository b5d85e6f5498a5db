"""Linear attention: the PyTorch reference equals the naive O(n²) formula, forward and backward."""

from __future__ import annotations

import pytest
import torch

from biomjepa.nn import EncoderBlock, ModelConfig, linear_attention, naive_linear_attention


def _qkv(b=3, h=4, t=37, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, t, d, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.ones(b, t, dtype=torch.bool)
    if b >= 3:
        mask[1, t // 2 :] = False
        mask[2, 5:] = False
    return q, k, v, mask


def test_reference_equals_naive_forward_and_backward():
    q, k, v, mask = _qkv()
    fast = linear_attention(q, k, v, mask)
    slow = naive_linear_attention(q, k, v, mask)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-12)
    w = torch.randn_like(fast)
    g_fast = torch.autograd.grad((fast * w).sum(), (q, k, v))
    g_slow = torch.autograd.grad((slow * w).sum(), (q, k, v))
    for a, b in zip(g_fast, g_slow):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_naive_matches_handwritten_formula():
    q, k, v, mask = _qkv(b=1, h=1, t=5, d=3)
    phi = lambda u: torch.nn.functional.elu(u) + 1  # noqa: E731
    y = torch.stack(
        [
            (phi(q[0, 0, i]) @ sum(torch.outer(phi(k[0, 0, j]), v[0, 0, j]) for j in range(5)))
            / (phi(q[0, 0, i]) @ sum(phi(k[0, 0, j]) for j in range(5)) + 1e-6)
            for i in range(5)
        ]
    )
    torch.testing.assert_close(naive_linear_attention(q, k, v, mask)[0, 0], y)


def test_padding_does_not_change_real_tokens():
    q, k, v, mask = _qkv(b=1, t=10)
    short = linear_attention(q[..., :6, :], k[..., :6, :], v[..., :6, :])
    mask = torch.zeros(1, 10, dtype=torch.bool)
    mask[0, :6] = True
    padded = linear_attention(q, k, v, mask)[..., :6, :]
    torch.testing.assert_close(short, padded, rtol=1e-12, atol=1e-12)


def test_base_block_parameter_count():
    cfg = ModelConfig.preset("base")
    block = EncoderBlock(cfg.d_model, cfg.n_heads, cfg.d_ff)
    assert sum(p.numel() for p in block.parameters()) == 7_087_872
    # Partial fine-tuning: final block + the 2 LayerNorms of each of the other 11 blocks.
    leaf_ln = 11 * 2 * (2 * cfg.d_model)
    assert 7_087_872 + leaf_ln == 7_121_664


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
def test_cuda_matches_cpu_reference():
    q, k, v, mask = _qkv(t=300)
    ref = linear_attention(q, k, v, mask)
    out = linear_attention(*(x.detach().cuda() for x in (q, k, v)), mask.cuda()).cpu()
    torch.testing.assert_close(out, ref.detach(), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("masked", [False, True])
def test_chunked_inference_path_equals_naive(monkeypatch, masked):
    """The CPU inference path processes tokens in chunks; tiny chunks must give the same result."""
    import biomjepa.nn.attention as attn

    monkeypatch.setattr(attn, "CHUNK_ELEMENTS", 16)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 37, 8, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, 37, dtype=torch.bool)
    if masked:
        mask[1, 20:] = False
    with torch.inference_mode():
        fast = linear_attention(q, k, v, mask if masked else None)
    ref = naive_linear_attention(q, k, v, mask if masked else None)
    real = mask[:, None, :, None].expand_as(ref)
    torch.testing.assert_close(fast[real], ref[real], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunk", [100, 2400])  # one cell in several token blocks; two whole cells per block
@pytest.mark.parametrize("masked", [False, True])
def test_streamed_block_equals_whole_block(monkeypatch, masked, chunk):
    """CPU inference streams projections, attention and FFN in token chunks: same block output."""
    import biomjepa.nn.attention as attn

    torch.manual_seed(0)
    block = EncoderBlock(d_model=16, n_heads=4, d_ff=32).double().eval()
    x = torch.randn(5, 37, 16, dtype=torch.float64)
    mask = torch.ones(5, 37, dtype=torch.bool)
    if masked:
        mask[1, 20:] = False
        mask[2, 5:] = False
    m = mask if masked else None
    with torch.no_grad():
        whole = block(x, m)  # 5·37·32 elements per FFN activation < CHUNK_ELEMENTS: runs whole
    x_before = x.clone()
    monkeypatch.setattr(attn, "CHUNK_ELEMENTS", chunk)
    blocks = attn.token_blocks(5, 37, chunk // 32)  # what the attention streams over (d = 16)
    assert len(blocks) == (5 * 13 if chunk == 100 else 3)  # 3-token ranges / cells 0–1, 2–3, 4
    calls = []
    streamed_attn = attn.LinearSelfAttention._forward_streamed
    monkeypatch.setattr(attn.LinearSelfAttention, "_forward_streamed", lambda *a: calls.append(1) or streamed_attn(*a))
    with torch.inference_mode():
        streamed = block(x, m)
    assert calls == [1]  # the streamed path really ran
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)
    real = mask[..., None].expand_as(whole)
    torch.testing.assert_close(streamed[real], whole[real], rtol=1e-10, atol=1e-12)


def test_block_streams_only_for_cpu_inference(monkeypatch):
    """Training mode or autograd keeps the whole-length path (the one autograd differentiates)."""
    import biomjepa.nn.attention as attn

    monkeypatch.setattr(attn, "CHUNK_ELEMENTS", 100)
    block = EncoderBlock(d_model=16, n_heads=4, d_ff=32)
    x = torch.randn(2, 37, 16)
    assert not attn.streams(x, 2 * 32, training=False)  # grad enabled
    with torch.no_grad():
        assert not attn.streams(x, 2 * 32, training=True)
        assert attn.streams(x, 2 * 32, training=False)
    y = block.eval()(x)
    y.sum().backward()  # the whole-length path with autograd still trains
    assert block.ffn[0].weight.grad is not None
