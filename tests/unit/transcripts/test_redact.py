"""What redaction finds (written and spoken forms, with their checks), how a span becomes one
word, and the hold rule that keeps an entity across a chunk seam whole."""

from __future__ import annotations

import pytest

from recall.media.types import Segment, Word
from recall.resources import REDACT_TYPES
from recall.transcripts.entities import detect
from recall.transcripts.formats import render
from recall.transcripts.records import Transcript
from recall.transcripts.redact import HOLD_WORDS, hold, redact

ALL: set[str] = set(REDACT_TYPES)


def found(text: str, types: set[str] = ALL) -> list[tuple[str, str]]:
    words = text.split()
    return [(" ".join(words[f.first : f.end]), f.kind) for f in detect(words, types)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to anna@example.com please", [("anna@example.com", "email")]),
        ("it is anna at example dot com.", [("anna at example dot com.", "email")]),
        ("Anna at example.com, thanks", [("Anna at example.com,", "email")]),
        (
            "mail anna dot smith at mail dot co dot uk",
            [("anna dot smith at mail dot co dot uk", "email")],
        ),
        ("look at the dot com era", []),
        ("my email is mariratexample.org thanks", [("mariratexample.org", "email")]),
        ("meet me at noon", []),
        (
            "call five five five, one two three four now",
            [("five five five, one two three four", "phone")],
        ),
        ("call 555-1234 now", [("555-1234", "phone")]),
        ("on (555) 123-4567.", [("(555) 123-4567.", "phone")]),
        (
            "dial double five five one two three four",
            [("double five five one two three four", "phone")],
        ),
        ("card 4111 1111 1111 1111 ok", [("4111 1111 1111 1111", "card")]),
        ("IBAN DE89 3704 0044 0532 0130 00 ok", [("DE89 3704 0044 0532 0130 00", "iban")]),
        ("my SSN is 123-45-6789.", [("123-45-6789.", "nationalId")]),
        ("DNI 12345678Z", [("12345678Z", "nationalId")]),
        ("NIE X1234567L", [("X1234567L", "nationalId")]),
        ("BSN 111222333", [("111222333", "nationalId")]),
        ("NIR 255081416802538", [("255081416802538", "nationalId")]),
        ("write to anna.smith at example dot com", [("anna.smith at example dot com", "email")]),
        ("it's anna.smith at example.com", [("anna.smith at example.com", "email")]),
        ("to a_b+news at example.org now", [("a_b+news at example.org", "email")]),
        ("call 555.123.4567 now", [("555.123.4567", "phone")]),
        (
            "call five five five - one two three four now",
            [("five five five - one two three four", "phone")],
        ),
        ("version 3.14 of it", []),
        ("call 01.23.45.67.89 please", [("01.23.45.67.89", "phone")]),
        # A date, an amount, an address and a range are no phone numbers.
        ("on 12.05.2023 um", []),
        ("it cost 1.250.000 euros", []),
        ("host 192.168.1.1 ok", []),
        ("from 1990 - 2000 ok", []),
        ("in 1999 we had 20 people and one dog", []),
        ("it cost 2,000,000 dollars", []),
    ],
)
def test_detect(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


def test_detect__a_word_whisper_wrote_in_pieces_is_one() -> None:
    """Whisper's words as it writes them: a piece without a leading space goes on the word
    before it, and a span takes every piece."""
    words = [" Send", " it", " to", " Maria", " at", " Enlample", ".org.", " or", " 555", "-1234."]
    assert [(f.first, f.end, f.kind) for f in detect(words, ALL)] == [
        (3, 7, "email"),
        (8, 10, "phone"),
    ]
    run_together = [" write", " to", " our", " example", ".com"]  # "example.com": a domain
    assert [(f.first, f.end) for f in detect(run_together, ALL)] == [(3, 5)]


def test_detect__a_failed_check_is_not_that_type() -> None:
    assert found("card 4111 1111 1111 1112 ok", {"card"}) == []  # Luhn
    assert found("IBAN DE88 3704 0044 0532 0130 00 ok", {"iban"}) == []  # mod 97
    assert found("DNI 12345678A", {"nationalId"}) == []  # the letter of 12345678 is Z


def test_detect__only_the_types_asked() -> None:
    text = "anna@example.com 555-1234"
    assert found(text, {"phone"}) == [("555-1234", "phone")]
    assert found("SSN 123-45-6789", {"phone"}) == [("123-45-6789", "phone")]
    assert found("SSN 123-45-6789", {"email"}) == []


def words(text: str, start: float = 0.0, p: float = 0.9) -> list[Word]:
    return [
        Word(start=start + i, end=start + i + 0.5, text=" " + t, probability=p - i * 0.01)
        for i, t in enumerate(text.split())
    ]


def seg(text: str, start: float = 0.0) -> Segment:
    ws = words(text, start)
    return Segment(start=ws[0].start, end=ws[-1].end, text="".join(w.text for w in ws), words=ws)


def test_redact__a_span_is_one_word_with_the_first_start_last_end_and_lowest_probability() -> None:
    (out,) = redact([seg("call five five five, one two three four. Thanks")], ALL)
    assert out.text == " call [PHONE]. Thanks"
    tag = out.words[1] if out.words else None
    assert tag is not None and tag.redacted == "phone" and tag.text == " [PHONE]."
    assert (tag.start, tag.end) == (1.0, 7.5)
    assert tag.probability == pytest.approx(0.9 - 0.07)
    assert len(out.text.split()) == 3  # a span counts as one word


def test_redact__an_entity_across_segments_goes_into_the_first() -> None:
    a, b = seg("my mail is anna at"), seg("example dot com bye", 5.0)
    first, second = redact([a, b], ALL)
    assert first.text == " my mail is [EMAIL]" and second.text == " bye"
    assert (second.start, second.end) == (b.start, b.end)


def test_redact__a_segment_without_words_is_redacted_in_proportion() -> None:
    s = Segment(start=0, end=10, text=" call 555-1234 now", confidence=0.7)
    (out,) = redact([s], ALL)
    assert out.text == " call [PHONE] now"
    assert out.words is not None and out.words[1].probability == 0.7


def test_hold__keeps_back_the_last_words_and_anything_that_could_be_an_entity() -> None:
    text = "so my card is four one one one one one one one one one one one one one one one"
    kept, held, piece = hold([seg(text)])
    assert piece and kept[0].text == " so my card is"
    assert held[0].text.split()[0] == "four"
    short = "a b c d e f g h i j k l"
    kept, held, piece = hold([seg(short)])
    assert len(held[0].text.split()) == HOLD_WORDS
    assert kept[0].text + held[0].text == " " + short


def test_hold__never_cuts_a_written_word() -> None:
    texts = [" a", " b", " c", " d", " example", ".com", " f", " g", " h", " i", " j", " k", " l"]
    ws = [Word(start=i, end=i + 0.5, text=t, probability=0.9) for i, t in enumerate(texts)]
    s = Segment(start=0, end=13, text="".join(texts), words=ws)
    _, held, _ = hold([s])  # the last 8 words begin at ".com": "example" goes with it
    assert held[0].words is not None and held[0].words[0].text == " example"


def test_hold_then_redact__an_entity_across_a_seam_is_found_whole() -> None:
    """The record of the first chunk stores no digit of the number said across the seam."""
    first = [seg("the number is five five five one two three four and then we talked a lot")]
    second = [seg("one two three four and thanks", 20.0)]  # (another number, too short)
    kept, held, _ = hold(first)
    stored = redact(kept, ALL)
    assert "five" not in "".join(s.text for s in stored)
    later = redact(held + second, ALL)
    assert "[PHONE]" in later[0].text


def translated_seg(text: str, translation: str, start: float = 0.0) -> Segment:
    return seg(text, start).model_copy(update={"translation": " " + translation})


@pytest.mark.parametrize(
    ("first", "second", "english"),
    [
        (
            ("Meine Nummer ist 0176", "My number is 0176"),
            ("5550123.", "5550123."),
            "My number is [PHONE].",
        ),
        (
            ("ruf an fünf fünf fünf,", "call five five five,"),
            ("eins zwei drei vier.", "one two three four."),
            "call [PHONE].",
        ),
    ],
)
def test_redact__a_translation_entity_across_segments_is_redacted_whole(
    first: tuple[str, str], second: tuple[str, str], english: str
) -> None:
    """The translations are redacted over all segments together, as the words are: the tag in
    the first segment's translation, nothing of the entity left in the second's."""
    a, b = redact([translated_seg(*first), translated_seg(*second, start=5.0)], ALL)
    assert a.translation == " " + english
    assert b.translation is None
    transcript = Transcript(segments=[a, b], duration=10.0, engine="x")
    rendered = render(transcript, "en.txt") + render(transcript, "json")
    for secret in ("0176", "5550123", "five", "four"):
        assert secret not in rendered, secret


def test_hold__a_segment_cut_by_the_hold_gives_its_translation_to_the_held_piece() -> None:
    """The translation of a segment the hold rule cuts goes with the piece held back (it is
    redacted with the next chunk's); a kept segment whose translation ends in what could be
    part of an entity is held back whole."""
    text = "hello and welcome to the show today my number is 0176"
    kept, held, piece = hold([translated_seg(text, "hello ... my number is 0176")])
    assert piece and kept[0].translation is None
    assert held[0].translation == " hello ... my number is 0176"
    segments = [
        translated_seg("hallo und willkommen heute", "hello and welcome today"),
        translated_seg("ja ja ja ja ja ja ja ja ja", "my number is 0176", 5.0),
        translated_seg("a b c d e f g h", "a b c d e f g h", 20.0),
    ]
    kept, held, piece = hold(segments)
    assert [s.translation for s in kept] == [" hello and welcome today"]
    assert not piece and held[0].translation == " my number is 0176"


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("mi número es cinco cinco cinco, uno dos tres cuatro.", "es"),
        ("llama al doble cinco cinco uno dos tres cuatro", "es"),
        ("meine Nummer ist null eins sieben sechs fünf fünf fünf null eins zwei drei.", "de"),
        ("ruf zwo zwo eins drei vier fünf sechs an", "de"),
        ("mon numéro est zéro six un deux trois quatre cinq six.", "fr"),
        ("il mio numero è tre tre nove uno due tre quattro cinque sei sette", "it"),
        ("meu número é nove nove meia um dois três quatro", "pt"),
        ("mijn nummer is nul zes een twee drie vier vijf zes zeven acht", "nl"),
    ],
)
def test_detect__digits_spoken_in_the_languages_read(text: str, spoken: str) -> None:
    """Digits said one by one in German, Spanish, French, Italian, Portuguese and Dutch are a
    phone number as English ones are."""
    assert [kind for _, kind in found(text, {"phone"})] == ["phone"], spoken
    (out,) = redact([seg(text)], {"phone"})
    assert "[PHONE]" in out.text
    assert not any(c in out.text.lower() for c in ("cinco", "fünf", "quatre", "sette", "zes"))


def test_detect__a_few_number_words_in_a_sentence_are_no_number() -> None:
    assert found("tengo dos perros y tres gatos, uno negro", ALL) == []
    assert found("ich habe zwei Hunde und drei Katzen", ALL) == []
    assert found("deux ou trois fois par an", ALL) == []


def test_redact__an_unspaced_segment_without_words_keeps_its_spacing() -> None:
    segment = Segment(
        start=0.0, end=6.0, text=" 我的邮箱是 anna@example.com 谢谢你", confidence=0.8
    )
    (out,) = redact([segment], ["email"])
    assert out.text == " 我的邮箱是 [EMAIL] 谢谢你"


@pytest.mark.parametrize(
    "iban",
    ["GB82 WEST 1234 5698 7654 32", "NL91 ABNA 0417 1643 00", "IE29 AIBK 9311 5212 3456 78"],
)
def test_redact__an_iban_in_groups_with_a_bank_code_in_letters(iban: str) -> None:
    """A group of letters only (the bank code) is part of the number begun by the country code
    and check digits: the IBAN is found whole, not left or read as a phone number."""
    for types in (["iban"], ["iban", "phone"]):
        (out,) = redact([seg(f"my IBAN is {iban} thanks")], types)
        assert out.text == " my IBAN is [IBAN] thanks", types
    assert found(f"bank code {iban[5:]}", {"iban", "phone"}) == [(iban[10:], "phone")]


def test_hold__keeps_an_iban_bank_code_with_its_digits() -> None:
    text = "please pay to GB82 WEST 1234 5698 7654 32 and then we will see you soon"
    kept, held, _ = hold([seg(text)])
    assert kept[0].text == " please pay to"
    assert "[IBAN]" in redact(held, ["iban"])[0].text


def whisper_words(tokens: list[str]) -> Segment:
    """A segment of Chinese or Japanese as Whisper's words give it: one token each, no spaces
    (`Tokenizer.split_to_word_tokens`)."""
    ws = [
        Word(start=i / 10, end=(i + 1) / 10, text=t, probability=0.9) for i, t in enumerate(tokens)
    ]
    return Segment(start=0.0, end=len(ws) / 10, text="".join(tokens), words=ws)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (
            ["メ", "ール", "は", "anna", "@", "ex", "am", "ple", ".", "com", "です"],
            "メールは[EMAIL]です",
        ),
        (
            ["電", "話", "番", "号", "は", "0", "90", "-", "12", "34", "-", "56", "78", "です"],
            "電話番号は[PHONE]です",
        ),
        (
            ["我的", "邮", "箱", "是", "anna", "@", "ex", "am", "ple", ".", "com"],
            "我的邮箱是[EMAIL]",
        ),
        (
            ["我的", "电", "话", "是", "55", "5", "-", "12", "3", "-", "45", "67", "。"],
            "我的电话是[PHONE]。",
        ),
        (
            ["我的", "电", "话", "是", " 55", "5", "12", "3", "45", "67", "。"],
            "我的电话是 [PHONE]。",
        ),
        (["我", "用", "i", "Phone", "给", "你", "打", "电", "话"], "我用iPhone给你打电话"),
    ],
)
def test_redact__chinese_and_japanese_as_whisper_writes_them(
    tokens: list[str], expected: str
) -> None:
    """Whisper writes no spaces in Chinese or Japanese: the pieces of an address or a number
    written together are one word, redacted alone, the characters around it kept as written;
    the same text without word timings is redacted alike."""
    types = ["email", "phone", "card"]
    (out,) = redact([whisper_words(tokens)], types)
    assert out.text.strip() == expected
    (bare,) = redact([Segment(start=0.0, end=3.0, text="".join(tokens))], types)
    assert bare.text.strip() == expected


def test_hold__never_cuts_an_address_written_in_japanese() -> None:
    tokens = ["メ", "ール", "は", "anna", "@", "ex", "am", "ple", ".", "com", "です", "ね"]
    kept, held, _ = hold([whisper_words(tokens)])
    assert kept[0].text.strip() == "メールは"
    assert redact(held, ["email"])[0].text.strip() == "[EMAIL]ですね"
