"""Resuming a run: what a resumed run may change, what it may not, and the record of what it did.

A run resumes from its directory's latest state. :func:`check_resume` refuses (unless
``allow_resume_mismatch``) a new config that trains another model, on another corpus
(:func:`~biomjepa.train.checkpoint.resume_mismatch`), on corpus files that changed since the state
was saved (their size and mtime, and where the mtime differs their bytes' sha256, recorded in the state's
``corpus.inputs``: a copy of the same files resumes; in a multi-process run rank 0 alone hashes them and tells
the other ranks its verdict), or with another data
order (:data:`~biomjepa.train.checkpoint.DATA_ORDER_KEYS`). Every other training setting may change
(lr, schedules, loss weights, ...); each change is a ``{step, key, old, new}`` entry of the state's
``config_changes`` and a line of ``run_dir/changes.log``: the run goes on from the step where the
change happened, with the schedules evaluated at that step. States saved before these records
existed (no ``config_changes``, no ``corpus.inputs``) resume as before.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .checkpoint import DATA_ORDER_KEYS, config_changes, describe_change, mismatches
from .distributed import DistInfo, broadcast_object

logger = logging.getLogger(__name__)
CHANGES_LOG = "changes.log"


def check_resume(saved: dict, cfg, run_dir: Path, info: DistInfo | None = None) -> list[dict]:
    """Checks before the corpus cache is opened; returns the config changes to record.

    Every rank calls it (``info``: this process' place in the run; ``None``: a single process); the corpus files
    are checked, and hashed where needed, by rank 0 alone, whose refusal every rank raises.

    Raises
    ------
    ValueError
        The model, the :data:`~biomjepa.train.checkpoint.RESUME_KEYS`, the data order or the corpus
        files differ and ``cfg.loop.allow_resume_mismatch`` is false.
    """
    step = int(saved.get("step", 0))
    diff = mismatches(saved, config=cfg.flat(), model_config=cfg.model_config().to_dict())
    _refuse_or_warn(diff, saved, cfg, run_dir)
    changes = config_changes(saved, cfg.flat(), step=step)
    order = [c for c in changes if c["key"] in DATA_ORDER_KEYS]
    if order and not cfg.loop.allow_resume_mismatch:
        listed = "; ".join(f"{c['key']}: {c['old']!r} → {c['new']!r}" for c in order)
        raise ValueError(
            f"{run_dir} holds a training state (step {step}) saved with another data order ({listed}): the cells "
            f"each step sees are a function of {', '.join(DATA_ORDER_KEYS)} and the step, so the resumed run would "
            "not continue the saved one. Restore the saved values, give this run a new `run_name`/`out_dir`, or set "
            f"`allow_resume_mismatch=true` to continue with the new order (recorded in {CHANGES_LOG})."
        )
    recorded = saved.get("corpus", {}).get("inputs") is not None  # states saved before they were: trusted
    if recorded and cfg.data.corpus is not None and not _is_prepared_cache(cfg.data.corpus):
        _check_corpus_files(saved, cfg, run_dir, info)  # before a changed file re-prepares the cache
    return changes + [_as_change(m, step) for m in diff]


def check_resume_corpus(saved: dict, corpus_meta: dict, cfg, run_dir: Path) -> list[dict]:
    """Checks once the corpus cache is open: its key and input files. Returns mismatches allowed, as changes."""
    diff = mismatches(saved, corpus_key=corpus_meta["key"])
    _refuse_or_warn(diff, saved, cfg, run_dir)
    if corpus_meta.get("inputs") is not None:
        _check_inputs(saved, corpus_meta["inputs"], cfg, run_dir)
    return [_as_change(m, int(saved.get("step", 0))) for m in diff]


def record_changes(run_dir: Path, changes: list[dict]) -> None:
    """Log each change and append it to ``run_dir/changes.log`` (one line each, with the time).

    Call it only once the resume is accepted (every check, including the weights' shapes, passed): a
    refused resume must leave no record of changes it never made.
    """
    if not changes:
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    lines = [f"{stamp} resumed with changed settings from {describe_change(c)}" for c in changes]
    for line in lines:
        logger.warning(line)
    with open(Path(run_dir) / CHANGES_LOG, "a") as f:
        f.write("\n".join(lines) + "\n")


def inputs_record(corpus_meta: dict) -> list[dict] | None:
    """The corpus' input identities to save in a state (``None``: the cache did not record them)."""
    inputs = corpus_meta.get("inputs")
    return None if inputs is None else [dict(i) for i in inputs]


def _check_corpus_files(saved: dict, cfg, run_dir: Path, info: DistInfo | None) -> None:
    """:func:`_check_inputs` on the corpus files as they are now, on rank 0 only (it may hash files: once, not once
    per rank); the other ranks get its verdict (:func:`~biomjepa.train.distributed.broadcast_object`) and raise its
    refusal, in its words."""
    from ..data.shards import corpus_inputs

    if info is None or not info.enabled:
        _check_inputs(saved, corpus_inputs(cfg.data.corpus), cfg, run_dir)
        return
    error, verdict = None, None
    if info.is_main:
        try:
            _check_inputs(saved, corpus_inputs(cfg.data.corpus), cfg, run_dir)
        except Exception as err:  # said to the other ranks before it is raised here, so none waits for rank 0
            error, verdict = err, (isinstance(err, ValueError), str(err))
    verdict = broadcast_object(verdict, info)
    if error is not None:
        raise error
    if verdict is not None:
        refused, text = verdict
        raise ValueError(text) if refused else RuntimeError(f"rank 0 could not check the corpus files: {text}")


def _check_inputs(saved: dict, now: list[dict], cfg, run_dir: Path) -> None:
    from ..data.input_identity import size_text, to_hash
    from ..data.shards import changed_inputs

    old = saved.get("corpus", {}).get("inputs")
    if old is None:  # saved before the inputs were recorded: trusted
        return
    hashed = to_hash(old, now)
    if hashed:  # a pause of a minute or more for a large corpus: said before it starts
        logger.info("hashing %d file(s) (%s) whose modification time changed since the state was saved, to tell a "
                    "copy of them from a change", len(hashed), size_text(sum(i["size"] for i in hashed)))
    changed = changed_inputs(old, now)  # a copy (same bytes, new mtime) is the same file where a digest is recorded
    if not changed:
        return
    listed = ", ".join(changed[:5]) + (f" (+{len(changed) - 5} more)" if len(changed) > 5 else "")
    if cfg.loop.allow_resume_mismatch:
        logger.warning("allow_resume_mismatch: resuming step %s although corpus files changed: %s",
                       saved.get("step"), listed)
        return
    raise ValueError(
        f"{run_dir} holds a training state (step {saved.get('step')}) of a run on corpus files that have changed "
        f"since (another size, or another modification time and other bytes): {listed}. Resuming would continue "
        "it on other cells. Restore the files, give this run a new `run_name`/`out_dir`, or set "
        f"`allow_resume_mismatch=true` to resume anyway.{_no_digest(old, now, changed)}"
    )


def _no_digest(old: list[dict], now: list[dict], changed: list[str]) -> str:
    """Why a copy of the files is refused too, where the state recorded no digest of some of them and their size
    is the recorded one (a file of another size plainly changed: nothing to say)."""
    from ..data.input_identity import undigested

    if not undigested(old, now, changed):
        return ""
    return (" This state was saved before biomjepa recorded the files' content (sha256), so a copy of the same "
            "files (another machine, new modification times) cannot be told from a change: if they are the same "
            "files, set `allow_resume_mismatch=true`.")


def _refuse_or_warn(diff: list[dict], saved: dict, cfg, run_dir: Path) -> None:
    if not diff:
        return
    listed = "; ".join(m["text"] for m in diff)
    if not cfg.loop.allow_resume_mismatch:
        raise ValueError(
            f"{run_dir} holds a training state (step {saved.get('step')}) saved with another corpus or "
            f"model config; resuming would continue it on different settings: {listed}. Give this run a new "
            "`run_name`/`out_dir`, restore the saved settings, or set `allow_resume_mismatch=true` to resume anyway."
        )
    logger.warning("allow_resume_mismatch: resuming step %s with changed settings: %s", saved.get("step"), listed)


def _as_change(m: dict, step: int) -> dict:
    return {"step": step, "key": m["key"], "old": m["old"], "new": m["new"]}


def _is_prepared_cache(corpus) -> bool:
    return isinstance(corpus, str) and (Path(corpus) / "manifest.json").is_file()
