"""Partial fine-tuning: which parameters train, the paper's parameter count, and ``bj.tl.finetune`` end to end."""

from __future__ import annotations

import anndata as ad
import numpy as np
import pytest
import torch

import biomjepa as bj
from biomjepa.nn import Encoder, ModelConfig
from biomjepa.nn.finetune import (
    FinetuneModel,
    count_trainable,
    encoder_trainable_names,
    four_part_pool,
    make_optimizer,
    mark_trainable,
    train_epoch,
)
from biomjepa.tl._finetune import finetune, load_finetuned, stratified_split

KEY = "biomjepa_finetune"


@pytest.fixture
def mapped(counts_adata):
    bj.pp.map_vocab(counts_adata)
    return counts_adata


def test_base_trainable_count_matches_paper():
    """26,088,205 trainable for ``base`` with C = 13 (7,121,664 encoder + 18,966,541 head)."""
    with torch.device("meta"):
        model = FinetuneModel(Encoder(ModelConfig.preset("base")), 13)
    counts = mark_trainable(model)
    assert counts == {"encoder": 7_121_664, "head": 18_966_541, "total": 26_088_205}
    assert model.head[1].in_features == 3072 and model.head[1].out_features == 6144
    block = sum(p.numel() for p in model.encoder.blocks[-1].parameters())
    assert block == 7_087_872 and counts["encoder"] - block == 22 * 2 * 768


def test_only_stated_parameters_change(mapped):
    from biomjepa.data.stream import gather

    torch.manual_seed(0)
    model = FinetuneModel(Encoder(ModelConfig.preset("tiny")), 3)
    mark_trainable(model)
    last = len(model.encoder.blocks) - 1
    expected = {
        n
        for n, _ in model.encoder.named_parameters()
        if n.startswith(f"blocks.{last}.") or ".ln1." in n or ".ln2." in n
    }
    assert set(encoder_trainable_names(model.encoder)) == expected
    trainable = {f"encoder.{n}" for n in expected} | {f"head.{n}" for n, _ in model.head.named_parameters()}
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable
    assert count_trainable(model)["total"] == sum(
        p.numel() for n, p in model.named_parameters() if n in trainable
    )

    before = {k: v.clone() for k, v in model.state_dict().items()}
    cells = gather(mapped, np.arange(mapped.n_obs))
    opt = make_optimizer(model, lr_head=1e-3, lr_encoder=5e-5, weight_decay=0.01)
    labels = np.repeat([0, 1, 2], 20)
    stats = train_epoch(
        model,
        cells.subset(np.arange(0, 60, 6)),
        labels[::6],
        opt,
        batch_size=4,
        rng=np.random.default_rng(0),
        device=torch.device("cpu"),
    )
    assert stats["n_cells"] == 10 and np.isfinite(stats["loss"])
    after = model.state_dict()
    for name, value in before.items():
        if name in trainable:
            assert not torch.equal(value, after[name]), f"{name} should have been updated"
        else:
            assert torch.equal(value, after[name]), f"{name} is frozen but changed"


def test_four_part_pool_order_and_masking():
    hidden = torch.randn(2, 6, 4)
    gene_mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 0, 1, 0, 0, 0]], dtype=torch.bool)
    out = four_part_pool(hidden, gene_mask)
    assert out.shape == (2, 16)
    for b in range(2):
        genes = hidden[b, gene_mask[b]]
        ref = torch.cat([hidden[b, 1], hidden[b, 0], genes.amax(0), genes.mean(0)])
        torch.testing.assert_close(out[b], ref)


def test_stratified_split_sizes_match_paper():
    codes = np.repeat(np.arange(13), [500, 300, 250, 200, 200, 150, 150, 100, 100, 80, 50, 40, 13])
    split = stratified_split(codes, 0.6, 0.2, 0)
    assert len(codes) == 2133
    assert [(split == s).sum() for s in ("train", "valid", "test")] == [1279, 427, 427]
    for c in range(13):  # every class in every split
        assert {"train", "valid", "test"} <= set(split[codes == c])


def test_finetune_end_to_end(mapped, tiny_checkpoint, tmp_path):
    before = mapped.copy()
    out = finetune(
        mapped,
        label_key="group",
        checkpoint=tiny_checkpoint,
        epochs=2,
        batch_size=8,
        device="cpu",
        out_dir=tmp_path / "ft",
        copy=True,
    )
    assert mapped.obs.equals(before.obs) and KEY not in mapped.uns  # copy=True leaves the input alone
    proba = out.obsm[f"{KEY}_proba"]
    assert proba.shape == (60, 3) and proba.dtype == np.float32
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-5)
    pred = out.obs[f"{KEY}_prediction"]
    assert list(pred.cat.categories) == ["a", "b", "c"]
    assert (pred.to_numpy() == np.asarray(["a", "b", "c"])[proba.argmax(1)]).all()
    split = out.obs[f"{KEY}_split"]
    assert split.value_counts().to_dict() == {"train": 36, "valid": 12, "test": 12}
    res = out.uns[KEY]
    assert res["classes"] == ["a", "b", "c"] and res["best_epoch"] in (1, 2)
    assert set(res["metrics"]) == {"train", "valid", "test"}
    assert all(0 <= m["macro_f1"] <= 1 and 0 <= m["accuracy"] <= 1 for m in res["metrics"].values())
    assert res["n_trainable"]["total"] == res["n_trainable"]["encoder"] + res["n_trainable"]["head"]
    assert res["throughput"]["train_cells_per_s"] > 0 and res["throughput"]["heldout_cells_per_s"] > 0
    assert res["params"]["lr_head"] == 1e-3 and res["params"]["label_key"] == "group"
    assert len(res["history"]["train_loss"]) == 2
    out.write_h5ad(tmp_path / "out.h5ad")  # everything written is h5ad-serializable
    assert ad.read_h5ad(tmp_path / "out.h5ad").uns[KEY]["classes"].tolist() == ["a", "b", "c"]
    # the saved encoder + head reproduce the stored probabilities
    model, classes = load_finetuned(tmp_path / "ft")
    from biomjepa.data.stream import gather
    from biomjepa.nn.finetune import predict_proba

    again, _ = predict_proba(model, gather(mapped, np.arange(mapped.n_obs)), batch_size=8, device=torch.device("cpu"))
    assert classes == ["a", "b", "c"]
    np.testing.assert_allclose(again, proba, atol=1e-5)
    assert not list(tmp_path.joinpath("ft").rglob("*.pt")) and not list(
        tmp_path.joinpath("ft").rglob("*.pkl")
    )


def test_finetune_reproducible_and_in_place(mapped, tiny_checkpoint):
    a = finetune(mapped, label_key="group", checkpoint=tiny_checkpoint, device="cpu", copy=True)
    finetune(mapped, label_key="group", checkpoint=tiny_checkpoint, device="cpu")
    np.testing.assert_array_equal(a.obsm[f"{KEY}_proba"], mapped.obsm[f"{KEY}_proba"])
    assert a.obs[f"{KEY}_split"].equals(mapped.obs[f"{KEY}_split"])
    c = finetune(
        mapped,
        label_key="group",
        checkpoint=tiny_checkpoint,
        device="cpu",
        random_state=1,
        key_added="other",
        copy=True,
    )
    assert not c.obs["other_split"].astype(str).equals(a.obs[f"{KEY}_split"].astype(str))
    # the cached frozen model is untouched: embeddings still come from the original weights
    model = bj._pretrained.load_model(tiny_checkpoint)
    assert all(p.requires_grad for p in model.parameters())


def test_finetune_errors_leave_input_unchanged(mapped, tiny_checkpoint):
    before = mapped.copy()

    def unchanged():
        assert mapped.obs.equals(before.obs) and list(mapped.obsm) == list(before.obsm)
        assert set(mapped.uns) == set(before.uns)

    with pytest.raises(KeyError, match="label_key"):
        finetune(mapped, label_key="nope", checkpoint=tiny_checkpoint, device="cpu")
    unchanged()
    mapped.obs["one"] = mapped.obs["group"].astype(str)
    mapped.obs.loc[mapped.obs_names[0], "one"] = "singleton"
    before = mapped.copy()
    with pytest.raises(ValueError, match=r"fewer than 3 cells.*'singleton' \(1\)"):
        finetune(mapped, label_key="one", checkpoint=tiny_checkpoint, device="cpu")
    unchanged()
    with pytest.raises(ValueError, match="train_frac"):
        finetune(mapped, label_key="group", checkpoint=tiny_checkpoint, train_frac=0.9, valid_frac=0.2)
    unchanged()
    fresh = ad.AnnData(mapped.X.copy(), obs=mapped.obs.copy())
    with pytest.raises(KeyError, match="map_vocab"):
        finetune(fresh, label_key="group", checkpoint=tiny_checkpoint, device="cpu")


def test_missing_labels_are_predicted_not_trained(mapped, tiny_checkpoint):
    mapped.obs["lab"] = mapped.obs["group"].astype(object)
    mapped.obs.loc[mapped.obs_names[:5], "lab"] = np.nan
    finetune(mapped, label_key="lab", checkpoint=tiny_checkpoint, device="cpu")
    split = mapped.obs[f"{KEY}_split"].astype(str).to_numpy()
    assert (split[:5] == "unlabelled").all() and (split[5:] != "unlabelled").all()
    assert mapped.obs[f"{KEY}_prediction"].notna().all()


def test_out_dir_is_checked_before_training(mapped, tiny_checkpoint, tmp_path, monkeypatch):
    """A bad ``out_dir`` is refused before any model is loaded or trained (issue 30), the input unchanged."""
    from biomjepa.tl import _finetune

    monkeypatch.setattr(_finetune, "fit_head", lambda *a, **k: pytest.fail("trained before checking out_dir"))
    (tmp_path / "file").write_text("x")
    before = mapped.copy()
    kw = dict(label_key="group", checkpoint=tiny_checkpoint, epochs=1, device="cpu")
    with pytest.raises(ValueError, match=r"out_dir=.*file' is an existing file"):
        finetune(mapped, out_dir=tmp_path / "file", **kw)
    with pytest.raises(ValueError, match=r"cannot be created: .*file' is a file"):
        finetune(mapped, out_dir=tmp_path / "file" / "ft", **kw)
    with pytest.raises(TypeError, match=r"out_dir must be a directory path"):
        finetune(mapped, out_dir=3, **kw)
    assert mapped.obs.equals(before.obs) and KEY not in mapped.uns
