"""What the steps of ``gpu_suite.py`` share: the :class:`Suite` they report through and the suite's constants.

The driver (``gpu_suite.py``) and the step modules (``_bench_steps.py``: c-g, ``_train_step.py``: h) import
this module; it imports none of them, so the suite has no import circle.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

from benchmarks._common import REPO

STEPS = "abcdefgh"
TABLES = {"embed": "embed.csv", "attention": "attention.csv", "throughput": "throughput.csv", "atlas": "atlas.csv"}
#: Every file the suite may write into DIR (the device returns at most 8).
OUTPUTS = ("suite.log", "figures.csv", *TABLES.values(), "probe.csv", "checkpoint.tar.gz")
PAPER = {"finetune_train_cells_per_s": 24.37, "finetune_heldout_cells_per_s": 62.78, "frozen_cells_per_s": 678.0}


class Suite:
    """What the steps share: options, the log, the figures and tables written to DIR, a subprocess runner."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.quick, self.device = args, args.quick, args.device
        self.cuda = args.device.startswith("cuda")
        self.out = Path(args.out).resolve()
        self.work = Path(args.work).resolve() if args.work else self.out.with_name(self.out.name + "_work")
        self.out.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        self.log = _logger(self.out / "suite.log")
        self.state: dict = {}  # passed from step to step (e.g. the largest batch step f found)
        self.figures, self.tables = self._previous(args.steps)

    # ------------------------------------------------------------------ results
    def _previous(self, steps: str) -> tuple[list[dict], dict[str, list[dict]]]:
        """Rows already in DIR from other steps (kept when only some steps run again)."""
        import pandas as pd

        def keep(name: str) -> list[dict]:
            path = self.out / name
            if not path.is_file() or path.stat().st_size == 0:
                return []
            df = pd.read_csv(path)
            return df[~df["step"].astype(str).isin([*steps, "all"])].to_dict("records") if "step" in df else []

        return keep("figures.csv"), {t: keep(f) for t, f in TABLES.items()}

    def figure(self, step: str, name: str, value, unit: str = "", reference=None, note: str = "") -> None:
        """One headline figure; ``ratio`` = value / reference when both are numbers."""
        ratio = None
        if _number(value) and _number(reference) and reference:
            ratio = float(value) / float(reference)
        self.figures.append({"step": step, "name": name, "value": value, "unit": unit, "reference": reference,
                             "ratio": ratio, "note": note, "device": self.device, "quick": self.quick})
        shown = f"{value:.4g}" if _number(value) else value
        self.log.info("figure %s %s = %s %s%s%s", step, name, shown, unit,
                      f" (reference {reference}, ratio {ratio:.3f})" if ratio is not None else "",
                      f" [{note}]" if note else "")

    def rows(self, table: str, step: str, rows: list[dict]) -> None:
        self.tables[table] += [{"step": step, **r} for r in rows]
        self.flush()

    def flush(self) -> None:
        import pandas as pd

        pd.DataFrame(self.figures).to_csv(self.out / "figures.csv", index=False)
        for table, name in TABLES.items():
            if self.tables[table]:
                pd.DataFrame(self.tables[table]).to_csv(self.out / name, index=False)

    # ------------------------------------------------------------------ helpers
    def run(self, cmd: list[str], *, env: dict | None = None, timeout: float | None = None, cwd: Path = REPO,
            check: bool = True) -> tuple[int, str]:
        """Run ``cmd``, streaming its output into the log; returns (exit code, the last 200 lines)."""
        import signal
        import threading

        self.log.info("$ %s", " ".join(map(str, cmd)))
        tail: list[str] = []
        with subprocess.Popen(list(map(str, cmd)), cwd=cwd, env={**os.environ, **(env or {})}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True) as proc:

            def stop(sig) -> None:  # the child's own process group: torchrun's workers too
                if proc.poll() is None:
                    self.log.warning("timeout (%.0f s): sending %s to %s", timeout, sig.name, cmd[0])
                    os.killpg(proc.pid, sig)

            timers = [threading.Timer(timeout + grace, stop, (sig,)) for grace, sig in
                      ((0, signal.SIGINT), (60, signal.SIGKILL))] if timeout else []
            for t in timers:
                t.daemon = True
                t.start()
            for line in proc.stdout:
                self.log.info("  | %s", line.rstrip())
                tail = [*tail[-199:], line.rstrip()]
            rc = proc.wait()
            for t in timers:
                t.cancel()
        if check and rc != 0:
            raise RuntimeError(f"exit code {rc}: {' '.join(map(str, cmd))}\n" + "\n".join(tail[-20:]))
        return rc, "\n".join(tail)

    def env(self) -> dict:
        """Environment for child processes: the checkout's ``src`` first on the path."""
        path = [str(REPO / "src"), os.environ.get("PYTHONPATH", "")]
        return {"PYTHONPATH": os.pathsep.join(p for p in path if p), "PYTHONUNBUFFERED": "1"}

    def free(self) -> None:
        """Release cached GPU memory between measurements."""
        import gc

        gc.collect()
        if self.cuda:
            import torch

            torch.cuda.empty_cache()

    def pick(self, quick, full):
        return quick if self.quick else full


def _logger(path: Path) -> logging.Logger:
    log = logging.getLogger("gpu_suite")
    log.setLevel(logging.INFO)
    log.propagate = False
    for h in list(log.handlers):
        log.removeHandler(h)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    for h in (logging.FileHandler(path), logging.StreamHandler(sys.stderr)):
        h.setFormatter(fmt)
        log.addHandler(h)
    return log


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
