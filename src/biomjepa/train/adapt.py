"""Continue pretraining a checkpoint on one corpus shard and export it: the training half of ``bj.tl.adapt``.

``tl`` uses ``train`` through one function each (STYLE): :func:`adapt_encoder` takes a prepared shard
file (:func:`biomjepa.data.shard_file.write_shard`) and plain numbers, runs :func:`~biomjepa.train.pretrain`
with ``model.init_from`` on it in a scratch directory, and writes the adapted encoder as an ordinary
checkpoint directory (``config.json`` + ``model.safetensors`` + ``SHA256SUMS``). It returns a plain dict.

The recipe (:data:`RECIPE`) is the bundled ``mini`` preset (the v0.3 recipe: depth-thinned 64-gene student
views, the view contrast) with a 256-gene teacher view on 64-cell batches, started from the checkpoint's encoder
with gene embeddings re-initialised from the cells, exporting the EMA teacher read out with ``max_top5`` (the base's
readout), with the choices measured in ``5ee3373:benchmarks/evaluation/adapt_curve.py`` and
``benchmarks/evaluation/adapt_vs_scvi.py --recipe`` on validation tissues only.
The exported readout records fixed per-feature statistics of the adapted cells' embeddings, measured by the
caller's ``readout_of`` on the exported encoder (``bj.tl.adapt`` embeds the cells once, there, and keeps that
embedding), so the checkpoint returns standardized embeddings for these and any later query cells.

Interruptions: SIGINT or SIGTERM during training end the run at the next step; the scratch state is then
discarded and :class:`KeyboardInterrupt` raised (SIGTERM also raises it anywhere else in this function).
The checkpoint is assembled in the scratch directory and renamed into place only when complete, so
``out_dir`` holds a whole checkpoint or nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import warnings
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["adapt_encoder"]

#: Gene graphs built for adapted cells are kept under ``bj.settings.cachedir / GRAPH_CACHE``, by the cells' content
#: and the graph's parameters (the coexpression part depends on both; no checkpoint enters it), the newest
#: :data:`GRAPH_CACHE_KEEP` of them: adapting the same cells again skips the graph (about 9 s of set-up for 300
#: pancreas cells on two cores).
GRAPH_CACHE, GRAPH_CACHE_KEEP = "adapt-graphs", 8

#: The adaptation recipe: what starts from the checkpoint, how fast it learns, which encoder is exported.
#: ``gene_init``: ``checkpoint`` (keep its gene embeddings) or ``pca`` (re-initialise them from the cells);
#: ``gene_init_scale``: the standard deviation of ``pca``'s embeddings (the ``mini`` preset's 0.02).
#: ``teacher_genes``: the teacher's gene budget per cell (the ``mini`` preset's 512; the step's cost grows with it);
#: ``encoder``: the exported encoder, ``student`` (the one the optimizer trains) or ``teacher`` (its EMA);
#: ``pooling``: the exported readout (:data:`biomjepa.nn.pooling.POOLINGS`; ``None``: the base checkpoint's).
#: Chosen on validation tissues only, on the v0.4 base (sorted PBMCs, Darmanis brain as reads; 10 Leiden seeds;
#: benchmarks/results/adapt_curve_validation_v0.4_both.csv), at the then default length (150 steps), by the mean
#: of both tissues: gene embeddings re-initialised from the cells' PCA loadings (``pca``) beat keeping the checkpoint's
#: (F1 0.772 / ARI 0.793 with the teacher's ``max_top5``, against the kept student's 0.771 / 0.748); the readout
#: ``max_top5_mean_wmean`` (both) beats either half (pca teacher: 0.780 / 0.805; ``mean_wmean`` alone 0.775 / 0.770);
#: and the EMA teacher, which with a re-initialised start clusters better than the student (0.780 / 0.805 against
#: 0.782 / 0.786; ahead on ARI at 6 of the 8 read-outs of steps 50-200). A 256-gene teacher view scored as the
#: 512-gene one and makes a step 1.36x cheaper (adapt_curve_validation_v0.4.csv).
#: Re-checked on the v0.5 base on the three validation tissues (sorted PBMCs, Darmanis brain, Tabula Muris mouse
#: immune), three adaptation seeds each (``adapt_vs_scvi.py --recipe``; benchmarks/results/
#: adapt_vs_scvi_three_tissues_*_v0.5.csv), per tissue (PBMC / brain / immune), Leiden ARI at resolution 1: the
#: readout ``max_top5`` (256 features) 0.780 / 0.828 / 0.457 against ``max_top5_mean_wmean``'s 0.781 / 0.828 / 0.414
#: (immune +0.043, three seed s.d.; the others level), few-shot F1 0.660 / 0.898 / 0.942 against 0.672 / 0.900 /
#: 0.944; keeping the base's gene embeddings (``checkpoint``) loses on PBMC and brain with either readout (0.625 /
#: 0.799 / 0.440 with the 512 one, 0.756 / 0.776 / 0.393 with ``max_top5``), so ``pca`` stays. Inside the seeds'
#: spread on every tissue, so not chosen: ``lr`` 1e-3, the student exported, momentum 0.99, ``gene_init_scale`` 0.037.
RECIPE = {"gene_init": "pca", "gene_init_scale": 0.02, "lr": 3e-3, "warmup_steps": 50, "batch_size": 64,
          "encoder": "teacher", "momentum_start": 0.996, "momentum_end": 0.9997, "teacher_genes": 256, "pooling": "max_top5"}


def adapt_encoder(
    shard: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    init_from: str,
    steps: int,
    seed: int = 0,
    time_budget: float | None = None,
    started: float | None = None,
    work_dir: str | os.PathLike,
    readout_of: Callable[[Path], dict],
    recipe: dict | None = None,
    device: str = "auto",
    precision: str = "fp32",
    progress: bool = True,
    placed: Callable[[], object] | None = None,
) -> dict:
    """Adapt ``init_from``'s encoder to the cells of ``shard`` for ``steps`` steps; write it to ``out_dir``.

    Parameters
    ----------
    shard
        A corpus shard ``.npz`` of the cells to learn.
    out_dir
        The checkpoint directory to create (must not exist, or be empty); renamed into place when complete.
    init_from
        The base checkpoint: a registry name, a directory or ``URL#sha256=…``.
    steps
        Optimizer steps (the learning-rate schedule's length).
    seed
        Seed of the run (initialisation of the predictor, batches, blocks, views).
    time_budget
        Stop after the first step that ends past this many seconds since ``started`` (``None``: train all
        ``steps``); the state of that step is exported.
    started
        ``time.perf_counter()`` at which the budget's clock started (default: when this call began; ``bj.tl.adapt``
        passes its own start, so writing the shard counts too).
    work_dir
        Scratch directory on the file system of ``out_dir`` (the caller removes it).
    readout_of
        Called once, after training, with the directory of the adapted encoder exported without feature
        statistics (an ordinary checkpoint, in ``work_dir``); returns the ``readout`` record
        (:func:`biomjepa.nn.readout.readout_entry`) that the final checkpoint records.
    recipe
        Entries replacing those of :data:`RECIPE`.
    device, precision, progress
        The training device (``"auto"``: CUDA when available), its precision (``"fp32"``, ``"bf16"`` or ``"auto"``,
        :func:`biomjepa._device.resolve_precision`; the resolved one is recorded as ``precision``), and whether to
        show a progress bar.
    placed
        Called right after the checkpoint is renamed to ``out_dir``, with stop signals held back from the rename to
        the end of the call (:func:`biomjepa._stops.stops_held`): whatever stops this function, the caller knows
        whether ``out_dir`` holds the checkpoint.

    Returns
    -------
    ``{"path", "checkpoint_sha256", "weights_sha256", "base", "steps", "steps_done", "seconds", "recipe",
    "seed", "n_cells", "time_budget", "precision", "graph", "phases"}``; ``graph``: ``"built"``, or ``"cached"``
    when these cells' gene graph for this seed was kept from an earlier adaptation (:data:`GRAPH_CACHE`); ``phases``: seconds of ``setup`` (corpus cache,
    gene graph and model, up to the first step, whose own time is taken as the mean of the others), ``steps``,
    ``readout`` (``readout_of``) and ``export`` (both exports, manifest and rename).
    """
    from .._device import resolve_device, resolve_precision
    from .._pretrained import load_model
    from .._stops import sigterm_interrupts
    from ..data.adapted_genes import shard_genes
    from ..model import checkpoint_sha256

    t0 = time.perf_counter() if started is None else started
    recipe = {**RECIPE, **(recipe or {})}
    out, work = Path(out_dir), Path(work_dir)
    _check_out(out)
    base = load_model(init_from)
    precision = resolve_precision(precision, resolve_device(device))
    with sigterm_interrupts("adapt stopped by SIGTERM; nothing was written."):
        cfg = _config(shard, work, base.config.to_dict(), init_from, steps, seed, recipe, device, progress, precision)
        graph_dir = _graph_cache(Path(shard), cfg)
        cached = _is_graph(graph_dir)
        if cached:
            cfg = cfg.replace(graph=str(graph_dir))
            os.utime(graph_dir)  # the newest are kept
        clock = _StepClock(time_budget, t0)
        state = _train(cfg, clock)
        if not cached:
            _keep_graph(work, graph_dir)
        seconds = time.perf_counter() - t0
        record = {"base": dict(state["init_from"]), "steps": int(steps), "steps_done": int(state["step"]),
                  "seconds": round(seconds, 2), "recipe": dict(recipe), "seed": int(seed),
                  "n_cells": _n_cells(cfg), "time_budget": time_budget, "precision": precision,
                  "graph": "cached" if cached else "built", "phases": clock.phases()}
        _export(state, work, out, recipe["encoder"], record, readout_of, shard_genes(shard), placed)
    meta = (out / "config.json").read_text()
    import json

    return {"path": str(out), "checkpoint_sha256": checkpoint_sha256(out),
            "weights_sha256": json.loads(meta)["weights_sha256"], **record}


class _StepClock:
    """The loop's ``stop_when``: notes when each step ends and stops after the first one past the time budget."""

    def __init__(self, time_budget: float | None, t0: float) -> None:
        self.budget, self.t0, self.start, self.ends = time_budget, t0, time.perf_counter(), []

    def __call__(self, step: int) -> bool:
        self.ends.append(time.perf_counter())
        if self.budget is None or self.ends[-1] - self.t0 < self.budget:
            return False
        logger.info("adapt: time budget of %.0f s reached after step %d", self.budget, step)
        return True

    def phases(self) -> dict:
        """``{"setup", "steps"}`` seconds; the first step's time is taken as the mean of the later ones."""
        if not self.ends:
            return {"setup": round(time.perf_counter() - self.start, 2), "steps": 0.0}
        per_step = (self.ends[-1] - self.ends[0]) / (len(self.ends) - 1) if len(self.ends) > 1 else 0.0
        setup = max(0.0, self.ends[0] - self.start - per_step)
        return {"setup": round(setup, 2), "steps": round(self.ends[-1] - self.start - setup, 2)}


def _graph_cache(shard: Path, cfg) -> Path:
    """Where the gene graph of ``shard``'s cells under ``cfg``'s graph parameters is kept (a content hash)."""
    import hashlib
    import json

    import numpy as np

    from .._settings import settings
    from .._version import __version__
    from ..data.graph import TOP_K, graph_params
    from ..data.vocab import Vocab

    h = hashlib.sha256()
    with np.load(shard, allow_pickle=False) as cells:
        for key in ("data", "indices", "indptr", "totals"):
            h.update(np.ascontiguousarray(cells[key]).tobytes())
    params = graph_params(top_k=max(TOP_K, cfg.blocks.dmt_k), seed=cfg.run.seed)
    # the package version too: a release that changes the bundled STRING table or the graph's construction must
    # not reuse the graphs an older one built
    h.update(json.dumps(params, sort_keys=True).encode() + Vocab.default().hash.encode() + __version__.encode())
    return settings.cachedir / GRAPH_CACHE / h.hexdigest()[:32]


def _is_graph(path: Path) -> bool:
    from ..data.graph import is_saved_graph

    return is_saved_graph(path)


def _keep_graph(work: Path, graph_dir: Path) -> None:
    """Copy the graph the run built (its corpus cache's ``graph/``) to ``graph_dir``, whole or not at all, and keep
    the newest :data:`GRAPH_CACHE_KEEP` graphs; a cache that cannot be written is skipped (logged)."""
    import shutil
    import tempfile

    from ..data.graph import GRAPH_DIR

    tmp = None
    try:
        graph_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{graph_dir.name}-", dir=graph_dir.parent))
        shutil.copytree(work / "cache" / GRAPH_DIR, tmp, dirs_exist_ok=True)
        os.replace(tmp, graph_dir)  # refused when another adaptation kept the same graph first
        tmp = None
        kept = sorted((p for p in graph_dir.parent.iterdir() if p.is_dir() and not p.name.startswith(".")),
                      key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[GRAPH_CACHE_KEEP:]:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as err:
        logger.info("adapt: the gene graph was not cached in %s (%s)", graph_dir.parent, err)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} already exists and is not an empty directory; adapt never replaces a checkpoint. "
                              "Give a new out_dir, or remove it first.")


def _config(shard, work: Path, arch: dict, init_from: str, steps: int, seed: int, recipe: dict, device: str,
            progress: bool, precision: str):
    """The run's :class:`~biomjepa.train.TrainConfig`: the ``mini`` preset's recipe on the checkpoint's encoder,
    saved once, at its end (a time budget ends it through ``stop_when``, saved too)."""
    from .config import TrainConfig

    return TrainConfig.from_dict({
        "preset": "mini",
        "run": {"out_dir": str(work / "runs"), "run_name": "adapt", "seed": int(seed), "steps": int(steps)},
        "data": {"corpus": [str(shard)], "cache_dir": str(work / "cache"), "batch_size": recipe["batch_size"],
                 "accumulation": 1, "num_workers": 0, "teacher_genes": int(recipe["teacher_genes"])},
        "model": {"preset": "mini", "overrides": arch, "init_from": str(init_from), "gene_init": recipe["gene_init"],
                  "gene_init_scale": recipe["gene_init_scale"]},
        "optim": {"lr": recipe["lr"], "min_lr": min(1e-6, recipe["lr"]),
                  "warmup_steps": min(int(recipe["warmup_steps"]), max(1, steps // 4))},
        "teacher": {"momentum_start": recipe["momentum_start"], "momentum_end": recipe["momentum_end"]},
        "loop": {"device": device, "precision": precision, "checkpoint_every": steps, "keep_checkpoints": 1,
                 "tensorboard": False, "progress": progress},
        "probe": {"encoder": recipe["encoder"]},
    })


def _train(cfg, clock: _StepClock) -> dict:
    """Run the loop; the latest state (a time budget ends it after a step, saved; a stop signal discards it)."""
    from .checkpoint import load_latest_state
    from .loop import pretrain, run_dir_of
    from .signals import last_stop_signal

    with _health_logged(), _string_notice_in_adapt_words():
        pretrain(cfg, stop_when=clock, resumable=False, report_stop=False)  # adapt says how it stopped
    signum = last_stop_signal()
    if signum is not None:
        raise KeyboardInterrupt(f"adapt stopped by {signal.Signals(signum).name}; nothing was written.")
    return load_latest_state(run_dir_of(cfg))[1]


def _n_cells(cfg) -> int:
    from ..data.shards import Corpus

    corpus = Corpus(cfg.data.cache_dir)
    try:
        return corpus.n_cells
    finally:
        corpus.close()


def _export(state: dict, work: Path, out: Path, which: str, record: dict, readout_of: Callable[[Path], dict],
            genes: dict, placed: Callable[[], object] | None) -> None:
    """Export ``which`` encoder of ``state`` without feature statistics, let ``readout_of`` measure them on it,
    export it again with them (``record`` in its provenance, and ``genes``, the vocabulary genes the cells detected:
    :mod:`biomjepa.data.adapted_genes`) and rename that checkpoint to ``out`` (then ``placed()``, in one step that no
    stop signal cuts)."""
    from .._stops import stops_held
    from ..data.adapted_genes import KEY
    from .checkpoint import export

    provenance = {"source": "biomjepa.tl.adapt", "adapt": record, KEY: genes}
    raw, ckpt = work / "unstandardized", work / "checkpoint"
    t = time.perf_counter()
    export(state, raw, which=which, pooling=record["recipe"]["pooling"], provenance=provenance)
    exported = time.perf_counter() - t
    t = time.perf_counter()
    readout = readout_of(raw)
    record["phases"]["readout"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    export(state, ckpt, which=which, pooling=record["recipe"]["pooling"], readout=readout, provenance=provenance)
    with stops_held():
        os.replace(ckpt, out)
        if placed is not None:
            placed()
    record["phases"]["export"] = round(exported + time.perf_counter() - t, 2)


@contextlib.contextmanager
def _string_notice_in_adapt_words():
    """The bundled STRING table's notice (:mod:`biomjepa.data.graph.stringdb`), written for ``biomjepa graph`` and
    pretraining, whose official-files advice adapt has no option for: an INFO line saying what adapt's graph is."""
    from ..data.graph.stringdb import BUNDLED_STRING
    from ..data.graph.stringdb import logger as string_logger

    def in_adapt_words(record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or BUNDLED_STRING not in record.getMessage():
            return True
        logger.info("adapt: the gene graph joins the bundled STRING v12 table (%s, without its text-mining channel) "
                    "with these cells' coexpression, as in the validated recipe", BUNDLED_STRING)
        return False

    string_logger.addFilter(in_adapt_words)
    try:
        yield
    finally:
        string_logger.removeFilter(in_adapt_words)


@contextlib.contextmanager
def _health_logged():
    """The loop's learning-health warnings (:mod:`~biomjepa.train.health`) as INFO log lines: written for
    pretraining from scratch, they fire on adaptation runs that learn (a fresh predictor's R² on targets that
    move starts below 0 while the embedding's F1 rises; benchmarks/results/adapt_curve_validation.csv)."""
    from .health import TrainingHealthWarning
    from .health import logger as health_logger

    def quiet(record: logging.LogRecord) -> bool:  # the same text, also logged at WARNING by the health check
        return record.levelno < logging.WARNING

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TrainingHealthWarning)
        health_logger.addFilter(quiet)
        try:
            yield
        finally:
            health_logger.removeFilter(quiet)
            seen = set()  # each distinct warning once: a progress bar can warn at every refresh
            for w in caught:
                key = (w.category, str(w.message), w.filename, w.lineno)
                if key in seen:
                    continue
                seen.add(key)
                if issubclass(w.category, TrainingHealthWarning):
                    logger.info("adapt: %s (a check written for pretraining from scratch: a fresh predictor starts "
                                "below R² 0 while the embedding improves; judge an adaptation by its embedding, "
                                "e.g. clusters or labels you trust)", w.message)
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
