"""The named steps that set a pretraining run up, each taking only the config sections it needs.

:class:`~biomjepa.train.loop.Trainer` calls them in this order: lock the run directory, read the latest
saved state and check a resume against it, open the corpus cache, open the gene graph, build the JEPA
(student + predictor) and its EMA teacher, start the gene embeddings, build the optimiser, restore the
saved state.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from pathlib import Path

import torch

from ..data.shards import Corpus, prepare_corpus
from .config import TrainConfig
from .distributed import DistInfo, barrier
from .sections import ModelSection, OptimSection

logger = logging.getLogger(__name__)


def run_dir_of(cfg: TrainConfig) -> Path:
    """``run.out_dir / run.run_name`` (default name: ``{objective}-{model preset}``)."""
    return Path(cfg.run.out_dir) / (cfg.run.run_name or f"{cfg.loss.objective}-{cfg.model.preset}")


def check_run_inputs(cfg: TrainConfig) -> None:
    """What can be checked before the run directory or the corpus cache is touched: ``loop.device`` usable on
    this machine (CUDA present for ``cuda``/``cuda:N``, MPS for ``mps``; a ``RuntimeError`` otherwise) and the
    ``data.corpus`` listing (its files exist and are h5ad/npz, none listed twice), ``data.num_workers`` (at
    most the CPU cores this process may use) and ``model.init_from``'s pin (:func:`check_init_from`), in the config's
    words."""
    from .._device import check_available
    from ..data.shards import check_corpus_listing

    resuming = any((run_dir_of(cfg) / "checkpoints").glob("step_*.pt"))
    check_num_workers(cfg.data.num_workers, resuming=resuming)

    device = cfg.loop.device
    if device != "auto":
        check_available(torch.device(device), f"loop.device={device}",
                        "Set `loop.device: cpu` (or `auto`) in the config")
    corpus = cfg.data.corpus
    if corpus is not None and not (isinstance(corpus, str) and (Path(corpus) / "manifest.json").is_file()):
        check_corpus_listing(corpus, "data.corpus")
    check_init_from(cfg.model.init_from)


def check_init_from(ref: str | None) -> None:
    """``model.init_from``'s pin, checked before the corpus is prepared where no download is needed: a registered
    name's against the registry, a directory's against its files (a URL's is checked as it is downloaded)."""
    from .._pretrained import REGISTRY, resolve_checkpoint
    from .._references import parse_reference

    if ref is None:
        return
    with init_from_words():
        kind, target, pin = parse_reference(ref, registry=REGISTRY)
        entry = REGISTRY.get(target, {}) if kind == "name" else {}
        remote_ok = "path" not in entry and pin in (entry.get("checkpoint_sha256") or entry.get("sha256"), None)
        if pin is not None and kind != "url" and not (kind == "name" and remote_ok):
            resolve_checkpoint(ref)  # refuses a wrong pin (a remote name's before any download)


def check_num_workers(n: int, *, resuming: bool = False) -> None:
    """Refuse more loader processes (``data.num_workers``) than the CPU cores this process may use, the limit
    past which ``torch``'s DataLoader warns (twice) that the run may slow down or freeze. Refused, not lowered:
    the number of workers decides which cells each step sees. A run ``resuming`` must keep the number it began
    with, so there it is a warning (the run is slower, not wrong)."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not (n and cores and n > cores):
        return
    asked = (f"data.num_workers={n} asks for {n} loader processes, but this process may use {cores} CPU "
             f"core{'s' if cores > 1 else ''}")
    if resuming:
        logger.warning("%s: the resumed run keeps them (they decide which cells each step sees), so it may run slowly; "
                       "give it more cores to run at full speed.", asked)
        return
    raise ValueError(f"{asked}; set data.num_workers to at most {cores} (0 reads the corpus in the training process).")


def open_corpus(cfg: TrainConfig, run_dir: Path, info: DistInfo) -> Corpus:
    """Prepare (rank 0) and open the shard cache named by ``data.corpus``/``data.cache_dir``."""
    data = cfg.data
    if data.corpus is None:
        raise ValueError("TrainConfig data.corpus is not set: give h5ad/npz files, a glob, or a prepared cache.")
    if isinstance(data.corpus, str) and (Path(data.corpus) / "manifest.json").is_file():
        return Corpus(data.corpus)
    cache = Path(data.cache_dir) if data.cache_dir else run_dir / "corpus"
    if info.is_main:
        prepare_corpus(data.corpus, cache, vocab_size=cfg.model_config().vocab_size, where="data.corpus",
                       cache_where="data.cache_dir")
    barrier(info)
    return Corpus(cache)


def open_graph(cfg: TrainConfig, corpus: Corpus, info: DistInfo):
    """The gene graph: ``blocks.graph`` if given, else STRING (bundled) ∪ corpus coexpression, cached.

    The cache (``CORPUS_CACHE/graph``) is rebuilt when it was made for another corpus key or other
    parameters; it is the graph ``biomjepa graph`` builds for the same corpus (``--top-k`` =
    ``max(64, dmt_k)``, ``--seed`` = the run's ``seed``).
    """
    from ..data.graph import GRAPH_DIR, TOP_K, find_graph, graph_params, update_corpus_graph

    if cfg.loss.objective == "random_block":
        return None
    if cfg.blocks.graph:
        return find_graph(cfg.blocks.graph)
    params = graph_params(top_k=max(TOP_K, cfg.blocks.dmt_k), seed=cfg.run.seed)
    if info.is_main:
        update_corpus_graph(corpus, params)
    barrier(info)
    return find_graph(corpus.root / GRAPH_DIR)


#: the ``model.gene_init`` values that start the gene embeddings from this corpus's PCA loadings
PCA_INITS = ("pca", "pca_unit")


def init_gene_embedding(model, corpus: Corpus, cfg: ModelSection, seed: int, device) -> None:
    """``model.gene_init: pca`` / ``pca_unit``: gene embeddings (and the predictor's block queries) from corpus PCA
    loadings (``pca_unit``: each detected gene's row at one norm)."""
    from .gene_init import pca_gene_embedding

    mc = model.config
    E = pca_gene_embedding(corpus, mc.vocab_size, mc.d_model, scale=cfg.gene_init_scale, seed=seed,
                           instead="checkpoint" if cfg.init_from is not None else "random",
                           unit=cfg.gene_init == "pca_unit")
    E = torch.from_numpy(E).to(device)
    with torch.no_grad():
        model.student.gene_embedding.weight[: mc.vocab_size].copy_(E)
        model.predictor.query_embedding.weight.copy_(E)


#: what must agree between ``model.init_from``'s encoder and the run's (``pooling`` and ``dropout`` may differ)
FIT_KEYS = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "n_value_bins", "attn_eps")


def init_from_checkpoint(model, corpus: Corpus, cfg: TrainConfig, info: DistInfo) -> dict:
    """``model.init_from``: the checkpoint's encoder into the student (the teacher is copied from it after).

    Rank 0 resolves the reference first (a URL is downloaded once into ``bj.settings.cachedir`` and checked
    against its sha256); every rank then loads the same verified files (:func:`biomjepa.load_model`).
    ``model.gene_init: pca`` then replaces the gene embeddings with this corpus's PCA loadings; ``checkpoint``
    keeps them. The predictor's gene queries start from the resulting gene embeddings, as after a PCA start.
    Returns the provenance record kept in every training state and export: the reference, the checkpoint's
    name, its ``checkpoint_sha256`` (the whole checkpoint) and ``weights_sha256``.
    """
    from .._pretrained import load_model, resolve_checkpoint

    ref = cfg.model.init_from
    if info.is_main:
        with init_from_words():
            resolve_checkpoint(ref)  # downloads (and verifies) once, before the other ranks look
    barrier(info)
    with init_from_words():
        base = load_model(ref)
    check_fit(base.config, model.config, ref)
    with torch.no_grad():
        model.student.load_state_dict(base.encoder.state_dict())
    if cfg.model.gene_init in PCA_INITS:
        init_gene_embedding(model, corpus, cfg.model, cfg.run.seed, info.device)
    else:
        with torch.no_grad():
            model.predictor.query_embedding.weight.copy_(model.student.gene_embedding.weight[: model.config.vocab_size])
    record = {"ref": str(ref), "name": str(base.info.get("name", ref)), "gene_init": cfg.model.gene_init,
              "checkpoint_sha256": str(base.info.get("checkpoint_sha256", "")),
              "weights_sha256": str(base.info.get("sha256", ""))}
    logger.info("init_from %s (checkpoint sha256 %s); gene embeddings: %s", record["name"],
                record["checkpoint_sha256"][:12] or "?", "this corpus's PCA" if cfg.model.gene_init in PCA_INITS else "kept")
    return record


#: the checkpoint loader's advice (in the tools' words, ``checkpoint=``) -> the config's key
INIT_FROM_WORDS = {"Pass `checkpoint=` a directory exported by `bj.train` or set `bj.settings.checkpoint`.":
                   "Set model.init_from to a registered name, a checkpoint directory exported by `bj.train` or "
                   "URL#sha256=HEX.", "Pass `checkpoint=`": "Set model.init_from to", "`checkpoint=`": "model.init_from",
                   " or sha256=.": "."}


@contextlib.contextmanager
def init_from_words():
    """Errors of resolving or loading ``model.init_from`` say the config key, not ``checkpoint=`` (an argument of
    the tools, which the loader's messages name); the error keeps its type."""
    try:
        yield
    except (OSError, ValueError) as err:
        text = str(err)
        for words, key in INIT_FROM_WORDS.items():
            text = text.replace(words, key)
        if text == str(err):
            raise
        try:
            new = type(err)(text)
        except Exception:  # an exception type that takes other arguments
            new = (OSError if isinstance(err, OSError) else ValueError)(text)
        raise new from err


def check_fit(saved, own, ref: str) -> None:
    """Refuse a checkpoint encoder (:class:`~biomjepa.nn.ModelConfig` ``saved``) that the run's ``own`` cannot hold."""
    diff = [k for k in FIT_KEYS if getattr(saved, k) != getattr(own, k)]
    if not diff:
        return

    def shape(mc) -> str:
        return ", ".join(f"{k}={getattr(mc, k)}" for k in FIT_KEYS) + f" (gene_embedding [{mc.vocab_size + 2}, {mc.d_model}])"

    fix = ", ".join(f"{k}: {getattr(saved, k)}" for k in diff)
    raise ValueError(
        f"model.init_from={ref!r} holds an encoder of {shape(saved)}, but this config builds one of {shape(own)}; "
        f"they differ in {', '.join(diff)}. Set model.preset/model.overrides to the checkpoint's ({fix})."
    )


def make_optimizer(model: torch.nn.Module, cfg: OptimSection) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only (not biases, LayerNorms, the mask vector)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def check_shapes(model: torch.nn.Module, saved: dict, run_dir: Path) -> None:
    """Refuse (before ``load_state_dict``) a state whose tensors do not fit this model."""
    own = model.state_dict()
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
        f"{run_dir} holds a training state (step {saved.get('step')}) of a model with another architecture, "
        f"which cannot be resumed even with allow_resume_mismatch: {detail}. Restore the saved model settings "
        f"(model, model_overrides, pred_*), or give this run a new `run_name`/`out_dir`."
    )


def state_hash(module: torch.nn.Module) -> str:
    """SHA-256 over a module's state dict (sorted keys): equal weights ⇔ equal hash."""
    h = hashlib.sha256()
    for k, v in sorted(module.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


@contextlib.contextmanager
def caller_rng_kept():
    """Give the caller's global RNG states (torch, CUDA, numpy, python) back after the run."""
    from .checkpoint import rng_state, set_rng_state

    before = rng_state()
    try:
        yield
    finally:
        set_rng_state(before)
