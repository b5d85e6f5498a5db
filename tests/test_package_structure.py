"""The scanpy API contract for every public ``pp``/``tl``/``pl`` function (as scanpy's own test)."""

from __future__ import annotations

import inspect

import pytest

import biomjepa as bj

FUNCS = [(mod, name, getattr(getattr(bj, mod), name)) for mod in ("pp", "tl", "pl") for name in getattr(bj, mod).__all__]


@pytest.mark.parametrize(("mod", "name", "func"), FUNCS, ids=[f"{m}.{n}" for m, n, _ in FUNCS])
def test_signature_contract(mod, name, func):
    params = list(inspect.signature(func).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert len(positional) <= 3, f"{mod}.{name} takes more than 3 positional parameters"
    assert params[0].name in ("adata", "data"), f"{mod}.{name} must take adata first"
    names = {p.name: p for p in params}
    if mod in ("pp", "tl"):
        for key in ("copy", "key_added"):
            assert key in names, f"{mod}.{name} lacks `{key}`"
            assert names[key].kind is inspect.Parameter.KEYWORD_ONLY, f"{mod}.{name}: `{key}` must be keyword-only"
        assert "AnnData | None" in str(inspect.signature(func).return_annotation)
    else:
        assert "ax" in names and "show" in names, f"{mod}.{name} must take ax= and show="


@pytest.mark.parametrize(("mod", "name", "func"), FUNCS, ids=[f"{m}.{n}" for m, n, _ in FUNCS])
def test_numpy_docstring(mod, name, func):
    doc = inspect.getdoc(func) or ""
    assert "Parameters\n----------" in doc, f"{mod}.{name} has no numpy-style Parameters section"
    assert "Returns\n-------" in doc, f"{mod}.{name} has no Returns section"
    documented = doc.split("Parameters\n----------")[1]
    for p in inspect.signature(func).parameters:
        assert p in documented, f"{mod}.{name}: parameter `{p}` is not documented"


TL = [(name, func) for mod, name, func in FUNCS if mod == "tl"]


@pytest.mark.parametrize(("name", "func"), TL, ids=[f"tl.{n}" for n, _ in TL])
def test_tl_reads_a_mudata_modality(name, func):
    """Every tool takes a MuData and works on its modality ``mod`` (default ``"rna"``), as muon's tools do."""
    param = inspect.signature(func).parameters.get("mod")
    assert param is not None, f"tl.{name} lacks `mod`"
    assert param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is None


# --------------------------------------------------------------------------- module boundaries
import ast  # noqa: E402
from pathlib import Path  # noqa: E402

SRC = Path(bj.__file__).resolve().parent
#: the functions of ``train`` that ``tl`` may import, one per module: programme dependencies need a training
#: state; ``tl.adapt`` continues pretraining a checkpoint on a shard of the user's cells
TL_FROM_TRAIN = (("biomjepa.train.target_errors", "programme_errors"), ("biomjepa.train.adapt", "adapt_encoder"))


def _imports(path: Path, package: str):
    """``(line, absolute module, imported name or None)`` for every import anywhere in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                yield node.lineno, module, alias.name


def _reaches_train(module: str, name: str | None) -> bool:
    full = f"{module}.{name}" if name else module
    return module == "biomjepa.train" or module.startswith("biomjepa.train.") or full == "biomjepa.train"


def test_tl_uses_train_through_one_function_only():
    """``tl`` imports from ``train`` only the public functions listed, each its module's one export (STYLE)."""
    offenders, allowed = [], []
    for path in sorted((SRC / "tl").glob("*.py")):
        for line, module, name in _imports(path, "biomjepa.tl"):
            if not _reaches_train(module, name):
                continue
            where = f"tl/{path.name}:{line}: {module} {name}"
            (allowed if (module, name) in TL_FROM_TRAIN else offenders).append(where)
    assert offenders == [], f"tl imports from train beyond {TL_FROM_TRAIN}: {offenders}"
    assert len(allowed) == len(TL_FROM_TRAIN), "an allowed import was not found: the test no longer sees tl's imports"
    import importlib

    for module, name in TL_FROM_TRAIN:
        assert importlib.import_module(module).__all__ == [name]


#: the raw-count → vocabulary → tokens steps that only ``data/`` may run on AnnData blocks
READER_STEPS = {"check_counts", "to_vocab_counts", "tokenize"}
#: modules outside ``data/`` allowed one step, and why (a stale entry fails the test)
READER_EXCEPTIONS = {
    "bench/depth.py": {"check_counts"},  # validates the whole X before thinning it; embeds via tl.embed
    "train/gene_init.py": {"tokenize"},  # normalizes prepared corpus shards (already checked, vocab space)
}


def _reader_steps(path: Path) -> set[str]:
    """Reader steps ``path`` imports from ``data.tokenize`` or calls by name."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("tokenize"):
            used |= {a.name for a in node.names} & READER_STEPS
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in READER_STEPS:
                used.add(name)
    return used


def test_one_reader_loop():
    """Only ``data/`` reads AnnData into tokens: nobody else runs check → map → tokenize, and stream.py does."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("data/"):
            continue
        steps = _reader_steps(path)
        if steps:
            found[rel] = steps
    unexpected = {k: v - READER_EXCEPTIONS.get(k, set()) for k, v in found.items()}
    assert {k: v for k, v in unexpected.items() if v} == {}, "read AnnData through biomjepa.data.stream instead"
    stale = {k for k in READER_EXCEPTIONS if k not in found}
    assert not stale, f"READER_EXCEPTIONS lists modules that no longer need an exception: {stale}"
    assert _reader_steps(SRC / "data" / "stream.py") == READER_STEPS  # the loop exists, in one place
    from biomjepa.data import anndata_source

    assert not hasattr(anndata_source, "tokenize_adata") and not hasattr(anndata_source, "iter_rows")


# --------------------------------------------------------------------------- layers (issue 23)
#: what the data layer may never import: the AnnData tools, benchmarks and training sit above it
ABOVE_DATA = ("biomjepa.pp", "biomjepa.tl", "biomjepa.pl", "biomjepa.bench", "biomjepa.train")
#: the gene graph's former homes under ``train`` (``train.graph`` stays as an alias of ``data.graph``)
TRAIN_GRAPH = ("biomjepa.train.graph", "biomjepa.train._coexp", "biomjepa.train.corpus_graph", "biomjepa._graph_programme")


def _package_of(path: Path) -> str:
    """``biomjepa.data.graph`` for ``data/graph/table.py`` and for ``data/graph/__init__.py``."""
    return ".".join(("biomjepa", *path.relative_to(SRC).parent.parts))


def _reaches(module: str, name: str | None, prefixes: tuple[str, ...]) -> bool:
    targets = (module, f"{module}.{name}") if name else (module,)
    return any(t == p or t.startswith(p + ".") for t in targets for p in prefixes)


def _offending_imports(folder: str, prefixes: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((SRC / folder).rglob("*.py")):
        for line, module, name in _imports(path, _package_of(path)):
            if _reaches(module, name, prefixes):
                found.append(f"{path.relative_to(SRC).as_posix()}:{line}: {module} {name}")
    return found


def test_data_imports_no_tools_bench_or_train():
    """``data/`` is the lowest layer: it imports nothing of ``pp``/``tl``/``pl``/``bench``/``train``."""
    assert _offending_imports("data", ABOVE_DATA) == []
    assert _offending_imports("data", ("biomjepa.data.graph",)), "the test no longer sees data's imports"


#: what the training code may never import: AnnData and the tools, plots and benchmarks of the AnnData world
ANNDATA_WORLD = ("anndata", "mudata", "scanpy", "biomjepa.pp", "biomjepa.tl", "biomjepa.pl", "biomjepa.bench")


def test_train_imports_nothing_of_the_anndata_world():
    """``train/`` is tensor world: no anndata/scanpy, no ``pp``/``tl``/``pl``/``bench`` (function-level imports
    included); the held-out probe reaches the loop as an ``on_checkpoint`` hook built in ``bench``."""
    assert _offending_imports("train", ANNDATA_WORLD) == []
    assert _offending_imports("bench", ("biomjepa.pp",)), "bench/probe.py maps the probe's genes with pp.map_vocab"
    assert not (SRC / "train" / "probe.py").exists()


def test_tl_takes_the_gene_graph_from_data():
    """``tl`` reads the gene graph from ``data.graph``, never from ``train`` or a bridge module."""
    assert _offending_imports("tl", TRAIN_GRAPH) == []
    assert _offending_imports("tl", ("biomjepa.data.graph",)), "tl/_ablate.py's graph programmes use data.graph"
    assert not (SRC / "_graph_programme.py").exists()


def test_one_gene_graph_locator():
    """One function finds and opens a saved gene graph; nobody else calls ``GeneGraph.load`` itself."""
    defs, loads = [], []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "find_graph":
                defs.append(rel)
            f = node.func if isinstance(node, ast.Call) else None
            if isinstance(f, ast.Attribute) and f.attr == "load" and isinstance(f.value, ast.Name) \
                    and f.value.id in ("GeneGraph", "NeighbourTable") and not rel.startswith("data/graph/"):
                loads.append(f"{rel}:{node.lineno}")
    assert defs == ["data/graph/locate.py"]
    assert loads == [], f"open saved graphs with biomjepa.data.graph.find_graph: {loads}"


def test_model_import_stays_below_the_tools():
    """``import biomjepa.model`` loads no ``pp``/``tl``/``pl``; ``__version__`` comes from ``_version``."""
    import subprocess
    import sys

    code = ("import sys, biomjepa.model; "
            "print(sorted(m for m in sys.modules if m.split('.')[:2] in (['biomjepa', 'pp'], ['biomjepa', 'tl'], "
            "['biomjepa', 'pl'])))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"biomjepa.model imports the AnnData tools: {out.stdout}"
    root_version = [f"{p.relative_to(SRC).as_posix()}:{line}" for p in sorted(SRC.rglob("*.py")) if p.name != "__init__.py"
                    for line, module, name in _imports(p, _package_of(p)) if module == "biomjepa" and name == "__version__"]
    assert root_version == [], f"import __version__ from biomjepa._version: {root_version}"
    assert bj.__version__ == __import__("biomjepa._version", fromlist=["__version__"]).__version__


# --------------------------------------------------------------------------- one inference loop (issue 23)
def _private_imports(path: Path, rel: str) -> list[str]:
    """Imports in module ``rel`` (its path under ``biomjepa/``) of another subpackage's private module or name.

    Private: a module or name with a leading underscore below a subpackage (``tl._embed``) or imported by
    name (``from ..tl._ablate import _null_sets``, ``from .._device import _cpu_ticks``). Dunders
    (``__main__``, ``__version__``) are not private; the root's modules (``_settings``, ``_device``...) are
    everyone's, and a subpackage may use its own private modules.
    """
    parts = Path(rel).parts
    own = parts[0] if len(parts) > 1 else None
    found = []
    for line, module, name in _imports(path, ".".join(("biomjepa", *parts[:-1]))):
        if not module.startswith("biomjepa"):
            continue
        target = [*module.split(".")[1:], *([name] if name else [])]
        sub = target[0] if target and (SRC / target[0]).is_dir() else None
        below = target[1:] if sub else target[-1:] if name else []
        if sub != own and any(p.startswith("_") and not p.startswith("__") for p in below):
            found.append(f"{rel}:{line}: {module} {name}")
    return found


def test_no_private_imports_across_subpackages(tmp_path):
    """No module imports a private (underscore) module or name of another subpackage."""
    found = [f for p in sorted(SRC.rglob("*.py")) for f in _private_imports(p, p.relative_to(SRC).as_posix())]
    assert found == [], f"import public names (e.g. biomjepa.nn.inference.embed_cells): {found}"
    cases = {  # the check sees what it forbids, and lets a subpackage use its own private modules
        ("embed/x.py", "from ..tl._embed import embed_cells"): True,
        ("embed/x.py", "from ..tl import _embed"): True,
        ("tl/x.py", "import biomjepa.train._kit"): True,
        ("tl/x.py", "from .._device import _cpu_ticks"): True,
        ("tl/x.py", "from ._ablate import _null_sets\nfrom .._device import autocast\nfrom .. import __version__"): False,
    }
    for (rel, code), flagged in cases.items():
        (tmp_path / "m.py").write_text(code + "\n")
        assert bool(_private_imports(tmp_path / "m.py", rel)) is flagged, (rel, code)


#: where cells are cut into length-sorted batches (``sorted_batches``) or padded (``collate``) outside
#: ``data/``: the one inference loop, and training, which batches and collates for gradient steps
BATCHING = {
    ("nn/inference.py", "map_cells", "sorted_batches"),  # the one inference loop
    ("nn/inference.py", "map_batches", "collate"),  # ... with each batch collated for a forward pass
    ("nn/finetune.py", "training_batches", "sorted_batches"),  # fine-tuning: shuffled training batches
    ("nn/finetune.py", "train_epoch", "collate"),  # fine-tuning: the gradient step
    ("train/inputs.py", "build_inputs", "collate"),  # pretraining: teacher and student views
}


def _batching_calls(path: Path, rel: str) -> set[tuple[str, str, str]]:
    """``(module, top-level function or Class.method, callee)`` for each call of sorted_batches/collate."""
    found = set()

    def visit(node, owner):
        for child in ast.iter_child_nodes(node):
            name = owner
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and owner is None:
                name = child.name
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and "." not in owner and \
                    isinstance(node, ast.ClassDef):
                name = f"{owner}.{child.name}"
            if isinstance(child, ast.Call):
                f = child.func
                callee = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if callee in ("sorted_batches", "collate"):
                    found.add((rel, name or "<module>", callee))
            visit(child, name)

    visit(ast.parse(path.read_text(), filename=str(path)), None)
    return found


def test_one_batched_inference_loop():
    """Batched inference over cells (length-sorted batches → collate → forward → rows back in order) exists
    once, in ``nn/inference.py``, under ``torch.inference_mode`` and ``_device.autocast``; every tool calls it."""
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if not rel.startswith("data/"):
            found |= _batching_calls(path, rel)
    assert found - BATCHING == set(), "run batched inference through biomjepa.nn.inference.map_cells/map_batches"
    assert BATCHING - found == set(), "BATCHING lists a call that no longer exists: update it"
    tree = ast.parse((SRC / "nn" / "inference.py").read_text())
    loop = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "map_cells")
    assert any("inference_mode" in ast.unparse(d) for d in loop.decorator_list)
    assert any(isinstance(n, ast.Call) and ast.unparse(n.func) == "autocast" for n in ast.walk(loop))
    tensor_world = _offending_imports("nn", ("anndata", "biomjepa.pp", "biomjepa.tl", "biomjepa.pl", "biomjepa.bench"))
    assert tensor_world == [], f"nn/ is tensor world: {tensor_world}"
    users = {"tl/_embed.py", "tl/_max_token.py", "nn/finetune.py", "bench/probe.py", "train/target_errors.py",
             "embed/run.py"}
    callers = {p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")
               if _reaches_any(p, ("biomjepa.nn.inference",))}
    assert users <= callers, f"these inference paths no longer use the loop: {users - callers}"


def _reaches_any(path: Path, prefixes: tuple[str, ...]) -> bool:
    return any(_reaches(m, n, prefixes) for _, m, n in _imports(path, _package_of(path)))


# --------------------------------------------------------------------------- command lines
#: the ``python -m`` shims: they import their command from ``biomjepa.cli`` and pass its exit code on
CLI_SHIMS = {"train/__main__.py", "embed/__main__.py", "__main__.py"}


def _cli_offences(path: Path, rel: str) -> list[str]:
    """Where ``path`` parses arguments or turns an exception into an exit code (``argparse``, ``sys.exit``,
    ``SystemExit``, ``parser.error``, or ``return <int>`` / a print in an ``except`` block)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if "argparse" in names or (isinstance(node, ast.ImportFrom) and node.module == "argparse"):
            found.append(f"{rel}:{node.lineno}: imports argparse")
        elif isinstance(node, ast.Attribute) and node.attr in ("ArgumentParser", "exit") and \
                isinstance(node.value, ast.Name) and node.value.id in ("argparse", "sys"):
            found.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id == "SystemExit" and rel not in CLI_SHIMS:
            found.append(f"{rel}:{node.lineno}: SystemExit")
        elif isinstance(node, ast.ExceptHandler):
            for inner in (n for stmt in node.body for n in ast.walk(stmt)):
                if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Constant) and \
                        type(inner.value.value) is int:
                    found.append(f"{rel}:{inner.lineno}: except ...: return {inner.value.value}")
                elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "error" \
                        and isinstance(inner.func.value, ast.Name) and "parser" in inner.func.value.id:
                    found.append(f"{rel}:{inner.lineno}: except ...: parser.error")
                elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "print":
                    found.append(f"{rel}:{inner.lineno}: except ...: print")
    return found


DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def test_only_cli_parses_arguments_and_turns_errors_into_exit_codes():
    """Issue 23: argument parsers and the exception -> exit code handler live in ``biomjepa/cli/`` only; the
    ``python -m biomjepa.train`` / ``.embed`` entry points are shims into it, and no library message names a
    command-line option (the command maps ``overwrite=True`` to its ``--overwrite``)."""
    import re

    offenders, flags = [], []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("cli/"):
            continue
        offenders += _cli_offences(path, rel)
        tree = ast.parse(path.read_text(), filename=str(path))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, DOCUMENTED) and ast.get_docstring(n)}
        for node in ast.walk(tree):  # every string but docstrings: messages, warnings, log lines
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                flags += [f"{rel}:{node.lineno}: {m}" for m in re.findall(r"(?<![\w-])--[a-z][\w-]+", node.value)]
    assert offenders == [], f"only biomjepa/cli/ may parse arguments or map errors to exit codes: {offenders}"
    assert flags == [], f"library errors name the Python argument; the CLI maps it to its option: {flags}"
    assert _cli_offences(SRC / "cli" / "errors.py", "cli/errors.py"), "the check no longer sees the one handler"
    for shim in CLI_SHIMS:
        text = (SRC / shim).read_text()
        assert "from biomjepa.cli" in text and len(text.splitlines()) <= 6, f"{shim} is not a shim into biomjepa.cli"
