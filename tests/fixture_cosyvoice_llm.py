"""Upstream's speech-token LLM (``Qwen2LM``) of the tiny random model, built here for the fast-decode tests.

The LLM is what ``random_model --size tiny`` writes: the Qwen2 body of the 0.5B shape with 2 layers
(``random_parts.write_qwen``) inside upstream's ``Qwen2LM`` as the hyperparameter file builds it
(``random_yaml``: the same ``ras_sampling`` parameters). Needs transformers, HyperPyYAML and an upstream checkout
(``VOICELAB_COSYVOICE_CODE``, else ``.cosy/upstream`` in the repository); without them the tests using it skip,
which is what happens in CI and in the default .venv. Upstream's LLM module imports torchaudio (for audio paths the
LLM never takes); where torchaudio is not installed (it does not exist for torch 2.13) a bare stand-in module is
registered for the import, in tests only.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import io
import os
import sys
import threading
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[1]


T = TypeVar("T")


def run_concurrently(calls: Sequence[Callable[[], T]], timeout_s: float) -> list[T | None]:
    """Each call in its own thread, all started before any is joined (so the batcher sees them together); the
    results in call order (None for one still running after ``timeout_s``)."""
    results: list[T | None] = [None] * len(calls)

    def run(index: int) -> None:
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    return results


def code_dir() -> Path | None:
    given = os.environ.get("VOICELAB_COSYVOICE_CODE")
    path = Path(given) if given else REPO / ".cosy" / "upstream"
    return path.resolve() if (path / "cosyvoice" / "llm" / "llm.py").is_file() else None


def require_upstream() -> Path:
    """Skip unless transformers, HyperPyYAML and an upstream checkout are all here."""
    for module in ("transformers", "hyperpyyaml", "onnxruntime"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs the optional CosyVoice install ({module} is missing)")
    path = code_dir()
    if path is None:
        pytest.skip("needs an upstream CosyVoice checkout (VOICELAB_COSYVOICE_CODE or .cosy/upstream)")
    import transformers  # noqa: F401  (before the stand-in: transformers probes torchaudio's spec)

    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    if "torchaudio" not in sys.modules and importlib.util.find_spec("torchaudio") is None:
        for name in ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
            stand_in = types.ModuleType(name)
            stand_in.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = stand_in
    return path


def upstream_sampling() -> Any:
    from cosyvoice.utils import common

    return common


def tiny_llm(folder: Path, version: int = 2, seed: int = 0, **sampling: float) -> Any:
    """A float32 ``Qwen2LM`` (``CosyVoice3LM`` for version 3) with random weights, in eval mode on the CPU.

    ``sampling`` overrides ``ras_sampling``'s keywords (``top_k=1, tau_r=2`` makes it greedy)."""
    import torch
    from hyperpyyaml import load_hyperpyyaml

    from voicelab.backends.cosyvoice.random_parts import write_qwen
    from voicelab.backends.cosyvoice.random_yaml import COMMON, LLM

    require_upstream()
    qwen = folder / "CosyVoice-BlankEN"
    if not qwen.is_dir():
        torch.manual_seed(seed)
        write_qwen(qwen, 2, "cpu")
    llm_class = "Qwen2LM" if version == 2 else "CosyVoice3LM"
    text = COMMON + LLM.format(llm_class=llm_class)
    torch.manual_seed(seed)
    llm = load_hyperpyyaml(io.StringIO(text), overrides={"qwen_pretrain_path": str(qwen)})["llm"].float().eval()
    if sampling:
        llm.sampling = functools.partial(llm.sampling.func, **{**llm.sampling.keywords, **sampling})
    return llm
