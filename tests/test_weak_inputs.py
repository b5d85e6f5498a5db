"""Weak inputs of issue 14 (deliverable 2): each gets a clear error naming the argument, or a documented warning.

Sections follow the issue's case ids: A (gene names), B (values), K (local checkpoints), U (URLs),
S (settings), T (training configs and states), CL (command line). Training-run cases that need a
run directory (T10b) live in ``tests/train/test_run_safety.py``, the graph cache in
``tests/train/test_corpus_graph.py``.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import sparse

import biomjepa as bj
from biomjepa import _pretrained
from biomjepa.data.idtable import resolve_symbols
from biomjepa.data.vocab import Vocab
from biomjepa.model import (
    MANIFEST,
    BiomJEPA,
    CheckpointError,
    checkpoint_sha256,
    load_checkpoint,
    save_checkpoint,
)
from biomjepa.nn import ModelConfig

HUMAN = ["TP53", "GAPDH", "ACTB", "CD3E", "MS4A1", "LYZ", "CD14", "NKG7"]


def make(names, seed: int = 0) -> ad.AnnData:
    X = np.random.default_rng(seed).poisson(3.0, size=(12, len(names))).astype(np.float32)
    a = ad.AnnData(sparse.csr_matrix(X))
    a.var_names = list(names)
    a.obs_names = [f"c{i}" for i in range(a.n_obs)]
    return a


def idx(*symbols) -> list[int]:
    return Vocab.default().index_of(list(symbols)).tolist()


# --------------------------------------------------------------------------- A: gene names
def test_a4_mixed_case_symbols_map_case_insensitively_and_are_counted(caplog):
    a = make(["Tp53", "gapdh", "Actb", "cd3e", *HUMAN[4:]])
    with caplog.at_level(logging.INFO, logger="biomjepa.pp._vocab"):
        bj.pp.map_vocab(a)
    assert a.var["biomjepa_token"].tolist() == idx(*HUMAN)
    r = a.uns["biomjepa"]["vocab"]
    assert r["methods"]["case"] == 4 and r["methods"]["official"] == 4 and r["n_case_ambiguous"] == 0
    assert "Tp53 → TP53" in r["case_examples"]
    assert "4 symbols in lower or mixed case were matched case-insensitively" in caplog.text


def test_a5_all_lower_case_symbols_map():
    a = make([s.lower() for s in HUMAN])
    bj.pp.map_vocab(a)
    assert a.var["biomjepa_token"].tolist() == idx(*HUMAN)
    assert a.uns["biomjepa"]["vocab"]["methods"]["case"] == len(HUMAN)


def test_case_folding_never_guesses_between_symbols():
    vocab = Vocab(["ABC1", "Abc1", "TP53"])  # the bundled vocabulary has no such pair
    token, method = resolve_symbols(pd.Series(["abc1", "tp53", "Abc1"]), vocab)
    assert token.tolist() == [-1, 2, 1] and method.tolist() == ["", "case", "official"]
    assert vocab.upper_ambiguous(["abc1", "tp53"]).tolist() == [True, False]


def test_mouse_like_mixed_case_with_human_warns_to_pass_species():
    a = make(["Gcg", "Ins1", "Sst", "Ppy", *HUMAN])  # 4 of 12 mouse-style names
    with pytest.warns(UserWarning, match='species="mouse"'):
        bj.pp.map_vocab(a)
    assert a.uns["biomjepa"]["vocab"]["methods"]["case"] >= 3  # Gcg, Sst, Ppy (INS1 is no human gene)


def test_mouse_names_as_human_still_refused_with_both_fixes():
    a = make(["Gcg", "Ins1", "Sst", "Ppy", "Pdx1", "Actb"])
    with pytest.raises(ValueError, match=r'species="mouse".*str\.upper\(\)'):
        bj.pp.map_vocab(a)
    assert "biomjepa_token" not in a.var and "biomjepa" not in a.uns
    bj.pp.map_vocab(a, species="mouse")
    assert a.uns["biomjepa"]["vocab"]["methods"]["ortholog"] >= 3


def test_a6_suffixed_names_are_reported_not_stripped():
    a = make(["TP53", "TP53-1", "ACTB", "ACTB.1", "GAPDH", "LYZ", "ERV3.1", "NOTAGENE-2"])
    with pytest.warns(UserWarning, match=r"2 gene names carry a '-N' or '\.N' suffix.*TP53-1.*ACTB\.1.*gene_key="):
        bj.pp.map_vocab(a)
    tok = a.var["biomjepa_token"].tolist()
    assert tok[1] == tok[3] == -1  # never silently merged into TP53 / ACTB
    r = a.uns["biomjepa"]["vocab"]
    assert r["n_suffixed_unmapped"] == 2 and r["suffixed_examples"] == ["TP53-1", "ACTB.1"]


def test_official_symbols_with_dashes_are_not_suffixes():
    names = ["NKX2-1", "HLA-A", "MT-ND1", *HUMAN]
    a = make(names)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="The input measures only")  # 11 genes: a gene panel
        bj.pp.map_vocab(a)
    assert (a.var["biomjepa_token"] >= 0).all()
    assert a.uns["biomjepa"]["vocab"]["n_suffixed_unmapped"] == 0


# --------------------------------------------------------------------------- B: values
def test_b5_bool_matrix_is_refused_by_embed_not_silently_used(tiny_checkpoint):
    a = make(HUMAN * 3 + [f"G{i}" for i in range(3)])
    a.var_names_make_unique()
    a.X = a.X.astype(bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # suffix/low-count warnings of the synthetic names
        bj.pp.map_vocab(a)  # genes only: values are documented as not checked here
    with pytest.raises(ValueError, match=r"boolean.*layer="):
        bj.tl.embed(a, checkpoint=tiny_checkpoint)
    assert "X_biomjepa" not in a.obsm and a.X.dtype == bool


# --------------------------------------------------------------------------- K: local checkpoints
@pytest.fixture
def unpinned(tmp_path) -> Path:
    """A checkpoint without SHA256SUMS (as written before the manifest existed), with run provenance."""
    torch.manual_seed(0)
    path = save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), tmp_path / "old",
                           provenance={"config": {"model": "tiny", "model_overrides": {}}})
    (path / MANIFEST).unlink()
    return path


def _edit_config(path: Path, fn) -> None:
    meta = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(fn(meta) if callable(fn) else fn)


def test_k4b_edited_heads_in_unpinned_checkpoint_is_caught_by_provenance(unpinned):
    meta = json.loads((unpinned / "config.json").read_text())
    heads = meta["model"]["n_heads"]
    _edit_config(unpinned, lambda m: json.dumps({**m, "model": {**m["model"], "n_heads": heads * 2}}))
    with pytest.raises(CheckpointError, match=rf"config.json: 'model.n_heads' is {heads * 2}.*n_heads={heads}.*edited"):
        load_checkpoint(unpinned)


def test_k4b_unpinned_checkpoint_warns_and_names_the_fix(unpinned):
    _edit_config(unpinned, lambda m: json.dumps({**m, "provenance": {}}))
    with pytest.warns(UserWarning, match=r"no SHA256SUMS manifest.*bj\.train\.export"):
        model = load_checkpoint(unpinned)
    assert model.config.n_heads == ModelConfig.preset("tiny").n_heads


def test_pinned_and_bundled_checkpoints_do_not_warn(tiny_checkpoint):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_checkpoint(tiny_checkpoint)
        load_checkpoint(_pretrained._bundled_dir("_models/biomjepa-mini-v0.1"))


@pytest.mark.parametrize(("edit", "named"), [
    ('{"format": "biomjepa-checkpoint", "model": ', "not valid JSON"),
    ("[1, 2]", "holds a JSON list"),
    (lambda m: json.dumps({k: v for k, v in m.items() if k != "model"}), "key 'model' is missing"),
    (lambda m: json.dumps({**m, "model": None}), "key 'model' is missing or not an object"),
    (lambda m: json.dumps({**m, "model": {k: v for k, v in m["model"].items() if k != "d_model"}}), r"lacks the keys \['d_model'\]"),
    (lambda m: json.dumps({**m, "model": {**m["model"], "d_model": "32"}}), r"'model.d_model' is '32' \(str\); expected int"),
    (lambda m: json.dumps({**m, "model": {**m["model"], "n_layers": 2.5}}), r"'model.n_layers' is 2.5"),
    (lambda m: json.dumps({**m, "model": {**m["model"], "n_heads": 0}}), r"'model.n_heads' is 0 \(int\); expected int >= 1"),
    (lambda m: json.dumps({**m, "model": {**m["model"], "colour": 1}}), r"unknown key 'model.colour'"),
    (lambda m: json.dumps({**m, "format_version": "1"}), "has format"),
])
def test_k7_malformed_config_json_names_the_file_and_key(unpinned, edit, named):
    _edit_config(unpinned, edit)
    with pytest.raises(CheckpointError, match=named) as err:
        load_checkpoint(unpinned)
    assert "config.json" in str(err.value) or str(unpinned) in str(err.value)


# --------------------------------------------------------------------------- U: URLs and pins
def test_u2_upper_case_pin_is_accepted(tiny_checkpoint):
    digest = checkpoint_sha256(tiny_checkpoint)
    path, _ = _pretrained.resolve_checkpoint(tiny_checkpoint, sha256=digest.upper())
    assert path == Path(tiny_checkpoint)


def test_u2_upper_case_pin_downloads(http_root, tiny_checkpoint):
    root, base = http_root
    shutil.copytree(tiny_checkpoint, root / "ck")
    digest = checkpoint_sha256(tiny_checkpoint)
    path, _ = _pretrained.resolve_checkpoint(f"{base}/ck#sha256={digest.upper()}")
    assert checkpoint_sha256(path) == digest


@pytest.mark.parametrize("pin", ["../../../../tmp/evil", "abc", "g" * 64, " " * 3])
def test_u5_non_hex_pin_is_refused_before_any_path_is_made(tmp_path, monkeypatch, pin):
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    with pytest.raises(ValueError, match="is not a sha256 digest"):
        _pretrained.resolve_checkpoint(f"http://127.0.0.1:9/x#sha256={pin}")
    assert not (tmp_path / "cache").exists() and not list(tmp_path.rglob("config.json"))


def test_u4_unreachable_url_names_it_and_the_manual_route(tmp_path, monkeypatch):
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    with pytest.raises(OSError, match=r"Could not download http://127\.0\.0\.1:9/ck/SHA256SUMS.*checkpoint="):
        _pretrained.resolve_checkpoint("http://127.0.0.1:9/ck#sha256=" + "a" * 64)


def test_u6_404_names_the_url(http_root):
    _, base = http_root
    with pytest.raises(FileNotFoundError, match=rf"{base}/nothing/config.json does not exist \(HTTP 404\).*checkpoint="):
        _pretrained.resolve_checkpoint(f"{base}/nothing#sha256=" + "a" * 64)


# --------------------------------------------------------------------------- S: settings
@pytest.mark.parametrize("device", ["gpu", "cuda:x", "tpu", "", 0])
def test_s1_bogus_settings_device_is_refused_when_set(device):
    before = bj.settings.device
    with pytest.raises(ValueError, match=r"bj\.settings\.device=.*'auto', 'cpu', 'cuda', 'cuda:N'.*'mps'"):
        bj.settings.device = device
    assert bj.settings.device == before


def test_s1_bogus_device_argument_names_it():
    from biomjepa._device import resolve_device

    with pytest.raises(ValueError, match=r"^device='banana' is not a device"):
        resolve_device("banana")
    assert resolve_device("CPU").type == "cpu"
    with pytest.raises(ValueError, match=r"device='tpu'"):
        bj.train.TrainConfig().replace(device="tpu")


# --------------------------------------------------------------------------- T: configs and states
@pytest.mark.parametrize(("item", "message"), [
    ("batch_size=2.9", r"override batch_size=2.9 \(float\): expected an integer"),
    ("steps=abc", r"override steps='abc' \(str\): expected an integer"),
    ("lr=fast", r"override lr='fast' \(str\): expected a number"),
    ("tensorboard=maybe", r"override tensorboard='maybe' \(str\): expected a boolean: true/false, yes/no or 1/0"),
    ("seed=true", r"override seed=True \(bool\): expected an integer"),
    ("random_ratio=[0.1]", r"random_ratio=\[0.1\] \(list\): expected a list of 2 numbers"),
    ("model_overrides=3", r"model_overrides=3 \(int\): expected a mapping"),
    ("max_genes=2048", r"'max_genes' was removed"),
])
def test_t7_t8_t9_bad_set_values_name_key_value_and_type(item, message):
    with pytest.raises(ValueError, match=message):
        bj.train.load_config("tiny", [item])


def test_good_set_values_still_parse():
    cfg = bj.train.load_config("tiny", ["steps=1e3", "batch_size=4.0", "bf16=yes", "tensorboard=0", "lr=3e-4"])
    assert (cfg.steps, cfg.batch_size, cfg.bf16, cfg.tensorboard, cfg.lr) == (1000, 4, True, False, 3e-4)


def test_yaml_values_of_the_wrong_type_name_file_and_key(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("preset: tiny\nbatch_size: 2.7\n")
    with pytest.raises(ValueError, match=rf"{p}: batch_size=2.7 \(float\): expected an integer"):
        bj.train.TrainConfig.from_yaml(p)
    p.write_text("preset: tiny\nmax_genes: 1000\n")
    with pytest.raises(ValueError, match="max_genes' was removed"):
        bj.train.TrainConfig.from_yaml(p)
    # states saved before the key was removed hold max_genes: null, and still load
    assert bj.train.TrainConfig.from_dict({"preset": "tiny", "max_genes": None}) == bj.train.preset("tiny")


def test_t2_truncated_latest_state_falls_back_with_a_warning(tmp_path):
    from biomjepa.train.checkpoint import load_latest_state, save_state

    for step in (1, 2, 3):
        save_state(tmp_path, {"step": step, "x": torch.arange(1000)}, keep=3)
    latest = tmp_path / "checkpoints" / "step_00000003.pt"
    latest.write_bytes(latest.read_bytes()[:300])
    with pytest.warns(UserWarning, match=r"step_00000003\.pt .*damaged or truncated.*step_00000002\.pt \(step 2\)"):
        path, state = load_latest_state(tmp_path)
    assert path.name == "step_00000002.pt" and state["step"] == 2
    for p in (tmp_path / "checkpoints").glob("step_*.pt"):
        p.write_bytes(b"")
    with pytest.raises(ValueError, match=r"No training state .* can be read.*step_00000001\.pt"):
        load_latest_state(tmp_path)
    assert load_latest_state(tmp_path / "elsewhere") is None


def test_tensorboard_fallback_warns(tmp_path, monkeypatch, caplog):
    from biomjepa.train.logs import StepLogger

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    cfg = bj.train.load_config("tiny", ["tensorboard=true", "progress=false"])
    with caplog.at_level(logging.WARNING, logger="biomjepa.train.logs"):
        log = StepLogger(tmp_path, ["step"], cfg.loop, steps=cfg.run.steps)
    log.close()
    assert "TensorBoard is unavailable" in caplog.text and "tensorboard: false" in caplog.text


def test_perturbation_keeps_expression_in_float32(monkeypatch):
    import importlib

    pb = importlib.import_module("biomjepa.bench.perturbation")  # bj.bench.perturbation is the function
    seen = []
    real = pb.fit_mlp
    monkeypatch.setattr(pb, "fit_mlp", lambda X, Y, *a, **k: (seen.append(Y.dtype), real(X, Y, *a, **k))[1])
    rng = np.random.default_rng(0)
    pert = np.array(["ctrl"] * 30 + ["A"] * 10 + ["B"] * 10 + ["C"] * 10 + ["A+B"] * 10)
    a = ad.AnnData(rng.poisson(2.0, size=(len(pert), 20)).astype(np.float64))
    a.obs["perturbation"] = pert
    a.obsm["X_rep"] = rng.normal(size=(len(pert), 4))
    pb.perturbation(a, use_reps=["X_rep"], perturbation_key="perturbation", control="ctrl", shots=[1], seeds=[0],
                    max_epochs=2, baselines=(), hidden=(8,))
    assert seen and all(dt == np.float32 for dt in seen)


# --------------------------------------------------------------------------- CL: command line
@pytest.mark.parametrize("command", [["embed", "{txt}", "{out}"], ["graph", "{txt}", "--out", "{out}"]])
def test_cl4_non_h5ad_input_is_a_usage_error(tmp_path, command, capsys):
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
