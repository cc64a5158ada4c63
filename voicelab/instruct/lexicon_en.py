"""English words and phrases for style instructions (lower case; phrases are space-separated words).

Grades follow ``scales``: plain words take grade 2 ("slowly" → 0.75x), strong words 3 ("shout" → +9 dB).
Secondary hints (``hint``) are what a descriptor suggests ("warm" → slightly lower pitch); a plain
statement about the same attribute wins over them.
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
    **words(content(fx(S, -1)), "slow", "slowly", "slower", "slowed", "slow down", "slowed down", "slowing down"),
    **words(
        content(fx(S, -1, SLIGHT)),
        "leisurely",
        "unhurried",
        "deliberate",
        "deliberately",
        "measured",
        "take your time",
        "taking your time",
        "relaxed pace",
    ),
    **words(
        content(fx(S, -1, STRONG)), "slowest", "drawn-out", "drawn out", "drawling", "drawl", "sluggish", "sluggishly"
    ),
    **words(
        content(fx(S, +1)),
        "fast",
        "faster",
        "quick",
        "quickly",
        "quicker",
        "rapid",
        "rapidly",
        "speedy",
        "swift",
        "swiftly",
        "hurried",
        "hurriedly",
        "rushed",
        "rushing",
        "rush",
        "hasty",
        "hastily",
        "speed up",
        "in a hurry",
    ),
    **words(content(fx(S, +1, STRONG)), "fastest", "quickest"),
    **words(content(fx(S, +1, SLIGHT)), "brisk", "briskly", "snappy", "pacy"),
    **words(content(fx(S, 0)), "steady pace", "normal pace", "even pace"),
}

_PITCH = {
    **words(direction(+1, P), "high", "higher", "high up"),
    **words(direction(+1, P, STRONG), "highest"),
    **words(direction(-1, P), "low", "lower", "lowered"),
    **words(direction(-1, P, STRONG), "lowest"),
    **words(content(fx(P, -1, STRONG)), "deepest"),
    **words(content(fx(P, -1)), "deep", "deeper", "bass", "baritone", "low-pitched", "low pitched", "deep-voiced"),
    **words(content(fx(P, +1)), "high-pitched", "high pitched", "squeaky", "piping"),
    **words(content(fx(P, +1, STRONG)), "shrill", "falsetto"),
}

_DIRECTIONS = {
    **words(direction(+1), "raise", "raised", "raising", "increase", "increased", "boost", "boosted", "up"),
    **words(direction(-1), "reduce", "reduced", "decrease", "decreased", "drop", "down"),
    **words(direction(+1, fallback=Kind.STOP), "more"),
    **words(direction(-1, fallback=Kind.NEGATION), "less", "fewer"),
    **words(direction(0, fallback=Kind.STOP), "normal", "normally", "medium", "moderate", "average", "regular"),
    **words(direction(0, fallback=Kind.STOP), "natural", "naturally", "usual", "default"),
}

_NOUNS = {
    **words(noun(P), "pitch", "pitched", "tone", "key", "register", "pitch level"),
    **words(noun(V), "volume", "loudness", "sound level"),
    **words(noun(S), "speed", "pace", "rate", "tempo", "speaking rate", "speech rate", "speaking speed"),
    **words(
        noun(R),
        "intonation",
        "inflection",
        "inflections",
        "variation",
        "pitch variation",
        "pitch range",
        "range",
        "melody",
        "modulation",
        "prosody",
        "expression",
        "expressiveness",
    ),
}

_RANGE = {
    **words(
        content(fx(R, +1)),
        "expressive",
        "expressively",
        "lively",
        "animated",
        "dynamic",
        "varied",
        "melodic",
        "melodious",
        "musical",
        "sing-song",
        "singsong",
        "rising and falling",
        "rise and fall",
        "ups and downs",
        "emphatic",
        "vivid",
        "vividly",
    ),
    **words(content(fx(R, +1, STRONG)), "dramatic", "dramatically", "theatrical", "theatrically", "exaggerated"),
    **words(content(fx(R, -1)), "flat", "flatly", "deadpan", "level"),
    **words(content(fx(R, -1, STRONG)), "monotone", "monotonous", "monotonously", "robotic", "in a monotone"),
    **words(content(hint(R, -1)), "steady", "steadily", "even", "evenly", "smooth", "smoothly", "silky"),
}

_VOLUME = {
    **words(
        content(fx(V, +1)),
        "loud",
        "loudly",
        "louder",
        "speak up",
        "raise your voice",
        "raised voice",
        "turn it up",
        "powerful",
        "powerfully",
        "projecting",
        "forceful",
        "forcefully",
    ),
    **words(content(fx(V, +1, STRONG)), "loudest", "shout", "shouting", "shouted", "yell", "yelling", "yelled"),
    **words(content(fx(V, +1, STRONG)), "scream", "screaming", "screamed", "holler", "hollering"),
    **words(content(fx(V, +1, STRONG), hint(P, -1)), "booming", "thundering"),
    **words(content(hint(V, +1)), "strong", "strongly", "full"),
    **words(QUALITY, "clear", "clearly", "crisp", "crisply", "articulate", "articulately", "enunciated"),
    **words(
        content(fx(V, -1)),
        "soft",
        "softly",
        "softer",
        "quiet",
        "quietly",
        "quieter",
        "hushed",
        "faint",
        "faintly",
        "muffled",
        "under your breath",
        "lower your voice",
        "your voice down",
        "keep it down",
        "turn it down",
    ),
    **words(content(fx(V, -1, STRONG)), "softest", "quietest"),
    **words(content(fx(V, -1), hint(S, -1)), "mumble", "mumbling", "mumbled", "murmur", "murmuring", "murmured"),
    **words(content(hint(V, -1)), "weak", "weakly", "feeble", "frail"),
}

_DESCRIPTORS = {
    **words(content(hint(P, -1)), "warm", "warmly", "warmer", "warmth", "magnetic", "rich", "resonant", "velvety"),
    **words(QUALITY, "husky", "raspy", "gravelly", "hoarse", "rough", "croaky", "gruff"),
    **words(content(hint(P, -1), hint(V, -1)), "mellow", "intimate", "intimately", "cozy", "cosy"),
    **words(content(hint(P, +1)), "bright", "brighter", "brightly"),
    **words(content(hint(P, +1), hint(V, -1)), "light", "lightly"),
    **words(content(hint(V, -1), hint_cats=(Emotion.WHISPER,)), "breathy", "breathily", "airy-breathy"),
    **words(content(hint(V, -1), hint(R, -1)), "airy", "ethereal", "floaty", "wispy"),
    **words(content(hint(V, -1), hint(R, -1), hint_cats=(Emotion.CALM,)), "gentle", "gently", "tender", "tenderly"),
    **words(content(hint(P, +1), hint(R, +1), hint_cats=(Emotion.HAPPY,)), "sweet", "sweetly", "cute", "adorable"),
    **words(QUALITY, "professional", "professionally", "businesslike"),
    **words(content(hint(R, -1), hint_cats=(Emotion.NEUTRAL,)), "formal", "formally", "news anchor", "newsreader"),
    **words(content(hint(R, -1), hint_cats=(Emotion.NEUTRAL,)), "announcer", "broadcaster"),
    **words(content(hint(V, +1), hint(P, -1)), "authoritative", "commanding", "confident", "confidently"),
    **words(content(hint(V, +1), hint(P, -1)), "assertive", "firm", "firmly", "authority", "with authority"),
    **words(content(hint(R, +1), hint_cats=(Emotion.HAPPY,)), "friendly", "welcoming", "warm-hearted", "kindhearted"),
    **words(content(hint(R, -1, PLAIN), hint(S, -1), hint_cats=(Emotion.NEUTRAL,)), "bored", "boring", "uninterested"),
    **words(content(hint(R, -1, PLAIN), hint(S, -1), hint_cats=(Emotion.NEUTRAL,)), "indifferent", "apathetic"),
    **words(content(hint(V, -1), hint(S, -1), hint(P, -1)), "mysterious", "mysteriously", "spooky", "eerie", "creepy"),
    **words(content(hint(V, -1), hint(S, -1), hint(P, -1)), "ominous", "ominously", "ghost story", "suspenseful"),
    **words(content(hint(R, +1, PLAIN), hint(S, -1)), "sarcastic", "sarcastically", "mocking", "ironic", "ironically"),
    **words(content(hint(S, -1), hint(V, -1), hint_cats=(Emotion.CALM,)), "bedtime story", "lullaby"),
    **words(content(hint(R, +1)), "story", "stories", "tale", "fairy tale", "fairytale"),
    **words(content(hint(S, +1), hint(V, +1), hint(R, +1)), "commentator", "sports commentator", "commentary"),
    **words(content(hint(S, +1), hint(V, +1), hint(R, +1)), "energetic", "energetically", "vibrant", "spirited"),
    **words(content(hint(S, -1), hint(V, -1), hint(R, -1)), "sleepy", "drowsy", "tired", "weary", "wearily"),
    **words(content(hint(R, +1, PLAIN)), "storyteller", "storytelling"),
    **words(content(hint(R, -1), hint(V, +1), hint_cats=(Emotion.ANGRY,)), "stern", "sternly", "harsh", "harshly"),
}

_EMOTIONS = {
    **words(
        emotion(Emotion.HAPPY),
        *("happy", "happily", "cheerful", "cheerfully", "joyful", "joyfully", "joyous", "glad", "gladly"),
        *(
            "delighted",
            "merry",
            "elated",
            "upbeat",
            "bubbly",
            "jolly",
            "smiling",
            "with a smile",
            "joy",
            "happiness",
            "cheer",
        ),
    ),
    **words(emotion(Emotion.HAPPY, hint(R, +1)), "playful", "playfully"),
    **words(
        emotion(Emotion.HAPPY, hint(S, +1), hint(R, +1, PLAIN), hint(V, +1)),
        *("excited", "excitedly", "exciting", "thrilled", "enthusiastic", "enthusiastically"),
        *("exuberant", "ecstatic", "excitement", "enthusiasm"),
    ),
    **words(
        emotion(Emotion.SAD),
        *("sad", "sadly", "sorrowful", "sorrowfully", "melancholy", "melancholic", "gloomy", "mournful"),
        *("mournfully", "unhappy", "depressed", "somber", "sombre", "tearful", "heartbroken", "grieving"),
        *("dejected", "downcast", "sadness", "sorrow", "melancholia"),
    ),
    **words(
        emotion(Emotion.ANGRY),
        *("angry", "angrily", "mad", "irritated", "annoyed", "irate", "indignant", "outraged", "in anger", "anger"),
    ),
    **words(
        emotion(Emotion.ANGRY, hint(V, +1)),
        *("furious", "furiously", "enraged", "livid", "raging"),
    ),
    **words(
        emotion(Emotion.SURPRISED),
        *("surprised", "surprise", "astonished", "amazed", "shocked", "startled", "stunned", "astounded"),
        *("in surprise", "in disbelief"),
    ),
    **words(
        emotion(Emotion.FEARFUL),
        *("fearful", "fearfully", "afraid", "scared", "frightened", "nervous", "nervously", "anxious"),
        *("anxiously", "worried", "timid", "timidly", "uneasy", "trembling", "shaky", "panicked", "in fear", "fear"),
    ),
    **words(emotion(Emotion.FEARFUL, hint(S, +1)), "terrified", "petrified"),
    **words(
        emotion(Emotion.DISGUSTED),
        *("disgusted", "disgust", "repulsed", "revolted", "grossed out", "contemptuous", "contemptuously"),
        *("disdainful", "disdainfully", "scornful", "scornfully", "sneering", "in disgust"),
    ),
    **words(
        emotion(Emotion.CALM),
        *("calm", "calmly", "calmer", "peaceful", "peacefully", "serene", "serenely", "relaxed", "relaxing"),
        *("soothing", "soothingly", "tranquil", "composed", "placid", "meditative", "calm down", "patient"),
        *("patiently", "unruffled"),
    ),
    **words(
        emotion(Emotion.WHISPER),
        *("whisper", "whispers", "whispering", "whispered", "whispery", "in a whisper"),
    ),
    **words(emotion(Emotion.WHISPER, hint(V, -1), hint(S, -1)), "asmr"),
    **words(
        emotion(Emotion.NEUTRAL, hint(R, -1)),
        *("neutral", "neutrally", "plain", "plainly", "emotionless", "unemotional", "matter-of-fact"),
        *("matter of fact", "detached", "impassive", "no emotion", "without emotion"),
    ),
}

_AGE_GENDER = {
    **words(content(cats=(Age.CHILD,)), "child", "children", "kid", "kids", "childlike", "child-like", "toddler"),
    **words(content(cats=(Age.CHILD, Gender.MALE)), "little boy", "a little boy", "schoolboy", "young boy"),
    **words(content(cats=(Age.CHILD, Gender.FEMALE)), "little girl", "a little girl", "schoolgirl", "young girl"),
    **words(content(cats=(Gender.MALE,), hint_cats=(Age.YOUNG_ADULT,)), "boy", "boys", "boyish"),
    **words(content(cats=(Gender.FEMALE,), hint_cats=(Age.YOUNG_ADULT,)), "girl", "girls", "girlish"),
    **words(
        content(cats=(Age.YOUNG_ADULT,)),
        *("young", "youthful", "younger", "teen", "teens", "teenage", "teenager", "teenaged", "adolescent"),
        "young adult",
    ),
    **words(content(cats=(Age.MIDDLE_AGED,)), "middle-aged", "middle aged", "middle age", "mature"),
    **words(content(cats=(Age.ELDERLY,)), "old", "older", "elderly", "aged", "senior", "aging", "ageing", "elder"),
    **words(content(cats=(Age.ELDERLY, Gender.MALE)), "old man", "grandpa", "grandfather", "granddad", "grandad"),
    **words(content(cats=(Age.ELDERLY, Gender.FEMALE)), "old woman", "old lady", "grandma", "grandmother", "granny"),
    **words(content(cats=(Gender.MALE,)), "man", "men", "male", "masculine", "gentleman", "guy"),
    **words(content(cats=(Gender.FEMALE,)), "woman", "women", "female", "feminine", "lady"),
}

_INTENSITIES = {
    **words(intensity(SLIGHT), "slightly", "a bit", "a little", "a little bit", "a tiny bit", "little"),
    **words(intensity(SLIGHT), "a tad", "a touch", "somewhat", "mildly", "marginally", "kind of", "sort of"),
    **words(intensity(SLIGHT), "just a bit", "just a little", "a little more", "a bit more", "a hint of", "a touch of"),
    **words(intensity(PLAIN), "quite", "rather", "fairly", "pretty", "moderately", "reasonably"),
    **words(intensity(STRONG), "very", "really", "so", "much", "a lot", "lots", "too", "highly", "considerably"),
    **words(intensity(STRONG), "significantly", "truly", "especially", "particularly", "noticeably", "much more"),
    **words(intensity(EXTREME), "extremely", "incredibly", "exceptionally", "hugely", "enormously", "ultra"),
    **words(intensity(EXTREME), "insanely", "utterly", "super", "as possible"),
}

_GRAMMAR: dict[str, LexEntry] = {
    **words(NEGATION, "not", "don't", "dont", "do not", "no", "never", "without", "avoid", "isn't", "shouldn't"),
    **words(NEGATION, "nor", "stop", "neither", "instead of"),
    **words(BOUNDARY, "and", "but", "then", "plus", "yet", "although", "though", "while", "also", "or"),
    **words(BOUNDARY, "as well as"),
    **words(STOP, "a", "an", "the", "in", "into", "with", "voice", "voices", "voiced", "speak", "speaks"),
    **words(STOP, "speaking", "spoken", "speech", "say", "says", "said", "saying", "talk", "talks", "talking"),
    **words(STOP, "read", "reads", "reading", "narrate", "narrates", "narrating", "narration", "narrator"),
    **words(STOP, "please", "like", "as", "sound", "sounds", "sounding", "of", "to", "it", "its", "it's"),
    **words(STOP, "this", "that", "these", "those", "is", "are", "be", "being", "been", "was", "were", "your"),
    **words(STOP, "you", "my", "me", "i", "we", "us", "our", "their", "they", "he", "she", "his", "her", "at"),
    **words(STOP, "on", "for", "by", "from", "keep", "keeps", "keeping", "make", "makes", "making", "use"),
    **words(STOP, "using", "way", "manner", "style", "delivery", "deliver", "delivered", "should", "can"),
    **words(STOP, "could", "would", "will", "just", "only", "one", "someone", "somebody", "person", "speaker"),
    **words(STOP, "feel", "feeling", "all", "text", "words", "line", "lines", "sentence", "sentences", "here"),
    **words(STOP, "there", "overall", "throughout", "try", "trying", "than", "quality", "timbre", "mood"),
    **words(STOP, "tone of voice", "kind", "sort", "type", "some", "bit", "lot", "of voice", "character", "turn"),
    **words(STOP, "want", "wanted", "need", "needs", "prefer", "let", "let's", "give", "get", "go", "do", "have"),
    **words(STOP, "tell", "tells", "telling", "told", "imitate", "imitating", "mimic", "pretend", "act", "acting"),
}

EN_LEXICON: Mapping[str, LexEntry] = build(
    _SPEED, _PITCH, _DIRECTIONS, _NOUNS, _RANGE, _VOLUME, _DESCRIPTORS, _EMOTIONS, _AGE_GENDER, _INTENSITIES, _GRAMMAR
)

EN_MAX_PHRASE_WORDS = max(len(key.split()) for key in EN_LEXICON)
