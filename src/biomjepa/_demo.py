"""The README's main job: embed the bundled pancreas cells and draw a UMAP coloured by cell type."""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def untrained_checkpoint(preset: str = "mini", seed: int = 0) -> Path:
    """A seed-fixed, *untrained* checkpoint in the cache (used only when no pretrained one is bundled)."""
    import torch

    from ._settings import settings
    from .model import BiomJEPA, save_checkpoint
    from .nn import ModelConfig

    path = settings.cachedir / "checkpoints" / f"untrained-{preset}-seed{seed}"
    if not (path / "config.json").is_file():
        torch.manual_seed(seed)
        save_checkpoint(BiomJEPA(ModelConfig.preset(preset)), path, provenance={"kind": "untrained", "seed": seed})
    return path


def run_demo(out: str | Path, *, checkpoint=None, batch_size=None, device="auto") -> dict:
    """Embed :func:`biomjepa.datasets.pancreas`, run scanpy neighbors/UMAP, write .h5ad and PNG."""
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt
    import scanpy as sc

    import biomjepa as bj

    from ._pretrained import REGISTRY

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    message = "embedded with the pretrained checkpoint"
    if checkpoint is None and bj.settings.checkpoint not in REGISTRY:
        checkpoint = str(untrained_checkpoint())
        message = (
            "NO pretrained checkpoint is bundled in this version: embedded with an UNTRAINED, seed-0 "
            "`mini` encoder (d=128, 4 layers; the pipeline runs end to end; the embedding carries no learned biology)"
        )
    adata = bj.datasets.pancreas()
    bj.pp.map_vocab(adata)
    bj.tl.embed(adata, checkpoint=checkpoint, batch_size=batch_size, device=device)
    sc.pp.neighbors(adata, use_rep="X_biomjepa")
    sc.tl.umap(adata, random_state=0)
    fig, ax = plt.subplots(figsize=(6, 5))
    sc.pl.umap(adata, color="cell_type", ax=ax, show=False, title="BioM-JEPA embedding (pancreas demo)")
    fig.savefig(out / "umap_pancreas.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    adata.write_h5ad(out / "pancreas_embedded.h5ad")
    return {"message": message, "h5ad": out / "pancreas_embedded.h5ad", "png": out / "umap_pancreas.png"}
