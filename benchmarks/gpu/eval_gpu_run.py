"""Turn the directory ``gpu_suite.py`` returned into the model-card evaluation and the performance notes (CPU).

    python benchmarks/gpu/eval_gpu_run.py DIR [--tag NAME] [--doc docs/performance.md] [--results benchmarks/results]

1. **Validation first.** The returned checkpoint (``DIR/checkpoint.tar.gz``, bundled format) and the
   bundled default are scored on the run's validation probe (the held-out sorted-PBMC cells) with
   :func:`biomjepa.bench.probe.probe_scores`, the function the training loop logged ``probe.csv`` with;
   the checkpoint's readout is chosen as ``select_checkpoint.py`` chooses (``choose``: highest k = 5
   macro-F1 among readouts of effective rank ≥ 15 and depth association ≤ 0.3), the default keeps its
   own. The table goes to ``RESULTS/gpu_run_<tag>_validation.csv``, with the F1 the run logged on the
   GPU for the same step next to the CPU one.
2. **Test cells only for a checkpoint chosen on validation:** when it beats the default there (higher
   F1, bounds met), ``model_card_eval.py`` scores both on the validation and the test cells
   (``RESULTS/model_card_gpu_<tag>.csv``); otherwise the test cells are not looked at.
3. **The suite's figures** (``DIR/figures.csv``) are appended to ``--doc`` as one section per run (run
   again: the section is replaced): every ratio in it has its numerator and denominator from that run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import pandas as pd

REPO = Path(__file__).resolve().parents[2]


def unpack(archive: Path, into: Path) -> tuple[Path, Path]:
    """``checkpoint.tar.gz`` → (checkpoint directory, run directory holding config.yaml and log.csv)."""
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "checkpoint", into / "run"


def validation(ckpt: Path, run: Path, probe_cells: int | None) -> tuple[pd.DataFrame, dict]:
    """Both models' probe rows on the run's validation probe, and the verdict."""
    import biomjepa as bj
    from benchmarks.evaluation.select_checkpoint import choose
    from biomjepa.bench.probe import load_probe, probe_scores
    from biomjepa.train.config import TrainConfig

    cfg = TrainConfig.from_yaml(run / "config.yaml")
    pc = cfg.probe
    probe = load_probe(str(REPO / pc.path), obs=str(REPO / pc.obs) if pc.obs else None,
                       label_key=pc.label_key, max_cells=probe_cells or pc.cells, seed=cfg.run.seed)
    step = int(pd.read_csv(run / "log.csv")["step"].max()) + 1
    mine = pd.DataFrame(probe_scores(bj.load_model(str(ckpt)).encoder, probe, step)).assign(model="returned")
    default = bj.load_model()
    theirs = pd.DataFrame(probe_scores(default.encoder, probe, -1)).assign(model=f"default ({default.info.get('name')})")
    best, qualified = choose(mine)
    ref = theirs[theirs["pooling"] == default.config.pooling].iloc[0]
    verdict = {"step": step, "pooling": best.pooling, "f1": float(best.macro_f1_k5), "qualified": qualified,
               "default_pooling": default.config.pooling, "default_f1": float(ref.macro_f1_k5),
               "beats_default": bool(qualified and best.macro_f1_k5 > ref.macro_f1_k5), "n_cells": len(probe.cells)}
    return pd.concat([mine, theirs], ignore_index=True), verdict


def logged_f1(out: Path, step: int, pooling: str) -> float:
    """The F1 the run logged on its device for ``step`` and ``pooling`` (NaN when absent)."""
    if not (out / "probe.csv").is_file():
        return float("nan")
    p = pd.read_csv(out / "probe.csv")
    hit = p[(p["step"] == step) & (p["pooling"] == pooling)]["macro_f1_k5"]
    return float(hit.iloc[0]) if len(hit) else float("nan")


def model_card(ckpt: Path, tag: str) -> int:
    """``model_card_eval.py returned=CKPT default=<registry default>``: validation and test cells."""
    import biomjepa as bj

    cmd = [sys.executable, str(REPO / "benchmarks" / "evaluation" / "model_card_eval.py"), f"returned={ckpt}", f"default={bj.settings.checkpoint}",
           "--tag", f"model_card_gpu_{tag}"]
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO).returncode


def section(fig: pd.DataFrame, tag: str, verdict: dict | None) -> str:
    """The Markdown section of one suite run: its figures as value / reference / ratio, per step."""
    machine = fig[fig["name"] == "machine"]
    where = f"{machine['value'].iloc[0]} ({machine['note'].iloc[0]})" if len(machine) else "unknown machine"
    quick = bool(fig["quick"].astype(str).eq("True").any()) if "quick" in fig else False
    lines = [f"<!-- gpu-suite:{tag} -->", f"### GPU suite run `{tag}`: {where}", ""]
    if quick:
        lines += ["**Quick mode (`--quick`, toy sizes): these rows check the code paths and measure nothing.**", ""]
    lines += ["`python benchmarks/gpu/gpu_suite.py` (every ratio: numerator and denominator measured in this one run; "
              "`python benchmarks/gpu/eval_gpu_run.py DIR` wrote this section).", "",
              "| step | figure | value | reference | ratio | note |", "|---|---|---|---|---|---|"]
    for r in fig[~fig["name"].isin(["machine", "status"])].itertuples():
        note = str(r.note if isinstance(r.note, str) else "").replace("|", "/")
        lines.append(f"| {r.step} | {r.name} | {_fmt(r.value)} {'' if pd.isna(r.unit) else r.unit} | "
                     f"{_fmt(r.reference)} | {_fmt(r.ratio)} | {note} |")
    status = fig[fig["name"] == "status"]
    if len(status):
        lines += ["", "Steps: " + "; ".join(f"{r.step} {r.note} ({float(r.value):.0f} s)" for r in status.itertuples()) + "."]
    if verdict:
        lines += ["", f"Validation ({verdict['n_cells']} held-out sorted-PBMC cells, CPU): returned checkpoint step "
                  f"{verdict['step']}, readout {verdict['pooling']}, k = 5 macro-F1 {verdict['f1']:.3f} vs the default's "
                  f"{verdict['default_f1']:.3f} ({verdict['default_pooling']}); "
                  + ("beats the default: test cells scored by `model_card_eval.py`." if verdict["beats_default"]
                     else "does not beat the default: the test cells were not looked at.")]
    return "\n".join([*lines, f"<!-- /gpu-suite:{tag} -->", ""])


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:,.0f}"


def write_section(doc: Path, text: str, tag: str) -> None:
    """Append ``text`` to ``doc``, replacing an earlier section of the same run."""
    old = doc.read_text() if doc.is_file() else ""
    start, end = f"<!-- gpu-suite:{tag} -->", f"<!-- /gpu-suite:{tag} -->"
    if start in old and end in old:
        head, rest = old.split(start, 1)
        old = head + rest.split(end, 1)[1].lstrip("\n")
    doc.write_text(old.rstrip("\n") + "\n\n" + text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", help="the directory gpu_suite.py wrote (--out)")
    p.add_argument("--tag", default=None, help="name of this run in the results and the doc (default: DIR's name)")
    p.add_argument("--doc", default=str(REPO / "docs" / "performance.md"))
    p.add_argument("--results", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--probe-cells", type=int, default=None, help="validation cells (default: the run's probe_cells)")
    args = p.parse_args(argv)
    out, tag = Path(args.dir), args.tag or Path(args.dir).resolve().name
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    fig = pd.read_csv(out / "figures.csv")
    verdict = None
    if (out / "checkpoint.tar.gz").is_file():
        with tempfile.TemporaryDirectory() as tmp:
            ckpt, run = unpack(out / "checkpoint.tar.gz", Path(tmp))
            table, verdict = validation(ckpt, run, args.probe_cells)
            table["logged_f1_on_device"] = [logged_f1(out, verdict["step"], pl) if m == "returned" else float("nan")
                                            for m, pl in zip(table["model"], table["pooling"])]
            table.to_csv(results / f"gpu_run_{tag}_validation.csv", index=False)
            print(table.round(3).to_string(index=False))
            print("validation:", verdict)
            if verdict["beats_default"]:
                keep = results / f"gpu_run_{tag}_checkpoint"
                subprocess.run(["cp", "-r", str(ckpt), str(keep)], check=True)
                if model_card(keep, tag) != 0:
                    print("model_card_eval.py failed; the validation verdict stands", file=sys.stderr)
    else:
        print(f"{out} holds no checkpoint.tar.gz (step h failed or did not run): figures only")
    write_section(Path(args.doc), section(fig, tag, verdict), tag)
    print(f"appended the figures of {tag} to {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
