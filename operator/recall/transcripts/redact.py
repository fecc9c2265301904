"""Redaction: what must not be kept, found in a transcript's words and replaced before anything
is written. Pure.

    found = detect(["Call", "five", "five", "five,", "one", "two", "three", "four."], {"phone"})
    segments = redact(segments, {"email", "phone"})     # "[PHONE]" in place of the words
    kept, held, piece = hold(segments)                   # what a chunk record may store now

What is found (`spec.transcript.redact.types`):
- `email`: written (`anna@example.com`) or spoken (`anna at example dot com`, `anna dot smith
  at example.co.uk`): a local part, "at" (or @), then a domain whose last label is a known
  top-level domain; and a word shaped as a domain (`mariratexample.org`), as a speech model
  often writes a spoken address run together: a web address is redacted too.
- `phone`: 7 to 15 digits in a row, written (`555-1234`, `(555) 123-4567`, `+44 20 7946 0958`)
  or spoken ("five five five, one two three four", "oh", "double five").
- `card`: 13 to 19 digits that pass the Luhn check.
- `iban`: a country code, two check digits and 10 to 30 letters or digits whose ISO 13616
  checksum (mod 97) holds, in one piece or in groups (`DE89 3704 0044 0532 0130 00`).
- `nationalId`: a US social security number (9 digits; not area 000, 666 or 900-999, not
  group 00, not serial 0000), a Spanish DNI (8 digits and the letter of their check, mod 23) or
  NIE (X, Y or Z, 7 digits and the letter), a Dutch BSN (9 digits passing the eleven test) and
  a French NIR (15 digits: 13 and their key, 97 - n mod 97).
- Person names are not redacted: no offline named-entity model ships in a package from its
  authors (what the index has are unofficial copies of spaCy's), and a list of names is not one.

Digits are read across words: a run of words that are digits (with `-`, `(`, `)`, `/`, `+`),
spoken digits, or letters and digits (`DE89`, `12345678Z`) is one number, and within a run the
longest stretch from each word on that is one of the asked types is taken. A comma does not end
a run ("five five five, one two three four"); any other word does.

A redacted span is one word: `[EMAIL]`, `[PHONE]`, `[CARD]`, `[IBAN]`, `[NATIONAL_ID]` (the
punctuation around it kept), from its first word's start to its last word's end, with the
lowest probability of its words, the first word's speaker and channel, and `redacted` its type.

The hold rule (chunk records, `hold`): a chunk record keeps back its last `HOLD_WORDS` words,
and before them every word that could be part of an entity (a digit, a spoken digit, "at",
"dot", "@", a word next to "at" or "dot"), up to `MOST_HELD`; they are redacted with the next
chunk's words and stored in its record, so an entity across a seam is found whole. The last
chunk holds nothing back.

Translations (`transcript.translate`): each segment's English text is redacted over all the
segments' translations together, as the words are (an entity across two is the first one's
tag). The hold rule keeps a translation with its segment's last piece, and holds back a whole
segment whose translation ends in what could be part of an entity, so no record stores a piece
of one.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from recall.media.types import Segment, Word
from recall.resources import RedactType
from recall.transcripts.subtitles import split

HOLD_WORDS = 8
MOST_HELD = 64
TAGS: dict[str, str] = {
    "email": "[EMAIL]",
    "phone": "[PHONE]",
    "card": "[CARD]",
    "iban": "[IBAN]",
    "nationalId": "[NATIONAL_ID]",
}
SPOKEN = {
    "zero": "0",
    "oh": "0",
    "o": "0",
    "nought": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
}
REPEAT = {"double": 2, "triple": 3}
_TLDS = "com org net edu gov mil int io co uk de fr es it nl eu info biz me us ca au ch at be se no"
TLDS = frozenset(f"{_TLDS} dk fi pl pt ie ru jp cn in br mx nz za ac".split())
# Words that end a spoken domain or local part: "look at the dot com era" is no address.
_NOT_NAMES = "the a an this that these those my your our his her its their me us"
NOT_NAMES = frozenset(_NOT_NAMES.split())
EDGE = "\"'“”‘’()[]{}<>.,;:!?…"
WRITTEN_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+")
DIGITS = re.compile(r"\+?[0-9A-Za-z()/-]*[0-9][0-9A-Za-z()/-]*")
WORDY = re.compile(r"[a-z0-9-]+")
IBAN = re.compile(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{10,30}")
DNI = re.compile(r"([0-9]{8})([A-Z])")
NIE = re.compile(r"([XYZ])([0-9]{7})([A-Z])")
DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


@dataclass(frozen=True)
class Found:
    """Words [first, end) are one entity of `kind`."""

    first: int
    end: int
    kind: RedactType


def core(text: str) -> str:
    """A word without spaces and the punctuation around it, lower case."""
    return text.strip().strip(EDGE).lower()


# --- checks ---------------------------------------------------------------------------------


def luhn(number: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(number)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban(text: str) -> bool:
    if not IBAN.fullmatch(text):
        return False
    moved = text[4:] + text[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def us_ssn(text: str) -> bool:
    if len(text) != 9 or not text.isdigit():
        return False
    area, group, serial = text[:3], text[3:5], text[5:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def nl_bsn(text: str) -> bool:
    if len(text) != 9 or not text.isdigit() or text == "000000000":
        return False
    total = sum(int(d) * (9 - i) for i, d in enumerate(text[:8])) - int(text[8])
    return total % 11 == 0


def es_dni(text: str) -> bool:
    if m := DNI.fullmatch(text):
        return DNI_LETTERS[int(m.group(1)) % 23] == m.group(2)
    if m := NIE.fullmatch(text):
        number = str("XYZ".index(m.group(1))) + m.group(2)
        return DNI_LETTERS[int(number) % 23] == m.group(3)
    return False


def fr_nir(text: str) -> bool:
    if len(text) != 15 or not text.isdigit() or text[0] not in "12":
        return False
    return 97 - int(text[:13]) % 97 == int(text[13:])


def national_id(text: str) -> bool:
    return us_ssn(text) or nl_bsn(text) or es_dni(text) or fr_nir(text)


def kind_of(number: str, types: Collection[str]) -> RedactType | None:
    """The first of the asked types `number` (letters upper case, no separators) is."""
    if "iban" in types and iban(number):
        return "iban"
    if "nationalId" in types and national_id(number):
        return "nationalId"
    if "card" in types and number.isdigit() and 13 <= len(number) <= 19 and luhn(number):
        return "card"
    if "phone" in types and number.isdigit() and 7 <= len(number) <= 15:
        return "phone"
    return None


# --- detection ------------------------------------------------------------------------------


def number_of(text: str) -> str | None:
    """The digits (and letters) a word stands for in a number, or None."""
    word = text.strip().strip(EDGE.replace("(", "").replace(")", ""))
    if word.lower() in SPOKEN:
        return SPOKEN[word.lower()]
    if "-" in word and all(p.lower() in SPOKEN for p in word.split("-")):
        return "".join(SPOKEN[p.lower()] for p in word.split("-"))  # "five-five-five"
    if DIGITS.fullmatch(word):
        return re.sub(r"[^0-9A-Za-z]", "", word).upper()
    return None


def _numbers(words: list[str], types: Collection[str]) -> list[Found]:
    parts: list[str | None] = [number_of(w) for w in words]
    for k, w in enumerate(words):  # "double five": the next digit twice
        times = REPEAT.get(core(w))
        if times and k + 1 < len(words) and (nxt := parts[k + 1]) and len(nxt) == 1:
            parts[k] = nxt * (times - 1)
    found: list[Found] = []
    k = 0
    while k < len(words):
        if parts[k] is None:
            k += 1
            continue
        end = k
        while end < len(words) and parts[end] is not None:
            end += 1
        i = k
        while i < end:  # the longest stretch from each word on
            for j in range(min(end, i + 40), i, -1):
                kind = kind_of("".join(p or "" for p in parts[i:j]), types)
                if kind is not None:
                    found.append(Found(i, j, kind))
                    i = j
                    break
            else:
                i += 1
        k = end
    return found


def _domain(cores: list[str], k: int) -> int | None:
    """Where a spoken or written domain starting at word `k` ends (exclusive), or None."""
    if k >= len(cores):
        return None
    word = cores[k]
    if "." in word:  # "example.com"
        labels = word.split(".")
        if all(WORDY.fullmatch(x) for x in labels) and labels[-1] in TLDS:
            return k + 1
        return None
    if not WORDY.fullmatch(word) or word in NOT_NAMES:
        return None
    end = None
    j = k + 1
    while j + 1 < len(cores) and cores[j] == "dot" and WORDY.fullmatch(cores[j + 1]):
        j += 2
        if cores[j - 1] in TLDS:
            end = j
    return end


def _emails(words: list[str]) -> list[Found]:
    cores = [core(w) for w in words]
    found: list[Found] = []
    for k, c in enumerate(cores):  # spoken: "anna at example dot com"
        if c in ("at", "@") and k > 0:
            end = _domain(cores, k + 1)
            local = cores[k - 1]
            if end is None or not WORDY.fullmatch(local) or local in NOT_NAMES:
                continue
            first = k - 1
            while first >= 2 and cores[first - 1] in ("dot", "underscore") and cores[first - 2]:
                first -= 2  # "anna dot smith at ..."
            found.append(Found(first, end, "email"))
    taken = {i for f in found for i in range(f.first, f.end)}
    for k, c in enumerate(cores):  # written, or run together into one word
        written = WRITTEN_EMAIL.fullmatch(c) or ("." in c and _domain(cores, k) == k + 1)
        if written and k not in taken:
            found.append(Found(k, k + 1, "email"))
    return sorted(found, key=lambda f: f.first)


def glued(words: list[str]) -> list[tuple[int, int, str]]:
    """`words` as written words: (first, end, text). Whisper writes a word's leading space, and
    a piece without one goes on the word before it ("example" + ".com", "555" + "-1234")."""
    spaced = any(w[:1].isspace() for w in words)
    out: list[tuple[int, int, str]] = []
    for k, w in enumerate(words):
        if out and spaced and w.strip() and not w[:1].isspace():
            first, _, text = out[-1]
            out[-1] = (first, k + 1, text + w)
        else:
            out.append((k, k + 1, w))
    return out


def detect(words: list[str], types: Collection[str]) -> list[Found]:
    """The entities of `types` in `words` (as the engine wrote them), in order, not
    overlapping (an e-mail address wins over a number inside it); an entity never splits a
    written word (see `glued`)."""
    pieces = glued(words)
    texts = [text for _, _, text in pieces]
    found = _emails(texts) if "email" in types else []
    taken = {i for f in found for i in range(f.first, f.end)}
    for f in _numbers(texts, types):
        if not taken.intersection(range(f.first, f.end)):
            found.append(f)
    return [
        Found(pieces[f.first][0], pieces[f.end - 1][1], f.kind)
        for f in sorted(found, key=lambda f: f.first)
    ]


# --- applying it to segments ----------------------------------------------------------------


def timed(segment: Segment) -> list[Word]:
    """`segment`'s words; for one without word timings, its text's words timed in proportion
    (with the segment's confidence)."""
    if any(w.text.strip() for w in segment.words or []):
        return list(segment.words or [])
    p = segment.confidence if segment.confidence is not None else 1.0
    return [
        Word(start=t.start, end=t.end, text=" " + t.text, probability=p) for t in split(segment)
    ]


def text_of_words(words: list[Word]) -> str:
    """A segment's text from its words (as Whisper writes them, each with its leading space)."""
    if all(w.text[:1].isspace() for w in words if w.text):
        return "".join(w.text for w in words)
    return " " + " ".join(w.text.strip() for w in words if w.text.strip())


def _tag(words: list[Word], kind: RedactType) -> Word:
    first, last = words[0].text, words[-1].text
    lead = first[: len(first) - len(first.lstrip())]
    before = first.strip()[: len(first.strip()) - len(first.strip().lstrip(EDGE))]
    after = last.strip()[len(last.strip().rstrip(EDGE)) :]
    return Word(
        start=words[0].start,
        end=max(w.end for w in words),
        text=f"{lead}{before}{TAGS[kind]}{after}",
        probability=min(w.probability for w in words),
        speaker=words[0].speaker,
        channel=words[0].channel,
        redacted=kind,
    )


def redact(segments: list[Segment], types: Collection[str]) -> list[Segment]:
    """`segments` with every entity of `types` replaced by its tag (see the module contract).
    An entity across segments goes into the first one's words; a segment keeps its times. The
    English translations (`transcript.translate`) are redacted the same way, over all segments'
    translations together: an entity across two translations is the first one's tag, and a
    translation left with nothing is None."""
    found = _redact_words(segments, types)
    translations = redact_texts([s.translation or "" for s in found], types)
    return [
        s if (s.translation or "") == t else s.model_copy(update={"translation": t or None})
        for s, t in zip(found, translations, strict=True)
    ]


def redact_text(text: str, types: Collection[str]) -> str:
    """`text` with every entity of `types` replaced by its tag, the punctuation around it kept."""
    (out,) = redact_texts([text], types)
    return out


def redact_texts(texts: list[str], types: Collection[str]) -> list[str]:
    """`texts` (one after the other, as a transcript's segments) with every entity of `types`
    replaced by its tag, the punctuation around it kept. An entity across texts is found: its
    tag goes into the first, the rest of it leaves the others (a text left with nothing is
    ""). A changed text keeps its leading space; its words are joined by one space."""
    flat = [(i, w) for i, text in enumerate(texts) for w in text.split()]
    found = detect([w for _, w in flat], types)
    if not found:
        return texts
    words: list[list[str]] = [[] for _ in texts]
    starts = {f.first: f for f in found}
    dropped = {k for f in found for k in range(f.first + 1, f.end)}
    for k, (i, w) in enumerate(flat):
        if (f := starts.get(k)) is not None:
            last = flat[f.end - 1][1]
            before = w[: len(w) - len(w.lstrip(EDGE))]
            w = before + TAGS[f.kind] + last[len(last.rstrip(EDGE)) :]
        if k not in dropped:
            words[i].append(w)
    changed = {flat[k][0] for f in found for k in range(f.first, f.end)}
    return [
        (text[: len(text) - len(text.lstrip())] + " ".join(words[i]) if words[i] else "")
        if i in changed
        else text
        for i, text in enumerate(texts)
    ]


def _redact_words(segments: list[Segment], types: Collection[str]) -> list[Segment]:
    words = [timed(s) for s in segments]
    flat = [(i, w) for i, ws in enumerate(words) for w in ws]
    found = detect([w.text for _, w in flat], types)
    if not found:
        return segments
    dropped: set[int] = set()
    tagged: dict[int, Word] = {}
    for f in found:
        tagged[f.first] = _tag([w for _, w in flat[f.first : f.end]], f.kind)
        dropped.update(range(f.first + 1, f.end))
    out_words: list[list[Word]] = [[] for _ in segments]
    for k, (i, w) in enumerate(flat):
        if k in dropped:
            continue
        out_words[i].append(tagged.get(k, w))
    changed = {flat[k][0] for f in found for k in range(f.first, f.end)}
    out: list[Segment] = []
    for i, s in enumerate(segments):
        if i not in changed:
            out.append(s)
            continue
        kept = out_words[i]
        out.append(
            s.model_copy(update={"words": kept, "text": text_of_words(kept) if kept else ""})
        )
    return out


def _could_be_part(cores: list[str], k: int) -> bool:
    """Whether word `k` could be part of an entity (for the hold rule)."""
    c = cores[k]
    if c in ("at", "dot", "@", "underscore", "double", "triple") or "@" in c:
        return True
    if "." in c and c.rsplit(".", 1)[-1] in TLDS:  # "example.com"
        return True
    if c in SPOKEN or number_of(c) is not None:
        return True
    near = cores[k - 1 : k] + cores[k + 1 : k + 2]
    return any(n in ("at", "dot", "@") for n in near)


def hold(segments: list[Segment]) -> tuple[list[Segment], list[Segment], bool]:
    """`segments` cut where the hold rule says: (what the record stores now, what is held
    back, whether the first held segment continues the last stored one). The translation of
    a segment cut in two goes with the piece held back."""
    words = [timed(s) for s in segments]
    flat = [(i, k) for i, ws in enumerate(words) for k in range(len(ws))]
    if not flat:
        return segments, [], False
    h = _held_from([words[i][k].text for i, k in flat])
    firsts = {i: n for n, (i, k) in reversed(list(enumerate(flat)))}  # a segment's first word
    while h > 0 and len(flat) - h < MOST_HELD:  # a translation that may go on: held too
        n = firsts[flat[h][0]]  # the last segment kept whole ends before word n
        if n == 0 or not _translation_goes_on(segments[flat[n - 1][0]]):
            break
        h = firsts[flat[n - 1][0]]
    if h == 0:
        return [], segments, False
    i, k = flat[h]
    kept = segments[:i]
    held = segments[i + 1 :]
    s = segments[i]
    if k == 0:
        return kept, [s, *held], False
    before, after = words[i][:k], words[i][k:]
    first = s.model_copy(
        update={
            "words": before,
            "text": text_of_words(before),
            "end": before[-1].end,
            "translation": None,
        }
    )
    second = s.model_copy(
        update={"words": after, "text": text_of_words(after), "start": after[0].start}
    )
    return [*kept, first], [second, *held], True


def _held_from(texts: list[str]) -> int:
    """Where the words held back begin among `texts` (a chunk's words, in order)."""
    cores = [core(t) for t in texts]
    h = max(0, len(texts) - HOLD_WORDS)
    while h > 0 and len(texts) - h < MOST_HELD and _could_be_part(cores, h - 1):
        h -= 1
    spaced = any(t[:1].isspace() for t in texts)
    while h > 0 and spaced and texts[h].strip() and not texts[h][:1].isspace():
        h -= 1  # a written word is never cut ("example" + ".com")
    return h


def _translation_goes_on(segment: Segment) -> bool:
    """Whether `segment`'s translation ends in what could be part of an entity."""
    cores = [core(w) for w in (segment.translation or "").split()]
    return bool(cores) and _could_be_part(cores, len(cores) - 1)
