"""What reaches the encoder from each source: token values and library tokens per file (issue 37, item 1).

For every raw-count file of ``../shared/data/scrna``: the median library size, the median number of vocabulary
tokens per cell, the 1st/10th/50th/99th percentiles of the token values ``log1p(1e4 · c / total)``, the share of
tokens under ``log 2`` (a droplet cell's smallest value is ``log1p(1e4 / total)`` ≈ 1.1–1.8) and the library
token ``log10(total)``; plate-based read-count files also as molecule equivalents (``input="reads"``).
First 300 cells of each file, through the package's one reader.

    python benchmarks/evaluation/value_scale.py     # -> benchmarks/results/value_scale.csv
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._common import SHARED, write_csv

#: plate-based read counts (the data README), with the mapping keys their corpus entries use
READS = {"camp2015_fetal_neocortex_220cells_raw.h5ad": {}, "darmanis2015_brain_466cells_raw.h5ad": {},
         "pollen2014_neural_64cells_raw.h5ad": {}, "islam2011_mouse_esc_mef_92cells_raw.h5ad": {"species": "mouse"},
         "mls_liposarcoma_cellline_G1_94cells_raw.h5ad": {"gene_key": "gene_symbol"},
         "goolam2016_mouse_preimplantation_embryo_124cells_raw.h5ad": {"species": "mouse", "gene_key": "gene_symbol"}}
MOUSE = {"baron2016_mouse_pancreas_1886cells_raw.h5ad", "zilionis2019_mouse_lung_800cells_raw.h5ad",
         "grun2016_mouse_intestine_431cells_raw.h5ad"}


def row(name: str, kind: str, cells) -> dict:
    v = cells.values
    q = np.quantile(v, [0.01, 0.1, 0.5, 0.99])
    return {"file": name, "input": kind, "cells": len(cells), "median_library": float(np.median(cells.library)),
            "library_token": float(np.median(np.log10(cells.library))), "median_tokens": float(np.median(cells.lengths)),
            "value_q01": q[0], "value_q10": q[1], "value_median": q[2], "value_q99": q[3],
            "share_under_log2": float((v < np.log(2)).mean())}


def main() -> None:
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    import anndata as ad

    import biomjepa as bj
    from biomjepa.data.anndata_source import counts_view
    from biomjepa.data.stream import gather

    rows = []
    for path in sorted((SHARED / "scrna").glob("*_raw.h5ad")):
        a = ad.read_h5ad(path)[:300].copy()
        keys = READS.get(path.name, {"species": "mouse"} if path.name in MOUSE else {})
        bj.pp.map_vocab(a, **keys)
        mapped = np.asarray(a.X[:, a.var["biomjepa_token"].to_numpy() >= 0].sum(1)).ravel() > 0
        a = a[mapped].copy()  # as corpus preparation does: cells with no vocabulary gene are dropped
        for kind in ("counts", "reads") if path.name in READS else ("counts",):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rows.append(row(path.name, kind, gather(counts_view(a, input=kind), np.arange(a.n_obs))))
            print({k: (round(x, 3) if isinstance(x, float) else x) for k, x in rows[-1].items()}, flush=True)
    write_csv(rows, "value_scale.csv")


if __name__ == "__main__":
    main()
