"""The pretraining loop (Algorithm S1): teacher targets → student predictions → loss → AdamW → EMA.

Per optimizer step ``s``: ``data.accumulation`` micro-batches (block sampling seeded by
``block_rng(seed, s, rank, micro)``), gradients averaged over micro-batches and ranks (DDP),
clipped to ``optim.grad_clip``, AdamW with ``lr_at(s)``, then the teacher EMA with ``momentum_at(s)``
and the running target statistics (bias-corrected EMA centre, optional moments and depth fit;
:mod:`~biomjepa.train.running`) with the step's all-reduced sums. Every step logs the target diagnostics
of :mod:`~biomjepa.train.health`, whose :class:`~biomjepa.train.health.LearningHealth` warns when the run
shows that it does not learn.

Documented choices: ``loop.precision`` (default ``auto``: bf16 autocast on CUDA and on CPUs with bf16 matrix units,
float32 elsewhere; the teacher's targets, running statistics, EMA and AdamW state stay float32; the ``bf16`` log
column says which ran); a
NaN/Inf loss or gradient norm on any rank *skips* the step on all ranks (no update, no EMA; counted
in ``bad_steps``) and the run stops with :class:`FloatingPointError` after ``loop.max_bad_steps``
consecutive bad steps. The torch RNG drives initialisation (seeded with ``run.seed``) and dropout
(its state is saved and restored with every checkpoint); :func:`pretrain` gives the caller's global
RNG states back unchanged when it returns.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from .._device import autocast, resolve_precision
from .._files import atomic_path
from ..data.shards import ShardStream
from .checkpoint import load_latest_state, rng_state, save_state, set_rng_state
from .config import TrainConfig, load_config
from .distributed import DistInfo, all_reduce_, all_reduce_mean, barrier, cleanup, init_distributed, wrap_ddp
from .ema import ema_update, make_teacher
from .health import DIAG_FIELDS, LearningHealth, effective_rank
from .jepa import JEPA
from .objectives import compute_objective
from .prepare import InputPreparer, PreparedStream, leave_stops_to_main
from .resume import check_resume, check_resume_corpus, inputs_record, record_changes
from .runlock import lock_run_dir, unlock_run_dir
from .running import KINDS, RunningTargets
from .schedules import lr_at, momentum_at
from .setup import (
    PCA_INITS,
    caller_rng_kept,
    check_run_inputs,
    check_shapes,
    init_from_checkpoint,
    init_gene_embedding,
    make_optimizer,
    open_corpus,
    open_graph,
    run_dir_of,
    state_hash,
)
from .signals import GracefulStop, log_stopped

logger = logging.getLogger(__name__)
LOG_FIELDS = [
    "step", "loss", "align", "cosine", "var", "cov", "recon", "embed_var", "embed_cov", "lr", "momentum", "coverage", "fallback",
    "dmt_fallback", "effective_rank", "grad_norm", "bad_steps", "cells_per_s", "tokens_per_s", *DIAG_FIELDS,
    "state_var", "state_cov", "state_sd", "nce", "nce_acc", "view_nce", "view_nce_acc", "bf16",
]
#: ``on_checkpoint(step, teacher, run_dir)``: called on rank 0 after every saved state (and at step 0)
CheckpointHook = Callable[[int, torch.nn.Module, Path], None]

__all__ = ["LOG_FIELDS", "Trainer", "pretrain", "run_dir_of", "state_hash"]


def pretrain(config: TrainConfig | dict | str | Path, overrides: list[str] | None = None, *,
             on_checkpoint: CheckpointHook | None = None, stop_when: Callable[[int], bool] | None = None,
             resumable: bool = True, report_stop: bool = True) -> Path:
    """Pretrain BioM-JEPA; resumes from the run directory's latest checkpoint. Returns the run directory.

    ``config`` is a :class:`TrainConfig`, a dict, a preset name (``tiny``/``mini``/``base``) or a
    YAML path; ``overrides`` are ``section.key=value`` strings. ``on_checkpoint`` is called on rank 0
    with ``(step, teacher, run_dir)`` at step 0 and after every saved state: the held-out probe of
    a ``probe`` section is such a hook, built outside the training code because it reads AnnData
    (``on_checkpoint=bj.bench.probe_hook(cfg)``; ``biomjepa train`` does this itself). Under
    ``torchrun`` every rank calls this.

    ``stop_when(step)`` (rank 0's answer counts; e.g. a time budget) is asked after every step: ``True`` ends
    the run there, saved. ``resumable=False`` (a scratch run its caller discards, as ``bj.tl.adapt``'s) leaves
    out the "run the same command again to resume" advice when a signal stops it; ``report_stop=False`` (a caller
    that says how the run stopped itself, as the command line does) leaves out the loop's own final line.
    """
    cfg = load_config(config, overrides)
    if on_checkpoint is None and cfg.probe.path is not None:
        raise ValueError(
            f"The config's probe.path={cfg.probe.path!r} asks for a held-out probe at every checkpoint; the "
            "training loop does not read AnnData itself. Pass on_checkpoint=bj.bench.probe_hook(cfg) (cfg = "
            "bj.train.load_config(config, overrides)), or set probe.path to null."
        )
    check_run_inputs(cfg)  # device and corpus listing, before the run directory or the corpus are touched
    info = init_distributed(cfg.loop.device)
    try:
        with caller_rng_kept():
            trainer = Trainer(cfg, info, on_checkpoint=on_checkpoint)
            trainer.stop_when, trainer.resumable, trainer.report_stop = stop_when, resumable, report_stop
            return trainer.run()
    finally:
        cleanup(info)


class Trainer:
    """Holds the run's objects; :meth:`run` trains from ``self.step`` to ``run.steps``."""

    def __init__(self, cfg: TrainConfig, info: DistInfo, *, on_checkpoint: CheckpointHook | None = None) -> None:
        self.cfg, self.info, self.on_checkpoint = cfg, info, on_checkpoint
        self.stop_when: Callable[[int], bool] | None = None  # pretrain(stop_when=...), asked after every step
        self.resumable = self.report_stop = True
        self.run_dir = run_dir_of(cfg)
        if info.is_main:
            lock_run_dir(self.run_dir)  # one process per run directory, before anything there is read or written
        try:
            self._setup()
        except BaseException:
            if info.is_main:
                unlock_run_dir(self.run_dir)
            raise

    # ---------------------------------------------------------------- setup, in named steps
    def _setup(self) -> None:
        saved = self._read_saved_state()
        self._open_data(saved)
        self.graph = open_graph(self.cfg, self.corpus, self.info)
        self._build_models(fresh=saved is None)
        self.step, self.bad_steps, self.consecutive_bad = 0, 0, 0
        torch.manual_seed(self.cfg.run.seed * 1000 + 1 + self.info.rank)  # per-rank dropout stream
        if saved is not None:
            self._restore(saved)
        self.ddp = wrap_ddp(self.model, self.info)
        self._record_start()  # only once every check passed: a refused resume leaves the run directory as it was

    def _read_saved_state(self) -> dict | None:
        """The latest intact state, checked against this config before the corpus cache or config.yaml change."""
        latest = load_latest_state(self.run_dir, map_location=self.info.device)  # falls back past a damaged file
        saved = latest[1] if latest is not None else None
        self._changes = check_resume(saved, self.cfg, self.run_dir, self.info) if saved is not None else []
        barrier(self.info)
        return saved

    def _open_data(self, saved: dict | None) -> None:
        """Open the corpus; collect the settings a resume changed (recorded by :meth:`_record_start`)."""
        cfg, info = self.cfg, self.info
        self.corpus = open_corpus(cfg, self.run_dir, info)
        if saved is not None:
            self._changes += check_resume_corpus(saved, self.corpus.meta, cfg, self.run_dir)
        self.config_changes = [*(saved or {}).get("config_changes", []), *self._changes]

    def _record_start(self) -> None:
        """Record the settings a resume changed (``changes.log``) and the run's config.yaml."""
        if self.info.is_main:
            record_changes(self.run_dir, self._changes)
            with atomic_path(self.run_dir / "config.yaml") as tmp:
                self.cfg.to_yaml(tmp)

    def _build_models(self, fresh: bool) -> None:
        """Student + predictor (identical on every rank), EMA teacher, centre and optimiser."""
        cfg, device = self.cfg, self.info.device
        torch.manual_seed(cfg.run.seed)  # identical initialisation on every rank
        self.model = JEPA.from_train_config(cfg).to(device)
        self.init_from = None  # a resumed run takes the record from its state (_restore)
        if cfg.model.init_from is not None and fresh:
            self.init_from = init_from_checkpoint(self.model, self.corpus, cfg, self.info)
        elif cfg.model.gene_init in PCA_INITS and fresh:
            init_gene_embedding(self.model, self.corpus, cfg.model, cfg.run.seed, device)
        self.teacher = make_teacher(self.model.student)
        mc, t = self.model.config, cfg.teacher
        rows = mc.vocab_size + 2 if t.target_centre == "gene" else None
        self.running = RunningTargets(mc.d_model, rows, rate=t.centre_rate, device=device, std=t.target_std,
                                      depth=t.depth_residual)
        self.optimizer = make_optimizer(self.model, cfg.optim)

    # ---------------------------------------------------------------- state
    def state(self) -> dict:
        return {
            "step": self.step,
            "consumed": self.step * self.cfg.data.accumulation,
            "model": self.model.state_dict(),
            "teacher": self.teacher.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "centre": self.running.centre.detach().cpu(),
            "target_stats": self.running.state_dict(),
            "bad_steps": self.bad_steps,
            "rng": rng_state(),
            "config": self.cfg.flat(),  # the flat form: states stay readable by every version
            "model_config": self.model.config.to_dict(),
            "corpus": self._corpus_record(),
            "config_changes": [dict(c) for c in self.config_changes],
            "init_from": self.init_from,  # provenance of model.init_from (None: a fresh encoder)
        }

    def _corpus_record(self) -> dict:
        meta = self.corpus.meta
        out = {"key": meta["key"], "shards": [s["source"] for s in meta["shards"]]}
        inputs = inputs_record(meta)
        if inputs is not None:  # size, mtime, sha256 of every input file: a resume on changed files is refused
            out["inputs"] = inputs
        return out

    def _restore(self, state: dict) -> None:
        check_shapes(self.model, state, self.run_dir)
        self.model.load_state_dict(state["model"])
        self.teacher.load_state_dict(state["teacher"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.running.load_state_dict(state.get("target_stats", {"centre": state["centre"]}))
        self.step, self.bad_steps = int(state["step"]), int(state["bad_steps"])
        self.init_from = state.get("init_from")
        set_rng_state(state["rng"])
        logger.info("resumed from step %d", self.step)

    def save(self) -> None:
        if self.info.is_main:
            save_state(self.run_dir, self.state(), keep=self.cfg.loop.keep_checkpoints)
            self._checkpoint_hook()
        barrier(self.info)

    def _checkpoint_hook(self) -> None:
        if self.on_checkpoint is not None:
            encoder = self.teacher if self.cfg.probe.encoder == "teacher" else self.model.student
            self.on_checkpoint(self.step, encoder, self.run_dir)

    # ---------------------------------------------------------------- loop
    def batches(self):
        cfg, info = self.cfg.data, self.info
        seed = self.cfg.run.seed
        stream = ShardStream(self.corpus, batch_size=cfg.batch_size, seed=seed, rank=info.rank,
                             world=info.world, start=self.step * cfg.accumulation, sort_pool=cfg.sort_pool,
                             batching=cfg.batching, balance=cfg.balance)
        prepared = PreparedStream(stream, InputPreparer.of(self.cfg, self.graph, self.model.config.vocab_size, info.rank),
                                  start=self.step * cfg.accumulation, accumulation=cfg.accumulation)
        # own generator: creating the iterator must not consume the global (dropout) RNG stream
        gen = torch.Generator().manual_seed(seed)
        extra = {"prefetch_factor": 4} if cfg.num_workers else {}
        loader = torch.utils.data.DataLoader(prepared, batch_size=None, num_workers=cfg.num_workers, generator=gen,
                                             worker_init_fn=leave_stops_to_main, **extra)
        return iter(loader)

    def run(self) -> Path:
        """Train to ``min(run.steps, run.stop_at)``; SIGTERM/SIGINT end the run after the current step, saved."""
        from .logs import StepLogger

        run, loop = self.cfg.run, self.cfg.loop
        log = StepLogger(self.run_dir, LOG_FIELDS, loop, steps=run.steps, enabled=self.info.is_main, start=self.step)
        health = LearningHealth(self.cfg.optim.warmup_steps)
        data = self.batches()
        saved_at = self.step
        try:
            with GracefulStop() as stop:
                if self.step == 0 and self.info.is_main:
                    self._checkpoint_hook()  # the untrained encoder: the start of the probe's trajectory
                end = min(run.steps, run.stop_at or run.steps)
                asked = False
                while self.step < end and not self._stop_agreed(stop, asked):
                    row = self.train_step(data)
                    log.write(row)
                    if self.info.is_main:
                        health.observe(row)
                    self.step += 1
                    if self.step % loop.checkpoint_every == 0 or self.step == end:
                        self.save()
                        saved_at = self.step
                    asked = self.info.is_main and self.stop_when is not None and bool(self.stop_when(self.step))
                if stop.signum is not None or self.step < end:
                    if saved_at != self.step:
                        self.save()
                    log_stopped(stop, self.step, self.run_dir / "checkpoints", asked=asked, resumable=self.resumable,
                                caller_says=not self.report_stop)
        finally:
            log.close()
            if self.info.is_main:
                unlock_run_dir(self.run_dir)
        (self.run_dir / f"weights_rank{self.info.rank}.sha256").write_text(state_hash(self.model) + "\n")
        return self.run_dir

    def _stop_agreed(self, stop: GracefulStop, asked: bool = False) -> bool:
        """Whether a stop signal reached any rank, or rank 0's ``stop_when`` said stop (all ranks stop at the
        same step)."""
        flag = float(stop.signum is not None or asked)
        if self.info.enabled:
            flag = all_reduce_(torch.tensor([flag], device=self.info.device), self.info, "max").item()
        return flag > 0

    def _micro(self, prepared):
        """One micro-batch's inputs (prepared by the loader: :mod:`~biomjepa.train.prepare`), on the device."""
        inputs, ids = prepared
        if self.cfg.loop.log_cell_ids:
            with open(self.run_dir / f"cell_ids_rank{self.info.rank}.txt", "a") as f:
                np.savetxt(f, np.c_[np.full(len(ids), self.step), ids], fmt="%d")
        return inputs.to(self.info.device)

    def train_step(self, data) -> dict:
        """Targets → predictions → loss per micro-batch (gradients summed), then one AdamW step and the EMA."""
        cfg, info = self.cfg, self.info
        t0 = time.perf_counter()
        lr, mom = self._schedules()
        self.model.train()
        scal, sums, preds, stats = [], {}, [], []
        precision = resolve_precision(cfg.loop.amp, info.device)  # loop.precision: auto = bf16 where multiplied natively
        amp = autocast(info.device, precision)  # the package's one precision choice; targets, EMA, AdamW stay float32
        for micro in range(cfg.data.accumulation):
            inputs = self._micro(next(data))
            sync = micro == cfg.data.accumulation - 1 or not info.enabled
            with self.ddp.no_sync() if not sync else contextlib.nullcontext(), amp:
                terms, aux = compute_objective(self.ddp, self.teacher, inputs, self.running, cfg.loss, cfg.teacher)
                (terms.total / cfg.data.accumulation).backward()
            scal.append(terms.scalars())
            stats.append(inputs.stats)
            preds.append(aux["pred"])
            for kind, (s_, c_) in aux["stats"].items():
                sums[kind] = (s_, c_) if kind not in sums else (sums[kind][0] + s_, sums[kind][1] + c_)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.optim.grad_clip)
        if self._finite(scal, grad_norm):
            self.optimizer.step()
            ema_update(self.teacher, self.model.student, mom)
            self._update_running(sums)
        self.optimizer.zero_grad(set_to_none=True)
        row = self._row(scal, stats, preds, lr, mom, float(grad_norm), time.perf_counter() - t0)
        row["bf16"] = float(precision == "bf16")  # the step's precision in log.csv (1: bf16 autocast, 0: float32)
        return row

    def _schedules(self) -> tuple[float, float]:
        """This step's learning rate (set on the optimiser) and EMA momentum: pure functions of the step."""
        o, t, steps = self.cfg.optim, self.cfg.teacher, self.cfg.run.steps
        lr = lr_at(self.step, lr=o.lr, min_lr=o.min_lr, warmup_steps=o.warmup_steps, total_steps=steps)
        mom = momentum_at(self.step, start=t.momentum_start, end=t.momentum_end, total_steps=steps,
                          kind=t.momentum_schedule)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        return lr, mom

    def _finite(self, scal: list[dict], grad_norm: torch.Tensor) -> bool:
        bad = any(not np.isfinite(s["loss"]) for s in scal) or not bool(torch.isfinite(grad_norm))
        flag = all_reduce_(torch.tensor([float(bad)], device=self.info.device), self.info, "max")
        if flag.item() == 0:
            self.consecutive_bad = 0
            return True
        self.bad_steps += 1
        self.consecutive_bad += 1
        logger.warning("step %d: non-finite loss or gradient; step skipped (%d in a row)",
                       self.step, self.consecutive_bad)
        if self.consecutive_bad >= self.cfg.loop.max_bad_steps:
            raise FloatingPointError(
                f"{self.consecutive_bad} consecutive steps with NaN/Inf loss or gradients (last step "
                f"{self.step}); lower `lr`, check the corpus for non-count data, or raise `max_bad_steps`."
            )
        return False

    def _update_running(self, sums: dict) -> None:
        """Fold the step's target statistics, summed over micro-batches and all-reduced over ranks, into
        :attr:`running` (every rank then holds the same statistics)."""
        kinds = [k for k in KINDS if k in sums]
        if self.info.enabled:  # every rank reduces the same kinds: the config decides which exist
            kinds = [k for k in KINDS if k == "centre" or getattr(self.running, k) is not None]
            for k in kinds:
                if k not in sums:
                    sums[k] = self._zero_stats(k)
        if not kinds:
            return
        parts = [t.reshape(-1).float() for k in kinds for t in sums[k]]
        buf = torch.cat(parts)
        all_reduce_(buf, self.info)
        out, at = {}, 0
        for k in kinds:
            s_, c_ = sums[k]
            out[k] = (buf[at:at + s_.numel()].view_as(s_), buf[at + s_.numel():at + s_.numel() + c_.numel()].view_as(c_))
            at += s_.numel() + c_.numel()
        self.running.update(out)

    def _zero_stats(self, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
        """A rank without units this step contributes zeros of the right shapes."""
        r, dev = self.running, self.info.device
        if kind == "centre":
            return torch.zeros_like(r.centre), torch.zeros(r.centre.shape[:-1], device=dev)
        return torch.zeros_like(getattr(r, kind)), torch.zeros((), device=dev)

    def _row(self, scal, stats, preds, lr, mom, grad_norm, dt) -> dict:
        keys = set().union(*scal)
        row = {k: float(np.mean([s.get(k, 0.0) for s in scal])) for k in keys}
        for k in ("coverage", "fallback", "dmt_fallback"):
            row[k] = float(np.mean([s[k] for s in stats]))
        cells = sum(s["cells"] for s in stats)
        tokens = sum(s["teacher_tokens"] + s["student_tokens"] for s in stats)
        row.update(effective_rank=effective_rank(torch.cat(preds)), grad_norm=grad_norm,
                   cells_per_s=cells / dt, tokens_per_s=tokens / dt)
        row = all_reduce_mean(row, self.info)
        row.update(step=self.step, lr=lr, momentum=mom, bad_steps=self.bad_steps)
        return row
