"""The page's two languages: every label has both, presets and examples follow the choice."""

from __future__ import annotations

from voicelab.instruct.presets import PRESETS
from voicelab.ui.i18n import TRANSLATIONS, text_in
from voicelab.ui.localized import choice_labels, examples_for, preset_choices, ui_language


def test_every_label_exists_in_english_and_chinese() -> None:
    assert TRANSLATIONS["en"].keys() == TRANSLATIONS["zh"].keys()
    same = [k for k in TRANSLATIONS["en"] if TRANSLATIONS["en"][k] == TRANSLATIONS["zh"][k]]
    assert same == ["ui_language"]  # the switch reads the same in both, everything else is translated
    assert text_in("tab_clone", "zh-CN") == "克隆" and text_in("tab_clone", "en-GB") == "Clone"


def test_browser_locales_map_to_the_two_languages() -> None:
    assert [ui_language(x) for x in ("zh", "zh-TW", "ZH-cn", "en-US", "de", "", None)] == ["zh"] * 3 + ["en"] * 4


def test_presets_and_examples_put_the_chosen_language_first() -> None:
    zh, en = preset_choices("zh", native=False), preset_choices("en", native=False)
    chinese = [p.name for p in PRESETS if p.language == "zh"]
    assert zh[: len(chinese)] == chinese and en[0] == "Kindergarten teacher"
    assert sorted(zh) == sorted(en)  # every preset stays reachable in either language
    assert examples_for("zh")[0] == ["今天天气很好，我们去公园散步吧。"]
    assert examples_for("en")[0] == ["The quick brown fox jumps over the lazy dog."]
    assert all(not any("\u4e00" <= c <= "\u9fff" for c in e[0]) for e in examples_for("zh", speaks=("en",)))


def test_dropdown_choices_read_chinese_but_send_the_same_values() -> None:
    from voicelab.ui.speak_tab import language_choices

    assert choice_labels(("unspecified", "very high"), "zh") == [
        ("未指定 (unspecified)", "unspecified"),
        ("很高 (very high)", "very high"),
    ]
    assert choice_labels(("fast",), "en") == [("fast", "fast")]
    assert language_choices(("en", "zh"), "zh")[0] == ("自动（按文字判断）", "auto")
