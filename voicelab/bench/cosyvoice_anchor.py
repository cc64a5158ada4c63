"""``bench cosyvoice``'s line against NVIDIA's own CosyVoice2 serving stack (Triton + TensorRT-LLM).

NVIDIA's ``runtime/triton_trtllm`` reports, on one L20, RTF 0.089 at concurrency 1 and 0.060 at 4 for 26 zero-shot
requests of its Mandarin seed-tts split (offline mode, no speaker cache: every request's prompt is processed anew),
RTF being the run's wall time over the audio it made. The anchor phase repeats that shape: 26 Mandarin requests,
each in a voice new to the cache (its own cut of a test prompt), texts cut to one length chosen so that a reply is
about 8.5 s long (two probe requests fit seconds = a + b * characters on the model in hand: random weights emit a
fixed number of speech tokens per text token, real ones speak at their own pace), at 1 and 4 clients.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ANCHOR_RTF = {1: 0.089, 4: 0.060}  # NVIDIA Triton + TRT-LLM, one L20, CosyVoice2, offline mode
ANCHOR_REQUESTS = 26
ANCHOR_AUDIO_S = 8.5  # per request, as the anchor's 26 requests average
PROBE_CHARS = (5, 40)
CORPUS_ZH = (
    "老灯塔看守人每天傍晚都会沿着螺旋楼梯爬上塔顶。雨点敲打着铁皮屋顶，水壶开始鸣响。"
    "请问去火车站怎么走？她笑了笑，摇摇头，什么也没说。新鲜的面包、熟透的番茄和一点橄榄油就是完美的午餐。"
    "为什么河水在夜里听起来总是更响？委员会将于星期四下午三点半再次开会。风力发电机在山脊上缓缓转动。"
)
LONGEST_CHARS = 2 * len(CORPUS_ZH)


def anchor_texts(count: int, chars: int) -> list[str]:
    """``count`` different Mandarin texts of exactly ``chars`` characters (cut from the corpus read in a loop)."""
    chars = max(1, min(chars, LONGEST_CHARS))
    looped = CORPUS_ZH * (2 + chars // len(CORPUS_ZH))
    return [looped[(37 * i) % len(CORPUS_ZH) :][:chars] for i in range(count)]


def sized_chars(probes: Sequence[tuple[int, float]], target_s: float = ANCHOR_AUDIO_S) -> int:
    """The text length whose reply lasts ``target_s``, from (characters, seconds) of two probe replies."""
    (c1, s1), (c2, s2) = probes[0], probes[-1]
    slope = (s2 - s1) / (c2 - c1) if c2 != c1 else 0.0
    if slope <= 0:  # replies that do not grow with the text: the longer probe is as good as any
        return c2
    return max(1, min(LONGEST_CHARS, round(c1 + (target_s - s1) / slope)))


def anchor_voice(index: int, prompts: Sequence[Path]) -> tuple[Any, int, str]:
    """Voice ``index`` of the anchor phase: (samples, rate, transcript), a cut of a test prompt that no other phase
    uses (300 ms + 10 ms an index from its start; the soak's cuts stop at 290 ms)."""
    import soundfile as sf

    base = prompts[index % len(prompts)]
    samples, rate = sf.read(base, dtype="float32")
    return samples[int(rate * (0.3 + 0.01 * index)) :], rate, base.with_suffix(".txt").read_text().strip()


def anchor_voices(folder: Path, count: int, prompts: Sequence[Path]) -> list[tuple[str, str]]:
    """``count`` voices new to every cache (``anchor_voice``), written to ``folder``: (wav path, transcript)."""
    import soundfile as sf

    voices = []
    for index in range(count):
        samples, rate, transcript = anchor_voice(index, prompts)
        path = folder / f"anchor_{index}.wav"
        sf.write(path, samples, rate)
        voices.append((str(path), transcript))
    return voices


def rtf_by_clients(anchor: Mapping[str, Any]) -> dict[int, float]:
    """The anchor phase's RTF (wall time over audio) per client count."""
    rows = anchor.get("throughput", [])
    return {int(row["clients"]): 1.0 / max(row["audio_s_per_s"], 1e-9) for row in rows}


def anchor_line(anchor: Mapping[str, Any]) -> str:
    """'RTF at concurrency 1 / 4: X / Y (NVIDIA Triton+TRT-LLM on an L20: 0.089 / 0.060)' and the shape measured."""
    rtf = rtf_by_clients(anchor)
    counts = sorted(rtf)
    ours = " / ".join(f"{rtf[c]:.3f}" for c in counts)
    theirs = " / ".join(f"{ANCHOR_RTF[c]:.3f}" if c in ANCHOR_RTF else "-" for c in counts)
    rows = anchor["throughput"]
    audio_each = rows[0]["audio_s_per_s"] * rows[0]["wall_s"] / rows[0]["requests"]
    return (
        f"RTF at concurrency {' / '.join(map(str, counts))}: {ours} (NVIDIA Triton+TRT-LLM on an L20: {theirs}); "
        f"{rows[0]['requests']} Mandarin requests of {anchor['chars']} characters, {audio_each:.1f} s of audio each, "
        f"every voice new; p50 latency alone {rows[0]['p50_s']:.3f} s"
    )
