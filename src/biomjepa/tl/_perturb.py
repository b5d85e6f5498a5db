"""``bj.tl.perturbation_arithmetic``: do double-perturbation shifts add up from their singles? (Fig. 6d)"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from .._docs import doc_params
from ._null import quantile_bins

if TYPE_CHECKING:
    import pandas as pd
    from anndata import AnnData

logger = logging.getLogger(__name__)

SEPARATORS = ("+", "_", "|")
CONTROL_PARTS = ("ctrl", "control", "")


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of ``[..., d]`` arrays (0 where a vector is zero)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    num = (a * b).sum(-1)
    den = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)


def parse_perturbations(labels, control: str, sep: str | None = None,
                        ignored: dict | None = None) -> tuple[dict, dict, str | None]:
    """Split condition labels into singles ``{gene: label}`` and doubles ``{label: (a, b)}``.

    With ``sep=None`` the first of ``'+'``, ``'_'``, ``'|'`` occurring in a non-control label is
    used. Spaces around a part are dropped (``'A + B'`` is ``A`` and ``B``). A part equal to the control label,
    ``'ctrl'``, ``'control'`` or empty is ignored, so ``'A+ctrl'`` and ``'A+'`` are the single ``A``. Labels with
    more than two genes, one gene twice (``'A+A'``), no gene, or a single already read from another label (``'A'``
    and ``'A+'``: the first label, in order, is used) are left out, each with the reason in ``ignored``.
    """
    labels = [str(x) for x in labels if str(x) != control]
    if sep is None:
        sep = next((s for s in SEPARATORS if any(s in x for x in labels)), None)
    singles, doubles = {}, {}
    for lab in labels:
        parts = [p.strip() for p in (lab.split(sep) if sep else [lab])]  # "A + B" is the double of A and B
        parts = [p for p in parts if p not in (control, *CONTROL_PARTS)]
        if len(parts) == 1 and parts[0] not in singles:
            singles[parts[0]] = lab
        elif len(parts) == 2 and parts[0] != parts[1]:
            doubles[lab] = (parts[0], parts[1])
        elif ignored is not None:
            ignored[lab] = (f"is the single {parts[0]!r} of {singles[parts[0]]!r} again" if len(parts) == 1 else
                            "names one gene twice" if len(parts) == 2 else
                            f"names {len(parts)} genes" if parts else "names no gene")
    return singles, doubles, sep


def random_pairs(
    a: str, b: str, singles: list[str], bins: Mapping[str, int], n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """``n`` random single pairs ``(a', b')`` with ``bin(a') = bin(a)``, ``bin(b') = bin(b)``.

    Singles without a bin (absent from ``bins``: no matching covariate) are replaced by any
    single. Pairs are unordered, ``a' ≠ b'`` and ``{a', b'} ≠ {a, b}``; they are drawn with
    replacement from the admissible pairs. When no admissible pair exists, both bins widen to
    ``|bin' − bin| ≤ r`` for ``r = 1, 2, …``. Returns index arrays into ``singles`` and ``r``.
    """
    s = np.asarray(singles, dtype=object)
    bv = np.array([bins.get(x, -1) for x in singles])
    top = max([*bins.values(), 0])
    for radius in range(top + 1):
        ca = np.ones(len(s), bool) if a not in bins else (bv >= 0) & (np.abs(bv - bins[a]) <= radius)
        cb = np.ones(len(s), bool) if b not in bins else (bv >= 0) & (np.abs(bv - bins[b]) <= radius)
        ia, ib = np.meshgrid(np.flatnonzero(ca), np.flatnonzero(cb), indexing="ij")
        ia, ib = ia.ravel(), ib.ravel()
        same = ((s[ia] == a) & (s[ib] == b)) | ((s[ia] == b) & (s[ib] == a))
        ok = (ia != ib) & ~same
        if ok.any():
            pick = rng.integers(0, int(ok.sum()), size=n)
            return ia[ok][pick], ib[ok][pick], radius
    raise ValueError(f"No admissible random pair for double ({a}, {b}); need more singles.")


def _check_finite(X: np.ndarray, use_rep: str) -> None:
    """Refuse a representation with NaN/Inf (one such row would skew every mean it enters), as ``bench`` does,
    and a constant one: every shift is then zero and each cosine 0/0, which no number stands for."""
    bad = ~np.isfinite(X).all(axis=1) if X.ndim == 2 else np.ones(1, dtype=bool)
    if X.ndim != 2 or bad.any():
        raise ValueError(
            f"obsm[{use_rep!r}] must be a finite 2-D array; {int(bad.sum())} row(s) hold NaN or Inf (first rows "
            f"{np.flatnonzero(bad)[:5].tolist()}). Recompute the representation, or subset to finite cells first."
        )
    if len(X) and (X[0] == X).all():
        raise ValueError(
            f"obsm[{use_rep!r}] is the same vector for every cell (a constant representation): every shift from the "
            "controls is zero and every cosine 0/0, undefined. Check how it was computed (e.g. an untrained or "
            "collapsed model), or pass `use_rep=` another representation."
        )


@doc_params
def perturbation_arithmetic(
    adata: AnnData,
    *,
    perturbation_key: str = "perturbation",
    control: str = "control",
    use_rep: str = "X_biomjepa",
    sep: str | None = None,
    n_random: int = 200,
    n_cells: int | None = None,
    n_controls: int | None = None,
    min_cells: int = 3,
    expression_layer: str | None = None,
    target_expression: Mapping[str, float] | None = None,
    n_bins: int = 5,
    random_state: int = 0,
    mod: str | None = None,
    key_added: str = "perturbation_arithmetic",
    copy: bool = False,
) -> AnnData | None:
    """Additivity of double-perturbation displacements in any representation.

    ``δ_p`` is the mean representation of perturbation ``p``'s cells minus the mean of the
    controls. For each measured double ``(a, b)`` whose singles are both measured,
    ``C_ab = cos(δ_ab, δ_a + δ_b)``. Its null replaces ``(a, b)`` by ``n_random`` random single
    pairs ``(a', b')`` (drawn with replacement among admissible pairs, never ``{a, b}`` itself)
    with ``a'`` in the same expression bin as ``a`` and ``b'`` as ``b``. The matching covariate of
    a single is the mean log-normalized expression of its target gene in the control cells (from
    ``expression_layer``, default ``X``, which must hold log-normalized values), or
    ``target_expression[gene]`` when given (e.g. from a full-transcriptome reference when the
    target is not measured). Singles are split into ``n_bins`` quantile bins of it (widened to
    neighbouring bins when a bin holds no admissible pair, recorded per double). Singles with
    no covariate (target not measured, not supplied) are replaced by uniformly random singles,
    with a warning; ``null_matched`` in the table records this. The observed cosines and the
    per-double random means are compared by a two-sided paired Wilcoxon signed-rank test.

    Parameters
    ----------
    adata
        AnnData with a representation in ``obsm[use_rep]`` and condition labels in ``obs``, or a
        MuData whose modality ``mod`` holds them (and receives the results).
    perturbation_key
        ``obs`` column with condition labels (``'A'``, ``'A+B'``, controls); cells without a label
        (NaN) are dropped, with a warning saying how many.
    control
        Label of the control cells.
    use_rep
        ``obsm`` key of the representation (BioM-JEPA, PCA, scVI, ...).
    sep
        Separator of double labels; ``None`` detects ``'+'``, ``'_'`` or ``'|'``.
    n_random
        Random single pairs per double.
    n_cells
        Cells sampled per condition (seeded; ``None`` = all). The paper uses 24.
    n_controls
        Control cells sampled once and shared (``None`` = all). The paper uses 128.
    min_cells
        Conditions with fewer cells are dropped (warning); fewer controls is an error.
    expression_layer
        Layer with log-normalized expression for the matching covariate (default ``X``).
    target_expression
        Optional ``{gene: mean expression}`` overriding/supplying the covariate.
    n_bins
        Quantile bins of the covariate over the singles.
    random_state
        Seed of the cell sampling and random pairs.
    {mod}
    key_added
        ``uns`` key. A key holding another tool's results is refused before any work (the error names
        a free key); this tool's own earlier results under it are replaced whole.
    {copy}

    Returns
    -------
    ``None`` or a copy (``copy=True``), with (for a MuData, in its modality ``.mod[mod]``)

    ``.uns[key_added]["table"]``
        DataFrame per double: ``double``, ``a``, ``b``, ``observed``, ``random_mean``,
        ``random_sd``, ``n_random``, ``beats_random``, ``null_matched`` (``both``/``partial``/``none``),
        ``bin_widening`` (0 = exact bins; ``r`` = bins widened by ``r`` for lack of admissible pairs).
    ``.uns[key_added]["summary"]``
        dict: ``n_doubles``, ``n_beating``, ``wilcoxon_statistic``, ``wilcoxon_pvalue``,
        ``mean_observed``, ``mean_random``, ``skipped_doubles``.
    ``.uns[key_added]["params"]``
        ``tool`` (``"bj.tl.perturbation_arithmetic"``), all parameters, the separator used and the matching
        covariate per single.
    """
    from .._checks import check_int
    from ..data.owners import marker
    from ..data.resolved import resolve, store
    from ._utils import labels_or_drop

    n_random, min_cells, n_bins = check_int("n_random", n_random), check_int("min_cells", min_cells), check_int("n_bins", n_bins)
    n_cells, n_controls = check_int("n_cells", n_cells, none_ok=True), check_int("n_controls", n_controls, none_ok=True)
    random_state = check_int("random_state", random_state, low=0, example=0)
    r = resolve(adata, "perturbation_arithmetic", key_added, "perturbation_arithmetic", mod=mod, copy=copy,
                counts=False)  # reads no counts: the representation and the labels
    target = r.target
    _check_keys(target, use_rep, perturbation_key, n_random)
    labels, labelled = labels_or_drop(target, perturbation_key, what="the perturbation arithmetic")
    labels = np.where(labelled, labels, None)  # a missing label never becomes a 'nan' condition
    X = np.asarray(target.obsm[use_rep], dtype=np.float64)
    _check_finite(X, use_rep)
    rng = np.random.default_rng(random_state)
    ctrl_rows = np.flatnonzero(labels == control)
    if len(ctrl_rows) < max(min_cells, 2):
        raise ValueError(
            f"Found {len(ctrl_rows)} control cells labelled {control!r} in obs[{perturbation_key!r}]; "
            f"need at least {max(min_cells, 2)}. Pass `control=` the control label."
        )
    singles, doubles, evaluable, used_sep = _conditions(labels, labelled, control, sep, min_cells)

    ctrl = _sample(ctrl_rows, n_controls, rng)
    mu0 = X[ctrl].mean(axis=0)
    conds = list(singles.values()) + list(evaluable)
    delta = {c: X[_sample(np.flatnonzero(labels == c), n_cells, rng)].mean(axis=0) - mu0 for c in conds}
    covar = _covariates(target, list(singles), ctrl, expression_layer, target_expression)
    table = _score(evaluable, singles, delta, covar, n_random, n_bins, rng)
    summary = _summary(table, sorted(set(doubles) - set(evaluable)))
    store(r, {"table": table, "summary": summary, "params": {
        **marker("perturbation_arithmetic"),
        "perturbation_key": perturbation_key, "control": control, "use_rep": use_rep, "sep": used_sep,
        "n_random": n_random, "n_cells": n_cells, "n_controls": n_controls, "min_cells": min_cells,
        "expression_layer": expression_layer or "X", "n_bins": n_bins, "random_state": random_state,
        "n_control_cells_used": len(ctrl), "covariate": {k: float(v) for k, v in covar.items()},
        "null": "random single pairs matched on quantile bins of target-gene mean expression in controls",
    }})
    return r.adata if copy else None


def _check_keys(target, use_rep: str, perturbation_key: str, n_random: int) -> None:
    if use_rep not in target.obsm:
        raise KeyError(
            f"adata.obsm[{use_rep!r}] not found (have {list(target.obsm)}). Run `bj.tl.embed` or e.g. `sc.pp.pca` first."
        )
    if perturbation_key not in target.obs:
        raise KeyError(f"adata.obs[{perturbation_key!r}] not found; pass `perturbation_key=`.")
    if n_random < 1:
        raise ValueError(f"n_random must be >= 1, got {n_random}.")


def _warn_other_separators(singles: dict, sep) -> None:
    """Singles whose label holds another of :data:`SEPARATORS` may be doubles written differently: say so."""
    odd = sorted(lab for lab in singles.values() if any(s in lab for s in SEPARATORS if s != sep))
    if odd:
        warnings.warn(
            f"{len(odd)} condition(s) hold a separator other than {sep!r} and are read as single genes: {odd[:5]}. "
            "If they are doubles, write every label with one separator, or pass `sep=`; if they are gene names "
            "(e.g. 'HLA_A'), ignore this.",
            UserWarning,
            stacklevel=4,
        )


def _conditions(labels, labelled, control: str, sep, min_cells: int):
    """Singles, doubles and the doubles whose two singles were measured, from the cells' labels (≥ ``min_cells``)."""
    counts = {str(lab): int(c) for lab, c in zip(*np.unique(labels[labelled], return_counts=True))}
    few = sorted(lab for lab, c in counts.items() if c < min_cells and lab != control)
    if few:
        warnings.warn(f"Conditions with fewer than min_cells={min_cells} cells are dropped: {few}.", stacklevel=3)
    ignored = {}
    singles, doubles, used_sep = parse_perturbations([k for k in counts if k not in few], control, sep, ignored)
    if ignored:
        said = "; ".join(f"{lab!r} {why}" for lab, why in list(ignored.items())[:5]) + ("; …" if len(ignored) > 5 else "")
        warnings.warn(f"{len(ignored)} condition(s) are left out ({said}): only singles ('A') and doubles of two "
                      f"different genes ('A{used_sep or '+'}B') enter the arithmetic. Relabel their cells to use them.",
                      UserWarning, stacklevel=3)
    _warn_other_separators(singles, used_sep)
    evaluable = {d: ab for d, ab in doubles.items() if ab[0] in singles and ab[1] in singles}
    if not evaluable:
        raise ValueError(
            f"No double perturbation with both singles measured (found {len(doubles)} doubles, "
            f"{len(singles)} singles, separator {used_sep!r}). Check `sep=`, `control=` and `min_cells=`."
        )
    if len(singles) < 3:
        raise ValueError(f"Need at least 3 singles to draw random pairs; found {len(singles)}.")
    return singles, doubles, evaluable, used_sep


def _sample(rows: np.ndarray, n: int | None, rng) -> np.ndarray:
    if n is None or len(rows) <= n:
        return rows
    return np.sort(rng.choice(rows, n, replace=False))


def _covariates(adata, singles, ctrl, layer, override) -> dict[str, float]:
    """Mean log-normalized target-gene expression in control cells, per single (NaN if unknown)."""
    if layer is not None and layer not in adata.layers:
        raise KeyError(f"Layer {layer!r} not found; available layers: {list(adata.layers)}.")
    M = adata.X if layer is None else adata.layers[layer]
    var = {g: i for i, g in enumerate(adata.var_names)}
    Mc = M[ctrl]
    out = {}
    for g in singles:
        if override is not None and g in override:
            out[g] = float(override[g])
        elif g in var:
            out[g] = float(np.asarray(Mc[:, var[g]].mean()))
        else:
            out[g] = np.nan
    missing = [g for g, v in out.items() if not np.isfinite(v)]
    if missing:
        warnings.warn(
            f"{len(missing)}/{len(out)} single(s) have no measured target gene ({missing[:10]}"
            f"{'…' if len(missing) > 10 else ''}); their random replacements are unmatched. Pass "
            "`target_expression=` to match them.", stacklevel=3,
        )
    return out


def _score(evaluable, singles, delta, covar, n_random, n_bins, rng) -> pd.DataFrame:
    import pandas as pd

    from .._progress import progress_bar

    names = list(singles)
    finite = {g: v for g, v in covar.items() if np.isfinite(v)}
    bins = dict(zip(finite, quantile_bins(np.array(list(finite.values())), n_bins).tolist())) if finite else {}
    D = np.stack([delta[singles[g]] for g in names])  # [S, d]
    rows = []
    for lab, (a, b) in progress_bar(evaluable.items(), desc="doubles"):
        obs = float(cosine(delta[lab], delta[singles[a]] + delta[singles[b]]))
        ia, ib, radius = random_pairs(a, b, names, bins, n_random, rng)
        null = cosine(delta[lab][None, :], D[ia] + D[ib])
        n_matched = int(a in bins) + int(b in bins)
        rows.append((lab, a, b, obs, float(null.mean()), float(null.std(ddof=1)) if n_random > 1 else 0.0,
                     n_random, obs > null.mean(), ("none", "partial", "both")[n_matched], radius))
    cols = ["double", "a", "b", "observed", "random_mean", "random_sd", "n_random", "beats_random",
            "null_matched", "bin_widening"]
    return pd.DataFrame(rows, columns=cols)


def _summary(table: pd.DataFrame, skipped: list[str]) -> dict:
    from scipy.stats import wilcoxon

    diff = (table["observed"] - table["random_mean"]).to_numpy()
    stat = pval = np.nan
    if len(table) >= 2 and np.any(diff != 0):
        w = wilcoxon(table["observed"], table["random_mean"], alternative="two-sided")
        stat, pval = float(w.statistic), float(w.pvalue)
    else:
        warnings.warn("The paired Wilcoxon test needs >= 2 doubles with nonzero differences; not run.", stacklevel=3)
    return {
        "n_doubles": len(table), "n_beating": int(table["beats_random"].sum()),
        "wilcoxon_statistic": stat, "wilcoxon_pvalue": pval, "test": "two-sided paired Wilcoxon signed-rank",
        "mean_observed": float(table["observed"].mean()), "mean_random": float(table["random_mean"].mean()),
        "skipped_doubles": skipped,
    }
