"""Export a pretraining run's teacher as the bundled ``biomjepa-mini`` checkpoint (bf16 storage).

    python scripts/export_bundled.py RUN_DIR [--version 0.1] [--step N]

Writes ``src/biomjepa/_models/biomjepa-mini-v<version>/`` and prints the registry entry
(name, version, sha256 of ``model.safetensors``) to paste into ``biomjepa/_pretrained.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from biomjepa.train import export


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--version", default="0.1")
    p.add_argument("--step", type=int, default=None, help="training step to export (default: latest)")
    args = p.parse_args()
    run = Path(args.run_dir)
    source = run if args.step is None else run / "checkpoints" / f"step_{args.step:08d}.pt"
    out = Path("src/biomjepa/_models") / f"biomjepa-mini-v{args.version}"
    export(source, out, which="teacher", dtype=torch.bfloat16)
    meta = json.loads((out / "config.json").read_text())
    size = (out / "model.safetensors").stat().st_size / 2**20
    print(f"wrote {out} ({size:.1f} MiB), step {meta['provenance'].get('step')}")
    print(json.dumps({"biomjepa-mini": {"path": f"_models/{out.name}", "version": args.version,
                                        "sha256": meta["weights_sha256"]}}, indent=2))


if __name__ == "__main__":
    main()
