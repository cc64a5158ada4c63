"""The device a backend was asked to run on, checked once for every backend that loads PyTorch modules."""

from __future__ import annotations

import torch

from voicelab.errors import InvalidSettingError


def checked_device(device: str) -> torch.device:
    """``device`` as a torch.device, or one sentence saying why it cannot be used here."""
    try:
        target = torch.device(device)
    except RuntimeError as exc:
        raise InvalidSettingError(f"Unknown device {device!r}; use cpu or cuda.") from exc
    if target.type == "cuda" and not torch.cuda.is_available():
        raise InvalidSettingError("A CUDA GPU was asked for, but PyTorch sees none here; use the CPU instead.")
    return target
