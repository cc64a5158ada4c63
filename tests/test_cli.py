"""``python -m voicelab synth`` as a user runs it: a subprocess that writes a WAV and prints one JSON line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
PROMPT_CLIP = ROOT / "tests" / "data" / "arctic_awb_en_male.wav"
TEXT = "The garden looks lovely in the morning."
SEED = 3
RUN_TIMEOUT_S = 300


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    @property
    def line(self) -> dict[str, Any]:
        """The one JSON line on stdout."""
        lines = self.stdout.strip().splitlines()
        assert self.returncode == 0, self.stderr
        assert len(lines) == 1, f"expected one JSON line on stdout, got {self.stdout!r}"
        parsed = json.loads(lines[0])
        assert isinstance(parsed, dict)
        return parsed


def synth(out: Path, *args: str, text: str = TEXT) -> Run:
    # One torch thread: the machine's 2 cores are shared, and the speaker encoder is >10x slower with two.
    env = {**os.environ, "VOICELAB_TORCH_THREADS": "1"}
    command = [sys.executable, "-m", "voicelab", "synth", "--text", text, "--out", str(out), "--device", "cpu", *args]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return Run(done.returncode, done.stdout, done.stderr, out)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return synth(tmp_path_factory.mktemp("cli") / "plain.wav", "--seed", str(SEED))


@pytest.fixture(scope="module")
def instructed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("cli") / "nested" / "slow.wav"
    return synth(out, "--seed", str(SEED), "--instruct", "speak slowly purple")


@pytest.fixture(scope="module")
def cloned(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return synth(tmp_path_factory.mktemp("cli") / "clone.wav", "--seed", str(SEED), "--prompt", str(PROMPT_CLIP))


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_synth_writes_a_wav_that_matches_its_json_line(plain: Run) -> None:
    line = plain.line
    for key in ("sample_rate", "duration_s", "latency_s", "rtf"):
        assert is_number(line[key]) and line[key] > 0, key
    assert (line["backend"], line["device"], line["dtype"]) == ("builtin", "cpu", "float32")
    assert line["seed"] == SEED and line["out"] == str(plain.out) and line["language"] == "en"
    assert is_number(line["first_audio_s"]) and 0 < line["first_audio_s"] <= line["latency_s"]
    assert line["chunks"] >= 1
    audio, rate = sf.read(plain.out, dtype="float32")
    assert rate == line["sample_rate"] == 22050
    assert len(audio) / rate == pytest.approx(line["duration_s"], abs=1e-3)
    assert line["rtf"] == pytest.approx(line["latency_s"] / line["duration_s"], rel=0.01)
    assert 1.0 < line["duration_s"] < 4.0
    assert float(np.sqrt(np.mean(audio**2))) > 0.01, "the WAV should hold speech, not silence"


def test_synth_without_instruction_or_prompt_reports_no_style_or_clone_scores(plain: Run) -> None:
    line = plain.line
    assert line["style"] == {}
    assert "not_understood" not in line
    scores = (
        "similarity",
        "similarity_base",
        "similarity_ge2e",
        "similarity_ge2e_base",
        "f0_prompt_hz",
        "f0_output_hz",
    )
    assert all(line[key] is None for key in scores)


def test_instruction_adds_style_and_the_words_not_understood(plain: Run, instructed: Run) -> None:
    line = instructed.line
    assert line["style"] == {"speed": 0.75}
    assert line["not_understood"] == ["purple"]
    assert instructed.out.is_file(), "the output's missing parent folder is created"
    assert line["duration_s"] >= 1.2 * plain.line["duration_s"], "same text and seed, spoken slowly"


def test_prompt_adds_clone_scores(cloned: Run) -> None:
    line = cloned.line
    for key in ("similarity", "similarity_base", "similarity_ge2e", "similarity_ge2e_base"):
        assert is_number(line[key]) and -1.0 <= line[key] <= 1.0, key
    for key in ("f0_prompt_hz", "f0_output_hz"):
        assert is_number(line[key]) and 60.0 < line[key] < 400.0, key
    assert line["similarity_ge2e"] > line["similarity_ge2e_base"]  # the search's objective moved
    assert line["similarity"] != line["similarity_ge2e"]  # what users read is the judge's, not the search's
    audio, rate = sf.read(cloned.out, dtype="float32")
    assert len(audio) / rate == pytest.approx(line["duration_s"], abs=1e-3)


def assert_one_error_line(run: Run, *words: str) -> None:
    lines = run.stderr.strip().splitlines()
    assert run.returncode != 0
    assert run.stdout.strip() == "", "no JSON line on failure"
    assert len(lines) == 1, f"expected one line on stderr, got {run.stderr!r}"
    assert lines[0].startswith("error: ")
    assert all(word in lines[0].lower() for word in words), lines[0]
    assert not run.out.exists()


def test_empty_text_is_refused_with_one_line(tmp_path: Path) -> None:
    assert_one_error_line(synth(tmp_path / "out.wav", text=" \n "), "text")


def test_missing_prompt_file_is_refused_with_one_line(tmp_path: Path) -> None:
    run = synth(tmp_path / "out.wav", "--prompt", str(tmp_path / "nowhere.wav"))
    assert_one_error_line(run, "prompt", "could not be found")


def test_corrupt_prompt_file_is_refused_with_one_line(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x24\x00\x00\x00WAVE" + np.random.default_rng(0).bytes(4000))
    assert_one_error_line(synth(tmp_path / "out.wav", "--prompt", str(corrupt)), "prompt", "not an audio file")


def test_chinese_text_is_spoken_by_the_mandarin_voice(tmp_path: Path) -> None:
    text = "今天天气很好，我们去公园散步吧。"  # 15 characters
    run = synth(tmp_path / "zh.wav", "--text", text, "--seed", "1")
    assert run.line["language"] == "zh"
    assert 0.15 * 15 <= run.line["duration_s"] <= 0.40 * 15


def test_app_help_explains_every_flag_with_its_default_and_variable() -> None:
    """``python app.py --help``: every setting is a flag with a sentence, its default and its VOICELAB_ variable;
    the CosyVoice backend options, TF32 included, are named."""
    from dataclasses import fields

    from voicelab.settings import HELP, Settings

    assert set(HELP) == {f.name for f in fields(Settings)}
    run = subprocess.run([sys.executable, "app.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.split())
    for f in fields(Settings):
        assert "--" + f.name.replace("_", "-") in text and f"VOICELAB_{f.name.upper()}" in text
    assert "default 7860" in text and "flow_tf32=on|off" in text and "non-commercial" in text


def test_synth_takes_the_backends_load_options_and_says_so_in_its_help(tmp_path: Path) -> None:
    """``synth --backend-options`` reaches the backend's factory like the studio's flag: the CPU test double of
    CosyVoice refuses a decode_slots that is not a number, and that error, not a traceback, is what the user sees."""
    help_text = subprocess.run([sys.executable, "-m", "voicelab", "synth", "--help"], cwd=ROOT, capture_output=True,
                               text=True, timeout=120).stdout  # fmt: skip
    assert "--backend-options" in help_text and "flow_tf32=on|off" in " ".join(help_text.split())
    model_dir = tmp_path / "cosyvoice2"
    model_dir.mkdir()
    (model_dir / "cosyvoice2.yaml").write_text("# a test double stands in for upstream\n")
    common = ["-m", "voicelab", "synth", "--text", "Say this.", "--device", "cpu", "--cosyvoice-dir", str(model_dir),
              "--backend", "tests.fixture_cosyvoice_upstream:create", "--prompt", str(PROMPT_CLIP)]  # fmt: skip

    def synth(out: str, options: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, *common, "--out", str(tmp_path / out), "--backend-options", options]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)

    ok = synth("a.wav", "decode_slots=2")
    assert ok.returncode == 0, ok.stderr
    bad = synth("b.wav", "decode_slots=two")
    assert bad.returncode == 2 and not (tmp_path / "b.wav").exists()
    assert bad.stderr.strip().count("\n") == 0 and "'two'" in bad.stderr and "Traceback" not in bad.stderr


def test_a_benchmarks_help_lists_its_own_flags_and_cosyvoice_is_sent_to_its_side_by_side(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``bench soak --help`` used to print only the list of benchmarks; ``bench soak --backend cosyvoice`` ended in a
    traceback (the soak has no model-directory flag): CosyVoice's soak is ``bench cosyvoice``, beside upstream."""
    from voicelab.cli import main

    with pytest.raises(SystemExit) as shown:
        main(["bench", "soak", "--help"])
    assert shown.value.code == 0 and "--requests" in capsys.readouterr().out
    for name in ("soak", "throughput"):
        with pytest.raises(SystemExit) as refused:
            main(["bench", name, "--backend", "cosyvoice"])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and "python -m voicelab bench cosyvoice --model-dir DIR" in err
