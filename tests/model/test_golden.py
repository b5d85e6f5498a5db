"""Refactors keep the bundled model's embeddings: 96 bundled pancreas cells against stored values, written by
``tl.embed`` at batch size 16 on a CPU whose torch capability is stored with them: v0.2 (loaded by name,
``tests/model/data/golden_embeddings.npz``, stored before the issue-23 restructuring) and the default v0.2.1
(same weights, fixed readout map; ``golden_embeddings_v0.2.1.npz``), which must also equal the v0.2
values through the checkpoint's recorded map.

On a CPU of the same capability (the development machine and CI) the embeddings at batch sizes 16 and 96
must be equal bit for bit; elsewhere (another SIMD path changes float rounding) within 1e-5. Batch size 7
cuts the length-sorted cells into other padded shapes, whose GEMMs round differently: measured max |diff|
1.9e-9 before the refactor, so it is held to 1e-6.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import biomjepa as bj

DATA = Path(__file__).parent / "data"
WEIGHTS_SHA = "c639180369e587ceae87e8228d05bd857a19b9cf45fa922968f70f375ae19cb1"
#: registry name asked for (None: the default) → (stored values, the name and weights the embedding must record)
GOLDEN = {
    "biomjepa-mini-v0.2": (DATA / "golden_embeddings.npz", ("biomjepa-mini-v0.2", WEIGHTS_SHA)),
    None: (DATA / "golden_embeddings_v0.2.1.npz", ("biomjepa-mini-v0.2.1", WEIGHTS_SHA)),
}


def _has_map(checkpoint) -> bool:
    """Whether the checkpoint records a fixed readout map (v0.2.1: standardization and whitening)."""
    return bj.load_model(checkpoint).feature_scale is not None


def _embed(batch_size: int, checkpoint=None):
    adata = bj.datasets.pancreas()[:96].copy()
    bj.pp.map_vocab(adata)
    bj.tl.embed(adata, batch_size=batch_size, device="cpu", checkpoint=checkpoint)
    return adata


@pytest.mark.parametrize("checkpoint", list(GOLDEN), ids=["v0.2", "default"])
@pytest.mark.parametrize(("batch_size", "exact"), [
    (16, True),  # in the fast default: one bit-exact check of each bundled model
    pytest.param(96, True, marks=pytest.mark.slow),
    pytest.param(7, False, marks=pytest.mark.slow),
])
def test_embeddings_equal_stored_values(batch_size, exact, checkpoint):
    import torch

    path, record = GOLDEN[checkpoint]
    stored = np.load(path)
    adata = _embed(batch_size, checkpoint)
    assert list(adata.obs_names) == list(stored["cells"])
    params = adata.uns["biomjepa"]["params"]
    assert (params["checkpoint"], params["checkpoint_sha256"]) == record  # a new default needs new stored values
    got, want = adata.obsm["X_biomjepa"], stored["embedding"]
    assert got.dtype == want.dtype and got.shape == want.shape
    # v0.2.1's fixed map divides by corpus s.d. down to 6.7e-4 and whitens: the float rounding of the pooled
    # features that other padded shapes change (≤ 1e-6) reaches 4.9e-4 (batch 96) / 4.9e-4 (batch 7) on its
    # unit-scale outputs (measured), so other batch sizes are held to 2e-3 there
    mapped = _has_map(checkpoint)
    same_cpu = torch.backends.cpu.get_cpu_capability() == str(stored["cpu_capability"])
    if exact and same_cpu and (batch_size == 16 or not mapped):
        diff = np.abs(got.astype(np.float64) - want).max()
        assert np.array_equal(got, want), f"embeddings changed (max |diff| {diff:.3g})"
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 if mapped else (1e-5 if exact else 1e-6))


def test_default_is_the_v02_embedding_through_its_fixed_map():
    """v0.2.1 = ((v0.2 readout − mean) / scale) @ W with the constants its config.json records."""
    m = bj.load_model()
    v02 = np.load(GOLDEN["biomjepa-mini-v0.2"][0])["embedding"].astype(np.float64)
    want = (v02 - m.feature_mean.numpy()) / m.feature_scale.numpy() @ m.feature_whiten.numpy()
    got = np.load(GOLDEN[None][0])["embedding"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
