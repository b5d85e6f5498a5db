"""The ``biomjepa`` command line: ``graph`` end to end, ``--help`` of every subcommand, exit codes."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import anndata as ad
import numpy as np
import pytest
from _inputs import symbols
from scipy import sparse

import biomjepa as bj
from biomjepa.cli import build_parser, main

N_GENES = 200


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two .h5ad files (150 + 100 cells) of Poisson counts over real vocabulary genes + 10 unmapped genes.

    Genes 0–19 share a latent factor, so they are coexpressed.
    """
    import anndata as ad
    from scipy import sparse

    from biomjepa.data.vocab import Vocab

    root = tmp_path_factory.mktemp("corpus")
    symbols = [str(s) for s in Vocab.default().symbols[2000 : 2000 + N_GENES]] + [f"NOTAGENE{i}" for i in range(10)]
    rng = np.random.default_rng(0)
    paths = []
    for i, n in enumerate((150, 100)):
        lam = np.tile(rng.gamma(0.5, 2.0, size=len(symbols)), (n, 1))
        lam[:, :20] *= rng.gamma(2.0, 1.0, size=(n, 1))
        X = rng.poisson(lam).astype(np.float32)
        X[:, 0] += 1  # no empty cell
        a = ad.AnnData(sparse.csr_matrix(X))
        a.var_names, a.obs_names = symbols, [f"f{i}c{j}" for j in range(n)]
        paths.append(root / f"part{i}.h5ad")
        a.write_h5ad(paths[-1])
    return [str(p) for p in paths], symbols


def _string_files(tmp_path, symbols):
    """Official-format STRING links/info files over four corpus genes (one link below 700)."""
    info = "#string_protein_id\tpreferred_name\tprotein_size\tannotation\n" + "".join(
        f"9606.P{i}\t{symbols[i]}\t100\tx\n" for i in range(4)
    )
    pairs = [(0, 1, 900), (1, 2, 800), (2, 3, 500)]
    rows = [f"9606.P{a} 9606.P{b} {s}\n9606.P{b} 9606.P{a} {s}" for a, b, s in pairs]
    links = "protein1 protein2 combined_score\n" + "\n".join(rows) + "\n"
    out = []
    for name, text in (("links.txt.gz", links), ("info.txt.gz", info)):
        with gzip.open(tmp_path / name, "wt") as fh:
            fh.write(text)
        out.append(str(tmp_path / name))
    return out


def test_graph_end_to_end(corpus, tmp_path, capsys):
    from biomjepa.data.graph import GeneGraph, paper_stats

    paths, _ = corpus
    out = tmp_path / "g"
    assert main(["graph", *paths, "--out", str(out), "--top-k", "8", "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert "250 cells in 2 shard(s)" in printed
    assert "union_nnz" in printed and "content hash" in printed and f"{paper_stats()['union_nnz']:,}" in printed
    for f in ("graph.npz", "graph.json", "coexp.npz", "coexp.json"):
        assert (out / f).is_file()
    assert (out / "corpus" / "manifest.json").is_file()  # default cache: OUT/corpus
    graph = GeneGraph.load(out)
    blocks, coexp = graph.blocks, graph.coexp
    assert blocks.n_genes == coexp.n_genes == 19264
    assert 0 < blocks.degrees().max() <= 8 and 0 < coexp.degrees().max() <= 8
    cover = np.flatnonzero(coexp.degrees() > 0)
    assert cover.min() >= 2000 and cover.max() < 2000 + N_GENES  # coexpression only among corpus genes
    meta = json.loads((out / "graph.json").read_text())["meta"]
    assert meta["seed"] == 3 and meta["string_source"].startswith("bundled") and meta["string"]["nnz"] > 0
    # same corpus and seed → same graph (the cache is reused)
    assert main(["graph", *paths, "--out", str(tmp_path / "g2"), "--cache", str(out / "corpus"),
                 "--top-k", "8", "--seed", "3"]) == 0
    assert GeneGraph.load(tmp_path / "g2").blocks.content_hash == blocks.content_hash


def test_graph_official_string_files(corpus, tmp_path, capsys):
    from biomjepa.data.graph import GeneGraph

    paths, symbols = corpus
    links, info = _string_files(tmp_path, symbols)
    out = tmp_path / "g"
    assert main(["graph", paths[0], "--out", str(out), "--string-links", links, "--string-info", info,
                 "--top-k", "4"]) == 0
    meta = GeneGraph.load(out).meta
    assert meta["string_source"] == links
    assert meta["string"] == {"nnz": 4, "genes": 3}  # 0–1 and 1–2 both ways; 2–3 is below 700


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["graph", "missing.h5ad", "--out", "x"], "argument CORPUS: no such file: 'missing.h5ad'"),
        (["graph", "{h5ad}", "--out", "x", "--string-links", "{h5ad}"], "must be given together"),
        (["graph", "{h5ad}", "--out", "x", "--top-k", "0"], "must be >= 1"),
        (["graph", "{h5ad}"], "--out"),
        (["embed", "missing.h5ad", "out.h5ad"], "argument input: no such file"),
        (["bench", "missing.h5ad"], "argument input: no such file"),
        (["train", "missing.yaml"], "no such file: 'missing.yaml'; give a YAML config file or a preset"),
        (["embed", "{dir}", "out.h5ad"], "not a file"),
    ],
)
def test_usage_errors_exit_2(argv, message, corpus, tmp_path, capsys):
    argv = [a.format(h5ad=corpus[0][0], dir=tmp_path) for a in argv]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_runtime_error_exits_1_with_message(tmp_path, capsys):
    import anndata as ad

    a = ad.AnnData(np.ones((3, 2), dtype=np.float32))
    a.var_names = ["NOTAGENE1", "NOTAGENE2"]
    a.write_h5ad(tmp_path / "in.h5ad")
    assert main(["embed", str(tmp_path / "in.h5ad"), str(tmp_path / "out.h5ad")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("biomjepa embed: error: Only 0 of 2 genes map to the vocabulary")
    assert not (tmp_path / "out.h5ad").exists()


def test_no_progress_turns_the_bars_off(tmp_path, monkeypatch):
    import anndata as ad

    import biomjepa as bj

    monkeypatch.setattr(bj.settings, "_progress", True)  # put back after the test
    a = ad.AnnData(np.ones((3, 2), dtype=np.float32))
    a.var_names = ["NOTAGENE1", "NOTAGENE2"]
    a.write_h5ad(tmp_path / "in.h5ad")
    main(["embed", str(tmp_path / "in.h5ad"), str(tmp_path / "out.h5ad")])
    assert bj.settings.progress is True  # on by default
    main(["--no-progress", "embed", str(tmp_path / "in.h5ad"), str(tmp_path / "out.h5ad")])
    assert bj.settings.progress is False


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_option_of_every_subcommand_is_explained():
    subs = _subparsers(build_parser())
    assert set(subs) == {"demo", "embed", "train", "bench", "graph", "adapt"}
    for name, sub in subs.items():
        assert sub.description, name
        for action in sub._actions:
            assert action.help and len(action.help) > 10, (name, action.dest)


@pytest.mark.parametrize("command", ["demo", "embed", "train", "bench", "graph", "adapt"])
def test_help_exits_0(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "exit codes" in capsys.readouterr().out


def test_train_presets_match_the_training_code():
    from biomjepa.cli.types import TRAIN_PRESETS
    from biomjepa.train.config import PRESETS

    assert tuple(TRAIN_PRESETS) == tuple(PRESETS)


def test_embed_output_never_follows_a_planted_symlink(counts_adata, tiny_checkpoint, tmp_path):
    """Issue 24: `biomjepa embed IN OUT.h5ad` wrote `.OUT.h5ad.<pid>.tmp.h5ad`; a symlink planted under that
    name made it overwrite a file outside the directory."""
    import os

    import anndata as ad

    shared, outside = tmp_path / "shared", tmp_path / "outside.txt"
    shared.mkdir()
    outside.write_text("precious")
    counts_adata.write_h5ad(shared / "in.h5ad")
    (shared / f".out.h5ad.{os.getpid()}.tmp.h5ad").symlink_to(outside)
    assert main(["embed", str(shared / "in.h5ad"), str(shared / "out.h5ad"), "--checkpoint", tiny_checkpoint,
                 "--device", "cpu"]) == 0
    assert outside.read_text() == "precious"
    assert ad.read_h5ad(shared / "out.h5ad").obsm["X_biomjepa"].shape[0] == counts_adata.n_obs
    umask = os.umask(0o022)
    os.umask(umask)
    assert (shared / "out.h5ad").stat().st_mode & 0o777 == 0o666 & ~umask  # not the temporary file's 0600


def test_embed_reads_lognormalized_input(counts_adata, tiny_checkpoint, tmp_path):
    import anndata as ad
    from scipy import sparse

    X = counts_adata.X.toarray().astype(np.float64)
    counts_adata.write_h5ad(tmp_path / "counts.h5ad")
    counts_adata.obs["total_counts"] = X.sum(axis=1)
    counts_adata.X = sparse.csr_matrix(np.log1p(1e4 * X / X.sum(axis=1, keepdims=True)))
    counts_adata.write_h5ad(tmp_path / "ln.h5ad")
    args = ["--checkpoint", tiny_checkpoint, "--device", "cpu"]
    assert main(["embed", str(tmp_path / "counts.h5ad"), str(tmp_path / "a.h5ad"), *args]) == 0
    assert main(["embed", str(tmp_path / "ln.h5ad"), str(tmp_path / "b.h5ad"), "--input", "lognorm",
                 "--library-size-key", "total_counts", *args]) == 0
    a, b = ad.read_h5ad(tmp_path / "a.h5ad"), ad.read_h5ad(tmp_path / "b.h5ad")
    np.testing.assert_array_equal(a.obsm["X_biomjepa"], b.obsm["X_biomjepa"])


# ------------------------------------------------- inputs that are not h5ad; `biomjepa embed X X` is atomic
@pytest.mark.parametrize("command", [["embed", "{txt}", "{out}"], ["graph", "{txt}", "--out", "{out}"]])
def test_non_h5ad_input_is_a_usage_error(tmp_path, command, capsys):
    from biomjepa.cli import main

    txt = tmp_path / "notes.txt"
    txt.write_text("these are my notes\n")
    out = tmp_path / "out.h5ad"
    with pytest.raises(SystemExit) as exit_:
        main([c.format(txt=txt, out=out) for c in command])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "notes.txt' is not an .h5ad file" in err and "write_h5ad" in err and "Traceback" not in err
    assert not out.exists()


def _input_h5ad(path: Path) -> Path:
    rng = np.random.default_rng(0)
    a = ad.AnnData(sparse.csr_matrix(rng.poisson(1.0, size=(12, 40)).astype(np.float32) + np.eye(12, 40)))
    a.var_names = symbols(40)
    a.write_h5ad(path)
    return path


def test_embed_in_place_survives_an_interrupted_write(ckpt, tmp_path, monkeypatch):
    from biomjepa.cli import main

    src = _input_h5ad(tmp_path / "x.h5ad")
    before = src.read_bytes()

    def dies_half_way(self, filename, **kw):
        Path(filename).write_bytes(b"half an h5ad")
        raise OSError("killed during the write")

    with monkeypatch.context() as m:
        m.setattr(ad.AnnData, "write_h5ad", dies_half_way)
        assert main(["embed", str(src), str(src), "--checkpoint", str(ckpt)]) == 1
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5ad"]  # no temporary file left
    assert main(["embed", str(src), str(src), "--checkpoint", str(ckpt)]) == 0
    assert ad.read_h5ad(src).obsm["X_biomjepa"].shape == (12, 64)


@pytest.mark.parametrize(("output", "message"), [
    ("{tmp}", "is a directory"),
    ("{tmp}/missing/out.h5ad", "does not exist; create"),
])
def test_embed_checks_the_output_path_before_embedding(output, message, tmp_path, capsys, monkeypatch):
    from biomjepa.cli import main

    src = _input_h5ad(tmp_path / "x.h5ad")
    monkeypatch.setattr(bj.tl, "embed", lambda *a, **k: pytest.fail("embedded before checking the output"))
    with pytest.raises(SystemExit) as exc:
        main(["embed", str(src), output.format(tmp=tmp_path)])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_embed_use_raw_reads_the_counts_in_raw_and_speaks_in_flags(counts_adata, tiny_checkpoint, tmp_path, capsys):
    """``biomjepa embed --use-raw`` (issue 30): the message for counts in .raw names the option, not use_raw=True."""
    import anndata as ad
    from scipy import sparse

    X = counts_adata.X.toarray().astype(np.float64)
    counts_adata.write_h5ad(tmp_path / "counts.h5ad")
    a = counts_adata.copy()
    a.raw = a
    a.X = sparse.csr_matrix(np.log1p(1e4 * X / X.sum(axis=1, keepdims=True)))
    a.write_h5ad(tmp_path / "in.h5ad")
    args = ["--checkpoint", tiny_checkpoint, "--device", "cpu"]
    assert main(["embed", str(tmp_path / "in.h5ad"), str(tmp_path / "o.h5ad"), *args]) == 1
    err = capsys.readouterr().err
    assert "pass --use-raw." in err and "use_raw=True" not in err and "map_vocab" not in err
    assert main(["embed", str(tmp_path / "in.h5ad"), str(tmp_path / "o.h5ad"), "--use-raw", *args]) == 0
    assert main(["embed", str(tmp_path / "counts.h5ad"), str(tmp_path / "c.h5ad"), *args]) == 0
    o, c = ad.read_h5ad(tmp_path / "o.h5ad"), ad.read_h5ad(tmp_path / "c.h5ad")
    np.testing.assert_allclose(o.obsm["X_biomjepa"], c.obsm["X_biomjepa"], rtol=1e-5, atol=1e-6)


# ------------------------------------------- issue 46: the command line speaks in flags, warnings once, plainly
def test_a_warning_is_printed_once_in_flags_without_python_source_lines(counts_adata, tiny_checkpoint, tmp_path, capsys):
    """The reads warning said `input='reads'` (and a training-corpus aside) under Python's `file:line: UserWarning`."""
    counts_adata.X = counts_adata.X * 2000  # the depths of plate-based reads (median library size > 100,000)
    counts_adata.write_h5ad(tmp_path / "reads.h5ad")
    assert main(["embed", str(tmp_path / "reads.h5ad"), str(tmp_path / "o.h5ad"), "--checkpoint", tiny_checkpoint,
                 "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "biomjepa embed: warning: X: the median library size is" in err and err.count("pass --input reads") == 1
    assert "input='reads'" not in err and "training corpus" not in err
    assert "UserWarning" not in err and ".py:" not in err and "bj.pp.map_vocab(adata, gene_key" not in err


def test_the_same_warning_raised_twice_is_said_once(capsys):
    import warnings

    from biomjepa.cli.embed import EMBED_FLAGS
    from biomjepa.cli.errors import run_command

    text = "X: reads; pass input='reads' (in a training corpus entry: counts: reads) to read them as molecules."

    def work():  # two places of the library (mapping, then embedding) warn the same
        warnings.warn(text, UserWarning, stacklevel=1)
        warnings.warn(text, UserWarning, stacklevel=1)

    assert run_command(work, prog="biomjepa embed", flags=EMBED_FLAGS) == 0
    assert capsys.readouterr().err == "biomjepa embed: warning: X: reads; pass --input reads to read them as molecules.\n"


def test_no_progress_before_embed_store_is_the_atlas(counts_adata, tiny_checkpoint, tmp_path, monkeypatch, capsys):
    """`biomjepa --no-progress embed IN --store OUT.zarr` (the documented global option) fell to the one-file parser:
    "the following arguments are required: output"."""
    from biomjepa.embed import read_atlas

    monkeypatch.setattr(bj.settings, "_progress", True)  # put back after the test
    counts_adata.write_h5ad(tmp_path / "in.h5ad")
    assert main(["--no-progress", "embed", str(tmp_path / "in.h5ad"), "--store", str(tmp_path / "s.zarr"),
                 "--checkpoint", tiny_checkpoint, "--device", "cpu"]) == 0
    assert bj.settings.progress is False
    assert read_atlas(tmp_path / "s.zarr", "in").obsm["X_biomjepa"].shape == (60, 64)
    assert "required" not in capsys.readouterr().err


def test_adapt_speaks_in_flags(counts_adata, tiny_checkpoint, tmp_path, capsys):
    """`biomjepa adapt` said `species="mouse"`, `gene_key=` (it had no --gene-key) and `bj.tl.embed(adata, checkpoint=out_dir)`."""
    args = ["--out", str(tmp_path / "ck"), "--checkpoint", tiny_checkpoint]
    mouse = counts_adata.copy()
    mouse.var_names = [n.capitalize() for n in mouse.var_names]
    mouse.write_h5ad(tmp_path / "mouse.h5ad")
    assert main(["adapt", str(tmp_path / "mouse.h5ad"), *args]) == 1
    err = capsys.readouterr().err
    assert "pass --species mouse" in err and "--gene-key COLUMN" in err
    assert "species=" not in err and "gene_key=" not in err
    ids = counts_adata.copy()  # 60 cells, genes named by position, their symbols in a column: --gene-key
    ids.var["symbol"] = list(ids.var_names)
    ids.var_names = [f"g{i}" for i in range(ids.n_vars)]
    ids.write_h5ad(tmp_path / "ids.h5ad")
    assert main(["adapt", str(tmp_path / "ids.h5ad"), "--gene-key", "symbol", *args]) == 1
    err = capsys.readouterr().err
    assert "biomjepa adapt needs at least 200 cells" in err  # the genes mapped; too few cells to learn from
    assert "`biomjepa embed IN.h5ad OUT.h5ad --checkpoint DIR`" in err and "`biomjepa embed` (the base" in err
    assert "bj.tl" not in err and "checkpoint=" not in err and "out_dir" not in err
    assert not (tmp_path / "ck").exists()


def test_python_dash_m_runs_the_command(tmp_path):
    """``python -m biomjepa`` is the ``biomjepa`` command, exit codes included (where its script is not on PATH)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(bj.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    ok = subprocess.run([sys.executable, "-m", "biomjepa", "--help"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and ok.stdout.startswith("usage: biomjepa")
    bad = subprocess.run([sys.executable, "-m", "biomjepa", "embed", str(tmp_path / "missing.h5ad")],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "missing.h5ad" in bad.stderr
