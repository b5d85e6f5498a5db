import numpy as np
import pandas as pd
import pytest
import torch
from _kit import tiny_config

from biomjepa.train import export, pretrain


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.mark.parametrize("objective", ["block", "token", "random_block", "decoder"])
def test_each_objective_runs_and_logs(tmp_path_factory, objective):
    tmp = tmp_path_factory.getbasetemp() / "loop"
    tmp.mkdir(exist_ok=True)
    cfg = tiny_config(tmp, objective=objective, run_name=objective, steps=3, accumulation=2)
    run = pretrain(cfg)
    log = pd.read_csv(run / "log.csv")
    assert list(log["step"]) == [0, 1, 2]
    assert np.isfinite(log["loss"]).all()
    for col in ("lr", "momentum", "coverage", "fallback", "effective_rank", "cells_per_s", "tokens_per_s"):
        assert col in log
    assert (log["coverage"] > 0).all() and (log["coverage"] <= 1).all()
    assert (run / "checkpoints" / "LATEST").is_file()


def test_export_embeds(tmp_path):
    import anndata as ad
    from scipy import sparse

    import biomjepa as bj
    from biomjepa.data.vocab import Vocab
    from biomjepa.model import load_checkpoint

    run = pretrain(tiny_config(tmp_path, steps=2))
    out = export(run, tmp_path / "export")
    model = load_checkpoint(out)
    prov = model.info.get("provenance") or __import__("json").loads((out / "config.json").read_text())["provenance"]
    assert prov["encoder"] == "teacher" and prov["step"] == 2 and prov["config"]["objective"] == "block"
    syms = Vocab.default().symbols[:300]
    X = sparse.random(20, 300, density=0.3, format="csr", random_state=0) * 10
    X.data = np.ceil(X.data)
    adata = ad.AnnData(X=X.astype(np.float32), var=pd.DataFrame(index=list(syms)))
    bj.pp.map_vocab(adata)
    bj.tl.embed(adata, checkpoint=str(out))
    assert adata.obsm["X_biomjepa"].shape == (20, 64)
    assert np.isfinite(adata.obsm["X_biomjepa"]).all()


def test_nan_loss_skips_then_stops(tmp_path, monkeypatch):
    import biomjepa.train.loop as loop

    real = loop.compute_objective

    def poisoned(*a, **k):
        terms, aux = real(*a, **k)
        terms.total = terms.total * float("nan")
        return terms, aux

    monkeypatch.setattr(loop, "compute_objective", poisoned)
    cfg = tiny_config(tmp_path, steps=5, max_bad_steps=3, checkpoint_every=100)
    with pytest.raises(FloatingPointError, match="consecutive"):
        pretrain(cfg)
    log = pd.read_csv(tmp_path / "runs" / "block-tiny" / "log.csv")
    assert list(log["bad_steps"]) == [1, 2]


def test_per_gene_centre_trains_resumes_and_moves(tmp_path):
    """``target_centre=gene``: a ``[V+2, D]`` centre that only moves on genes that were targets, and
    resume stays bit-exact (the centre is part of the training state)."""
    from biomjepa.train.checkpoint import latest_state, load_state

    kw = dict(target_centre="gene", target_norm=True, checkpoint_every=2, steps=4)
    straight = pretrain(tiny_config(tmp_path, run_name="straight", **kw))
    pretrain(tiny_config(tmp_path, run_name="split", stop_at=2, **kw))
    split = pretrain(tiny_config(tmp_path, run_name="split", **kw))
    a, b = (load_state(latest_state(r)) for r in (straight, split))
    assert a["centre"].shape == (19266, 32)
    assert torch.equal(a["centre"], b["centre"]) and torch.equal(a["teacher"]["blocks.0.ln1.weight"],
                                                                 b["teacher"]["blocks.0.ln1.weight"])
    moved = a["centre"].abs().sum(1) > 0
    assert 0 < int(moved.sum()) <= 1500  # only genes of the synthetic universe were ever targets
    assert not moved[1500:].any()


def test_embedding_regularizer_is_logged_and_reaches_the_student(tmp_path):
    """``lambda_embed_var``/``lambda_embed_cov`` add VICReg terms on the student's pooled embedding:
    logged, and with alignment switched off they alone still train the student."""
    from biomjepa.train.config import load_config
    from biomjepa.train.ema import make_teacher
    from biomjepa.train.jepa import JEPA
    from biomjepa.train.objectives import compute_objective

    run = pretrain(tiny_config(tmp_path, steps=2, lambda_embed_var=1.0, lambda_embed_cov=0.1))
    log = pd.read_csv(run / "log.csv")
    assert (log["embed_var"] > 0).all() and np.isfinite(log["embed_cov"]).all()

    cfg = load_config(tiny_config(tmp_path, lambda_align=0.0, lambda_var=0.0, lambda_cov=0.0,
                                  lambda_embed_var=1.0, lambda_embed_cov=0.0))
    import biomjepa.train.loop as loop

    trainer = loop.Trainer(cfg, loop.init_distributed("cpu"))
    inputs = trainer._micro(next(trainer.batches()))
    model = JEPA.from_train_config(cfg)
    terms, _ = compute_objective(model, make_teacher(model.student), inputs, trainer.running, cfg.loss, cfg.teacher)
    terms.total.backward()
    assert float(terms.total.detach()) > 0
    assert model.student.blocks[-1].ffn[2].weight.grad.abs().sum() > 0
    g = model.predictor.blocks[0].ffn[0].weight.grad
    assert g is None or not g.any()  # the predictor plays no part


def test_pca_gene_init_cell_centre_and_probe_log(tmp_path, counts_adata):
    """gene_init=pca starts gene embeddings from the corpus' PC loadings; the probe is scored at step 0
    and at every checkpoint for every readout."""
    from biomjepa.bench import probe_hook
    from biomjepa.data.shards import Corpus
    from biomjepa.nn.pooling import POOLINGS
    from biomjepa.train.gene_init import pca_gene_embedding

    probe = tmp_path / "probe.h5ad"
    counts_adata.write_h5ad(probe)
    cfg = tiny_config(tmp_path, steps=2, checkpoint_every=2, gene_init="pca", target_centre="gene",
                      cell_centre=True, probe=str(probe), probe_label_key="group", probe_cells=45)
    with pytest.raises(ValueError, match=r"probe\.path=.*on_checkpoint=bj\.bench\.probe_hook\(cfg\)"):
        pretrain(cfg)  # the loop reads no AnnData: the probe is a hook built outside it
    run = pretrain(cfg, on_checkpoint=probe_hook(cfg))
    log = pd.read_csv(run / "probe.csv")
    assert sorted(set(log["step"])) == [0, 2]
    for _, g in log.groupby("step"):
        assert sorted(g["pooling"]) == sorted(POOLINGS)
    assert (log["n_cells"] == 45).all()
    assert np.isfinite(log[["effective_rank", "depth_nnz", "macro_f1_k5"]].to_numpy()).all()
    # the run's own target diagnostics beside the probe: none before training, the log's means after
    train = pd.read_csv(run / "log.csv")
    assert log[log.step == 0][["r2", "tgt_energy", "procrustes_cos"]].isna().all().all()
    after = log[log.step == 2].iloc[0]
    assert np.isclose(after["tgt_energy"], train["tgt_energy"].mean()) and np.isclose(after["r2"], train["r2"].mean())

    E = pca_gene_embedding(Corpus(cfg.data.cache_dir), 19264, 32, scale=0.02, seed=cfg.run.seed)
    detected = np.abs(E[:1500, :31]).sum(1) > 0
    assert detected.mean() > 0.9  # the synthetic cells express the first 1,500 genes
    assert np.isclose(E[:1500][detected, :31].std(), 0.02, rtol=0.05)
    assert np.abs(E[1500:]).max() < 0.02  # never-seen genes: small random embeddings
    # a fresh run starts from exactly these embeddings (step-0 probe came from them)
    E2 = pca_gene_embedding(Corpus(cfg.data.cache_dir), 19264, 32, scale=0.02, seed=cfg.run.seed)
    np.testing.assert_array_equal(E, E2)
    # gene_init: pca_unit (issue 69): the same directions, every detected gene at one norm, the same overall scale
    U = pca_gene_embedding(Corpus(cfg.data.cache_dir), 19264, 32, scale=0.02, seed=cfg.run.seed, unit=True)
    rows, unit_rows = E[:1500][detected], U[:1500][detected]
    assert np.linalg.norm(rows, axis=1).std() > 0.1 * np.linalg.norm(rows, axis=1).mean()  # pca: norms differ
    np.testing.assert_allclose(np.linalg.norm(unit_rows, axis=1), np.linalg.norm(unit_rows, axis=1).mean(), rtol=1e-4)
    cos = (rows * unit_rows).sum(1) / np.linalg.norm(rows, axis=1) / np.linalg.norm(unit_rows, axis=1)
    assert cos.min() > 0.9999 and np.isclose(unit_rows[:, :31].std(), 0.02, rtol=0.05)
    np.testing.assert_array_equal(U[1500:], E[1500:])  # never-seen genes as before
    assert tiny_config(tmp_path / "u", gene_init="pca_unit").model.gene_init == "pca_unit"


def test_cell_centre_needs_gene_centre(tmp_path):
    with pytest.raises(ValueError, match="cell_centre"):
        tiny_config(tmp_path, cell_centre=True, target_centre="global")


def test_export_refuses_an_existing_directory_unless_told_to_replace_it(tmp_path):
    """Issue 24: `export` overwrote an existing checkpoint silently."""
    import json

    from biomjepa.train.__main__ import main

    run = pretrain(tiny_config(tmp_path, steps=1))
    out = export(run, tmp_path / "export")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(FileExistsError, match=r"export/? already exists .*overwrite=True"):
        export(run, out, which="student")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    with pytest.raises(SystemExit) as exc:  # the command line refuses before training
        main(["no-such-config.yaml", "--export", str(out)])
    assert exc.value.code == 2
    assert export(run, out, which="student", overwrite=True) == out
    assert json.loads((out / "config.json").read_text())["provenance"]["encoder"] == "student"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not part of a checkpoint"):
        export(run, tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "x"


def test_export_records_pooling(tmp_path):
    import json

    run = pretrain(tiny_config(tmp_path, steps=1))
    out = export(run, tmp_path / "export", pooling="centred_max_top5")
    assert json.loads((out / "config.json").read_text())["model"]["pooling"] == "centred_max_top5"
    with pytest.raises(ValueError, match="pooling"):
        export(run, tmp_path / "bad", pooling="mean")


def test_an_anchored_teacher_stays_put_and_the_probe_can_score_the_student(tmp_path):
    """momentum 1 freezes the teacher at its start; ``probe.encoder=student`` hands the hook the student."""
    seen = {}

    def hook(step, encoder, run_dir):
        seen[step] = {k: v.detach().clone() for k, v in encoder.state_dict().items()}

    cfg = tiny_config(tmp_path, steps=4, checkpoint_every=4, momentum_start=1.0, momentum_end=1.0,
                      probe_encoder="student", lr=1e-3, warmup_steps=1)
    run = pretrain(cfg, on_checkpoint=hook)
    assert sorted(seen) == [0, 4]
    moved = [k for k in seen[0] if not torch.equal(seen[0][k], seen[4][k])]
    assert moved  # the hook saw the student, which trained
    out_t = export(run, tmp_path / "teacher")
    out_s = export(run, tmp_path / "student", which="student")
    from safetensors.torch import load_file

    t, s = load_file(out_t / "model.safetensors"), load_file(out_s / "model.safetensors")
    start = seen[0]
    assert set(t) & set(start) and all(torch.equal(t[k], start[k]) for k in t if k in start)  # the teacher is still the start
    assert any(not torch.equal(s[k], start[k]) for k in s if k in start)
