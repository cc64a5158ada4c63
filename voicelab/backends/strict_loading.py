"""Loading a state dict strictly, as nanoGPT's from_pretrained does: same keys, same shapes, or one sentence."""

from __future__ import annotations

import torch
from torch import nn

from voicelab.errors import BackendLoadError


def load_state_strictly(model: nn.Module, tensors: dict[str, torch.Tensor], misfit: str) -> None:
    """Copy ``tensors`` into ``model``; a BackendLoadError starting with ``misfit`` names what differs."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    mismatched = [
        f"{k} (file {tuple(tensors[k].shape)}, model {tuple(v.shape)})"
        for k, v in expected.items()
        if k in tensors and tensors[k].shape != v.shape
    ]
    problems = [
        f"{label}: {', '.join(items[:5])}{' ...' if len(items) > 5 else ''}"
        for label, items in (("missing", missing), ("unexpected", extra), ("wrong shape", mismatched))
        if items
    ]
    if problems:
        raise BackendLoadError(f"{misfit}; " + "; ".join(problems) + ".")
    model.load_state_dict(tensors, strict=True)
