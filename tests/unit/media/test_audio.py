"""Audio preparation: decoding to 16 kHz mono, chunking, fetching, and error classification.

Media files are generated in `tmp_path`; http(s) sources are served by a local HTTP server
that the `server` fixture starts and stops.
"""

from __future__ import annotations

import hashlib
import io
import socket
import struct
import threading
import wave
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from recall import media as audio
from recall.media.cut import split
from recall.media.fetch import classify_http_status, display_url
from recall.media.types import Chunk, Media
from recall.resources import TranscriptionJob
from recall.resources.errors import JobFailure
from tests.audio import encode

RATE = audio.SAMPLE_RATE


# --- helpers --------------------------------------------------------------------------------


def sine(
    seconds: float, rate: int, freq: float = 440.0, amp: float = 0.3
) -> npt.NDArray[np.float32]:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def wav_bytes(samples: npt.NDArray[np.float32], rate: int, channels: int = 1) -> bytes:
    frames = np.repeat(samples[:, None], channels, axis=1)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((frames * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def write_wav(path: Path, seconds: float, rate: int = 44_100, channels: int = 2) -> Path:
    path.write_bytes(wav_bytes(sine(seconds, rate), rate, channels))
    return path


def png(path: Path) -> Path:
    """A 4x4 red PNG: a media file FFmpeg opens, with a video stream and no audio."""

    def block(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 4 for _ in range(4))
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + block(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
        + block(b"IDAT", zlib.compress(rows))
        + block(b"IEND", b"")
    )
    return path


def peak_hz(samples: npt.NDArray[np.float32], rate: int = RATE) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.argmax(spectrum) * rate / len(samples))


def url_of(path: Path) -> str:
    return path.resolve().as_uri()


def options(**kw: object) -> audio.MediaOptions:
    return audio.MediaOptions(**kw)  # type: ignore[arg-type]


def cut(url: str, opts: audio.MediaOptions | None = None) -> tuple[list[Chunk], Media]:
    """Every chunk of the source at `url`, and its (closed) media."""
    with audio.load_media(url, opts or options()) as media:
        return list(media.chunks()), media


def fail(url: str, opts: audio.MediaOptions | None = None) -> JobFailure:
    with pytest.raises(JobFailure) as info:
        cut(url, opts)
    return info.value


def job(url: str, chunk_seconds: int | None = None) -> TranscriptionJob:
    engine = {"chunkSeconds": chunk_seconds} if chunk_seconds else None
    return TranscriptionJob.from_api(
        {
            "metadata": {"name": "j1", "namespace": "default"},
            "spec": {"source": {"url": url}, **({"engine": engine} if engine else {})},
        }
    )


# --- decoding -------------------------------------------------------------------------------


def test_decode__stereo_44k_wav_becomes_16k_mono_float32(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "tone.wav", 2.5, rate=44_100, channels=2)
    [chunk], media = cut(url_of(path))
    assert media.duration == pytest.approx(2.5, abs=0.01)
    assert chunk.audio.dtype == np.float32
    assert chunk.audio.ndim == 1
    assert len(chunk.audio) == pytest.approx(2.5 * RATE, abs=20)
    assert peak_hz(chunk.audio) == pytest.approx(440, abs=2)
    assert 0.1 < float(np.abs(chunk.audio).max()) <= 1.0


@pytest.mark.parametrize(
    ("name", "codec", "rate", "frame_size"),
    [
        ("tone.mp3", "libmp3lame", 44_100, 1152),
        ("tone.ogg", "libopus", 48_000, 960),
        ("tone.flac", "flac", 22_050, 1024),
    ],
)
def test_decode__compressed_formats(
    tmp_path: Path, name: str, codec: str, rate: int, frame_size: int
) -> None:
    path = encode(tmp_path / name, sine(3.0, rate), rate, codec, frame_size)
    chunks, media = cut(url_of(path))
    samples = np.concatenate([c.audio for c in chunks])
    assert media.duration == pytest.approx(3.0, abs=0.1)
    assert peak_hz(samples) == pytest.approx(440, abs=2)


@pytest.mark.parametrize(
    ("name", "content", "phrase"),
    [
        ("notes.txt", b"hello world\n" * 50, ""),  # FFmpeg may open it as a "tty" video
        ("empty.wav", b"", "not a media file"),
        ("noise.mp3", bytes(range(256)) * 40, ""),
    ],
)
def test_decode__non_media_is_undecodable_and_permanent(
    tmp_path: Path, name: str, content: bytes, phrase: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    error = fail(url_of(path))
    assert error.reason == "UndecodableMedia"
    assert error.permanent is True
    assert phrase in error.message
    assert url_of(path) in error.message


def test_decode__image_has_no_audio_stream(tmp_path: Path) -> None:
    error = fail(url_of(png(tmp_path / "red.png")))
    assert (error.reason, error.permanent) == ("UndecodableMedia", True)
    assert "no audio stream" in error.message


def test_decode__wav_without_samples(tmp_path: Path) -> None:
    path = tmp_path / "silent.wav"
    path.write_bytes(wav_bytes(np.zeros(0, np.float32), RATE))
    error = fail(url_of(path))
    assert (error.reason, error.permanent) == ("UndecodableMedia", True)
    assert "no audio samples" in error.message


def test_decode__longer_than_max_seconds(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "long.wav", 6.0)
    error = fail(url_of(path), options(max_seconds=5.0))
    assert (error.reason, error.permanent) == ("SourceTooLarge", True)


# --- local files ----------------------------------------------------------------------------


def test_file__missing_is_not_found_and_permanent(tmp_path: Path) -> None:
    url = url_of(tmp_path / "nope.wav")
    error = fail(url)
    assert (error.reason, error.permanent) == ("SourceNotFound", True)
    assert error.message == f"{url}: no such file"


def test_file__directory_is_not_found(tmp_path: Path) -> None:
    error = fail(url_of(tmp_path))
    assert (error.reason, error.permanent) == ("SourceNotFound", True)


def test_file__larger_than_max_bytes(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "tone.wav", 1.0)
    error = fail(url_of(path), options(max_bytes=1000))
    assert (error.reason, error.permanent) == ("SourceTooLarge", True)
    assert "limit is 1000 bytes" in error.message


def test_file__escaped_path_and_localhost(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "a tone.wav", 1.0)
    url = "file://localhost" + url_of(path).removeprefix("file://")
    assert "%20" in url
    assert cut(url)[1].duration == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize(
    "url", ["ftp://example.com/a.wav", "s3://bucket/a.wav", "file://otherhost/a.wav"]
)
def test_source__unsupported_url_is_rejected(url: str) -> None:
    error = fail(url)
    assert (error.reason, error.permanent) == ("SourceRejected", True)
    assert url in error.message


# --- chunking -------------------------------------------------------------------------------


def test_split__fixed_lengths_and_a_partial_last_chunk(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "tone.wav", 65.5, rate=RATE, channels=1)
    chunks, media = cut(url_of(path), options(chunk_seconds=30.0))
    assert [c.index for c in chunks] == [0, 1, 2]
    assert [c.start for c in chunks] == [0.0, 30.0, 60.0]
    assert [c.duration for c in chunks] == pytest.approx([30.0, 30.0, 5.5])
    assert [len(c.audio) for c in chunks] == [30 * RATE, 30 * RATE, 5.5 * RATE]
    assert [(c.first, c.end) for c in chunks] == [
        (0, 480_000),
        (480_000, 960_000),
        (960_000, 1_048_000),
    ]
    assert [c.last for c in chunks] == [False, False, True]
    assert media.duration == pytest.approx(65.5)


def test_split__exact_multiple_has_no_empty_chunk() -> None:
    chunks = split(sine(20.0, RATE), RATE, 10.0)
    assert [c.duration for c in chunks] == [10.0, 10.0]


def test_split__chunks_are_contiguous_and_cover_every_sample() -> None:
    rng = np.random.default_rng(7)
    samples = (rng.standard_normal(47 * RATE) * 0.1).astype(np.float32)
    samples[9 * RATE : int(9.3 * RATE)] = 0.0  # pauses for the cuts to snap to
    samples[18 * RATE : int(18.2 * RATE)] = 0.0
    chunks = split(samples, RATE, 10.0)
    ends = [c.start + c.duration for c in chunks]
    assert [c.start for c in chunks[1:]] == pytest.approx(ends[:-1])
    assert [c.first for c in chunks[1:]] == [c.end for c in chunks[:-1]]
    assert np.array_equal(np.concatenate([c.audio for c in chunks]), samples)
    assert all(c.duration <= 10.0 for c in chunks)


def test_split__cut_moves_back_into_a_pause_within_the_snap_window() -> None:
    rng = np.random.default_rng(1)
    samples = (rng.standard_normal(40 * RATE) * 0.1).astype(np.float32)
    samples[int(28.5 * RATE) : int(28.8 * RATE)] = 0.0
    first = split(samples, RATE, 30.0)[0]
    assert 28.5 < first.duration < 28.8


def test_split__pause_outside_the_snap_window_is_ignored() -> None:
    rng = np.random.default_rng(2)
    samples = (rng.standard_normal(40 * RATE) * 0.1).astype(np.float32)
    samples[int(26.0 * RATE) : int(27.0 * RATE)] = 0.0  # 3 s before the cut: too far back
    assert split(samples, RATE, 30.0)[0].duration == 30.0


def test_load_job_media__spec_chunk_seconds_overrides_the_default(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "tone.wav", 25.0, rate=RATE, channels=1)
    with audio.load_job_media(job(url_of(path), chunk_seconds=10), options()) as media:
        assert media.cutting.chunk_seconds == 10.0
        assert [c.duration for c in media.chunks()] == pytest.approx([10.0, 10.0, 5.0])
    with audio.load_job_media(job(url_of(path)), options(chunk_seconds=30)) as default:
        assert len(list(default.chunks())) == 1


# --- pure helpers ---------------------------------------------------------------------------


def test_encode_wav__16_bit_mono_round_trip() -> None:
    samples = sine(0.5, RATE)
    samples[0] = 2.0  # out of range: clipped, not wrapped
    with wave.open(io.BytesIO(audio.encode_wav(samples, RATE))) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, RATE)
        back = np.frombuffer(w.readframes(w.getnframes()), "<i2") / 32767.0
    assert back[0] == pytest.approx(1.0)
    assert np.allclose(back[1:], samples[1:], atol=1e-4)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, None),
        (206, None),
        (404, ("SourceNotFound", True)),
        (410, ("SourceNotFound", True)),
        (400, ("SourceRejected", True)),
        (401, ("SourceRejected", True)),
        (403, ("SourceRejected", True)),
        (408, ("SourceUnavailable", False)),
        (429, ("SourceUnavailable", False)),
        (500, ("SourceUnavailable", False)),
        (503, ("SourceUnavailable", False)),
    ],
)
def test_classify_http_status(status: int, expected: tuple[str, bool] | None) -> None:
    assert classify_http_status(status) == expected


def test_display_url__hides_credentials() -> None:
    shown = display_url("https://user:secret@host.example:8443/a/b.mp3?sig=XYZ&x=1")
    assert shown == "https://***@host.example:8443/a/b.mp3?…"
    assert display_url("file:///data/a.wav") == "file:///data/a.wav"


# --- http(s) --------------------------------------------------------------------------------


class Server:
    """A local HTTP server with fixed routes; `release` lets a stalled handler finish."""

    def __init__(self, wav: bytes) -> None:
        self.wav = wav
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                outer.route(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = False  # server_close() joins the handler threads
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="http-stub")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def route(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?")[0]
        if path == "/tone.wav":
            self.send(h, 200, self.wav)
        elif path == "/redirect":
            h.send_response(302)
            h.send_header("Location", "/tone.wav")
            h.send_header("Content-Length", "0")
            h.end_headers()
        elif path == "/text.txt":
            self.send(h, 200, b"this is not audio\n" * 100)
        elif path == "/gone":
            self.send(h, 410, b"gone")
        elif path == "/forbidden":
            self.send(h, 403, b"no")
        elif path == "/error":
            self.send(h, 500, b"boom")
        elif path == "/busy":
            self.send(h, 429, b"slow down")
        elif path == "/big-declared":
            self.send(h, 200, self.wav)  # Content-Length says it all
        elif path == "/big-undeclared":
            h.send_response(200)  # no Content-Length: HTTP/1.0 body until close
            h.end_headers()
            for _ in range(64):
                h.wfile.write(b"\0" * 1024)
        elif path == "/slow":
            h.send_response(200)
            h.send_header("Content-Length", str(len(self.wav)))
            h.end_headers()
            h.wfile.write(self.wav[:100])
            h.wfile.flush()
            self.release.wait(10)  # stall past the client's read timeout
        else:
            self.send(h, 404, b"not found")

    @staticmethod
    def send(h: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server(wav_bytes(sine(3.0, 22_050), 22_050))
    s.thread.start()
    try:
        yield s
    finally:
        s.release.set()
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join(5)


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """Where downloads go; every test checks it is empty afterwards."""
    d = tmp_path / "downloads"
    d.mkdir()
    yield d
    assert list(d.iterdir()) == []


def http_options(workdir: Path, **kw: object) -> audio.MediaOptions:
    return options(workdir=workdir, http_timeout=0.5, **kw)


def test_http__200_wav_is_downloaded_decoded_and_removed(server: Server, workdir: Path) -> None:
    with audio.load_media(server.base + "/tone.wav?token=abc", http_options(workdir)) as media:
        assert len(list(workdir.iterdir())) == 1, "the download lives while the media is open"
        [chunk] = media.chunks()
    assert media.duration == pytest.approx(3.0, abs=0.01)
    assert peak_hz(chunk.audio) == pytest.approx(440, abs=2)
    digest = hashlib.sha256(server.wav).hexdigest()
    assert media.cutting.source == f"sha256:{digest}"


def test_http__redirect_is_followed(server: Server, workdir: Path) -> None:
    assert cut(server.base + "/redirect", http_options(workdir))[1].duration == pytest.approx(
        3.0, abs=0.01
    )


@pytest.mark.parametrize(
    ("path", "reason", "permanent", "status"),
    [
        ("/missing.wav", "SourceNotFound", True, "404"),
        ("/gone", "SourceNotFound", True, "410"),
        ("/forbidden", "SourceRejected", True, "403"),
        ("/error", "SourceUnavailable", False, "500"),
        ("/busy", "SourceUnavailable", False, "429"),
    ],
)
def test_http__status_classification(
    server: Server, workdir: Path, path: str, reason: str, permanent: bool, status: str
) -> None:
    error = fail(server.base + path, http_options(workdir))
    assert (error.reason, error.permanent) == (reason, permanent)
    assert error.message.startswith(f"{server.base}{path}: HTTP {status}")
    assert "\n" not in error.message


def test_http__non_audio_body_is_undecodable(server: Server, workdir: Path) -> None:
    error = fail(server.base + "/text.txt", http_options(workdir))
    assert (error.reason, error.permanent) == ("UndecodableMedia", True)


def test_http__read_timeout_is_retriable(server: Server, workdir: Path) -> None:
    error = fail(server.base + "/slow", http_options(workdir))
    assert (error.reason, error.permanent) == ("SourceUnavailable", False)
    assert "timed out" in error.message
    assert server.base + "/slow" in error.message


def test_http__declared_size_over_the_limit(server: Server, workdir: Path) -> None:
    error = fail(server.base + "/big-declared", http_options(workdir, max_bytes=10_000))
    assert (error.reason, error.permanent) == ("SourceTooLarge", True)


def test_http__streamed_size_over_the_limit(server: Server, workdir: Path) -> None:
    error = fail(server.base + "/big-undeclared", http_options(workdir, max_bytes=10_000))
    assert (error.reason, error.permanent) == ("SourceTooLarge", True)


def test_http__connection_refused_is_retriable(workdir: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    error = fail(f"http://127.0.0.1:{port}/a.wav", http_options(workdir))
    assert (error.reason, error.permanent) == ("SourceUnavailable", False)
    assert f"127.0.0.1:{port}/a.wav" in error.message


def test_http__credentials_are_not_in_the_message(server: Server, workdir: Path) -> None:
    url = server.base.replace("http://", "http://user:hunter2@") + "/missing.wav?sig=s3cr3t"
    error = fail(url, http_options(workdir))
    assert "hunter2" not in error.message
    assert "s3cr3t" not in error.message
