"""Which per-feature scale should an adapted checkpoint's readout carry? (issue 56)

``bj.tl.adapt`` records the adapted cells' own per-feature statistics, so its checkpoint returns
``(z - mean_cells) / scale_cells``; the base returns ``(z - mean_corpus) / scale_corpus``. Each is a fixed map (query
cells land in the same space). Only the per-feature scale changes a Euclidean neighbour graph, and few-shot F1
standardizes its input, so it cannot change. For checkpoints kept by ``adapt_vs_scvi.py --keep DIR``
(``DIR/<tissue>_seed<k>``) this scores, with ``benchmarks/protocol.py``, the adapted embedding scaled by

* ``own``: the adapted cells' statistics (what ``bj.tl.adapt`` ships), ``raw``: no per-feature scale, ``base``: the
  base checkpoint's corpus scale of the same features (its readout must match the adapted one);

and the base's zero-shot embedding with its corpus scale (``corpus``, shipped), the cells' own scale, and raw::

    python benchmarks/evaluation/adapt_readout_stats.py --kept DIR [--tissues pbmc brain immune] [--seeds 0 1 2]

Writes ``benchmarks/results/adapt_readout_stats_<tag>.csv`` (``--tag``), one row per (tissue, representation, stats,
seed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import write_csv
from benchmarks.protocol import embedding_scores, labelled, load


def rescaled(Z: np.ndarray, scale: np.ndarray, base_scale: np.ndarray) -> dict[str, np.ndarray]:
    """A standardized embedding ``Z`` (feature scale ``scale``) under each scale: ``own``, ``raw``, ``base``."""
    raw = Z.astype(np.float64) * scale
    return {"own": Z.astype(np.float64), "raw": raw, "base": raw / base_scale}


def readout(directory: str | Path) -> dict:
    return json.loads((Path(directory) / "config.json").read_text())["readout"]


def run_tissue(name: str, kept: Path, seeds, base: str) -> list[dict]:
    import biomjepa as bj
    from biomjepa._pretrained import resolve_checkpoint

    a, labels, kind, mapping = load(name)
    keep = labelled(labels)
    bj.pp.map_vocab(a, **mapping)
    bj.tl.embed(a, checkpoint=base, input=kind)
    base_scale = np.asarray(readout(resolve_checkpoint(base)[0])["scale"])
    raw0 = a.obsm["X_biomjepa"] * base_scale
    reps = {("zero-shot", "corpus", -1): a.obsm["X_biomjepa"], ("zero-shot", "raw", -1): raw0,
            ("zero-shot", "own", -1): (raw0 - raw0.mean(0)) / raw0.std(0)}
    for seed in seeds:
        d = kept / f"{name}_seed{seed}"
        bj.tl.embed(a, checkpoint=str(d), input=kind, key_added="X_adapted")
        variants = rescaled(a.obsm["X_adapted"], np.asarray(readout(d)["scale"]), base_scale)
        reps |= {("adapt", stats, seed): Z for stats, Z in variants.items()}
    rows = []
    for (rep, stats, seed), Z in reps.items():
        r = {"set": name, "representation": rep, "stats": stats, "adapt_seed": seed}
        rows.append(r | embedding_scores(np.asarray(Z[keep], np.float32), labels[keep], leiden_seeds=range(10),
                                         resolutions=(0.5, 1.0, 2.0)))
        print(name, rep, stats, seed, *(f"{k} {rows[-1][k]:.3f}" for k in ("leiden_ari_mean_r1", "knn15_agreement")))
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kept", type=Path, required=True, help="adapt_vs_scvi.py --keep's directory")
    p.add_argument("--tissues", nargs="+", default=["pbmc", "brain", "immune"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--checkpoint", default="biomjepa-mini-v0.5", help="the base the kept checkpoints started from")
    p.add_argument("--tag", default="three_tissues", help="the CSV is adapt_readout_stats_<tag>.csv")
    args = p.parse_args(argv)
    rows = [r for t in args.tissues for r in run_tissue(t, args.kept, args.seeds, args.checkpoint)]
    write_csv(rows, f"adapt_readout_stats_{args.tag}.csv")


if __name__ == "__main__":
    main()
