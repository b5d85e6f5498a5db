"""Which per-feature scale should an adapted checkpoint's readout carry? (issue 56; only that scale moves a Euclidean
graph, F1 standardizes.) Checkpoints kept by ``adapt_vs_scvi.py --keep DIR`` (``DIR/<tissue>_seed<k>``) scored by
``protocol.py`` with the adapted cells' statistics (``own``, shipped), none (``raw``), the base's corpus's (``base``);
the zero-shot one with its ``corpus`` scale (shipped), ``own``, ``raw``. Writes ``adapt_readout_stats_<tag>.csv``::

    python benchmarks/evaluation/adapt_readout_stats.py --kept DIR [--tissues pbmc brain immune] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import write_csv
from benchmarks.protocol import embedding_scores, labelled, load


def rescaled(Z: np.ndarray, scale: np.ndarray, base_scale: np.ndarray) -> dict[str, np.ndarray]:
    """A standardized embedding ``Z`` (feature scale ``scale``) under each scale: ``own``, ``raw``, ``base``."""
    raw = Z.astype(np.float64) * scale
    return {"own": Z.astype(np.float64), "raw": raw, "base": raw / base_scale}


def config_of(directory: str | Path) -> dict:
    return json.loads((Path(directory) / "config.json").read_text())


def run_tissue(name: str, kept: Path, seeds) -> list[dict]:
    import biomjepa as bj
    from biomjepa._pretrained import resolve_checkpoint

    a, labels, kind, mapping = load(name)
    keep = labelled(labels)
    provenance = config_of(kept / f"{name}_seed{seeds[0]}")["provenance"]  # the base they record, pinned by its hash
    base = "{name}#sha256={checkpoint_sha256}".format(**provenance["adapt"]["base"])
    bj.pp.map_vocab(a, **mapping)
    bj.tl.embed(a, checkpoint=base, input=kind)
    base_scale = np.asarray(config_of(resolve_checkpoint(base)[0])["readout"]["scale"])
    raw0 = rescaled(a.obsm["X_biomjepa"], base_scale, base_scale)["raw"]
    reps = {("zero-shot", "corpus", -1): a.obsm["X_biomjepa"], ("zero-shot", "raw", -1): raw0,
            ("zero-shot", "own", -1): (raw0 - raw0.mean(0)) / raw0.std(0)}
    for seed in seeds:
        d = kept / f"{name}_seed{seed}"
        bj.tl.embed(a, checkpoint=str(d), input=kind, key_added="X_adapted")
        variants = rescaled(a.obsm["X_adapted"], np.asarray(config_of(d)["readout"]["scale"]), base_scale)
        reps |= {("adapt", stats, seed): Z for stats, Z in variants.items()}
    return [{"set": name, "representation": rep, "stats": stats, "adapt_seed": seed}
            | embedding_scores(np.asarray(Z[keep], np.float32), labels[keep], leiden_seeds=range(10),
                               resolutions=(0.5, 1.0, 2.0)) for (rep, stats, seed), Z in reps.items()]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kept", type=Path, required=True, help="adapt_vs_scvi.py --keep's directory")
    p.add_argument("--tissues", nargs="+", default=["pbmc", "brain", "immune"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--tag", default="three_tissues", help="the CSV is adapt_readout_stats_<tag>.csv")
    args = p.parse_args(argv)
    rows = [r for t in args.tissues for r in run_tissue(t, args.kept, args.seeds)]
    table = pd.DataFrame(rows).groupby(["set", "representation", "stats"])[["leiden_ari_mean_r1", "knn15_agreement"]]
    print(table.mean().round(3), write_csv(rows, f"adapt_readout_stats_{args.tag}.csv"))


if __name__ == "__main__":
    main()
