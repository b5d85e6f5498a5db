"""The pretraining loop (Algorithm S1): sample blocks → teacher/student/predictor → loss → AdamW → EMA.

Per optimizer step ``s``: ``accumulation`` micro-batches (block sampling seeded by
``block_rng(seed, s, rank, micro)``), gradients averaged over micro-batches and ranks (DDP),
clipped to ``grad_clip``, AdamW with ``lr_at(s)``, then the teacher EMA with ``momentum_at(s)``
and the EMA centre with the step's (all-reduced) mean teacher block state.

Documented choices: AdamW weight decay applies to matrices only (not biases, LayerNorms, the mask
vector); bf16 autocast on CUDA only (float32 on CPU, which keeps resume bit-exact); a NaN/Inf loss
or gradient norm on any rank *skips* the step on all ranks (no update, no EMA; counted in
``bad_steps``) and the run stops with :class:`FloatingPointError` after ``max_bad_steps``
consecutive bad steps.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np
import torch

from .._files import atomic_path
from ..data.shards import Corpus, ShardStream, prepare_corpus
from .blocks import block_rng, sample_blocks
from .checkpoint import load_latest_state, rng_state, save_state, set_rng_state
from .config import TrainConfig, load_config
from .distributed import DistInfo, all_reduce_, all_reduce_mean, barrier, cleanup, init_distributed, wrap_ddp
from .ema import ema_update, make_teacher, update_centre, update_centre_rows
from .inputs import build_inputs
from .jepa import JEPA
from .objectives import compute_objective, effective_rank
from .resume import check_resume, check_resume_corpus, inputs_record, record_changes
from .runlock import lock_run_dir, unlock_run_dir
from .schedules import lr_at, momentum_at
from .signals import GracefulStop
from .views import gene_budget

logger = logging.getLogger(__name__)
LOG_FIELDS = [
    "step", "loss", "align", "cosine", "var", "cov", "recon", "embed_var", "embed_cov", "lr", "momentum", "coverage", "fallback",
    "dmt_fallback", "effective_rank", "grad_norm", "bad_steps", "cells_per_s", "tokens_per_s",
]


def pretrain(config: TrainConfig | dict | str | Path, overrides: list[str] | None = None) -> Path:
    """Pretrain BioM-JEPA; resumes from the run directory's latest checkpoint. Returns the run directory.

    ``config`` is a :class:`TrainConfig`, a dict, a preset name (``tiny``/``mini``/``base``) or a
    YAML path; ``overrides`` are ``key=value`` strings. Under ``torchrun`` every rank calls this.
    """
    cfg = load_config(config, overrides)
    info = init_distributed(cfg.device)
    try:
        return Trainer(cfg, info).run()
    finally:
        cleanup(info)


def run_dir_of(cfg: TrainConfig) -> Path:
    return Path(cfg.out_dir) / (cfg.run_name or f"{cfg.objective}-{cfg.model}")


def open_corpus(cfg: TrainConfig, run_dir: Path, info: DistInfo) -> Corpus:
    """Prepare (rank 0) and open the shard cache named by ``cfg.corpus``/``cfg.cache_dir``."""
    if cfg.corpus is None:
        raise ValueError("TrainConfig.corpus is not set: give h5ad/npz files, a glob, or a prepared cache.")
    if isinstance(cfg.corpus, str) and (Path(cfg.corpus) / "manifest.json").is_file():
        return Corpus(cfg.corpus)
    cache = Path(cfg.cache_dir) if cfg.cache_dir else run_dir / "corpus"
    if info.is_main:
        prepare_corpus(cfg.corpus, cache, vocab_size=cfg.model_config().vocab_size)
    barrier(info)
    return Corpus(cache)


def open_graph(cfg: TrainConfig, corpus: Corpus, info: DistInfo):
    """The gene graph: ``cfg.graph`` if given, else STRING (bundled) ∪ corpus coexpression, cached.

    The cache (``CORPUS_CACHE/graph``) is rebuilt when it was made for another corpus key or other
    parameters; it is the graph ``biomjepa graph`` builds for the same corpus (``--top-k`` =
    ``max(64, dmt_k)``, ``--seed`` = the run's ``seed``).
    """
    from .corpus_graph import TOP_K, build_corpus_graph, cached_graph_is_current, graph_params
    from .graph import GeneGraph

    if cfg.objective == "random_block":
        return None
    if cfg.graph:
        return GeneGraph.load(cfg.graph)
    path = corpus.root / "graph"
    params = graph_params(top_k=max(TOP_K, cfg.dmt_k), seed=cfg.seed)
    if info.is_main and not cached_graph_is_current(path, corpus.meta["key"], params):
        if (path / "graph.npz").is_file():
            logger.info("rebuilding the cached gene graph %s: it was built for another corpus or parameters", path)
        build_corpus_graph(corpus, params).save(path)
    barrier(info)
    return GeneGraph.load(path)


def state_hash(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for k, v in sorted(module.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class Trainer:
    """Holds the run's objects; :meth:`run` trains from ``self.step`` to ``cfg.steps``."""

    def __init__(self, cfg: TrainConfig, info: DistInfo) -> None:
        self.cfg, self.info = cfg, info
        self.run_dir = run_dir_of(cfg)
        if info.is_main:
            lock_run_dir(self.run_dir)  # one process per run directory, before anything there is read or written
        try:
            self._setup()
        except BaseException:
            if info.is_main:
                unlock_run_dir(self.run_dir)
            raise

    def _setup(self) -> None:
        cfg, info = self.cfg, self.info
        latest = load_latest_state(self.run_dir, map_location=info.device)  # falls back past a damaged file
        saved = latest[1] if latest is not None else None
        changes = []
        if saved is not None:  # before the corpus cache or config.yaml can be rewritten
            changes = check_resume(saved, cfg, self.run_dir)
        barrier(info)
        self.corpus = open_corpus(cfg, self.run_dir, info)
        if saved is not None:
            changes += check_resume_corpus(saved, self.corpus.meta, cfg, self.run_dir)
        self.config_changes = [*(saved or {}).get("config_changes", []), *changes]
        if info.is_main:
            record_changes(self.run_dir, changes)
            with atomic_path(self.run_dir / "config.yaml") as tmp:
                cfg.to_yaml(tmp)
        self.graph = open_graph(cfg, self.corpus, info)
        torch.manual_seed(cfg.seed)  # identical initialisation on every rank
        self.model = JEPA.from_train_config(cfg).to(info.device)
        if cfg.gene_init == "pca" and saved is None:
            self._init_gene_embedding()
        self.teacher = make_teacher(self.model.student)
        mc = self.model.config
        shape = (mc.vocab_size + 2, mc.d_model) if cfg.target_centre == "gene" else (mc.d_model,)
        self.centre = torch.zeros(shape, device=info.device)
        self.optimizer = self._optimizer()
        self.step, self.bad_steps, self.consecutive_bad = 0, 0, 0
        torch.manual_seed(cfg.seed * 1000 + 1 + info.rank)  # per-rank dropout stream
        if saved is not None:
            self._restore(saved)
        self.ddp = wrap_ddp(self.model, info)

    def _check_shapes(self, saved: dict) -> None:
        """Refuse (before ``load_state_dict``) a state whose tensors do not fit this model."""
        own = self.model.state_dict()
        saved_model = saved.get("model", {})
        diff = [f"{k}: saved {tuple(v.shape)} → now {tuple(own[k].shape)}" for k, v in saved_model.items()
                if k in own and tuple(v.shape) != tuple(own[k].shape)]
        missing = sorted(set(own) ^ set(saved_model))
        if not diff and not missing:
            return
        detail = "; ".join(diff[:4]) + (f" (+{len(diff) - 4} more)" if len(diff) > 4 else "")
        if missing:
            detail += ("; " if detail else "") + f"parameters only in one of them: {missing[:4]}"
        raise ValueError(
            f"{self.run_dir} holds a training state (step {saved.get('step')}) of a model with another architecture, "
            f"which cannot be resumed even with allow_resume_mismatch: {detail}. Restore the saved model settings "
            f"(model, model_overrides, pred_*), or give this run a new `run_name`/`out_dir`."
        )

    def _init_gene_embedding(self) -> None:
        """``gene_init: pca``: gene embeddings (and the predictor's block queries) from corpus PCA loadings."""
        from .gene_init import pca_gene_embedding

        mc = self.model.config
        E = pca_gene_embedding(self.corpus, mc.vocab_size, mc.d_model, scale=self.cfg.gene_init_scale,
                               seed=self.cfg.seed)
        E = torch.from_numpy(E).to(self.info.device)
        with torch.no_grad():
            self.model.student.gene_embedding.weight[: mc.vocab_size].copy_(E)
            self.model.predictor.query_embedding.weight.copy_(E)

    def _optimizer(self) -> torch.optim.Optimizer:
        decay = [p for p in self.model.parameters() if p.ndim >= 2]
        other = [p for p in self.model.parameters() if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": self.cfg.weight_decay}, {"params": other, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=self.cfg.lr, betas=(self.cfg.beta1, self.cfg.beta2))

    # ---------------------------------------------------------------- state
    def state(self) -> dict:
        return {
            "step": self.step,
            "consumed": self.step * self.cfg.accumulation,
            "model": self.model.state_dict(),
            "teacher": self.teacher.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "centre": self.centre.detach().cpu(),
            "bad_steps": self.bad_steps,
            "rng": rng_state(),
            "config": self.cfg.to_dict(),
            "model_config": self.model.config.to_dict(),
            "corpus": self._corpus_record(),
            "config_changes": [dict(c) for c in self.config_changes],
        }

    def _corpus_record(self) -> dict:
        meta = self.corpus.meta
        out = {"key": meta["key"], "shards": [s["source"] for s in meta["shards"]]}
        inputs = inputs_record(meta)
        if inputs is not None:  # size + mtime of every input file: a resume on changed files is refused
            out["inputs"] = inputs
        return out

    def _restore(self, state: dict) -> None:
        self._check_shapes(state)
        self.model.load_state_dict(state["model"])
        self.teacher.load_state_dict(state["teacher"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.centre.copy_(state["centre"])
        self.step, self.bad_steps = int(state["step"]), int(state["bad_steps"])
        set_rng_state(state["rng"])
        logger.info("resumed from step %d", self.step)

    def save(self) -> None:
        if self.info.is_main:
            save_state(self.run_dir, self.state(), keep=self.cfg.keep_checkpoints)
            self._score_probe()
        barrier(self.info)

    def _score_probe(self) -> None:
        """Append the teacher's probe-set geometry (rank, depth association, F1) to ``probe.csv``."""
        if self.cfg.probe is None:
            return
        from .probe import append_rows, load_probe, probe_scores

        if getattr(self, "_probe", None) is None:
            cfg = self.cfg
            self._probe = load_probe(cfg.probe, obs=cfg.probe_obs, label_key=cfg.probe_label_key,
                                     max_cells=cfg.probe_cells, seed=cfg.seed)
        rows = probe_scores(self.teacher, self._probe, self.step)
        append_rows(self.run_dir / "probe.csv", rows)
        for r in rows:
            logger.info("probe step %d %s: effective rank %.1f, depth_nnz %.2f, F1(k=5) %.3f", self.step,
                        r["pooling"], r["effective_rank"], r["depth_nnz"], r["macro_f1_k5"])

    # ---------------------------------------------------------------- loop
    def batches(self):
        cfg, info = self.cfg, self.info
        stream = ShardStream(self.corpus, batch_size=cfg.batch_size, seed=cfg.seed, rank=info.rank,
                             world=info.world, start=self.step * cfg.accumulation, sort_pool=cfg.sort_pool)
        # own generator: creating the iterator must not consume the global (dropout) RNG stream
        gen = torch.Generator().manual_seed(cfg.seed)
        loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=cfg.num_workers, generator=gen)
        return iter(loader)

    def run(self) -> Path:
        """Train to ``min(steps, stop_at)``; SIGTERM/SIGINT end the run after the current step, with a saved state."""
        from .logs import StepLogger

        cfg = self.cfg
        log = StepLogger(self.run_dir, LOG_FIELDS, cfg, enabled=self.info.is_main, start=self.step)
        data = self.batches()
        saved_at = self.step
        try:
            with GracefulStop() as stop:
                if self.step == 0 and self.info.is_main:
                    self._score_probe()  # the untrained encoder: the start of the rank/depth trajectory
                end = min(cfg.steps, cfg.stop_at or cfg.steps)
                while self.step < end and not self._stop_agreed(stop):
                    log.write(self.train_step(data))
                    self.step += 1
                    if self.step % cfg.checkpoint_every == 0 or self.step == end:
                        self.save()
                        saved_at = self.step
                if stop.signum is not None or self.step < end:
                    if saved_at != self.step:
                        self.save()
                    logger.warning("stopped on %s after step %d; the state is saved in %s: run the same command "
                                   "again to resume", stop.name, self.step, self.run_dir / "checkpoints")
        finally:
            log.close()
            if self.info.is_main:
                unlock_run_dir(self.run_dir)
        (self.run_dir / f"weights_rank{self.info.rank}.sha256").write_text(state_hash(self.model) + "\n")
        return self.run_dir

    def _stop_agreed(self, stop: GracefulStop) -> bool:
        """Whether a stop signal reached any rank (all ranks stop at the same step)."""
        flag = float(stop.signum is not None)
        if self.info.enabled:
            flag = all_reduce_(torch.tensor([flag], device=self.info.device), self.info, "max").item()
        return flag > 0

    def _micro(self, batch, micro: int):
        cfg, info = self.cfg, self.info
        rng = block_rng(cfg.seed, self.step, info.rank, micro)
        cells = gene_budget(batch.cells, cfg.teacher_genes, rng)
        sample = sample_blocks(cells.indptr, cells.genes, self.graph, cfg.block_config(), rng,
                               vocab_size=self.model.config.vocab_size)
        inputs = build_inputs(cells, sample, self.model.config.vocab_size, objective=cfg.objective,
                              token_cap=cfg.token_cap, rng=rng).to(info.device)
        if cfg.log_cell_ids:
            with open(self.run_dir / f"cell_ids_rank{info.rank}.txt", "a") as f:
                np.savetxt(f, np.c_[np.full(len(batch.ids), self.step), batch.ids], fmt="%d")
        return inputs

    def train_step(self, data) -> dict:
        cfg, info = self.cfg, self.info
        t0 = time.perf_counter()
        lr = lr_at(self.step, lr=cfg.lr, min_lr=cfg.min_lr, warmup_steps=cfg.warmup_steps, total_steps=cfg.steps)
        mom = momentum_at(self.step, start=cfg.momentum_start, end=cfg.momentum_end, total_steps=cfg.steps,
                          kind=cfg.momentum_schedule)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.model.train()
        scal, csum, ccount, preds, stats = [], None, None, [], []
        autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=info.device.type == "cuda" and cfg.bf16)
        for micro in range(cfg.accumulation):
            inputs = self._micro(next(data), micro)
            sync = micro == cfg.accumulation - 1 or not info.enabled
            ctx = self.ddp.no_sync() if not sync else _null()
            with ctx, autocast:
                terms, aux = compute_objective(self.ddp, self.teacher, inputs, self.centre, cfg)
                (terms.total / cfg.accumulation).backward()
            scal.append(terms.scalars())
            stats.append(inputs.stats)
            preds.append(aux["pred"])
            if aux["centre_stats"] is not None:
                s_, c_ = aux["centre_stats"]
                csum, ccount = (s_, c_) if csum is None else (csum + s_, ccount + c_)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        ok = self._finite(scal, grad_norm)
        if ok:
            self.optimizer.step()
            ema_update(self.teacher, self.model.student, mom)
            self._update_centre(csum, ccount)
        self.optimizer.zero_grad(set_to_none=True)
        return self._row(scal, stats, preds, lr, mom, float(grad_norm), time.perf_counter() - t0)

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
        if self.consecutive_bad >= self.cfg.max_bad_steps:
            raise FloatingPointError(
                f"{self.consecutive_bad} consecutive steps with NaN/Inf loss or gradients (last step "
                f"{self.step}); lower `lr`, check the corpus for non-count data, or raise `max_bad_steps`."
            )
        return False

    def _update_centre(self, csum, ccount) -> None:
        """EMA centre from the step's uncentred teacher statistics (all-reduced over ranks).

        Global centre ``[D]``: ``c ← r·c + (1−r)·mean``. Per-gene centre ``[V, D]``: the same
        update on the rows of the genes that were targets in this step; other rows are unchanged.
        """
        if csum is None:
            if not self.info.enabled:
                return
            csum = torch.zeros_like(self.centre)
            ccount = torch.zeros(self.centre.shape[:-1], device=self.info.device)
        buf = torch.cat([csum.reshape(-1), ccount.reshape(-1).to(csum.dtype)])
        all_reduce_(buf, self.info)
        sums, counts = buf[: csum.numel()].view_as(csum), buf[csum.numel():].view_as(ccount)
        rate = self.cfg.centre_rate
        if self.centre.ndim == 1:
            if counts > 0:
                update_centre(self.centre, sums / counts, rate)
            return
        seen = counts > 0
        update_centre_rows(self.centre, seen, sums[seen] / counts[seen, None], rate)

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


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
