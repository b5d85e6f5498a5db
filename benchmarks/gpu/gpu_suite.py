"""Every GPU figure of issue 22 and a time-boxed pretraining run, in one command that keeps going.

    python benchmarks/gpu/gpu_suite.py --out DIR --device cuda --minutes 12 [--resume-from RUN_DIR]
    python benchmarks/gpu/gpu_suite.py --out DIR --device cpu --quick          # same code paths, toy sizes

Steps, in this order; each fails soft (its traceback goes to the log, the suite goes on):

a. the CUDA-marked tests (``pytest -m gpu`` over the test files that carry the mark);
b. bf16 CUDA vs float32 CPU embeddings of the bundled model on the test cells (``bj.datasets.pancreas()``):
   per-cell cosine and 5-NN overlap;
c. ``bench_embed`` for ``base`` and the bundled model on full-length and 400-gene Baron cells, as fractions
   of a same-run GEMM and of the best square GEMM;
d. ``bench_attention``: linear vs dense SDPA to 16k tokens, linear alone to 64k, the longest cell the
   whole ``base`` encoder takes, and every flash-linear-attention kernel that can serve a bidirectional
   layer (only when ``fla`` imports on CUDA; otherwise the suite says why none was measured);
e. ``bench_finetune`` (``base``, batch 8; full-length and 400-gene cells) next to the paper's A100 rates;
f. ``bench_train`` (``base``, ``mini`` and the default recipe; batch 8 and the largest batch that fits);
g. atlas embedding of ≥ 300,000 real cells (the bundled test cells resampled) through
   ``torchrun -m biomjepa.embed`` into a zarr store: cells/s, RSS per rank and GPU memory;
h. a pretraining run of the default recipe (``models/biomjepa-mini-v0.3.yaml``) boxed to ``--minutes``
   at the largest batch that fits (≤ ``--max-batch``), or the continuation of ``--resume-from RUN_DIR``,
   exported in the bundled format (``scripts/export_bundled.py``) with its validation ``probe.csv``.

DIR receives at most 8 files: ``suite.log`` (everything, tracebacks included), ``figures.csv`` (one row per
headline figure: value, reference, ratio; one ``status`` row per step), ``embed.csv``, ``attention.csv``,
``throughput.csv`` (fine-tuning and pretraining rows), ``atlas.csv``, ``probe.csv`` and
``checkpoint.tar.gz`` (≤ 16 MiB). Scratch files go to ``--work`` (default: ``DIR`` + ``_work``). Running
again into the same DIR with ``--steps`` replaces only those steps' rows. ``--quick`` shrinks every
size so that the CPU goes through the same functions in a few minutes (``tests/test_benchmarks.py``);
steps that need CUDA then compare float32 with float32. ``python benchmarks/gpu/eval_gpu_run.py DIR``
turns DIR into the model-card evaluation and the performance notes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import commit as git_commit
from benchmarks._common import precision
from benchmarks.gpu._bench_steps import step_c, step_d, step_e, step_f, step_g
from benchmarks.gpu._suite import OUTPUTS, PAPER, REPO, STEPS, Suite
from benchmarks.gpu._train_step import step_h


# ---------------------------------------------------------------------- steps a, b
def step_a(s: Suite) -> None:
    """CUDA-marked tests."""
    import re

    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                   if "pytest.mark.gpu" in p.read_text())
    rc, out = s.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider", *files],
                    env=s.env(), check=False, timeout=s.pick(120, 400))
    counts = {k: 0 for k in ("passed", "failed", "skipped", "error")}
    for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?)", out.splitlines()[-1] if out else ""):
        counts["error" if what.startswith("error") else what] += int(n)
    for k, n in counts.items():
        s.figure("a", f"gpu_tests_{k}", n, "tests", note=f"pytest -m gpu over {len(files)} files")
    if rc not in (0, 5):
        raise RuntimeError(f"pytest -m gpu exited {rc}: {counts}")


def step_b(s: Suite) -> None:
    """bf16 CUDA vs float32 CPU embeddings of the bundled model on the test cells."""
    import numpy as np

    import biomjepa as bj
    from biomjepa.bench.reconstruction import knn_overlap

    adata = bj.datasets.pancreas()
    adata = adata[: s.pick(16, adata.n_obs)].copy()
    bj.pp.map_vocab(adata)
    t0 = time.perf_counter()
    with precision("fp32"):
        ref = bj.tl.embed(adata, device="cpu", copy=True).obsm["X_biomjepa"]
    t1 = time.perf_counter()
    with precision("auto" if s.cuda else "fp32"):  # auto: bf16 on CUDA
        other = bj.tl.embed(adata, device=s.device, copy=True)
    t2 = time.perf_counter()
    out, dtype = other.obsm["X_biomjepa"], other.uns["biomjepa"]["params"]["dtype"]
    cos = (ref * out).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1))
    note = f"{adata.n_obs} test cells, {dtype} on {s.device} vs float32 on cpu"
    s.figure("b", "cosine_min", float(cos.min()), "", 0.99, note + "; target >= 0.99")
    s.figure("b", "cosine_mean", float(cos.mean()), "", None, note)
    s.figure("b", "cosine_p01", float(np.percentile(cos, 1)), "", None, note)
    s.figure("b", "knn5_overlap", knn_overlap(ref, out, 5), "", 0.8, note + "; target >= 0.8")
    s.figure("b", "cells_per_s_cpu_fp32", adata.n_obs / (t1 - t0), "cells/s", None, "whole tl.embed call")
    s.figure("b", "cells_per_s_device", adata.n_obs / (t2 - t1), "cells/s", PAPER["frozen_cells_per_s"],
             f"whole tl.embed call, bundled mini ({dtype}); reference: the paper's base on an A100")


# ---------------------------------------------------------------------- driver
def run_steps(s: Suite) -> None:
    funcs = {"a": step_a, "b": step_b, "c": step_c, "d": step_d, "e": step_e, "f": step_f, "g": step_g, "h": step_h}
    t_all = time.perf_counter()
    for letter in STEPS:
        if letter not in s.args.steps:
            continue
        fn = funcs[letter]
        s.log.info("==== step %s: %s", letter, fn.__doc__.strip().splitlines()[0])
        t0 = time.perf_counter()
        status = "ok"
        try:
            fn(s)
        except BaseException as err:  # fail soft: the next step runs (Ctrl-C still ends the suite, below)
            status = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
            s.log.error("step %s failed:\n%s", letter, traceback.format_exc())
            if isinstance(err, KeyboardInterrupt):
                s.figure(letter, "status", time.perf_counter() - t0, "s", None, "interrupted")
                s.flush()
                raise
        finally:
            s.free()
        s.figure(letter, "status", time.perf_counter() - t0, "s", None, status)
        s.flush()
    s.figure("all", "suite_wall", time.perf_counter() - t_all, "s", None, f"steps {s.args.steps}")
    s.flush()
    extra = sorted(p.name for p in s.out.iterdir() if p.name not in OUTPUTS)
    if extra:
        s.log.warning("DIR holds files the suite did not write (the device returns at most 8): %s", extra)
    s.log.info("done: %s", ", ".join(sorted(p.name for p in s.out.iterdir())))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for the (at most 8) result files")
    p.add_argument("--device", default="cuda", help="cuda[:N] or cpu")
    p.add_argument("--minutes", type=float, default=None, help="pretraining time box (default 12; 0.4 with --quick)")
    p.add_argument("--quick", action="store_true", help="toy sizes: the same code paths in a few CPU minutes")
    p.add_argument("--steps", default=STEPS, help="which of the steps a-h to run (default: all), e.g. abc or h")
    p.add_argument("--resume-from", default=None, metavar="RUN_DIR",
                   help="step h continues this pretraining run (its latest state) instead of starting one")
    p.add_argument("--recipe", default=str(REPO / "models" / "biomjepa-mini-v0.3.yaml"),
                   help="run config of step h (default: the current default recipe)")
    p.add_argument("--max-batch", type=int, default=1024, help="cap on step h's batch (the largest that fits, ≤ this)")
    p.add_argument("--batch", type=int, default=None, help="step h's batch size (default: the largest that fits)")
    p.add_argument("--atlas-cells", type=int, default=None, help="cells of step g (default 300,000; 400 with --quick)")
    p.add_argument("--atlas-procs", type=int, default=None, help="torchrun processes of step g (default 4; 1 with --quick)")
    p.add_argument("--work", default=None, help="scratch directory (default: DIR_work beside DIR)")
    args = p.parse_args(argv)
    bad = set(args.steps) - set(STEPS)
    if bad:
        p.error(f"--steps: unknown steps {sorted(bad)}; choose from {STEPS}")
    if args.minutes is None:
        args.minutes = 0.4 if args.quick else 12.0
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda, but torch sees no CUDA device here; use --device cpu --quick on a CPU machine")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    s = Suite(args)
    s.log.info("gpu_suite %s: device %s, quick %s, minutes %s, out %s, work %s", " ".join(sys.argv[1:]),
               args.device, args.quick, args.minutes, s.out, s.work)
    _describe(s)
    with precision("auto" if s.cuda else "fp32"):  # every figure in bf16 on CUDA, as the suite has measured it
        run_steps(s)
    return 0


def _describe(s: Suite) -> None:
    """Machine, library versions and the git commit, into the log and the figures."""
    import platform

    import torch

    # the device's copy of the checkout may have no .git (gpu_session.sh passes the staged commit)
    commit = git_commit() or os.environ.get("BIOMJEPA_COMMIT", "")
    dev = torch.cuda.get_device_name(torch.device(s.device)) if s.cuda else platform.processor() or platform.machine()
    s.figure("all", "machine", dev, "", None,
             f"torch {torch.__version__}, cuda {torch.version.cuda}, python {platform.python_version()}, "
             f"{os.cpu_count()} cpus, commit {commit or 'unknown'}")


if __name__ == "__main__":
    sys.exit(main())
