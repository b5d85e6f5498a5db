"""Export a pretraining run's teacher as the bundled ``biomjepa-mini`` checkpoint (bf16 storage).

    python scripts/export_bundled.py RUN_DIR [--version 0.2] [--step N] [--pooling centred_max_top5]

Writes ``src/biomjepa/_models/biomjepa-mini-v<version>/`` (``config.json``, ``model.safetensors`` and
the ``SHA256SUMS`` manifest) and prints the registry entry to paste into ``biomjepa/_pretrained.py``:
name, version, ``checkpoint_sha256`` (the sha256 of the manifest, which pins every file;
:func:`biomjepa.model.checkpoint_sha256`) and ``sha256`` (of the weights, which ``bj.tl.embed``
records and ``bj.bench`` looks up).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from biomjepa.model import checkpoint_sha256
from biomjepa.train import export


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--version", default="0.2")
    p.add_argument("--step", type=int, default=None, help="training step to export (default: latest)")
    p.add_argument("--pooling", default=None, help="readout to record (default: the run's, max_top5)")
    args = p.parse_args()
    run = Path(args.run_dir)
    source = run if args.step is None else run / "checkpoints" / f"step_{args.step:08d}.pt"
    out = Path("src/biomjepa/_models") / f"biomjepa-mini-v{args.version}"
    export(source, out, which="teacher", dtype=torch.bfloat16, pooling=args.pooling)
    meta = json.loads((out / "config.json").read_text())
    size = (out / "model.safetensors").stat().st_size / 2**20
    print(f"wrote {out} ({size:.1f} MiB), step {meta['provenance'].get('step')}")
    print(json.dumps({"biomjepa-mini": {"path": f"_models/{out.name}", "version": args.version,
                                        "checkpoint_sha256": checkpoint_sha256(out),
                                        "sha256": meta["weights_sha256"]}}, indent=2))


if __name__ == "__main__":
    main()
