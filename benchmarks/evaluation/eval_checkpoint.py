"""Score checkpoints on the held-out Baron pancreas cells against PCA-50, with the bj.bench protocol.

Few-shot annotation (k = 5, linear SVM, seeds 42–46, macro-F1), k-means clustering (AvgBio),
effective rank and depth association, for each checkpoint given (exported directories or
training-state files ``step_*.pt``, exported on the fly) next to PCA-50 of log-normalized HVGs.

    python benchmarks/evaluation/eval_checkpoint.py CKPT [CKPT ...] [--seeds 42 43 44 45 46] [--out NAME.csv]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import write_csv


def as_checkpoint(path: str, tmp: Path) -> str:
    p = Path(path)
    if p.suffix == ".pt":
        from biomjepa.train import export

        return str(export(p, tmp / p.stem))
    return str(p)


def main() -> None:
    import biomjepa as bj

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44, 45, 46])
    p.add_argument("--out", default="eval_checkpoint.csv")
    args = p.parse_args()
    adata = bj.datasets.pancreas()
    bj.pp.map_vocab(adata)
    bj.bench.add_baselines(adata, ["pca"])
    reps = ["X_pca50"]
    with tempfile.TemporaryDirectory() as tmp:
        for ck in args.checkpoints:
            key = f"X_{Path(ck).stem}"
            bj.tl.embed(adata, checkpoint=as_checkpoint(ck, Path(tmp)), key_added=key)
            reps.append(key)
    kw = {"label_key": "cell_type", "use_reps": reps, "seeds": tuple(args.seeds)}
    ann = bj.bench.annotation(adata, shots=(5,), **kw)
    clu = bj.bench.clustering(adata, **kw)
    geo = bj.bench.geometry(adata, use_reps=reps)
    import pandas as pd

    table = bj.bench.summarize(pd.concat([ann, clu, geo]))
    keep = table["metric"].isin(["macro_f1", "accuracy", "avgbio", "nmi", "ari", "asw", "effective_rank", "participation_ratio", "depth_mean"])
    table = table[keep & ~((table["task"] == "clustering") & (table["metric"] == "accuracy"))]
    wide = table.pivot_table(index="rep", columns=["task", "metric"], values="mean")
    print(wide.round(3).to_string())
    print("wrote", write_csv(table.to_dict("records"), args.out))


if __name__ == "__main__":
    main()
