"""Model configuration: a frozen dataclass that travels inside every checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

VOCAB_SIZE = 19_264

_PRESETS: dict[str, dict] = {
    # The paper's encoder: 12 layers, d = 768, 12 heads (d_h = 64), FFN 3072.
    "base": dict(d_model=768, n_layers=12, n_heads=12, d_ff=3072),
    # CPU-sized models.
    "small": dict(d_model=256, n_layers=4, n_heads=4, d_ff=1024),
    "mini": dict(d_model=128, n_layers=4, n_heads=4, d_ff=512),
    # Unit tests.
    "tiny": dict(d_model=32, n_layers=2, n_heads=2, d_ff=64, n_value_bins=16),
}


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a BioM-JEPA encoder.

    Attributes
    ----------
    vocab_size
        Number of genes ``V``; token ids ``V`` and ``V + 1`` are the two technical tokens.
    d_model, n_layers, n_heads, d_ff
        Width, depth, attention heads and feed-forward width.
    n_value_bins
        Bins of the soft-binned expression-value embedding.
    dropout
        Dropout in attention output and feed-forward (0 for the encoder by default).
    attn_eps
        Added to the linear-attention normalizer (the paper's 1e-6).
    pooling
        Readout of the frozen cell embedding (:data:`biomjepa.nn.pooling.POOLINGS`): ``max_top5``
        (the paper; the default, and what checkpoints without the key use), a centred variant, ``mean_wmean``, or
        ``max_top5_mean_wmean`` (both, ``4 * d_model`` wide; what ``bj.tl.adapt`` exported until issue 56).
    """

    vocab_size: int = VOCAB_SIZE
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int = 3072
    n_value_bins: int = 100
    dropout: float = 0.0
    attn_eps: float = 1e-6
    pooling: str = "max_top5"

    def __post_init__(self) -> None:
        from .pooling import POOLINGS

        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}.")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}.")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "n_value_bins"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")

    @property
    def embedding_dim(self) -> int:
        """Size of the pooled cell embedding: ``2 * d_model`` (e.g. max ‖ top-5 mean), ``4 * d_model`` for
        ``max_top5_mean_wmean`` (:func:`biomjepa.nn.pooling.pooled_width`)."""
        from .pooling import pooled_width

        return pooled_width(self.pooling) * self.d_model

    @classmethod
    def preset(cls, name: str, **overrides) -> ModelConfig:
        """A named preset (``base``, ``small``, ``mini``, ``tiny``) with optional overrides."""
        if name not in _PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(_PRESETS)}.")
        return cls(**{**_PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """Build from a dict, rejecting unknown keys."""
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"Unknown ModelConfig keys {sorted(unknown)}; known: {sorted(known)}.")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)
