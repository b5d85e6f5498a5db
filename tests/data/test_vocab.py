"""The bundled vocabulary, identifier tables and orthologs."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from importlib import resources

import numpy as np
import pandas as pd
import pytest

from biomjepa.data.idtable import (
    classify,
    clean_names,
    looks_like_positions,
    resolve_identifiers,
    resolve_symbols,
)
from biomjepa.data.vocab import Vocab, id_maps, mouse_orthologs


def test_default_vocab():
    v = Vocab.default()
    assert v is Vocab.default()  # cached
    assert v.size == len(v) == 19264
    assert v.symbols.dtype == object
    assert v.symbols[0] == "A1BG"
    assert v.hash == hashlib.sha256("\n".join(v.symbols).encode()).hexdigest()[:16]
    assert "19264" in repr(v) and v.hash in repr(v)


def test_index_of_vectorised():
    v = Vocab.default()
    idx = v.index_of(["TP53", "NOTAGENE", "A1BG", "tp53"])
    assert idx.dtype == np.int64
    assert idx.tolist() == [17226, -1, 0, -1]
    assert v.index_of_upper(["C1ORF112"]).tolist() == [v.index_of(["C1orf112"])[0]]


def test_vocab_rejects_duplicates():
    with pytest.raises(ValueError, match="unique"):
        Vocab(["A", "B", "A"])


def test_id_maps():
    v, maps = Vocab.default(), id_maps()
    tp53 = v.index_of(["TP53"])[0]
    assert maps["ensembl"].lookup(["ENSG00000141510", "ENSG00000000000"]).tolist() == [tp53, -1]
    assert maps["entrez"].lookup(["7157"]).tolist() == [tp53]
    assert maps["alias"].lookup(["BMAL1"]).tolist() == v.index_of(["ARNTL"]).tolist()  # current symbol
    # mitochondrial duplicates (MT-X__chrM) never take the identifiers of MT-X
    assert maps["entrez"].lookup(["4508"]).tolist() == v.index_of(["MT-ATP6"]).tolist()


def test_aliases_exclude_ambiguous_and_vocab_symbols():
    alias = id_maps()["alias"]
    assert alias.lookup(["2F1", "12-LOX", "10q23del"]).tolist() == [-1, -1, -1]  # ambiguous
    upper_vocab = {s.upper() for s in Vocab.default().symbols}
    assert not any(k.upper() in upper_vocab for k in alias.keys)


def test_mouse_orthologs():
    orth = mouse_orthologs()
    assert orth["Gcg"] == "GCG" and orth["mt-Nd1"] == "MT-ND1"
    assert orth.index.is_unique and orth.is_unique


def test_bundled_files_small():
    files = [f for f in resources.files("biomjepa._data").iterdir() if f.is_file()]
    assert {"vocab.txt", "gene_ids.tsv.gz", "orthologs_mouse_human_1to1.tsv.gz", "ATTRIBUTION.md"} <= {
        f.name for f in files
    }
    assert sum(len(f.read_bytes()) for f in files) < 2_000_000


def test_classify_and_positions():
    names = clean_names(["TP53", "ENSG00000141510.17", "7157", None, "nan", " ACTB "])
    assert classify(names).tolist() == ["symbol", "ensembl", "entrez", "missing", "missing", "symbol"]
    assert looks_like_positions(clean_names([str(i) for i in range(5)]))
    assert looks_like_positions(clean_names(["1", "2", "3"]))
    assert not looks_like_positions(clean_names(["7157", "2597"]))


def test_resolve_rules():
    v = Vocab.default()
    names = ["TP53", "ENSG00000111640.15", "60", "BMAL1", "2F1", "C1ORF112", "XYZ"]
    res = resolve_identifiers(names, id_type="entrez")
    expected = [*v.index_of(["TP53", "GAPDH", "ACTB", "ARNTL"]).tolist(), -1, v.index_of(["C1orf112"])[0], -1]
    assert res.token.tolist() == expected
    assert res.method.tolist() == ["official", "ensembl", "entrez", "alias", "", "official", ""]
    assert res.id_type == "mixed"
    auto = resolve_identifiers(names)  # all-digit names are ambiguous unless id_type="entrez"
    assert auto.token[2] == -1 and auto.kind[2] == "numeric"
    assert np.array_equal(np.delete(auto.token, 2), np.delete(res.token, 2))


def test_alias_does_not_duplicate_official():
    res = resolve_identifiers(["BHLHE40", "DEC1"])  # DEC1 is an alias of BHLHE40 and its own gene
    assert res.token.tolist() == [Vocab.default().index_of(["BHLHE40"])[0], -1]


def test_import_is_light():
    code = (
        "import sys, biomjepa, biomjepa.pp, biomjepa.data.vocab, biomjepa.data.idtable;"
        "print(sorted(m for m in ('torch', 'scanpy', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------- case folding
def test_case_folding_never_guesses_between_symbols():
    vocab = Vocab(["ABC1", "Abc1", "TP53"])  # the bundled vocabulary has no such pair
    token, method = resolve_symbols(pd.Series(["abc1", "tp53", "Abc1"]), vocab)
    assert token.tolist() == [-1, 2, 1] and method.tolist() == ["", "case", "official"]
    assert vocab.upper_ambiguous(["abc1", "tp53"]).tolist() == [True, False]
