"""``./run.sh --backend cosyvoice``: the plan, the weights' sentence first, one set-up, then a start in seconds.

run.sh runs in a copy of the repository's top level with stand-ins on ``PATH``: a ``python3`` whose ``-m venv``
makes an environment whose python logs ``pip`` and ``app.py``/``pytest`` calls instead of running them (anything
else, such as the weights check, runs in this interpreter), an ``ffmpeg`` that is there, an ``apt-get`` and a
``sudo`` that fail, and a local bare git repository standing in for upstream's at a commit that is not its newest.
Nothing is downloaded. What only a networked machine shows: pip resolving and installing the real pins (torch and
torchaudio 2.11 are several GB) and the clone of github.com/FunAudioLLM/CosyVoice itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOP_LEVEL = ("run.sh", *(f"requirements{part}.txt" for part in ("", "-nodeps", "-dev", "-cosyvoice")))

if shutil.which("bash") is None or shutil.which("git") is None:
    pytest.skip("needs bash and git", allow_module_level=True)

FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = -m ] && [ "$2" = venv ]; then
  venv="${@: -1}"
  echo "venv $*" >>"$RUN_LOG"
  mkdir -p "$venv/bin" && cp "$STUB_DIR/venv-python" "$venv/bin/python" && exit 0
fi
exec "$REAL_PYTHON" "$@"
"""
VENV_PYTHON = """#!/usr/bin/env bash
here="$(cd "$(dirname "$0")/.." && pwd)"
case "$1 $2" in
  "-m pip") args="${*:3}"; echo "pip ${here##*/} ${args#--disable-pip-version-check -q }" >>"$RUN_LOG"; exit 0 ;;
  "app.py "*) echo "app ${here##*/} ${*:2}" >>"$RUN_LOG"; exit 0 ;;
  "-m pytest") echo "pytest ${here##*/} code=${VOICELAB_COSYVOICE_CODE:-} ${*:3}" >>"$RUN_LOG"; exit 0 ;;
esac
exec "$REAL_PYTHON" "$@"
"""


@dataclass
class Checkout:
    root: Path
    env: dict[str, str]
    pinned: str
    newest: str

    def run(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **extra}
        return subprocess.run(["./run.sh", *args], cwd=self.root, env=env, capture_output=True, text=True, timeout=120)

    def log(self) -> list[str]:
        path = self.root / "run.log"
        return path.read_text().splitlines() if path.exists() else []


def stub(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


def upstream_stand_in(tmp_path: Path) -> tuple[Path, str, str]:
    """A bare repository with upstream's layout: the pinned commit, then a newer one."""
    work = tmp_path / "upstream-work"
    (work / "cosyvoice" / "cli").mkdir(parents=True)
    git("init", "-q", cwd=work)
    (work / "cosyvoice" / "cli" / "model.py").write_text("# pinned\n")
    git("add", ".", cwd=work)
    git("commit", "-qm", "pinned", cwd=work)
    pinned = git("rev-parse", "HEAD", cwd=work)
    (work / "cosyvoice" / "cli" / "model.py").write_text("# newer\n")
    git("commit", "-qam", "newer", cwd=work)
    newest = git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path / "upstream.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    return bare, pinned, newest


@pytest.fixture
def checkout(tmp_path: Path) -> Checkout:
    root, stubs = tmp_path / "voicelab", tmp_path / "stubs"
    root.mkdir()
    stubs.mkdir()
    for name in TOP_LEVEL:
        shutil.copy2(REPO / name, root / name)
    (root / "voicelab").symlink_to(REPO / "voicelab")  # the weights check imports the package, torch-free
    stub(stubs / "python3", FAKE_PYTHON)
    stub(stubs / "venv-python", VENV_PYTHON)
    stub(stubs / "ffmpeg", "#!/bin/sh\nexit 0\n")
    for tool in ("apt-get", "sudo"):  # nothing is installed on this machine
        stub(stubs / tool, f'#!/bin/sh\necho "{tool} $*" >>"$RUN_LOG"\nexit 1\n')
    bare, pinned, newest = upstream_stand_in(tmp_path)
    env = {
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "RUN_LOG": str(root / "run.log"),
        "STUB_DIR": str(stubs),
        "REAL_PYTHON": sys.executable,
        "PYTHON": str(stubs / "python3"),
        "VOICELAB_COSYVOICE_GIT": bare.as_uri(),
        "VOICELAB_COSYVOICE_COMMIT": pinned,
    }
    return Checkout(root, env, pinned, newest)


def weights(tmp_path: Path) -> Path:
    model = tmp_path / "CosyVoice2-0.5B"
    model.mkdir()
    (model / "cosyvoice2.yaml").write_text("# the model's config\n")
    return model


def test_the_weights_sentence_comes_first_before_anything_is_installed(checkout: Checkout, tmp_path: Path) -> None:
    missing = checkout.run("--backend", "cosyvoice")
    assert missing.returncode == 2
    assert "CosyVoice: environment .venv-cosy (torch 2.11, requirements-cosyvoice.txt" in missing.stdout
    assert missing.stderr.strip().startswith("CosyVoice needs a model directory: start with --cosyvoice-dir DIR")
    empty = tmp_path / "empty"
    empty.mkdir()
    wrong = checkout.run("--backend=cosyvoice", "--cosyvoice-dir", str(empty))
    assert wrong.returncode == 2
    assert f"{empty} is not a CosyVoice2/3 model directory: it has no cosyvoice2.yaml" in wrong.stderr
    assert checkout.log() == [] and not (checkout.root / ".venv-cosy").exists()


def test_one_command_sets_everything_up_once_and_starts_the_studio(checkout: Checkout, tmp_path: Path) -> None:
    model = weights(tmp_path)
    first = checkout.run("--backend", "cosyvoice", "--cosyvoice-dir", str(model), "--port", "8000")
    assert first.returncode == 0, first.stdout + first.stderr
    log = checkout.log()
    assert log[0].startswith("venv -m venv .venv-cosy")
    assert "pip .venv-cosy install -r requirements-cosyvoice.txt -r .venv-cosy/requirements-voicelab.txt" in log
    assert "pip .venv-cosy install --no-deps -r requirements-nodeps.txt" in log
    ours = (checkout.root / ".venv-cosy" / "requirements-voicelab.txt").read_text()
    assert "gradio==" in ours and "\ntorch==" not in ours and "\ntokenizers==" not in ours  # CosyVoice's pins win
    assert git("rev-parse", "HEAD", cwd=checkout.root / ".cosy" / "upstream") == checkout.pinned != checkout.newest
    started = f"app .venv-cosy --backend cosyvoice --cosyvoice-dir {model} --port 8000 --cosyvoice-code .cosy/upstream"
    assert log[-1] == started
    begun = time.monotonic()
    again = checkout.run("--backend", "cosyvoice", "--cosyvoice-dir", str(model), "--port", "8000")
    assert again.returncode == 0 and time.monotonic() - begun < 10
    assert checkout.log() == [*log, started]  # no venv, no pip, no clone: straight to the app
    assert "installing" not in again.stdout and "getting upstream" not in again.stdout


def test_a_checkout_of_ones_own_is_used_as_it_is(checkout: Checkout, tmp_path: Path) -> None:
    model = weights(tmp_path)
    result = checkout.run("--backend", "cosyvoice", "--cosyvoice-dir", str(model), "--cosyvoice-code", "mine")
    assert result.returncode == 0, result.stdout + result.stderr
    assert checkout.log()[-1] == f"app .venv-cosy --backend cosyvoice --cosyvoice-dir {model} --cosyvoice-code mine"
    assert not (checkout.root / ".cosy").exists()


def test_without_network_one_sentence_says_how_to_bring_the_code(checkout: Checkout, tmp_path: Path) -> None:
    model = weights(tmp_path)
    offline = (tmp_path / "nowhere.git").as_uri()
    result = checkout.run("--backend", "cosyvoice", "--cosyvoice-dir", str(model), VOICELAB_COSYVOICE_GIT=offline)
    assert result.returncode == 1
    assert f"could not clone {offline} here" in result.stdout and "add --cosyvoice-code CosyVoice" in result.stdout
    assert not any((checkout.root / ".cosy" / name).exists() for name in ("upstream", "upstream.partial"))
    assert not any(line.startswith("app ") for line in checkout.log())


def test_the_cosyvoice_tests_run_in_the_second_environment(checkout: Checkout) -> None:
    result = checkout.run("test", "--backend", "cosyvoice")
    assert result.returncode == 0, result.stdout + result.stderr
    log = checkout.log()
    assert "pip .venv-cosy install -r requirements-dev.txt" in log
    tests = "tests/test_cosyvoice_*.py tests/test_ui_cosyvoice_gpu.py"
    assert log[-1] == f"pytest .venv-cosy code=.cosy/upstream -n 0 {tests}"
    checkout.run("test", "--backend", "cosyvoice", "-k", "preflight")
    assert checkout.log()[-1] == "pytest .venv-cosy code=.cosy/upstream -n 0 -k preflight"


def test_the_two_default_commands_are_unchanged(checkout: Checkout) -> None:
    ran = checkout.run("--port", "7999")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert checkout.log() == [
        "venv -m venv .venv",
        "pip .venv install --upgrade pip",
        "pip .venv install -r requirements.txt",
        "pip .venv install --no-deps -r requirements-nodeps.txt",
        "app .venv --port 7999",
    ]
    tested = checkout.run("test", "-k", "words", CI="true")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    tail = [line for line in checkout.log()[5:] if not line.startswith(("apt-get", "sudo"))]
    assert tail == [
        "pip .venv install --upgrade pip",
        "pip .venv install -r requirements.txt",
        "pip .venv install --no-deps -r requirements-nodeps.txt",
        "pip .venv install -r requirements-dev.txt",
        "pytest .venv code= -n 2 --dist loadfile -m not serial -k words",
        "pytest .venv code= -m serial -k words",
    ]
    assert not (checkout.root / ".venv-cosy").exists() and not (checkout.root / ".cosy").exists()
