"""Build the compact gene-identifier resources bundled in ``src/biomjepa/_data``.

Run from the repository root (re-runnable; output is deterministic)::

    python scripts/build_idtable.py [--priors ../shared/data/priors]

Writes

``vocab.txt``
    The 19,264 scFoundation symbols, one per line, line number = vocabulary index.
``gene_ids.tsv.gz``
    ``identifier, kind, index`` with kind ∈ {ensembl, entrez, alias}: every identifier maps to
    exactly one vocabulary index. Ensembl IDs shared by several vocabulary genes are kept only when
    the ID is the sole Ensembl ID of exactly one of them; aliases listed in
    ``gene_alias_ambiguous.tsv.gz``, aliases pointing to several genes and aliases equal
    (case-insensitively) to a vocabulary symbol are dropped. Current official symbols that differ
    from the (older) vocabulary symbol are stored as aliases. ``MT-X__chrM`` duplicates share
    identifiers with ``MT-X``; identifiers go to ``MT-X``.
``orthologs_mouse_human_1to1.tsv.gz``
    ``mouse, human`` symbols of the one-to-one orthologs.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "biomjepa" / "_data"


def _write_tsv_gz(df: pd.DataFrame, path: Path) -> None:
    # mtime=0 keeps the bytes reproducible
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as fh:
        fh.write(df.to_csv(sep="\t", index=False, lineterminator="\n").encode())


def _base_index(symbols: pd.Series, vocab: pd.Index) -> np.ndarray:
    """Vocabulary index of each symbol, ``MT-X__chrM`` collapsed onto ``MT-X``."""
    base = symbols.str.split("__").str[0]
    idx = vocab.get_indexer(base)
    return np.where(idx >= 0, idx, vocab.get_indexer(symbols))


def build_ensembl(ids: pd.DataFrame, vocab: pd.Index) -> pd.DataFrame:
    ens = ids[ids.kind == "ensembl_gene_id"].copy()
    ens["index"] = _base_index(ens.vocab_symbol, vocab)
    ens = ens.drop_duplicates(["identifier", "index"])
    n_ids = ens.groupby("index").identifier.transform("size")  # Ensembl IDs per gene
    n_genes = ens.groupby("identifier")["index"].transform("size")  # genes per Ensembl ID
    unique = ens[n_genes == 1]
    shared = ens[(n_genes > 1) & (n_ids == 1)]  # the ID is this gene's only Ensembl ID
    shared = shared[shared.groupby("identifier")["index"].transform("size") == 1]
    out = pd.concat([unique, shared])
    print(
        f"ensembl: {len(out)} ids ({len(shared)} shared ids resolved, "
        f"{ens.identifier.nunique() - len(out)} ambiguous dropped)"
    )
    return out.assign(kind="ensembl")[["identifier", "kind", "index"]]


def build_entrez(ids: pd.DataFrame, vocab: pd.Index) -> pd.DataFrame:
    ent = ids[ids.kind == "entrez_id"].copy()
    ent["index"] = _base_index(ent.vocab_symbol, vocab)
    ent = ent.drop_duplicates(["identifier", "index"])
    ent = ent[ent.groupby("identifier")["index"].transform("size") == 1]
    print(f"entrez: {len(ent)} ids")
    return ent.assign(kind="entrez")[["identifier", "kind", "index"]]


def build_alias(ids: pd.DataFrame, vocab: pd.Index, ambiguous: set[str]) -> pd.DataFrame:
    al = ids[ids.kind.isin(["alias_symbol", "current_symbol"])].copy()
    al["index"] = _base_index(al.vocab_symbol, vocab)
    al = al.dropna(subset=["identifier"])
    al = al[al.identifier.str.len() > 0].drop_duplicates(["identifier", "index"])
    vocab_upper = set(vocab.str.upper())
    keep = ~al.identifier.isin(ambiguous) & ~al.identifier.str.upper().isin(vocab_upper)
    al = al[keep]
    al = al[al.groupby("identifier")["index"].transform("size") == 1]
    print(f"alias: {len(al)} unambiguous aliases")
    return al.assign(kind="alias")[["identifier", "kind", "index"]]


def build_orthologs(path: Path) -> pd.DataFrame:
    orth = pd.read_csv(path, dtype=str)
    orth = orth[orth["human.homology.type"] == "ortholog_one2one"]
    orth = orth.rename(columns={"gene.name": "mouse", "human.gene.name": "human"})[["mouse", "human"]]
    orth = orth.dropna().drop_duplicates()
    orth = orth[~orth.mouse.duplicated(keep=False) & ~orth.human.duplicated(keep=False)]
    print(f"orthologs: {len(orth)} 1:1 pairs")
    return orth.sort_values("mouse").reset_index(drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--priors", type=Path, default=ROOT.parent / "shared" / "data" / "priors")
    args = parser.parse_args()
    priors = args.priors

    v = pd.read_csv(priors / "OS_scRNA_gene_index.19264.tsv", sep="\t", dtype={"gene_name": str})
    assert (v["index"].to_numpy() == np.arange(len(v))).all() and v.gene_name.is_unique
    vocab = pd.Index(v.gene_name)
    ids = pd.read_csv(priors / "gene_ids.tsv.gz", sep="\t", dtype=str, keep_default_na=False)
    ambiguous = set(pd.read_csv(priors / "gene_alias_ambiguous.tsv.gz", sep="\t", dtype=str).alias)

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "vocab.txt").write_text("\n".join(vocab) + "\n")
    table = pd.concat(
        [build_ensembl(ids, vocab), build_entrez(ids, vocab), build_alias(ids, vocab, ambiguous)]
    )
    _write_tsv_gz(table.astype({"index": np.int64}), OUT / "gene_ids.tsv.gz")
    _write_tsv_gz(
        build_orthologs(priors / "orthologs_human_mouse_1to1.csv"), OUT / "orthologs_mouse_human_1to1.tsv.gz"
    )
    for f in sorted(OUT.iterdir()):
        print(f"{f.name}: {f.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
