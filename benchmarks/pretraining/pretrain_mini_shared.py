"""Issue-3 acceptance on the real corpus: graph stats, target-visibility audit, a short `mini`
pretraining run on CPU, and the effective rank of held-out Baron embeddings from the exported
teacher at each saved step.

Corpus: every ``../shared/data/scrna/*.h5ad`` (mouse Baron through 1:1 orthologs, Norman from its
``counts_reconstructed`` layer), minus the held-out Baron and sorted-PBMC cells listed in
``biomjepa/datasets/_data/heldout_*.txt`` (the evaluation cells).

    python benchmarks/pretraining/pretrain_mini_shared.py --steps 120 --every 40 --out /tmp/bj_mini
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import SHARED, write_csv


def corpus_spec() -> list[dict]:
    from importlib import resources

    held = Path(str(resources.files("biomjepa.datasets") / "_data"))
    s = SHARED / "scrna"
    return [
        {"path": str(s / "baron2016_pancreas_2142cells_raw.h5ad"), "exclude_obs": str(held / "heldout_baron2016_pancreas.txt")},
        {"path": str(s / "pbmc_sorted_2140cells_raw.h5ad"), "exclude_obs": str(held / "heldout_pbmc_sorted.txt")},
        {"path": str(s / "baron2016_mouse_pancreas_1886cells_raw.h5ad"), "species": "mouse"},
        {"path": str(s / "kang2018_pbmc_8684cells_raw.h5ad")},
        {"path": str(s / "norman2019_mcfaline2023_subset_500genes.h5ad"), "layer": "counts_reconstructed"},
        {"path": str(s / "papalexi2021_thp1_crispr_20729cells_299genes.h5ad")},
        {"path": str(s / "pbmc4k_2170cells_raw.h5ad")},
        {"path": str(s / "pbmc_10k_protein_v3_200cells.h5ad")},
        {"path": str(s / "pbmc_5k_protein_v3_200cells.h5ad")},
        {"path": str(s / "pbmc_donorA_2896cells_raw.h5ad")},
    ]


def main() -> None:
    import numpy as np

    import biomjepa as bj
    from biomjepa.bench import effective_rank
    from biomjepa.data.graph import GeneGraph, format_stats
    from biomjepa.data.shards import Corpus
    from biomjepa.train import export, preset, pretrain
    from biomjepa.train.audit import format_audit, target_visibility_audit

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--every", type=int, default=40)
    p.add_argument("--out", default="/tmp/bj_mini")
    p.add_argument("--audit-cells", type=int, default=5000)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()

    out = Path(args.out)
    cfg = preset("mini").replace(
        corpus=corpus_spec(), cache_dir=str(out / "cache"), out_dir=str(out / "runs"), steps=args.steps,
        checkpoint_every=args.every, keep_checkpoints=100, tensorboard=False, progress=False,
    ).with_overrides(args.set)
    run_dir = pretrain(cfg)

    graph_dir = next((out / "cache").rglob("graph.npz")).parent
    graph = GeneGraph.load(graph_dir)
    print(format_stats(graph))
    corpus = Corpus(graph_dir.parent)
    cells = [corpus.cells(i, np.arange(len(corpus.lengths[i]))) for i in range(len(corpus))]
    print(format_audit(target_visibility_audit(cells, graph, cfg.block_config(), n_cells=args.audit_cells)))

    demo = bj.datasets.pancreas()
    bj.pp.map_vocab(demo)
    rows = []
    for state in sorted((run_dir / "checkpoints").glob("step_*.pt")):
        ck = export(state, out / "export" / state.stem)
        bj.tl.embed(demo, checkpoint=str(ck), key_added="X_bj")
        rows.append({"checkpoint": state.stem, "effective_rank_heldout_baron": effective_rank(demo.obsm["X_bj"])})
        print(rows[-1])
    print("wrote", write_csv(rows, "pretrain_mini_shared.csv"))


if __name__ == "__main__":
    main()
