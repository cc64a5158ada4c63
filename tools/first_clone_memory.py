"""What the worker's memory does when the first cloned job follows plain ones, and whether its watches call it a leak.

    python -m tools.first_clone_memory [--device cpu] [--backend piper] [--plain 62] [--cloned 4]

``bench throughput --clone`` runs its plain warm-up (62 jobs at 1, 2, 4, 8 and 16 clients, two rounds) before the
first cloned job, which loads the voice stage's models on first use (the GE2E matcher, the ECAPA judge) and builds
the prompt's profile. This drives one worker the same way, one job at a time: ``--plain`` plain jobs, then
``--cloned`` cloned ones with one prompt, printing the worker's RSS and allocated memory after each phase and the
warning the panel would show (none expected: each model loaded on first use moves the watches' baseline).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from voicelab.engine.client import EngineClient
from voicelab.engine.messages import SynthesisRequest
from voicelab.settings import from_environment

PROMPT = Path(__file__).resolve().parents[1] / "tests" / "data" / "arctic_slt_en_female.wav"
SENTENCE = "The committee will meet again on Thursday at half past three."
MIB = 2**20


def _line(engine: EngineClient, phase: str) -> str:
    stats, status = engine.allocator_stats(), engine.status()
    return (
        f"{phase:<28} worker RSS {stats.worker_rss / MIB:7.0f} MiB, allocated {stats.allocated / MIB:7.1f} MiB, "
        f"warning: {status.leak_warning or 'none'}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.first_clone_memory", description=__doc__.split("\n\n")[1])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", default="piper")
    parser.add_argument("--plain", type=int, default=62)
    parser.add_argument("--cloned", type=int, default=4)
    args = parser.parse_args(argv)
    from voicelab.voice.intake import load_prompt

    prompt = load_prompt(PROMPT)
    settings = replace(from_environment(), device=args.device, backend=args.backend)
    with EngineClient(settings) as engine:
        engine.wait_ready()
        print(_line(engine, "loaded"))
        for index in range(args.plain):
            engine.synthesize(SynthesisRequest(SENTENCE, seed=index), timeout=300)
            if index + 1 in (5, args.plain):
                print(_line(engine, f"after {index + 1} plain jobs"))
        for index in range(args.cloned):
            engine.synthesize(SynthesisRequest(SENTENCE, seed=1000 + index, prompt=prompt), timeout=600)
            print(_line(engine, f"after {index + 1} cloned"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
