"""What every ``bj.tl`` tool shares (``tl/_utils.py`` and the checks each tool makes on entry), swept over
the tools: AnnData without cells, obs/obsm keys that do not exist, one-cell groups, ``batch_size``,
``copy=True`` (on backed data too). Each case asserts a clear error naming the argument (or the
documented handling) and that the input is unchanged."""

from __future__ import annotations

import json

import anndata as ad
import numpy as np
import pytest
from _inputs import (
    N_CELLS,
    TOOLS,
    _ablate,
    _embed,
    _max_token,
    assert_unchanged,
    make_mapped,
    make_raw,
    make_screen,
    programme,
    raises_unchanged,
    symbols,
)

import biomjepa as bj


def test_zero_cells_after_filtering(ckpt):
    raw = make_raw()
    empty_raw = raw[raw.obs["group"] == "none"].copy()
    raises_unchanged(empty_raw, ValueError, "AnnData is empty", bj.pp.map_vocab)
    mapped = make_mapped()
    empty = mapped[mapped.obs["group"] == "none"].copy()
    assert empty.n_obs == 0
    for tool in TOOLS.values():
        raises_unchanged(empty, ValueError, "adata has no cells", tool, ckpt)
    with pytest.raises(ValueError, match="adata has no cells"):  # before the training state is read
        bj.tl.programme_dependencies(empty, {"p": programme(), "q": symbols(3, 1100)}, checkpoint="unused",
                                     groupby="group", matched={"p": "a", "q": "b"})
    empty.obsm["X_rep"] = np.zeros((0, 4))
    raises_unchanged(empty, ValueError, r"obs\['group'\] has no valid labels", bj.bench.annotation,
                     label_key="group", use_reps=["X_rep"])
    screen = make_screen()
    empty_screen = screen[screen.obs["perturbation"] == "none"].copy()
    raises_unchanged(empty_screen, ValueError, "Found 0 control cells", bj.tl.perturbation_arithmetic,
                     use_rep="X_rep")


def _missing_key_calls(ckpt):
    screen = make_screen()
    mapped = make_mapped()
    mapped.obsm["X_rep"] = np.random.default_rng(0).normal(size=(N_CELLS, 4))
    return [
        (mapped, KeyError, r"groupby='nope' is not a column of adata\.obs", _max_token, (ckpt,), {"groupby": "nope"}),
        (mapped, KeyError, r"groupby='nope' is not a column of adata\.obs", _ablate, (ckpt,), {"groupby": "nope"}),
        (mapped, KeyError, r"groupby='nope' is not a column of adata\.obs", bj.tl.programme_dependencies,
         ({"p": programme(), "q": symbols(3, 1100)},),
         {"checkpoint": "unused", "groupby": "nope", "matched": {"p": "a", "q": "b"}}),
        (mapped, KeyError, r"Did not find \.obs\['nope'\]", bj.tl.finetune, (), {"label_key": "nope", "checkpoint": ckpt}),
        (screen, KeyError, r"adata\.obs\['nope'\] not found; pass `perturbation_key=`", bj.tl.perturbation_arithmetic,
         (), {"perturbation_key": "nope", "use_rep": "X_rep"}),
        (screen, KeyError, r"adata\.obsm\['X_nope'\] not found", bj.tl.perturbation_arithmetic, (), {"use_rep": "X_nope"}),
        (mapped, KeyError, r"obs\['nope'\] not found; pass `label_key=`", bj.bench.annotation, (),
         {"label_key": "nope", "use_reps": ["X_rep"]}),
        (mapped, KeyError, r"obs\['nope'\] not found; pass `label_key=`", bj.bench.clustering, (),
         {"label_key": "nope", "use_reps": ["X_rep"]}),
        (mapped, KeyError, r"obsm\['X_biomjepa'\] not found; run `bj\.pp\.map_vocab` and `bj\.tl\.embed` first",
         bj.bench.annotation, (), {"label_key": "group", "use_reps": ["X_biomjepa"]}),
        (mapped, KeyError, r"Layer 'nope' not found", _embed, (ckpt,), {"layer": "nope"}),
    ]


def test_obs_and_obsm_keys_that_do_not_exist(ckpt):
    for adata, exc, match, fn, args, kwargs in _missing_key_calls(ckpt):
        raises_unchanged(adata, exc, match, fn, *args, **kwargs)


def test_categorical_groups_with_one_cell(ckpt):
    a = make_mapped()
    bj.tl.max_token(a, checkpoint=ckpt, device="cpu", groupby="group")
    wf = a.uns["max_token"]["winner_fraction"]
    assert list(wf.index) == ["a", "b", "solo"] and np.allclose(wf.sum(axis=1), 1.0)

    with pytest.warns(UserWarning, match=r"fewer than 2 cells are skipped: \['solo'\]"):
        bj.tl.ablate_programme(a, programme(), groupby="group", checkpoint=ckpt, device="cpu", n_cells=4)
    assert set(a.uns["ablation"]["groups"]["group"]) == {"a", "b"}
    raises_unchanged(a, ValueError, "Matched group 'solo' has 1 cell", bj.tl.ablate_programme,
                     {"p": programme(), "q": symbols(3, 1100)}, groupby="group", matched={"p": "solo"},
                     checkpoint=ckpt, device="cpu")
    raises_unchanged(a, ValueError, r"fewer than 3 cells cannot be split.*'solo' \(1\)", bj.tl.finetune,
                     label_key="group", checkpoint=ckpt, device="cpu")

    a.obsm["X_rep"] = np.random.default_rng(0).normal(size=(N_CELLS, 4))
    before = a.copy()
    with pytest.warns(UserWarning, match=r"skipping classes with fewer than 2 labelled cells: \['solo'\]"):
        df = bj.bench.annotation(a, label_key="group", use_reps=["X_rep"], shots=(1,), seeds=(42,))
    assert len(df) == 3
    assert_unchanged(a, before)

    screen = make_screen()
    with pytest.warns(UserWarning, match=r"fewer than min_cells=3 cells are dropped: \['E'\]"):
        bj.tl.perturbation_arithmetic(screen, use_rep="X_rep", n_random=5)
    assert screen.uns["perturbation_arithmetic"]["summary"]["n_doubles"] == 2


def test_copy_true_leaves_input_unchanged(ckpt):
    a = make_mapped()
    before = a.copy()
    out = bj.tl.embed(a, checkpoint=ckpt, device="cpu", copy=True)
    out = bj.tl.max_token(out, checkpoint=ckpt, device="cpu", groupby="group", copy=True)
    assert "X_biomjepa" in out.obsm and "max_token_gene" in out.obs
    assert_unchanged(a, before)
    json.dumps(out.uns["biomjepa"]["params"])  # plain, serialisable parameters


BAD_BATCH = [0, -3, 2.7, 2.0, True, "8"]


def _tools(adata, ckpt):
    return {
        "embed": lambda bs: bj.tl.embed(adata, checkpoint=ckpt, batch_size=bs),
        "max_token": lambda bs: bj.tl.max_token(adata, checkpoint=ckpt, batch_size=bs),
        "ablate_programme": lambda bs: bj.tl.ablate_programme(adata, ["X"], checkpoint=ckpt, batch_size=bs),
        "programme_dependencies": lambda bs: bj.tl.programme_dependencies(
            adata, {"p": ["X"], "q": ["Y"]}, checkpoint=ckpt, groupby="group", matched={}, batch_size=bs
        ),
        "finetune": lambda bs: bj.tl.finetune(adata, label_key="group", checkpoint=ckpt, batch_size=bs),
    }


@pytest.mark.parametrize("bad", BAD_BATCH, ids=repr)
@pytest.mark.parametrize("tool", ["embed", "max_token", "ablate_programme", "programme_dependencies", "finetune"])
def test_every_tool_refuses_a_bad_batch_size(mapped, tiny_checkpoint, tool, bad):
    before = (list(mapped.obs.columns), set(mapped.uns), set(mapped.obsm))
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        _tools(mapped, tiny_checkpoint)[tool](bad)
    assert (list(mapped.obs.columns), set(mapped.uns), set(mapped.obsm)) == before


def test_numpy_integer_batch_size_is_fine(mapped, tiny_checkpoint):
    bj.tl.embed(mapped, checkpoint=tiny_checkpoint, batch_size=np.int64(7))
    assert mapped.uns["biomjepa"]["params"]["batch_size"] == 7


@pytest.fixture
def h5ad_path(mapped, tmp_path):
    path = tmp_path / "mapped.h5ad"
    mapped.write_h5ad(path)
    return path


def test_copy_on_backed_data_says_what_to_do(h5ad_path, tiny_checkpoint):
    backed = ad.read_h5ad(h5ad_path, backed="r")
    with pytest.raises(ValueError, match=r"copy=True is not supported for a backed AnnData.*to_memory\(\).*copy=False"):
        bj.tl.embed(backed, checkpoint=tiny_checkpoint, copy=True)
    with pytest.raises(ValueError, match="to_memory"):
        bj.tl.max_token(backed, checkpoint=tiny_checkpoint, copy=True)
    bj.tl.embed(backed, checkpoint=tiny_checkpoint)  # copy=False works on the backed object
    assert backed.obsm["X_biomjepa"].shape[0] == backed.n_obs
    backed.file.close()
