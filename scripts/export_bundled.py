"""Export a pretraining run's encoder (the teacher, or the student it probed) as the bundled
``biomjepa-mini`` checkpoint (bf16 storage).

    python scripts/export_bundled.py RUN_DIR [--version 0.3] [--step N] [--pooling centred_wmean_q90] \\
        [--feature-cells 2048] [--out DIR]

Writes ``src/biomjepa/_models/biomjepa-mini-v<version>/`` (or ``--out``: ``config.json``,
``model.safetensors`` and the ``SHA256SUMS`` manifest) and prints the registry entry to paste into
``biomjepa/_pretrained.py``, keyed ``biomjepa-mini-v<version>``: path, version, ``checkpoint_sha256``
(the sha256 of the manifest, which pins every file; :func:`biomjepa.model.checkpoint_sha256`) and
``sha256`` (of the weights).

``--feature-cells N`` records fixed feature statistics (:mod:`biomjepa.nn.readout`): the per-feature
mean and standard deviation of the exported readout over ``N`` cells drawn (seeded) from the run's
own prepared training corpus, so the checkpoint returns standardized embeddings whose scale never
depends on the user's cells. With ``0`` (the default) none are recorded and the checkpoint returns the raw
readout; the script then prints a warning. The entry becomes the default (and the alias ``biomjepa-mini``)
only through ``DEFAULT_RELEASE`` in ``_pretrained.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from biomjepa.model import checkpoint_sha256
from biomjepa.train import export


def corpus_sample(state: dict, run: Path, n: int, seed: int = 0):
    """``n`` cells (seeded, spread over all shards) of the run's prepared corpus, as TokenizedCells."""
    from biomjepa.data.shards import Corpus
    from biomjepa.data.tokenize import concat_cells

    cfg = state["config"]
    cache = Path(cfg["corpus"]) if isinstance(cfg["corpus"], str) and (Path(cfg["corpus"]) / "manifest.json").is_file() \
        else Path(cfg["cache_dir"]) if cfg.get("cache_dir") else run / "corpus"
    corpus = Corpus(cache)
    rng = np.random.default_rng(seed)
    total = corpus.n_cells
    parts = []
    for s in range(len(corpus)):
        size = len(corpus.lengths[s])
        take = min(size, max(1, round(n * size / total)))
        parts.append(corpus.cells(s, np.sort(rng.choice(size, take, replace=False))))
    return concat_cells(parts)


def probed_encoder(state: dict) -> str:
    """The encoder a run scored at its checkpoints (``probe.encoder``: the student for an anchored teacher)."""
    return state["config"].get("probe_encoder") or "teacher"


def readouts_from_corpus(state: dict, run: Path, poolings, n: int, which: str = "teacher") -> dict[str, dict]:
    """``{pooling: readout entry}``: fixed feature statistics of the ``which`` encoder's readouts ``poolings`` over
    the same ``n`` corpus cells, from one embedding pass (it yields every readout at once)."""
    from biomjepa.bench.probe import ProbeSet, probe_embeddings
    from biomjepa.nn.config import ModelConfig
    from biomjepa.nn.encoder import Encoder
    from biomjepa.nn.readout import feature_stats, readout_entry
    from biomjepa.train.checkpoint import encoder_weights

    enc = Encoder(ModelConfig.from_dict(state["model_config"]))
    enc.load_state_dict(encoder_weights(state, which))
    cells = corpus_sample(state, run, n)
    Z = probe_embeddings(enc, ProbeSet(cells, np.zeros(len(cells)), np.zeros(len(cells)), None))
    source = f"training corpus sample (seed 0) of {run.name}"
    return {k: readout_entry(*feature_stats(Z[k]), n_cells=len(cells), source=source) for k in poolings}


def readout_from_corpus(state: dict, run: Path, pooling: str, n: int, which: str = "teacher") -> dict:
    """Fixed feature statistics of the ``which`` encoder's ``pooling`` readout over ``n`` corpus cells."""
    return readouts_from_corpus(state, run, [pooling], n, which)[pooling]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--version", default="0.3")
    p.add_argument("--step", type=int, default=None, help="training step to export (default: latest)")
    p.add_argument("--pooling", default=None, help="readout to record (default: the run's, max_top5)")
    p.add_argument("--feature-cells", type=int, default=0,
                   help="corpus cells for fixed feature statistics (0: none, the raw readout, with a warning; "
                        "a bundled checkpoint needs e.g. 4096)")
    p.add_argument("--which", choices=["teacher", "student"], default=None,
                   help="encoder to export (default: the one the run probed, probe.encoder)")
    p.add_argument("--out", default=None, help="output directory (default: src/biomjepa/_models/biomjepa-mini-v<version>)")
    args = p.parse_args()
    from biomjepa.train.checkpoint import latest_state, load_state

    run = Path(args.run_dir)
    source = latest_state(run) if args.step is None else run / "checkpoints" / f"step_{args.step:08d}.pt"
    state = load_state(source)
    pooling = args.pooling or state["model_config"].get("pooling", "max_top5")
    which = args.which or probed_encoder(state)
    readout = readout_from_corpus(state, run, pooling, args.feature_cells, which) if args.feature_cells > 0 else None
    out = Path(args.out) if args.out else Path("src/biomjepa/_models") / f"biomjepa-mini-v{args.version}"
    export(state, out, which=which, dtype=torch.bfloat16, pooling=args.pooling, readout=readout)
    meta = json.loads((out / "config.json").read_text())
    size = (out / "model.safetensors").stat().st_size / 2**20
    stats = f"{readout['n_cells']} corpus cells" if readout else "none"
    print(f"wrote {out} ({size:.1f} MiB), step {meta['provenance'].get('step')}, pooling {pooling}, "
          f"feature statistics: {stats}")
    if readout is None:
        print("WARNING: --feature-cells 0: no fixed feature statistics, so this checkpoint returns the RAW readout "
              "(not standardized); a bundled checkpoint needs e.g. --feature-cells 4096")
    name = f"biomjepa-mini-v{args.version}"
    print(f"registry entry for src/biomjepa/_pretrained.py (REGISTRY); it becomes the default, and the alias "
          f"'biomjepa-mini', only when DEFAULT_RELEASE = {name!r} there:")
    print(json.dumps({name: {"path": f"_models/{out.name}", "version": args.version,
                             "checkpoint_sha256": checkpoint_sha256(out),
                             "sha256": meta["weights_sha256"]}}, indent=2))


if __name__ == "__main__":
    main()
