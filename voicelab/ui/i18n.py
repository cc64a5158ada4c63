"""The studio's static text in English and Chinese, through Gradio's own i18n (``gr.I18n``).

Gradio translates labels, placeholders, infos and Markdown in the browser, starting from the browser's
language; the page's language switch changes it (and remembers it) and asks the server for the presets and
examples of that language. Text made by the server (status lines, figures) stays in English.
"""

from __future__ import annotations

import gradio as gr
from gradio.i18n import I18nData

from voicelab.ui.localized import ui_language

_EN_ZH: dict[str, tuple[str, str]] = {
    "header": (
        "# VoiceLab\nVoice cloning and instruction-controlled speech that keeps running.",
        "# VoiceLab\n声音克隆与指令控制的语音合成：第一百次生成和第一次一样快。",
    ),
    "ui_language": ("Language / 语言", "Language / 语言"),
    "tab_speak": ("Speak", "朗读"),
    "tab_clone": ("Clone", "克隆"),
    "tab_design": ("Design / Instruct", "设计 / 指令"),
    "tab_history": ("History", "历史"),
    "text": ("Text", "文本"),
    "text_placeholder": ("Type what the voice should say…", "输入要说的话…"),
    "clone_text_placeholder": ("Type what the cloned voice should say…", "输入克隆的声音要说的话…"),
    "text_language": ("Language", "文本语言"),
    "advanced": ("Advanced", "高级"),
    "speed": ("Speed", "语速"),
    "speed_info": ("length scale = 1 / speed", "长度系数 = 1 / 语速"),
    "silence": ("Silence between sentences (s)", "句间停顿（秒）"),
    "noise_scale": ("Noise scale", "噪声系数"),
    "noise_scale_info": ("voice variation", "音色变化"),
    "noise_w": ("Noise w", "节奏噪声"),
    "noise_w_info": ("rhythm variation", "节奏变化"),
    "seed": ("Seed", "随机种子"),
    "seed_info": ("-1: a new random seed each time", "-1：每次使用新的随机种子"),
    "generate": ("Generate", "生成"),
    "clone_generate": ("Clone and speak", "克隆并朗读"),
    "live": ("Live (plays as it is made)", "实时播放（边生成边播放）"),
    "speech": ("Speech", "语音"),
    "cloned_speech": ("Cloned speech", "克隆的语音"),
    "subtitles": ("Subtitles (SRT)", "字幕 (SRT)"),
    "examples": ("Examples", "示例"),
    "voices_note": (
        "Built-in voices: English (Piper en_US-joe-medium, MIT) and Chinese (Baker FastSpeech2; "
        "non-commercial use only). Mixed text is spoken run by run, each in its own voice.",
        "内置声音：英文（Piper en_US-joe-medium，MIT 许可）和中文（标贝 FastSpeech2，仅限非商业用途）。"
        "中英混合的文本按段落分别用对应的声音朗读。",
    ),
    "prompt": (
        "Voice prompt: 1 to 30 s of one person speaking (past 30 s, only the first 30 s are used)",
        "声音样本：一个人说话的 1 到 30 秒录音（超过 30 秒只用前 30 秒）",
    ),
    "transcript": (
        "Transcript of the prompt (optional: matching calibrates on it; neural cloning needs it)",
        "样本的文字内容（可选：音色匹配据此校准；神经克隆需要它）",
    ),
    "clone_style": ("Style (optional): instruction, preset, controls", "风格（可选）：指令、预设、控制项"),
    "preset": ("Preset", "预设"),
    "preset_info": ("fills the instruction and a sample text", "填入指令和示例文本"),
    "instruction": ("Style instruction", "风格指令"),
    "instruction_placeholder": (
        "e.g. slowly, in a warm low voice, a little sad",
        "例如：慢慢地，用温暖低沉的声音，有点难过",
    ),
    "sculptor": ("Voice-Sculptor controls (override the instruction)", "Voice-Sculptor 控制项（优先于指令）"),
    "control_age": ("Age", "年龄"),
    "control_gender": ("Gender", "性别"),
    "control_pitch": ("Pitch", "音高"),
    "control_pitch_variation": ("Pitch variation", "音高起伏"),
    "control_volume": ("Volume", "音量"),
    "control_speed": ("Speed", "语速"),
    "control_emotion": ("Emotion", "情感"),
    "voice": ("Voice", "声音"),
    "voice_info": ("the built-in voices, or one of My voices", "内置声音，或“我的声音”中的一个"),
    "takes": ("Takes", "生成条数"),
    "takes_info": ("different seeds, side by side", "不同的随机种子，并排对比"),
    "take_1": ("Take 1", "第 1 条"),
    "take_2": ("Take 2", "第 2 条"),
    "take_3": ("Take 3", "第 3 条"),
    "take_4": ("Take 4", "第 4 条"),
    "resources": ("### Resources", "### 资源"),
    "timeline": ("Memory timeline", "内存时间线"),
    "clear_profiles": ("also clear speaker profiles", "同时清除说话人特征"),
    "clean": ("Clean cache", "清理缓存"),
    "force": ("force (requeue the job in flight)", "强制（把正在运行的任务放回队列）"),
    "restart": ("Soft restart", "软重启"),
    "inspect": ("Inspect memory", "查看内存"),
    "voice_engine": ("Voice engine", "语音引擎"),
    "voice_engine_info": (
        "switching restarts the worker: the job in flight finishes first, queued jobs are spoken by the new engine",
        "切换会重启工作进程：正在运行的任务先完成，排队的任务由新引擎朗读",
    ),
    "segments": ("Allocator segments", "分配器内存段"),
    "my_voices": ("My voices", "我的声音"),
    "saved_voice": ("Saved voice", "已保存的声音"),
    "save_as": ("Save the prompt below as", "把下面的样本保存为"),
    "save_as_placeholder": ("a name", "名称"),
    "save_voice": ("Save this voice", "保存这个声音"),
    "delete": ("Delete", "删除"),
}

TRANSLATIONS: dict[str, dict[str, str]] = {
    "en": {key: pair[0] for key, pair in _EN_ZH.items()},
    "zh": {key: pair[1] for key, pair in _EN_ZH.items()},
}
I18N = gr.I18n(**TRANSLATIONS)


def t(key: str) -> I18nData:
    """A translated string for a component's label, info, placeholder or value (looked up in the browser)."""
    if key not in _EN_ZH:
        raise KeyError(f"no translation for {key!r}")
    return I18N(key)


def text_in(key: str, language: str) -> str:
    """The same text on the server side, for tests and server-made lines."""
    return TRANSLATIONS[ui_language(language)][key]


def english(text: object) -> str:
    """A label or text as English words on the server (a translated one by its English text, never its key)."""
    if isinstance(text, I18nData):
        return TRANSLATIONS["en"].get(text.key, text.key)
    return "" if text is None else str(text)


# The switch: read the saved choice (else the browser's language), and make Gradio's own locale follow it.
# Gradio keeps its locale in its core module's store; ``changeLocale`` is that module's export for it.
_CHANGE_LOCALE = """
  const core = performance.getEntriesByType("resource").map((e) => e.name)
    .find((n) => /\\/assets\\/core-[^/]*\\.js$/.test(n));
  if (core) {
    try { (await import(core)).changeLocale(lang); } catch (err) { console.warn("VoiceLab: locale", err); }
  }
  return lang;
"""
DETECT_LANGUAGE_JS = (
    """
async () => {
  const saved = window.localStorage.getItem("voicelab-language");
  const lang = (saved || navigator.language || "en").toLowerCase().startsWith("zh") ? "zh" : "en";
"""
    + _CHANGE_LOCALE
    + "}"
)
SET_LANGUAGE_JS = (
    """
async (lang) => {
  window.localStorage.setItem("voicelab-language", lang);
"""
    + _CHANGE_LOCALE
    + "}"
)
