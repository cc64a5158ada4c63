"""What is missing to start CosyVoice, as one sentence; torch-free and without importing the optional install.

``voicelab.backends.registry.preflight`` calls it in the server process (``app.py``, ``voicelab synth``) before the
worker is spawned, so a missing model directory, package or upstream checkout stops the app with status 2.
``./run.sh --backend cosyvoice`` checks the weights the same way before it installs anything
(``python -m voicelab.backends.cosyvoice.preflight --weights APP_FLAGS...``: the app's own flags and environment).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from voicelab.settings import Settings, add_arguments, from_arguments

REQUIRED_MODULES = (
    "torchaudio", "transformers", "onnxruntime", "hyperpyyaml", "omegaconf", "whisper",
    "conformer", "diffusers", "inflect", "librosa", "matcha",
)  # fmt: skip


def model_dir_of(settings: Settings) -> str:
    return settings.cosyvoice_dir or settings.model_dir


def preflight(settings: Settings) -> str | None:
    """One sentence saying what is missing to start CosyVoice (None when nothing is), without importing upstream."""
    problem = weights_problem(settings)
    if problem:
        return problem
    missing = [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return (
            f"CosyVoice's optional packages are missing ({', '.join(missing)}): `./run.sh --backend cosyvoice "
            "--cosyvoice-dir DIR` installs them into .venv-cosy (requirements-cosyvoice.txt; docs/cosyvoice.md)."
        )
    return code_problem(settings.cosyvoice_code)


def weights_problem(settings: Settings) -> str | None:
    """The model directory's sentence alone: no directory given, or one without a CosyVoice2/3 config."""
    model_dir = model_dir_of(settings)
    if not model_dir:
        return (
            "CosyVoice needs a model directory: start with --cosyvoice-dir DIR (CosyVoice2/3 weights, or a random "
            "model from `python -m voicelab.backends.cosyvoice.random_model --version 2 --size tiny DIR`)."
        )
    path = Path(model_dir)
    if not any((path / f"cosyvoice{v}.yaml").is_file() for v in (2, 3)):
        return f"{model_dir} is not a CosyVoice2/3 model directory: it has no cosyvoice2.yaml or cosyvoice3.yaml."
    return None


def code_problem(code_dir: str) -> str | None:
    """Upstream's inference code must come with its LLM: a checkout, or an installed package that has it."""
    if code_dir:
        ok = (Path(code_dir) / "cosyvoice" / "cli" / "model.py").is_file()
        return None if ok else f"{code_dir} is not a CosyVoice checkout: it has no cosyvoice/cli/model.py."
    spec = importlib.util.find_spec("cosyvoice")
    folders = list(spec.submodule_search_locations or []) if spec else []
    model_py = Path(folders[0]) / "cli" / "model.py" if folders else None
    if model_py is None or not model_py.is_file() or "# self.llm = llm" in model_py.read_text():
        return (
            "CosyVoice needs upstream's inference code with its LLM: pass --cosyvoice-code DIR, a checkout of "
            "github.com/FunAudioLLM/CosyVoice (the cosyvoice-minicpmo package only provides matcha and the vocoder)."
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``--weights`` and the app's flags: print the weights' sentence and return 2, or return 0 in silence."""
    parser = argparse.ArgumentParser(prog="python -m voicelab.backends.cosyvoice.preflight", add_help=False)
    parser.add_argument("--weights", action="store_true", help="check only the model directory (no packages)")
    add_arguments(parser)
    known, _ = parser.parse_known_args(argv)
    settings = from_arguments(known)
    problem = weights_problem(settings) if known.weights else preflight(settings)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
