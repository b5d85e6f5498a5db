"""Device and precision choice shared by inference and training."""

from __future__ import annotations

import logging

logger = logging.getLogger("biomjepa")


def resolve_device(device: str | None = "auto"):
    """``"auto"`` → CUDA if available else CPU; an explicit CUDA request without CUDA is an error."""
    import torch

    from ._settings import check_device, settings

    device = settings.device if device in (None, "auto") and settings.device != "auto" else device
    if device is not None:
        device = check_device(device, "device")
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device={device!r} was requested but CUDA is not available (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda}). Use device='cpu' or 'auto', or install a CUDA build of torch."
        )
    return dev


def autocast(device):
    """bf16 autocast on CUDA; a no-op context (fp32) on CPU."""
    import contextlib

    import torch

    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
