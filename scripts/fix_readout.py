"""Give a checkpoint fixed feature statistics measured on its own training corpus (issue 29).

    python scripts/fix_readout.py CHECKPOINT --name biomjepa-mini-v0.2.1 [--cells 4096] [--kind standardize]

Reads the corpus files the checkpoint's provenance config names (paths relative to the repository root,
``../shared/data`` beside it; each file's ``exclude_obs`` cells stay out; ``species``, ``gene_key``, ``id_type``
and ``layer`` are honoured, and ``counts: reads`` files are embedded as reads, ``input="reads"``), draws
``--cells`` cells spread over the files in proportion to their size (seed 0), embeds them with the
checkpoint's raw readout and records the statistics in a copy of the checkpoint (same weights) under
``src/biomjepa/_models/<name>/``: ``standardize`` = per-feature mean and s.d.; ``whiten`` = the same plus a
ZCA whitening matrix of the standardized corpus embeddings, shrunk towards the identity. Prints the registry
entry. The statistics never come from the cells a user embeds, so a cell's embedding does not depend on the
other cells it is embedded with.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SHRINK = 0.1  # whitening: eigenvalues floored towards their mean, λ + SHRINK·mean(λ)


def corpus_files(checkpoint) -> list[dict]:
    """The corpus entries of the checkpoint's provenance config (dicts with ``path``, optional keys)."""
    from biomjepa._pretrained import resolve_checkpoint

    path, _ = resolve_checkpoint(checkpoint)
    cfg = json.loads((path / "config.json").read_text())["provenance"]["config"]
    return [c if isinstance(c, dict) else {"path": c} for c in cfg["corpus"]]


def entry_input(entry: dict) -> str:
    """``bj.tl.embed``'s ``input`` for a corpus entry: ``"reads"`` for ``counts: reads`` (plate-based read counts,
    embedded as molecule equivalents as the corpus cache converted them), else ``"counts"``."""
    return "reads" if entry.get("counts") == "reads" else "counts"


def excluded(adata, exclude) -> np.ndarray:
    """Boolean ``[n_obs]`` of an entry's ``exclude_obs``: a bool obs column, or a file of obs names (repo-relative)."""
    if not exclude:
        return np.zeros(adata.n_obs, bool)
    if exclude in adata.obs:
        return adata.obs[exclude].to_numpy().astype(bool)
    return adata.obs_names.isin((REPO / exclude).read_text().split())


def corpus_embeddings(checkpoint, n_cells: int, seed: int = 0) -> np.ndarray:
    """Raw readout of ``n_cells`` corpus cells (seeded, spread over the files in proportion to their size)."""
    import anndata as ad

    import biomjepa as bj

    entries = corpus_files(checkpoint)
    sizes = []
    for e in entries:
        a = ad.read_h5ad(REPO / e["path"], backed="r")
        sizes.append(np.flatnonzero(~excluded(a, e.get("exclude_obs"))))
        a.file.close()
    total = sum(len(s) for s in sizes)
    rng = np.random.default_rng(seed)
    parts = []
    for e, rows in zip(entries, sizes):
        take = min(len(rows), max(1, round(n_cells * len(rows) / total)))
        pick = np.sort(rng.choice(rows, take, replace=False))
        a = ad.read_h5ad(REPO / e["path"])[pick].copy()
        if e.get("layer"):
            a.X = a.layers[e["layer"]]
        bj.pp.map_vocab(a, species=e.get("species", "human"), gene_key=e.get("gene_key"),
                        id_type=e.get("id_type") or "auto")
        bj.tl.embed(a, checkpoint=checkpoint, input=entry_input(e))
        parts.append(a.obsm["X_biomjepa"])
    return np.concatenate(parts)


def whitening(Zs: np.ndarray, shrink: float = SHRINK) -> np.ndarray:
    """ZCA matrix ``W [d, d]`` of standardized embeddings ``Zs``: ``Zs @ W`` has covariance ≈ identity
    (eigenvalues shrunk: ``λ + shrink·mean(λ)``), axes kept close to the original features."""
    C = np.cov(Zs, rowvar=False)
    lam, V = np.linalg.eigh(C)
    lam = np.clip(lam, 0, None) + shrink * lam.clip(min=0).mean()
    return (V / np.sqrt(lam)) @ V.T


def readout_maps(Z: np.ndarray) -> dict:
    """Candidate fixed maps measured on corpus embeddings ``Z``: name → function of new embeddings."""
    from biomjepa.nn.readout import feature_stats

    mean, scale = feature_stats(Z)
    W = whitening((Z - mean) / scale)
    W01 = whitening((Z - mean) / scale, 0.01)
    return {"standardization": lambda X: (X - mean) / scale,
            f"ZCA whitening (shrink {SHRINK})": lambda X: (X - mean) / scale @ W,
            "ZCA whitening (shrink 0.01)": lambda X: (X - mean) / scale @ W01}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--name", required=True)
    p.add_argument("--cells", type=int, default=4096)
    p.add_argument("--kind", choices=["standardize", "whiten"], default="standardize")
    args = p.parse_args()
    from biomjepa._pretrained import resolve_checkpoint
    from biomjepa.model import checkpoint_sha256, load_checkpoint, save_checkpoint
    from biomjepa.nn.readout import feature_stats, readout_entry

    src, _ = resolve_checkpoint(args.checkpoint)
    Z = corpus_embeddings(args.checkpoint, args.cells)
    mean, scale = feature_stats(Z)
    whiten = whitening((Z - mean) / scale) if args.kind == "whiten" else None
    entry = readout_entry(mean, scale, whiten=whiten, n_cells=len(Z), source=(
        f"{len(Z)} cells of the checkpoint's training corpus (the files its provenance config names, seed 0), "
        f"scripts/fix_readout.py --kind {args.kind}" + (f" (ZCA, shrink {SHRINK})" if whiten is not None else "")))
    model = load_checkpoint(src)
    meta = json.loads((src / "config.json").read_text())
    out = REPO / "src" / "biomjepa" / "_models" / args.name
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(model.encoder, tmp, provenance={**meta.get("provenance", {}), "readout_of": src.name},
                    readout=entry, dtype=torch.bfloat16)  # as bundled: bf16 → float32 → bf16 is exact
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    meta = json.loads((out / "config.json").read_text())
    print(json.dumps({args.name: {"path": f"_models/{out.name}", "checkpoint_sha256": checkpoint_sha256(out),
                                  "sha256": meta["weights_sha256"]}}, indent=2))


if __name__ == "__main__":
    main()
