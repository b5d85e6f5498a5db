"""Is the max-token winner the canonical marker? Against the trivial most-expressed-gene baseline.

For each cell type with a canonical marker set, the share of its cells whose max-token winner is in
the set, under two definitions of the token states the winner is taken over:
- ``readout``: the states the checkpoint's readout takes its maximum of (centred for centred readouts;
  what ``bj.tl.max_token`` used up to v0.2);
- ``raw``: the encoder's final-layer token states as they are, the paper's max pooling;
and the share of cells whose most-expressed gene (largest normalized value) is in the set. A type
"passes" when the winner is canonical at least as often as the baseline gene.

Validation (choice): the held-out sorted PBMCs; test (report only): the Baron pancreas cells with
the issue's markers (GCG alpha, INS beta, SST delta, PPY gamma, a REG/PRSS/CPA gene acinar).

    python benchmarks/evaluation/max_token_eval.py CHECKPOINT --cells validation --csv max_token_v0.3_validation.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np
import pandas as pd

from benchmarks._common import write_csv

CANONICAL = {
    "validation": {
        "nk": {"GNLY", "NKG7", "GZMB", "PRF1", "KLRD1", "FCGR3A", "GZMA", "CCL5"},
        "bcells": {"CD79A", "CD79B", "MS4A1", "CD74", "IGHM", "HLA-DRA", "CD19", "IGKC"},
        "monocytes": {"LYZ", "S100A8", "S100A9", "CD14", "FCN1", "CST3", "FTL"},
        "cytotoxict": {"CD8A", "CD8B", "CCL5", "GZMK", "NKG7", "CD3D", "CD3E"},
        "thelper": {"CD3D", "CD3E", "IL7R", "CD4", "LTB"},
        "memoryt": {"CD3D", "CD3E", "IL7R", "LTB", "IL32"},
        "naivet": {"CD3D", "CD3E", "CCR7", "LEF1", "SELL", "TCF7"},
    },
    "test": {"alpha": {"GCG"}, "beta": {"INS"}, "delta": {"SST"}, "gamma": {"PPY"},
             "acinar": {"REG1A", "REG1B", "REG3A", "PRSS1", "PRSS2", "CPA1", "CPA2", "CPB1"}},
}


def cells_of(which: str):
    import biomjepa as bj
    from benchmarks.protocol import test_cells, validation_cells

    adata = validation_cells() if which == "validation" else test_cells()
    key = "cell_type"
    if which == "test":
        adata.obs[key] = adata.obs["cell_type"].astype(str)
    bj.pp.map_vocab(adata)
    return adata, key


def winners(model, cells, batch_size: int = 16) -> dict[str, np.ndarray]:
    """Winner vocabulary index per cell for the ``readout`` and ``raw`` states (one forward pass)."""
    import torch

    from biomjepa.data.collate import collate, sorted_batches
    from biomjepa.nn.pooling import winner_states
    from biomjepa.tl._max_token import max_token_shares

    out = {m: np.empty(len(cells), np.int64) for m in ("readout", "raw")}
    with torch.inference_mode():
        for rows in sorted_batches(cells.lengths, batch_size, max_tokens=32768):
            b = collate(cells, model.config.vocab_size, rows)
            h = model.hidden(b).float()
            out["raw"][rows] = max_token_shares(h, b.gene_mask, b.gene_ids)[1].numpy()
            hr = winner_states(h, b.gene_mask, model.config.pooling)
            out["readout"][rows] = max_token_shares(hr, b.gene_mask, b.gene_ids)[1].numpy()
    return out


def evaluate(checkpoint: str, which: str) -> list[dict]:
    from biomjepa._pretrained import load_model
    from biomjepa.data.stream import gather
    from biomjepa.data.vocab import Vocab
    from biomjepa.tl._max_token import top_expressed

    adata, key = cells_of(which)
    cells = gather(adata, np.arange(adata.n_obs))
    model = load_model(checkpoint)
    sym = np.asarray(Vocab.default().symbols, dtype=object)
    labels = adata.obs[key].astype(str).to_numpy()
    named = {"baseline": sym[top_expressed(cells)]}
    named.update({mode: sym[w] for mode, w in winners(model, cells).items()})
    rows = []
    for t, markers in CANONICAL[which].items():
        m = labels == t
        if not m.any():
            continue
        r = {"cells": which, "cell_type": t, "n": int(m.sum()), "checkpoint": checkpoint}
        for name, genes in named.items():
            r[f"{name}_canonical"] = float(np.isin(genes[m], list(markers)).mean())
            r[f"{name}_commonest"] = pd.Series(genes[m]).value_counts().index[0]
        rows.append(r)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--cells", default="validation", choices=["validation", "test"])
    p.add_argument("--csv", default=None)
    args = p.parse_args()
    rows = evaluate(args.checkpoint, args.cells)
    df = pd.DataFrame(rows)
    for mode in ("readout", "raw"):
        df[f"{mode}_pass"] = df[f"{mode}_canonical"] >= df["baseline_canonical"]
    print(df.drop(columns=["checkpoint"]).round(2).to_string(index=False))
    print({mode: f"{int(df[f'{mode}_pass'].sum())}/{len(df)} types pass" for mode in ("readout", "raw")})
    if args.csv:
        print("wrote", write_csv(df.to_dict("records"), args.csv))


if __name__ == "__main__":
    main()
