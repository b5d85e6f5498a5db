"""Shared fixtures: the ../shared data directory (skip when absent), tiny checkpoints (valid and broken),
small count matrices and a local HTTP server. Plain helpers for bad-input tests are in ``_inputs.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
#: pytest-xdist (README's test command runs ``-n 2``) deals the tests out to its workers file by file: a file's
#: module fixtures (the quick GPU suite of ``test_benchmarks.py``, one torchrun store of ``embed/test_torchrun.py``)
#: are made once, in one worker. Files in :data:`XDIST_TOGETHER` share a session fixture and go to one worker
#: (the 1,074 embedded demo cells); the files of :data:`XDIST_SPREAD` are dealt out test by test (each tutorial
#: runs in a kernel of its own), and first.
XDIST_SPREAD = {"tests/test_tutorials.py"}
XDIST_TOGETHER = {"tests/nn/test_precision_accuracy.py": "tests/model/test_bundled.py"}


def pytest_configure(config):
    """Under ``-n N``, ``--dist loadgroup`` (xdist's default, ``load``, would split a file's tests over workers
    and make its module fixtures once in each)."""
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") in ("no", "load"):
        config.option.dist = "loadgroup"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks each test with its file's ``xdist_group`` (see :data:`XDIST_SPREAD`); no-op without pytest-xdist. In a
    worker, also tells xdist's own hook (which runs next and reads ``option.loadgroup``) to suffix the test ids with
    their group, as ``--dist loadgroup`` on the command line would: the controller schedules by those suffixes."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    # a worker resets option.dist; the command line's --dist (or PYTEST_ADDOPTS') stays in known_args_namespace
    if hasattr(config, "workerinput") and getattr(config.known_args_namespace, "dist", "no") in ("no", "load"):
        config.option.loadgroup = True
    spread = []
    for item in items:
        try:
            name = item.path.resolve().relative_to(config.rootpath.resolve()).as_posix()
        except ValueError:  # a test file outside the repository
            name = str(item.path)
        if name not in XDIST_SPREAD:
            item.add_marker(pytest.mark.xdist_group(XDIST_TOGETHER.get(name, name)))
        spread.append(name in XDIST_SPREAD)
    # the tutorials first (each takes minutes): the other files' groups then fill both workers to the end
    items[:] = [item for _, item in sorted(zip(spread, items), key=lambda pair: not pair[0])]


@pytest.fixture(autouse=True, scope="session")
def _few_threads():
    """Two torch threads (the two cores of CI). Under pytest-xdist (``-n N``; README's command runs ``-n 2``) the
    cores are shared: ``2 // N`` threads per worker (at least one), and the processes a test starts (kernels,
    interpreters, torchrun ranks) inherit ``OMP_NUM_THREADS`` to match."""
    import os

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        os.environ["OMP_NUM_THREADS"] = str(max(1, 2 // workers))
    try:
        import torch

        torch.set_num_threads(max(1, 2 // workers))
    except ImportError:  # pragma: no cover
        pass


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ``../shared/data``; skips the test when it is not there (fresh clone)."""
    if not SHARED.is_dir():
        pytest.skip("../shared/data not available")
    return SHARED


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> str:
    """A randomly initialised ``tiny`` checkpoint on the bundled vocabulary (seed 0)."""
    import torch

    from biomjepa.model import BiomJEPA, save_checkpoint
    from biomjepa.nn import ModelConfig

    torch.manual_seed(0)
    model = BiomJEPA(ModelConfig.preset("tiny"))
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_checkpoint(model, path, provenance={"kind": "random-init", "seed": 0})
    return str(path)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    """A valid tiny checkpoint (seed 0) and its broken variants: another vocabulary, truncated weights,
    a half-written config.json, and a path that does not exist."""
    import shutil

    import torch

    from biomjepa.model import CONFIG, WEIGHTS, BiomJEPA, save_checkpoint
    from biomjepa.nn import ModelConfig

    root = tmp_path_factory.mktemp("hardening_ckpt")
    torch.manual_seed(0)
    good = save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), root / "good")
    foreign = save_checkpoint(BiomJEPA(ModelConfig.preset("tiny", vocab_size=500)), root / "foreign_vocab")
    truncated = shutil.copytree(good, root / "truncated")
    data = (truncated / WEIGHTS).read_bytes()
    (truncated / WEIGHTS).write_bytes(data[: len(data) // 2])
    bad_json = shutil.copytree(good, root / "bad_json")
    text = (bad_json / CONFIG).read_text()
    (bad_json / CONFIG).write_text(text[: len(text) // 2])
    return {"good": str(good), "foreign_vocab": str(foreign), "truncated": str(truncated),
            "bad_json": str(bad_json), "missing": str(root / "does_not_exist")}


@pytest.fixture(scope="session")
def ckpt(checkpoints) -> str:
    """The valid checkpoint of ``checkpoints`` (a ``str``; ``tests/model`` overrides it with a ``Path``)."""
    return checkpoints["good"]


@pytest.fixture(scope="session")
def demo_embedded():
    """All 1,074 bundled pancreas cells (``bj.datasets.pancreas()``), mapped and embedded with the default model on
    the CPU in float32 at batch size 64, once per session (slow tests of the bundled model and of bf16 share it;
    read it, do not modify it)."""
    import biomjepa as bj

    adata = bj.datasets.pancreas()
    bj.pp.map_vocab(adata)
    before = bj.settings.precision
    bj.settings.precision = "fp32"
    try:
        bj.tl.embed(adata, batch_size=64, device="cpu")
    finally:
        bj.settings.precision = before
    return adata


@pytest.fixture
def counts_adata():
    """60 cells × 300 real vocabulary genes of Poisson counts (+ 20 unmapped genes)."""
    import anndata as ad
    import numpy as np
    from scipy import sparse

    from biomjepa.data.vocab import Vocab

    rng = np.random.default_rng(0)
    symbols = list(Vocab.default().symbols[1000:1300]) + [f"NOTAGENE{i}" for i in range(20)]
    lam = rng.gamma(0.3, 2.0, size=len(symbols))
    X = rng.poisson(lam, size=(60, len(symbols))).astype(np.float32)
    X[:, 0] += 1  # no empty cells
    a = ad.AnnData(sparse.csr_matrix(X))
    a.var_names = symbols
    a.obs_names = [f"cell{i}" for i in range(60)]
    a.obs["group"] = np.repeat(["a", "b", "c"], 20)
    return a


@pytest.fixture
def http_root(tmp_path, monkeypatch):
    """A local HTTP server over ``tmp_path/"www"`` → ``(root, base_url)``; the checkpoint cache is redirected to ``tmp_path``."""
    import functools
    import http.server
    import threading

    import biomjepa as bj

    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def known_dispositions():
    """SIGTERM default, SIGINT Python's KeyboardInterrupt handler, whatever was inherited; restored after.

    A suite started in the background by a non-interactive shell inherits SIGINT ignored, and the package keeps an
    inherited ignore (:mod:`biomjepa.train.signals`): tests that send themselves a signal start from known ones.
    """
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for s, h in before.items():
        signal.signal(s, h if h is not None else signal.SIG_DFL)
