"""Regression tests for the eight bad outcomes of issue 14 (code execution, silent wrong results, lost data).

One section per outcome; the run-directory lock and the resume check (outcomes 7 and 8) need a
training run and live in ``tests/train/test_run_safety.py``. Models are random ``tiny``
checkpoints written to temporary directories.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import sparse

import biomjepa as bj
from biomjepa import _pretrained
from biomjepa.data.tokenize import check_counts
from biomjepa.data.vocab import Vocab
from biomjepa.model import (
    CONFIG,
    MANIFEST,
    WEIGHTS,
    BiomJEPA,
    CheckpointError,
    checkpoint_sha256,
    load_checkpoint,
    save_checkpoint,
)
from biomjepa.nn import ModelConfig
from biomjepa.train.checkpoint import export, load_state, rng_state, save_state, set_rng_state

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), tmp_path_factory.mktemp("ckpt") / "tiny")


def _symbols(n: int, start: int = 1000) -> list[str]:
    return [str(s) for s in Vocab.default().symbols[start : start + n]]


# --------------------------------------------------------------------------- 1. no pickle code in training states
class _Payload:
    """Unpickling this creates ``marker``: stands in for arbitrary code in a crafted ``step_*.pt``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_no_unsafe_torch_load_anywhere():
    needle = "weights_only=" + "False"
    files = [p for d in ("src", "scripts", "benchmarks", "tests", "tutorials") for p in (REPO / d).rglob("*")
             if p.suffix in (".py", ".ipynb", ".md")]
    assert files
    offenders = [str(p.relative_to(REPO)) for p in files if needle in p.read_text(errors="replace")]
    assert offenders == []


def test_crafted_training_state_runs_no_code(tmp_path):
    from biomjepa.train.target_errors import load_training_modules  # what bj.tl.programme_dependencies calls

    marker = tmp_path / "pwned"
    crafted = tmp_path / "run" / "checkpoints" / "step_00000001.pt"
    crafted.parent.mkdir(parents=True)
    torch.save({"step": 1, "teacher": {}, "config": {}, "x": _Payload(marker)}, crafted)
    (crafted.parent / "LATEST").write_text(crafted.name)
    with pytest.raises(ValueError, match="refusing to unpickle"):
        export(crafted, tmp_path / "out")
    with pytest.raises(ValueError, match="refusing to unpickle"):
        export(tmp_path / "run", tmp_path / "out")
    with pytest.raises(ValueError, match="refusing to unpickle"):
        load_training_modules(tmp_path / "run")
    assert not marker.exists()


def test_states_hold_only_tensors_and_plain_values(tmp_path):
    np.random.seed(3)
    random.seed(3)
    path = save_state(tmp_path, {"step": 1, "rng": rng_state()})
    state = torch.load(path, weights_only=True)  # no allow-list needed
    expected = (np.random.random(), random.random(), torch.rand(1))
    set_rng_state(state["rng"])
    assert (np.random.random(), random.random(), torch.rand(1)) == expected


def test_states_written_before_0_2_still_load(tmp_path):
    """Their numpy RNG state is a uint32 array: read with numpy's array globals only, still weights_only."""
    np.random.seed(5)
    old = {"step": 7, "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                              "python": random.getstate()}}
    torch.save(old, tmp_path / "old.pt")
    expected = np.random.random(3)
    state = load_state(tmp_path / "old.pt")
    assert state["step"] == 7 and isinstance(state["rng"]["numpy"], dict)
    set_rng_state(state["rng"])
    np.testing.assert_array_equal(np.random.random(3), expected)
    # the numpy allow-list admits arrays, not code
    marker = tmp_path / "pwned"
    torch.save({**old, "x": _Payload(marker)}, tmp_path / "crafted.pt")
    with pytest.raises(ValueError, match="refusing to unpickle"):
        load_state(tmp_path / "crafted.pt")
    assert not marker.exists()


# --------------------------------------------------------------------------- 2. the whole checkpoint is pinned
def test_manifest_lists_every_checkpoint_file(ckpt):
    lines = (ckpt / MANIFEST).read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == sorted([CONFIG, WEIGHTS])
    for line in lines:
        digest, name = line.split("  ")
        assert hashlib.sha256((ckpt / name).read_bytes()).hexdigest() == digest
    assert checkpoint_sha256(ckpt) == hashlib.sha256((ckpt / MANIFEST).read_bytes()).hexdigest()


def _edit_config(path: Path, **model) -> None:
    meta = json.loads((path / CONFIG).read_text())
    meta["model"].update(model)
    (path / CONFIG).write_text(json.dumps(meta))


def test_edited_config_is_refused(ckpt, tmp_path):
    edited = shutil.copytree(ckpt, tmp_path / "edited")
    _edit_config(edited, attn_eps=1e-2)  # loads fine without the manifest, and changes the embeddings
    with pytest.raises(CheckpointError, match=r"config\.json is corrupted or truncated.*SHA256SUMS"):
        load_checkpoint(edited)
    with pytest.raises(CheckpointError, match="SHA256SUMS"):
        bj.load_model(str(edited))


def test_registry_entry_pins_every_file(ckpt, tmp_path, monkeypatch):
    bundled = shutil.copytree(ckpt, tmp_path / "pkg" / "_models" / "m")
    monkeypatch.setattr(_pretrained, "_bundled_dir", lambda rel: tmp_path / "pkg" / rel)
    entry = {"path": "_models/m", "version": "9", "checkpoint_sha256": checkpoint_sha256(ckpt)}
    monkeypatch.setitem(_pretrained.REGISTRY, "pinned", entry)
    assert bj.load_model("pinned").info["checkpoint_sha256"] == entry["checkpoint_sha256"]
    _edit_config(bundled, n_heads=4)  # weights untouched: a weights-only pin would not notice
    bj.model.write_manifest(bundled, [CONFIG, WEIGHTS])  # a consistent, but different, checkpoint
    with pytest.raises(ValueError, match="does not match its registry checkpoint_sha256"):
        _pretrained.resolve_checkpoint("pinned")
    (bundled / MANIFEST).unlink()  # removing the manifest does not make it a weights-only pin
    with pytest.raises(ValueError, match="does not match its registry checkpoint_sha256"):
        _pretrained.resolve_checkpoint("pinned")


def test_url_pin_covers_config_json(ckpt, http_root):
    root, url = http_root
    served = shutil.copytree(ckpt, root / "c")
    pin = checkpoint_sha256(ckpt)
    _edit_config(served, attn_eps=1e-2)
    with pytest.raises(CheckpointError, match=r"config\.json is corrupted"):
        _pretrained.resolve_checkpoint(f"{url}/c#sha256={pin}")
    (served / MANIFEST).unlink()  # a server without the manifest: it is computed from the downloads
    with pytest.raises(ValueError, match=f"expected {pin}"):
        _pretrained.resolve_checkpoint(f"{url}/c#sha256={pin}")
    shutil.copy(ckpt / CONFIG, served / CONFIG)
    path, _ = _pretrained.resolve_checkpoint(f"{url}/c#sha256={pin.upper()}")
    assert checkpoint_sha256(path) == pin


def test_weights_only_pin_is_explained(ckpt, http_root):
    root, url = http_root
    shutil.copytree(ckpt, root / "c")
    weights = json.loads((ckpt / CONFIG).read_text())["weights_sha256"]
    with pytest.raises(ValueError, match=f"pins only model.safetensors.*{checkpoint_sha256(ckpt)}"):
        _pretrained.resolve_checkpoint(f"{url}/c#sha256={weights}")
    with pytest.raises(ValueError, match="not a sha256 digest"):
        _pretrained.resolve_checkpoint(f"{url}/c#sha256=../../{'0' * 58}")


# --------------------------------------------------------------------------- 3. `biomjepa embed X X` is atomic
def _input_h5ad(path: Path) -> Path:
    rng = np.random.default_rng(0)
    a = ad.AnnData(sparse.csr_matrix(rng.poisson(1.0, size=(12, 40)).astype(np.float32) + np.eye(12, 40)))
    a.var_names = _symbols(40)
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


# --------------------------------------------------------------------------- 4. every value is checked; no bool
def test_non_integer_values_after_the_first_200k_are_refused():
    raw = np.ones(250_000, dtype=np.float32)
    lognorm = np.log1p(np.full(100_000, 3.0, dtype=np.float32))  # a later, log-normalized part
    X = sparse.csr_matrix(np.concatenate([raw, lognorm])[None, :])
    with pytest.raises(ValueError, match="does not look like raw counts"):
        check_counts(X)
    check_counts(sparse.csr_matrix(np.ones((1, 350_000), dtype=np.float32)))


@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_bool_matrices_are_refused(fmt, ckpt):
    X = np.random.default_rng(0).random((6, 30)) > 0.5
    a = ad.AnnData(sparse.csr_matrix(X) if fmt == "csr" else X)
    a.var_names = _symbols(30)
    bj.pp.map_vocab(a)
    with pytest.raises(ValueError, match="boolean"):
        bj.tl.embed(a, checkpoint=str(ckpt), device="cpu")


# --------------------------------------------------------------------------- 5. all-digit gene names
def _counts(names: list[str]) -> ad.AnnData:
    a = ad.AnnData(np.ones((3, len(names)), dtype=np.float32))
    a.var_names = names
    return a


def test_subsetted_integer_labels_are_not_read_as_entrez():
    labels = [str(i) for i in range(1, 400, 3)]  # '1'…'n' after filtering: not positions any more
    a = _counts(labels)
    with pytest.raises(ValueError, match=r'all digits.*id_type="entrez".*gene_key='):
        bj.pp.map_vocab(a)
    bj.pp.map_vocab(a, id_type="entrez")  # the caller says they are Entrez ids
    assert a.uns["biomjepa"]["vocab"]["n_matched"] > 0


def test_digits_among_symbols_are_left_unmapped_with_a_warning():
    a = _counts([*_symbols(20), "7157", "60"])
    with pytest.warns(UserWarning, match=r"2 gene names are all digits"):
        bj.pp.map_vocab(a)
    assert a.var["biomjepa_token"].tolist()[-2:] == [-1, -1]
    assert a.uns["biomjepa"]["vocab"]["n_numeric_unmapped"] == 2


# --------------------------------------------------------------------------- 6. NaN in a representation
def test_perturbation_arithmetic_refuses_non_finite_representations():
    labels = ["control"] * 8 + [g for g in ("A", "B", "C", "D", "A+B", "C+D") for _ in range(4)]
    a = ad.AnnData(np.zeros((len(labels), 4), dtype=np.float32))
    a.obs["perturbation"] = pd.Categorical(labels)
    a.obsm["X_rep"] = np.random.default_rng(1).normal(size=(len(labels), 6))
    with pytest.warns(UserWarning, match="no measured target gene"):
        bj.tl.perturbation_arithmetic(a, use_rep="X_rep", n_random=5, copy=True)  # finite: fine
    a.obsm["X_rep"][10, 2] = np.nan
    with pytest.raises(ValueError, match=r"finite.*1 row\(s\).*\[10\]"):
        bj.tl.perturbation_arithmetic(a, use_rep="X_rep", n_random=5)
    assert "perturbation_arithmetic" not in a.uns


# --------------------------------------------------------------------------- load_model is never moved by a caller
def test_moving_a_loaded_model_does_not_move_the_cached_one(ckpt):
    first = bj.load_model(str(ckpt))
    reference = first.encoder.gene_embedding.weight.detach().clone()
    first.to("meta").train()  # what a caller's `.to("cuda")` does, on any machine
    again = bj.load_model(str(ckpt))
    assert again.encoder.gene_embedding.weight.device.type == "cpu" and not again.training
    assert torch.equal(again.encoder.gene_embedding.weight, reference)
    if torch.cuda.is_available():
        bj.load_model(str(ckpt)).to("cuda")
        assert bj.load_model(str(ckpt)).encoder.gene_embedding.weight.device.type == "cpu"
