"""Style instructions as a listener hears them: durations, pitch, voicing and loudness of real synthesised speech.

One engine (CPU, built-in voice) serves the module; every output is the same sentence with the same seed,
compared with the neutral rendering of that sentence. The engine's output is a function of the request's
``Style`` (the instruction text itself never reaches the audio path), so outputs are memoised by style:
an English and a Chinese instruction that parse to the same style are checked on the same audio, and one
that parses differently gets its own synthesis and must pass on that.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.audio_measures import Measures, measure, semitones
from tests.judges import Heard, listen
from voicelab.engine.core import EngineCore
from voicelab.engine.messages import SynthesisRequest
from voicelab.instruct.controls import controls_to_style, resolve_style
from voicelab.instruct.parser import parse_instruction
from voicelab.instruct.style import Style
from voicelab.settings import Settings
from voicelab.voice.intake import load_prompt
from voicelab.voice.prompt import PromptAudio

DATA = Path(__file__).parent / "data"
TEXT = "The garden looks lovely in the morning."  # ~1.9 s with the built-in voice
SEED = 1
PROMPT_CLIP = DATA / "arctic_slt_en_female.wav"  # female, ~190 Hz: far from the built-in voice's ~87 Hz


class Listener:
    """Synthesises ``TEXT`` for a style (optionally on a prompt voice) and measures it, once per distinct request."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self._heard: dict[tuple[Style, str], Measures] = {}
        self._audio: dict[tuple[Style, str], tuple[np.ndarray, int]] = {}
        self._words: dict[Style, Heard] = {}

    def hear(self, style: Style, prompt: PromptAudio | None = None) -> Measures:
        key = (style, prompt.sha256 if prompt else "")
        if key not in self._heard:
            result = self.core.synthesize(SynthesisRequest(text=TEXT, seed=SEED, style=style, prompt=prompt))
            assert result.seed == SEED
            self._heard[key] = measure(result.audio, result.sample_rate)
            self._audio[key] = (result.audio, result.sample_rate)
        return self._heard[key]

    def words(self, style: Style) -> Heard:
        """What Whisper hears of the built-in voice's ``TEXT`` in ``style`` (tests/judges.py), once per style."""
        if style not in self._words:
            self.hear(style)
            self._words[style] = listen(TEXT, *self._audio[(style, "")], "en")
        return self._words[style]

    def neutral(self, prompt: PromptAudio | None = None) -> Measures:
        return self.hear(Style(), prompt)


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    # One thread: with two OpenMP threads on a busy shared 2-core CPU the speaker encoder's LSTM runs >10x slower.
    threads = torch.get_num_threads()
    core = EngineCore(Settings(device="cpu", torch_threads=1))
    try:
        yield Listener(core)
    finally:
        core.close()
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def prompt() -> PromptAudio:
    return load_prompt(PROMPT_CLIP)


def understood(instruction: str) -> Style:
    """The instruction's style, checking that every word of it was understood."""
    parsed = parse_instruction(instruction)
    assert parsed.not_understood == (), f"{instruction!r}: not understood {parsed.not_understood}"
    assert not parsed.style.is_neutral, f"{instruction!r} parsed as neutral"
    return parsed.style


def test_ruler_hears_pitch_voicing_and_level_on_known_signals() -> None:
    """The measurements themselves: a 100 Hz pulse train is voiced at 100 Hz, white noise is not voiced."""
    sr = 16000
    t = np.arange(sr) / sr
    buzz = 0.1 * np.sum([np.sin(2 * np.pi * 100.0 * k * t) / k for k in range(1, 20)], axis=0)
    noise = 0.1 * np.random.default_rng(0).standard_normal(sr)
    heard_buzz, heard_noise = measure(buzz, sr), measure(noise, sr)
    assert heard_buzz.f0_median_hz == pytest.approx(100.0, rel=0.01)
    assert heard_buzz.voiced_ratio > 0.9
    assert heard_noise.voiced_ratio < 0.05
    assert heard_noise.speech_rms_dbfs == pytest.approx(-20.0, abs=0.5)


@pytest.mark.parametrize("instruction", ["speak slowly", "慢慢地说"])
def test_slow_instruction_makes_speech_longer(listener: Listener, instruction: str) -> None:
    ratio = listener.hear(understood(instruction)).duration_s / listener.neutral().duration_s
    assert ratio >= 1.2, f"{instruction!r}: duration x{ratio:.3f} of neutral"
    heard = listener.words(understood(instruction))
    assert heard.rate <= 0.15, heard.describe()  # measured 0.000 (7 words; speed x0.75); bound: one more word


@pytest.mark.parametrize("instruction", ["very fast", "语速非常快"])
def test_fast_instruction_makes_speech_shorter(listener: Listener, instruction: str) -> None:
    ratio = listener.hear(understood(instruction)).duration_s / listener.neutral().duration_s
    assert ratio <= 0.8, f"{instruction!r}: duration x{ratio:.3f} of neutral"
    heard = listener.words(understood(instruction))
    assert heard.rate <= 0.15, heard.describe()  # measured 0.000 (7 words; speed x1.6); bound: one more word


@pytest.mark.parametrize(
    ("instruction", "at_least_st"),
    [
        ("higher pitch", 2.0),
        ("声音高", 2.0),
        ("声音高一点", 1.0),  # "a bit higher": the slight step, +1.5 st asked
    ],
)
def test_higher_pitch_instruction_raises_f0(listener: Listener, instruction: str, at_least_st: float) -> None:
    shift = semitones(listener.hear(understood(instruction)).f0_median_hz, listener.neutral().f0_median_hz)
    assert shift >= at_least_st, f"{instruction!r}: median F0 moved {shift:+.2f} st"


@pytest.mark.parametrize("instruction", ["deep, low voice", "低沉的声音"])
def test_low_voice_instruction_lowers_f0(listener: Listener, instruction: str) -> None:
    shift = semitones(listener.hear(understood(instruction)).f0_median_hz, listener.neutral().f0_median_hz)
    assert shift <= -2.0, f"{instruction!r}: median F0 moved {shift:+.2f} st"


@pytest.mark.parametrize("instruction", ["whisper", "耳语"])
def test_whisper_instruction_removes_voicing(listener: Listener, instruction: str) -> None:
    neutral, whisper = listener.neutral(), listener.hear(understood(instruction))
    assert neutral.voiced_ratio > 0.6, "the ruler should hear the neutral voice as mostly voiced"
    assert whisper.voiced_ratio < 0.2, f"{instruction!r}: {whisper.voiced_ratio:.1%} of speech frames voiced"
    assert whisper.speech_rms_dbfs > -45.0, "a whisper is still audible speech, not silence"


@pytest.mark.parametrize(("loud", "soft"), [("loud", "soft"), ("大声", "小声")])
def test_loud_and_soft_instructions_differ_in_level(listener: Listener, loud: str, soft: str) -> None:
    neutral = listener.neutral().speech_rms_dbfs
    loud_db = listener.hear(understood(loud)).speech_rms_dbfs
    soft_db = listener.hear(understood(soft)).speech_rms_dbfs
    assert loud_db - soft_db >= 6.0, f"{loud!r} {loud_db:.1f} dBFS vs {soft!r} {soft_db:.1f} dBFS"
    assert loud_db > neutral > soft_db


@pytest.mark.parametrize("instruction", ["speak slowly", "慢慢地说"])
def test_speed_control_overrides_the_instruction(listener: Listener, instruction: str) -> None:
    style = resolve_style(instruction, controls_to_style(speed="very fast")).style
    ratio = listener.hear(style).duration_s / listener.neutral().duration_s
    assert ratio <= 0.8, f"{instruction!r} + speed 'very fast': duration x{ratio:.3f} of neutral"


def test_pitch_control_overrides_the_instruction(listener: Listener) -> None:
    style = resolve_style("higher pitch, slowly", controls_to_style(pitch="low")).style
    heard, neutral = listener.hear(style), listener.neutral()
    shift = semitones(heard.f0_median_hz, neutral.f0_median_hz)
    assert shift <= -2.0, f"pitch control 'low' over 'higher pitch': median F0 moved {shift:+.2f} st"
    assert heard.duration_s / neutral.duration_s >= 1.2, "the rest of the instruction (slowly) still applies"


def test_prompt_voice_is_heard_under_the_styles(listener: Listener, prompt: PromptAudio) -> None:
    """The styled prompt outputs stay in the prompt's register (~190 Hz), not the built-in voice's (~87 Hz)."""
    prompt_f0 = measure(prompt.samples, prompt.sample_rate).f0_median_hz
    assert abs(semitones(listener.neutral(prompt).f0_median_hz, prompt_f0)) < 1.0
    slow = listener.hear(understood("speak slowly"), prompt)
    assert abs(semitones(slow.f0_median_hz, prompt_f0)) < 1.0


@pytest.mark.parametrize("instruction", ["speak slowly", "慢慢地说"])
def test_slow_instruction_on_a_prompt_voice(listener: Listener, prompt: PromptAudio, instruction: str) -> None:
    ratio = listener.hear(understood(instruction), prompt).duration_s / listener.neutral(prompt).duration_s
    assert ratio >= 1.2, f"{instruction!r} on the prompt voice: duration x{ratio:.3f}"


@pytest.mark.parametrize(
    ("instruction", "direction"), [("higher pitch", +1), ("声音高", +1), ("deep, low voice", -1), ("低沉的声音", -1)]
)
def test_pitch_instructions_on_a_prompt_voice(
    listener: Listener, prompt: PromptAudio, instruction: str, direction: int
) -> None:
    heard = listener.hear(understood(instruction), prompt)
    shift = semitones(heard.f0_median_hz, listener.neutral(prompt).f0_median_hz)
    assert direction * shift >= 2.0, f"{instruction!r} on the prompt voice: median F0 moved {shift:+.2f} st"
