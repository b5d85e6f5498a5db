"""``biomjepa bench data.h5ad --label-key … --use-rep … --out DIR``: score embeddings, write CSV + PNG."""

from __future__ import annotations

import argparse
from pathlib import Path

from .types import h5ad_file, output_dir

TASKS = ("annotation", "clustering", "reconstruction", "perturbation", "geometry", "integration")


def add_bench_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``bench`` subcommand on an ``argparse`` subparsers object; its ``func`` is :func:`run_bench`."""
    b = subparsers.add_parser(
        "bench", help="CellBench-style scores of obsm embeddings (CSV + PNG)",
        description="Score cell embeddings stored in obsm of INPUT side by side with bj.bench (few-shot annotation, "
        "clustering, reconstruction, perturbation response, geometry) and write OUT/bench.csv (tidy: task, rep, "
        "setting, seed, metric, value), OUT/bench_summary.csv (mean and s.d. over seeds) and OUT/bench.png.",
        epilog="exit codes: 0 success, 1 error while running (message on stderr), 2 usage error (bad arguments, "
        "missing files)",
    )
    b.add_argument("input", type=h5ad_file, help="input .h5ad with embeddings in obsm (e.g. from `biomjepa embed`)")
    b.add_argument("--label-key", default=None, help="obs column with cell-type labels (needed by annotation, clustering)")
    b.add_argument("--use-rep", action="append", default=None, metavar="KEY",
                   help="obsm key to score (repeatable; default: X_biomjepa unless only --baselines are given)")
    b.add_argument("--baselines", nargs="*", default=[], choices=["pca", "umap", "hvg", "scvi"],
                   help="baselines computed from the raw counts and scored too: pca (PCA-50 of log-normalized HVGs), "
                   "umap (2-D UMAP of that PCA), hvg (the log-normalized 2,000 HVGs), scvi (scVI on their counts; "
                   "needs biomjepa[scvi])")
    b.add_argument("--batch-key", default=None,
                   help="obs column of batches: adds the integration task and is scVI's batch (default: none)")
    b.add_argument("--tasks", default="annotation,clustering,geometry",
                   help=f"comma-separated subset of {','.join(TASKS)} (default: annotation,clustering,geometry)")
    b.add_argument("--layer", default=None, help="layer with raw counts for baselines and reconstruction (default: X)")
    b.add_argument("--use-raw", action="store_true", help="read the counts from adata.raw (not with --layer)")
    b.add_argument("--input", dest="input_kind", default="counts", choices=["counts", "reads", "lognorm"],
                   help="counts: raw integer counts (checked); lognorm: log1p(normalize_total) values, taken as such "
                   "(default: counts)")
    b.add_argument("--library-size-key", default=None, metavar="OBS_COLUMN",
                   help="with --input lognorm: obs column of total counts per cell (scVI's counts; default: estimated)")
    b.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44, 45, 46],
                   help="seeds of the support sets / splits (default: 42 43 44 45 46)")
    b.add_argument("--perturbation-key", default="perturbation",
                   help="obs column of perturbation labels, for the perturbation task (default: perturbation)")
    b.add_argument("--out", default="bench_out", metavar="DIR", type=output_dir, help="output directory (default: bench_out)")
    b.set_defaults(func=run_bench, flags=BENCH_FLAGS)
    return b


#: the library's argument names in messages -> this command's options
BENCH_FLAGS = {"Pass use_raw=False": "Drop --use-raw", "input='lognorm'": "--input lognorm", "use_raw=True": "--use-raw",
               "library_size_key=": "--library-size-key", "library_size_key": "--library-size-key",
               "`layer=`": "--layer", "`label_key=`": "--label-key", "`batch_key=`": "--batch-key",
               " (in a training corpus entry: counts: reads)": "", r"~\binput='(\w+)'": r"--input \1"}


def run_bench(args: argparse.Namespace) -> dict[str, Path]:
    """Run ``biomjepa bench`` with the parsed ``args``: read the file, score, write ``bench.csv``,
    ``bench_summary.csv`` and ``bench.png``; returns those paths as ``{"csv", "summary", "png"}``."""
    import anndata as ad
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from ..bench import run, summarize
    from ..pl import bench as plot_bench

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    adata = ad.read_h5ad(args.input)
    reps = args.use_rep or ([] if args.baselines else ["X_biomjepa"])
    kw = {"perturbation": {"perturbation_key": args.perturbation_key}}
    if args.batch_key and "integration" not in tasks:
        tasks.append("integration")
    df = run(adata, label_key=args.label_key, tasks=tasks, use_reps=reps, baselines=args.baselines or None,
             layer=args.layer, use_raw=args.use_raw, input=args.input_kind, library_size_key=args.library_size_key,
             seeds=args.seeds, task_kwargs=kw, batch_key=args.batch_key)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "bench.csv", "summary": out / "bench_summary.csv", "png": out / "bench.png"}
    df.to_csv(paths["csv"], index=False)
    summary = summarize(df)
    summary.to_csv(paths["summary"], index=False)
    done = list(dict.fromkeys(df["task"]))
    fig, axes = plt.subplots(1, len(done), figsize=(3.8 * len(done), 3.4), squeeze=False)
    for ax, t in zip(axes[0], done):
        plot_bench(df, task=t, ax=ax)
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=150)
    plt.close(fig)
    print(summary.to_string(index=False))
    print(f"wrote {paths['csv']}, {paths['summary']} and {paths['png']}")
    return paths
