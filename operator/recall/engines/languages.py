"""The languages Whisper knows, by ISO 639-1 code and by name, the code of a language as a
server reports it, and the language decisions of a multilingual model. Pure.

Language decisions (`spec.language` auto or empty, `spec.languageOptions`, `spec.languageScope`):
- `choose(probabilities, options)` picks the most likely language among `options` (any when
  none) with the model's own probability for it (over all its languages, not renormalized). A
  pick under `LOW_PROBABILITY` is still used; the job records the condition LanguageUncertain.
- Segment scope: `decision_spans(speech)` groups a chunk's speech into the spans a language is
  decided for: a span ends at a pause of `SWITCH_PAUSE_SECONDS` once it holds
  `SEGMENT_SPEECH_SECONDS` of speech, or before it would pass 30 s; a short last span joins the
  one before. So no language is decided on less than 3 s of speech (unless the chunk has no
  more), and a switch is found at the first pause after 3 s of the language before. Pauses and
  seconds of speech are measured on the VAD's stretches without their padding (padded, a pause
  under 0.8 s would vanish and a longer one lose 0.8 s); the spans reach to the padded edges.
- `majority(spans)`: the language with the most speech, a file's language under segment scope.

`multilingual_asks` lists what only a multilingual model does (auto, options, segment scope,
translation). `english_only(label, asks)` is the permanent failure of such a job on an
English-only model (`LanguageDetectionUnsupported`, or `TranslationUnsupported` when only
translation is asked): raised by the worker when it loads the model, written by the operator
when every live worker of the job's pool registered one (`recall.operator.dispatch`).

`language_code` reads the language a `verbose_json` answer reports, a name ("english", OpenAI)
or a code ("en", faster-whisper servers), as a code; None when it is neither (recording nothing
beats recording a guess).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from recall.resources import AUTO, LOW_LANGUAGE_PROBABILITY
from recall.resources.errors import JobFailure

# Whisper's tokenizer's LANGUAGES: ISO 639-1 code (else three letters) -> English name.
WHISPER_LANGUAGES: dict[str, str] = {
    "en": "english",
    "zh": "chinese",
    "de": "german",
    "es": "spanish",
    "ru": "russian",
    "ko": "korean",
    "fr": "french",
    "ja": "japanese",
    "pt": "portuguese",
    "tr": "turkish",
    "pl": "polish",
    "ca": "catalan",
    "nl": "dutch",
    "ar": "arabic",
    "sv": "swedish",
    "it": "italian",
    "id": "indonesian",
    "hi": "hindi",
    "fi": "finnish",
    "vi": "vietnamese",
    "he": "hebrew",
    "uk": "ukrainian",
    "el": "greek",
    "ms": "malay",
    "cs": "czech",
    "ro": "romanian",
    "da": "danish",
    "hu": "hungarian",
    "ta": "tamil",
    "no": "norwegian",
    "th": "thai",
    "ur": "urdu",
    "hr": "croatian",
    "bg": "bulgarian",
    "lt": "lithuanian",
    "la": "latin",
    "mi": "maori",
    "ml": "malayalam",
    "cy": "welsh",
    "sk": "slovak",
    "te": "telugu",
    "fa": "persian",
    "lv": "latvian",
    "bn": "bengali",
    "sr": "serbian",
    "az": "azerbaijani",
    "sl": "slovenian",
    "kn": "kannada",
    "et": "estonian",
    "mk": "macedonian",
    "br": "breton",
    "eu": "basque",
    "is": "icelandic",
    "hy": "armenian",
    "ne": "nepali",
    "mn": "mongolian",
    "bs": "bosnian",
    "kk": "kazakh",
    "sq": "albanian",
    "sw": "swahili",
    "gl": "galician",
    "mr": "marathi",
    "pa": "punjabi",
    "si": "sinhala",
    "km": "khmer",
    "sn": "shona",
    "yo": "yoruba",
    "so": "somali",
    "af": "afrikaans",
    "oc": "occitan",
    "ka": "georgian",
    "be": "belarusian",
    "tg": "tajik",
    "sd": "sindhi",
    "gu": "gujarati",
    "am": "amharic",
    "yi": "yiddish",
    "lo": "lao",
    "uz": "uzbek",
    "fo": "faroese",
    "ht": "haitian creole",
    "ps": "pashto",
    "tk": "turkmen",
    "nn": "nynorsk",
    "mt": "maltese",
    "sa": "sanskrit",
    "lb": "luxembourgish",
    "my": "myanmar",
    "bo": "tibetan",
    "tl": "tagalog",
    "mg": "malagasy",
    "as": "assamese",
    "tt": "tatar",
    "haw": "hawaiian",
    "ln": "lingala",
    "ha": "hausa",
    "ba": "bashkir",
    "jw": "javanese",
    "su": "sundanese",
    "yue": "cantonese",
}
# Other names Whisper accepts for some of them.
ALIASES = {
    "burmese": "my",
    "valencian": "ca",
    "flemish": "nl",
    "haitian": "ht",
    "letzeburgesch": "lb",
    "pushto": "ps",
    "panjabi": "pa",
    "moldavian": "ro",
    "moldovan": "ro",
    "sinhalese": "si",
    "castilian": "es",
    "mandarin": "zh",
}
BY_NAME = {name: code for code, name in WHISPER_LANGUAGES.items()} | ALIASES


def language_code(reported: Any) -> str | None:
    """The code of a language as a server reported it: a code ("en", "en-US"), or a name
    ("english", "English"); None for anything else (nothing reported, an unknown name)."""
    if not isinstance(reported, str):
        return None
    value = reported.strip().replace("_", "-").casefold()
    if value in WHISPER_LANGUAGES:
        return value
    primary = value.split("-", 1)[0]
    if "-" in value and primary in WHISPER_LANGUAGES:
        return primary
    return BY_NAME.get(value)


LOW_PROBABILITY = LOW_LANGUAGE_PROBABILITY  # a pick less likely is flagged LanguageUncertain
SEGMENT_SPEECH_SECONDS = 3.0  # the least speech one segment-scope language decision is made on
SWITCH_PAUSE_SECONDS = 0.5  # segment scope: a language may change at pauses this long
DECISION_SECONDS = 30.0  # a decision span at most (Whisper's window)


def choose(
    probabilities: Iterable[tuple[str, float]], options: Sequence[str] | None
) -> tuple[str, float]:
    """The most likely of `options` (any when none) and the model's probability for it, from
    (code, probability) pairs as faster-whisper's `detect_language` lists them."""
    allowed = set(options or ())
    listed = [(code, float(p)) for code, p in probabilities if not allowed or code in allowed]
    if not listed:  # options the model does not list: the first, with nothing for it
        return (sorted(allowed)[0] if allowed else "en"), 0.0
    return max(listed, key=lambda pair: pair[1])


def decision_spans(
    speech: Sequence[tuple[int, int]], rate: int, padded: Sequence[tuple[int, int]] | None = None
) -> list[tuple[int, int]]:
    """`speech` (sample ranges, in order, without padding: its pauses and seconds are the
    speech's own) grouped into the spans one language is decided for (see the module
    contract): each from its first stretch's start to its last's end in `padded` (the same
    stretches as decoded, each widened; `speech` itself when None), at most 30 s of those."""
    edges = padded if padded is not None else speech
    groups: list[tuple[int, int]] = []  # each span's first and last stretch
    said: list[float] = []  # seconds of speech in each span

    def seconds(first: int, last: int) -> float:
        return (edges[last][1] - edges[first][0]) / rate

    for k, (first, end) in enumerate(speech):
        if groups:
            gap = (first - speech[groups[-1][1]][1]) / rate
            fits = seconds(groups[-1][0], k) <= DECISION_SECONDS
            if fits and (said[-1] < SEGMENT_SPEECH_SECONDS or gap < SWITCH_PAUSE_SECONDS):
                groups[-1] = (groups[-1][0], k)
                said[-1] += (end - first) / rate
                continue
        groups.append((k, k))
        said.append((end - first) / rate)
    short = len(groups) > 1 and said[-1] < SEGMENT_SPEECH_SECONDS
    if short and seconds(groups[-2][0], groups[-1][1]) <= DECISION_SECONDS:
        groups[-2:] = [(groups[-2][0], groups[-1][1])]
    return [(edges[a][0], edges[b][1]) for a, b in groups]


def majority(spans: Iterable[tuple[str | None, float]]) -> str | None:
    """The language of the most seconds among (language, seconds) pairs; None without any."""
    totals: dict[str, float] = {}
    for language, seconds in spans:
        if language:
            totals[language] = totals.get(language, 0.0) + max(0.0, seconds)
    return max(totals, key=lambda k: totals[k]) if totals else None


TRANSLATE = "spec.transcript.translate"
MULTILINGUAL = (
    "name a multilingual model (base: the recall[multilingual] extra, the multilingual image)"
)


def multilingual_asks(
    language: str | None, options: Sequence[str], scope: str | None, translate: str | None
) -> tuple[str, ...]:
    """The fields of a job's spec that ask what only a multilingual model does (empty: none)."""
    asks = (
        f"spec.language {language!r}" if language == AUTO else "",
        "spec.languageOptions" if options else "",
        "spec.languageScope segment" if scope == "segment" else "",
        TRANSLATE if translate == "en" else "",
    )
    return tuple(a for a in asks if a)


def english_only(label: str, asks: Sequence[str]) -> JobFailure | None:
    """The permanent failure of a job asking `asks` on the English-only model `label`."""
    detect = [a for a in asks if a != TRANSLATE]
    if detect:
        return JobFailure(
            "LanguageDetectionUnsupported",
            f"model {label} is English-only: it cannot detect the language "
            f"({', '.join(detect)}); set spec.language, or {MULTILINGUAL}",
            permanent=True,
        )
    if asks:
        return JobFailure(
            "TranslationUnsupported",
            f"model {label} is English-only: it cannot translate into English ({TRANSLATE}); "
            f"{MULTILINGUAL}",
            permanent=True,
        )
    return None
