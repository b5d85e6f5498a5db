"""``model.init_from``: a pretraining run that starts from a checkpoint's encoder (issue 39)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from _kit import tiny_config

from biomjepa.model import BiomJEPA, checkpoint_sha256, load_checkpoint, save_checkpoint
from biomjepa.nn import ModelConfig
from biomjepa.train import export, pretrain
from biomjepa.train.checkpoint import encoder_weights, load_latest_state


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.fixture
def base(tmp_path) -> Path:
    """A ``tiny`` checkpoint whose weights differ from the run's own seed-42 initialisation."""
    torch.manual_seed(123)
    return save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), tmp_path / "base", provenance={"kind": "test"})


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].float().cpu(), b[k].float().cpu()) for k in a)


def _start(tmp_path, **overrides) -> tuple[dict, dict, Path]:
    """Run a tiny config and capture (teacher at step 0, student at step 0, run dir)."""
    seen = {}

    def hook(step, teacher, run_dir):
        if step == 0:
            seen["teacher"] = {k: v.clone() for k, v in teacher.state_dict().items()}

    cfg = tiny_config(tmp_path, **{"steps": 2, **overrides})
    run = pretrain(cfg, on_checkpoint=hook)
    return seen["teacher"], cfg, run


def test_starts_student_and_teacher_from_the_checkpoint_and_records_it(tmp_path, base):
    teacher0, _, run = _start(tmp_path, init_from=str(base), gene_init="checkpoint", run_name="keep")
    ck = load_checkpoint(base).encoder.state_dict()
    assert _equal(teacher0, ck)  # the teacher at step 0 is the checkpoint's encoder (so was the student)
    _, state = load_latest_state(run)
    rec = state["init_from"]
    assert rec["ref"] == str(base) and rec["gene_init"] == "checkpoint"
    assert rec["checkpoint_sha256"] == checkpoint_sha256(base)
    assert rec["weights_sha256"] == json.loads((base / "config.json").read_text())["weights_sha256"]
    assert state["config"]["init_from"] == str(base)
    assert not _equal(encoder_weights(state, "student"), ck)  # and it trained
    out = export(run, tmp_path / "exported")
    prov = json.loads((out / "config.json").read_text())["provenance"]
    assert prov["init_from"] == rec
    assert load_checkpoint(out).info["provenance"]["init_from"]["checkpoint_sha256"] == checkpoint_sha256(base)


def test_a_fresh_run_records_no_base(tmp_path):
    run = pretrain(tiny_config(tmp_path, steps=1, run_name="fresh"))
    assert load_latest_state(run)[1]["init_from"] is None
    prov = json.loads((export(run, tmp_path / "e") / "config.json").read_text())["provenance"]
    assert prov["init_from"] is None


def test_the_predictor_starts_fresh_with_queries_from_the_gene_embeddings(tmp_path, base):
    from biomjepa.train.jepa import JEPA
    from biomjepa.train.setup import init_from_checkpoint

    cfg = tiny_config(tmp_path, init_from=str(base), gene_init="checkpoint")
    torch.manual_seed(cfg.run.seed)
    model = JEPA.from_train_config(cfg)
    before = {k: v.clone() for k, v in model.predictor.state_dict().items()}

    class Info:
        is_main, enabled, device = True, False, torch.device("cpu")

    init_from_checkpoint(model, None, cfg, Info())
    after = model.predictor.state_dict()
    V = cfg.model_config().vocab_size
    assert torch.equal(after["query_embedding.weight"], load_checkpoint(base).encoder.gene_embedding.weight[:V])
    for k in before:
        if k != "query_embedding.weight":
            assert torch.equal(before[k], after[k]), k  # the rest of the predictor: its own fresh initialisation


def test_pca_gene_init_replaces_only_the_gene_embeddings(tmp_path, base):
    teacher0, _, _ = _start(tmp_path, init_from=str(base), gene_init="pca", run_name="pca")
    ck = load_checkpoint(base).encoder.state_dict()
    assert not torch.equal(teacher0["gene_embedding.weight"], ck["gene_embedding.weight"])
    V = ModelConfig.preset("tiny").vocab_size
    assert torch.equal(teacher0["gene_embedding.weight"][V:], ck["gene_embedding.weight"][V:])  # technical tokens kept
    rest = [k for k in ck if k != "gene_embedding.weight"]
    assert _equal({k: teacher0[k] for k in rest}, {k: ck[k] for k in rest})


def test_a_config_that_does_not_fit_names_both_shapes(tmp_path):
    torch.manual_seed(0)
    wide = save_checkpoint(BiomJEPA(ModelConfig.preset("tiny", d_model=16, n_heads=2)), tmp_path / "wide")
    cfg = tiny_config(tmp_path, init_from=str(wide), gene_init="checkpoint", run_name="misfit")
    with pytest.raises(ValueError, match=r"d_model=16.*gene_embedding \[19266, 16\].*d_model=32.*\[19266, 32\]") as err:
        pretrain(cfg)
    assert "differ in d_model" in str(err.value) and "model.preset/model.overrides" in str(err.value)
    assert not (tmp_path / "runs" / "misfit" / "checkpoints").exists()


def test_gene_init_must_say_what_happens_to_the_checkpoint_embeddings(tmp_path, base):
    with pytest.raises(ValueError, match="gene_init='random' would replace them"):
        tiny_config(tmp_path, init_from=str(base))  # the tiny preset's gene_init is random
    with pytest.raises(ValueError, match="init_from, which is not set"):
        tiny_config(tmp_path, gene_init="checkpoint")


def test_a_url_is_verified_by_its_sha256(tmp_path, base, http_root):
    root, url = http_root
    shutil.copytree(base, root / "ck")
    digest = checkpoint_sha256(base)
    with pytest.raises(ValueError, match="expected 0000"):
        pretrain(tiny_config(tmp_path, init_from=f"{url}/ck#sha256={'0' * 64}", gene_init="checkpoint", run_name="bad"))
    teacher0, _, _ = _start(tmp_path, init_from=f"{url}/ck#sha256={digest}", gene_init="checkpoint", run_name="url")
    assert _equal(teacher0, load_checkpoint(base).encoder.state_dict())


def test_resume_keeps_the_record_and_refuses_another_base(tmp_path, base):
    cfg = tiny_config(tmp_path, init_from=str(base), gene_init="checkpoint", run_name="resume", steps=2, stop_at=1)
    run = pretrain(cfg)
    first = load_latest_state(run)[1]["init_from"]
    pretrain(cfg.replace(stop_at=None))
    _, state = load_latest_state(run)
    assert state["step"] == 2 and state["init_from"] == first
    other = save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), tmp_path / "other")
    with pytest.raises(ValueError, match="init_from"):
        pretrain(cfg.replace(init_from=str(other), stop_at=None, steps=3))


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not installed")
@pytest.mark.slow
def test_two_ranks_load_the_same_weights(tmp_path, base):
    cfg = tiny_config(tmp_path, steps=2, run_name="ddp", checkpoint_every=100, init_from=str(base),
                      gene_init="checkpoint")
    path = tmp_path / "ddp.yaml"
    cfg.to_yaml(path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    cmd = ["torchrun", "--nproc_per_node=2", "--master_port=29519", "-m", "biomjepa.train", str(path),
           "--set", "progress=false"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "runs" / "ddp"
    h = [(run / f"weights_rank{r}.sha256").read_text() for r in range(2)]
    assert h[0] == h[1]
    assert load_latest_state(run)[1]["init_from"]["checkpoint_sha256"] == checkpoint_sha256(base)


def test_a_missing_base_is_named_as_the_config_key(tmp_path):
    """Issue 46: the loader advised "Pass `checkpoint=` ...", an argument of the tools, for `model.init_from`."""
    cfg = tiny_config(tmp_path, init_from=str(tmp_path / "no_such_checkpoint"), gene_init="checkpoint", run_name="x")
    with pytest.raises(FileNotFoundError, match=r"'.*no_such_checkpoint' is neither .*Set model.init_from to") as err:
        pretrain(cfg)
    assert "checkpoint=" not in str(err.value) and "bj.settings.checkpoint" not in str(err.value)


def test_a_corpus_too_small_for_pca_is_advised_a_gene_init_the_run_accepts(tmp_path, base, monkeypatch):
    """Issue 46: with `model.init_from`, the advice was `gene_init='random'`, which init_from refuses."""
    import numpy as np
    from scipy import sparse

    from biomjepa.train import gene_init

    one_cell = sparse.csr_matrix(np.ones((1, 19264), dtype=np.float32))
    monkeypatch.setattr(gene_init, "corpus_lognorm", lambda corpus, **kw: one_cell)
    cfg = tiny_config(tmp_path, init_from=str(base), gene_init="pca", run_name="small")
    with pytest.raises(ValueError, match=r"model.gene_init: pca needs a corpus .* set model.gene_init: checkpoint") as err:
        pretrain(cfg)
    assert "random" not in str(err.value)
