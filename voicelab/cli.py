"""Command line: ``python -m voicelab synth|keys|bench|eval ...``.

``synth`` goes through the generation service with the engine in this process (no worker) and prints one JSON
line; ``keys`` adds (printed once, stored hashed), lists and revokes the API keys of the server's key file; errors
print one sentence on stderr and exit non-zero.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from voicelab.errors import VoiceLabError
from voicelab.settings import HELP

log = logging.getLogger(__name__)

# The benchmarks a user runs; one-off investigations live in the repository's tools/ folder (tools/README.md).
BENCHMARKS: dict[str, str] = {
    "rtf": "voicelab.bench.rtf",
    "soak": "voicelab.bench.soak",
    "devices": "voicelab.bench.devices",  # throughput with 1 vs N devices (--devices cuda:0,cuda:1)
    "load": "voicelab.bench.load_api",  # browser sessions, or API clients with --api
    "cosyvoice": "voicelab.bench.cosyvoice",
    "mandarin_rtf": "voicelab.bench.mandarin_rtf",  # the Mandarin voice: PyTorch vs the TFLite reference
    "throughput": "voicelab.bench.throughput",  # concurrent clients, micro-batched vs one job at a time
    "renderers": "voicelab.bench.renderers",  # the voice renderers side by side on one utterance
}
EVALUATIONS: dict[str, str] = {
    "clone": "voicelab.eval.clone",
    "styles": "voicelab.eval.styles",
}


def _synth_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("synth", help="synthesise text to a WAV file and print one JSON line")
    p.add_argument("--text", required=True, help="what to say (English and/or Chinese)")
    p.add_argument("--out", required=True, type=Path, help="the WAV file to write")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--backend", default="builtin", help=HELP["backend"])
    p.add_argument("--voice", default="", help="path to a Piper voice .onnx (default: built-in en_US-joe-medium)")
    p.add_argument("--cosyvoice-dir", default="", help="cosyvoice: the model directory")
    p.add_argument("--cosyvoice-code", default="", help="cosyvoice: an upstream checkout (needed for CosyVoice3)")
    p.add_argument("--backend-options", default="", metavar="NAME=VALUE,...", help=HELP["backend_options"])
    p.add_argument("--language", default="auto", help="auto (by script), en or zh")
    p.add_argument("--speed", type=float, default=1.0, help="speaking-rate multiplier (0.25-4)")
    p.add_argument(
        "--option", action="append", default=[], metavar="NAME=VALUE", help="a backend option, e.g. noise_scale=0.5"
    )
    p.add_argument("--sentence-silence", type=float, default=0.2, help="seconds of silence between sentences")
    p.add_argument("--seed", type=int, help="the same seed gives the same audio")
    p.add_argument("--prompt", type=Path, help="voice prompt clip to clone (wav, flac, ogg, mp3)")
    p.add_argument("--prompt-text", default="", help="optional transcript of the prompt clip")
    p.add_argument("--instruct", default="", help='style instruction, e.g. "slowly, in a warm low voice"')


def _keys_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("keys", help="API keys per login (the API takes a key, never a password)")
    p.add_argument("action", choices=("add", "list", "revoke"), help="add LOGIN, list, or revoke KEY_ID")
    p.add_argument("name", nargs="?", default="", help="add: the login the key acts as; revoke: the key's id")
    p.add_argument("--api-keys", default=None, metavar="FILE", help=HELP["api_keys"])
    p.add_argument("--outputs-dir", default=None, metavar="DIR", help=HELP["outputs_dir"])


def _run_keys(args: argparse.Namespace) -> int:
    """Add (the key is printed once, only its hash is kept), list or revoke the keys of the server's key file."""
    from voicelab.keys import ApiKeys
    from voicelab.settings import from_environment

    base = from_environment()
    settings = replace(base, api_keys=args.api_keys or base.api_keys, outputs_dir=args.outputs_dir or base.outputs_dir)
    keys = ApiKeys(settings.api_keys_path)
    if args.action == "list":
        for record in keys.records():
            created = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.created_at))
            print(f"{record.key_id}  {record.login}  created {created}")
        return 0
    if not args.name:
        print(f"error: keys {args.action} needs a {'login' if args.action == 'add' else 'key id'}.", file=sys.stderr)
        return 2
    if args.action == "revoke":
        gone = keys.revoke(args.name)
        print(f"revoked {gone.key_id} ({gone.login}); it no longer works.")
        return 0
    logins = [item.partition(":")[0].strip() for item in settings.auth.split(",") if item.strip()]
    if logins and args.name not in logins:
        print(f"note: {args.name!r} is not a login of --auth; the server refuses its key until it is.", file=sys.stderr)
    made = keys.add(args.name)
    print(f"API key {made.record.key_id} for {made.record.login} (shown only now; keep it secret):")
    print(made.key)
    return 0


def _options(pairs: list[str]) -> dict[str, float]:
    options: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--option takes NAME=VALUE, got {pair!r}")
        options[name.strip()] = float(value)
    return options


def _run_synth(args: argparse.Namespace) -> int:
    """Through the same generation service as the UI, with the engine in this process (no worker)."""
    import soundfile as sf

    from voicelab.backends.registry import preflight
    from voicelab.engine.validation import clean_text
    from voicelab.settings import from_environment
    from voicelab.studio import GenerationRequest, GenerationService
    from voicelab.voice.intake import load_prompt

    base = from_environment()
    settings = replace(
        base,
        device=args.device,
        dtype=args.dtype,
        backend=args.backend,
        voice_path=args.voice,
        cosyvoice_dir=args.cosyvoice_dir or base.cosyvoice_dir,
        cosyvoice_code=args.cosyvoice_code or base.cosyvoice_code,
        backend_options=args.backend_options or base.backend_options,
    )
    problem = preflight(settings)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    request = GenerationRequest(
        text=args.text,
        kind="cli",
        language=args.language,
        # Intake (the prompt's own validator) before the model loads, so a bad clip fails fast.
        prompt=load_prompt(args.prompt, args.prompt_text) if args.prompt is not None else None,
        instruction=args.instruct,
        speed=args.speed,
        seed=args.seed,
        sentence_silence_s=args.sentence_silence,
        options=_options(args.option),
    )
    clean_text(args.text, settings.max_text_chars)  # refuse bad text before the model loads
    from voicelab.engine.inproc import InprocClient

    with InprocClient(settings) as engine:
        generation = GenerationService(engine, None, settings).generate(request)
    result = generation.first.result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(args.out), result.audio, result.sample_rate, subtype="PCM_16")
    line = result.metrics()
    line["out"] = str(args.out)
    if args.instruct:
        line["not_understood"] = list(generation.parsed.not_understood)
        line["not_rendered"] = list(generation.parsed.not_rendered)
    if result.style_check is not None:
        line["style_check"] = dataclasses.asdict(result.style_check)
    print(json.dumps(line, ensure_ascii=False))
    return 0


def _delegate(table: dict[str, str], name: str, rest: list[str]) -> int:
    module = importlib.import_module(table[name])
    return int(module.main(rest))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m voicelab",
        description="VoiceLab command line. The built-in Chinese voice is trained on the Baker corpus, "
        "licensed for non-commercial use only.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _synth_parser(sub)
    _keys_parser(sub)
    # no -h of their own: ``bench soak --help`` reaches the benchmark's parser, which lists its flags
    bench = sub.add_parser("bench", help="benchmarks that print side-by-side ratios", add_help=False)
    bench.add_argument("name", choices=sorted(BENCHMARKS))
    # ``serve --ray``: the studio and API as a Ray Serve application (voicelab.cluster.deploy lists its flags)
    sub.add_parser("serve", help="serve the studio and API on a Ray cluster (--ray)", add_help=False)
    evaluate = sub.add_parser("eval", help="evaluations", add_help=False)
    evaluate.add_argument("name", choices=sorted(EVALUATIONS))
    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "synth":
            if rest:
                parser.error(f"unrecognized arguments: {' '.join(rest)}")
            return _run_synth(args)
        if args.command == "keys":
            if rest:
                parser.error(f"unrecognized arguments: {' '.join(rest)}")
            return _run_keys(args)
        if args.command == "serve":
            from voicelab.cluster.deploy import main as serve_main

            return serve_main(rest)
        table = BENCHMARKS if args.command == "bench" else EVALUATIONS
        return _delegate(table, args.name, rest)
    except VoiceLabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
