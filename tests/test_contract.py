"""The contract of every public tool and command (issue 24, item 4).

Bad input (a wrong type, a zero or negative count, a missing key, data that are not counts, an
empty AnnData, an AnnData layout the readers cannot take: ``X=None``, token ids past the vocabulary, a
constant representation, a repeated key) gives exactly one clear exception, of the type the table names, whose message names
the argument; and the input AnnData (X, obs, var, obsm, uns and layers keys) and input files are
unchanged. Commands exit 2 (usage) or 1 (runtime) with a message naming the argument, no traceback,
and leave their input files byte for byte as they were; an output that is not a regular file (a FIFO,
``/dev/null``) or not named for what is written, and an input that cannot be read as a file (a device),
are refused before any work, and left as they were. A command's message speaks its own words: flags on
the command line (``--species mouse``, never ``species="mouse"``), config keys in training
(``run.run_name``, ``data.corpus[2].species: mouse``) (issue 40). Cases a tool does not meet yet are
``xfail(strict=True)`` with the gap named, so a fix makes them fail until the mark is removed.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import biomjepa as bj

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]


# ------------------------------------------------------------------------------------------ data
@pytest.fixture(scope="module")
def counts():
    """20 bundled pancreas cells (10 alpha, 10 beta) with raw counts, condition labels for the perturbation tools."""
    full = bj.datasets.pancreas()
    cells = np.r_[np.flatnonzero(full.obs["cell_type"] == "alpha")[:10], np.flatnonzero(full.obs["cell_type"] == "beta")[:10]]
    a = full[cells].copy()
    a.obs["cell_type"] = a.obs["cell_type"].astype(str)
    a.obs["perturbation"] = np.tile(["control", "A", "B", "C", "A+B"], 4)
    return a


@pytest.fixture(scope="module")
def prepared(counts, tiny_checkpoint):
    """``counts`` mapped and embedded (tiny checkpoint), with an ``X_pca`` representation."""
    a = counts.copy()
    bj.pp.map_vocab(a)
    bj.tl.embed(a, checkpoint=tiny_checkpoint, device="cpu")
    a.obsm["X_pca"] = np.random.default_rng(0).normal(size=(a.n_obs, 8)).astype(np.float32)
    return a


def _variant(kind: str, counts, prepared):
    if kind == "counts":
        return counts.copy()
    a = prepared.copy()
    if kind == "lognorm":
        X = a.X.toarray()
        a.X = sparse.csr_matrix(np.log1p(X / X.sum(1, keepdims=True) * 1e4).astype(np.float32))
    elif kind == "negative":
        a.X = a.X.copy()
        a.X.data[::7] *= -1
    elif kind == "empty":
        a = a[:0].copy()
    elif kind == "x-none":
        a.X = None
    elif kind == "past-vocab":
        a.var["biomjepa_token"] = a.var["biomjepa_token"].to_numpy() + 40_000
    elif kind == "constant-rep":
        a.obsm["X_pca"] = np.ones_like(a.obsm["X_pca"])
    return a


def _snapshot(a) -> dict:
    X = None if a.X is None else a.X.toarray() if sparse.issparse(a.X) else np.asarray(a.X)
    return {"X": None if X is None else X.copy(), "obs": a.obs.copy(), "var": a.var.copy(), "uns": sorted(a.uns),
            "obsm": {k: np.asarray(v).copy() for k, v in a.obsm.items()}, "layers": sorted(a.layers)}


def _assert_unchanged(a, before: dict) -> None:
    after = _snapshot(a)
    assert (after["X"] is None) == (before["X"] is None)
    if before["X"] is not None:
        np.testing.assert_array_equal(after["X"], before["X"])
    pd.testing.assert_frame_equal(after["obs"], before["obs"])
    pd.testing.assert_frame_equal(after["var"], before["var"])
    assert after["uns"] == before["uns"] and after["layers"] == before["layers"]
    assert sorted(after["obsm"]) == sorted(before["obsm"])
    for k, v in before["obsm"].items():
        np.testing.assert_array_equal(after["obsm"][k], v)


def xfail(reason: str):
    return pytest.mark.xfail(reason=reason, strict=True)


# ---------------------------------------------------------------------------------- the table
# (id, data variant, call(adata, ck), exception type, pattern naming the argument[, marks])
KW = {"device": "cpu"}
PROG = {"p": ["INS", "GCG", "SST"]}
PROGS = {"p": ["INS", "GCG", "SST"], "q": ["TTR", "PPY", "CHGA"]}
MATCHED = {"p": "beta", "q": "alpha"}


def C(id_, kind, call, exc, pattern, *marks):  # a row of the table
    return pytest.param(kind, call, exc, pattern, id=id_, marks=list(marks))


TOOL_CASES = [
    # pp.map_vocab
    C("map_vocab-not-anndata", "none", lambda a, ck: bj.pp.map_vocab(np.ones((3, 3))), TypeError, "adata"),
    C("map_vocab-gene_key-missing", "counts", lambda a, ck: bj.pp.map_vocab(a, gene_key="nope"), KeyError, "gene_key"),
    C("map_vocab-layer-missing", "counts", lambda a, ck: bj.pp.map_vocab(a, layer="nope"), KeyError, "layer"),
    C("map_vocab-species", "counts", lambda a, ck: bj.pp.map_vocab(a, species="dog"), ValueError, "species"),
    C("map_vocab-id_type", "counts", lambda a, ck: bj.pp.map_vocab(a, id_type="bogus"), ValueError, "id_type"),
    C("map_vocab-no-genes", "counts", lambda a, ck: bj.pp.map_vocab(a[:, :0].copy()), ValueError, "gene"),
    C("map_vocab-empty", "empty", lambda a, ck: bj.pp.map_vocab(a), ValueError, "empty|cells"),
    # tl.embed
    C("embed-not-anndata", "none", lambda a, ck: bj.tl.embed(np.ones((3, 3)), checkpoint=ck, **KW), TypeError, "adata"),
    C("embed-not-mapped", "counts", lambda a, ck: bj.tl.embed(a, checkpoint=ck, **KW), KeyError, "map_vocab"),
    C("embed-not-counts", "lognorm", lambda a, ck: bj.tl.embed(a, checkpoint=ck, **KW), ValueError, "counts"),
    C("embed-negative", "negative", lambda a, ck: bj.tl.embed(a, checkpoint=ck, **KW), ValueError, "negative"),
    C("embed-batch_size-0", "prepared", lambda a, ck: bj.tl.embed(a, checkpoint=ck, batch_size=0, **KW), ValueError,
      "batch_size"),
    C("embed-layer-missing", "prepared", lambda a, ck: bj.tl.embed(a, checkpoint=ck, layer="nope", **KW), KeyError,
      "layer"),
    C("embed-empty", "empty", lambda a, ck: bj.tl.embed(a, checkpoint=ck, **KW), ValueError, "cells"),
    C("embed-checkpoint-missing", "prepared", lambda a, ck: bj.tl.embed(a, checkpoint=ck + "_nothing", **KW),
      (FileNotFoundError, ValueError), "checkpoint|_nothing"),
    C("embed-device", "prepared", lambda a, ck: bj.tl.embed(a, checkpoint=ck, device="gpu9"), ValueError, "device"),
    # tl.max_token
    C("max_token-groupby-missing", "prepared", lambda a, ck: bj.tl.max_token(a, groupby="nope", checkpoint=ck, **KW),
      KeyError, "groupby|nope"),
    C("max_token-batch_size-negative", "prepared",
      lambda a, ck: bj.tl.max_token(a, checkpoint=ck, batch_size=-1, **KW), ValueError, "batch_size"),
    C("max_token-not-mapped", "counts", lambda a, ck: bj.tl.max_token(a, checkpoint=ck, **KW), KeyError, "map_vocab"),
    C("max_token-not-counts", "lognorm", lambda a, ck: bj.tl.max_token(a, checkpoint=ck, **KW), ValueError, "counts"),
    C("max_token-empty", "empty", lambda a, ck: bj.tl.max_token(a, checkpoint=ck, **KW), ValueError, "cells"),
    # tl.ablate_programme
    C("ablate-no-vocab-gene", "prepared",
      lambda a, ck: bj.tl.ablate_programme(a, ["NOTAGENE1"], checkpoint=ck, **KW), ValueError, "programme"),
    C("ablate-programme-type", "prepared", lambda a, ck: bj.tl.ablate_programme(a, 42, checkpoint=ck, **KW),
      TypeError, "programme"),
    C("ablate-n_cells-0", "prepared", lambda a, ck: bj.tl.ablate_programme(a, PROG, n_cells=0, checkpoint=ck, **KW),
      ValueError, "n_cells"),
    C("ablate-n_random-negative", "prepared",
      lambda a, ck: bj.tl.ablate_programme(a, PROG, n_random=-1, checkpoint=ck, **KW), ValueError, "n_random"),
    C("ablate-n_bins-0", "prepared", lambda a, ck: bj.tl.ablate_programme(a, PROG, n_bins=0, checkpoint=ck, **KW),
      ValueError, "n_bins"),
    C("ablate-groupby-missing", "prepared",
      lambda a, ck: bj.tl.ablate_programme(a, PROG, groupby="nope", checkpoint=ck, **KW), KeyError, "groupby|nope"),
    C("ablate-matched-unknown", "prepared",
      lambda a, ck: bj.tl.ablate_programme(a, PROG, groupby="cell_type", matched={"p": "zzz"}, checkpoint=ck, **KW),
      (ValueError, KeyError), "matched|zzz"),
    C("ablate-not-counts", "lognorm", lambda a, ck: bj.tl.ablate_programme(a, PROG, checkpoint=ck, **KW), ValueError,
      "counts"),
    C("ablate-empty", "empty", lambda a, ck: bj.tl.ablate_programme(a, PROG, checkpoint=ck, **KW), ValueError, "cells"),
    # tl.programme_dependencies (argument checks before the training state is loaded)
    C("dependencies-one-programme", "prepared",
      lambda a, ck: bj.tl.programme_dependencies(a, PROG, checkpoint=ck, groupby="cell_type", matched={"p": "beta"}),
      (TypeError, ValueError), "programmes"),
    C("dependencies-n_cells-0", "prepared",
      lambda a, ck: bj.tl.programme_dependencies(a, PROGS, checkpoint=ck, groupby="cell_type", matched=MATCHED,
                                                 n_cells=0), ValueError, "n_cells"),
    C("dependencies-n_random-0", "prepared",
      lambda a, ck: bj.tl.programme_dependencies(a, PROGS, checkpoint=ck, groupby="cell_type", matched=MATCHED,
                                                 n_random=0), ValueError, "n_random"),
    C("dependencies-groupby-missing", "prepared",
      lambda a, ck: bj.tl.programme_dependencies(a, PROGS, checkpoint=ck, groupby="nope", matched=MATCHED),
      KeyError, "groupby|nope"),
    C("dependencies-matched-missing-key", "prepared",
      lambda a, ck: bj.tl.programme_dependencies(a, PROGS, checkpoint=ck, groupby="cell_type", matched={"p": "beta"}),
      (ValueError, KeyError), "matched"),
    C("dependencies-inference-checkpoint", "prepared",
      lambda a, ck: bj.tl.programme_dependencies(a, PROGS, checkpoint=ck, groupby="cell_type", matched=MATCHED),
      ValueError, "checkpoint|training"),
    # tl.perturbation_arithmetic
    C("perturb-key-missing", "prepared",
      lambda a, ck: bj.tl.perturbation_arithmetic(a, perturbation_key="nope"), KeyError, "perturbation_key|nope"),
    C("perturb-control-missing", "prepared",
      lambda a, ck: bj.tl.perturbation_arithmetic(a, control="ctrl"), ValueError, "control"),
    C("perturb-use_rep-missing", "prepared",
      lambda a, ck: bj.tl.perturbation_arithmetic(a, use_rep="X_nope"), KeyError, "use_rep|X_nope"),
    C("perturb-n_random-0", "prepared", lambda a, ck: bj.tl.perturbation_arithmetic(a, n_random=0), ValueError,
      "n_random"),
    C("perturb-min_cells-0", "prepared", lambda a, ck: bj.tl.perturbation_arithmetic(a, min_cells=0), ValueError,
      "min_cells"),
    C("perturb-n_cells-0", "prepared", lambda a, ck: bj.tl.perturbation_arithmetic(a, n_cells=0), ValueError,
      "n_cells"),
    C("perturb-empty", "empty", lambda a, ck: bj.tl.perturbation_arithmetic(a), ValueError, "control|cells"),
    C("perturb-n_bins-0", "prepared", lambda a, ck: bj.tl.perturbation_arithmetic(a, n_bins=0), ValueError, "n_bins"),
    # issue 46: an empty key_added, a fractional bin count, a negative seed
    C("embed-key_added-empty", "prepared", lambda a, ck: bj.tl.embed(a, checkpoint=ck, key_added="", **KW), ValueError,
      "key_added"),
    C("ablate-n_bins-fraction", "prepared",
      lambda a, ck: bj.tl.ablate_programme(a, PROG, n_bins=2.5, checkpoint=ck, **KW), TypeError, "n_bins"),
    C("perturb-random_state-negative", "prepared", lambda a, ck: bj.tl.perturbation_arithmetic(a, random_state=-1),
      ValueError, "random_state"),
    # tl.finetune
    C("finetune-label_key-missing", "prepared",
      lambda a, ck: bj.tl.finetune(a, label_key="nope", checkpoint=ck, **KW), KeyError, "label_key|nope"),
    C("finetune-train_frac", "prepared",
      lambda a, ck: bj.tl.finetune(a, label_key="cell_type", train_frac=1.5, checkpoint=ck, **KW), ValueError,
      "train_frac"),
    C("finetune-valid_frac", "prepared",
      lambda a, ck: bj.tl.finetune(a, label_key="cell_type", valid_frac=-0.1, checkpoint=ck, **KW), ValueError,
      "valid_frac"),
    C("finetune-epochs-0", "prepared",
      lambda a, ck: bj.tl.finetune(a, label_key="cell_type", epochs=0, checkpoint=ck, **KW), ValueError, "epochs"),
    C("finetune-lr_head-negative", "prepared",
      lambda a, ck: bj.tl.finetune(a, label_key="cell_type", lr_head=-1.0, checkpoint=ck, **KW), ValueError,
      "lr_head"),
    C("finetune-lr_encoder-nan", "prepared",
      lambda a, ck: bj.tl.finetune(a, label_key="cell_type", lr_encoder=math.nan, checkpoint=ck, **KW), ValueError,
      "lr_encoder"),
    C("finetune-not-counts", "lognorm",
      lambda a, ck: bj.tl.finetune(a, label_key="cell_type", checkpoint=ck, **KW), ValueError, "counts"),
    # bench
    C("bench-not-anndata", "none", lambda a, ck: bj.bench.geometry(np.ones((3, 3))), TypeError, "adata"),
    C("annotation-label_key-missing", "prepared", lambda a, ck: bj.bench.annotation(a, label_key="nope"), KeyError,
      "label_key|nope"),
    C("annotation-use_reps-missing", "prepared",
      lambda a, ck: bj.bench.annotation(a, label_key="cell_type", use_reps="X_nope"), KeyError, "X_nope"),
    C("annotation-shots-0", "prepared",
      lambda a, ck: bj.bench.annotation(a, label_key="cell_type", shots=(0,)), ValueError, "shots"),
    C("annotation-seeds-empty", "prepared",
      lambda a, ck: bj.bench.annotation(a, label_key="cell_type", seeds=()), ValueError, "seeds"),
    C("annotation-C-negative", "prepared",
      lambda a, ck: bj.bench.annotation(a, label_key="cell_type", C=-1.0), ValueError, "C"),
    C("clustering-label_key-missing", "prepared", lambda a, ck: bj.bench.clustering(a, label_key="nope"), KeyError,
      "label_key|nope"),
    C("clustering-asw_max_cells-0", "prepared",
      lambda a, ck: bj.bench.clustering(a, label_key="cell_type", asw_max_cells=0), ValueError, "asw_max_cells"),
    C("reconstruction-n_genes-0", "prepared",
      lambda a, ck: bj.bench.reconstruction(a, label_key="cell_type", n_genes=0), ValueError, "n_genes"),
    C("reconstruction-budgets-0", "prepared",
      lambda a, ck: bj.bench.reconstruction(a, label_key="cell_type", budgets=(0,)), ValueError, "budgets"),
    C("reconstruction-test_frac", "prepared",
      lambda a, ck: bj.bench.reconstruction(a, label_key="cell_type", test_frac=1.5), ValueError, "test_frac"),
    C("reconstruction-max_epochs-0", "prepared",
      lambda a, ck: bj.bench.reconstruction(a, label_key="cell_type", max_epochs=0), ValueError, "max_epochs"),
    C("perturbation-key-missing", "prepared",
      lambda a, ck: bj.bench.perturbation(a, perturbation_key="nope"), KeyError, "perturbation_key|nope"),
    C("perturbation-unseen_frac", "prepared",
      lambda a, ck: bj.bench.perturbation(a, unseen_frac=2.0), ValueError, "unseen_frac"),
    C("geometry-empty", "empty", lambda a, ck: bj.bench.geometry(a), ValueError, "rows|cells"),
    C("annotation-empty", "empty", lambda a, ck: bj.bench.annotation(a, label_key="cell_type"), ValueError,
      "label|cells"),
    C("geometry-use_reps-missing", "prepared", lambda a, ck: bj.bench.geometry(a, use_reps="X_nope"), KeyError,
      "X_nope"),
    C("depth-fractions", "prepared",
      lambda a, ck: bj.bench.depth_robustness(a, label_key="cell_type", fractions=(1.5,), checkpoint=ck), ValueError,
      "fractions"),
    C("depth-not-counts", "lognorm",
      lambda a, ck: bj.bench.depth_robustness(a, label_key="cell_type", checkpoint=ck), ValueError, "counts"),
    C("depth-n_cells-0", "prepared",
      lambda a, ck: bj.bench.depth_robustness(a, label_key="cell_type", n_cells=0, checkpoint=ck), ValueError,
      "n_cells"),
    C("integration-batch_key-missing", "prepared", lambda a, ck: bj.bench.integration(a, batch_key="nope"), KeyError,
      "batch_key|nope"),
    C("integration-n_neighbors-0", "prepared",
      lambda a, ck: bj.bench.integration(a, batch_key="donor", n_neighbors=0), ValueError, "n_neighbors"),
    C("run-tasks-unknown", "prepared", lambda a, ck: bj.bench.run(a, label_key="cell_type", tasks=("bogus",)),
      ValueError, "bogus"),
    C("add_baselines-unknown", "prepared", lambda a, ck: bj.bench.add_baselines(a, ("bogus",)), ValueError, "bogus"),
    C("add_baselines-n_comps-0", "prepared", lambda a, ck: bj.bench.add_baselines(a, ("pca",), n_comps=0),
      ValueError, "n_comps"),
    # AnnData layouts the readers cannot take, degenerate representations, repeated keys (issue 40)
    C("embed-x-none", "x-none", lambda a, ck: bj.tl.embed(a, checkpoint=ck, **KW), ValueError, "X is None.*layer="),
    C("embed-tokens-past-vocab", "past-vocab", lambda a, ck: bj.tl.embed(a, checkpoint=ck, **KW), ValueError,
      "outside the vocabulary.*map_vocab"),
    C("max_token-x-none", "x-none", lambda a, ck: bj.tl.max_token(a, checkpoint=ck, **KW), ValueError, "X is None"),
    C("perturb-constant-rep", "constant-rep", lambda a, ck: bj.tl.perturbation_arithmetic(a, use_rep="X_pca"),
      ValueError, r"obsm\['X_pca'\] is the same vector for every cell"),
    C("geometry-use_reps-repeated", "prepared", lambda a, ck: bj.bench.geometry(a, use_reps=["X_pca", "X_pca"]),
      ValueError, "use_reps.*more than once"),
    C("annotation-use_reps-repeated", "prepared",
      lambda a, ck: bj.bench.annotation(a, label_key="cell_type", use_reps=("X_pca", "X_biomjepa", "X_pca")),
      ValueError, "use_reps.*more than once"),
    # pl
    C("pl-max_token-not-run", "prepared", lambda a, ck: bj.pl.max_token(a, show=False), KeyError, "max_token"),
    C("pl-ablate-not-run", "prepared", lambda a, ck: bj.pl.ablate_programme(a, show=False), KeyError, "ablat"),
    C("pl-perturb-not-run", "prepared", lambda a, ck: bj.pl.perturbation_arithmetic(a, show=False), KeyError,
      "perturbation_arithmetic"),
    C("pl-dependencies-not-run", "prepared", lambda a, ck: bj.pl.programme_dependencies(a, show=False), KeyError,
      "programme_dependencies"),
    C("pl-bench-not-a-frame", "none", lambda a, ck: bj.pl.bench("scores.csv", show=False), TypeError, "data"),
    C("pl-bench-metric-missing", "none",
      lambda a, ck: bj.pl.bench(pd.DataFrame({"task": ["t"], "rep": ["r"], "setting": ["s"], "seed": [1],
                                              "metric": ["m"], "value": [0.5]}), metric="nope", show=False),
      ValueError, "metric|nope"),
]


@pytest.mark.parametrize(("kind", "call", "exc", "pattern"), TOOL_CASES)
def test_tool_refuses_bad_input_and_changes_nothing(kind, call, exc, pattern, counts, prepared, tiny_checkpoint):
    a = None if kind == "none" else _variant(kind, counts, prepared)
    before = None if a is None else _snapshot(a)
    with pytest.raises(exc, match=pattern) as err:
        call(a, tiny_checkpoint)
    assert type(err.value).__module__.split(".")[0] in ("builtins", "biomjepa"), f"a library's own {type(err.value)}"
    if a is not None:
        _assert_unchanged(a, before)


def test_pl_refuses_bad_counts(prepared, tiny_checkpoint):
    import matplotlib as mpl

    mpl.use("Agg")
    a = prepared.copy()
    bj.tl.max_token(a, groupby="cell_type", checkpoint=tiny_checkpoint, device="cpu")
    before = _snapshot(a)
    with pytest.raises(ValueError, match="n_genes"):
        bj.pl.max_token(a, "cell_type", n_genes=0, show=False)
    _assert_unchanged(a, before)


# --------------------------------------------------------------------------------- atlas (Python)
def test_atlas_functions_refuse_bad_input(tmp_path, counts, tiny_checkpoint):
    path = tmp_path / "in.h5ad"
    counts.write_h5ad(path)
    digest = _digest(path)
    with pytest.raises(FileNotFoundError, match=r"nothing\.zarr"):
        bj.embed.read_atlas(tmp_path / "nothing.zarr")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match=r"plain.*not a biomjepa atlas store"):
        bj.embed.read_atlas(tmp_path / "plain")
    with pytest.raises(ValueError, match="block_rows"):
        bj.embed.embed_atlas([str(path)], tmp_path / "s.zarr", checkpoint=tiny_checkpoint, block_rows=0)
    with pytest.raises(ValueError, match="no input files"):
        bj.embed.embed_atlas([], tmp_path / "s.zarr", checkpoint=tiny_checkpoint)
    with pytest.raises(FileNotFoundError, match=r"missing\.h5ad"):
        bj.embed.embed_atlas([str(tmp_path / "missing.h5ad")], tmp_path / "s.zarr", checkpoint=tiny_checkpoint)
    assert _digest(path) == digest and not (tmp_path / "s.zarr").exists()


# ---------------------------------------------------------------------------------- commands
def _digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def files(tmp_path_factory, counts):
    d = tmp_path_factory.mktemp("cli")
    counts.write_h5ad(d / "counts.h5ad")
    lognorm = counts.copy()
    lognorm.X = sparse.csr_matrix(np.log1p(lognorm.X.toarray()).astype(np.float32) + 0.5)
    lognorm.write_h5ad(d / "lognorm.h5ad")
    mouse = counts.copy()
    mouse.var_names = [n.capitalize() for n in mouse.var_names]
    mouse.write_h5ad(d / "mouse.h5ad")
    os.mkfifo(d / "pipe.fifo")  # an output that is no regular file (as /dev/null or /dev/stdout into a pipe)
    return d


def test_cli_lists_every_command(capsys):
    from biomjepa.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(c in out for c in ("demo", "embed", "train", "graph", "bench"))


CLI_CASES = [
    ("embed-missing-input", ["embed", "{d}/missing.h5ad", "{d}/out.h5ad"], 2, "missing.h5ad"),
    ("embed-batch-size-0", ["embed", "{d}/counts.h5ad", "{d}/out.h5ad", "--batch-size", "0"], 2, "--batch-size"),
    ("embed-layer-missing", ["embed", "{d}/counts.h5ad", "{d}/out.h5ad", "--layer", "nope", "--checkpoint", "{ck}",
                             "--device", "cpu"], 1, "layer"),
    ("embed-not-counts", ["embed", "{d}/lognorm.h5ad", "{d}/out.h5ad", "--checkpoint", "{ck}", "--device", "cpu"], 1,
     "counts"),
    ("embed-checkpoint-missing", ["embed", "{d}/counts.h5ad", "{d}/out.h5ad", "--checkpoint", "{d}/nockpt",
                                  "--device", "cpu"], 2, "nockpt"),  # checked with the arguments (issue 57)
    # a malformed pin and a device that is none: usage errors before the input is read (issue 57)
    ("embed-pin-not-hex", ["embed", "{d}/counts.h5ad", "{d}/out.h5ad", "--checkpoint", "{ck}#sha256=abc"], 2,
     r"argument --checkpoint: '.*#sha256=abc': the pin sha256='abc' is not a sha256 digest"),
    ("embed-pin-bad-key", ["embed", "{d}/counts.h5ad", "{d}/out.h5ad", "--checkpoint", "{ck}#sha=" + "a" * 64], 2,
     r"what follows '#' must pin the whole checkpoint as `sha256=<64 hexadecimal digits>`"),
    ("embed-device-gpu", ["embed", "{d}/counts.h5ad", "{d}/out.h5ad", "--device", "gpu"], 2,
     r"argument --device: 'gpu' is not a device; use auto, cpu, cuda"),
    ("atlas-device-gpu", ["embed", "{d}/counts.h5ad", "--store", "{d}/s.zarr", "--device", "gpu"], 2,
     r"argument --device: 'gpu' is not a device"),
    ("atlas-pin-not-hex", ["embed", "{d}/counts.h5ad", "--store", "{d}/s.zarr", "--checkpoint", "{ck}#SHA256=xyz"], 2,
     r"is not a sha256 digest"),
    ("adapt-pin-not-hex", ["adapt", "{d}/counts.h5ad", "--out", "{d}/g", "--checkpoint", "biomjepa-mini#sha256=1"], 2,
     r"argument --checkpoint: 'biomjepa-mini#sha256=1': the pin sha256='1' is not a sha256 digest"),
    ("demo-device-gpu", ["demo", "--device", "gpu", "--out", "{d}/demo"], 2, r"'gpu' is not a device"),
    ("atlas-block-rows-0", ["embed", "{d}/counts.h5ad", "--store", "{d}/s.zarr", "--block-rows", "0"], 2,
     "--block-rows"),
    ("atlas-missing-input", ["embed", "{d}/missing.h5ad", "--store", "{d}/s.zarr"], 2, "missing.h5ad"),
    ("train-missing-config", ["train", "{d}/missing.yaml"], 2, "missing.yaml"),
    ("train-negative-lr", ["train", "tiny", "--set", "lr=-1", "--set", "out_dir={d}/runs"], 1, "lr"),
    ("train-unknown-key", ["train", "tiny", "--set", "bogus_key=1", "--set", "out_dir={d}/runs"], 1, "bogus_key"),
    ("graph-missing-corpus", ["graph", "{d}/missing.h5ad", "--out", "{d}/g"], 2, "missing.h5ad"),
    ("graph-top-k-0", ["graph", "{d}/counts.h5ad", "--out", "{d}/g", "--top-k", "0"], 2, "--top-k"),
    ("bench-missing-input", ["bench", "{d}/missing.h5ad"], 2, "missing.h5ad"),
    ("bench-use-rep-missing", ["bench", "{d}/counts.h5ad", "--use-rep", "X_nope", "--tasks", "geometry",
                               "--out", "{d}/b"], 1, "X_nope"),
    ("bench-unknown-task", ["bench", "{d}/counts.h5ad", "--tasks", "bogus", "--out", "{d}/b"], (1, 2), "bogus"),
    ("demo-batch-size-0", ["demo", "--batch-size", "0", "--out", "{d}/demo"], 2, "--batch-size"),
    # outputs that are no regular file or not named for what is written, inputs that are no file (issue 40)
    ("embed-output-fifo", ["embed", "{d}/counts.h5ad", "{d}/pipe.fifo"], 2, r"FIFO \(named pipe\), not a regular file"),
    ("embed-output-zarr", ["embed", "{d}/counts.h5ad", "{d}/out.zarr"], 2, r"does not end in \.h5ad"),
    ("embed-input-device", ["embed", "/dev/zero", "{d}/out.h5ad"], 2, "character device, not a regular file"),
    ("embed-mouse", ["embed", "{d}/mouse.h5ad", "{d}/out.h5ad", "--checkpoint", "{ck}", "--device", "cpu"], 1,
     "--species mouse"),
    ("atlas-mouse", ["embed", "{d}/mouse.h5ad", "--store", "{d}/s.zarr", "--checkpoint", "{ck}", "--device", "cpu"],
     1, "--species mouse"),
    ("graph-mouse", ["graph", "{d}/mouse.h5ad", "--out", "{d}/g_mouse", "--top-k", "4"], 1, "--species mouse"),
    ("train-run-name-escapes", ["train", "tiny", "--set", "run.run_name=../elsewhere", "--set", "out_dir={d}/runs"], 1,
     r"run\.run_name='\.\./elsewhere' must name a directory inside run\.out_dir"),
    ("train-corpus-int", ["train", "tiny", "--set", "data.corpus=5", "--set", "out_dir={d}/runs"], 1,
     r"data\.corpus=5 \(int\)"),
    ("train-corpus-twice", ["train", "tiny", "--set", "data.corpus=[{d}/counts.h5ad, {d}/counts.h5ad]",
                            "--set", "out_dir={d}/runs", "--set", "loop.device=cpu"], 1,
     r"data\.corpus\[0\] and data\.corpus\[1\] both name"),
    # (a file's genes are read once preparing has begun: these two leave their own run / corpus directories)
    ("train-mouse", ["train", "tiny", "--set", "data.corpus=[{d}/counts.h5ad, {d}/mouse.h5ad]", "--set",
                     "out_dir={d}/runs_mouse", "--set", "loop.device=cpu"], 1, r"data\.corpus\[1\]\.species: mouse"),
]
if not __import__("torch").cuda.is_available():
    CLI_CASES.append(("train-cuda-without-cuda", ["train", "tiny", "--set", "data.corpus={d}/counts.h5ad", "--set",
                                                  "out_dir={d}/runs", "--set", "loop.device=cuda"], 1,
                      r"loop\.device=cuda was requested but CUDA is not available"))
#: Python spellings a command's message must not show: its user reads flags (or config keys in training)
PYTHON_WORDS = re.compile(r"\b(species|gene_key|id_type|use_raw|layer|library_size_key|batch_size|block_rows)=")


@pytest.mark.parametrize(("argv", "code", "pattern"), [pytest.param(*c[1:], id=c[0]) for c in CLI_CASES])
def test_command_refuses_bad_input_and_changes_no_file(argv, code, pattern, files, tiny_checkpoint, capsys):
    from biomjepa.cli import main

    inputs = {p: _digest(p) for p in files.glob("*.h5ad")}
    argv = [s.format(d=files, ck=tiny_checkpoint) for s in argv]
    try:
        got = main(argv)
    except SystemExit as exit_:
        got = exit_.code
    err = capsys.readouterr().err
    assert got in (code if isinstance(code, tuple) else (code,)), err
    assert "Traceback" not in err and "[Errno" not in err
    assert re.search(pattern, err), err
    assert not PYTHON_WORDS.search(err), f"a Python argument in a command's message: {err}"
    assert {p: _digest(p) for p in files.glob("*.h5ad")} == inputs  # inputs byte for byte, no new output
    assert stat.S_ISFIFO(os.stat(files / "pipe.fifo").st_mode)  # a special file is never replaced
    assert not any((files / n).exists() for n in ("out.h5ad", "out.zarr", "s.zarr", "g", "b", "demo", "runs"))
