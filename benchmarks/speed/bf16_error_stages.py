"""Where bf16 moves the embedding: the bf16 − float32 difference stage by stage (issue 45, item 1).

The same batches of cells go through the bundled model twice, in float32 and under the package's bf16 autocast
(:func:`biomjepa._device.autocast`, as ``bj.settings.precision = "bf16"`` runs it), and every stage is compared:

* ``embedding``: the input states (gene identity + expression value), the first block's input;
* per block ``i``: ``block{i}.ln1`` (the normalised input of the attention), ``block{i}.attn`` (the linear
  attention's output, its running key-value state included), ``block{i}.out`` (the residual stream after the
  block, attention and FFN added);
* ``pool.max`` and ``pool.top5`` (the two halves of the ``max_top5`` readout: per-feature max over genes, mean of
  the 5 largest), ``pool`` (both), and ``output`` (the readout mapped by the checkpoint's fixed feature
  statistics: what ``tl.embed`` returns).

For token states the difference is measured over gene tokens: ``rel_rms`` = ‖bf16 − fp32‖ / ‖fp32‖ and the
per-token cosine (min, mean). For cell vectors: ``rel_rms``, per-cell cosine (min, mean) and ``rel_spread`` =
RMS of the difference over the RMS of the cell-to-cell spread (the s.d. across cells per feature): what a
standardizing map turns the error into. The ``floor`` rows are float32 against float32 at batch size 7 (other
padded shapes, other kernel blocking): the jitter below which no precision change can be seen.

The model's matrix products run in bf16 where the CPU multiplies bf16 natively (AVX512-BF16, AMX) and are emulated
elsewhere (converted to float32 inside the kernel; the rounding of inputs and outputs to bf16, which is what moves
the states, is the same): each row records the CPU, its flags and torch's capability.

``--variants`` compares mixed-precision candidates (issue 45, item 2): each variant is a comma-separated list of
the encoder's submodules (``value_embedding``, ``blocks.3.ffn``, ``blocks.3``, ...) that run in float32 inside the
bf16 autocast (their inputs cast to float32); ``""`` is plain bf16. The float32 reference is the same for all.

    python benchmarks/speed/bf16_error_stages.py [--sets validation demo] [--cells 256] [--out bf16_error_stages.csv]
    python benchmarks/speed/bf16_error_stages.py --variants "" blocks.3.ffn value_embedding,blocks.3.ffn
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np
import torch

from benchmarks._common import write_csv


class StageRecorder:
    """Forward hooks that keep the float32 copy of every stage's output of one forward pass."""

    def __init__(self, encoder) -> None:
        self.out: dict[str, torch.Tensor] = {}
        keep = self._keep
        self.handles = [encoder.blocks[0].register_forward_pre_hook(lambda m, a: keep("embedding", a[0]))]
        for i, block in enumerate(encoder.blocks):
            self.handles += [
                block.ln1.register_forward_hook(lambda m, a, o, i=i: keep(f"block{i}.ln1", o)),
                block.attn.register_forward_hook(lambda m, a, o, i=i: keep(f"block{i}.attn", o)),
                block.register_forward_hook(lambda m, a, o, i=i: keep(f"block{i}.out", o)),
            ]

    def _keep(self, name: str, t: torch.Tensor) -> None:
        self.out[name] = t.detach().float().clone()

    def close(self) -> None:
        for h in self.handles:
            h.remove()


class Float32Islands:
    """Run the named submodules of ``encoder`` in float32 under an enclosing bf16 autocast (undone by ``close``)."""

    def __init__(self, encoder, names: list[str]) -> None:
        self.saved = []
        for name in names:
            mod = encoder.get_submodule(name)
            self.saved.append((mod, mod.forward))
            mod.forward = self._float32(mod.forward)

    @staticmethod
    def _float32(forward):
        def run(*args, **kwargs):
            args = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
            with torch.autocast("cpu", enabled=False):
                return forward(*args, **kwargs)
        return run

    def close(self) -> None:
        for mod, forward in self.saved:
            mod.forward = forward


def forward_stages(model, batch, precision: str) -> dict[str, torch.Tensor]:
    """Every stage of one batch in ``precision``: token states ``[B, T, D]`` and cell vectors ``[B, ·]``."""
    from biomjepa._device import autocast
    from biomjepa.nn.pooling import pool

    rec = StageRecorder(model.encoder)
    try:
        with torch.inference_mode(), autocast(torch.device("cpu"), precision):
            hidden = model.hidden(batch)
            pooled = pool(hidden, batch.gene_mask, batch.values, model.config.pooling).float()
    finally:
        rec.close()
    # the model's own map of its pooled output (BiomJEPA.forward), without a second pass through the encoder
    output = pooled if model.feature_mean is None else (pooled - model.feature_mean) / model.feature_scale
    if model.feature_whiten is not None:
        output = (output.double() @ model.feature_whiten.double()).float()
    d = pooled.shape[1] // 2
    return {**rec.out, "pool.max": pooled[:, :d], "pool.top5": pooled[:, d:], "pool": pooled, "output": output}


def token_diff(ref: torch.Tensor, got: torch.Tensor, gene_mask: torch.Tensor) -> dict:
    """``rel_rms`` and per-token cosine over the gene tokens of ``[B, T, D]`` states."""
    r, g = ref[gene_mask].double(), got[gene_mask].double()
    cos = torch.nn.functional.cosine_similarity(r, g, dim=1)
    return {"rel_rms": float((g - r).norm() / r.norm()), "cosine_min": float(cos.min()),
            "cosine_mean": float(cos.mean()), "n": int(r.shape[0])}


def cell_diff(ref: np.ndarray, got: np.ndarray) -> dict:
    """``rel_rms``, per-cell cosine and the error relative to the cell-to-cell spread of ``[n, d]`` vectors."""
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    err = got - ref
    cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    spread = np.sqrt(np.mean(ref.std(0) ** 2))
    return {"rel_rms": float(np.linalg.norm(err) / np.linalg.norm(ref)), "cosine_min": float(cos.min()),
            "cosine_mean": float(cos.mean()), "rel_spread": float(np.sqrt(np.mean(err**2)) / spread), "n": len(ref)}


def batches(cells, vocab_size: int, batch_size: int):
    """The inference loop's length-sorted batches: ``(rows, Batch)``."""
    from biomjepa.data.collate import collate, sorted_batches

    for rows in sorted_batches(cells.lengths, batch_size):
        yield rows, collate(cells.subset(rows), vocab_size)


def tokenized(adata, n_cells: int, seed: int = 0):
    """``n_cells`` cells of ``adata`` (seeded sample, input order kept) as ``TokenizedCells``."""
    from biomjepa.data.stream import iter_tokenized
    from biomjepa.data.tokenize import concat_cells

    rows = np.sort(np.random.default_rng(seed).choice(adata.n_obs, min(n_cells, adata.n_obs), replace=False))
    sub = adata[rows].copy()
    return concat_cells([c for _, c in iter_tokenized(sub)])


def measure(name: str, adata, n_cells: int, batch_size: int, variants: list[str],
            checkpoint: str | None = None) -> list[dict]:
    """Stage rows of one cell set: each bf16 variant against float32, and the float32 batch-size floor."""
    from biomjepa._pretrained import load_model
    from biomjepa.nn.inference import embed_cells

    model = load_model(checkpoint).eval()
    cells = tokenized(adata, n_cells)
    refs = [(batch, forward_stages(model, batch, "fp32")) for _, batch in batches(cells, model.config.vocab_size, batch_size)]
    out = []
    for variant in variants:
        islands = Float32Islands(model.encoder, [n for n in variant.split(",") if n])
        try:
            got = [forward_stages(model, batch, "bf16") for batch, _ in refs]
        finally:
            islands.close()
        out += [{"set": name, "variant": variant or "bf16", **r} for r in compare_stages(refs, got)]
    at64 = embed_cells(model, cells, batch_size=batch_size, precision="fp32")
    at7 = embed_cells(model, cells, batch_size=7, precision="fp32")
    out.append({"set": name, "variant": "fp32", "stage": f"floor: output, fp32 batch 7 vs {batch_size}", "kind": "cells",
                **cell_diff(at64, at7)})
    return out


def compare_stages(refs: list, got: list[dict]) -> list[dict]:
    """One row per stage: token stages pooled over batches, cell stages over all cells."""
    tokens: dict[str, list[dict]] = {}
    cells_ref: dict[str, list] = {}
    cells_got: dict[str, list] = {}
    for (batch, ref), bf16 in zip(refs, got):
        for stage, r in ref.items():
            if r.dim() == 3:
                tokens.setdefault(stage, []).append(token_diff(r, bf16[stage], batch.gene_mask))
            else:
                cells_ref.setdefault(stage, []).append(r.numpy())
                cells_got.setdefault(stage, []).append(bf16[stage].numpy())
    rows = [{"stage": s, "kind": "tokens", **_pooled(parts)} for s, parts in tokens.items()]
    return rows + [{"stage": s, "kind": "cells", **cell_diff(np.concatenate(cells_ref[s]), np.concatenate(cells_got[s]))}
                   for s in cells_ref]


def _pooled(parts: list[dict]) -> dict:
    """Token rows of several batches as one: token-weighted RMS and mean, the smallest cosine."""
    n = np.array([p["n"] for p in parts], float)
    return {"rel_rms": float(np.sqrt(np.average([p["rel_rms"] ** 2 for p in parts], weights=n))),
            "cosine_min": min(p["cosine_min"] for p in parts),
            "cosine_mean": float(np.average([p["cosine_mean"] for p in parts], weights=n)), "n": int(n.sum())}


def main() -> None:
    from benchmarks._common import machine
    from benchmarks.speed.precision_accuracy import load_set

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", nargs="+", default=["validation", "demo"], choices=["validation", "demo"])
    p.add_argument("--cells", type=int, default=256, help="cells per set (seeded sample)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--variants", nargs="+", default=[""],
                   help='float32 islands per variant: comma-separated encoder submodules ("" = plain bf16)')
    p.add_argument("--checkpoint", default=None, help="registry name or directory (default: the bundled model)")
    p.add_argument("--out", default="bf16_error_stages.csv")
    args = p.parse_args()
    info, rows = machine(), []
    for name in args.sets:
        loaded = load_set(name)
        if loaded is None:
            print(f"{name}: cells not found (../shared/data), skipped")
            continue
        rows += [r | info for r in measure(name, loaded[0], args.cells, args.batch_size, args.variants,
                                           args.checkpoint)]
    import pandas as pd

    t = pd.DataFrame(rows)
    print(t[["set", "variant", "stage", "kind", "rel_rms", "cosine_min", "cosine_mean", "rel_spread"]].round(5)
          .to_string(index=False))
    print(write_csv(rows, args.out))


if __name__ == "__main__":
    main()
