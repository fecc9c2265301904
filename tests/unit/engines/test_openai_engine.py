"""The OpenAI-compatible engine against a local stub of POST /v1/audio/transcriptions.

The stub (aiohttp, in a background thread on a free loopback port) answers from a script of
replies and records every request, so each test states what the server says and checks what
the engine sent, how often, and how long it waited. The engine waits on a `FakeClock` that the
test moves past each wait (`driven`): no retry test sleeps. The retry decision is tested as the
pure function it is.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import socket
import threading
import time
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from recall.engines.base import TranscribeRequest, primary_language
from recall.engines.languages import language_code
from recall.engines.openai import OpenAIEngine
from recall.engines.openai.response import error_message, parse_segments, punctuated
from recall.engines.openai.retry import (
    RETRY_AFTER_MAX,
    parse_retry_after,
    retry_backoff,
    retry_delay,
)
from recall.media.types import Chunk, Segment, Word
from recall.resources import TranscriptionJob
from recall.resources.errors import JobFailure
from recall_dev.twin.clock import EPOCH, FakeClock

# aiohttp's own multipart reader uses a deprecated call of its own; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:unread_data:DeprecationWarning")

KEY_ENV = "RECALL_TEST_OPENAI_KEY"
NOW = dt.datetime(2026, 11, 29, 12, 0, 0, tzinfo=dt.UTC)
VERBOSE = {
    "text": "Hello there. General Kenobi.",
    "segments": [
        {"id": 0, "start": 0.0, "end": 1.2, "text": " Hello there."},
        {"id": 1, "start": 1.2, "end": 2.7, "text": " General Kenobi."},
    ],
}


# --- the stub server ------------------------------------------------------------------------


@dataclass
class Reply:
    status: int = 200
    body: Any = field(default_factory=lambda: VERBOSE)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Call:
    authorization: str | None
    fields: dict[str, str]
    filename: str | None
    content_type: str | None
    file: bytes
    values: dict[str, list[str]] = field(default_factory=dict)  # every value of each field


class Stub:
    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.calls: list[Call] = []
        self.loop = asyncio.new_event_loop()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        app = web.Application()
        app.router.add_post("/v1/audio/transcriptions", self.transcriptions)
        self.runner = web.AppRunner(app)
        self.thread = threading.Thread(target=self.loop.run_forever, name="openai-stub")

    def start(self) -> None:
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.SockSite(self.runner, self.sock).start())
        self.thread.start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        self.sock.close()

    async def transcriptions(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form.get("file")
        self.calls.append(
            Call(
                authorization=request.headers.get("Authorization"),
                fields={k: v for k, v in form.items() if isinstance(v, str)},
                filename=getattr(upload, "filename", None),
                content_type=getattr(upload, "content_type", None),
                file=upload.file.read() if isinstance(upload, web.FileField) else b"",
                values={k: [str(v) for v in form.getall(k)] for k in set(form.keys())},
            )
        )
        reply = self.script.pop(0) if self.script else Reply()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if isinstance(reply.body, str):
            return web.Response(status=reply.status, text=reply.body, headers=reply.headers)
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)


@pytest.fixture
def stub() -> Iterator[Stub]:
    s = Stub()
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The engine's clock; `clock.waited` notes the timeout of every wait the engine began."""
    c = FakeClock()
    waited: list[float | None] = []
    wait = c.wait

    def noted(event: threading.Event, timeout: float | None) -> bool:
        waited.append(timeout)
        return wait(event, timeout)

    monkeypatch.setattr(c, "wait", noted)
    monkeypatch.setattr(c, "waited", waited, raising=False)
    return c


def waits(clock: FakeClock) -> list[float | None]:
    found: list[float | None] = getattr(clock, "waited")  # noqa: B009 (set by the fixture)
    return found


@pytest.fixture
def engine(stub: Stub, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIEngine]:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    e = make_engine(stub, clock=clock)
    try:
        yield e
    finally:
        e.close()


def make_engine(stub: Stub, **kw: Any) -> OpenAIEngine:
    args: dict[str, Any] = {
        "base_url": stub.base,
        "model": "whisper-1",
        "api_key_env": KEY_ENV,
        "timeout": 2.0,
        "max_retries": 3,
        "backoff_base": 0.05,
        **kw,
    }
    return OpenAIEngine(**args)


def driven(
    clock: FakeClock, call: Callable[[], Any], *, then: Callable[[], None] | None = None
) -> Any:
    """`call()` in a thread; each time it waits on `clock`, the clock is moved past that wait
    (or, with `then`, `then()` is called instead, once). What `call` returned, or raises what
    it raised."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # handed to the test's thread
            box["error"] = e

    thread = threading.Thread(target=target, name="engine-call", daemon=True)
    thread.start()
    moved, deadline = 0, time.monotonic() + 30
    while thread.is_alive():
        assert time.monotonic() < deadline, "the engine's call did not return"
        if clock.waiters() and len(waits(clock)) > moved:  # a new wait has begun
            moved = len(waits(clock))
            if then is not None:
                then()
                then = None
            else:
                clock.step(waits(clock)[-1] or 0.0)
        thread.join(0.001)
    if "error" in box:
        raise box["error"]
    return box["value"]


def chunk(seconds: float = 2.0, index: int = 3) -> Chunk:
    t = np.arange(round(seconds * 16_000)) / 16_000
    samples = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    return Chunk(index=index, start=index * 30.0, duration=seconds, audio=samples)


def job(language: str | None = "en-US", model: str | None = None) -> TranscriptionJob:
    spec: dict[str, Any] = {"source": {"url": "file:///a.wav"}}
    if language:
        spec["language"] = language
    if model:
        spec["engine"] = {"model": model}
    return TranscriptionJob.from_api({"metadata": {"name": "j1"}, "spec": spec})


def run(engine: OpenAIEngine, cancel: threading.Event | None = None, **kw: Any) -> list[Segment]:
    return engine.transcribe(
        TranscribeRequest.of(
            chunk(),
            language=kw.pop("language", "en-US"),
            cancel=cancel or threading.Event(),
            job=kw.pop("job", job()),
            attempt=1,
        )
    )


def failure(engine: OpenAIEngine, clock: FakeClock | None = None) -> JobFailure:
    def call() -> Any:
        return run(engine) if clock is None else driven(clock, lambda: run(engine))

    with pytest.raises(JobFailure) as info:
        call()
    return info.value


# --- requests and responses -----------------------------------------------------------------


def test_success__sends_multipart_wav_and_returns_chunk_relative_segments(
    engine: OpenAIEngine, stub: Stub
) -> None:
    segments = run(engine)
    assert [(s.start, s.end, s.text) for s in segments] == [
        (0.0, 1.2, "Hello there."),
        (1.2, 2.0, "General Kenobi."),  # end clamped to the chunk
    ]
    [call] = stub.calls
    assert call.authorization == "Bearer sk-test"
    assert call.fields == {
        "model": "whisper-1",
        "response_format": "verbose_json",
        "language": "en",
    }
    assert (call.filename, call.content_type) == ("chunk-00003.wav", "audio/wav")
    with wave.open(io.BytesIO(call.file)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16_000)
        assert w.getnframes() == 32_000


def test_success__job_model_overrides_and_no_language_is_not_sent(
    engine: OpenAIEngine, stub: Stub
) -> None:
    run(engine, language=None, job=job(language=None, model="large-v3"))
    assert stub.calls[0].fields == {"model": "large-v3", "response_format": "verbose_json"}


def test_words__asked_for_with_the_vocabulary_and_context_as_prompt(stub: Stub) -> None:
    stub.script = [
        Reply(
            body={
                "text": "Hello Zarvethia. Bye.",
                "segments": [
                    {"start": 0.0, "end": 1.2, "text": " Hello Zarvethia.", "avg_logprob": -0.1},
                    {"start": 1.3, "end": 1.9, "text": " Bye.", "avg_logprob": -0.5},
                ],
                "words": [
                    {"word": "Hello", "start": 0.1, "end": 0.5},
                    {"word": "Zarvethia", "start": 0.6, "end": 1.3},
                    {"word": "Bye", "start": 1.4, "end": 1.8},
                ],
            }
        )
    ]
    e = make_engine(stub)
    try:
        spec: dict[str, Any] = {
            "source": {"url": "file:///a.wav"},
            "transcript": {"words": True},
            "vocabulary": ["Zarvethia", "Quonbril"],
        }
        j = TranscriptionJob.from_api({"metadata": {"name": "j1"}, "spec": spec})
        segments = e.transcribe(
            TranscribeRequest.of(
                chunk(),
                language="auto",
                cancel=threading.Event(),
                job=j,
                attempt=1,
                context="Earlier we spoke of the north.",
            )
        )
    finally:
        e.close()
    [call] = stub.calls
    assert call.values["timestamp_granularities[]"] == ["word", "segment"]
    assert call.fields["prompt"] == "Zarvethia, Quonbril Earlier we spoke of the north."
    assert "language" not in call.fields  # auto: the server detects it
    first, second = segments
    assert first.confidence == pytest.approx(0.9048, abs=1e-4)
    assert [(w.text, w.start, w.end) for w in first.words or []] == [
        (" Hello", 0.1, 0.5),
        (" Zarvethia.", 0.6, 1.2),  # kept inside its segment, punctuated as its text
    ]
    assert [w.probability for w in first.words or []] == [first.confidence] * 2
    assert [w.text for w in second.words or []] == [" Bye."]


def test_success__text_without_segments_spans_the_chunk(engine: OpenAIEngine, stub: Stub) -> None:
    stub.script = [Reply(body={"text": " Just text. "}), Reply(body={"text": ""})]
    assert [(s.start, s.end, s.text) for s in run(engine)] == [(0.0, 2.0, "Just text.")]
    assert run(engine) == []


def test_api_key__read_from_the_file_and_stripped(
    stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-env")
    key_file = tmp_path / "key"
    key_file.write_text("  sk-from-file\n")
    e = make_engine(stub, api_key_file=key_file)
    try:
        run(e)
        key_file.write_text("sk-rotated\n")
        run(e)
    finally:
        e.close()
    assert [c.authorization for c in stub.calls] == ["Bearer sk-from-file", "Bearer sk-rotated"]


def test_api_key__none_configured_sends_no_authorization(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    e = make_engine(stub)
    try:
        run(e)
    finally:
        e.close()
    assert stub.calls[0].authorization is None


def test_unreadable_success_body_is_retriable(engine: OpenAIEngine, stub: Stub) -> None:
    stub.script = [Reply(body="<html>not json</html>")]
    error = failure(engine)
    assert (error.reason, error.permanent) == ("EngineBadResponse", False)


# --- retries --------------------------------------------------------------------------------


def test_429_with_retry_after__waits_then_succeeds(
    engine: OpenAIEngine, stub: Stub, clock: FakeClock
) -> None:
    stub.script = [Reply(429, {"error": {"message": "Rate limit"}}, {"Retry-After": "1"})]
    segments = driven(clock, lambda: run(engine))
    assert len(segments) == 2
    assert len(stub.calls) == 2
    assert waits(clock) == [1.0]  # as the server asked, on the engine's clock


def test_429_with_retry_after_date__counted_from_the_engines_clock(
    engine: OpenAIEngine, stub: Stub, clock: FakeClock
) -> None:
    clock.step(60.0)
    later = format_datetime(EPOCH + dt.timedelta(seconds=67), usegmt=True)
    stub.script = [Reply(429, {}, {"Retry-After": later})]
    assert len(driven(clock, lambda: run(engine))) == 2
    assert waits(clock) == [7.0]


def test_500_then_success(engine: OpenAIEngine, stub: Stub, clock: FakeClock) -> None:
    stub.script = [Reply(500, {"error": {"message": "oops"}})]
    assert len(driven(clock, lambda: run(engine))) == 2
    assert len(stub.calls) == 2
    [delay] = waits(clock)
    assert delay is not None and 0.025 <= delay < 0.05  # half the base, stretched by jitter


def test_timeout_then_success(
    stub: Stub, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    e = make_engine(stub, timeout=0.3, clock=clock)
    stub.script = [Reply(delay=1.0)]  # the server's delay is real: httpx times out on it
    try:
        assert len(driven(clock, lambda: run(e))) == 2
    finally:
        e.close()
    assert len(stub.calls) == 2
    assert len(waits(clock)) == 1


def test_retries_exhausted__retriable_engine_unavailable(
    engine: OpenAIEngine, stub: Stub, clock: FakeClock
) -> None:
    stub.script = [Reply(503, {"error": {"message": "overloaded"}}) for _ in range(10)]
    error = failure(engine, clock)
    assert (error.reason, error.permanent) == ("EngineUnavailable", False)
    assert "503: overloaded" in error.message
    assert len(stub.calls) == 4  # the first try and max_retries=3 retries
    delays = [d or 0.0 for d in waits(clock)]
    assert len(delays) == 3
    for retry, delay in enumerate(delays):  # exponential from the base, each jittered
        assert 0.025 * 2**retry <= delay < 0.05 * 2**retry
    assert clock.monotonic() == pytest.approx(1000.0 + sum(delays))  # no other wait


def test_retry_after_too_long__gives_up_at_once(
    engine: OpenAIEngine, stub: Stub, clock: FakeClock
) -> None:
    stub.script = [Reply(429, {}, {"Retry-After": str(int(RETRY_AFTER_MAX) + 1)})]
    error = failure(engine, clock)
    assert (error.reason, error.permanent) == ("EngineUnavailable", False)
    assert waits(clock) == []
    assert len(stub.calls) == 1


def test_cancel__ends_the_wait_and_sends_nothing_more(
    engine: OpenAIEngine, stub: Stub, clock: FakeClock
) -> None:
    stub.script = [Reply(429, {}, {"Retry-After": "30"})]
    cancel = threading.Event()
    assert driven(clock, lambda: run(engine, cancel), then=cancel.set) == []
    assert waits(clock) == [30.0]
    assert clock.monotonic() == 1000.0  # the wait ended by the cancel, not by time
    assert len(stub.calls) == 1


def test_cancel__already_set_sends_no_request(engine: OpenAIEngine, stub: Stub) -> None:
    cancel = threading.Event()
    cancel.set()
    assert run(engine, cancel) == []
    assert stub.calls == []


# --- permanent errors -----------------------------------------------------------------------


def test_400__permanent_with_the_servers_message(engine: OpenAIEngine, stub: Stub) -> None:
    stub.script = [Reply(400, {"error": {"message": "Invalid file format.", "type": "x"}})]
    error = failure(engine)
    assert (error.reason, error.permanent) == ("EngineRejected", True)
    assert error.message == "400: Invalid file format."
    assert len(stub.calls) == 1


@pytest.mark.parametrize("status", [401, 403])
def test_401_403__unauthorized_and_permanent(engine: OpenAIEngine, stub: Stub, status: int) -> None:
    stub.script = [Reply(status, {"error": {"message": "Incorrect API key provided"}})]
    error = failure(engine)
    assert (error.reason, error.permanent) == ("EngineUnauthorized", True)
    assert error.message == f"{status}: Incorrect API key provided"
    assert len(stub.calls) == 1


def test_connection_refused__retried_then_unavailable(clock: FakeClock) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OpenAIEngine(
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        api_key_env=KEY_ENV,
        timeout=1.0,
        max_retries=2,
        backoff_base=0.01,
        clock=clock,
    )
    try:
        error = failure(e, clock)
    finally:
        e.close()
    assert (error.reason, error.permanent) == ("EngineUnavailable", False)
    assert "after 3 tries" in error.message
    assert len(waits(clock)) == 2


# --- the retry decision (pure) --------------------------------------------------------------


RETRY = retry_backoff(5)


def test_retry_delay__retry_after_seconds_is_obeyed() -> None:
    assert retry_delay(429, {"Retry-After": "1"}, 0, NOW, backoff=RETRY) == 1.0
    assert retry_delay(503, {"retry-after": "2.5"}, 2, NOW, backoff=RETRY) == 2.5


def test_retry_delay__retry_after_http_date() -> None:
    later = format_datetime(NOW + dt.timedelta(seconds=7), usegmt=True)
    assert retry_delay(429, {"Retry-After": later}, 0, NOW, backoff=RETRY) == 7.0
    earlier = format_datetime(NOW - dt.timedelta(seconds=7), usegmt=True)
    assert retry_delay(429, {"Retry-After": earlier}, 0, NOW, backoff=RETRY) == 0.0


def test_retry_delay__retry_after_too_long_means_stop() -> None:
    assert retry_delay(429, {"Retry-After": "3600"}, 0, NOW, backoff=RETRY) is None


def test_retry_delay__exponential_backoff_with_jitter_and_cap() -> None:
    backoff = retry_backoff(10, base=1.0)

    def delay(retry: int, u: float) -> float | None:
        return retry_delay(500, {}, retry, NOW, backoff=backoff, u=u)

    assert delay(0, 0.0) == 0.5
    assert delay(0, 0.999) == pytest.approx(1.0, abs=0.001)
    assert delay(3, 0.0) == 4.0
    assert delay(3, 0.5) == 6.0
    assert delay(9, 0.999) == pytest.approx(30.0, abs=0.02)  # capped


def test_retry_delay__jitter_drawn_by_the_backoff_stays_within_half_to_whole() -> None:
    for _ in range(50):
        delay = retry_delay(500, {}, 2, NOW, backoff=retry_backoff(5, base=1.0))
        assert delay is not None and 2.0 <= delay < 4.0


def test_retry_delay__bad_retry_after_falls_back_to_backoff() -> None:
    assert retry_delay(503, {"Retry-After": "soon"}, 1, NOW, backoff=RETRY, u=0.0) == 1.0


def test_retry_delay__transport_error_backs_off() -> None:
    assert retry_delay(None, {}, 0, NOW, backoff=RETRY, u=0.0) == 0.5


def test_retry_delay__stops_when_retries_are_spent() -> None:
    assert retry_delay(500, {}, 5, NOW, backoff=RETRY) is None
    assert retry_delay(429, {"Retry-After": "1"}, 5, NOW, backoff=RETRY) is None
    assert retry_delay(None, {}, 0, NOW, backoff=retry_backoff(0)) is None


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_retry_delay__client_errors_are_not_retried(status: int) -> None:
    assert retry_delay(status, {"Retry-After": "1"}, 0, NOW, backoff=RETRY) is None


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_retry_delay__retriable_statuses(status: int) -> None:
    assert retry_delay(status, {}, 0, NOW, backoff=RETRY, u=0.0) == 0.5


def test_parse_retry_after__garbage_is_none() -> None:
    assert parse_retry_after(None, NOW) is None
    assert parse_retry_after("", NOW) is None
    assert parse_retry_after("tomorrow-ish", NOW) is None
    assert parse_retry_after("-5", NOW) == 0.0


# --- response helpers (pure) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"error": {"message": "Invalid file format."}}', "Invalid file format."),
        (b'{"error": "quota exceeded"}', "quota exceeded"),
        (b'{"detail": "Model not found"}', "Model not found"),
        (b"plain\ntext  error", "plain text error"),
        (b"", "Bad Request"),
        (b'{"unexpected": 1}', '{"unexpected": 1}'),
    ],
)
def test_error_message(body: bytes, expected: str) -> None:
    assert error_message(body, "Bad Request") == expected


def test_parse_segments__clamps_and_skips_blank_text() -> None:
    data = {
        "segments": [
            {"start": -1, "end": 0.5, "text": " a "},
            {"start": 0.5, "end": 0.7, "text": "  "},
            {"start": 9, "end": 12, "text": "b"},
        ],
        "text": "a b",
    }
    assert [(s.start, s.end, s.text) for s in parse_segments(data, 5.0)] == [
        (0.0, 0.5, "a"),
        (5.0, 5.0, "b"),
    ]
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_segments(["a"], 5.0)


def test_api_language() -> None:
    assert [primary_language(x) for x in ("en-US", "pt_BR", "DE", None, "")] == [
        "en",
        "pt",
        "de",
        None,
        None,
    ]


def test_parse_segments__words_asked_but_none_returned_means_no_word_timings() -> None:
    """A server that answers segments without `words`: every segment has `words` None (not
    []), so the job's srt, vtt and aws.json split them in proportion instead of dropping them;
    a segment no word fell in is the same."""
    data = {
        "segments": [
            {"start": 0.0, "end": 1.0, "text": " One."},
            {"start": 1.0, "end": 2.0, "text": " Two."},
        ]
    }
    assert [s.words for s in parse_segments(data, 5.0, words=True)] == [None, None]
    data["words"] = [{"word": "One", "start": 0.1, "end": 0.6}]
    first, second = parse_segments(data, 5.0, words=True)
    assert [w.text for w in first.words or []] == [" One."] and second.words is None


def test_punctuated__words_take_their_text_from_the_segment() -> None:
    def w(text: str) -> Word:
        return Word(start=0.0, end=0.1, text=f" {text}", probability=0.9)

    words = [w("well"), w("Mr"), w("Smith"), w("its"), w("3"), w("late")]
    text = '"Well," said — Mr. Smith; it\'s three, late!'
    assert [x.text for x in punctuated(words, text)] == [
        ' "Well,"',
        " Mr.",
        " Smith;",
        " it's",  # the same word once the apostrophe is set aside
        " 3",  # no token of the text is "3": its own text
        " late!",
    ]
    assert punctuated([], "Hello.") == [] and [x.text for x in punctuated([w("a")], "")] == [" a"]


def auto_job(words: bool = False) -> TranscriptionJob:
    spec: dict[str, Any] = {"source": {"url": "file:///a.wav"}, "language": "auto"}
    if words:
        spec["transcript"] = {"words": True}
    return TranscriptionJob.from_api({"metadata": {"name": "j1", "uid": "u-1"}, "spec": spec})


def test_detect_language__what_the_server_reports_and_its_answer_is_the_chunks_transcription(
    engine: OpenAIEngine, stub: Stub
) -> None:
    """`auto`: the first chunk with text is sent without a language; the server's `language`
    (OpenAI writes a name) is the file's, with no probability; that answer is the chunk's
    transcription (no second request), and later chunks are sent in the language."""
    stub.script = [
        Reply(body={"text": "", "language": "english", "segments": []}),  # silence: no text
        Reply(body={**VERBOSE, "language": "english"}),
        Reply(body=VERBOSE),
    ]
    j, cancel = auto_job(), threading.Event()
    silent, spoken, later = chunk(index=0), chunk(index=1), chunk(index=2)
    assert (
        engine.detect_language(TranscribeRequest.of(silent, job=j, cancel=cancel)) is None
    )  # ask the next chunk
    assert (
        engine.transcribe(
            TranscribeRequest.of(silent, language="auto", cancel=cancel, job=j, attempt=1)
        )
        == []
    )
    found = engine.detect_language(TranscribeRequest.of(spoken, job=j, cancel=cancel))
    assert found is not None and (found.language, found.probability) == ("en", None)
    segments = engine.transcribe(
        TranscribeRequest.of(spoken, language="en", cancel=cancel, job=j, attempt=1)
    )
    assert [s.text for s in segments] == ["Hello there.", "General Kenobi."]
    assert len(stub.calls) == 2  # detection cost no request of its own
    assert all("language" not in c.fields for c in stub.calls)
    engine.transcribe(
        TranscribeRequest.of(later, language="en", cancel=cancel, job=j, attempt=1, context="x")
    )
    assert stub.calls[-1].fields["language"] == "en"


def test_detect_language__a_server_that_reports_none_is_not_asked_again(
    engine: OpenAIEngine, stub: Stub
) -> None:
    stub.script = [Reply(body=VERBOSE), Reply(body=VERBOSE)]
    j, cancel = auto_job(), threading.Event()
    assert (
        engine.detect_language(TranscribeRequest.of(chunk(index=0), job=j, cancel=cancel)) is None
    )
    engine.transcribe(
        TranscribeRequest.of(chunk(index=0), language="auto", cancel=cancel, job=j, attempt=1)
    )
    assert (
        engine.detect_language(TranscribeRequest.of(chunk(index=1), job=j, cancel=cancel)) is None
    )
    assert len(stub.calls) == 1  # no request for the second detection


@pytest.mark.parametrize(
    ("reported", "code"),
    [
        ("english", "en"),
        ("English", "en"),
        ("en", "en"),
        ("pt-BR", "pt"),
        ("haitian creole", "ht"),
        ("mandarin", "zh"),
        ("yue", "yue"),
        ("klingon", None),
        ("", None),
        (None, None),
        (7, None),
    ],
)
def test_language_code(reported: object, code: str | None) -> None:
    assert language_code(reported) == code


def spec_job(**spec: Any) -> TranscriptionJob:
    body = {"source": {"url": "file:///a.wav"}, **spec}
    return TranscriptionJob.from_api({"metadata": {"name": "j1", "uid": "u-1"}, "spec": body})


def test_detect_language__outside_the_options_the_chunk_is_sent_again_in_the_first(
    engine: OpenAIEngine, stub: Stub
) -> None:
    """The server hears German; the job allows fr and it: the chunk is sent again in fr, that
    answer is its transcription, and fr is recorded with probability 0 (LanguageUncertain)."""
    stub.script = [Reply(body={**VERBOSE, "language": "german"}), Reply(body=VERBOSE)]
    j, cancel = spec_job(language="auto", languageOptions=["fr", "it"]), threading.Event()
    found = engine.detect_language(TranscribeRequest.of(chunk(index=0), job=j, cancel=cancel))
    assert found is not None and (found.language, found.probability) == ("fr", 0.0)
    assert ["language" in c.fields for c in stub.calls] == [False, True]
    assert stub.calls[1].fields["language"] == "fr"
    engine.transcribe(
        TranscribeRequest.of(chunk(index=0), language="fr", cancel=cancel, job=j, attempt=1)
    )
    assert len(stub.calls) == 2  # the second answer is the chunk's transcription


def test_detect_language__among_the_options_the_servers_own_and_unreported_the_first(
    engine: OpenAIEngine, stub: Stub
) -> None:
    j, cancel = spec_job(language="auto", languageOptions=["fr", "it"]), threading.Event()
    stub.script = [Reply(body={**VERBOSE, "language": "italian"})]
    found = engine.detect_language(TranscribeRequest.of(chunk(index=0), job=j, cancel=cancel))
    assert found is not None and (found.language, found.probability) == ("it", None)
    stub.script = [Reply(body=VERBOSE), Reply(body=VERBOSE), Reply(body=VERBOSE)]
    found = engine.detect_language(TranscribeRequest.of(chunk(index=1), job=j, cancel=cancel))
    assert found is not None and (found.language, found.probability) == ("fr", 0.0)
    found = engine.detect_language(TranscribeRequest.of(chunk(index=2), job=j, cancel=cancel))
    assert found is not None and found.language == "fr"  # reports none: asked in fr at once
    assert [c.fields.get("language") for c in stub.calls] == [None, None, "fr", "fr"]


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"language": "de", "transcript": {"translate": "en"}}, "TranslationUnsupported"),
        ({"language": "auto", "languageScope": "segment"}, "LanguageDetectionUnsupported"),
    ],
)
def test_refused__what_the_api_cannot_do_fails_permanently_before_any_request(
    engine: OpenAIEngine, stub: Stub, spec: dict[str, Any], reason: str
) -> None:
    j, cancel = spec_job(**spec), threading.Event()
    for call in (
        lambda: engine.detect_language(TranscribeRequest.of(chunk(), job=j, cancel=cancel)),
        lambda: engine.transcribe(TranscribeRequest.of(chunk(), language="de", job=j)),
    ):
        with pytest.raises(JobFailure) as info:
            call()
        assert (info.value.reason, info.value.permanent) == (reason, True)
        assert "openai/whisper-1" in info.value.message
    assert stub.calls == []


@pytest.mark.parametrize(
    "transcript",
    [{"redact": {"types": ["phone"], "audio": True}}, {"speakers": {}}, {"words": True}],
)
def test_words__asked_whenever_the_job_needs_them(
    engine: OpenAIEngine, stub: Stub, transcript: dict[str, Any]
) -> None:
    run(engine, job=spec_job(language="en", transcript=transcript))
    assert stub.calls[0].values["timestamp_granularities[]"] == ["word", "segment"]
