"""Precision: ``bj.settings.precision`` and ``loop.precision`` ("fp32", "bf16", "auto"), the one place that resolves
them (``_device.resolve_precision``), and the encoder under CPU bf16 autocast (the streamed path included)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import biomjepa as bj
from biomjepa import _device
from biomjepa.nn import EncoderBlock, attention

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize("value", ["fp16", "float32", "", None, 1, "bf 16"])
def test_bogus_precision_is_refused_when_set(value):
    before = bj.settings.precision
    with pytest.raises(ValueError, match=r"bj\.settings\.precision=.*'fp32', 'bf16' or 'auto'"):
        bj.settings.precision = value
    assert bj.settings.precision == before == "fp32"  # the default: the same embeddings on every machine


def test_explicit_precisions_pass_through_and_none_reads_the_setting(monkeypatch):
    for dev in (CPU, CUDA):
        assert _device.resolve_precision("fp32", dev) == "fp32"
        assert _device.resolve_precision("BF16", dev) == "bf16"
        assert _device.resolve_precision(None, dev) == "fp32"
    monkeypatch.setattr(bj.settings, "precision", "bf16")
    assert _device.resolve_precision(None, CPU) == "bf16"
    assert _device.dtype_label(CPU) == "bfloat16-autocast"


def test_auto_is_bf16_on_cuda_and_on_cpus_that_multiply_bf16_faster(monkeypatch):
    """A CPU that reports no bf16 units is never measured and stays float32; one that reports them gets bf16
    only when the measured GEMM check finds bf16 faster."""
    assert _device.resolve_precision("auto", CUDA) == "bf16"
    assert _device.resolve_precision("auto", "mps") == "fp32"

    def never():
        raise AssertionError("measured although the CPU reports no bf16 units")

    monkeypatch.setattr(_device, "cpu_bf16_units", list)
    monkeypatch.setattr(_device, "cpu_bf16_speedup", never)
    assert _device.resolve_precision("auto", CPU) == "fp32"
    monkeypatch.setattr(_device, "cpu_bf16_units", lambda: ["amx_bf16"])
    monkeypatch.setattr(_device, "cpu_bf16_speedup", lambda: 1.1)  # emulated bf16: not faster enough
    assert _device.resolve_precision("auto", CPU) == "fp32"
    monkeypatch.setattr(_device, "cpu_bf16_speedup", lambda: 4.0)
    assert _device.resolve_precision("auto", CPU) == "bf16"


def test_the_gemm_check_is_measured_once_per_process():
    units = _device.cpu_bf16_units()
    assert set(units) <= {"amx_bf16", "avx512_bf16"}
    first = _device.cpu_bf16_speedup()
    assert first > 0 and _device.cpu_bf16_speedup() == first  # cached: the same number, not a new measurement


def test_autocast_follows_the_precision():
    assert isinstance(_device.autocast(CPU, "fp32"), contextlib.nullcontext)
    with _device.autocast(CPU, "bf16"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("chunk", [4096, 192 * 150])  # block and attention stream; only the block (FFN) streams
def test_streamed_block_runs_under_bf16_autocast(monkeypatch, masked, chunk):
    """The streamed CPU path wrote its output projection with ``addmm(out=...)``, which refused bf16 inputs under
    autocast; it now runs, keeps the float32 residual stream (also where only the FFN streams and the attention
    hands back a bf16 output) and agrees with the whole-length path and float32."""
    torch.manual_seed(0)
    block = EncoderBlock(64, 4, 256).eval()
    x = torch.randn(3, 150, 64)
    mask = torch.ones(3, 150, dtype=torch.bool)
    if masked:
        mask[1, 90:] = False
    with torch.inference_mode():
        want = block(x, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            whole = block(x, mask)
            monkeypatch.setattr(attention, "CHUNK_ELEMENTS", chunk)  # several blocks of tokens per batch
            assert attention.streams(x, 3 * 256, False)
            assert attention.streams(x, 3 * 64, False) == (chunk == 4096)
            streamed = block(x, mask)
    assert streamed.dtype == whole.dtype == torch.float32
    scale = want.abs().max()
    assert (streamed - whole).abs().max() < 0.01 * scale  # bf16 rounding of other-sized GEMMs, not a wrong formula
    assert (streamed - want).abs().max() < 0.01 * scale
    assert not torch.equal(streamed, want)  # bf16 really ran


def test_loop_precision_supersedes_bf16_and_old_configs_load():
    cfg = bj.train.TrainConfig()
    assert cfg.loop.precision == "auto" and cfg.loop.bf16 is None and cfg.loop.amp == "auto"
    assert bj.train.load_config("tiny").loop.amp == "fp32"
    old = bj.train.TrainConfig.from_flat({**cfg.flat(), "bf16": False})  # a state saved before loop.precision
    assert old.loop.amp == "fp32"
    assert bj.train.TrainConfig.from_flat({**cfg.flat(), "bf16": True}).loop.amp == "auto"
    assert cfg.replace(precision="bf16").loop.amp == "bf16"
    with pytest.raises(ValueError, match="precision"):
        cfg.replace(precision="half").loop  # noqa: B018
    with pytest.raises(ValueError, match="precision"):
        bj.train.TrainConfig.from_dict({"loop": {"precision": "fp16"}})


def test_tl_embed_records_the_precision(monkeypatch):
    adata = bj.datasets.pancreas()[:6].copy()
    bj.pp.map_vocab(adata)
    fp32 = bj.tl.embed(adata, device="cpu", copy=True)
    assert (fp32.uns["biomjepa"]["params"]["precision"], fp32.uns["biomjepa"]["params"]["dtype"]) == ("fp32", "float32")
    monkeypatch.setattr(bj.settings, "precision", "bf16")
    bf16 = bj.tl.embed(adata, device="cpu", copy=True)
    params = bf16.uns["biomjepa"]["params"]
    assert (params["precision"], params["dtype"]) == ("bf16", "bfloat16-autocast")
    got, want = bf16.obsm["X_biomjepa"], fp32.obsm["X_biomjepa"]
    assert got.dtype == np.float32 and np.isfinite(got).all() and not np.array_equal(got, want)
