"""Clone + instruction through the Clone button's handler: median F0 and level of each clone (docs/benchmarks.md).

Run: ``python -m tests.measure_clone_style [cpu|cuda]`` (built-in voices, prompt tests/data/arctic_slt_en_female.wav).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import soundfile as sf

from tests.audio_measures import Measures, measure, semitones
from tests.studio_helpers import clone, make_studio
from voicelab.engine.inproc import InprocClient
from voicelab.history import History
from voicelab.settings import Settings

PROMPT = str(Path(__file__).parent / "data" / "arctic_slt_en_female.wav")
TEXT = "The garden looks lovely in the morning."
UNSET = ("unspecified",) * 7
VERY_HIGH = ("unspecified", "unspecified", "very high", *UNSET[3:])  # the Pitch dropdown
CASES = [("", UNSET), ("speak higher", UNSET), ("", VERY_HIGH), ("大声一点", UNSET), ("louder", UNSET)]


def main(device: str) -> None:
    with InprocClient(Settings(device=device, backend="builtin")) as engine:
        studio = make_studio(engine, History(Path(tempfile.mkdtemp()) / "history"))
        base: Measures | None = None
        for instruction, dropdowns in CASES:
            audio, _, _ = clone(studio, PROMPT, "", TEXT, 1.0, 0.667, 0.8, 0.2, 3, "auto", instruction, *dropdowns)
            heard = measure(*sf.read(audio, dtype="float32"))
            base = base or heard
            chosen = [d for d in dropdowns if d != "unspecified"]
            print(
                f"{instruction or '(none)'} {chosen}: F0 {heard.f0_median_hz:.1f} Hz "
                f"({semitones(heard.f0_median_hz, base.f0_median_hz):+.1f} st), level {heard.speech_rms_dbfs:.1f} dBFS "
                f"({heard.speech_rms_dbfs - base.speech_rms_dbfs:+.1f} dB), {heard.duration_s:.2f} s"
            )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
