"""Store the golden embeddings that ``tests/model/test_golden.py`` compares a bundled checkpoint against.

    python scripts/store_golden.py [--checkpoint biomjepa-mini] --out tests/model/data/golden_embeddings_v0.3.npz

Embeds the first 96 cells of ``bj.datasets.pancreas()`` with ``bj.tl.embed`` at batch size 16 on the CPU
and writes their names, the float32 embedding, the CPU's torch capability (bit-exact comparisons are only
made on a CPU with the same one) and the checkpoint name the embedding recorded, atomically. Run it only
when a bundled checkpoint is added or replaced, or the demo cells' data change (issue 46: their gene symbols),
on purpose, never to make a failing golden test pass; say how far the values moved (test_golden.py's docstring).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main() -> None:
    import torch

    import biomjepa as bj
    from biomjepa._files import atomic_path

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=None, help="registry name or directory (default: bj.settings.checkpoint)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    adata = bj.datasets.pancreas()[:96].copy()
    bj.pp.map_vocab(adata)
    bj.tl.embed(adata, batch_size=16, device="cpu", checkpoint=args.checkpoint)
    params = adata.uns["biomjepa"]["params"]
    with atomic_path(args.out, suffix=".npz") as tmp:
        np.savez_compressed(tmp, cells=np.asarray(adata.obs_names, dtype=str),
                            embedding=adata.obsm["X_biomjepa"].astype(np.float32),
                            cpu_capability=np.asarray(torch.backends.cpu.get_cpu_capability()),
                            checkpoint=np.asarray(params["checkpoint"]))
    print(f"wrote {args.out}: {params['checkpoint']} ({params['checkpoint_sha256'][:12]}…), "
          f"{adata.n_obs} cells × {adata.obsm['X_biomjepa'].shape[1]}")


if __name__ == "__main__":
    main()
