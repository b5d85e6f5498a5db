"""The BioM-JEPA encoder: token embedding + pre-LN linear-attention blocks (no final norm).

A ``base`` block has exactly 7,087,872 parameters (q, k, v, o with bias; FFN 768→3072→768 with
bias; two LayerNorms), which with the 22 leaf LayerNorms of the other 11 blocks reproduces the
paper's 7,121,664 encoder-trainable parameters for partial fine-tuning. Because there is no
embedding or final LayerNorm, pooled states are un-normalized residual streams.
"""

from __future__ import annotations

import torch
from torch import nn

from . import attention
from .attention import LinearSelfAttention, streams
from .config import ModelConfig


class ValueEmbedding(nn.Module):
    """Soft-binned embedding of a scalar expression value (scFoundation-style auto-discretization).

    ``v [B, T] → w = softmax(W2·LeakyReLU(W1·v) + α·LeakyReLU(W1·v)) [B, T, n_bins] → w @ E [B, T, D]``:
    a learned, smooth mixture over ``n_bins`` value-bin vectors, so nearby values get nearby
    embeddings and no hand-chosen bin edges are needed.
    """

    def __init__(self, n_bins: int, d_model: int) -> None:
        super().__init__()
        self.proj1 = nn.Linear(1, n_bins)
        self.proj2 = nn.Linear(n_bins, n_bins)
        self.alpha = nn.Parameter(torch.ones(()))
        # A softmax mixture averages its bins and shrinks them by ~1/sqrt(bins it mixes): bins start at
        # 0.02·sqrt(n_bins) so the value signal enters at the gene embedding's scale (0.02), not 10x below.
        self.bins = nn.Parameter(torch.randn(n_bins, d_model) * 0.02 * n_bins**0.5)
        self.act = nn.LeakyReLU(0.1)

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        h = self.act(self.proj1(values.unsqueeze(-1)))
        w = torch.softmax(self.proj2(h) + self.alpha * h, dim=-1)
        return w @ self.bins


class EncoderBlock(nn.Module):
    """Pre-LN block: ``x + attn(LN(x))`` then ``x + FFN(LN(x))``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = LinearSelfAttention(d_model, n_heads, dropout, eps)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if streams(x, x.shape[0] * self.ffn[0].out_features, self.training):
            return self._forward_streamed(x, mask)
        x = x + self.attn(self.ln1(x), mask)
        return x + self.ffn(self.ln2(x))

    def _forward_streamed(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """:meth:`forward` for CPU inference: the FFN runs on row blocks of the residual stream, in place.

        The FFN is per token, so running it on blocks of the flattened ``[B·T, D]`` stream changes
        nothing but the size of its ``[·, d_ff]`` activation, which would otherwise be the largest
        tensor of the block (page-faulted anew on every call once above the allocator's mmap
        threshold). Row blocks of a contiguous tensor are contiguous: no gather copies. The
        attention streams itself.
        """
        a = self.attn(self.ln1(x), mask)
        # in place on the attention's fresh output (the caller's x is untouched), unless autocast made it bf16:
        # the residual stream stays float32 (a bf16 stream rounds every state to 8 bits and breaks batch invariance)
        y = a.add_(x) if a.dtype == x.dtype else x + a
        rows = y.view(-1, y.shape[-1])
        per = max(1, attention.CHUNK_ELEMENTS // self.ffn[0].out_features)
        for s in range(0, rows.shape[0], per):
            r = rows[s : s + per]
            r.add_(self.ffn(self.ln2(r)))
        return y


class Encoder(nn.Module):
    """Gene-identity + expression-value token embedding followed by ``n_layers`` blocks.

    Token ids ``< V`` are genes; ``V`` and ``V + 1`` are the technical tokens (resolution, log10
    library size), whose values go through the same value embedding.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.gene_embedding = nn.Embedding(config.vocab_size + 2, config.d_model)
        nn.init.normal_(self.gene_embedding.weight, std=0.02)
        self.value_embedding = ValueEmbedding(config.n_value_bins, config.d_model)
        self.blocks = nn.ModuleList(
            EncoderBlock(config.d_model, config.n_heads, config.d_ff, config.dropout, config.attn_eps)
            for _ in range(config.n_layers)
        )

    def embed_tokens(self, gene_ids: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` ids and values → ``[B, T, D]`` input states."""
        return self.gene_embedding(gene_ids) + self.value_embedding(values)

    def forward(self, gene_ids: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``gene_ids``, ``values``, ``mask`` ``[B, T]`` → token states ``[B, T, D]``."""
        x = self.embed_tokens(gene_ids, values)
        for block in self.blocks:
            x = block(x, mask)
        return x
