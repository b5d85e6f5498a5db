"""``bj.tl.programme_dependencies``: directed programme dependencies ``I_{a→b}`` (Fig. 6c).

Paper (Supp. "Directed programme dependencies")::

    I_{a→b} = E_x[ε_b(x^(−a)) − ε_b(x)] − E_x[ε_b(x^(−ã)) − ε_b(x)]

with ``ε_b`` the teacher-target prediction error of target programme ``b``, ``x^(−a)`` the cell
with context programme ``a`` ablated and ``ã`` expression- and detection-matched random sets
(:mod:`biomjepa.tl._null`, mean over ``n_random`` sets per source programme).

Design (the paper leaves these open; the training code is reused for every model step):

* Data: one streamed pass (gene statistics, which cells express each programme), then only the
  sampled cells are read again (:func:`biomjepa.data.stream.gather`). The model steps run in
  ``train`` behind one function, :func:`biomjepa.train.target_errors.programme_errors`.
* One prediction unit per cell: programme ``b`` is the cell's single target block, exactly the
  training path with ``K = 1`` (:func:`biomjepa.train.inputs.build_inputs` on a
  :class:`~biomjepa.train.blocks.BlockSample`, then :class:`~biomjepa.train.jepa.JEPA` and
  :func:`~biomjepa.train.jepa.centred_targets`). Candidate block ``B`` = the programme's
  vocabulary genes; target ``T = B ∩ O(x)``; block id = lower median vocabulary index of ``B``
  (as the sampler); context ``C = O(x) \\ T``; DMT candidates ``C ∩ N^coexp_dmt_k(c)``, all
  context when empty (all context always for ``random_block`` runs). The predictor sequence has
  length 1 (other programmes are not co-predicted, so ``b``'s prediction depends only on its
  context). No minimum-context safeguard: it would put ``T`` back into the context.
* Ablation removes ``a``'s genes from the student context only; the teacher still sees every
  observed gene, so the target ``t = mean_{g∈T} h^t_g − centre`` is the same with and without
  ablation and only the prediction ``t̂`` changes. ``ε = ‖t̂ − t‖²``. Genes of ``a`` that are also
  in ``b`` are targets, hence never in the context.
* Cells: up to ``n_cells`` cells of the identity matched to the target ``b`` among those
  expressing at least one gene of ``b`` (``ε_b`` is undefined otherwise).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from .._docs import doc_params
from .._settings import settings
from ..data.owners import marker
from ..data.resolved import resolve, store
from ._null import check_null_args
from ._null import count_in as _count_in
from ._utils import check_batch_size, labels_or_drop

if TYPE_CHECKING:
    import pandas as pd
    from anndata import AnnData

logger = logging.getLogger(__name__)


def dependency_effect(base: np.ndarray, ablated: np.ndarray, null: np.ndarray) -> tuple[float, float, float]:
    """``(raw, null_effect, I)`` for one ordered pair.

    ``raw = mean_x[ε(x^(−a)) − ε(x)]``, ``null_effect = mean_k mean_x[ε(x^(−ã_k)) − ε(x)]`` and
    ``I = raw − null_effect``, from errors ``base [n]``, ``ablated [n]`` and ``null [n_random, n]``.
    """
    base = np.asarray(base, np.float64)
    raw = float(np.mean(np.asarray(ablated, np.float64) - base))
    null_eff = float(np.mean(np.asarray(null, np.float64).reshape(-1, len(base)) - base))
    return raw, null_eff, raw - null_eff


@doc_params
def programme_dependencies(
    adata: AnnData,
    programmes: Mapping[str, Sequence[str]],
    *,
    checkpoint: str | os.PathLike | dict,
    groupby: str,
    matched: Mapping[str, str],
    n_random: int = 3,
    n_cells: int = 24,
    graph=None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "reads", "lognorm"] = "counts",
    library_size_key: str | None = None,
    n_bins: int = 10,
    random_state: int = 0,
    batch_size: int | None = None,
    device: str = "auto",
    mod: str | None = None,
    key_added: str = "programme_dependencies",
    copy: bool = False,
) -> AnnData | None:
    """Directed dependency matrix ``I_{a→b}``: target-prediction error of ``b`` after ablating ``a``.

    For every ordered pair of distinct programmes, cells of the identity matched to the target
    programme ``b`` are encoded by the student with ``b``'s observed genes hidden (the target
    block) and the predictor predicts the teacher's mean state of those genes (centred), as in
    pretraining. ``ε_b = ‖t̂ − t‖²``. Ablating source programme ``a`` removes its genes from the
    student's context (the teacher target is unchanged). ``I_{a→b}`` is the mean change in
    ``ε_b`` minus the mean change for ``n_random`` random sets matched to ``a`` gene by gene on
    mean expression and detection frequency (``n_bins`` × ``n_bins`` quantile grid over genes
    detected in ``adata``, never drawing a programme gene; see :mod:`biomjepa.tl._null`).
    Positive values: ``a`` holds context for predicting ``b`` beyond the matched-random
    expectation. Descriptive only: no test is run (paper, Fig. 6c). Design details are in the
    module docstring of :mod:`biomjepa.tl._dependencies`.

    Parameters
    ----------
    {adata_counts}
    programmes
        ``{name: gene symbols}``, at least two programmes. Only genes in the vocabulary and
        detected in ``adata`` enter (others are reported in a warning).
    checkpoint
        A full training state (student, predictor, teacher, centre): a run directory (its latest
        ``checkpoints/step_*.pt``), a ``step_*.pt`` file or a loaded state dict. An inference
        export (``config.json`` + ``model.safetensors``) holds the encoder only and is refused.
    groupby
        ``obs`` column of cell identities.
    matched
        ``{programme: group}`` for every programme: the identity whose cells are used when the
        programme is the target, declared up front.
    n_random
        Matched random sets per source programme (the paper uses 3).
    n_cells
        Cells sampled per target programme.
    graph
        Gene graph for the DMT neighbourhoods (a :class:`~biomjepa.data.graph.GeneGraph` or the
        directory it was saved to). Default: the graph named by the run's config, or the run's
        corpus cache ``graph/`` directory. Unused for ``random_block`` runs.
    {layer}
    {use_raw}
    {input}
    {library_size_key}
    {n_bins_null}
    {random_state_null}
    {batch_size}
    {device}
    {mod}
    key_added
        ``uns`` key of the result. A key holding another tool's results is refused before any work (the error names
        a free key); this tool's own earlier results under it are replaced whole.
    {copy_backed}

    Returns
    -------
    ``None`` or a copy (``copy=True``), with (for a MuData, in its modality ``.mod[mod]``)

    ``.uns[key_added]["matrix"]``
        DataFrame source programme ``a`` (rows) × target programme ``b`` (columns) of ``I_{a→b}``;
        the diagonal is NaN (self pairs are not evaluated).
    ``.uns[key_added]["pairs"]``
        DataFrame per ordered pair: ``source``, ``target``, ``group``, ``n_cells``,
        ``baseline_error`` (mean ``ε_b(x)``), ``n_ablated`` (mean genes of ``a`` removed from the
        context per cell), ``raw_effect``, ``null_effect`` (mean over sets), ``null_effect_sd``
        (over sets), ``dependency`` (``I``).
    ``.uns[key_added]["cells"]``
        DataFrame per target × sampled cell: ``target``, ``cell``, ``group``, ``n_target``
        (``|T|``), ``baseline_error``.
    ``.uns[key_added]["null_sets"]``
        DataFrame of the matched random sets (as :func:`biomjepa.tl.ablate_programme`).
    ``.uns[key_added]["params"]``
        ``tool`` (``"bj.tl.programme_dependencies"``), all parameters, the genes used per programme, the block
        ids, the genes left out, the
        training step and objective of the checkpoint.
    """
    from .._device import resolve_device
    from ..train.target_errors import programme_errors  # the one function tl uses from train

    bs = check_batch_size(batch_size)
    n_random, n_cells, n_bins, random_state = check_null_args(n_random, n_cells, n_bins, random_state)
    r = resolve(adata, "programme_dependencies", key_added, "programme_dependencies", mod=mod, copy=copy, layer=layer,
                use_raw=use_raw, input=input, library_size_key=library_size_key)
    if r.target.n_obs == 0:
        raise ValueError("adata has no cells.")
    progs = _check_inputs(r.target, programmes, groupby, matched)
    dev = resolve_device(device)
    plan = _plan(r.source, r.target, progs, groupby, matched, layer=r.layer, n_cells=n_cells, n_random=n_random,
                 n_bins=n_bins, random_state=random_state)
    ids, sampled, null_sets = plan["ids"], plan["sampled"], plan["null_sets"]
    jobs = _jobs(r.source, sampled, ids, plan["block_ids"], null_sets, r.layer)
    errors, info = programme_errors(checkpoint, jobs, graph=graph, device=dev, batch_size=bs,
                                    max_tokens=settings.max_batch_tokens)
    pairs, cell_rows = _tables(errors, jobs, sampled, ids, null_sets, plan["groups"], matched, r.target.obs_names)
    matrix = pairs.pivot(index="source", columns="target", values="dependency").reindex(index=list(ids),
                                                                                          columns=list(ids))
    matrix.index.name, matrix.columns.name = "source", "target"
    store(r, {
        "matrix": matrix, "pairs": pairs, "cells": cell_rows, "null_sets": plan["null_table"],
        "params": {
            **marker("programme_dependencies"),
            "groupby": groupby, "matched": dict(matched), "n_random": n_random, "n_cells": n_cells,
            "layer": r.matrix, "n_bins": n_bins, "random_state": random_state, "batch_size": bs,
            "device": str(dev), "checkpoint": info["source"], "step": info["step"], "objective": info["objective"],
            "programmes": plan["programmes"], "block_ids": {k: int(v) for k, v in plan["block_ids"].items()},
            "left_out": plan["left_out"],
            "error": "squared L2 between predicted and centred teacher mean state of T = b ∩ observed",
            "ablation": "source genes removed from the student context; teacher target unchanged", **r.record,
        },
    })
    return r.adata if copy else None


def _plan(source, target, progs, groupby, matched, *, layer, n_cells, n_random, n_bins, random_state) -> dict:
    """Vocabulary ids and block ids of the programmes, their matched random sets and the sampled cells."""
    from ..data.vocab import Vocab
    from ._ablate import _null_sets, _programme_ids
    from ._null import expression_bins, scan_gene_stats

    vocab = Vocab.default()
    vocab_ids = {k: vocab.index_of(v) for k, v in progs.items()}
    mean, detection, hits = scan_gene_stats(
        source, layer=layer, vocab_size=vocab.size, programmes={k: v[v >= 0] for k, v in vocab_ids.items()}
    )
    observed = np.flatnonzero(detection > 0)
    ids, left_out = _programme_ids(progs, vocab, detection)
    rng = np.random.default_rng(random_state)
    bins = expression_bins(mean[observed], detection[observed], n_bins)
    null_sets, null_table = _null_sets(ids, observed, bins, n_random, rng, vocab.symbols)
    groups, labelled = labels_or_drop(target, groupby, what="the matched identities")
    sampled = {b: _sample_target_cells(hits[b], labelled & (groups == str(matched[b])), n_cells, rng, b) for b in ids}
    return {"ids": ids, "left_out": left_out, "block_ids": {k: _block_id(v) for k, v in vocab_ids.items()},
            "null_sets": null_sets, "null_table": null_table, "groups": groups, "sampled": sampled,
            "programmes": {k: [str(vocab.symbols[g]) for g in v] for k, v in ids.items()}}


def _check_inputs(adata, programmes, groupby, matched) -> dict[str, list[str]]:
    if not isinstance(programmes, Mapping) or len(programmes) < 2:
        raise TypeError("`programmes` must be a dict {name: gene symbols} with at least two programmes.")
    progs = {str(k): [str(g) for g in v] for k, v in programmes.items()}
    if any(isinstance(v, str) for v in programmes.values()) or any(not v for v in progs.values()):
        raise ValueError("Every programme must be a non-empty list of gene symbols.")
    if groupby not in adata.obs:
        raise KeyError(f"groupby={groupby!r} is not a column of adata.obs ({list(adata.obs.columns)[:10]}).")
    missing = [p for p in progs if p not in matched]
    unknown = [p for p in matched if p not in progs]
    if missing or unknown:
        raise KeyError(
            f"`matched` must name one identity for every programme: missing {missing}, unknown {unknown} "
            f"(programmes are {list(progs)})."
        )
    present = set(adata.obs[groupby].astype(str))
    absent = sorted({str(g) for g in matched.values()} - present)
    if absent:
        raise KeyError(f"`matched` groups {absent} are not in adata.obs[{groupby!r}].")
    return progs


def _block_id(vocab_ids: np.ndarray) -> int:
    """Lower median vocabulary index of the programme's vocabulary genes (the sampler's block id)."""
    genes = np.unique(vocab_ids[vocab_ids >= 0])
    return int(genes[(len(genes) - 1) // 2])


def _sample_target_cells(has, eligible_group, n_cells, rng, name) -> np.ndarray:
    """Up to ``n_cells`` rows of the matched group expressing ≥ 1 gene of the target (``has``), sorted."""
    rows = np.flatnonzero(eligible_group & has)
    if len(rows) < 2:
        raise ValueError(
            f"Target programme {name!r}: {len(rows)} cell(s) of its matched identity express any of its "
            "genes; at least 2 are needed."
        )
    if len(rows) < n_cells:
        warnings.warn(f"Target programme {name!r}: only {len(rows)} eligible cells (< n_cells={n_cells}); "
                      "all are used.", stacklevel=4)
        return rows
    return np.sort(rng.choice(rows, n_cells, replace=False))


def _jobs(adata, sampled, ids, block_ids, null_sets, layer) -> list[tuple]:
    """``(cells, target ids, block id, removals)`` per target programme: its sampled cells, read by the one reader.

    Removals: none first, then per other programme ``a`` its genes and its ``n_random`` null sets.
    """
    from ..data.stream import gather

    every = np.unique(np.concatenate(list(sampled.values())))
    cells = gather(adata, every, layer=layer)
    jobs = []
    for b, rows in sampled.items():
        removals = [np.zeros(0, np.int64)]
        for a in ids:
            if a != b:
                removals += [ids[a], *null_sets[a]]
        jobs.append((cells.subset(np.searchsorted(every, rows)), ids[b], block_ids[b], removals))
    return jobs


def _tables(errors, jobs, sampled, ids, null_sets, groups, matched, obs_names) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Errors of every target programme under every ablation → per-pair and per-cell tables."""
    import pandas as pd

    names = list(ids)
    pairs, per_cell = [], []
    k = 1 + len(null_sets[names[0]])
    for (b, rows), err, (sub, *_) in zip(sampled.items(), errors, jobs):
        base = err[0]
        per_cell.append(pd.DataFrame({"target": b, "cell": obs_names[rows].to_numpy(), "group": groups[rows],
                                      "n_target": _count_in(sub, ids[b]), "baseline_error": base}))
        for j, a in enumerate(a for a in names if a != b):
            block = err[1 + j * k : 1 + (j + 1) * k]
            raw, null_eff, dep = dependency_effect(base, block[0], block[1:])
            null_sd = float(np.std((block[1:] - base).mean(axis=1), ddof=1)) if k > 2 else float("nan")
            n_abl = float(np.mean(_count_in(sub, np.setdiff1d(ids[a], ids[b]))))
            pairs.append((a, b, str(matched[b]), len(rows), float(base.mean()), n_abl, raw, null_eff, null_sd, dep))
    cols = ["source", "target", "group", "n_cells", "baseline_error", "n_ablated", "raw_effect", "null_effect",
            "null_effect_sd", "dependency"]
    return pd.DataFrame(pairs, columns=cols), pd.concat(per_cell, ignore_index=True)
