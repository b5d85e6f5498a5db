"""Max-token winners on the validation tissues, and where in the stack one gene takes the max pool (issue 69).

Panel (``--csv``): ``bj.tl.max_token`` per checkpoint on each set of ``--sets`` (the validation tissues of
``benchmarks/protocol.py``; ``--test-cells`` adds the pancreas test cells, reported only). Per cell type with
canonical markers (:data:`MARKERS`, vocabulary symbols: the mouse sets map through the 1:1 orthologs): the share of
its cells whose winner is one of its markers, whether the type's commonest winner is one, the commonest winner and
its share; the same for each cell's most-expressed gene (the trivial baseline, ``baseline_*`` columns).

Stages (``--stages-csv``): on ``--stage-cells`` cells per set, the winner of each cell's per-feature maximum over
its gene tokens at every point of the stack: the gene embedding alone (``gene``), the value embedding alone
(``value``), their sum (``input``), after each block (``block1`` ...); per stage the median share of the ``D``
features its winner supplies (``bj.tl.max_token``'s ``share`` at the last block), the commonest winner and the share
of cells it wins, and how often a stage's winner is the final one. ``emb_norm_pct``: where the final winner's gene
embedding norm ranks among the cell's genes (1 = the largest). CPU-heavy: not beside a CPU training run.

    python benchmarks/evaluation/max_token_panel.py v0.1=biomjepa-mini-v0.1 v0.5=biomjepa-mini-v0.5 \\
        [--sets pbmc brain immune kidney] [--test-cells] [--csv max_token_panel.csv] [--stages-csv max_pool_stages.csv]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np
import pandas as pd

from benchmarks._common import write_csv
from benchmarks.protocol import SETS, TEST, TISSUES, load

#: canonical markers of each labelled type (vocabulary symbols), per set; types without one are not scored
MARKERS = {
    "pbmc": {"monocytes": ("CD14", "LYZ"), "bcells": ("MS4A1", "CD79A"), "nk": ("NKG7", "GNLY"),
             "cytotoxict": ("CD8A", "CD8B"), "regulatoryt": ("FOXP3", "IL2RA")},
    "brain": {"astrocytes": ("GFAP", "AQP4"), "oligodendrocytes": ("MBP", "PLP1"), "microglia": ("CX3CR1", "C1QB"),
              "endothelial": ("CLDN5", "FLT1"), "OPC": ("PDGFRA", "OLIG1"), "neurons": ("SNAP25", "STMN2")},
    "immune": {"B cell": ("CD79A", "MS4A1"), "T cell": ("CD3D", "CD3E"), "NK cell": ("NKG7", "GZMA"),
               "Monocyte": ("LYZ", "CSF1R"), "Granulocyte": ("S100A8", "S100A9")},
    "kidney": {"kidney tubule cell": ("LRP2", "SLC34A1"), "kidney collecting duct cell": ("AQP2", "FXYD4"),
               "endothelial cell": ("PECAM1", "EMCN"), "fibroblast": ("COL1A1", "DCN"),
               "leukocyte": ("PTPRC", "CD74"), "fenestrated cell": ("PLVAP", "EHD3")},
    TEST: {"alpha": ("GCG",), "beta": ("INS",), "delta": ("SST",), "gamma": ("PPY",), "acinar": ("REG1A",)},
}


def panel_rows(name: str, adata, model: str, checkpoint: str) -> list[dict]:
    """One row per typed cell type of ``adata``: marker shares of the max-token winners and of the baseline."""
    import biomjepa as bj

    bj.tl.max_token(adata, checkpoint=checkpoint, input=SETS[name][1] if name in SETS else "counts", key_added="mt")
    obs, rows = adata.obs, []
    for ct, markers in MARKERS[name].items():
        g = obs[obs["cell_type"].astype(str) == ct]
        if not len(g):
            continue
        row = {"model": model, "set": name, "cell_type": ct, "n_cells": len(g), "markers": " ".join(markers)}
        for tag, col in (("", "mt_gene"), ("baseline_", "mt_top_expressed")):
            wins = g[col].value_counts()
            row |= {f"{tag}marker_share": float(g[col].isin(markers).mean()), f"{tag}winner": wins.index[0],
                    f"{tag}winner_share": float(wins.iloc[0] / len(g)), f"{tag}hit": bool(wins.index[0] in markers)}
        rows.append(row)
    return rows


def stage_rows(name: str, adata, model: str, checkpoint: str, n_cells: int) -> list[dict]:
    """Per stage of the encoder: how much of the max pool the winner takes, and who wins (module docstring)."""
    import torch

    import biomjepa as bj
    from biomjepa.data.resolved import resolve
    from biomjepa.data.stream import iter_tokenized
    from biomjepa.data.vocab import Vocab
    from biomjepa.nn.inference import map_batches
    from biomjepa.nn.pooling import winner_states
    from biomjepa.tl._max_token import max_token_shares

    sub = adata[np.random.default_rng(0).permutation(adata.n_obs)[:n_cells]].copy()
    source = resolve(sub, "max_token", None, "max_token", input=SETS[name][1] if name in SETS else "counts").source
    m = bj.load_model(checkpoint).eval()
    enc, n_layers = m.encoder, m.config.n_layers
    stages = ["gene", "value", "input", *(f"block{i + 1}" for i in range(n_layers))]
    norms = enc.gene_embedding.weight.float().norm(dim=1)

    def readout(batch):
        gene, value = enc.gene_embedding(batch.gene_ids), enc.value_embedding(batch.values)
        states, x = [gene, value, gene + value], gene + value
        for block in enc.blocks:
            x = block(x, batch.mask)
            states.append(x)
        kind = m.config.pooling  # the states the readout takes its maximum of (centred for centred readouts)
        got = [max_token_shares(winner_states(s.float(), batch.gene_mask, kind), batch.gene_mask, batch.gene_ids)[1:]
               for s in states]
        final = got[-1][0]
        own = norms[batch.gene_ids].masked_fill(~batch.gene_mask, -1.0)
        pct = (own > norms[final][:, None]).sum(1) + 1
        return torch.stack([w for w, _ in got], 1), torch.stack([s for _, s in got], 1), pct

    n_stages = len(stages)
    winners, shares, pct = np.empty((0, n_stages), np.int64), np.empty((0, n_stages), np.float32), np.empty(0)
    for _, cells in iter_tokenized(source):
        out = (np.empty((len(cells), n_stages), np.int64), np.empty((len(cells), n_stages), np.float32),
               np.empty(len(cells), np.int64))
        w, s, p = map_batches(cells, readout, out, vocab_size=m.config.vocab_size, batch_size=64, device="cpu")
        winners, shares, pct = np.r_[winners, w], np.r_[shares, s], np.r_[pct, p]
    symbols = np.asarray(Vocab.default().symbols, dtype=object)
    rows = []
    for j, stage in enumerate(stages):
        top = pd.Series(symbols[winners[:, j]]).value_counts()
        rows.append({"model": model, "set": name, "stage": stage, "n_cells": len(winners),
                     "median_share": float(np.median(shares[:, j])), "top_winner": top.index[0],
                     "top_winner_cells": float(top.iloc[0] / len(winners)),
                     "same_as_final": float((winners[:, j] == winners[:, -1]).mean()),
                     "emb_norm_rank_median": float(np.median(pct))})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="NAME=CHECKPOINT (a registry name or a directory)")
    p.add_argument("--sets", nargs="+", default=list(TISSUES), choices=[s for s in SETS if s != "chemistry"])
    p.add_argument("--test-cells", action="store_true", help="also the pancreas test cells (reported, never chosen on)")
    p.add_argument("--csv", default="max_token_panel.csv")
    p.add_argument("--stages-csv", default=None, help="also the per-stage table (module docstring)")
    p.add_argument("--stage-cells", type=int, default=300)
    args = p.parse_args()
    if bad := [c for c in args.checkpoints if "=" not in c]:
        p.error(f"checkpoints are NAME=CHECKPOINT, got {bad}")
    cks = dict(c.split("=", 1) for c in args.checkpoints)
    import biomjepa as bj

    panel, stages = [], []
    for name in [*args.sets, *([TEST] if args.test_cells else [])]:
        adata, _, _, mapping = load(name)
        bj.pp.map_vocab(adata, **mapping)
        for model, ck in cks.items():
            panel += panel_rows(name, adata, model, ck)
            if args.stages_csv:
                stages += stage_rows(name, adata, model, ck, args.stage_cells)
    write_csv(panel, args.csv)
    t = pd.DataFrame(panel)
    val = t[t["set"] != TEST]
    summary = val.groupby(["model", "set"])[["hit", "marker_share", "baseline_hit", "baseline_marker_share"]].mean()
    print(summary.round(3).to_string())
    print("\nmean over the validation tissues\n" + summary.groupby("model").mean().round(3).to_string())
    print("\ncommonest winners per model (types won, of", len(val) // len(cks), ")\n"
          + val.groupby("model")["winner"].agg(lambda w: w.value_counts().head(5).to_dict()).to_string())
    if (t["set"] == TEST).any():
        print("\ntest cells\n" + t[t["set"] == TEST].pivot_table(index="cell_type", columns="model",
                                                                  values=["winner", "marker_share"], aggfunc="first")
              .to_string())
    if stages:
        write_csv(stages, args.stages_csv)
        s = pd.DataFrame(stages)
        print("\n" + s.pivot_table(index=["model", "stage"], columns="set", values="median_share").round(2).to_string())


if __name__ == "__main__":
    main()
