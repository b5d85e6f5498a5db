"""Tensor-level model code (never imports anndata)."""

from .attention import LinearSelfAttention, linear_attention, naive_linear_attention
from .config import ModelConfig
from .encoder import Encoder, EncoderBlock, ValueEmbedding
from .pooling import max_top5_pool, max_winners

__all__ = [
    "Encoder",
    "EncoderBlock",
    "LinearSelfAttention",
    "ModelConfig",
    "ValueEmbedding",
    "linear_attention",
    "max_top5_pool",
    "max_winners",
    "naive_linear_attention",
]
