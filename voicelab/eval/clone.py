"""``python -m voicelab eval clone --prompts DIR [--texts FILE]``: how close voice matching gets to each prompt.

For every ``*.wav`` in DIR and every voice language: build the speaker profile, match the backend voice on a
calibration sentence, then speak fixed texts and compare unmatched (base) and matched outputs. Two judges the
match search never reads: ECAPA-TDNN similarity to the prompt (``judges.ecapa``) and Whisper's word error
(English) or pinyin-syllable error (Chinese) on what was said (``judges.whisper``). Beside them, the GE2E
similarity the search maximises, median F0 against the prompt's, the real-time factor, and DNSMOS P.835's overall
quality (``judges.dnsmos``: whether the rendering adds artefacts).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from voicelab.engine.calibration import CALIBRATION_TEXTS as ENGINE_CALIBRATION
from voicelab.engine.calibration import HELD_OUT_TEXTS, calibration_text
from voicelab.errors import InvalidPromptError
from voicelab.eval.clone_report import EvalReport, PromptEval, format_report
from voicelab.eval.voices import SYNTHESIZERS, Synthesize
from voicelab.judges.dnsmos import DnsmosJudge
from voicelab.judges.ecapa import EcapaJudge
from voicelab.judges.text import error_rate
from voicelab.judges.whisper import WhisperJudge
from voicelab.voice.analysis import f0_median_hz
from voicelab.voice.dsp import RENDERERS, apply_transform
from voicelab.voice.encoder import SpeakerEncoder
from voicelab.voice.intake import load_prompt
from voicelab.voice.matcher import VoiceMatcher, median_f0
from voicelab.voice.profile import SpeakerProfile, build_profile
from voicelab.voice.prompt import PromptAudio

log = logging.getLogger(__name__)

CALIBRATION_TEXTS = {
    "en": (
        "She had your dark suit in greasy wash water all year. Don't ask me to carry an oily rag like that. "
        "The boy was there when the sun rose."
    ),
    "zh": ENGINE_CALIBRATION["zh"],  # the engine's own Chinese sentence
}
CALIBRATION_TEXT = CALIBRATION_TEXTS["en"]
# Harvard sentences, two per text: sixteen texts (about 300 words) keep a mean error steady enough to compare
# matched with unmatched output. Chinese: eight everyday sentences (about 130 characters).
EVAL_TEXTS = {
    "en": (
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
    ),
    "zh": (
        "我每天早上七点起床，先喝一杯热水。",
        "这家小店的面条又便宜又好吃。",
        "请把窗户打开，房间里有点闷。",
        "周末我们打算去海边看日出。",
        "他在图书馆借了三本关于历史的书。",
        "下雨的时候，街上的人都走得很快。",
        "妈妈做的饺子是我最喜欢的菜。",
        "火车马上就要到站了，请大家拿好行李。",
    ),
}


@dataclass(frozen=True)
class Judges:
    """The judges of the evaluation and the match search's own encoder (``dnsmos``: None leaves quality out)."""

    encoder: SpeakerEncoder
    ecapa: EcapaJudge
    whisper: WhisperJudge
    dnsmos: DnsmosJudge | None = None


@dataclass(frozen=True)
class _BaseOutput:
    text: str
    audio: np.ndarray
    sample_rate: int
    synth_s: float
    error: float
    quality: float = float("nan")  # DNSMOS OVRL, where judged


def evaluate(
    prompts_dir: str | Path,
    texts: dict[str, Sequence[str]],
    synthesize: Synthesize,
    judges: Judges,
    *,
    renderer: str = "torch",
    on_transcript: bool = False,
    seed: int = 0,
) -> EvalReport:
    """Clone every ``*.wav`` in ``prompts_dir`` onto each language's voice (``synthesize``) and measure; each take
    rendered with the renderer's noise drawn from ``seed`` (the engine's is 0)."""
    matcher = VoiceMatcher(judges.encoder, renderer=renderer)
    rows: list[PromptEval] = []
    skipped: list[tuple[str, str]] = []
    for language, language_texts in texts.items():
        calibration = synthesize(language, CALIBRATION_TEXTS[language])
        held_out = synthesize(language, HELD_OUT_TEXTS[language])  # the engine's check before keeping a match
        bases = [_synthesize_base(language, text, synthesize, judges) for text in language_texts]
        for path in sorted(Path(prompts_dir).glob("*.wav")):
            try:
                prompt = load_prompt(path, _transcript(path))
                own = _transcript_calibration(language, prompt, synthesize) if on_transcript else None
                sentences = (own or calibration, held_out)
                rows.append(_evaluate_prompt(path.stem, language, prompt, bases, sentences, matcher, judges, seed))
            except InvalidPromptError as err:
                skipped.append((path.stem, str(err)))
    return EvalReport(tuple(rows), tuple(skipped))


def _transcript(path: Path) -> str:
    transcript_path = path.with_suffix(".txt")
    return transcript_path.read_text(encoding="utf-8").strip() if transcript_path.is_file() else ""


def _synthesize_base(language: str, text: str, synthesize: Synthesize, judges: Judges) -> _BaseOutput:
    started = time.perf_counter()
    audio, sr = synthesize(language, text)
    synth_s = time.perf_counter() - started
    heard = judges.whisper.transcribe(audio, sr, language).text
    quality = judges.dnsmos.score(audio, sr).ovrl if judges.dnsmos is not None else float("nan")
    return _BaseOutput(text, audio, sr, synth_s, error_rate(text, heard, language), quality)


def _transcript_calibration(
    language: str, prompt: PromptAudio, synthesize: Synthesize
) -> tuple[np.ndarray, int] | None:
    """The voice saying the prompt's own transcript, as the engine calibrates when it is in the voice's language."""
    text = calibration_text(language, prompt)
    return synthesize(language, text) if text == prompt.transcript.strip() else None


def _evaluate_prompt(
    name: str,
    language: str,
    prompt: PromptAudio,
    bases: Sequence[_BaseOutput],
    sentences: tuple[tuple[np.ndarray, int], tuple[np.ndarray, int]],
    matcher: VoiceMatcher,
    judges: Judges,
    seed: int = 0,
) -> PromptEval:
    device = matcher.encoder.device
    profile = build_profile(prompt, matcher.encoder, device)
    judge_reference = judges.ecapa.embed(np.asarray(prompt.samples, dtype=np.float32), prompt.sample_rate)
    calibration, held_out = sentences
    match = matcher.match(profile, lambda: calibration, lambda: held_out)
    figures: dict[str, list[float]] = {
        key: [] for key in ("ecapa", "ecapa_base", "ge2e", "ge2e_base", "f0", "error", "dnsmos")
    }
    plain_s, voice_s, duration = 0.0, 0.0, 0.0
    for base in bases:
        started = time.perf_counter()  # what the engine adds to a cached-profile request: transform + scores
        matched = apply_transform(base.audio, base.sample_rate, match.transform, device, matcher.renderer, seed=seed)
        ge2e, ge2e_base = matcher.similarities([matched, base.audio], base.sample_rate, profile)
        ecapa, ecapa_base = judges.ecapa.similarities(
            [matched, base.audio], base.sample_rate, [judge_reference, judge_reference]
        )
        median_f0(matched, base.sample_rate, device)
        voice_s += time.perf_counter() - started
        plain_s += base.synth_s
        duration += len(matched) / base.sample_rate
        heard = judges.whisper.transcribe(matched, base.sample_rate, language).text
        for key, value in (("ecapa", ecapa), ("ecapa_base", ecapa_base), ("ge2e", ge2e), ("ge2e_base", ge2e_base)):
            figures[key].append(value)
        figures["f0"].append(f0_median_hz(matched, base.sample_rate))  # Praat: the ruler, not the transform's tracker
        figures["error"].append(error_rate(base.text, heard, language))
        if judges.dnsmos is not None:
            figures["dnsmos"].append(judges.dnsmos.score(matched, base.sample_rate).ovrl)
    qualities = figures.pop("dnsmos")
    quality = float(np.mean(qualities)) if qualities else float("nan")
    row = _row(name, language, profile, figures, bases, match.seconds, (plain_s, voice_s, duration))
    base_quality = float(np.mean([b.quality for b in bases]))
    row = replace(row, fell_back=match.fell_back, dnsmos_base=base_quality, dnsmos_matched=quality)
    log.info("%s (%s): ECAPA %.3f -> %.3f", name, language, row.ecapa_base, row.ecapa_matched)
    return row


def _row(
    name: str,
    language: str,
    profile: SpeakerProfile,
    figures: dict[str, list[float]],
    bases: Sequence[_BaseOutput],
    match_s: float,
    times: tuple[float, float, float],
) -> PromptEval:
    plain_s, voice_s, duration = times
    mean = {key: float(np.mean(values)) for key, values in figures.items()}
    return PromptEval(
        prompt=name,
        language=language,
        ecapa_base=mean["ecapa_base"],
        ecapa_matched=mean["ecapa"],
        ge2e_base=mean["ge2e_base"],
        ge2e_matched=mean["ge2e"],
        f0_prompt_hz=profile.f0_median_hz,
        f0_output_hz=float(np.median(figures["f0"])),
        rtf=(plain_s + voice_s) / duration if duration > 0 else float("inf"),
        error_base=float(np.mean([b.error for b in bases])),
        error_matched=mean["error"],
        match_s=match_s,
        plain_s=plain_s / len(bases),
        clone_s=(plain_s + voice_s) / len(bases),
    )


def _read_texts(path: str | None, languages: Sequence[str]) -> dict[str, Sequence[str]]:
    if path is None:
        return {language: EVAL_TEXTS[language] for language in languages}
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    return {languages[0]: tuple(line for line in lines if line)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voicelab eval clone", description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", required=True, help="folder of prompt .wav files (with optional .txt)")
    parser.add_argument(
        "--backend",
        choices=("builtin", "kokoro"),
        default="builtin",
        help="builtin: the built-in voices matched here; kokoro: judge the fitted voices in --results",
    )
    parser.add_argument("--results", default=None, help="kokoro: the folder python -m tools.kokoro_device wrote")
    parser.add_argument(
        "--matched",
        action="store_true",
        help="kokoro: also the engine's signal-level matching on top of the fitted voices, judged without and with",
    )
    parser.add_argument("--languages", default="en,zh", help="voices to clone onto, comma-separated (en, zh)")
    parser.add_argument("--texts", default=None, help="file with one text per line, in the first language")
    parser.add_argument("--device", default="cpu", help="device for the encoders, transform and scoring")
    parser.add_argument(
        "--renderer", choices=(*RENDERERS, "all"), default="all", help="voice renderer(s) to evaluate, one table each"
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
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="noise seed of each take's rendering (the engine renders with 0); another seed shows how much of a "
        "renderer's figures is its noise's draw",
    )
    return parser


def _kokoro(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Kokoro's fits are made where the device is (``tools.kokoro_device``) and judged here."""
    if args.results is None or not (Path(args.results) / "report.json").is_file():
        parser.error(
            "--backend kokoro judges fits made by python -m tools.kokoro_device: give its --out folder as --results"
        )
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from voicelab.eval.kokoro import judge_results

    print(judge_results(Path(args.prompts), Path(args.results), EVAL_TEXTS["en"]))
    if args.matched:
        from voicelab.eval.kokoro_matched import match_fitted

        print()
        print(match_fitted(Path(args.prompts), Path(args.results), EVAL_TEXTS["en"]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not Path(args.prompts).is_dir():
        parser.error(f"--prompts {args.prompts} is not a folder")
    if args.backend == "kokoro":
        return _kokoro(parser, args)
    languages = [language.strip() for language in args.languages.split(",") if language.strip()]
    unknown = [language for language in languages if language not in EVAL_TEXTS]
    if unknown or not languages:
        parser.error(f"--languages takes en and/or zh, not {','.join(unknown) or 'nothing'}")
    if args.runtime == "onnxruntime" and languages != ["en"]:
        parser.error("--runtime onnxruntime speaks English only: add --languages en")
    texts = _read_texts(args.texts, languages)
    if not all(texts.values()):
        parser.error(f"--texts {args.texts} has no text")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    synthesize = SYNTHESIZERS[args.runtime](args.device)
    threads = max(1, args.threads)
    judges = Judges(SpeakerEncoder(args.device), EcapaJudge(args.device), WhisperJudge(threads=threads),
                    DnsmosJudge(threads=threads))  # fmt: skip
    for renderer in RENDERERS if args.renderer == "all" else (args.renderer,):
        report = evaluate(
            args.prompts,
            texts,
            synthesize,
            judges,
            renderer=renderer,
            on_transcript=args.calibrate_on_transcript,
            seed=args.seed,
        )
        print(f"renderer: {renderer} (device {args.device})")
        print(format_report(report))
    return 0
