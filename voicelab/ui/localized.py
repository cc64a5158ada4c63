"""Content that follows the chosen UI language and the loaded backend: presets, examples, instruction hints.

The built-in voices render the parser's vocabulary (``instruct.presets``); a native-instruction backend such as
CosyVoice reads free text, so it gets its own instruction examples (dialects, speed, volume, emotion) in the
form its instruct mode was trained on. The chosen language's entries come first; the others stay reachable.
"""

from __future__ import annotations

from voicelab.errors import InvalidSettingError
from voicelab.instruct.presets import PRESETS, Preset

UI_LANGUAGES = (("English", "en"), ("中文", "zh"))

COSYVOICE_PRESETS: tuple[Preset, ...] = (
    Preset("Fast", "Please speak as fast as you can.", "The train leaves in two minutes, we need to run.", "en"),
    Preset("Slow", "Please speak very slowly.", "Take a deep breath, and let the day slowly drift away.", "en"),
    Preset("Loud", "Please say this as loudly as possible.", "Everyone, please gather at the entrance now!", "en"),
    Preset("Soft", "Please speak softly, almost in a whisper.", "The baby is asleep, so let's keep quiet.", "en"),
    Preset("Happy", "Please speak in a happy, cheerful tone.", "We won the match! I can't believe it!", "en"),
    Preset("Sad", "Please speak in a sad tone.", "I waited all evening, but nobody came.", "en"),
    Preset("Angry", "Please speak in an angry tone.", "This is the third time you have broken my cup!", "en"),
    Preset("Cantonese (dialect)", "Please say this in Cantonese.", "今日天气好好，我哋去饮茶啦。", "en"),
    Preset("四川话 (Sichuanese)", "用四川话说这句话", "今天的火锅巴适得很，我们再来一盘毛肚嘛。", "zh"),
    Preset("粤语 (Cantonese)", "用粤语说这句话", "今日天气好好，我哋去饮茶啦。", "zh"),
    Preset("上海话 (Shanghainese)", "用上海话说这句话", "侬好，今朝天气老好额，阿拉一道去白相。", "zh"),
    Preset("语速快 (fast)", "请用尽可能快的语速说这句话", "列车还有两分钟就要开了，我们得赶紧跑过去。", "zh"),
    Preset("语速慢 (slow)", "请用很慢的语速说这句话", "深呼吸，慢慢地放松你的肩膀。", "zh"),
    Preset("大声 (loud)", "请非常大声地说这句话", "请大家马上到正门集合！", "zh"),
    Preset("小声 (soft)", "请小声地、轻轻地说这句话", "宝宝终于睡着了，我们小声一点。", "zh"),
    Preset("开心 (happy)", "用开心的语气说这句话", "我们赢了！真不敢相信！", "zh"),
    Preset("伤心 (sad)", "用伤心的语气说这句话", "我等了一整晚，可是谁也没有来。", "zh"),
    Preset("生气 (angry)", "用生气的语气说这句话", "这已经是你第三次打碎我的杯子了！", "zh"),
)

EXAMPLES: dict[str, tuple[str, ...]] = {
    "en": (
        "The quick brown fox jumps over the lazy dog.",
        "VoiceLab keeps running: the hundredth generation is as fast as the first.",
        "Please mind the gap between the train and the platform. Thank you for travelling with us.",
        "Is it raining outside? I left my umbrella at home!",
    ),
    "zh": (
        "今天天气很好，我们去公园散步吧。",
        "我今天用 VoiceLab 做了一个 demo，效果很好。",
        "请注意，列车即将进站，请站在黄线以外候车。",
        "外面在下雨吗？我把伞忘在家里了！",
    ),
}

INSTRUCTION_HINTS = {
    ("en", False): "e.g. slowly, in a warm low voice, a little sad",
    ("zh", False): "例如：慢慢地，用温暖低沉的声音，有点难过",
    ("en", True): "e.g. Please speak in a happy tone. / Please say this in Cantonese.",
    ("zh", True): "例如：用四川话说这句话 / 请用尽可能快的语速说 / 用开心的语气说",
}


CHOICES_ZH = {
    "unspecified": "未指定", "child": "儿童", "young adult": "青年", "middle-aged": "中年", "elderly": "老年",
    "male": "男", "female": "女", "very high": "很高", "high": "高", "medium-high": "偏高", "medium": "适中",
    "medium-low": "偏低", "low": "低", "very low": "很低", "very strong": "很强", "strong": "强", "moderate": "适中",
    "weak": "弱", "very weak": "很弱", "very loud": "很大声", "loud": "大声", "slightly loud": "稍大声",
    "slightly soft": "稍小声", "soft": "小声", "very soft": "很小声", "very fast": "很快", "fast": "快",
    "slightly fast": "稍快", "slightly slow": "稍慢", "slow": "慢", "very slow": "很慢", "happy": "开心",
    "angry": "生气", "sad": "伤心", "surprised": "惊讶", "disgusted": "厌恶", "fearful": "害怕", "calm": "平静",
    "whisper": "耳语", "neutral": "中性", "Auto (by script)": "自动（按文字判断）",
}  # fmt: skip


def choice_labels(values: tuple[str, ...] | list[str], language: str) -> list[tuple[str, str]]:
    """(label, value) pairs for a dropdown: the values stay English (what handlers and the API read)."""
    if ui_language(language) == "en":
        return [(value, value) for value in values]
    return [(f"{CHOICES_ZH.get(value, value)} ({value})", value) for value in values]


def ui_language(value: str | None) -> str:
    """ "zh" for any Chinese locale ("zh-CN", "zh-TW"), else "en"."""
    return "zh" if (value or "").lower().startswith("zh") else "en"


def presets_for(native: bool) -> tuple[Preset, ...]:
    return COSYVOICE_PRESETS if native else PRESETS


def preset_choices(language: str, native: bool, speaks: tuple[str, ...] = ("en", "zh")) -> list[str]:
    """Preset names, the chosen language's first; presets whose sample the backend cannot speak are left out."""
    presets = [p for p in presets_for(native) if _speakable(p, speaks)]
    first = [p.name for p in presets if p.language == ui_language(language)]
    return first + [p.name for p in presets if p.name not in first]


def find_preset(name: str) -> Preset:
    """A preset of either list by name; raises ``InvalidSettingError`` for an unknown one."""
    for preset in (*PRESETS, *COSYVOICE_PRESETS):
        if preset.name == name:
            return preset
    raise InvalidSettingError(f"There is no preset called {name!r}.")


def examples_for(language: str, speaks: tuple[str, ...] = ("en", "zh")) -> list[list[str]]:
    """Example texts in the chosen language first, one of the other language after (if the backend speaks it)."""
    own = ui_language(language)
    other = "en" if own == "zh" else "zh"
    texts = [*EXAMPLES[own], EXAMPLES[other][0]]
    return [[text] for text in texts if _language_of(text) in speaks]


def instruction_hint(language: str, native: bool) -> str:
    return INSTRUCTION_HINTS[(ui_language(language), native)]


def _language_of(text: str) -> str:
    return "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"


def _speakable(preset: Preset, speaks: tuple[str, ...]) -> bool:
    return _language_of(preset.sample_text) in speaks
