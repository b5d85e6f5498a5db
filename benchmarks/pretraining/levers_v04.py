"""The v0.4 levers (issue 37, item 2) at equal budget, scored on TWO validation tissues.

Every lever starts from ``models/biomjepa-mini-v0.4.yaml`` (the corpus of every tissue, plate reads as
molecule equivalents) and changes only its own keys. At step 0 and every ``--probe-every`` steps the probed
encoder (the EMA teacher) embeds both validation sets under every readout of
:data:`biomjepa.nn.pooling.POOLINGS`: the 1,072 held-out sorted PBMCs and the 420 Darmanis brain cells
(hybrids dropped; plate reads, ``input="reads"``). The readouts are stored (``readouts_step*.npz``, float16)
so that they can be scored where scanpy is (few-shot k = 5 macro-F1 and Leiden ARI with scanpy's defaults),
and the run itself logs F1 (``probe2.csv``).

Three commands, so that the training can run on a machine without anndata or scanpy (a GPU machine):

    python -m biomjepa.train models/biomjepa-mini-v0.4.yaml --set run.stop_at=1   # prepares /tmp/bj_v04/cache
    python benchmarks/pretraining/levers_v04.py prep --out .gpu/v04 --cache /tmp/bj_v04/cache  # probes + cache
    python benchmarks/pretraining/levers_v04.py run --levers shard source ... --steps 400 --parallel 8 \
        --corpus .gpu/v04/cache --probes .gpu/v04/probes.npz --work /tmp/levers --device cuda --deadline 240
    python benchmarks/pretraining/levers_v04.py score --work /tmp/levers      # F1 + Leiden ARI → results CSV

The long run is the same ``run`` with one lever and a full schedule (``--steps 8000 --no-f1 --workers 12``), as
``benchmarks/gpu/v04_session.sh`` starts it on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "models" / "biomjepa-mini-v0.4.yaml"
DATA = REPO.parent / "shared" / "data" / "scrna"
SETS = {  # name: (file, obs-name file, label column, input kind)
    "pbmc": ("pbmc_sorted_2140cells_raw.h5ad", "heldout_pbmc_sorted.txt", "sorted_celltype", "counts"),
    "brain": ("darmanis2015_brain_466cells_raw.h5ad", "validation_darmanis_brain.txt", "cell_type", "reads"),
}
READOUTS = ("max_top5", "mean_wmean", "centred_max_top5")
LEVERS: dict[str, list[str]] = {
    # the v0.3v recipe on the new corpus, batches as before (one shard after another, sortish inside)
    "shard": [],
    # one source per batch, the source of each batch drawn ∝ its cells (every cell equally often)
    "source": ["data.batching=source"],
    # ... drawn ∝ √cells: no source above its square-root share (blood 59 % of cells → 39 % of batches)
    "source-bal": ["data.batching=source", "data.balance=0.5"],
    # cells of every source in each batch (the contrast can tell cells apart by tissue)
    "mixed": ["data.batching=mixed"],
    # the contrast's temperature
    "source-t0.2": ["data.batching=source", "loss.nce_temperature=0.2"],
    "source-t0.05": ["data.batching=source", "loss.nce_temperature=0.05"],
    # the student's context
    "source-ctx128": ["data.batching=source", "data.context_genes=128"],
    "source-bal-ctx128": ["data.batching=source", "data.balance=0.5", "data.context_genes=128"],
}


# ---------------------------------------------------------------------------------------------- prep
def validation_set(name: str):
    """``(adata, labels)`` of a validation set, vocabulary-mapped (the cells the levers are scored on)."""
    import anndata as ad

    from biomjepa.pp import map_vocab

    file, obs, key, _ = SETS[name]
    a = ad.read_h5ad(DATA / file)
    names = (REPO / "src" / "biomjepa" / "datasets" / "_data" / obs).read_text().split()
    a = a[a.obs_names.isin(names)].copy()
    map_vocab(a)
    return a, a.obs[key].astype(str).to_numpy()


def prep(out: Path) -> None:
    from biomjepa.data.anndata_source import counts_view
    from biomjepa.data.stream import gather

    out.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for name, (_, _, _, kind) in SETS.items():
        a, labels = validation_set(name)
        cells = gather(counts_view(a, input=kind), np.arange(a.n_obs))
        X = a.X
        arrays |= {f"{name}_indptr": cells.indptr, f"{name}_genes": cells.genes.astype(np.int16),  # V < 2**15
                   f"{name}_values": cells.values, f"{name}_library": cells.library, f"{name}_labels": labels.astype(str),
                   f"{name}_total": np.asarray(X.sum(1)).ravel().astype(float),
                   f"{name}_nnz": np.asarray((X > 0).sum(1)).ravel().astype(float)}
        print(f"{name}: {a.n_obs} cells, {len(set(labels))} labels", flush=True)
    np.savez_compressed(out / "probes.npz", **arrays)


def pack_cache(cache: Path, out: Path) -> None:
    """A prepared corpus cache as ``out/cache.tar.xz``, compact enough to travel with the checkout (64 MiB in all):
    shards with float16 counts and int16 gene ids (``Corpus`` reads them back as float32 / int32; counts above 2,048
    and the fractional molecule equivalents are rounded to float16's 11 bits), the graph left to be rebuilt."""
    import shutil
    import tarfile
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "cache"
        dst.mkdir()
        shutil.copy(cache / "manifest.json", dst / "manifest.json")
        for p in sorted(cache.glob("shard_*.npz")):
            with np.load(p) as z:
                d = {k: z[k] for k in z.files}
            d["data"], d["indices"] = d["data"].astype(np.float16), d["indices"].astype(np.int16)  # V < 2**15
            np.savez(dst / p.name, **d)
        with tarfile.open(out / "cache.tar.xz", "w:xz") as tar:
            tar.add(dst, arcname="cache")
    print(f"{out / 'cache.tar.xz'}: {(out / 'cache.tar.xz').stat().st_size / 2**20:.1f} MiB", flush=True)


def load_probes(path: Path) -> dict:
    from biomjepa.bench.probe import ProbeSet
    from biomjepa.data.tokenize import TokenizedCells

    z = np.load(path, allow_pickle=False)
    return {n: ProbeSet(TokenizedCells(z[f"{n}_indptr"].astype(np.int64), z[f"{n}_genes"].astype(np.int64), z[f"{n}_values"].astype(np.float32),
                                       z[f"{n}_library"]), z[f"{n}_total"], z[f"{n}_nnz"], z[f"{n}_labels"])
            for n in SETS}


# ---------------------------------------------------------------------------------------------- run
class ReadoutHook:
    """``on_checkpoint``: store both sets' readouts (float16) and log their few-shot F1 (``probe2.csv``)."""

    def __init__(self, probes_path: Path, f1: bool = True) -> None:
        self.path, self.probes, self.f1 = probes_path, None, f1

    def __call__(self, step: int, encoder, run_dir: Path) -> None:
        from biomjepa.bench.probe import few_shot_f1, probe_embeddings

        self.probes = self.probes or load_probes(self.path)
        arrays, rows = {}, []
        for name, probe in self.probes.items():
            Z = probe_embeddings(encoder, probe, batch_size=64)
            for k in READOUTS:
                arrays[f"{name}/{k}"] = Z[k].astype(np.float16)
                f1 = few_shot_f1(Z[k], probe.labels) if self.f1 else float("nan")
                rows.append({"step": step, "set": name, "pooling": k, "macro_f1_k5": f1})
        np.savez_compressed(Path(run_dir) / f"readouts_step{step:06d}.npz", **arrays)
        with open(Path(run_dir) / "probe2.jsonl", "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print(f"[{Path(run_dir).name}] step {step}: " + " ".join(
            f"{r['set']}/{r['pooling']} {r['macro_f1_k5']:.3f}" for r in rows), flush=True)


def train_one(name: str, args) -> None:
    import torch

    from biomjepa.train import load_config, pretrain

    torch.set_num_threads(args.threads)
    warm = args.warmup if args.warmup is not None else max(args.steps // 8, 1)
    cfg = load_config(BASE, [
        *LEVERS[name], *args.set, f"run.steps={args.steps}", f"run.seed={args.seed}",
        f"run.run_name={args.prefix}{name}-s{args.seed}", f"run.out_dir={args.work}", f"data.corpus={args.corpus}",
        f"loop.checkpoint_every={args.probe_every}", f"optim.warmup_steps={warm}", "probe.path=null",
        f"loop.device={args.device}", f"data.num_workers={args.workers}", f"loop.keep_checkpoints={args.keep}",
    ])
    pretrain(cfg, on_checkpoint=ReadoutHook(Path(args.probes), f1=not args.no_f1))


def run_parallel(names: list[str], args) -> None:
    """Each lever in its own process; at ``--deadline`` seconds every run still going gets SIGTERM (it saves)."""
    t0 = time.time()
    procs, logs = {}, {n: open(Path(args.work) / f"{args.prefix}{n}.out", "w") for n in names}  # noqa: SIM115
    for n in names:
        cmd = [sys.executable, __file__, "run", "--one", n, *sys.argv[sys.argv.index("run") + 1:]]
        procs[n] = subprocess.Popen(cmd, stdout=logs[n], stderr=subprocess.STDOUT, start_new_session=True)
    while any(p.poll() is None for p in procs.values()):
        if args.deadline and time.time() - t0 > args.deadline:
            for p in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for p in procs.values():
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
            break
        time.sleep(2)
    for f in logs.values():
        f.close()
    print({n: p.returncode for n, p in procs.items()}, f"{time.time() - t0:.0f} s", flush=True)


# ---------------------------------------------------------------------------------------------- score
def reference_readouts(checkpoint: str, out: Path) -> None:
    """A shipped checkpoint's encoder through the same hook (its readouts at 'step 0'), once."""
    from biomjepa._pretrained import load_model

    if not (out / "readouts_step000000.npz").exists():
        out.mkdir(parents=True, exist_ok=True)
        prep(out)
        ReadoutHook(out / "probes.npz", f1=False)(0, load_model(checkpoint).encoder, out)


def score(work: Path, csv: Path, seeds: int, steps: str = "all") -> None:
    import pandas as pd

    sys.path.insert(0, str(REPO))
    from benchmarks.evaluation.scanpy_defaults import leiden_scores
    from biomjepa.bench.probe import few_shot_f1

    labels = {n: validation_set(n)[1] for n in SETS}
    rows = []
    for run in sorted(p for p in work.iterdir() if p.is_dir()):
        files = sorted(run.glob("readouts_step*.npz"))
        if steps == "ends":  # step 0 and the last step only
            files = [f for f in files if f in (files[0], files[-1])]
        for f in files:
            step = int(f.stem.split("step")[1])
            z = dict(np.load(f))
            for name in SETS:  # the concatenation of the two readouts the issue names
                z[f"{name}/max_top5+mean_wmean"] = np.hstack([z[f"{name}/max_top5"], z[f"{name}/mean_wmean"]])
            for key, Z in z.items():
                name, k = key.split("/")
                Z = Z.astype(np.float32)
                for fixed_map in ("standardized", "raw"):  # Leiden on the cells' own standardization, or as read out
                    Zm = (Z - Z.mean(0)) / (Z.std(0) + 1e-6) if fixed_map == "standardized" else Z
                    rows.append({"run": run.name, "step": step, "presentations": step * 64, "set": name,
                                 "readout": k, "map": fixed_map, "macro_f1_k5": few_shot_f1(Z, labels[name]),
                                 **leiden_scores(Zm, labels[name], tuple(range(seeds)))})
            print(pd.DataFrame(rows[-2 * len(z):])[["run", "step", "set", "readout", "map", "macro_f1_k5",
                                                      "leiden_ari"]].round(3).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(csv, index=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("prep")
    a.add_argument("--out", type=Path, default=REPO / ".gpu" / "v04")
    a.add_argument("--cache", type=Path, default=None, help="also pack this prepared corpus cache (cache.tar.xz)")
    r = sub.add_parser("run")
    r.add_argument("--levers", nargs="+", default=["shard"], choices=list(LEVERS))
    r.add_argument("--one", default=None, help=argparse.SUPPRESS)
    r.add_argument("--steps", type=int, default=400)
    r.add_argument("--warmup", type=int, default=None)
    r.add_argument("--probe-every", type=int, default=200)
    r.add_argument("--keep", type=int, default=1)
    r.add_argument("--seed", type=int, default=42)
    r.add_argument("--set", nargs="*", default=[])
    r.add_argument("--corpus", required=True, help="a prepared corpus cache (prep copies one)")
    r.add_argument("--probes", required=True)
    r.add_argument("--work", type=Path, default=Path("/tmp/levers_v04"))
    r.add_argument("--prefix", default="lever-")
    r.add_argument("--device", default="cpu")
    r.add_argument("--workers", type=int, default=1)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--parallel", type=int, default=1)
    r.add_argument("--no-f1", action="store_true", help="store readouts only (no F1 in the training process)")
    r.add_argument("--deadline", type=float, default=0.0, help="seconds after which running levers are stopped")
    s = sub.add_parser("score")
    s.add_argument("--work", type=Path, default=Path("/tmp/levers_v04"))
    s.add_argument("--csv", type=Path, default=REPO / "benchmarks" / "results" / "pretrain_levers_v04.csv")
    s.add_argument("--leiden-seeds", type=int, default=3)
    s.add_argument("--steps", choices=["all", "ends"], default="all", help="every stored step, or step 0 and the last")
    s.add_argument("--reference", default=None, help="also store readouts of this checkpoint (e.g. biomjepa-mini) as "
                   "the run 'reference' at step 0, scored with the runs")
    args = p.parse_args()
    os.chdir(REPO)
    if args.cmd == "prep":
        prep(args.out)
        if args.cache:
            pack_cache(args.cache, args.out)
    elif args.cmd == "score":
        if args.reference:
            reference_readouts(args.reference, args.work / "reference")
        score(args.work, args.csv, args.leiden_seeds, args.steps)
    elif args.one:
        train_one(args.one, args)
    else:
        args.work.mkdir(parents=True, exist_ok=True)
        if args.parallel > 1:
            run_parallel(args.levers, args)
        else:
            for n in args.levers:
                train_one(n, args)


if __name__ == "__main__":
    main()
