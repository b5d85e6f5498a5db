"""What a recipe's targets carry: cell identity, predictability and depth on labelled validation cells.

For a teacher (a checkpoint or a run's latest teacher) and a recipe (``models/biomjepa-mini-v0.3.yaml`` plus
overrides), the 1,072 held-out sorted PBMCs go through the training code's own target path: the teacher's gene
budget (``data.teacher_genes``), the block sampler (``blocks``, on the run's gene graph), ``build_inputs`` and
:func:`biomjepa.train.targets.make_targets`, with the recipe's running statistics computed *exactly* on these
cells (a first pass; no EMA error). Each cell's target level is the mean of its valid block targets (the note
``shared/notes/target-diagnostic.md`` measured that level as 97–99.9 % of the targets' cell-to-cell variance).

Per (recipe, teacher view): ``eta2`` (share of the level's variance explained by cell type, pooled over
dimensions), ``ridge_r2`` (held-out 5-fold RidgeCV R² of the level from PCA-50 of the cell's log-normalized
expression plus log library size: what a student that sees the cell could predict), ``depth_r2`` (R² of the
level on log detected genes), ``cell_share`` (the level's share of the targets' variance over cells and blocks),
``rms_rel`` (RMS of the targets relative to the teacher's token states). The same η² of PCA-50 of the
cells' log-normalized expression is the baseline row.

    python benchmarks/pretraining/target_signal.py --teacher biomjepa-mini --graph /tmp/bj_levers28/cache/graph \\
        --recipes v0.3 signal gene-centre depth-resid target-std --views 256 512 1024 all
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import write_csv
from benchmarks.pretraining.levers import BASE, LEVERS


def teacher_encoder(spec: str):
    """The encoder of a registry name / checkpoint directory, or the latest teacher of a run directory."""
    import torch

    path = Path(spec)
    if (path / "checkpoints").is_dir():
        from biomjepa.nn.config import ModelConfig
        from biomjepa.nn.encoder import Encoder
        from biomjepa.train.checkpoint import latest_state, load_state

        state = load_state(latest_state(path))
        enc = Encoder(ModelConfig.from_dict(state["model_config"]))
        enc.load_state_dict(state["teacher"])
        return enc.eval()
    from biomjepa import load_model

    with torch.no_grad():
        return load_model(spec).encoder.float().eval()


def validation():
    """Tokenized validation cells, their labels and PCA-50 (+ log library) of their log-normalized expression."""
    import scanpy as sc

    import biomjepa as bj
    from benchmarks.evaluation.model_card_eval import validation_cells
    from biomjepa.data.stream import gather

    a = validation_cells()
    bj.pp.map_vocab(a)
    cells = gather(a, np.arange(a.n_obs))
    b = a.copy()
    sc.pp.normalize_total(b, target_sum=1e4)
    sc.pp.log1p(b)
    sc.pp.pca(b, n_comps=50, random_state=0)
    X = np.c_[b.obsm["X_pca"], np.log(np.asarray(a.X.sum(1)).ravel())]
    return cells, a.obs["cell_type"].astype(str).to_numpy(), X


def cell_levels(teacher, cells, cfg, graph, view, seed: int = 0, batch: int = 64):
    """Per cell: the mean of its valid block targets ``[n, D]`` under recipe ``cfg`` and teacher budget ``view``."""
    import torch

    from biomjepa.train.blocks import sample_blocks
    from biomjepa.train.inputs import build_inputs
    from biomjepa.train.running import RunningTargets
    from biomjepa.train.targets import make_targets
    from biomjepa.train.views import gene_budget

    t, d = cfg.teacher, teacher.config.d_model
    rows = teacher.config.vocab_size + 2 if t.target_centre == "gene" else None
    inputs = []
    for start in range(0, len(cells), batch):
        rng = np.random.default_rng([seed, start])
        whole = cells.subset(np.arange(start, min(start + batch, len(cells))))
        view_cells = gene_budget(whole, view, rng)
        sample = sample_blocks(view_cells.indptr, view_cells.genes, graph, cfg.block_config(), rng,
                               vocab_size=teacher.config.vocab_size)
        inputs.append(build_inputs(view_cells, sample, teacher.config.vocab_size, rng=rng, whole=whole))
    exact = RunningTargets(d, rows, rate=0.0, device="cpu", std=t.target_std, depth=t.depth_residual)
    total: dict = {}
    for inp in inputs:  # first pass: the recipe's statistics, exactly on these cells
        for k, (s, c) in make_targets(teacher, inp, inp.valid.shape[1], exact, t)[1].items():
            total[k] = (s, c) if k not in total else (total[k][0] + s, total[k][1] + c)
    exact.update(total)
    levels, token_rms, within, tgt = [], [], [], []
    for inp in inputs:
        targets, _, diag = make_targets(teacher, inp, inp.valid.shape[1], exact, t)
        n, U = inp.valid.shape
        v = inp.valid.float()[..., None]
        tt = targets.reshape(n, U, -1)
        lvl = (tt * v).sum(1) / v.sum(1).clamp(min=1)
        levels.append(lvl)
        within.append(float((((tt - lvl[:, None]) * v) ** 2).sum()))
        tgt.append(tt[inp.valid])
        token_rms.append(diag["token_rms"])
    L = torch.cat(levels).numpy()
    T = torch.cat(tgt)
    cell_share = 1 - sum(within) / float(((T - T.mean(0)) ** 2).sum())
    rms_rel = float(T.pow(2).mean().sqrt()) / float(np.mean(token_rms))
    return L, cell_share, rms_rel


def eta2(Z: np.ndarray, labels: np.ndarray) -> float:
    """Between-type sum of squares over total, pooled over the columns of ``Z``."""
    Zc = Z - Z.mean(0)
    between = 0.0
    for u in np.unique(labels):
        rows = labels == u
        between += rows.sum() * np.sum(Zc[rows].mean(0) ** 2)
    return float(between / np.sum(Zc**2))


def ridge_r2(X: np.ndarray, Y: np.ndarray) -> float:
    """Held-out (5-fold) pooled R² of RidgeCV from ``X`` to ``Y``."""
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import KFold, cross_val_predict
    from sklearn.preprocessing import StandardScaler

    Xs = StandardScaler().fit_transform(X)
    pred = cross_val_predict(RidgeCV(alphas=np.logspace(-2, 4, 13)), Xs, Y, cv=KFold(5, shuffle=True, random_state=0))
    return float(1 - np.sum((Y - pred) ** 2) / np.sum((Y - Y.mean(0)) ** 2))


def depth_r2(n_detected: np.ndarray, Y: np.ndarray) -> float:
    x = np.log(np.maximum(n_detected, 1))
    A = np.c_[np.ones_like(x), x]
    coef, *_ = np.linalg.lstsq(A, Y, rcond=None)
    return float(1 - np.sum((Y - A @ coef) ** 2) / np.sum((Y - Y.mean(0)) ** 2))


def main() -> None:
    import os

    from biomjepa.data.graph import find_graph
    from biomjepa.train import load_config

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", action="append", required=True, help="registry name, checkpoint dir or run dir")
    p.add_argument("--graph", required=True, help="the runs' gene graph (CORPUS_CACHE/graph)")
    p.add_argument("--recipes", nargs="+", default=["v0.3", "signal"], choices=list(LEVERS))
    p.add_argument("--views", nargs="+", default=["256", "512", "all"])
    p.add_argument("--csv", default="target_signal.csv")
    p.add_argument("--max-cells", type=int, default=None, help="a seeded subsample (quick checks)")
    args = p.parse_args()
    os.chdir(BASE.parents[1])
    graph = find_graph(args.graph)
    cells, labels, X = validation()
    if args.max_cells and args.max_cells < len(cells):
        rows_ = np.sort(np.random.default_rng(0).choice(len(cells), args.max_cells, replace=False))
        cells, labels, X = cells.subset(rows_), labels[rows_], X[rows_]
    rows = [{"teacher": "-", "recipe": "baseline: PCA-50 of log-normalized expression", "view": "all",
             "eta2": eta2(X[:, :50], labels)}]
    for spec in args.teacher:
        teacher = teacher_encoder(spec)
        for recipe in args.recipes:
            for view in args.views:
                v = None if view == "all" else int(view)
                cfg = load_config(BASE, [*LEVERS[recipe], f"data.teacher_genes={view if v else 'null'}"])
                L, share, rms = cell_levels(teacher, cells, cfg, graph, v)
                rows.append({"teacher": spec, "recipe": recipe, "view": view, "eta2": eta2(L, labels),
                             "ridge_r2": ridge_r2(X, L), "depth_r2": depth_r2(cells.lengths, L),
                             "cell_share": share, "rms_rel": rms})
                print({k: (round(x, 4) if isinstance(x, float) else x) for k, x in rows[-1].items()}, flush=True)
    write_csv(rows, args.csv)


if __name__ == "__main__":
    main()
