"""Issue 40, "nothing lost, nothing silent": each weak or bad case of the sweep, refused (or handled) where the
value enters, with a message naming the argument / flag / config key and the fix; nothing changed on a refusal.

The contract test (tests/test_contract.py) holds what these cases share; here each case is checked on its own.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pytest
from _inputs import make, symbols

import biomjepa as bj


def _digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.h5ad"
    os.mkfifo(path)
    return path


def _is_fifo(path) -> bool:
    return stat.S_ISFIFO(os.stat(path).st_mode)


def _main(argv, capsys) -> tuple[int, str]:
    from biomjepa.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


# ------------------------------------------------------------------- outputs that are not regular files (bad)
def test_atomic_path_refuses_a_fifo_and_a_link_to_one(fifo, tmp_path):
    from biomjepa._files import NotRegularFile, atomic_path

    link = tmp_path / "link.h5ad"
    link.symlink_to(fifo)
    for target in (fifo, link):
        with pytest.raises(NotRegularFile, match=r"FIFO \(named pipe\), not a regular file"), \
                atomic_path(target) as tmp:
            tmp.write_text("x")
    assert _is_fifo(fifo) and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.h5ad", "pipe.h5ad"]  # no temporary file left


@pytest.mark.parametrize("value", ["/dev/null", "/dev/zero"])
def test_output_file_refuses_a_device(value, tmp_path):
    import argparse

    from biomjepa.cli.types import output_file

    if not os.path.exists(value):
        pytest.skip(f"no {value} here")
    with pytest.raises(argparse.ArgumentTypeError, match="character device, not a regular file"):
        output_file(value)
    link = tmp_path / "out.h5ad"
    link.symlink_to(value)
    with pytest.raises(argparse.ArgumentTypeError, match=r"a link to '/dev/.*character device"):
        output_file(str(link))


def test_embed_into_a_fifo_or_a_non_h5ad_name_is_refused_before_any_work(fifo, tmp_path, counts_adata, capsys,
                                                                          monkeypatch):
    counts_adata.write_h5ad(tmp_path / "in.h5ad")
    before = _digest(tmp_path / "in.h5ad")
    monkeypatch.setattr(bj.tl, "embed", lambda *a, **k: pytest.fail("embedded before checking the output"))
    monkeypatch.setattr(bj.pp, "map_vocab", lambda *a, **k: pytest.fail("mapped before checking the output"))
    code, err = _main(["embed", tmp_path / "in.h5ad", fifo], capsys)
    assert code == 2 and "FIFO (named pipe), not a regular file" in err and _is_fifo(fifo)
    for name in ("OUT.zarr", "OUT.csv"):
        code, err = _main(["embed", tmp_path / "in.h5ad", tmp_path / name], capsys)
        assert code == 2 and "does not end in .h5ad" in err and "OUT.h5ad" in err
        assert not (tmp_path / name).exists()
    assert _digest(tmp_path / "in.h5ad") == before


def test_an_input_that_is_a_device_or_pipe_is_named(capsys, tmp_path):
    from biomjepa.data.files import check_h5ad_file

    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    with pytest.raises(ValueError, match=r"character device, not a regular file.*Save it to a file first"):
        check_h5ad_file("/dev/zero")
    code, err = _main(["embed", "/dev/zero", tmp_path / "out.h5ad"], capsys)
    assert code == 2 and "not a regular file" in err and "Illegal seek" not in err
    assert not (tmp_path / "out.h5ad").exists()


# ------------------------------------------------------------------------------- genes lost without a word
def test_r_make_names_spelling_is_not_dropped_without_a_word():
    """R's make.names spelling (MT.CO1 for MT-CO1) stays unmapped (mapping it would change the embeddings of data
    embedded before), but map_vocab says which genes, their share of the counts and how to map them."""
    names = ["MT.CO1", "HLA.A", "HLA.DRB1", *symbols(40)]
    X = np.ones((12, len(names)), dtype=np.float32)
    X[:, :3] = 10.0
    a = make(names, X=X)
    with pytest.warns(UserWarning, match=r"3 gene names are R's make.names spelling.*'MT.CO1'.*42.9% of the counts"
                                         r".*gene_key='symbol'") as record:
        bj.pp.map_vocab(a)
    assert any(w.filename == __file__ for w in record if "make.names" in str(w.message))
    report = a.uns["biomjepa"]["vocab"]
    assert report["n_r_names_unmapped"] == 3 and report["r_names_examples"] == ["MT.CO1", "HLA.A", "HLA.DRB1"]
    assert report["n_suffixed_unmapped"] == 0
    a.var["symbol"] = a.var_names.str.replace(".", "-", regex=False)  # the fix the warning gives
    bj.pp.map_vocab(a, gene_key="symbol")
    assert a.uns["biomjepa"]["vocab"]["count_fraction"] == 1.0


def test_lower_case_ensembl_ids_are_mapped():
    from biomjepa.data.idtable import resolve_identifiers

    res = resolve_identifiers(["ensg00000141510", "Ensg00000141510.17", "ENSG00000141510"])
    assert (res.token == res.token[2]).all() and res.token[2] >= 0 and set(res.method) == {"ensembl"}


def test_subsetting_genes_after_map_vocab_warns_and_names_the_stale_report(tiny_checkpoint):
    a = make(symbols(6000), seed=1)
    bj.pp.map_vocab(a)
    sub = a[:, :400].copy()
    with pytest.warns(UserWarning, match=r"genes changed after `bj.pp.map_vocab`.*6,000 genes.*400") as record:
        bj.tl.embed(sub, checkpoint=tiny_checkpoint, device="cpu")
    assert any("gene panel" in str(w.message) for w in record)
    assert any(w.filename == __file__ for w in record)  # the warning points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bj.pp.map_vocab(a)  # mapped as it is: no warning from the tools reading it
        bj.tl.embed(a, checkpoint=tiny_checkpoint, device="cpu")


# -------------------------------------------------------------------- AnnData layouts that ended in raw errors
def test_a_view_of_a_backed_anndata_is_refused_in_words(tmp_path, counts_adata):
    counts_adata.write_h5ad(tmp_path / "in.h5ad")
    before = _digest(tmp_path / "in.h5ad")
    backed = ad.read_h5ad(tmp_path / "in.h5ad", backed="r")
    view = backed[:10]
    with pytest.raises(ValueError, match=r"`adata` is a view of a backed AnnData.*to_memory\(\)"):
        bj.pp.map_vocab(view)
    backed.file.close()
    assert _digest(tmp_path / "in.h5ad") == before


def test_x_none_and_tokens_past_the_vocabulary_are_named(counts_adata, tiny_checkpoint):
    a = counts_adata.copy()
    bj.pp.map_vocab(a)
    none = a.copy()
    none.X = None
    with pytest.raises(ValueError, match=r"adata.X is None.*`layer=`"):
        bj.tl.embed(none, checkpoint=tiny_checkpoint, device="cpu")
    assert none.X is None and "X_biomjepa" not in none.obsm
    past = a.copy()
    past.var["biomjepa_token"] = past.var["biomjepa_token"] + 40_000
    with pytest.raises(ValueError, match=r"outside the vocabulary's indices.*map_vocab"):
        bj.tl.embed(past, checkpoint=tiny_checkpoint, device="cpu")
    assert "X_biomjepa" not in past.obsm


# ------------------------------------------------------------------------------------------------- settings
def test_settings_refuse_unknown_names_and_bad_token_budgets():
    with pytest.raises(AttributeError, match=r"no setting 'cache_dir'.*bj.settings.cachedir"):
        bj.settings.cache_dir = "/tmp/x"
    assert not hasattr(bj.settings, "cache_dir")
    for bad in (-1, 0, 0.5, "8k", True):
        with pytest.raises(ValueError, match=r"bj.settings.max_batch_tokens must be a positive integer"):
            bj.settings.max_batch_tokens = bad
    assert bj.settings.max_batch_tokens == 32_768
    with pytest.raises(ValueError, match=r"bj\.settings\.batch_size"):
        bj.settings.batch_size = 0


def test_a_read_only_setting_names_the_one_to_set():
    """Issue 46: ``bj.settings.show_progress = False`` raised Python's "property has no setter"."""
    with pytest.raises(AttributeError, match=r"bj.settings.show_progress cannot be set.*`bj.settings.progress = False`"
                                             r".*'progress'"):
        bj.settings.show_progress = False
    assert bj.settings.progress is True and bj.settings.show_progress is True


def test_an_empty_biomjepa_cache_is_unset_not_the_working_directory(monkeypatch):
    from biomjepa._settings import Settings

    monkeypatch.setenv("BIOMJEPA_CACHE", "")
    assert Settings().cachedir == Path.home() / ".cache" / "biomjepa"
    with pytest.raises(ValueError, match=r"bj\.settings\.cachedir must be a directory path"):
        bj.settings.cachedir = ""


def test_mps_where_there_is_none_is_said_in_words():
    import torch

    from biomjepa._device import resolve_device

    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        pytest.skip("MPS is available here")
    with pytest.raises(RuntimeError, match=r"device='mps' was requested but the MPS .* not available.*'cpu'"):
        resolve_device("mps")


# ------------------------------------------------------------------------------------------- checkpoint files
def test_a_binary_mode_manifest_is_read_and_exports_are_readable_by_others(tiny_checkpoint, tmp_path):
    from biomjepa.model import MANIFEST, load_checkpoint, save_checkpoint, verify_manifest

    ck = Path(shutil.copytree(tiny_checkpoint, tmp_path / "ck"))
    text = (ck / MANIFEST).read_text().replace("  ", " *")  # `sha256sum -b` writes 'HEX *NAME'
    (ck / MANIFEST).write_text(text)
    assert set(verify_manifest(ck)) == {"config.json", "model.safetensors"}
    model = load_checkpoint(ck)
    old = os.umask(0o022)
    try:
        save_checkpoint(model, tmp_path / "export")
    finally:
        os.umask(old)
    for name in ("model.safetensors", "config.json", MANIFEST):
        assert stat.S_IMODE(os.stat(tmp_path / "export" / name).st_mode) == 0o644, name


def test_a_downloaded_manifest_is_readable_by_others(http_root, tiny_checkpoint):
    from biomjepa import _pretrained
    from biomjepa.model import MANIFEST, checkpoint_sha256

    root, base = http_root
    shutil.copytree(tiny_checkpoint, root / "ck")
    old = os.umask(0o022)
    try:
        path, _ = _pretrained.resolve_checkpoint(f"{base}/ck#sha256={checkpoint_sha256(tiny_checkpoint)}")
    finally:
        os.umask(old)
    for name in ("model.safetensors", "config.json", MANIFEST):
        assert stat.S_IMODE(os.stat(Path(path) / name).st_mode) == 0o644, name


# ----------------------------------------------------------------------------------- degenerate analysis input
def test_a_constant_representation_is_refused_by_perturbation_arithmetic():
    a = ad.AnnData(np.zeros((40, 3), dtype=np.float32))
    a.obs["perturbation"] = np.repeat(["control", "A", "B", "C", "A+B", "D", "B+C", "ctrl2"], 5)
    a.obsm["X_const"] = np.ones((40, 4))
    with pytest.raises(ValueError, match=r"obsm\['X_const'\] is the same vector for every cell"):
        bj.tl.perturbation_arithmetic(a, use_rep="X_const", min_cells=2)
    assert "perturbation_arithmetic" not in a.uns


def test_a_repeated_use_reps_key_is_refused():
    a = ad.AnnData(np.zeros((30, 3), dtype=np.float32))
    a.obsm["X_pca"] = np.random.default_rng(0).normal(size=(30, 4))
    with pytest.raises(ValueError, match=r"`use_reps` lists 'X_pca' more than once"):
        bj.bench.geometry(a, use_reps=["X_pca", "X_pca"])


# -------------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize(("override", "pattern"), [
    ("run.run_name=../elsewhere", r"run.run_name='../elsewhere' must name a directory inside run.out_dir"),
    ("run.run_name=/tmp/abs", r"run.run_name='/tmp/abs' must name a directory inside run.out_dir"),
    ("data.corpus=5", r"data.corpus=5 \(int\): expected an .h5ad/.npz file"),
    ("data.corpus=[a.h5ad, 5]", r"data.corpus\[1\]=5: expected a file path"),
])
def test_training_config_places_are_checked_in_config_words(override, pattern):
    with pytest.raises(ValueError, match=pattern):
        bj.train.load_config("tiny", [override])


@pytest.fixture
def corpus_files(tmp_path, counts_adata):
    d = tmp_path / "corpus"
    d.mkdir()
    counts_adata.write_h5ad(d / "human.h5ad")
    mouse = counts_adata.copy()
    mouse.var_names = [n.capitalize() if not n.startswith("NOTAGENE") else n for n in mouse.var_names]
    mouse.write_h5ad(d / "mouse.h5ad")
    counts_adata[:0].copy().write_h5ad(d / "empty.h5ad")
    return d


def test_prepare_corpus_names_the_entry_and_the_fix_in_spec_keys(corpus_files, tmp_path):
    from biomjepa.data.shards import prepare_corpus

    d = corpus_files
    kw = {"where": "data.corpus", "cache_where": "data.cache_dir"}
    with pytest.raises(ValueError, match=r"Corpus file .*mouse.h5ad \(data.corpus\[1\]\).*set `data.corpus\[1\]."
                                         r"species: mouse`") as err:
        prepare_corpus([str(d / "human.h5ad"), str(d / "mouse.h5ad")], tmp_path / "c1", **kw)
    assert 'species="mouse"' not in str(err.value)
    with pytest.raises(ValueError, match=r"empty.h5ad \(data.corpus\[2\]\).*0 cells.*Remove the file"):
        prepare_corpus([str(d / "human.h5ad"), {"path": str(d / "mouse.h5ad"), "species": "mouse"},
                        {"path": str(d / "empty.h5ad")}], tmp_path / "c2", **kw)
    with pytest.raises(ValueError, match=r"data.corpus\[0\] and data.corpus\[1\] both name .*human.h5ad.*twice"):
        prepare_corpus([str(d / "human.h5ad"), str(d / "*.h5ad")], tmp_path / "c3", **kw)
    (tmp_path / "afile").write_text("not a directory")
    with pytest.raises(NotADirectoryError, match=r"data.cache_dir='.*afile' is a file, not a directory"):
        prepare_corpus(str(d / "human.h5ad"), tmp_path / "afile", **kw)
    assert (tmp_path / "afile").read_text() == "not a directory"


def test_a_full_disk_while_preparing_the_corpus_is_said_in_words(corpus_files, tmp_path, monkeypatch):
    from biomjepa.data import shards

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shards, "_convert", full)
    with pytest.raises(OSError, match=r"No space left to write the corpus shards in .*Free space there, or set "
                                      r"data.cache_dir") as err:
        shards.prepare_corpus(str(corpus_files / "human.h5ad"), tmp_path / "c", where="data.corpus",
                              cache_where="data.cache_dir")
    assert err.value.errno == errno.ENOSPC and "[Errno" not in str(err.value)


def test_loop_device_cuda_without_cuda_is_refused_before_the_corpus(corpus_files, tmp_path, monkeypatch):
    import torch

    from biomjepa.data import shards

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    monkeypatch.setattr(shards, "prepare_corpus", lambda *a, **k: pytest.fail("prepared the corpus first"))
    with pytest.raises(RuntimeError, match=r"loop.device=cuda was requested but CUDA is not available.*`loop.device: cpu`"):
        bj.train.pretrain("tiny", [f"data.corpus={corpus_files / 'human.h5ad'}", f"run.out_dir={tmp_path / 'runs'}",
                                   "loop.device=cuda"])
    assert not (tmp_path / "runs").exists()


def test_more_loader_workers_than_cores_are_refused_before_the_corpus(corpus_files, tmp_path, monkeypatch):
    """Issue 46: `data.num_workers` above the cores gave torch's DataLoader warning, twice, once training began.
    Refused (not lowered): the number of workers decides which cells each step sees."""
    import biomjepa.train.setup as setup

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    monkeypatch.setattr(setup, "prepare_corpus", lambda *a, **k: pytest.fail("prepared the corpus first"))
    with pytest.raises(ValueError, match=rf"data.num_workers={cores + 1} asks for {cores + 1} loader processes, but "
                                         rf"this process may use {cores} CPU core.*at most {cores}"):
        bj.train.pretrain("tiny", [f"data.corpus={corpus_files / 'human.h5ad'}", f"run.out_dir={tmp_path / 'runs'}",
                                   f"data.num_workers={cores + 1}", "loop.device=cpu", "run.steps=1"])
    assert not (tmp_path / "runs").exists()


def test_a_run_resumed_on_fewer_cores_keeps_its_loader_workers_with_a_warning(tmp_path, caplog):
    """A resumed run must keep `data.num_workers` (it decides the batches): on fewer cores it warns, not refuses."""
    import logging

    from biomjepa.train.setup import check_num_workers

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with pytest.raises(ValueError, match="at most"):
        check_num_workers(cores + 1)
    with caplog.at_level(logging.WARNING, logger="biomjepa"):
        check_num_workers(cores + 1, resuming=True)
    assert "the resumed run keeps them" in caplog.text


def test_a_species_without_orthologs_is_advised_what_its_caller_can_do(corpus_files, tmp_path):
    """Issue 46: `species="rat"` was told to "pass `orthologs=`", which tl.adapt and a corpus entry do not take."""
    from scipy import sparse

    from biomjepa.data.shards import prepare_corpus

    rng = np.random.default_rng(0)
    cells = ad.AnnData(sparse.csr_matrix(rng.poisson(1.0, size=(205, 40)).astype(np.float32) + 1))
    cells.var_names = symbols(40)
    with pytest.raises(ValueError, match=r"species='rat' has no bundled orthologs .* rename them to their human "
                                         r"symbols first, or .*`bj.pp.map_vocab\(adata, species='rat', orthologs=TABLE\)`"):
        bj.tl.adapt(cells, species="rat", out_dir=tmp_path / "ck")
    assert not (tmp_path / "ck").exists() and "biomjepa_token" not in cells.var
    with pytest.raises(ValueError, match=r"\(corpus\[0\]\): species: rat has no bundled orthologs .*rename them to "
                                         r"their human symbols first\. A corpus entry takes no ortholog table\.") as err:
        prepare_corpus([{"path": str(corpus_files / "human.h5ad"), "species": "rat"}], tmp_path / "cache")
    assert "orthologs=" not in str(err.value) and "map_vocab" not in str(err.value)


# ------------------------------------------------------------------------------------------ the command line
def test_atlas_and_graph_name_the_flags_for_a_mouse_input(corpus_files, tmp_path, tiny_checkpoint, capsys):
    mouse = corpus_files / "mouse.h5ad"
    code, err = _main(["embed", mouse, "--store", tmp_path / "s.zarr", "--checkpoint", tiny_checkpoint,
                       "--device", "cpu"], capsys)
    assert code == 1 and "--species mouse" in err and "species=" not in err and "gene_key=" not in err
    code, err = _main(["graph", mouse, "--out", tmp_path / "g", "--top-k", "4"], capsys)
    assert code == 1 and "--species mouse" in err and "species=" not in err and "species:" not in err


# ---------------------------------------------------------------------------------------------- structure
def test_the_package_has_no_import_circle():
    """No two modules of biomjepa import each other (at the top or inside a function)."""
    import ast

    root = Path(bj.__file__).parent
    mods = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in root.rglob("*.py")}
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, *([node.module] if node.module else [])])
                deps |= {t for t in (target, *(f"{target}.{a.name}" for a in node.names)) if t in mods}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in mods}
        graph[name] = deps - {name}
    modules = {n for n, p in mods.items() if p.name != "__init__.py"}
    pairs = sorted({tuple(sorted((a, b))) for a in modules for b in graph[a] & modules if a in graph[b]})
    assert pairs == []
