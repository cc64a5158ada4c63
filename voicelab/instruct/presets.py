"""Ready-made voice designs: a named instruction plus a sample text to try it on.

Every instruction is written in the parser's vocabulary, so each parses with nothing left over
(the tests hold this); a preset is a worked example of what the instruction box understands.
"""

from __future__ import annotations

from dataclasses import dataclass

from voicelab.errors import InvalidSettingError


@dataclass(frozen=True)
class Preset:
    """name: shown in the UI; language: "en" or "zh" (the sample text's language)."""

    name: str
    instruction: str
    sample_text: str
    language: str


PRESETS: tuple[Preset, ...] = (
    Preset(
        "Kindergarten teacher",
        "gentle and sweet, a little higher pitch, slightly slow, lively intonation",
        "Good morning, little ones! Let's sit in a circle and find out what the hungry caterpillar ate today.",
        "en",
    ),
    Preset(
        "News anchor",
        "calm and professional, at a normal pace, clear and steady",
        "Good evening. Tonight's main story: the city council has approved a new plan for public transport.",
        "en",
    ),
    Preset(
        "Storyteller",
        "expressive, with rising and falling intonation, slightly slow",
        "Once upon a time, in a forest older than anyone could remember, there lived a fox who never told a lie.",
        "en",
    ),
    Preset(
        "ASMR",
        "breathy whisper, soft and slow",
        "Close your eyes. Listen to the rain on the window, and let your shoulders drop.",
        "en",
    ),
    Preset(
        "Elderly narrator",
        "an elderly man, low and husky, speaking slowly",
        "When I was a boy, this whole valley was orchards, and every spring it smelled of apple blossom.",
        "en",
    ),
    Preset(
        "Game streamer",
        "excited and loud, fast and energetic",
        "No way, no way! Did you see that jump? Chat, that was the cleanest run of the whole week!",
        "en",
    ),
    Preset(
        "Documentary narrator",
        "low and magnetic, calm, slightly slow",
        "Beneath the ice, a world few have ever seen is waking up to the first light of spring.",
        "en",
    ),
    Preset(
        "Meditation guide",
        "slow and airy, calm and soft",
        "Breathe in slowly through your nose. Hold it for a moment. And now, gently let it go.",
        "en",
    ),
    Preset(
        "Sad letter",
        "sad and quiet, slowly, with a slightly lower pitch",
        "I kept your letters in a box by the window. I still read them sometimes, when it rains.",
        "en",
    ),
    Preset(
        "Angry customer",
        "angry and loud, a bit faster",
        "I have called three times this week and nobody has fixed my internet!",
        "en",
    ),
    Preset(
        "Station announcer",
        "monotone, neutral, at a medium pace",
        "Attention please. The next train to the airport departs from platform four in two minutes.",
        "en",
    ),
    Preset(
        "睡前故事奶奶 (bedtime grandma)",
        "用慈祥温柔的老奶奶的声音, 慢慢地讲",
        "从前啊, 山脚下有一个小村庄, 村里住着一只爱唱歌的小黄鸟。",
        "zh",
    ),
    Preset(
        "新闻主播 (Chinese news anchor)",
        "沉稳专业, 语速适中, 吐字清晰",
        "各位观众晚上好, 欢迎收看今天的晚间新闻。",
        "zh",
    ),
    Preset(
        "体育解说 (sports commentator)",
        "非常激动, 大声, 语速快, 起伏大",
        "球进了! 太精彩了! 这是本赛季最漂亮的一个进球!",
        "zh",
    ),
    Preset(
        "甜美少女 (sweet girl)",
        "甜美可爱的少女, 声音高一点, 开心",
        "今天天气真好, 我们一起去公园放风筝吧!",
        "zh",
    ),
    Preset(
        "鬼故事 (ghost story)",
        "低声, 有点害怕, 慢一点",
        "那天夜里, 走廊尽头的灯忽明忽暗, 我听见有人在轻轻地敲门。",
        "zh",
    ),
    Preset(
        "小男孩 (little boy)",
        "小男孩, 活泼开心, 语速稍快",
        "妈妈你看, 我用积木搭了一座好高好高的城堡!",
        "zh",
    ),
)

PRESET_NAMES: tuple[str, ...] = tuple(p.name for p in PRESETS)


def get_preset(name: str) -> Preset:
    """The preset called ``name``; raises ``InvalidSettingError`` for an unknown name."""
    for preset in PRESETS:
        if preset.name == name:
            return preset
    raise InvalidSettingError(f"There is no preset called {name!r}.")
