"""Devices: ``bj.settings.device`` and every ``device=`` argument are checked, and CUDA asked for without
CUDA is a clear error that leaves the input unchanged."""

from __future__ import annotations

import pytest
import torch
from _inputs import TOOLS, make_mapped, raises_unchanged

import biomjepa as bj


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "tpu", "", 0])
def test_bogus_settings_device_is_refused_when_set(device):
    before = bj.settings.device
    with pytest.raises(ValueError, match=r"bj\.settings\.device=.*'auto', 'cpu', 'cuda', 'cuda:N'.*'mps'"):
        bj.settings.device = device
    assert bj.settings.device == before


def test_bogus_device_argument_names_it():
    from biomjepa._device import resolve_device

    with pytest.raises(ValueError, match=r"^device='banana' is not a device"):
        resolve_device("banana")
    assert resolve_device("CPU").type == "cpu"
    with pytest.raises(ValueError, match=r"device='tpu'"):
        bj.train.TrainConfig().replace(device="tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")
@pytest.mark.parametrize("tool", list(TOOLS))
def test_cuda_requested_without_cuda(tool, ckpt):
    raises_unchanged(make_mapped(), RuntimeError, r"device='cuda' was requested but CUDA is not available",
                     TOOLS[tool], ckpt, device="cuda")
