"""Per-step logging: CSV (always), TensorBoard (if installed and enabled), tqdm progress."""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

from .._files import no_space_error
from .sections import LoopSection

logger = logging.getLogger(__name__)


class StepLogger:
    """Appends one CSV row per step to ``run_dir/log.csv`` (rank 0 only)."""

    def __init__(self, run_dir: Path, fields: list[str], cfg: LoopSection, *, steps: int, enabled: bool = True,
                 start: int = 0) -> None:
        self.enabled, self.fields = enabled, fields
        self.bar = self.tb = self.file = None
        if not enabled:
            return
        path = Path(run_dir) / "log.csv"
        new = not path.is_file() or start == 0
        if not new:  # a resumed run keeps the columns its log.csv was started with (a row never outgrows its header)
            with open(path, newline="") as f:
                header = next(csv.reader(f), None)
            self.fields = fields = header or fields
        self.file = open(path, "w" if new else "a", newline="")  # noqa: SIM115 (closed in close())
        self.writer = csv.DictWriter(self.file, fieldnames=fields, extrasaction="ignore")
        if new:
            self.writer.writeheader()
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except Exception as err:  # tensorboard not installed (or broken)
                self.tb = None
                logger.warning(
                    "tensorboard: true, but TensorBoard is unavailable (%s: %s); logging to %s only. "
                    "Install it (`pip install tensorboard`) or set `loop.tensorboard: false`.",
                    type(err).__name__, err, path,
                )
        if cfg.progress:
            from tqdm.auto import tqdm

            from .._progress import interactive

            self.bar = tqdm(total=steps, initial=start, desc="pretrain", dynamic_ncols=True, disable=not interactive())
        self.every = max(1, cfg.log_every)

    def write(self, row: dict) -> None:
        if not self.enabled:
            return
        if row["step"] % self.every == 0:
            try:
                self.writer.writerow({k: row.get(k, "") for k in self.fields})
                self.file.flush()
            except OSError as err:
                full = no_space_error(err, Path(self.file.name).parent, what=f"the log of step {row['step']} (log.csv)",
                                      fix="Free space on that disk, or move the run to a larger one and point out_dir "
                                      "there; then run the same command again to resume from the last saved state.")
                if full is None:
                    raise
                raise full from err
        if self.tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, float) and math.isfinite(v):
                    self.tb.add_scalar(f"train/{k}", v, row["step"])
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{row.get('loss', float('nan')):.4g}", rank=f"{row['effective_rank']:.1f}")

    def close(self) -> None:
        for h in (self.bar, self.tb, self.file):
            if h is not None:
                h.close()
