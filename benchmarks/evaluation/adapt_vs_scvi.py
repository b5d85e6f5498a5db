"""``bj.tl.adapt`` against scVI on the same cells, same machine, one run: wall times and scores (issues 44 and 56).

Per tissue, in one process, one after another, each timed with ``time.perf_counter()`` around the calls a
user makes and nothing else (data loading and scoring are outside every clock):

* ``zero-shot``: ``bj.pp.map_vocab`` (the tissue's keywords: ``species="mouse"`` for the mouse tissue) and
  ``bj.tl.embed`` with the base checkpoint (``--checkpoint``, default ``bj.settings.checkpoint``);
* ``adapt``: ``bj.tl.adapt`` with its defaults (steps: ``default_steps``; ``--steps N [N ...]``: a whole run of
  each length, with its own warm-up and decay, as a user who asks for that many steps gets), once per
  adaptation seed (``--seeds``, default 0 1 2: issue 56 item 3, a change smaller than the seeds' spread is no
  choice), into a temporary ``out_dir`` removed afterwards (``--keep DIR`` keeps them as ``DIR/<tissue>_seed<k>``);
  the genes are already mapped by the zero-shot call; ``--recipe KEY=VALUE ...`` replaces entries of adapt's recipe
  (``biomjepa.train.adapt.RECIPE``: ``gene_init``, ``pooling``, ``lr``, ...) for every adapt call of the run, the lever
  measured against the defaults' seeds (each row's ``recipe_changes`` names it);
* ``scVI``: ``bj.bench.add_baselines(adata, ["scvi"])``: 2,000 HVGs (scanpy ``flavor="seurat"`` on the
  log-normalized cells), scvi-tools ``SCVI`` (10 latent dimensions, its other defaults, no batch: each set is
  one source) on their raw counts, for scvi-tools' default epochs (``min(400, 400 · 20,000 / n_cells)``) unless
  ``--scvi-epochs``; its latent mean;
* ``PCA-50``: scanpy's standard path (``normalize_total``, ``log1p``, 2,000 HVGs, PCA-50;
  ``protocol.standard_path``);
* ``depth``: log library size and log detected genes, 2 numbers per cell (``protocol.add_depth``).

Each readout an adapted checkpoint could export (its poolings alone, PCA-50 of the adapted cells, whitened or not,
as a d × d map; issue 56 item 2) was scored by ``012b4ec:benchmarks/evaluation/adapt_vs_scvi.py``: none beat the
default beyond the seed spread (``adapt_vs_scvi_three_tissues_v0.4.csv``).

Every representation is scored with ``benchmarks/protocol.py`` (``embedding_scores``), on the labelled cells:
few-shot k = 5 macro-F1 (linear SVM, seeds 42–46); Leiden with scanpy's defaults at resolutions 0.5, 1 and 2
(``--resolutions``) over seeds 0–9 on the same neighbour graph (at resolution 1 also the columns of the other
scripts); the number of Leiden clusters against the number of types; 15-NN label agreement.

Tissues (``--tissues``, default the three validation tissues, ``protocol.TISSUES``, each loaded through
``protocol.load``): ``pbmc`` (1,072 held-out sorted PBMCs, droplet UMIs), ``brain`` (Darmanis,
420 cells, C1 read counts, so every call gets ``input="reads"``: molecule equivalents for the model, raw reads
for scVI and PCA), ``immune`` (Tabula Muris mouse immune, 1,000 cells of 5 types, mapped with
``species="mouse"``). The test cells (``pancreas_test``, the 1,074 bundled pancreas cells) are never a
``--tissues`` entry: only ``--test-cells``, alone, once, after the choice (and with one length: several choose
one, on validation tissues only; the baselines then run once, beside the first). ``--adapted TISSUE=DIR``
scores a checkpoint adapted earlier (e.g. kept with ``--keep``) instead of adapting (``seconds`` is then its
embedding pass; ``train_seconds`` its record's). scvi-tools lives in the benchmark's own environment, never in
biomjepa's dependencies::

    python -m venv --system-site-packages .venv-scvi && .venv-scvi/bin/pip install "scvi-tools>=1.1"
    .venv-scvi/bin/python benchmarks/evaluation/adapt_vs_scvi.py                  # pbmc brain immune, seeds 0 1 2
    .venv-scvi/bin/python benchmarks/evaluation/adapt_vs_scvi.py --tissues brain --seeds 0
    python benchmarks/evaluation/adapt_vs_scvi.py --tissues pbmc brain --seeds 0 --steps 50 75 --baselines  # lengths; bare: none
    .venv-scvi/bin/python benchmarks/evaluation/adapt_vs_scvi.py --test-cells     # the test cells, once
    CUDA_VISIBLE_DEVICES= .venv-scvi/bin/python benchmarks/evaluation/adapt_vs_scvi.py --threads 4   # a laptop

Both models run on ``bj.settings.device`` (``"auto"``: a GPU where there is one; hide it for CPU figures).
Writes ``benchmarks/results/adapt_vs_scvi_<tissues>.csv`` (``--csv``; ``…_steps<N>_<M>.csv`` with several lengths),
one row per (tissue, representation, adaptation seed), wide as before. Columns of a representation row: ``set`` (the
tissue), ``representation``, ``adapt_seed`` (adapt), ``stat`` (``value``: one measurement;
``seed_mean`` / ``seed_sd``: over the adaptation seeds, :func:`seed_spread`, with ``n_seeds``), ``n_cells`` (scored,
labelled), ``n_obs``, ``n_types``, ``dims``, ``seconds`` (wall time of its calls), ``f1``, ``knn15_agreement``,
``leiden_ari`` (seed 0, resolution 1: what a user gets), ``leiden_ari_mean`` and ``leiden_ari_sd`` (seeds 0–9,
resolution 1), ``leiden_nmi``, ``n_clusters`` (seed 0, resolution 1), and per resolution ``r``:
``leiden_ari_mean_r<r>``, ``leiden_ari_sd_r<r>``, ``leiden_nmi_mean_r<r>``, ``n_clusters_r<r>`` (seed 0) and
``n_clusters_mean_r<r>``; on ``adapt`` rows ``steps``, ``steps_done``, ``train_seconds`` (adapt's own ``seconds``:
from the call's start to the end of training), ``precision``, ``graph`` (``built``, or ``cached`` when an earlier run
of these cells and seed left its gene graph: a shorter set-up) and ``phase_<name>``; on ``scVI`` rows
``scvi_max_epochs``; on every row ``input``, ``base_checkpoint``, ``load_average_1min`` (before the tissue) and the
machine: ``cpu``, ``cpu_flags``, ``torch_capability``, ``torch``, ``threads`` (torch's), ``bj_threads``,
``cpu_count``, ``device``, ``scvi_tools``, ``commit``, ``date``. One ``summary`` row per tissue and length (adapt's
seed mean where there are several seeds): ``adapt_over_scvi_seconds``, ``adapt_over_pca_seconds``,
``{f1,ari,knn15}_adapt_minus_{scvi,pca}`` (``ari``: differences of ``leiden_ari_mean``) and, with several seeds,
``{f1,ari,knn15}_adapt_seed_sd``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks import protocol
from benchmarks._common import commit, machine, write_csv
from benchmarks.protocol import SETS, TEST, TISSUES, embedding_scores, labelled, load, res_tag

ZERO_SHOT, ADAPT, SCVI, PCA, DEPTH = "zero-shot", "adapt", "scVI", "PCA-50", "depth"
BASELINES = (ZERO_SHOT, SCVI, PCA, DEPTH)
#: the validation tissues --tissues takes (protocol.SETS but its chemistry set: technical, not a tissue); the test
#: cells (protocol.TEST) are scored once, after the choice, only with --test-cells
VALIDATION = tuple(s for s in SETS if s != "chemistry")
LEIDEN_SEEDS = tuple(range(10))
RESOLUTIONS = (0.5, 1.0, 2.0)
ADAPT_SEEDS = (0, 1, 2)

# --- the representations, each timed --------------------------------------------------------------------------------

def clocked(fn, **extra) -> tuple[np.ndarray, dict]:
    """The representation ``fn()`` returns and its wall time (``seconds``), ``extra`` beside it."""
    t0 = time.perf_counter()
    Z = fn()
    return Z, {"seconds": time.perf_counter() - t0, **extra}


def zero_shot(a, kind: str, mapping: dict | None = None, checkpoint: str | None = None) -> np.ndarray:
    """The base checkpoint's embedding (``map_vocab`` + ``embed``)."""
    import biomjepa as bj

    bj.pp.map_vocab(a, **(mapping or {}))
    bj.tl.embed(a, checkpoint=checkpoint, input=kind)
    return a.obsm["X_biomjepa"].copy()


def adapted(a, kind: str, steps: int | None, seed: int = 0, checkpoint: str | None = None,
            keep: Path | None = None, species: str = "human") -> tuple[np.ndarray, dict]:
    """``bj.tl.adapt``'s embedding (``obsm["X_adapt"]``) with ``seed``, its wall time and its own record; the
    checkpoint in a temporary directory removed afterwards, or kept at ``keep``."""
    import biomjepa as bj

    tmp = Path(tempfile.mkdtemp(prefix="adapt_vs_scvi-"))
    try:
        t0 = time.perf_counter()
        bj.tl.adapt(a, checkpoint=checkpoint, input=kind, species=species, steps=steps, seed=seed,
                    out_dir=keep or tmp / "adapted", key_added="X_adapt")
        seconds = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rec = a.uns["X_adapt"]["adapt"]
    extra = {"seconds": seconds, "adapt_seed": int(seed), "steps": rec["steps"], "steps_done": rec["steps_done"],
             "train_seconds": rec["seconds"], "precision": rec["precision"], "graph": rec.get("graph"),
             "pooling": rec["recipe"]["pooling"], "gene_init": rec["recipe"]["gene_init"]}
    extra |= {f"phase_{k}": v for k, v in (rec.get("phases") or {}).items()}
    return a.obsm["X_adapt"].copy(), extra


def embedded_adapted(a, kind: str, directory: str) -> tuple[np.ndarray, dict]:
    """A checkpoint adapted earlier (``--adapted``): these cells embedded with it, timed (the embedding pass
    only), and what its provenance records of the adaptation."""
    import biomjepa as bj

    meta = json.loads((Path(directory) / "config.json").read_text())
    rec = (meta.get("provenance") or {}).get("adapt") or {}
    t0 = time.perf_counter()
    bj.tl.embed(a, checkpoint=directory, input=kind, key_added="X_adapt")
    seconds = time.perf_counter() - t0
    extra = {"seconds": seconds, "adapt_seed": int(rec.get("seed", -1)), "steps": rec.get("steps"),
             "steps_done": rec.get("steps_done"), "train_seconds": rec.get("seconds"),
             "precision": rec.get("precision"), "pooling": meta["model"].get("pooling"), "adapted_from": directory,
             "adapted_n_cells": (meta.get("readout") or {}).get("n_cells")}
    return a.obsm["X_adapt"].copy(), extra


def scvi_default_epochs(n_cells: int) -> int:
    """scvi-tools' ``max_epochs`` when none is given: ``min(400, round(400 · 20,000 / n_cells))``."""
    return int(min(400, round(400 * 20_000 / n_cells)))


def scvi_latent(a, kind: str, epochs: int | None) -> np.ndarray:
    """scVI's latent mean through ``bj.bench.add_baselines`` (HVGs, training, inference)."""
    import biomjepa as bj
    from biomjepa.bench.baselines import BASELINE_KEYS

    bj.bench.add_baselines(a, ["scvi"], input=kind, scvi_max_epochs=epochs)
    return a.obsm[BASELINE_KEYS["scvi"]]


# --- scores ---------------------------------------------------------------------------------------------------------

def score(name: str, labels: np.ndarray, rep: str, Z: np.ndarray, extra: dict, *, leiden_seeds=LEIDEN_SEEDS,
          resolutions=RESOLUTIONS) -> dict:
    """One row: ``protocol.embedding_scores`` (few-shot k = 5 F1, 15-NN agreement, Leiden at every resolution)."""
    r = {"set": name, "representation": rep, "stat": "value", "n_cells": len(labels),
         "n_types": len(set(labels)), "dims": int(np.shape(Z)[1]), "seconds": extra.pop("seconds")}
    r |= embedding_scores(Z, labels, leiden_seeds=leiden_seeds, resolutions=resolutions)
    return r | extra


def seed_spread(rows: list[dict], key: str = "adapt_seed") -> list[dict]:
    """Per (set, representation) measured with two adaptation seeds or more (rows with ``key``; rows without it
    are left out): a ``seed_mean`` and a ``seed_sd`` (ddof 1) row of every numeric column (``n_seeds``,
    ``adapt_seeds``: which)."""
    import pandas as pd

    seeded = [r for r in rows if r.get(key) is not None and r.get("stat", "value") == "value"]
    if not seeded:
        return []
    t = pd.DataFrame(seeded)
    out = []
    for (s, rep), g in t.groupby(["set", "representation"], sort=False):
        if g[key].nunique() < 2:
            continue
        num = g.select_dtypes("number").drop(columns=[key, "n_seeds"], errors="ignore")  # n_seeds: Leiden's
        base = {"set": s, "representation": rep, "n_seeds": int(g[key].nunique()),
                "adapt_seeds": " ".join(str(int(x)) for x in g[key])}
        out.append({**base, "stat": "seed_mean", **num.mean().to_dict()})
        out.append({**base, "stat": "seed_sd", **num.std(ddof=1).to_dict()})
    return out


def headline(rows: list[dict]) -> list[dict]:
    """One row per (set, representation): the seed mean where there is one, else its one measurement (summary
    rows and seed s.d. rows left out)."""
    means = {(r["set"], r["representation"]) for r in rows if r.get("stat") == "seed_mean"}
    return [r for r in rows if r.get("representation") != "summary" and (
        r.get("stat") == "seed_mean" or (r.get("stat", "value") == "value" and (r["set"], r["representation"]) not in means))]


def summary(rows: list[dict]) -> dict:
    """adapt against scVI and PCA-50 in one set's rows: wall-time ratios, F1, mean-ARI (resolution 1) and 15-NN
    differences; adapt's seed mean where the rows hold one, with its seed s.d. beside."""
    value = {r["representation"]: r for r in rows if r.get("stat", "value") == "value"}
    means = {r["representation"]: r for r in rows if r.get("stat") == "seed_mean"}
    sds = {r["representation"]: r for r in rows if r.get("stat") == "seed_sd"}
    by = value | means
    ad = by[ADAPT]
    out = {"set": ad["set"], "representation": "summary", "stat": "summary", "n_cells": ad["n_cells"]}
    for ref, tag in ((SCVI, "scvi"), (PCA, "pca")):
        if ref not in by:
            continue
        out[f"adapt_over_{tag}_seconds"] = ad["seconds"] / by[ref]["seconds"]
        for metric, col in (("f1", "f1"), ("ari", "leiden_ari_mean"), ("knn15", "knn15_agreement")):
            if col in ad and col in by[ref]:
                out[f"{metric}_adapt_minus_{tag}"] = ad[col] - by[ref][col]
    if ADAPT in sds:
        for metric, col in (("f1", "f1"), ("ari", "leiden_ari_mean"), ("knn15", "knn15_agreement")):
            out[f"{metric}_adapt_seed_sd"] = sds[ADAPT].get(col)
        out["n_seeds"] = sds[ADAPT]["n_seeds"]
    if ad.get("steps") is not None:
        out["steps"] = ad["steps"]
    return out


# --- the run --------------------------------------------------------------------------------------------------------

def run_set(name: str, steps: int | None, scvi_epochs: int | None, *, seeds=(0,), checkpoint: str | None = None,
            keep: Path | None = None, adapted_dirs=(), baselines=BASELINES, leiden_seeds=LEIDEN_SEEDS,
            resolutions=RESOLUTIONS) -> list[dict]:
    """Every representation of one tissue, computed one after another (timed), then scored alike on the
    labelled cells; adapt once per seed (or the ``adapted_dirs`` checkpoints)."""
    import biomjepa as bj

    a, labels, kind, mapping = load(name)
    keep_rows = labelled(labels)
    common = {"input": kind, "load_average_1min": os.getloadavg()[0], "n_obs": int(a.n_obs),
              "base_checkpoint": str(checkpoint or bj.settings.checkpoint)}
    timed = []  # (representation, embedding, extra), computed in this order
    if ZERO_SHOT in baselines:
        timed.append((ZERO_SHOT, *clocked(lambda: zero_shot(a, kind, mapping, checkpoint))))  # maps the genes too
    else:
        bj.pp.map_vocab(a, **mapping)  # untimed: adapt's clock never held the mapping
    if adapted_dirs:
        timed += [(ADAPT, *embedded_adapted(a, kind, d)) for d in adapted_dirs]
    else:
        for seed in seeds:
            out = None if keep is None else keep / f"{name}_seed{seed}"
            timed.append((ADAPT, *adapted(a, kind, steps, seed, checkpoint, out, mapping.get("species", "human"))))
    if SCVI in baselines:
        timed.append((SCVI, *clocked(lambda: scvi_latent(a, kind, scvi_epochs),
                                     scvi_max_epochs=scvi_epochs or scvi_default_epochs(a.n_obs))))
    if PCA in baselines:
        timed.append((PCA, *clocked(lambda: protocol.standard_path(a, lognorm=False))))  # scanpy's PCA-50 path
    if DEPTH in baselines:
        timed.append((DEPTH, *clocked(lambda: a.obsm[protocol.add_depth(a)])))  # log library size, log genes
    y = labels[keep_rows]
    rows = [score(name, y, rep, Z[keep_rows], {**extra, **common}, leiden_seeds=leiden_seeds, resolutions=resolutions)
            for rep, Z, extra in timed]
    return rows + seed_spread(rows)


def run_info() -> dict:
    """The CPU and torch (``_common.machine``), biomjepa's threads, cores, device, scvi-tools, commit and date."""
    from importlib.metadata import distributions

    import biomjepa as bj

    scvi = next((d.version for d in distributions(name="scvi-tools")), "")  # "" where it is not installed
    return {**machine(), "bj_threads": bj.settings.num_threads, "cpu_count": os.cpu_count(),
            "device": bj.settings.device, "scvi_tools": scvi, "commit": commit(), "date": time.strftime("%Y-%m-%d")}


def parse_tissue(text: str) -> str:
    """A ``--tissues`` entry: a validation tissue; the test cells are refused (``--test-cells`` only)."""
    if text in (TEST, "pancreas", "test"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is the test cells, not a validation tissue: they are scored once, after the choice, with "
            "--test-cells (alone)")
    if text not in VALIDATION:
        raise argparse.ArgumentTypeError(f"unknown tissue {text!r}: choose from {', '.join(VALIDATION)}")
    return text


def parse_adapted(text: str) -> tuple[str, str]:
    tissue, sep, directory = text.partition("=")
    if not sep or not directory:
        raise argparse.ArgumentTypeError(f"--adapted takes TISSUE=DIR, got {text!r}")
    if tissue not in (*VALIDATION, TEST):
        raise argparse.ArgumentTypeError(f"--adapted: unknown tissue {tissue!r}")
    return tissue, directory


def parse_recipe(text: str) -> tuple[str, object]:
    """A ``--recipe`` entry: a key of adapt's recipe and its value, typed as the default's (a lever to measure)."""
    from biomjepa.train.adapt import RECIPE

    key, sep, value = text.partition("=")
    if not sep or key not in RECIPE:
        raise argparse.ArgumentTypeError(f"--recipe takes KEY=VALUE with KEY one of {', '.join(RECIPE)}; got {text!r}")
    try:
        return key, type(RECIPE[key])(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--recipe {text}: {key} takes a {type(RECIPE[key]).__name__}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tissues", nargs="+", type=parse_tissue,
                       help=f"validation tissues, of {' '.join(VALIDATION)} (default {' '.join(TISSUES)})")
    which.add_argument("--test-cells", action="store_true",
                       help=f"the test cells ({TEST}) alone: once, after the choice")
    p.add_argument("--seeds", nargs="+", type=int, default=list(ADAPT_SEEDS),
                   help="adaptation seeds (default 0 1 2: their mean and s.d. per tissue and measure)")
    p.add_argument("--checkpoint", default=None, help="base checkpoint (default bj.settings.checkpoint)")
    p.add_argument("--steps", nargs="+", type=int, help="adapt's steps, a whole run per length (default: its own)")
    p.add_argument("--scvi-epochs", type=int, default=None, help="scVI max_epochs (default: scvi-tools' own)")
    p.add_argument("--resolutions", nargs="+", type=float, default=list(RESOLUTIONS),
                   help="Leiden resolutions (default 0.5 1 2; 1 always included)")
    p.add_argument("--leiden-seeds", type=int, default=len(LEIDEN_SEEDS), help="Leiden seeds 0..N-1 (default 10)")
    p.add_argument("--baselines", nargs="*", default=list(BASELINES), choices=BASELINES,
                   help="representations beside adapt (default all)")
    p.add_argument("--keep", type=Path, default=None, help="keep each adapted checkpoint as DIR/<tissue>_seed<k>")
    p.add_argument("--adapted", nargs="+", type=parse_adapted, metavar="TISSUE=DIR",
                   help="score these adapted checkpoints instead of adapting (repeat a tissue for several seeds)")
    p.add_argument("--threads", type=int, default=None, help="torch threads for every model (default: as is)")
    p.add_argument("--recipe", nargs="+", type=parse_recipe, default=[], metavar="KEY=VALUE",
                   help="entries replacing adapt's recipe (biomjepa.train.adapt.RECIPE), e.g. gene_init=checkpoint")
    p.add_argument("--csv", default=None, help="file name under benchmarks/results (default adapt_vs_scvi_<tissues>.csv)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments, with ``names`` (the tissues to run, in order) resolved and checked before any work."""
    p = _parser()
    args = p.parse_args(argv)
    args.names = (TEST,) if args.test_cells else tuple(dict.fromkeys(args.tissues or TISSUES))
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        p.error("--seeds: distinct non-negative integers")
    if 1.0 not in args.resolutions or min(args.resolutions) <= 0:
        p.error("--resolutions: positive numbers, 1 among them (scanpy's default)")
    args.resolutions = sorted(set(args.resolutions))
    if args.leiden_seeds < 1:
        p.error("--leiden-seeds must be >= 1")
    tag = "" if args.steps is None or len(args.steps) == 1 else "_steps" + "_".join(map(str, args.steps))
    args.csv = args.csv or f"adapt_vs_scvi_{'_'.join(args.names)}{tag}.csv"
    if Path(args.csv).name != args.csv:
        p.error(f"--csv {args.csv}: a file name (the file is written to benchmarks/results)")
    if args.steps is not None and (min(args.steps) < 1 or len(set(args.steps)) < len(args.steps)):
        p.error("--steps must be distinct positive integers")
    if args.steps is not None and len(args.steps) > 1 and (args.test_cells or args.adapted):
        p.error("several --steps choose a length: on validation tissues only, never --test-cells or --adapted")
    args.adapted_dirs = {}
    for tissue, directory in args.adapted or ():
        if tissue not in args.names:
            p.error(f"--adapted {tissue}=...: {tissue} is not among the tissues run ({' '.join(args.names)})")
        args.adapted_dirs.setdefault(tissue, []).append(directory)
    return args


def main(argv: list[str] | None = None) -> None:
    import pandas as pd

    args = parse_args(argv)
    if SCVI in args.baselines:
        protocol.check_scvi()
    if args.threads is not None:
        import torch

        import biomjepa as bj

        torch.set_num_threads(args.threads)
        bj.settings.num_threads = args.threads  # the tl tools' own thread setting: the same count
    recipe = dict(args.recipe)
    if recipe:  # the lever measured: every adapt call of this run uses it, and each row names it
        from biomjepa.train import adapt as adapt_recipe

        adapt_recipe.RECIPE.update(recipe)
    info, rows = run_info() | {"recipe_changes": " ".join(f"{k}={v}" for k, v in recipe.items())}, []
    lengths = args.steps or [None]
    show = ["representation", "adapt_seed", "steps", "stat", "dims", "seconds", "f1", "knn15_agreement",
            *(f"leiden_ari_mean_{res_tag(r)}" for r in args.resolutions),
            *(f"n_clusters_mean_{res_tag(r)}" for r in args.resolutions), "n_types"]
    for name in args.names:
        for i, steps in enumerate(lengths):
            keep = args.keep / f"steps{steps}" if args.keep and len(lengths) > 1 else args.keep
            set_rows = run_set(name, steps, args.scvi_epochs, seeds=tuple(args.seeds), checkpoint=args.checkpoint,
                               keep=keep, adapted_dirs=args.adapted_dirs.get(name, ()),
                               baselines=tuple(args.baselines) if i == 0 else (),  # once, beside the first length
                               leiden_seeds=tuple(range(args.leiden_seeds)), resolutions=tuple(args.resolutions))
            total = summary(set_rows) if any(r["representation"] == ADAPT for r in set_rows) else {}
            rows += [r | info for r in [*set_rows, *([total] if total else [])]]
            t = pd.DataFrame(set_rows)
            print(f"\n== {name}\n" + t[[c for c in show if c in t]].round(3).to_string(index=False), flush=True)
            print(pd.Series(total, dtype=object).to_string(), flush=True)
            path = write_csv(rows, args.csv)  # after each set: what is measured is kept
    t = pd.DataFrame(headline(rows))
    if t["set"].nunique() > 1 and len(lengths) == 1:  # per tissue, side by side (never only the mean)
        cols = ["f1", "leiden_ari_mean", "knn15_agreement", "seconds"]
        print("\n" + t.pivot_table(index="representation", columns="set", values=cols, sort=False).round(3)
              .to_string(), flush=True)
    print(path)


if __name__ == "__main__":
    main()
