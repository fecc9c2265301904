"""What redaction finds in a transcript's words: e-mail addresses, phone, card and IBAN
numbers and national identity numbers, written or spoken. Pure (`recall.transcripts.redact`
replaces what is found).

What is found (`spec.transcript.redact.types`):
- `email`: written (`anna@example.com`) or spoken (`anna dot smith at example dot com`): a
  local part, "at" or "@", then a domain whose last label is a known top-level domain; also a
  word shaped as a domain (`mariratexample.org`), as a speech model writes a spoken address
  run together, so a web address is redacted too. Spoken addresses are read in English.
- `phone`: 7 to 15 digits in a row, written (`(555) 123-4567`, `555.123.4567`, `+44 20 7946
  0958`) or spoken ("five five five, one two three four", "oh", "double five").
- `card`: 13 to 19 digits that pass the Luhn check.
- `iban`: a country code, two check digits and 10 to 30 letters or digits passing the ISO 13616
  check (mod 97), whole or in groups (`GB82 WEST 1234 …`: a group of four capital letters goes
  on a number begun by a country code and check digits).
- `nationalId`: a US social security number, a Spanish DNI or NIE, a Dutch BSN or a French NIR,
  each passing its own validity check (`us_ssn`, `es_dni`, `nl_bsn`, `fr_nir`).
- Person names are not found: no offline named-entity model ships in a package from its
  authors (what the index has are unofficial copies of spaCy's), and a list of names is not one.

Digits are read across words: a run of digit words (with `-`, `(`, `)`, `/`, `+` or dots
between groups), spoken digits, lone dashes, or letters and digits (`DE89`, `12345678Z`) is one
number; within a run the longest stretch from each word on that is an asked type is taken. A
comma does not end a run; any other word does.

In Chinese and Japanese Whisper writes no spaces: a word is a token, and the pieces of another
script written together (`anna` `@` `ex` `am` `ple` `.` `com`, `090` `-` `1234`) are one word,
never joined to the characters around them (`glued`).

Spoken digits are read in English, German, Spanish, French, Italian, Portuguese and Dutch
(`DIGIT_WORDS`, `OTHER_DIGITS`, `REPEAT`), whatever the file's language. Numbers said as
numbers ("douze, trente-quatre", "siebzehn", "five hundred") are not read as digits.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection
from dataclasses import dataclass

from recall.resources import RedactType
from recall.transcripts.words import UNSPACED, within

DIGIT_WORDS: dict[str, str] = {  # the words for 0 to 9, in order, as a speech model writes them
    "en": "zero one two three four five six seven eight nine",
    "de": "null eins zwei drei vier fünf sechs sieben acht neun",
    "es": "cero uno dos tres cuatro cinco seis siete ocho nueve",
    "fr": "zéro un deux trois quatre cinq six sept huit neuf",
    "it": "zero uno due tre quattro cinque sei sette otto nove",
    "pt": "zero um dois três quatro cinco seis sete oito nove",
    "nl": "nul een twee drie vier vijf zes zeven acht negen",
}
OTHER_DIGITS = {"oh": "0", "o": "0", "nought": "0", "zwo": "2", "één": "1", "meia": "6"}
SPOKEN: dict[str, str] = {
    **{w: str(d) for words in DIGIT_WORDS.values() for d, w in enumerate(words.split())},
    **OTHER_DIGITS,
}
REPEAT = {"double": 2, "triple": 3, "doble": 2, "doppio": 2, "dubbel": 2}
_TLDS = "com org net edu gov mil int io co uk de fr es it nl eu info biz me us ca au ch at be se no"
TLDS = frozenset(f"{_TLDS} dk fi pl pt ie ru jp cn in br mx nz za ac".split())
# Words that end a spoken domain or local part: "look at the dot com era" is no address.
_NOT_NAMES = "the a an this that these those my your our his her its their me us"
NOT_NAMES = frozenset(_NOT_NAMES.split())
EDGE = "\"'“”‘’()[]{}<>.,;:!?…。、，．！？：；（）「」『』【】"
WRITTEN_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+")
DIGITS = re.compile(r"\+?[0-9A-Za-z()/-]*[0-9][0-9A-Za-z()/-]*")
WORDY = re.compile(r"[a-z0-9-]+")
LOCAL = re.compile(r"[a-z0-9_+-]+(\.[a-z0-9_+-]+)*")  # a local part: anna.smith, a_b+tag
# Digits in groups of 2 to 4 between dots, as phone numbers are written (555.123.4567,
# 01.23.45.67.89); not a date (12.05.2023), an amount (1.250.000) or an IPv4 address.
DOTTED = re.compile(r"\+?[0-9]{2,4}(\.[0-9]{2,4}){2,}")
DATE = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}\.[0-9]{2,4}")
SEPARATORS = frozenset("-–—/")  # a word that only joins the digits around it
IBAN = re.compile(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{10,30}")
IBAN_START = re.compile(r"[A-Za-z]{2}[0-9]{2}")  # a country code and check digits
BANK = re.compile(r"[A-Z]{4}")  # a group of letters only in an IBAN (GB82 WEST 1234 …)
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
    if DIGITS.fullmatch(word) or (dotted_phone(word)):
        return re.sub(r"[^0-9A-Za-z]", "", word).upper()
    if word and all(ch in SEPARATORS for ch in word):
        return ""  # "five five five - one two three four": the run goes on
    return None


def dotted_phone(word: str) -> bool:
    """Whether `word` is digits between dots as a phone number is written (`DOTTED`): not a
    date, nor four groups of at most 255 (an IPv4 address)."""
    if not DOTTED.fullmatch(word) or DATE.fullmatch(word):
        return False
    groups = word.lstrip("+").split(".")
    return not (len(groups) == 4 and all(int(g) <= 255 for g in groups))


def bank_group(word: str, before: list[str | None]) -> bool:
    """Whether `word` is a group of letters of an IBAN: `BANK`, in a run (`before`: the parts of
    the words before it, `number_of`) that has a country code and check digits."""
    run = list(itertools.takewhile(lambda p: p is not None, reversed(before)))
    return bool(BANK.fullmatch(word.strip().strip(EDGE))) and any(
        IBAN_START.match(p or "") for p in run
    )


def _numbers(words: list[str], types: Collection[str]) -> list[Found]:
    parts: list[str | None] = [number_of(w) for w in words]
    for k, part in enumerate(parts):  # a dash joins spoken digits only ("five - one")
        if part == "" and not (
            0 < k < len(words) - 1 and core(words[k - 1]) in SPOKEN and core(words[k + 1]) in SPOKEN
        ):
            parts[k] = None
        elif part is None and "iban" in types and bank_group(words[k], parts[:k]):
            parts[k] = words[k].strip().strip(EDGE)
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
            if not parts[i]:  # a separator starts nothing
                i += 1
                continue
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
            if end is None or not LOCAL.fullmatch(local) or local in NOT_NAMES:
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
    a piece without one goes on the word before it ("example" + ".com", "555" + "-1234"). In a
    script written without spaces (no word has one: Chinese, Japanese) each character's token
    stays a word and the pieces of another script between them are one ("anna" + "@" + "ex"
    ...). A piece never goes on a word of the other kind ("は" + "anna", "7" + "。")."""
    spaced = any(w[:1].isspace() for w in words)
    unspaced = not spaced and any(within(ch, UNSPACED) for w in words for ch in w)
    out: list[tuple[int, int, str]] = []
    for k, w in enumerate(words):
        before, piece = (out[-1][2].strip() if out else ""), w.strip()
        crosses = bool(before) and bool(piece) and unspaced_at(before, -1) != unspaced_at(piece, 0)
        goes_on = spaced or (unspaced and bool(piece) and not unspaced_at(piece, 0))
        if out and goes_on and piece and not w[:1].isspace() and not crosses:
            first, _, text = out[-1]
            out[-1] = (first, k + 1, text + w)
        else:
            out.append((k, k + 1, w))
    return out


def unspaced_at(text: str, k: int) -> bool:
    """Whether character `k` of `text` is of a script written without spaces (`UNSPACED`)."""
    return within(text[k], UNSPACED)


def detect(words: list[str], types: Collection[str]) -> list[Found]:
    """The entities of `types` in `words` (as the engine wrote them), in order, not overlapping
    (an e-mail address wins over a number inside it), never splitting a written word (`glued`)."""
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


def could_be_part(cores: list[str], k: int) -> bool:
    """Whether word `k` could be part of an entity (for the hold rule)."""
    c = cores[k]
    if c in ("at", "dot", "@", "underscore") or c in REPEAT or "@" in c:
        return True
    if "." in c and c.rsplit(".", 1)[-1] in TLDS:  # "example.com"
        return True
    if c in SPOKEN or number_of(c) is not None:
        return True
    if bank_group(c.upper(), [number_of(x) for x in cores[max(0, k - 9) : k]]):
        return True  # "gb82 west": an IBAN's bank code
    near = cores[k - 1 : k] + cores[k + 1 : k + 2]
    return any(n in ("at", "dot", "@") for n in near)
