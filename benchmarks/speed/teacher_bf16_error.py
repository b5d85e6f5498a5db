"""The teacher's forward in bf16: its error in the training targets against the targets' own energy.

The training step computes the teacher's token states in float32 whatever the step's precision
(``train.jepa.teacher_token_states``). This measures what a bf16 teacher (CPU autocast) would change: on
``--batches`` micro-batches of a run config's corpus (default ``models/biomjepa-mini-v0.4.yaml``, whose prepared
cache must exist) with that config's teacher view and blocks, the block targets ``mean_{g∈T_k} h_g − c`` (the
paper's global centre, here the mean block state over the batches measured) and the view contrast's per-cell
mean state, from the same inputs through a float32 and a bf16 teacher. Rows, for the bundled model's encoder (a
trained teacher, ``--checkpoint``) and a freshly initialised one (step 0):

* ``target_rms``: RMS of the float32 centred targets (their energy per element, squared);
* ``within_cell_rms``: RMS of what is left after each cell's mean target (the part that differs between a cell's
  blocks);
* ``error_rms``: RMS of bf16 − float32 targets; ``error_over_target`` and ``error_over_within`` their ratios
  (energy ratios are the squares); the same for the per-cell view states (``view_*``).

    python benchmarks/speed/teacher_bf16_error.py [--config models/biomjepa-mini-v0.4.yaml] [--batches 6]
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import torch

from benchmarks._common import REPO, write_csv


def teacher_states(teacher, inputs, n_units: int, bf16: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Target-gene states ``[M, D]`` and per-cell mean states ``[n, D]`` (float32 results either way)."""
    from biomjepa.nn.pooling import mean_state

    t = inputs.teacher
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        h = teacher(t.gene_ids, t.values.float(), t.mask).float()
    n, T, D = h.shape
    cell = torch.div(inputs.tgt_unit, n_units, rounding_mode="floor")
    return h.reshape(n * T, D)[cell * T + inputs.tgt_pos], mean_state(h, t.gene_mask)


def micro_batches(cfg, n: int) -> list:
    """``n`` micro-batches of the run's inputs (blocks, teacher view), as the training step receives them."""
    from biomjepa.train.distributed import init_distributed
    from biomjepa.train.loop import Trainer

    tr = Trainer(cfg, init_distributed("cpu"))
    data = tr.batches()
    one_arg = len(inspect.signature(tr._micro).parameters) == 1  # prepared by the loader, or prepared here
    out = []
    for i in range(n):
        tr.step = i
        out.append(tr._micro(next(data)) if one_arg else tr._micro(next(data), 0))
    return out


def measure(teacher, batches: list, label: str) -> dict:
    from biomjepa.train.targets import unit_means

    per = []
    for inputs in batches:
        n_units = inputs.valid.shape[1]
        rows = inputs.valid.numel()
        valid = inputs.valid.reshape(-1)
        got = {}
        for bf16 in (False, True):
            states, cell_state = teacher_states(teacher, inputs, n_units, bf16)
            means, _ = unit_means(states, inputs.tgt_unit, rows)
            got[bf16] = (means[valid], cell_state)
        cell = torch.arange(inputs.valid.shape[0]).repeat_interleave(n_units)[valid]
        per.append((got[False], got[True], cell))
    centre = torch.cat([f[0] for f, _, _ in per]).mean(0)  # the global centre the run's EMA tracks
    t32 = torch.cat([f[0] - centre for f, _, _ in per])
    t16 = torch.cat([b[0] - centre for _, b, _ in per])
    within = []
    for f, _, cell in per:
        t = f[0] - centre
        level, _ = unit_means(t, cell, int(cell.max()) + 1)
        within.append(t - level[cell])
    v32 = torch.cat([f[1] - f[1].mean(0) for f, _, _ in per])  # the view contrast centres on the batch
    v16 = torch.cat([b[1] - f[1].mean(0) for f, b, _ in per])
    rms = lambda x: float(x.pow(2).mean().sqrt())  # noqa: E731
    err, verr = rms(t16 - t32), rms(v16 - v32)
    return {"teacher": label, "units": len(t32), "target_rms": rms(t32), "within_cell_rms": rms(torch.cat(within)),
            "error_rms": err, "error_over_target": err / rms(t32), "error_over_within": err / rms(torch.cat(within)),
            "view_rms": rms(v32), "view_error_rms": verr, "view_error_over_view": verr / rms(v32),
            "token_rms": rms(torch.cat([f[0] for f, _, _ in per]))}


def main(argv: list[str] | None = None) -> None:
    import biomjepa as bj
    from biomjepa._device import cpu_bf16_units
    from biomjepa.nn import Encoder
    from biomjepa.train import load_config

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "models" / "biomjepa-mini-v0.4.yaml"))
    p.add_argument("--checkpoint", default=None, help="trained teacher: a checkpoint's encoder (default: the bundled)")
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--out", default="teacher_bf16_error.csv", help="CSV name under benchmarks/results/")
    args = p.parse_args(argv)
    tmp = tempfile.mkdtemp()
    cfg = load_config(args.config, [f"run.out_dir={tmp}", "loop.tensorboard=false", "loop.progress=false",
                                    "probe.path=null", "model.gene_init=random"])
    batches = micro_batches(cfg, args.batches)
    trained = bj.load_model(args.checkpoint).encoder.eval()
    torch.manual_seed(0)
    fresh = Encoder(trained.config).eval()
    rows = [measure(trained, batches, f"trained ({bj.load_model(args.checkpoint).info.get('name', 'checkpoint')})"),
            measure(fresh, batches, "fresh (step 0)")]
    for r in rows:
        r |= {"config": Path(args.config).name, "batches": args.batches, "cpu_bf16_units": " ".join(cpu_bf16_units()) or "none"}
        print({k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()})
    print(f"wrote {write_csv(rows, args.out)}")


if __name__ == "__main__":
    main()
