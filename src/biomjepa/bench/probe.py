"""A fixed held-out probe set, scored at every checkpoint: is the cell embedding collapsing or tracking depth?

A training config's ``probe`` section names an h5ad file (``path``, raw counts) and optionally which of
its cells to use (``obs``: a text file of obs names, e.g. the held-out validation cells) and a label
column (``label_key``). :func:`probe_hook` is the ``on_checkpoint`` hook of
:func:`biomjepa.train.pretrain` (``biomjepa train`` builds it from the config): at every checkpoint the probed encoder (the EMA teacher, or
the student with ``probe.encoder: student``) embeds the probe cells with every readout
of :data:`biomjepa.nn.pooling.POOLINGS` and the loop appends, per readout, the effective rank,
the paper's depth association against detected genes (``depth_nnz``: mean of ``|r|`` of the
leading axis and of the embedding norm with the number of detected genes) and, with labels,
few-shot k = 5 macro-F1 (``bj.bench.annotation``'s protocol) to ``probe.csv`` in the run directory, next to
the run's own target diagnostics (``log.csv``: target RMS, energy and rank, the predictor's R², the
Procrustes cosine, prediction and target s.d.) averaged over the 50 steps before the checkpoint.
:func:`probe_scores` is also what ``benchmarks/evaluation/select_checkpoint.py`` uses, so selection sees the
same numbers the run logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

PROBE_FIELDS = ["step", "pooling", "n_cells", "effective_rank", "depth_nnz", "depth_mean", "macro_f1_k5"]
#: the training log's target diagnostics (``biomjepa.train.health``), averaged over the steps before a checkpoint
LOG_DIAGNOSTICS = ["tgt_rms_rel", "tgt_energy", "r2", "procrustes_cos", "pred_sd", "tgt_sd", "tgt_rank"]
LOG_WINDOW = 50


@dataclass
class ProbeSet:
    """Tokenized probe cells with their depth covariates and (optional) labels."""

    cells: object  # TokenizedCells
    total_counts: np.ndarray
    n_detected: np.ndarray
    labels: np.ndarray | None


def load_probe(path: str, *, obs: str | None = None, label_key: str | None = None, max_cells: int = 512,
               seed: int = 0) -> ProbeSet:
    """Read, vocabulary-map and tokenize up to ``max_cells`` probe cells (a seeded subsample)."""
    import anndata as ad

    from ..data.stream import gather
    from ..pp import map_vocab

    adata = ad.read_h5ad(path)
    if obs is not None:
        names = Path(obs).read_text().split()
        adata = adata[adata.obs_names.isin(names)]
    if label_key is not None and label_key not in adata.obs:
        raise ValueError(f"probe_label_key={label_key!r} is not a column of {path}'s obs.")
    if adata.n_obs > max_cells:
        rows = np.sort(np.random.default_rng(seed).choice(adata.n_obs, max_cells, replace=False))
        adata = adata[rows]
    adata = adata.copy()
    map_vocab(adata)
    cells = gather(adata, np.arange(adata.n_obs))  # ≤ max_cells cells, read through the one reader
    X = adata.X
    total = np.asarray(X.sum(1)).ravel().astype(float)
    nnz = np.asarray((X > 0).sum(1)).ravel().astype(float)
    labels = adata.obs[label_key].astype(str).to_numpy() if label_key else None
    return ProbeSet(cells, total, nnz, labels)


def probe_embeddings(encoder, probe: ProbeSet, *, batch_size: int = 32) -> dict[str, np.ndarray]:
    """``{pooling: [n, 2D]}`` embeddings of the probe cells under every readout (one forward pass).

    Through the one inference loop (:func:`biomjepa.nn.inference.map_batches`), so in the precision
    ``tl.embed`` uses (``bj.settings.precision``, float32 by default) on the encoder's device.
    """
    from .._settings import settings
    from ..nn.inference import map_batches
    from ..nn.pooling import POOLINGS, pool, pooled_width

    def readout(b):
        h = encoder(b.gene_ids, b.values, b.mask).float()
        return tuple(pool(h, b.gene_mask, b.values, k) for k in POOLINGS)

    out = {k: np.empty((len(probe.cells), pooled_width(k) * encoder.config.d_model), np.float32) for k in POOLINGS}
    was_training = encoder.training
    encoder.eval()
    map_batches(probe.cells, readout, tuple(out.values()), vocab_size=encoder.config.vocab_size,
                batch_size=batch_size, device=next(encoder.parameters()).device, max_tokens=settings.max_batch_tokens)
    encoder.train(was_training)
    return out


def few_shot_f1(Z: np.ndarray, labels: np.ndarray, *, k: int = 5, seeds=(42, 43, 44, 45, 46)) -> float:
    """Mean macro-F1 of ``bj.bench.annotation``'s k-shot linear-SVM protocol over ``seeds``."""
    from .annotation import support_split, svm_scores

    scores = []
    for s in seeds:
        support, held, _ = support_split(labels, k, s)
        scores.append(svm_scores(Z, labels, support, held)["macro_f1"])
    return float(np.mean(scores))


def probe_scores(encoder, probe: ProbeSet, step: int) -> list[dict]:
    """One row per readout: effective rank, depth association and (with labels) k = 5 macro-F1."""
    from .geometry import depth_association, effective_rank

    rows = []
    for kind, Z in probe_embeddings(encoder, probe).items():
        d = depth_association(Z, probe.total_counts, probe.n_detected)
        rows.append({
            "step": step, "pooling": kind, "n_cells": len(Z), "effective_rank": effective_rank(Z),
            "depth_nnz": (d["abs_r_axis_nnz"] + d["abs_r_norm_nnz"]) / 2, "depth_mean": d["depth_mean"],
            "macro_f1_k5": few_shot_f1(Z, probe.labels) if probe.labels is not None else float("nan"),
        })
    return rows


def log_diagnostics(log: Path, step: int, window: int = LOG_WINDOW) -> dict[str, float]:
    """Means of the training log's target diagnostics over the ``window`` steps before ``step`` (NaN where
    the log has no such rows, e.g. at step 0 or for the decoder control)."""
    import csv

    out = {k: float("nan") for k in LOG_DIAGNOSTICS}
    if not log.is_file():
        return out
    with open(log, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("step", "").isdigit() and step - window <= int(r["step"]) < step]
    for k in LOG_DIAGNOSTICS:
        vals = [float(r[k]) for r in rows if r.get(k) not in (None, "")]
        vals = [v for v in vals if np.isfinite(v)]
        if vals:
            out[k] = float(np.mean(vals))
    return out


def append_rows(path: Path, rows: list[dict]) -> None:
    """Append ``rows`` to the CSV ``path`` (header written once; a file written before the diagnostics keeps
    its columns)."""
    import csv

    new = not path.exists()
    fields = PROBE_FIELDS + LOG_DIAGNOSTICS
    if not new:
        with open(path, newline="") as f:
            fields = next(csv.reader(f), fields) or fields
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerows(rows)


class probe_hook:  # a class used like a function: ``on_checkpoint=probe_hook(cfg)``
    """The ``on_checkpoint`` hook that scores the encoder the loop hands it (the teacher, or the student with
    ``probe.encoder: student``) on held-out cells and appends to ``probe.csv``.

    ``cfg`` is a :class:`~biomjepa.train.TrainConfig` (its ``probe`` section and ``run.seed``, which
    draws the cells when there are more than ``probe.cells``); the cells are read on first use
    (rank 0 only). ``bj.train.pretrain(cfg, on_checkpoint=bj.bench.probe_hook(cfg))``.
    """

    def __init__(self, cfg) -> None:
        if cfg.probe.path is None:
            raise ValueError("probe_hook needs a config whose probe.path names an h5ad file of held-out cells.")
        self.cfg, self.seed, self.probe = cfg.probe, cfg.run.seed, None

    def __call__(self, step: int, encoder, run_dir: Path) -> None:
        import logging

        if self.probe is None:
            c = self.cfg
            self.probe = load_probe(c.path, obs=c.obs, label_key=c.label_key, max_cells=c.cells, seed=self.seed)
        rows = probe_scores(encoder, self.probe, step)
        diag = log_diagnostics(Path(run_dir) / "log.csv", step)
        rows = [{**r, **diag} for r in rows]
        append_rows(Path(run_dir) / "probe.csv", rows)
        for r in rows:
            logging.getLogger("biomjepa.train.loop").info(
                "probe step %d %s: effective rank %.1f, depth_nnz %.2f, F1(k=5) %.3f", step, r["pooling"],
                r["effective_rank"], r["depth_nnz"], r["macro_f1_k5"])
