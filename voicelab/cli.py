"""Command line: ``python -m voicelab synth|bench|eval ...``.

``synth`` runs the engine core in this process (no worker) and prints one JSON line; errors print one
sentence on stderr and exit non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from voicelab.errors import VoiceLabError
from voicelab.instruct.style import Style

if TYPE_CHECKING:
    from voicelab.engine.messages import PromptAudio
    from voicelab.instruct.parser import ParsedInstruction

log = logging.getLogger(__name__)

BENCHMARKS: dict[str, str] = {
    "rtf": "voicelab.bench.rtf",
    "soak": "voicelab.bench.soak",
    "load": "voicelab.bench.load",
}
EVALUATIONS: dict[str, str] = {
    "clone": "voicelab.eval.clone",
}


def _synth_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("synth", help="synthesise text to a WAV file and print one JSON line")
    p.add_argument("--text", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--voice", default="", help="path to a Piper voice .onnx (default: built-in en_US-joe-medium)")
    p.add_argument("--length-scale", type=float)
    p.add_argument("--noise-scale", type=float)
    p.add_argument("--noise-w", type=float)
    p.add_argument("--sentence-silence", type=float, default=0.2)
    p.add_argument("--seed", type=int)
    p.add_argument("--prompt", type=Path, help="voice prompt clip to clone (wav, flac, ogg, mp3)")
    p.add_argument("--prompt-text", default="", help="optional transcript of the prompt clip")
    p.add_argument("--instruct", default="", help='style instruction, e.g. "slowly, in a warm low voice"')


def _run_synth(args: argparse.Namespace) -> int:
    import soundfile as sf

    from voicelab.engine.messages import SynthesisRequest
    from voicelab.settings import from_environment

    settings = replace(from_environment(), device=args.device, dtype=args.dtype, voice_path=args.voice)
    prompt, parsed = _prompt_and_instruction(args)  # before torch is imported: a bad prompt fails fast

    from voicelab.engine.core import EngineCore
    from voicelab.engine.validation import clean_text

    clean_text(args.text, settings.max_text_chars)  # refuse bad text before the model loads
    request = SynthesisRequest(
        text=args.text,
        length_scale=args.length_scale,
        noise_scale=args.noise_scale,
        noise_w=args.noise_w,
        sentence_silence_s=args.sentence_silence,
        seed=args.seed,
        prompt=prompt,
        style=parsed.style if parsed else Style(),
        instruction=args.instruct,
    )
    core = EngineCore(settings)
    result = core.synthesize(request)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(args.out), result.audio, result.sample_rate, subtype="PCM_16")
    line = result.metrics()
    line["out"] = str(args.out)
    if parsed is not None:
        line["not_understood"] = list(parsed.not_understood)
    print(json.dumps(line, ensure_ascii=False))
    return 0


def _prompt_and_instruction(args: argparse.Namespace) -> tuple[PromptAudio | None, ParsedInstruction | None]:
    """Prompt intake and instruction parsing (once) happen before the engine, as in the UI."""
    from voicelab.instruct.parser import parse_instruction
    from voicelab.voice.intake import load_prompt

    prompt = load_prompt(args.prompt, transcript=args.prompt_text) if args.prompt is not None else None
    parsed = parse_instruction(args.instruct) if args.instruct else None
    return prompt, parsed


def _delegate(table: dict[str, str], name: str, rest: list[str]) -> int:
    module = importlib.import_module(table[name])
    return int(module.main(rest))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voicelab", description="VoiceLab command line")
    sub = parser.add_subparsers(dest="command", required=True)
    _synth_parser(sub)
    bench = sub.add_parser("bench", help="benchmarks that print side-by-side ratios")
    bench.add_argument("name", choices=sorted(BENCHMARKS))
    evaluate = sub.add_parser("eval", help="evaluations")
    evaluate.add_argument("name", choices=sorted(EVALUATIONS))
    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "synth":
            if rest:
                parser.error(f"unrecognized arguments: {' '.join(rest)}")
            return _run_synth(args)
        table = BENCHMARKS if args.command == "bench" else EVALUATIONS
        return _delegate(table, args.name, rest)
    except VoiceLabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
