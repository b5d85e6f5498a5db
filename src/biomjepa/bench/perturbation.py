"""Perturbation-response probe: control-cell embedding + perturbation identity → perturbed expression."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from .._docs import doc_params
from ._mlp import fit_mlp
from ._utils import DEFAULT_SEEDS, frame, get_rep, progress, rows
from .baselines import resolve_reps

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)


def perturbation_split(
    conditions: Sequence[str], *, control: str = "control", sep: str = "+", unseen_frac: float = 0.25,
    combo_frac: float = 1 / 3, split_seed: int = 0,
) -> dict[str, list[str]]:
    """Which perturbations are trained on and which are held out as unseen.

    Singles (no ``sep``) and combinations are sorted; ``default_rng(split_seed)`` picks
    ``max(1, round(unseen_frac · n_single))`` unseen singles and ``max(1, round(combo_frac · n_combo))``
    unseen combinations (none when a category has fewer than two members). The split is fixed across the
    training seeds; everything else is trained on.

    Parameters
    ----------
    conditions
        Perturbation labels of the cells (controls included).
    control
        Control label.
    sep
        Separator of combination labels (``"A+B"``).
    unseen_frac
        Fraction of singles held out.
    combo_frac
        Fraction of combinations held out.
    split_seed
        Seed of the split.

    Returns
    -------
    ``{"train": [...], "unseen_single": [...], "unseen_combo": [...]}`` (sorted lists).
    """
    perts = sorted({str(c) for c in conditions} - {control})
    singles = [p for p in perts if sep not in p]
    combos = [p for p in perts if sep in p]
    rng = np.random.default_rng(split_seed)

    def pick(items: list[str], frac: float) -> list[str]:
        if len(items) < 2:
            return []
        n = max(1, round(frac * len(items)))
        return sorted(rng.choice(items, size=n, replace=False).tolist())

    unseen_single, unseen_combo = pick(singles, unseen_frac), pick(combos, combo_frac)
    held = set(unseen_single) | set(unseen_combo)
    return {"train": [p for p in perts if p not in held], "unseen_single": unseen_single, "unseen_combo": unseen_combo}


def _sample_controls(rng: np.random.Generator, n: int, n_ctrl: int, k: int) -> np.ndarray:
    """``[n, k]`` control indices, each row a uniform k-subset (without replacement; with it if k > n_ctrl)."""
    if k > n_ctrl:
        return rng.integers(0, n_ctrl, size=(n, k))
    out = [rng.random((m, n_ctrl)).argpartition(k - 1, axis=1)[:, :k] for m in np.diff(np.r_[0:n:1024, n])]
    return np.concatenate(out) if out else np.zeros((0, k), dtype=int)


def response_scores(mu_ctrl: np.ndarray, mu: np.ndarray, mu_hat: np.ndarray, cell_sq_err: np.ndarray) -> dict[str, float]:
    """Response metrics over a set of perturbations.

    Parameters
    ----------
    mu_ctrl
        ``[G]`` mean control expression.
    mu
        ``[P, G]`` observed mean expression per perturbation.
    mu_hat
        ``[P, G]`` predicted mean expression per perturbation.
    cell_sq_err
        ``[n_cells]`` per-cell mean squared error of the cell-level predictions.

    Returns
    -------
    ``mse_lfc`` (mean over perturbations × genes of (Δ̂ − Δ)², Δ = μ − μ₀), ``mse_expr`` (mean per-cell
    squared error of predicted vs observed perturbed cells), ``pearson_lfc`` (Pearson over the
    concatenated Δ), ``top50_response`` (overlap of the 50 largest |Δ| and |Δ̂| genes) and
    ``sign_agreement`` (fraction of the 50 largest |Δ| genes whose predicted sign matches).
    """
    d, dh = mu - mu_ctrl, mu_hat - mu_ctrl
    n = min(50, d.shape[1])
    top, top_hat = np.argsort(-np.abs(d), axis=1, kind="stable")[:, :n], np.argsort(-np.abs(dh), axis=1, kind="stable")[:, :n]
    a, b = d.ravel(), dh.ravel()
    return {
        "mse_lfc": float(((dh - d) ** 2).mean()),
        "mse_expr": float(cell_sq_err.mean()),
        "pearson_lfc": float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan"),
        "top50_response": float(np.mean([len(np.intersect1d(x, y)) / n for x, y in zip(top, top_hat)])),
        "sign_agreement": float(np.mean(np.sign(np.take_along_axis(dh, top, 1)) == np.sign(np.take_along_axis(d, top, 1)))),
    }


def _design(pert: np.ndarray, genes: list[str], sep: str, control: str) -> np.ndarray:
    pos = {g: i for i, g in enumerate(genes)}
    H = np.zeros((len(pert), len(genes)))
    for i, p in enumerate(pert):
        for g in [] if p == control else p.split(sep):
            H[i, pos[g]] = 1.0
    return H


def _one_run(Zc, Y, pert, ctrl, split, genes, k, seed, sep, control, fit_kw) -> list[tuple[str, dict]]:
    rng = np.random.default_rng(seed)
    H = _design(pert, genes, sep, control)
    tr_cells = np.flatnonzero(np.isin(pert, split["train"]))
    inputs = np.hstack([Zc[_sample_controls(rng, len(pert), len(Zc), k)].mean(1), H])
    perm = rng.permutation(tr_cells)
    n_val = max(1, round(0.1 * len(perm)))
    pert_cols = np.arange(Zc.shape[1], inputs.shape[1])
    predict = fit_mlp(inputs, Y, np.sort(perm[n_val:]), np.sort(perm[:n_val]), seed=seed, zero_init_cols=pert_cols, **fit_kw)
    mu_ctrl = Y[ctrl].mean(0, dtype=np.float64)
    out = []
    strata = {"all": split["unseen_single"] + split["unseen_combo"], "unseen_single": split["unseen_single"], "unseen_combo": split["unseen_combo"]}
    for name, perts in strata.items():
        if not perts:
            continue
        mu, mu_hat, sq = [], [], []
        for p in perts:
            cells = np.flatnonzero(pert == p)
            pred = predict(inputs[cells])
            mu.append(Y[cells].mean(0, dtype=np.float64))
            mu_hat.append(pred.mean(0))
            sq.append(((pred - Y[cells]) ** 2).mean(1))
        out.append((name, response_scores(mu_ctrl, np.array(mu), np.array(mu_hat), np.concatenate(sq))))
    return out


@doc_params
def perturbation(
    adata: AnnData,
    *,
    use_reps: Sequence[str] | str = ("X_biomjepa", "X_pca"),
    perturbation_key: str = "perturbation",
    control: str = "control",
    sep: str = "+",
    expr_layer: str | None = None,
    shots: Sequence[int] = (1, 5, 9),
    seeds: Sequence[int] = DEFAULT_SEEDS,
    split_seed: int = 0,
    unseen_frac: float = 0.25,
    combo_frac: float = 1 / 3,
    hidden: Sequence[int] = (512, 512),
    max_epochs: int = 30,
    patience: int = 5,
    baselines: Sequence[str] | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "lognorm"] = "counts",
    library_size_key: str | None = None,
) -> pd.DataFrame:
    """Predict perturbed expression from a frozen control-cell embedding and the perturbation identity.

    Protocol. Every perturbed cell is one example. Its input concatenates (i) the mean embedding of
    ``k`` control cells drawn uniformly without replacement (``default_rng(seed)``; embeddings
    standardized with the control cells' mean and s.d.) and (ii) a multi-hot encoding of the perturbed
    genes (a combination ``"A+B"`` = ``A`` + ``B``). The first-layer weights of the multi-hot columns
    start at zero, so a gene never perturbed in training contributes nothing and an unseen combination of
    seen genes is the sum of its parts. The target is the cell's log-normalized expression. The split
    (:func:`perturbation_split`, ``split_seed``) holds out whole perturbations: ``unseen_frac`` of the
    singles and ``combo_frac`` of the combinations; 10 % of the training cells drive early stopping.
    Each unseen perturbation's predicted mean is the mean prediction over its cells (each with its own
    control draw); Δ is taken against the mean of all control cells. The split is stored in
    ``df.attrs["split"]``.

    Parameters
    ----------
    adata
        AnnData of one perturbation screen. Not modified, except for the baseline keys written when
        ``baselines`` is given.
    use_reps
        ``obsm`` keys to score (only the control cells' embeddings are used).
    perturbation_key
        ``obs`` column with the perturbation label (``control`` for controls, ``"A+B"`` for combinations).
    control
        Control label.
    sep
        Separator of combination labels.
    expr_layer
        Layer holding log-normalized expression (None: X).
    shots
        Control cells averaged per example (Top-k).
    seeds
        Control-sampling and training seeds.
    split_seed
        Seed of the unseen-perturbation split.
    unseen_frac
        Fraction of single perturbations held out.
    combo_frac
        Fraction of combinations held out.
    hidden
        MLP hidden widths.
    {max_epochs}
    {patience}
    {baselines}
    {layer_baselines}

    Returns
    -------
    Tidy table ``task, rep, setting, seed, metric, value`` with ``task="perturbation"``,
    ``setting="top{k}"`` and metrics ``{mse_lfc, mse_expr, pearson_lfc, top50_response,
    sign_agreement}_{all, unseen_single, unseen_combo}`` (a stratum is absent when empty).
    """
    from scipy import sparse

    from .._checks import check_int, check_ints, check_number

    shots, seeds, hidden = check_ints("shots", shots), check_ints("seeds", seeds, low=0), check_ints("hidden", hidden)
    max_epochs, patience = check_int("max_epochs", max_epochs), check_int("patience", patience)
    unseen_frac = check_number("unseen_frac", unseen_frac, low=0, high=1)
    combo_frac = check_number("combo_frac", combo_frac, low=0, high=1)
    reps = resolve_reps(adata, use_reps, baselines, layer, use_raw=use_raw, input=input,
                        library_size_key=library_size_key)
    if perturbation_key not in adata.obs:
        raise KeyError(f"obs[{perturbation_key!r}] not found; pass `perturbation_key=` the column with perturbation labels.")
    pert = adata.obs[perturbation_key].astype(str).to_numpy()
    ctrl = pert == control
    if ctrl.sum() < 1:
        raise ValueError(f"no control cells: obs[{perturbation_key!r}] has no {control!r} entries; pass `control=`.")
    split = perturbation_split(pert, control=control, sep=sep, unseen_frac=unseen_frac, combo_frac=combo_frac, split_seed=split_seed)
    if not split["train"] or not (split["unseen_single"] or split["unseen_combo"]):
        raise ValueError(f"need at least two single perturbations or combinations to hold some out; split: {split}.")
    Y = adata.layers[expr_layer] if expr_layer is not None else adata.X
    # float32, as the MLP regresses it (a float64 copy of the whole matrix would double the memory)
    Y = Y.astype(np.float32).toarray() if sparse.issparse(Y) else np.asarray(Y, dtype=np.float32)
    genes = sorted({g for p in set(pert[~ctrl]) for g in p.split(sep)})
    fit_kw = dict(hidden=tuple(hidden), max_epochs=max_epochs, patience=patience)
    records = []
    for r in reps:
        Z = get_rep(adata, r)
        mu, sd = Z[ctrl].mean(0), Z[ctrl].std(0)
        Zc = (Z[ctrl] - mu) / np.where(sd > 0, sd, 1.0)
        for k, seed in progress([(k, s) for k in shots for s in seeds], desc=f"perturbation {r}"):
            for stratum, m in _one_run(Zc, Y, pert, ctrl, split, genes, int(k), int(seed), sep, control, fit_kw):
                records += rows("perturbation", r, f"top{k}", int(seed), {f"{n}_{stratum}": v for n, v in m.items()})
    df = frame(records)
    df.attrs["split"] = split
    return df
