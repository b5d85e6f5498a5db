"""Step h of ``gpu_suite.py``: a time-boxed pretraining run (or the continuation of one), exported.

``python -m biomjepa.train`` has no time box, so the suite boxes it from outside, in two invocations
of the same run directory (the loop resumes from its latest state, bit for bit): a short first chunk
(``stop_at``) prepares the corpus and graph and measures the step time; the second sets ``steps`` (the
length of the lr/EMA schedules) so that the run ends when the box does, and runs to it. A run given
by ``--resume-from RUN_DIR`` is copied (latest state, config, logs) and continued the same way; when
the box cannot reach its own ``steps``, its remaining schedule is shortened to fit (logged).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tarfile
import time
from pathlib import Path

from benchmarks._common import REPO
from benchmarks.gpu._bench_steps import search_recipe

ARCHIVE_LIMIT = 16 * 2**20


def step_h(s) -> None:
    """Time-boxed pretraining of the default recipe (or --resume-from), exported with its probe.csv."""
    from biomjepa.train import TrainConfig

    deadline = time.monotonic() + 60 * s.args.minutes
    runs = s.work / "runs"
    if s.args.resume_from:
        config, name, start = adopt_run(Path(s.args.resume_from), runs, s.work)
    else:
        config, name, start = Path(s.args.recipe), f"gpu-suite-{Path(s.args.recipe).stem}", 0
        shutil.rmtree(runs / name, ignore_errors=True)
    recipe = TrainConfig.from_yaml(config).flat()  # by section (or flat keys, from before the sections)
    batch = s.args.batch or largest_batch(s)
    step_s = _estimate_step_s(s, batch)
    first = start + s.pick(2, 50)
    if start:  # the first chunk keeps the run's own schedule
        total = int(recipe.get("steps", first))
    else:
        total = max(first + 1, int(60 * s.args.minutes / step_s)) if step_s else int(recipe.get("steps", 1000))
    common = _overrides(s, recipe, runs, name, batch)
    if start:  # a run continued at this machine's batch size: a change of data order, recorded in changes.log
        common.append("allow_resume_mismatch=true")
    s.log.info("step h: %s run %s from step %d, batch %d, box %.1f min", "resumed" if start else "new", name, start,
               batch, s.args.minutes)
    t0 = time.monotonic()
    _train(s, config, [*common, f"steps={max(total, first)}", f"stop_at={first}"], None)
    wall0 = time.monotonic() - t0
    run = runs / name
    step_s = _logged_step_s(run, start + 2) or step_s or wall0 / max(1, first - start)
    restart = min(wall0 - (first - start) * step_s, 90.0)
    left = deadline - time.monotonic() - restart
    more = max(s.pick(2, 1), int(left / (1.15 * step_s)))  # 15 %: checkpoints and their validation probe
    total = first + more
    saved = int(recipe.get("steps", total)) if start else total
    if start and total < saved:
        s.log.warning("the box reaches step %d of the run's %d: its remaining lr/EMA schedule is shortened to end there",
                      total, saved)
    total = min(total, saved) if start else total
    s.log.info("step h: %.3f s/step, first chunk %.0f s; second chunk to step %d", step_s, wall0, total)
    if total > first:
        warm = [] if start else _warmup(recipe, total, first)
        every = [] if s.quick else [f"checkpoint_every={max(int(recipe.get('checkpoint_every', 1)), (total - first) // 10)}"]
        rc = _train(s, config, [*common, f"steps={total}", f"stop_at={total}", *warm, *every],
                    max(60.0, deadline - time.monotonic()) + 120)
        if rc != 0:  # stopped at the box's edge (or failed): what was checkpointed is still exported
            s.log.warning("second chunk exited %d: exporting the latest checkpoint it saved", rc)
    _report(s, run, start, batch, time.monotonic() - t0)


def _overrides(s, recipe: dict, runs: Path, name: str, batch: int) -> list[str]:
    out = [f"out_dir={runs}", f"run_name={name}", f"cache_dir={s.work / 'cache'}", f"batch_size={batch}",
           f"device={s.device}", "progress=false", "tensorboard=false"]
    if s.quick:  # two small corpus files, a few cells each; a small probe; a checkpoint every 2 steps
        corpus = sorted(recipe["corpus"], key=lambda c: (REPO / (c["path"] if isinstance(c, dict) else c)).stat().st_size)
        small = [{**(c if isinstance(c, dict) else {"path": c}), "max_cells": 60} for c in corpus[:2]]
        out += [f"corpus={json.dumps(small)}", "probe_cells=48", "checkpoint_every=2", "keep_checkpoints=2"]
    return out


def _warmup(recipe: dict, total: int, first: int) -> list[str]:
    """A warm-up of at most a fifth of a short run (never below the first chunk, already run)."""
    warm = int(recipe.get("warmup_steps", 0))
    if warm and total < 5 * warm:
        return [f"warmup_steps={max(first, total // 5)}"]
    return []


def _train(s, config, overrides: list[str], timeout: float | None) -> int:
    cmd = [sys.executable, "-m", "biomjepa.train", str(config)]
    for o in overrides:
        cmd += ["--set", o]
    return s.run(cmd, env=s.env(), timeout=timeout, check=timeout is None)[0]


def adopt_run(src: Path, runs: Path, work: Path) -> tuple[Path, str, int]:
    """Copy ``src``'s latest state, config and logs to ``runs/<name>``; returns (config, name, step)."""
    from biomjepa.train.checkpoint import LATEST, latest_state

    state = latest_state(src) or max((src / "checkpoints").glob("step_*.pt"), default=None)
    if state is None or not (src / "config.yaml").is_file():
        raise FileNotFoundError(f"{src} holds no training state (checkpoints/step_*.pt) and config.yaml to resume")
    dst = runs / src.name
    if dst.resolve() == src.resolve():  # continuing the suite's own earlier run: keep it, continue a copy
        dst = runs / f"{src.name}-resumed"
    shutil.rmtree(dst, ignore_errors=True)
    (dst / "checkpoints").mkdir(parents=True)
    shutil.copy2(state, dst / "checkpoints" / state.name)
    (dst / "checkpoints" / LATEST).write_text(state.name)
    for f in ("log.csv", "probe.csv"):
        if (src / f).is_file():
            shutil.copy2(src / f, dst / f)
    config = work / f"resume_{src.name}.yaml"
    shutil.copy2(src / "config.yaml", config)
    return config, dst.name, int(re.findall(r"\d+", state.stem)[0])


def largest_batch(s) -> int:
    """The largest batch step f ran for the recipe (capped at ``--max-batch``), else a search now."""
    found = s.state.get("train_recipe")
    if found is None:
        found = search_recipe(s)
    cap = s.pick(min(8, s.args.max_batch), s.args.max_batch)
    batch = min(int(found["batch_size"]), cap) if found else 8
    s.figure("h", "batch_size", batch, "cells", None,
             f"largest batch bench_train ran: {found['batch_size'] if found else 'none'}; cap {cap}")
    return batch


def _estimate_step_s(s, batch: int) -> float | None:
    found = s.state.get("train_recipe")
    if not found:
        return None
    return float(found["step_s"]) * batch / int(found["batch_size"])


def _logged_step_s(run: Path, from_step: int) -> float | None:
    """Median seconds per optimizer step in the loop's ``log.csv`` from ``from_step`` on (cells / cells per s)."""
    import pandas as pd

    if not (run / "log.csv").is_file():
        return None
    df = pd.read_csv(run / "log.csv")
    df = df[df["step"] >= from_step]
    from biomjepa.train import TrainConfig

    data = TrainConfig.from_yaml(run / "config.yaml").data  # by section (or flat, written before the sections)
    cells = data.batch_size * data.accumulation
    return float((cells / df["cells_per_s"]).median()) if len(df) else None


def _report(s, run: Path, start: int, batch: int, wall: float) -> None:
    """Figures, ``probe.csv`` and ``checkpoint.tar.gz`` (the chosen readout, in the bundled format)."""
    import pandas as pd

    from benchmarks.evaluation.select_checkpoint import choose

    log = pd.read_csv(run / "log.csv")
    mine = log[log["step"] >= start]
    s.figure("h", "steps", int(log["step"].max()) + 1 - start, "steps", None, f"from step {start}, batch {batch}")
    s.figure("h", "train_minutes", wall / 60, "min", s.args.minutes, "both chunks, corpus preparation included")
    s.figure("h", "cells_per_s_median", float(mine["cells_per_s"].median()), "cells/s", None, "loop's own per-step rate")
    s.figure("h", "loss_last", float(log["loss"].iloc[-1]), "", float(mine["loss"].iloc[0]), "reference: first logged")
    probe = pd.read_csv(run / "probe.csv")
    shutil.copy2(run / "probe.csv", s.out / "probe.csv")
    last = probe[probe["step"] == probe["step"].max()]
    best, qualified = choose(last)
    for k in ("macro_f1_k5", "effective_rank", "depth_nnz"):
        s.figure("h", f"validation_{k}", float(best[k]), "", None,
                 f"step {int(best.step)}, readout {best.pooling} (chosen on validation; bounds met: {qualified})")
    export = s.work / "export" / run.name
    _export(s, run, export, str(best.pooling))
    _archive(s, export, run)


def _export(s, run: Path, out: Path, pooling: str) -> None:
    """``scripts/export_bundled.py RUN --out DIR`` (the bundled format: bf16 teacher), from the same checkout."""
    shutil.rmtree(out, ignore_errors=True)
    s.run([sys.executable, str(REPO / "scripts" / "export_bundled.py"), str(run), "--out", str(out),
           "--pooling", pooling, "--version", "gpu-suite"], env=s.env())


def _archive(s, export: Path, run: Path) -> None:
    path = s.out / "checkpoint.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for f in sorted(export.iterdir()):
            tar.add(f, arcname=f"checkpoint/{f.name}")
        for f in ("config.yaml", "log.csv"):
            tar.add(run / f, arcname=f"run/{f}")
    size = path.stat().st_size
    s.figure("h", "checkpoint_archive_mib", size / 2**20, "MiB", ARCHIVE_LIMIT / 2**20, "limit 16 MiB")
    if size > ARCHIVE_LIMIT:
        raise RuntimeError(f"{path} is {size / 2**20:.1f} MiB, over the 16 MiB the device returns")
