"""Chinese words for style instructions; the segmenter matches them longest-first.

Longer words shadow the characters inside them ("快乐" is happy, not "快"; "低声" is quiet, not low
pitch; "大声" is loud). Postfix intensities ("慢一点", "快得多", "开心极了") modify the word before.
"""

from __future__ import annotations

from collections.abc import Mapping

from voicelab.instruct.lexicon import (
    BOUNDARY,
    NEGATION,
    QUALITY,
    STOP,
    Kind,
    LexEntry,
    build,
    content,
    direction,
    emotion,
    fx,
    hint,
    intensity,
    noun,
    words,
)
from voicelab.instruct.scales import EXTREME, PLAIN, SLIGHT, STRONG, Attr
from voicelab.instruct.style import Age, Emotion, Gender

S, P, R, V = Attr.SPEED, Attr.PITCH, Attr.RANGE, Attr.VOLUME

_SPEED = {
    **words(content(fx(S, -1)), "慢", "慢慢", "慢慢地", "缓慢", "慢速", "放慢", "减慢", "缓缓", "徐徐", "慢条斯理"),
    **words(content(fx(S, -1, SLIGHT)), "不紧不慢", "悠闲", "稍慢", "慢悠悠", "慢悠悠地"),
    **words(content(fx(S, -1, STRONG)), "慢吞吞", "慢吞吞地"),
    **words(content(fx(S, +1)), "快", "快速", "加快", "迅速", "匆忙", "急匆匆", "快快", "语速快"),
    **words(content(fx(S, +1, STRONG)), "飞快", "急促", "连珠炮"),
    **words(content(fx(S, +1, SLIGHT)), "稍快", "轻快"),
    **words(content(fx(S, 0)), "不快不慢", "语速正常"),
}

_PITCH = {
    **words(direction(+1, P), "高", "升高", "提高", "调高", "拔高"),
    **words(direction(-1, P), "低", "降低", "调低"),
    **words(content(fx(P, +1)), "高音", "尖"),
    **words(content(fx(P, +1), hint(V, +1)), "高亢"),
    **words(content(fx(P, +1, STRONG)), "尖细", "尖锐", "尖声"),
    **words(content(fx(P, -1)), "低音", "低沉", "深沉"),
    **words(content(hint(P, -1), hint(V, +1)), "浑厚", "厚重", "醇厚"),
}

_DIRECTIONS = {
    **words(direction(+1, V), "大"),
    **words(direction(-1, V), "小"),
    **words(direction(+1), "加大", "增大", "增加", "提升", "增强"),
    **words(direction(-1), "减小", "减少", "减弱", "降"),
    **words(direction(+1, R), "丰富"),
    **words(direction(+1, fallback=Kind.STOP), "多", "更多"),
    **words(direction(-1, fallback=Kind.NEGATION), "少", "更少"),
    **words(direction(0, fallback=Kind.STOP), "正常", "适中", "中等", "一般", "平常", "普通", "自然"),
}

_NOUNS = {
    **words(noun(P), "音调", "音高", "声调", "调子", "调门"),
    **words(noun(V), "音量", "声量", "响度"),
    **words(noun(S), "语速", "速度", "节奏", "语速节奏"),
    **words(noun(R), "起伏", "抑扬", "语调", "变化", "音调变化", "语调变化", "波动", "高低变化"),
}

_RANGE = {
    **words(content(fx(R, +1)), "有起伏", "生动", "抑扬顿挫", "声情并茂", "绘声绘色", "高低起伏", "富有表现力"),
    **words(content(fx(R, +1)), "有感情", "富有感情", "充满感情", "饱含感情", "带着感情", "带感情", "感情丰富"),
    **words(content(fx(R, +1), hint(S, +1)), "活泼", "灵动"),
    **words(content(fx(R, +1, STRONG)), "跌宕起伏", "戏剧化", "夸张", "夸张地"),
    **words(content(fx(R, -1)), "平稳", "平缓", "没有起伏"),
    **words(content(fx(R, -1, STRONG)), "单调", "机械", "呆板", "像机器人"),
}

_VOLUME = {
    **words(content(fx(V, +1)), "大声", "大声地", "响亮", "洪亮", "大嗓门", "提高嗓门", "有力", "铿锵有力"),
    **words(content(fx(V, +1, STRONG)), "喊", "大喊", "喊叫", "吼", "大吼", "呐喊", "嘶吼", "高喊"),
    **words(content(fx(V, +1, STRONG), hint(P, +1)), "尖叫"),
    **words(content(fx(V, +1, STRONG), hint_cats=(Emotion.ANGRY,)), "咆哮"),
    **words(content(fx(V, -1)), "小声", "小声地", "轻声", "轻声地", "轻轻", "轻轻地", "低声", "低声地", "压低"),
    **words(content(fx(V, -1)), "柔声", "细声", "微弱", "细声细气", "轻声细语"),
    **words(content(fx(V, -1), hint_cats=(Emotion.CALM,)), "安静", "静静地"),
    **words(content(hint(V, -1)), "弱", "虚弱", "有气无力"),
}

_DESCRIPTORS = {
    **words(content(hint(P, -1)), "温暖", "温厚", "暖", "磁性", "有磁性", "富有磁性", "亲切"),
    **words(QUALITY, "沙哑", "嘶哑", "沙沙", "粗哑", "烟嗓", "粗犷"),
    **words(content(hint(P, -1), hint(R, -1), cats=(Age.ELDERLY,)), "苍老"),
    **words(content(hint(P, +1)), "明亮", "清亮", "清脆", "嘹亮"),
    **words(content(hint(V, +1)), "饱满", "中气十足"),
    **words(QUALITY, "清晰", "吐字清晰", "字正腔圆", "专业", "口齿清晰", "咬字清晰"),
    **words(content(hint(V, -1), hint_cats=(Emotion.WHISPER,)), "气声", "气息声", "带气声", "气音"),
    **words(content(hint(V, -1), hint(R, -1)), "空灵", "轻盈", "缥缈", "飘渺"),
    **words(content(hint(V, -1), hint(R, -1), hint_cats=(Emotion.CALM,)), "温柔", "温和", "柔和", "轻柔", "柔美"),
    **words(content(hint(V, -1), hint(R, -1), hint_cats=(Emotion.CALM,)), "慈祥", "和蔼", "体贴"),
    **words(content(hint(P, +1), hint(R, +1), hint_cats=(Emotion.HAPPY,)), "甜美", "甜", "可爱", "甜甜", "萌"),
    **words(content(hint(P, +1), hint(R, +1), hint_cats=(Emotion.HAPPY,)), "甜甜的", "撒娇", "俏皮"),
    **words(content(hint(R, -1), hint_cats=(Emotion.NEUTRAL,)), "正式", "播音腔", "新闻主播", "播音员"),
    **words(content(hint(R, -1), hint_cats=(Emotion.NEUTRAL,)), "主持人", "严肃", "客观", "冷淡", "新闻"),
    **words(content(hint(V, +1), hint(P, -1)), "权威", "自信", "坚定", "威严", "稳重"),
    **words(content(hint(S, +1), hint(V, +1), hint(R, +1)), "有活力", "活力", "充满活力", "元气", "精神饱满"),
    **words(content(hint(S, -1), hint(V, -1), hint(R, -1)), "疲惫", "困倦", "慵懒", "懒洋洋", "无精打采"),
    **words(content(hint(R, +1, PLAIN)), "讲故事", "说书", "故事", "童话"),
    **words(content(hint(V, -1), hint(S, -1), hint(P, -1)), "神秘", "鬼故事", "阴森", "诡异", "悬疑"),
    **words(content(hint(S, -1), hint(V, -1), hint_cats=(Emotion.CALM,)), "睡前故事", "哄睡", "摇篮曲"),
    **words(content(hint(R, +1, PLAIN), hint(S, -1)), "讽刺", "阴阳怪气", "嘲讽"),
    **words(content(hint(R, -1, PLAIN), hint(S, -1), hint_cats=(Emotion.NEUTRAL,)), "无聊", "敷衍", "冷漠"),
    **words(content(hint(S, +1), hint(V, +1), hint(R, +1)), "解说", "体育解说", "解说员", "体育解说员"),
    **words(content(hint(R, +1), hint_cats=(Emotion.HAPPY,)), "友好", "热心"),
    **words(content(hint(R, -1), hint(V, +1), hint_cats=(Emotion.ANGRY,)), "严厉", "凶", "凶狠"),
}

_EMOTIONS = {
    **words(emotion(Emotion.HAPPY), "开心", "高兴", "快乐", "愉快", "欢快", "喜悦", "欢乐", "愉悦", "欣喜"),
    **words(emotion(Emotion.HAPPY), "笑着", "开朗", "阳光", "喜气洋洋", "兴高采烈"),
    **words(emotion(Emotion.HAPPY, hint(S, +1), hint(R, +1, PLAIN), hint(V, +1)), "兴奋", "激动", "热情"),
    **words(emotion(Emotion.HAPPY, hint(S, +1), hint(R, +1, PLAIN), hint(V, +1)), "热情洋溢", "激昂", "亢奋"),
    **words(emotion(Emotion.SAD), "伤心", "悲伤", "难过", "忧伤", "哀伤", "低落", "沮丧", "悲痛", "忧郁"),
    **words(emotion(Emotion.SAD), "悲凉", "哭腔", "失落", "凄凉", "惆怅", "伤感", "委屈"),
    **words(emotion(Emotion.ANGRY), "生气", "愤怒", "恼怒", "气愤", "发火", "不满", "恼火", "怒气冲冲"),
    **words(emotion(Emotion.ANGRY, hint(V, +1)), "暴怒", "怒吼", "大发雷霆"),
    **words(emotion(Emotion.SURPRISED), "惊讶", "吃惊", "惊奇", "震惊", "诧异", "意外", "难以置信", "惊喜"),
    **words(emotion(Emotion.FEARFUL), "害怕", "恐惧", "紧张", "惊恐", "胆怯", "担心", "担忧", "不安"),
    **words(emotion(Emotion.FEARFUL), "颤抖", "惊慌", "慌张", "胆小", "发抖", "哆嗦"),
    **words(emotion(Emotion.DISGUSTED), "厌恶", "恶心", "嫌弃", "反感", "鄙视", "不屑", "嫌恶", "厌烦"),
    **words(emotion(Emotion.CALM), "平静", "冷静", "淡定", "安详", "宁静", "放松", "平和", "镇定", "沉稳"),
    **words(emotion(Emotion.CALM), "心平气和", "沉着"),
    **words(emotion(Emotion.CALM, hint(S, -1)), "舒缓", "从容", "悠然"),
    **words(emotion(Emotion.WHISPER), "耳语", "悄悄话", "悄悄", "悄悄地", "低语", "窃窃私语", "私语"),
    **words(emotion(Emotion.NEUTRAL, hint(R, -1)), "中性", "平淡", "平铺直叙", "不带感情", "没有感情", "毫无感情"),
    **words(emotion(Emotion.NEUTRAL, hint(R, -1)), "无感情", "面无表情"),
}

_AGE_GENDER = {
    **words(content(cats=(Age.CHILD,)), "小孩", "小孩子", "孩子", "儿童", "小朋友", "童声", "孩童", "宝宝", "幼儿"),
    **words(content(cats=(Age.CHILD, Gender.MALE)), "小男孩", "男孩", "男童", "小男生"),
    **words(content(cats=(Age.CHILD, Gender.FEMALE)), "小女孩", "女孩", "女童", "小女生", "小姑娘"),
    **words(content(cats=(Age.YOUNG_ADULT,)), "年轻", "年轻人", "青年", "青春", "年青"),
    **words(content(cats=(Age.YOUNG_ADULT, Gender.MALE)), "少年", "小伙子", "小伙", "男青年"),
    **words(content(cats=(Age.YOUNG_ADULT, Gender.FEMALE)), "少女", "女青年", "姑娘"),
    **words(content(cats=(Age.MIDDLE_AGED,)), "中年", "中年人"),
    **words(content(cats=(Age.MIDDLE_AGED, Gender.MALE)), "大叔", "中年男人", "中年男性"),
    **words(content(cats=(Age.MIDDLE_AGED, Gender.FEMALE)), "阿姨", "大妈", "中年女人", "中年女性"),
    **words(content(cats=(Age.ELDERLY,)), "老人", "老年", "老年人", "老者", "年迈", "老人家", "长者"),
    **words(content(cats=(Age.ELDERLY, Gender.MALE)), "爷爷", "老爷爷", "老大爷", "大爷", "老头", "老先生"),
    **words(content(cats=(Age.ELDERLY, Gender.FEMALE)), "奶奶", "老奶奶", "老太太", "外婆", "姥姥", "婆婆"),
    **words(content(cats=(Gender.MALE,)), "男", "男声", "男性", "男生", "男人", "男子", "男士"),
    **words(content(cats=(Gender.FEMALE,)), "女", "女声", "女性", "女生", "女人", "女子", "女士"),
}

_INTENSITIES = {
    **words(intensity(SLIGHT), "稍", "稍微", "稍稍", "略", "略微", "微微", "有点", "有点儿", "有一点", "有些"),
    **words(intensity(SLIGHT), "带点", "带一点", "些许", "一丝"),
    **words(intensity(SLIGHT, postfix=True), "一点", "一点儿", "一点点", "一些", "些", "点", "点儿"),
    **words(intensity(PLAIN), "比较", "挺", "较", "更", "更加", "再", "还算", "那么", "这么", "那样地"),
    **words(intensity(STRONG), "很", "非常", "特别", "十分", "格外", "相当", "太", "过于", "好", "真", "强烈"),
    **words(intensity(STRONG), "充满", "满满"),
    **words(intensity(STRONG, postfix=True), "得多", "多了", "很多", "许多"),
    **words(intensity(EXTREME), "超", "超级", "极", "极其", "极度", "无比", "极为", "特别特别", "非常非常"),
    **words(intensity(EXTREME, postfix=True), "极了", "得不得了", "到极点"),
}

_GRAMMAR: dict[str, LexEntry] = {
    **words(NEGATION, "不", "别", "不要", "不用", "不必", "没有", "没", "勿", "莫", "避免", "不能", "不可", "切勿"),
    **words(NEGATION, "不许", "千万别", "不需要"),
    **words(BOUNDARY, "和", "与", "并且", "而且", "但", "但是", "然后", "同时", "又", "还", "也", "并", "且"),
    **words(BOUNDARY, "以及", "及", "而", "或", "或者"),
    **words(STOP, "的", "地", "得", "说", "用", "声音", "嗓音", "嗓子", "音色", "语气", "口吻", "一个", "一种"),
    **words(STOP, "个", "种", "请", "以", "来", "着", "了", "地说", "读", "朗读", "念", "讲", "讲述", "说话"),
    **words(STOP, "讲话", "般", "一样", "像", "就像", "好像", "仿佛", "似的", "带着", "带", "带有", "有", "要"),
    **words(STOP, "是", "在", "把", "这段话", "这句话", "这段", "话", "声", "感觉", "风格", "方式", "吧", "呢"),
    **words(STOP, "啊", "哦", "一下", "出来", "表达", "显得", "富有", "饱含", "语句", "句子", "文本", "内容"),
    **words(STOP, "整体", "全程", "保持", "尽量", "听起来", "听上去", "起来", "你", "我", "他", "她", "它", "们"),
    **words(STOP, "那种", "这种", "那样", "这样", "给人", "让人", "一位", "位", "人", "为", "成", "去", "使用"),
    **words(STOP, "语音", "朗诵", "播报", "表现", "情绪", "感", "地讲", "地读", "地念", "音", "腔调", "声线", "调"),
    **words(STOP, "模仿", "扮演", "假装", "当作", "一边", "似地"),
}

ZH_LEXICON: Mapping[str, LexEntry] = build(
    _SPEED, _PITCH, _DIRECTIONS, _NOUNS, _RANGE, _VOLUME, _DESCRIPTORS, _EMOTIONS, _AGE_GENDER, _INTENSITIES, _GRAMMAR
)

ZH_MAX_WORD_CHARS = max(len(key) for key in ZH_LEXICON)
