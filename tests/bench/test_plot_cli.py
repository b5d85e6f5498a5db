"""``bj.pl.bench`` and the ``biomjepa bench`` subcommand."""

from __future__ import annotations

import argparse

import pytest

from biomjepa import bench


@pytest.fixture(autouse=True)
def _agg():
    import matplotlib as mpl

    mpl.use("Agg")


def test_plot(blobs):
    import matplotlib.pyplot as plt

    from biomjepa.pl import bench as plot_bench

    df = bench.annotation(blobs, label_key="cell_type", use_reps=["X_emb", "X_noise"], shots=(1, 5), seeds=(42, 43))
    ax = plot_bench(df)
    assert ax.get_ylabel() == "macro_f1" and len(ax.get_xticklabels()) == 2
    ax = plot_bench(df, metric="accuracy")
    assert ax.get_ylabel() == "accuracy"
    with pytest.raises(ValueError, match="not found"):
        plot_bench(df, metric="nope")
    plt.close("all")


def test_cli(blobs, tmp_path):
    from biomjepa.cli.bench import add_bench_parser

    path = tmp_path / "toy.h5ad"
    blobs.write_h5ad(path)
    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", str(path), "--label-key", "cell_type", "--use-rep", "X_emb", "--baselines", "pca",
                              "--layer", "counts", "--tasks", "clustering,geometry", "--seeds", "42", "--out", str(tmp_path / "o")])
    paths = args.func(args)
    for p in paths.values():
        assert p.exists() and p.stat().st_size > 0


def test_cli_hvg_baseline_and_batch_key(blobs, tmp_path):
    """``--baselines hvg --batch-key KEY`` scores the HVG baseline and adds the integration task."""
    import numpy as np
    import pandas as pd

    from biomjepa.cli.bench import add_bench_parser

    path = tmp_path / "toy.h5ad"
    blobs.obs["batch"] = np.where(np.arange(blobs.n_obs) % 2 == 0, "a", "b")
    blobs.write_h5ad(path)
    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", str(path), "--label-key", "cell_type", "--use-rep", "X_emb", "--baselines", "hvg",
                              "--layer", "counts", "--batch-key", "batch", "--tasks", "clustering", "--seeds", "42",
                              "--out", str(tmp_path / "o")])
    df = pd.read_csv(args.func(args)["csv"])
    assert {"X_emb", "X_hvg"} <= set(df["rep"]) and {"clustering", "integration"} == set(df["task"])
    assert {"cross_batch_share_within_label", "label_asw"} <= set(df.loc[df["task"] == "integration", "metric"])
