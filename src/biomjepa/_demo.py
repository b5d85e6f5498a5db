"""The README's main job: embed the bundled pancreas cells and draw a UMAP coloured by cell type."""

from __future__ import annotations

import logging
import time
from pathlib import Path

logger = logging.getLogger(__name__)


def run_demo(out: str | Path, *, checkpoint=None, batch_size=None, device="auto") -> dict:
    """Embed :func:`biomjepa.datasets.pancreas`, run scanpy neighbors/UMAP, write .h5ad and PNG."""
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt
    import scanpy as sc

    import biomjepa as bj

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    adata = bj.datasets.pancreas()
    bj.pp.map_vocab(adata)
    t0 = time.perf_counter()
    bj.tl.embed(adata, checkpoint=checkpoint, batch_size=batch_size, device=device)
    seconds = time.perf_counter() - t0
    params = adata.uns["biomjepa"]["params"]
    message = (
        f"embedded {adata.n_obs} cells with {params.get('checkpoint')} in {seconds:.1f} s "
        f"on {params.get('device')} ({adata.obsm['X_biomjepa'].shape[1]}-d)"
    )
    sc.pp.neighbors(adata, use_rep="X_biomjepa")
    sc.tl.umap(adata, random_state=0)
    fig, ax = plt.subplots(figsize=(6, 5))
    sc.pl.umap(adata, color="cell_type", ax=ax, show=False, title="BioM-JEPA embedding (pancreas demo)")
    fig.savefig(out / "umap_pancreas.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    adata.write_h5ad(out / "pancreas_embedded.h5ad")
    return {"message": message, "h5ad": out / "pancreas_embedded.h5ad", "png": out / "umap_pancreas.png"}
