"""Atlas-scale embedding: many ``.h5ad`` inputs → one zarr store, sharded over ranks and resumable.

``biomjepa embed INPUT... --store OUT.zarr`` (or ``torchrun --nproc_per_node=N -m biomjepa.embed
INPUT... --store OUT.zarr``) runs :func:`embed_atlas`; :func:`read_atlas` reads the store back into
AnnData. See the "Embedding an atlas" page of the documentation.
"""

from __future__ import annotations

from .run import embed_atlas
from .store import read_atlas

__all__ = ["embed_atlas", "read_atlas"]
