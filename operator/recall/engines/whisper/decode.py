"""Decoding: a call's windows through faster-whisper's batched pipeline, each window once.

Contract (a call of one chunk or a batch alike):
- The call's windows (`windows.plan`) go to `BatchedInferencePipeline`, `batch_size` a step, as
  `clip_timestamps` over their samples put end to end, its VAD off: it answers one segment per
  window, in order, each moved back to its chunk by the window's place (exact). Each window is
  encoded and decoded once, where `WhisperModel.transcribe` ends a 30 s window at its last
  complete segment and decodes the rest again: two encoder passes for most 30 s chunks.
- Each window is decoded without timestamps (with them, the pipeline drops the words after a
  window's last timestamp pair: it cannot seek back) and always with word timings, which cut
  it into segments (`align.window_segments`; about 4 % of the CPU on tiny.en); without them a
  window would be one segment of up to 30 s.
- Prompting: the job's vocabulary as `hotwords` (`recall.engines.prompt`), and as every
  window's `initial_prompt` the last words of `context` that fit `WHISPER_CONTEXT_CHARACTERS`.
  Not more: a prompt that holds what a window starts with makes the model skip it (on a
  LibriVox recording that repeats every 28.7 s, tiny.en skipped the first 19 s of every chunk
  with a prompt of 300 or 400 characters, nothing with 200).
- Beam size 2: ~15 % more CPU than greedy on synthesized speech, and sometimes a word fixed;
  beam 5 costs 20-60 % more for no steady gain on tiny.en.
- Kept from one-at-a-time decoding: a window judged silent (Whisper's rule: no-speech
  probability over 0.6 and average log-probability under -1) gives no segment; a window whose
  text repeats itself (compression ratio over 2.4) is decoded again alone, one at a time, with
  the temperature fallback. Added, since the pipeline, unlike one-at-a-time decoding (its first
  timestamp falls in a window's first second), can skip a window's start: a window decoded with
  a prompt whose words leave `LOST_SECONDS` of its speech farther than `REACH` from every word
  is decoded again without it, and that answer kept if it reaches more of the speech (no window
  of the test speech left more than 0.15 s; a skipped start, 19 s).
- `cancel` is checked between the pipeline's steps; once set, `transcribe` returns fewer lists
  than chunks (the caller discards). One step's model call is not interruptible.
- Languages: under `languageScope: segment` (`per_segment`) a chunk's speech is cut into
  decision spans (`recall.engines.languages.decision_spans`) instead of 30 s windows; each
  span's language is decided on its own audio (`language.decide`) among the job's options, the
  span decoded in it, and its segments carry it. Each language's windows are decoded in one
  pipeline call, in turn.
- Translation (`translate`): every window is decoded again with the translate task, in its
  language, without the prompt (text in the spoken language would steer the English); the
  English words go to the window's segments by their times (`language.attach`). Repetitive
  English is translated again alone, as a repetitive transcript is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from recall.base import log
from recall.engines.languages import decision_spans
from recall.engines.prompt import REPETITIVE, compression_ratio, prompt_of
from recall.engines.whisper import language
from recall.engines.whisper.align import Sounds, islands, segment_of, window_segments
from recall.engines.whisper.windows import (
    LOST_SECONDS,
    RATE,
    Span,
    Window,
    inside,
    plan,
    unreached,
)
from recall.media.types import Chunk, Segment

BEAM_SIZE = 2
NO_SPEECH, LOW_LOGPROB = 0.6, -1.0  # Whisper's silence rule (faster-whisper's defaults)
WHISPER_CONTEXT_CHARACTERS = 200  # of the text before, in a window's prompt (see the contract)

_log = log.get("engine")


@dataclass(frozen=True)
class Decoding:
    """How one call decodes; `language` None: the model detects it."""

    model: Any
    language: str | None
    context: str
    hotwords: str | None
    beam_size: int = BEAM_SIZE
    batch_size: int = 1
    keep_words: bool = False
    per_segment: bool = False  # languageScope segment: a language decided per span of speech
    options: tuple[str, ...] = ()  # the languages a decision may pick (none: any)
    translate: bool = False  # also decode every window with the translate task
    task: str = "transcribe"

    @property
    def prompt(self) -> str | None:
        return prompt_of(self.context, WHISPER_CONTEXT_CHARACTERS)


def transcribe(
    d: Decoding, chunks: list[Chunk], vad_filter: bool, cancel: threading.Event
) -> list[list[Segment]]:
    """The segments of each of `chunks` (the module contract)."""
    # Segment scope's pauses and seconds of speech are the unpadded stretches' own.
    group = (lambda s: decision_spans(s.said, RATE, s.padded)) if d.per_segment else None
    speech, windows = plan(chunks, vad_filter, group)
    out: list[list[Segment]] = [[] for _ in chunks]
    if not windows:
        return out  # no speech in the call: no model time
    prompt = d.prompt
    each = [d] * len(windows)
    if d.per_segment:  # each span decided on its own speech
        for i, w in enumerate(windows):
            said = language.decide(d.model, chunks[w.chunk].audio[w.first : w.end], d.options)
            each[i] = replace(d, language=said.language)
    results = in_languages(each, chunks, windows, prompt)
    english = in_languages([replace(x, task="translate") for x in each], chunks, windows, None)
    sounds: dict[int, Sounds] = {}
    for i, window in enumerate(windows):
        if cancel.is_set():  # before the next step: a cancelled call starts no more
            return out[: window.chunk]
        raw = next(results)  # one segment per window, in order
        shift = window.shift
        if prompt and speech[window.chunk]:
            raw, shift = reaching(each[i], chunks, window, raw, speech[window.chunk], cancel)
        chunk = chunks[window.chunk]
        if window.chunk not in sounds:
            sounds[window.chunk] = islands(chunk.audio)
        found = window_result(
            each[i], chunk, window, raw, shift, out[window.chunk], sounds[window.chunk], cancel
        )
        if d.per_segment:
            found = [s.model_copy(update={"language": each[i].language}) for s in found]
        if d.translate:
            raw_english = next(english)
            if found:
                words = translation(each[i], chunk, window, raw_english, cancel)
                found = language.attach(found, words)
        out[window.chunk] += found
    return out


def in_languages(
    each: list[Decoding], chunks: list[Chunk], windows: list[Window], prompt: str | None
) -> Iterator[Any]:
    """`decoded` of `windows`, each as its own `Decoding` says (one call a language), in their
    order; nothing for a translation not asked for (`translate` off)."""
    if each[0].task == "translate" and not each[0].translate:
        return iter(())
    if all(x == each[0] for x in each):
        return decoded(each[0], chunks, windows, prompt)  # type: ignore[no-any-return]
    answers: dict[int, Any] = {}
    for d in dict.fromkeys(each):
        mine = [i for i, x in enumerate(each) if x == d]
        found = decoded(d, chunks, [windows[i] for i in mine], prompt)
        answers.update(zip(mine, found, strict=True))
    return (answers[i] for i in range(len(windows)))


def translation(
    d: Decoding, chunk: Chunk, window: Window, raw: Any, cancel: threading.Event
) -> list[tuple[float, float, str]]:
    """The translated words of one window of `chunk` (`raw`, the translate task's answer), timed
    in the chunk; the whole text over the window when the model aligned no word."""
    text = raw.text.strip()
    if compression_ratio(text) > REPETITIVE:
        _log.info("window_decoded_again", chunk=chunk.index, reason="repetitive_translation")
        audio = chunk.audio[window.first : window.end]
        return translated_alone(d, audio, cancel, shift=window.first / RATE)
    if raw.words:
        return [(w.start + window.shift, w.end + window.shift, w.word) for w in raw.words]
    return [(window.first / RATE, window.end / RATE, text)] if text else []


def translated_alone(
    d: Decoding, audio: Any, cancel: threading.Event, *, shift: float
) -> list[tuple[float, float, str]]:
    """`audio`, a window `shift` seconds into its chunk, translated `alone`: its English words,
    timed in the chunk; a segment's whole text where no word was aligned."""
    words: list[tuple[float, float, str]] = []
    for s in alone(d, audio, cancel, task="translate", prompt=None, words=True):
        if s.words:
            words += [(w.start + shift, w.end + shift, w.word) for w in s.words]
        elif s.text.strip():
            words.append((s.start + shift, s.end + shift, " " + s.text.strip()))
    return words


def window_result(
    d: Decoding,
    chunk: Chunk,
    window: Window,
    raw: Any,
    shift: float,
    before: list[Segment],
    sounds: Sounds,
    cancel: threading.Event,
) -> list[Segment]:
    """The segments of one decoded window of `chunk` (after `before`, its segments so far)."""
    if raw.no_speech_prob > NO_SPEECH and raw.avg_logprob < LOW_LOGPROB:
        return []  # a silent window, as one-at-a-time decoding judges it
    floor = before[-1].end if before else 0.0
    if compression_ratio(raw.text.strip()) > REPETITIVE:
        _log.info("window_decoded_again", chunk=chunk.index, reason="repetitive")
        audio = chunk.audio[window.first : window.end]
        return one_at_a_time(d, chunk, audio, cancel, shift=window.first / RATE, floor=floor)
    return window_segments(
        raw, chunk.duration, sounds, shift=shift, floor=floor, keep_words=d.keep_words
    )


def decoded(d: Decoding, chunks: list[Chunk], windows: list[Window], prompt: str | None) -> Any:
    """faster-whisper's one segment for each of `windows`, in order, lazily (the contract)."""
    import numpy as np
    from faster_whisper import BatchedInferencePipeline

    last = windows[-1]
    audio = np.zeros(last.at + last.end - last.first, np.float32)  # zeros between: unread
    for w in windows:
        audio[w.at : w.at + w.end - w.first] = chunks[w.chunk].audio[w.first : w.end]
    generated, _info = BatchedInferencePipeline(d.model).transcribe(  # its state is per call
        audio,
        language=d.language,
        task=d.task,
        beam_size=d.beam_size,
        temperature=0.0,  # the pipeline takes the first temperature only
        initial_prompt=prompt,
        hotwords=d.hotwords,
        without_timestamps=True,
        word_timestamps=True,
        vad_filter=False,
        # Half a sample in, so the pipeline's int(seconds * rate) lands on the sample itself.
        clip_timestamps=[
            {"start": (w.at + 0.5) / RATE, "end": (w.at + w.end - w.first + 0.5) / RATE}
            for w in windows
        ],
        batch_size=d.batch_size,
    )
    return iter(generated)


def reaching(
    d: Decoding,
    chunks: list[Chunk],
    window: Window,
    raw: Any,
    speech: list[Span],
    cancel: threading.Event,
) -> tuple[Any, float]:
    """`raw` (the window decoded with the prompt) or, as the contract says, the window decoded
    again without it; with the seconds that move its times into the chunk."""
    said = inside(speech, window)

    def lost(decoded: Any, shift: float) -> float:
        return unreached(said, [(w.start + shift, w.end + shift) for w in decoded.words or []])

    missed = lost(raw, window.shift)
    if missed < LOST_SECONDS or cancel.is_set():
        return raw, window.shift
    alone = Window(window.chunk, window.first, window.end, 0)  # decoded on its own
    again = next(decoded(d, chunks, [alone], None))
    kept = lost(again, alone.shift) < missed
    _log.info(
        "window_decoded_again",
        chunk=chunks[window.chunk].index,
        reason="speech_without_words",
        seconds=round(missed, 1),
        kept=bool(kept),
    )
    return (again, alone.shift) if kept else (raw, window.shift)


def one_at_a_time(
    d: Decoding, chunk: Chunk, audio: Any, cancel: threading.Event, *, shift: float, floor: float
) -> list[Segment]:
    """`audio`, a repetitive window `shift` seconds into `chunk`, decoded again `alone` with the
    call's prompt; segments relative to the chunk."""
    segments: list[Segment] = []
    sounds: Sounds | None = None
    for s in alone(d, audio, cancel, task="transcribe", prompt=d.prompt, words=d.keep_words):
        if s.text.strip():
            if d.keep_words and sounds is None:
                sounds = islands(chunk.audio)
            low = segments[-1].end if segments else floor
            segments.append(segment_of(s, chunk.duration, sounds, shift=shift, floor=low))
    return segments


def alone(
    d: Decoding, audio: Any, cancel: threading.Event, *, task: str, prompt: str | None, words: bool
) -> Iterator[Any]:
    """faster-whisper's segments of `audio`, a window that is speech already, decoded one at a
    time (its own decoding, with the temperature fallback); none after `cancel` is set."""
    generated, _info = d.model.transcribe(
        audio,
        language=d.language,
        task=task,
        beam_size=d.beam_size,
        vad_filter=False,  # the window is speech already
        # Each 30 s window starts afresh: conditioning on the one before only spreads a
        # repetition loop.
        condition_on_previous_text=False,
        initial_prompt=prompt,
        hotwords=d.hotwords,
        word_timestamps=words,
    )
    for s in generated:
        yield s
        if cancel.is_set():
            return
