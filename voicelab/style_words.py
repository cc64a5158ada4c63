"""The Voice-Sculptor dropdowns as words a native-instruction model reads (CosyVoice's instruct mode).

A backend that renders instructions itself never sees a ``Style`` as DSP: it reads text. So the dropdowns
the user set are phrased in the language of the request (Chinese if the instruction or the text is written
in Han characters, English otherwise) and added after the typed instruction, so the same controls drive a
native backend as they drive the built-in voices' styling. Unset dropdowns add nothing.
"""

from __future__ import annotations

from voicelab.instruct.style import Style

_EMOTION = {
    "happy": ("in a happy tone", "用开心的语气"),
    "sad": ("in a sad tone", "用悲伤的语气"),
    "angry": ("in an angry tone", "用生气的语气"),
    "surprised": ("in a surprised tone", "用惊讶的语气"),
    "fearful": ("in a frightened tone", "用害怕的语气"),
    "disgusted": ("in a disgusted tone", "用厌恶的语气"),
    "calm": ("calmly", "用平静的语气"),
    "whisper": ("in a whisper", "用耳语的方式"),
    "neutral": ("in a neutral tone", "用平淡的语气"),
}
_AGE = {
    "child": ("like a child", "像小孩子一样"),
    "young adult": ("like a young adult", "像年轻人一样"),
    "middle-aged": ("like a middle-aged person", "像中年人一样"),
    "elderly": ("like an elderly person", "像老人一样"),
}
_GENDER = {"male": ("in a male voice", "用男声"), "female": ("in a female voice", "用女声")}


def _graded(value: float | None, neutral: float, up: tuple[str, str], down: tuple[str, str], big: float) -> str:
    """``up``/``down`` as (a little, very) by how far ``value`` is from ``neutral``; "" when unset or neutral."""
    if value is None or abs(value - neutral) < 1e-6:
        return ""
    words = up if value > neutral else down
    return words[1] if abs(value - neutral) >= big else words[0]


def _phrases(style: Style, zh: bool) -> list[str]:
    pick = 1 if zh else 0
    speed = (("a little faster", "very fast"), ("a little slower", "very slowly"))
    pitch = (("with a higher pitch", "with a very high pitch"), ("with a lower pitch", "with a very low pitch"))
    volume = (("a little louder", "very loudly"), ("a little more softly", "very softly"))
    melody = (("with lively intonation", "with very lively intonation"), ("more flatly", "in a monotone"))
    if zh:
        speed = (("语速快一点", "语速非常快"), ("语速慢一点", "语速非常慢"))
        pitch = (("声音高一点", "声音非常高"), ("声音低一点", "声音非常低沉"))
        volume = (("大声一点", "非常大声"), ("小声一点", "非常小声"))
        melody = (("语调起伏大一些", "语调起伏非常大"), ("语调平一些", "语调平平的"))
    parts = [
        _GENDER[style.gender.value][pick] if style.gender else "",
        _AGE[style.age.value][pick] if style.age else "",
        _EMOTION[style.emotion.value][pick] if style.emotion else "",
        _graded(style.speed, 1.0, *speed, big=0.4),
        _graded(style.pitch_semitones, 0.0, *pitch, big=4.0),
        _graded(style.volume_db, 0.0, *volume, big=8.0),
        _graded(style.pitch_range, 1.0, *melody, big=0.5),
    ]
    return [p for p in parts if p]


def style_words(style: Style, zh: bool) -> str:
    """E.g. "Please speak in a happy tone, a little faster." / "用开心的语气，语速快一点地说。" ("" when neutral)."""
    parts = _phrases(style, zh)
    if not parts:
        return ""
    return "，".join(parts) + "地说。" if zh else "Please speak " + ", ".join(parts) + "."


def has_han(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def with_style_words(instruction: str, style: Style, text: str) -> str:
    """The typed instruction followed by the dropdowns' words, in the request's language."""
    typed = instruction.strip()
    words = style_words(style, has_han(typed) or (not typed and has_han(text)))
    if not words:
        return typed
    if not typed:
        return words
    if has_han(typed):
        return f"{typed}{'' if typed[-1] in '。！？' else '。'}{words}"
    return f"{typed}{'' if typed[-1] in '.!?' else '.'} {words}"
