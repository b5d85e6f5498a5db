"""``bj.tl.ablate_programme``: embedding displacement after removing a gene programme (Fig. 6b)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from .._docs import doc_params
from .._settings import settings
from ..data.graph import graph_label
from ..data.owners import marker
from ..data.resolved import resolve, store
from ._null import check_null_args, count_in, expression_bins, matched_random_set, scan_gene_stats
from ._utils import case_hint, check_batch_size, labels_or_drop

if TYPE_CHECKING:
    import pandas as pd
    from anndata import AnnData

logger = logging.getLogger(__name__)

ProgrammeSpec = Sequence[str] | Mapping[str, Sequence[str]] | tuple


def displacement(z: np.ndarray, z_ablated: np.ndarray) -> np.ndarray:
    """``D_i = ‖z_i − z_i^(−B)‖₂`` for ``[n, d]`` embeddings → ``[n]``."""
    return np.linalg.norm(np.asarray(z, np.float64) - np.asarray(z_ablated, np.float64), axis=1)


def excess(d: np.ndarray, d_null: np.ndarray) -> np.ndarray:
    """``E_i = D_i − mean_k D̃_ik`` for ``d [n]`` and null displacements ``d_null [n_random, n]``."""
    return np.asarray(d, np.float64) - np.asarray(d_null, np.float64).reshape(-1, len(d)).mean(axis=0)


@doc_params
def ablate_programme(
    adata: AnnData,
    programme: ProgrammeSpec,
    *,
    groupby: str | None = None,
    matched: Mapping[str, str] | None = None,
    n_random: int = 1,
    n_cells: int = 24,
    checkpoint: str | None = None,
    graph=None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "reads", "lognorm"] = "counts",
    library_size_key: str | None = None,
    n_bins: int = 10,
    batch_size: int | None = None,
    device: str = "auto",
    random_state: int = 0,
    mod: str | None = None,
    key_added: str = "ablation",
    copy: bool = False,
) -> AnnData | None:
    """Displacement of frozen cell embeddings when a gene programme is removed, beyond matched random sets.

    For each sampled cell, the programme's genes are removed from its input (other values and the
    library size unchanged), the cell is re-embedded and ``D = ‖z − z^(−B)‖₂``. The same is done
    for ``n_random`` random gene sets matched to the programme gene by gene on mean normalized
    expression and detection frequency (``n_bins`` × ``n_bins`` quantile grid over the genes
    detected in ``adata``; never drawing a gene of any given programme; an exhausted bin widens to
    its neighbours, recorded in ``null_sets``; see :mod:`biomjepa.tl._null`), giving
    ``E = D − mean D̃``. Only
    programme genes detected in ``adata`` enter (others are reported in a warning).

    Up to ``n_cells`` cells are sampled per group (seeded). Groups with fewer cells use all of
    them (warning); groups with fewer than 2 cells are skipped (warning), unless they are a
    matched identity (error). With several programmes and ``matched={programme: group}``, the
    per-programme mean excess of the matched group's cells is compared with the mean excess of all
    other sampled cells by a two-sided paired Wilcoxon signed-rank test across programmes
    (paper Fig. 6b).

    Parameters
    ----------
    adata
        AnnData with raw counts (in memory, backed or dask-backed), after :func:`biomjepa.pp.map_vocab`,
        or a MuData (modality ``mod``, which receives the results). The data are read in two streamed
        passes (gene statistics for the null, then the sampled cells), never tokenized at once.
    programme
        A list of gene symbols, a dict ``name → symbols``, or ``("bfs", seed_gene, size)``: the
        deterministic BFS block of ``size`` genes around ``seed_gene`` in ``graph``
        (:func:`biomjepa.data.graph.bfs_programme`), named ``"bfs:{seed_gene}:{size}"``.
    groupby
        ``obs`` column of cell identities (default: all cells are one group ``"all"``); cells without
        a label (NaN) are never sampled (a warning says how many).
    matched
        ``{programme name: group}``, the identity each programme represents, declared up front.
    n_random
        Matched random sets per programme (the paper uses 1).
    n_cells
        Cells sampled per group.
    {checkpoint}
    graph
        The gene graph of a ``("bfs", seed_gene, size)`` programme: a
        :class:`~biomjepa.data.graph.GeneGraph` or a directory written by ``GeneGraph.save``
        (a training run's ``corpus/graph``). Required for graph programmes, unused otherwise.
    {layer}
    {use_raw}
    {input}
    {library_size_key}
    {n_bins_null}
    {batch_size}
    {device}
    {random_state_null}
    {mod}
    key_added
        ``uns`` key and ``obs`` column prefix; one holding another tool's results is refused before any work (the
        error names a free key), this tool's own earlier results under it are replaced whole.
    {copy_backed}

    Returns
    -------
    ``None`` or a copy (``copy=True``), with (for a MuData, in its modality ``.mod[mod]``)

    ``.obs[f"{key_added}_excess"]``
        (one programme only) per-cell excess ``E``; NaN for cells not sampled.
    ``.uns[key_added]["cells"]``
        DataFrame per sampled cell × programme: ``cell``, ``group``, ``programme``, ``n_removed``
        (programme genes present in the cell), ``displacement``, ``null_displacement``, ``excess``.
    ``.uns[key_added]["groups"]``
        DataFrame per group × programme: ``n_cells`` and mean ``displacement``,
        ``null_displacement``, ``excess``.
    ``.uns[key_added]["matched"]``
        (with ``matched``) DataFrame per programme: ``group``, ``matched_excess``, ``other_excess``.
    ``.uns[key_added]["test"]``
        (with ``matched``) dict: ``test``, ``n``, ``statistic``, ``pvalue``, ``mean_matched``, ``mean_other``.
    ``.uns[key_added]["null_sets"]``
        DataFrame: ``programme``, ``set``, ``programme_gene``, ``random_gene``, their bins, ``widened`` (Chebyshev distance).
    ``.uns[key_added]["params"]``
        ``tool`` (``"bj.tl.ablate_programme"``), all parameters (``input`` as :func:`biomjepa.tl.embed` records it),
        the genes used per programme and the genes left out.
    """

    from .._device import resolve_device
    from .._pretrained import load_model

    bs = check_batch_size(batch_size)
    n_random, n_cells, n_bins, random_state = check_null_args(n_random, n_cells, n_bins, random_state)
    r = resolve(adata, "ablate_programme", key_added, "ablation", mod=mod, copy=copy, layer=layer, use_raw=use_raw,
                input=input, library_size_key=library_size_key)  # before any work: another tool's results stay
    if r.target.n_obs == 0:
        raise ValueError("adata has no cells.")
    programmes = _resolve_programmes(programme, graph)
    groups, labelled = _groups(r.target, groupby)
    if matched is not None:
        _check_matched(matched, programmes, groups[labelled], groupby)
    plan = _plan(r.source, programmes, groups, labelled, layer=r.layer, n_cells=n_cells, n_random=n_random,
                 n_bins=n_bins, random_state=random_state, required=set((matched or {}).values()))
    dev = resolve_device(device)
    model = load_model(checkpoint)
    rows, ids = plan["rows"], plan["ids"]
    table = _ablate_all(model, r.source, rows, ids, plan["null_sets"], layer=r.layer, batch_size=bs, device=dev)
    table.insert(0, "group", np.tile(groups[rows], len(ids)))
    table.insert(0, "cell", np.tile(r.target.obs_names[rows].to_numpy(), len(ids)))
    result = {"cells": table, "groups": _group_summary(table), "null_sets": plan["null_table"]}
    if matched is not None:
        result["matched"], result["test"] = matched_test(table, matched)
    result["params"] = {
        **marker("ablate_programme"), "groupby": groupby, "matched": dict(matched) if matched else None,
        "n_random": n_random, "n_cells": n_cells, "checkpoint": model.info.get("name", "unnamed"),
        "layer": r.matrix, "graph": graph_label(graph),
        "n_bins": n_bins, "random_state": random_state, "batch_size": bs, "device": str(dev),
        "programmes": plan["programmes"], "left_out": plan["left_out"],
        "null": "mean-expression × detection quantile bins over detected genes", **r.record,
    }
    excess_column = {"_excess": _excess(r.target.n_obs, rows, table)} if len(ids) == 1 else {}
    store(r, result, obs=excess_column)
    return r.adata if copy else None


def _excess(n_obs: int, rows: np.ndarray, table: pd.DataFrame) -> np.ndarray:
    """``obs[f"{key_added}_excess"]`` of one programme: the sampled cells' excess, NaN for the others (without one, an
    earlier call's column goes: :func:`~biomjepa.data.resolved.store`)."""
    col = np.full(n_obs, np.nan)
    col[rows] = table["excess"].to_numpy()
    return col


def _plan(source, programmes, groups, labelled, *, layer, n_cells, n_random, n_bins, random_state, required) -> dict:
    """The sampled cells, the programmes' vocabulary ids and their matched random sets (seeded, one pass)."""
    from ..data.vocab import Vocab

    vocab = Vocab.default()
    mean, detection, _ = scan_gene_stats(source, layer=layer, vocab_size=vocab.size)
    observed = np.flatnonzero(detection > 0)
    ids, left_out = _programme_ids(programmes, vocab, detection)
    rng = np.random.default_rng(random_state)
    rows = _sample_cells(groups, labelled, n_cells, rng, required=required)
    bins = expression_bins(mean[observed], detection[observed], n_bins)
    null_sets, null_table = _null_sets(ids, observed, bins, n_random, rng, vocab.symbols)
    return {"rows": rows, "ids": ids, "left_out": left_out, "null_sets": null_sets, "null_table": null_table,
            "programmes": {k: [str(vocab.symbols[g]) for g in v] for k, v in ids.items()}}


def _group_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per programme × group: ``n_cells`` and the mean displacement, null displacement and excess."""
    return (
        table.groupby(["programme", "group"], sort=False)
        .agg(n_cells=("excess", "size"), displacement=("displacement", "mean"),
             null_displacement=("null_displacement", "mean"), excess=("excess", "mean"))
        .reset_index()
    )


def _resolve_programmes(programme: ProgrammeSpec, graph=None) -> dict[str, list[str]]:
    if isinstance(programme, tuple) and len(programme) == 3 and programme[0] == "bfs":
        from ..data.graph import graph_programme

        return graph_programme(*programme[1:], graph=graph)
    if isinstance(programme, str):
        raise TypeError("`programme` must be a list of genes, a dict name → genes or ('bfs', seed, size), not a string.")
    if not isinstance(programme, Mapping) and not hasattr(programme, "__iter__"):
        raise TypeError(f"`programme` must be a list of genes, a dict name → genes or ('bfs', seed, size), got {programme!r}.")
    if isinstance(programme, Mapping):
        out = {str(k): [str(g) for g in v] for k, v in programme.items()}
    else:
        out = {"programme": [str(g) for g in programme]}
    empty = [k for k, v in out.items() if not v]
    if not out or empty:
        raise ValueError(f"Empty programme(s): {empty or 'no programme given'}.")
    return out


def _groups(adata, groupby: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Group label per cell and the mask of cells that have one (NaN labels dropped with a warning)."""
    if groupby is None:
        return np.full(adata.n_obs, "all", dtype=object), np.ones(adata.n_obs, bool)
    if groupby not in adata.obs:
        raise KeyError(f"groupby={groupby!r} is not a column of adata.obs ({list(adata.obs.columns)[:10]}).")
    return labels_or_drop(adata, groupby, what="the ablation")


def _check_matched(matched, programmes, groups, groupby) -> None:
    if groupby is None:
        raise ValueError("`matched` needs `groupby` (the obs column holding the identities).")
    unknown = [p for p in matched if p not in programmes]
    if unknown:
        raise KeyError(f"`matched` names unknown programmes {unknown}; programmes are {list(programmes)}.")
    missing = sorted({g for g in matched.values() if g not in set(groups)})
    if missing:
        raise KeyError(f"`matched` groups {missing} are not in adata.obs[{groupby!r}].")


def _programme_ids(programmes, vocab, detection) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """Vocabulary ids of the programme genes detected in the data; warn about the rest."""
    ids, left_out = {}, {}
    for name, genes in programmes.items():
        idx = vocab.index_of(genes)
        ok = (idx >= 0) & (detection[np.maximum(idx, 0)] > 0)
        left_out[name] = [g for g, k in zip(genes, ok) if not k]
        ids[name] = np.unique(idx[ok])
    bad = {k: v[:10] + ([f"... {len(v)} in all"] if len(v) > 10 else []) for k, v in left_out.items() if v}
    if bad:
        warnings.warn(
            f"Programme genes not in the vocabulary or not detected in adata are left out: {bad}.", stacklevel=3
        )
    empty = [k for k, v in ids.items() if len(v) == 0]
    if empty:
        raise ValueError(
            f"Programme(s) {empty} have no gene that is both in the vocabulary and detected in adata "
            f"(unknown: {[left_out[k] for k in empty]}).{case_hint(left_out, vocab)} Check gene symbols and "
            "`bj.pp.map_vocab`."
        )
    return ids, left_out


def _sample_cells(groups: np.ndarray, labelled: np.ndarray, n_cells: int, rng, *, required: set) -> np.ndarray:
    """Up to ``n_cells`` sampled rows per group (groups in sorted order; unlabelled cells never), seeded."""
    chosen, few, skipped = [], [], []
    for g in sorted(set(groups[labelled])):
        rows = np.flatnonzero((groups == g) & labelled)
        if len(rows) < 2:
            if g in required:
                raise ValueError(f"Matched group {g!r} has {len(rows)} cell(s); at least 2 are needed.")
            skipped.append(g)
            continue
        if len(rows) < n_cells:
            few.append(f"{g} ({len(rows)})")
            chosen.append(rows)
        else:
            chosen.append(np.sort(rng.choice(rows, n_cells, replace=False)))
    if few:
        warnings.warn(f"Groups with fewer than n_cells={n_cells} cells use all of them: {few}.", stacklevel=3)
    if skipped:
        warnings.warn(f"Groups with fewer than 2 cells are skipped: {skipped}.", stacklevel=3)
    if not chosen:
        raise ValueError("No group has at least 2 cells to ablate.")
    return np.concatenate(chosen)


def _null_sets(ids, observed, bins, n_random, rng, symbols) -> tuple[dict, pd.DataFrame]:
    import pandas as pd

    sets, rows = {}, []
    pos = {int(g): i for i, g in enumerate(observed)}
    every = np.unique(np.concatenate(list(ids.values())))
    for name, prog in ids.items():
        sets[name] = []
        for k in range(n_random):
            m = matched_random_set(prog, observed, bins, rng, exclude=every)
            sets[name].append(m.genes)
            wid = {(a, b): r for a, b, r in m.widened}
            for a, b in zip(prog, m.genes):
                ba, bb = bins[pos[int(a)]], bins[pos[int(b)]]
                rows.append((name, k, str(symbols[a]), str(symbols[b]), int(ba[0]), int(ba[1]),
                             int(bb[0]), int(bb[1]), wid.get((int(a), int(b)), 0)))
    cols = ["programme", "set", "programme_gene", "random_gene", "programme_mean_bin", "programme_detection_bin",
            "random_mean_bin", "random_detection_bin", "widened"]
    table = pd.DataFrame(rows, columns=cols)
    if (table["widened"] > 0).any():
        logger.info("%d null draws came from neighbouring bins", int((table["widened"] > 0).sum()))
    return sets, table


def _ablate_all(model, adata, rows, ids, null_sets, *, layer, batch_size, device) -> pd.DataFrame:
    """Per sampled cell × programme displacement, mean null displacement and excess.

    The sampled cells ``rows`` (unique; any order) are read chunk by chunk (:func:`biomjepa.data.stream.iter_selected`);
    each chunk is embedded with and without every programme and null set, and only the per-cell
    displacements are kept.
    """
    import pandas as pd

    from .._device import cpu_threads
    from .._progress import progress_bar
    from ..data.stream import iter_selected
    from ._embed import embed_cells

    n_null = len(next(iter(null_sets.values())))
    d = {k: np.empty(len(rows)) for k in ids}
    d_null = {k: np.empty((n_null, len(rows))) for k in ids}
    n_removed = {k: np.empty(len(rows), np.int64) for k in ids}
    opts = dict(batch_size=batch_size, device=device, max_tokens=settings.max_batch_tokens)
    order = np.argsort(rows, kind="stable")  # rows come group by group; the file is read in row order
    with progress_bar(total=len(rows), desc="ablate", unit="cell") as bar, cpu_threads(device):
        for pos, cells in iter_selected(adata, rows[order], layer=layer):
            pos = order[pos]
            z = embed_cells(model, cells, **opts)
            for name, prog in ids.items():
                d[name][pos] = displacement(z, embed_cells(model, cells.drop_genes(prog), **opts))
                for k, genes in enumerate(null_sets[name]):
                    d_null[name][k, pos] = displacement(z, embed_cells(model, cells.drop_genes(genes), **opts))
                n_removed[name][pos] = count_in(cells, prog)
            bar.update(len(pos))
    parts = [
        pd.DataFrame({
            "programme": name, "n_removed": n_removed[name], "displacement": d[name],
            "null_displacement": d_null[name].mean(axis=0), "excess": excess(d[name], d_null[name]),
        })
        for name in ids
    ]
    return pd.concat(parts, ignore_index=True)


def matched_test(table: pd.DataFrame, matched: Mapping[str, str]) -> tuple[pd.DataFrame, dict]:
    """Matched-identity vs other-identity mean excess per programme, and the paired Wilcoxon test.

    ``table`` has columns ``programme``, ``group``, ``excess`` (one row per cell × programme). The
    matched value is the mean excess of the matched group's cells; the other value the mean over
    all cells of the other groups. The test is a two-sided paired Wilcoxon signed-rank test across
    programmes (``n`` = number of programmes; NaN statistic/p-value below 2 programmes).
    """
    import pandas as pd
    from scipy.stats import wilcoxon

    rows = []
    for prog, group in matched.items():
        t = table[table["programme"] == prog]
        is_m = (t["group"] == group).to_numpy()
        rows.append((prog, group, float(t["excess"][is_m].mean()), float(t["excess"][~is_m].mean())))
    res = pd.DataFrame(rows, columns=["programme", "group", "matched_excess", "other_excess"])
    test = {"test": "two-sided paired Wilcoxon signed-rank across programmes", "n": len(res),
            "statistic": np.nan, "pvalue": np.nan,
            "mean_matched": float(res["matched_excess"].mean()), "mean_other": float(res["other_excess"].mean())}
    diff = (res["matched_excess"] - res["other_excess"]).to_numpy()
    if len(res) < 2 or not np.all(np.isfinite(diff)):
        warnings.warn("The matched-identity test needs >= 2 programmes with finite excess; not run.", stacklevel=3)
    elif np.all(diff == 0):
        warnings.warn("Matched and other excess are identical for every programme; test not run.", stacklevel=3)
    else:
        w = wilcoxon(res["matched_excess"], res["other_excess"], alternative="two-sided")
        test["statistic"], test["pvalue"] = float(w.statistic), float(w.pvalue)
    return res, test
