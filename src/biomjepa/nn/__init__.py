"""Tensor-level model code (never imports anndata)."""

from .attention import LinearSelfAttention, linear_attention, naive_linear_attention
from .config import ModelConfig
from .encoder import Encoder, EncoderBlock, ValueEmbedding
from .inference import embed_cells, map_batches, map_cells
from .pooling import max_top5_pool, max_winners

__all__ = [
    "Encoder",
    "EncoderBlock",
    "LinearSelfAttention",
    "ModelConfig",
    "ValueEmbedding",
    "embed_cells",
    "linear_attention",
    "map_batches",
    "map_cells",
    "max_top5_pool",
    "max_winners",
    "naive_linear_attention",
]


def __getattr__(name: str):
    """Submodules load on first attribute access (``biomjepa.nn.readout`` after ``import biomjepa``)."""
    import importlib
    import pkgutil

    if name in {m.name for m in pkgutil.iter_modules(__path__)}:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
