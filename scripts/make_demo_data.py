"""Build the bundled demo dataset and the held-out cell lists (run from the repo root).

Held-out split (never used for pretraining the bundled model, used for its evaluation):
50% of each cell type of Baron 2016 human pancreas (``cell_type1``) and of the 10x sorted PBMCs
(``sorted_celltype``), drawn with ``numpy.random.default_rng(0)``. The demo dataset is the Baron
held-out half with raw counts (MIT-licensed source: PyPI ``came`` 0.1.13 sample data).

Gene names: the source spells symbols as R's ``make.names`` does, ``-`` written ``.`` (``HLA.A`` for
``HLA-A``). ``bj.pp.map_vocab`` leaves 75 such names unmapped and warns about them; 53 more (``NKX2.2``,
``KRTAP5.1``, ...) are also former symbols (aliases) and map through those. The demo ships the symbols: every
name that the package's own R-spelling check (:func:`biomjepa.data.idtable.r_names`) recognises, a vocabulary
symbol once ``.`` is read as ``-``, is renamed to that symbol, whether or not an alias maps it already (128
names; two aliases pointed elsewhere, ``KRTAP10.9`` to KRTAP10-11 and ``KRTAP16.1`` to KRTAP17-1, both without
a count in these cells). Every other name is kept as the source spells it (readthroughs such as
``ABHD14A.ACY1`` are not vocabulary genes). ``var["original_name"]`` keeps the source's spelling of the
renamed genes (categorical, missing for the others: a full column of 20,125 names would add 0.5 MB of HDF5
string heap to a 5.2 MB file). The renaming leaves cells, counts and ``obs`` as they were.

    python scripts/make_demo_data.py            # rebuild all three files from ../shared/data/scrna
    python scripts/make_demo_data.py --check    # rebuild the demo in memory, compare it with the bundled file
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd

SHARED = Path("../shared/data/scrna")
OUT = Path("src/biomjepa/datasets/_data")
DEMO = "pancreas_baron_demo.h5ad"
SOURCE = "Baron et al. 2016 (GSE84133), via PyPI came 0.1.13 sample data (MIT)"


def held_out(labels, seed: int = 0, frac: float = 0.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    keep = np.zeros(len(labels), dtype=bool)
    for lab in sorted(set(labels)):
        idx = np.flatnonzero(labels == lab)
        n = int(np.ceil(frac * len(idx))) if len(idx) > 1 else 1
        keep[rng.choice(idx, size=n, replace=False)] = True
    return keep


def symbols_for_r_names(var_names) -> pd.Index:
    """``var_names`` with each R ``make.names`` spelling of a vocabulary symbol replaced by that symbol.

    The names are those the package's own check (:func:`~biomjepa.data.idtable.r_names`, what
    ``bj.pp.map_vocab`` warns about) recognises, asked of every name rather than only of the unmapped ones:
    an R-spelt name that an alias maps (``NKX2.2``) is renamed too, so the file holds no R spelling that
    the check knows and no alias can land a name on another gene than its spelling says.
    """
    from biomjepa.data.idtable import clean_names, r_names

    var_names = pd.Index(var_names, dtype=object)
    names = clean_names(var_names)
    flagged = r_names(names, np.full(len(names), -1))  # as if nothing were mapped: every R spelling
    fixed = np.asarray(var_names, dtype=object).copy()
    fixed[flagged] = names[flagged].str.replace(".", "-", regex=False).to_numpy()
    out = pd.Index(fixed, dtype=object)
    if not out.is_unique:
        dup = out[out.duplicated()].tolist()
        raise ValueError(f"renaming R spellings would duplicate var names: {dup[:10]}")
    return out


def build_demo(baron: ad.AnnData) -> ad.AnnData:
    """The held-out half of the Baron file, with raw float32 counts and the genes' symbols."""
    mask = held_out(baron.obs["cell_type1"].astype(str).to_numpy())
    demo = baron[mask].copy()
    demo.obs = demo.obs[["cell_type1", "donor"]].rename(columns={"cell_type1": "cell_type"})
    original = pd.Index(demo.var_names, dtype=object)
    symbols = symbols_for_r_names(original)
    renamed = np.where(symbols != original, np.asarray(original, dtype=object), None)
    demo.var = pd.DataFrame({"original_name": pd.Categorical(renamed)}, index=symbols)
    demo.uns = {"source": SOURCE}
    demo.X = demo.X.astype(np.float32)
    return demo


def check(demo: ad.AnnData) -> None:
    """The rebuilt demo equals the bundled file (cells, counts, obs, var)."""
    bundled = ad.read_h5ad(OUT / DEMO)
    assert (demo.obs_names == bundled.obs_names).all() and (demo.var_names == bundled.var_names).all()
    assert (
        demo.obs.equals(bundled.obs) and demo.var.equals(bundled.var) and dict(demo.uns) == dict(bundled.uns)
    )
    assert (demo.X != bundled.X).nnz == 0 and demo.X.dtype == bundled.X.dtype
    print(f"{OUT / DEMO}: rebuilt equal")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--check", action="store_true", help="compare a rebuild with the bundled demo; write nothing"
    )
    args = p.parse_args()
    baron = ad.read_h5ad(SHARED / "baron2016_pancreas_2142cells_raw.h5ad")
    demo = build_demo(baron)
    renamed = int(demo.var["original_name"].notna().sum())
    if args.check:
        check(demo)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    demo.write_h5ad(OUT / DEMO, compression="gzip")
    Path(OUT / "heldout_baron2016_pancreas.txt").write_text("\n".join(demo.obs_names) + "\n")
    pbmc = ad.read_h5ad(SHARED / "pbmc_sorted_2140cells_raw.h5ad", backed="r")
    pmask = held_out(pbmc.obs["sorted_celltype"].astype(str).to_numpy())
    Path(OUT / "heldout_pbmc_sorted.txt").write_text("\n".join(pbmc.obs_names[pmask]) + "\n")
    print(
        f"demo: {demo.n_obs} cells, {renamed} R spellings renamed to their symbols; PBMC sorted held out: {pmask.sum()}"
    )


if __name__ == "__main__":
    main()
