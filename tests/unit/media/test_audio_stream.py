"""Streaming decode and cut: the same cuts as the whole-array algorithm, bounded memory, and
resumes that continue exactly where a checkpoint ended (by seeking, or by decoding again).

Media files are generated in `tmp_path` (a module-scoped directory for the encoded ones).
"""

from __future__ import annotations

import os
import tracemalloc
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt
import pytest
from structlog.testing import capture_logs

from recall import media as audio
from recall.media import container, decode
from recall.media.common import PREROLL_SECONDS, QUIET_SECONDS, QUIETER, STEP_SECONDS
from recall.media.cut import Cutter, split
from recall.media.decode import Decoder
from recall.media.types import Chunk, Resume
from recall.resources.errors import JobFailure
from recall_dev.twin.clock import FakeClock
from tests.audio import encode

RATE = audio.SAMPLE_RATE
Samples = npt.NDArray[np.float32]


# --- the whole-array algorithm the streaming cutter replaces (kept here as the reference) -----


def whole_array_bounds(
    samples: Samples, rate: int, chunk_seconds: float, snap_seconds: float
) -> list[tuple[int, int]]:
    size = max(1, round(chunk_seconds * rate))
    step = max(1, round(STEP_SECONDS * rate))
    width = max(1, round(QUIET_SECONDS / STEP_SECONDS))
    steps_back = min(int(snap_seconds * rate), size // 2) // step
    n = len(samples)
    bounds: list[tuple[int, int]] = []
    start = 0
    while n - start > size:
        cut = start + size
        if steps_back >= width:
            lo = cut - steps_back * step
            hops = samples[lo:cut].astype(np.float64).reshape(steps_back, step)
            hop_energy = np.sum(hops * hops, axis=1)
            stretch = np.convolve(hop_energy, np.ones(width), mode="valid")
            quietest = len(stretch) - 1 - int(np.argmin(stretch[::-1]))
            if stretch[quietest] < QUIETER * stretch[-1]:
                cut = lo + quietest * step + (width * step) // 2
        bounds.append((start, cut))
        start = cut
    if n > start:
        bounds.append((start, n))
    return bounds


# --- helpers --------------------------------------------------------------------------------


def speechlike(seconds: float, rate: int = RATE, seed: int = 0) -> Samples:
    """Noise bursts ("words") of 0.2-0.8 s separated by pauses of 0.05-0.6 s."""
    rng = np.random.default_rng(seed)
    out = np.zeros(round(seconds * rate), np.float32)
    t = 0
    while t < len(out):
        word = int(rng.uniform(0.2, 0.8) * rate)
        out[t : t + word] = rng.standard_normal(min(word, len(out) - t)) * rng.uniform(0.05, 0.3)
        t += word + int(rng.uniform(0.05, 0.6) * rate)
    return out


def blocks(samples: Samples, sizes: list[int]) -> Iterator[Samples]:
    """`samples` in blocks cycling through `sizes`."""
    i, k = 0, 0
    while i < len(samples):
        yield samples[i : i + sizes[k % len(sizes)]]
        i += sizes[k % len(sizes)]
        k += 1


def streamed(cutter: Cutter, source: Iterator[Samples]) -> list[Chunk]:
    out: list[Chunk] = []
    for block in source:
        out.extend(cutter.feed(block))
    out.extend(cutter.finish())
    return out


def write_wav(path: Path, samples: Samples, rate: int) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def resample(samples: Samples, rate: int) -> Samples:
    """`samples` (at RATE) at `rate`, by linear interpolation: good enough for test sources."""
    n = round(len(samples) * rate / RATE)
    return np.interp(np.arange(n) * RATE / rate, np.arange(len(samples)), samples).astype(
        np.float32
    )


def every_chunk(url: str, opts: audio.MediaOptions, resume: Resume | None = None) -> list[Chunk]:
    with audio.load_media(url, opts) as media:
        return list(media.chunks(resume))


def same(a: list[Chunk], b: list[Chunk]) -> bool:
    key = [(c.index, c.first, c.end, c.tail, c.last) for c in a]
    return key == [(c.index, c.first, c.end, c.tail, c.last) for c in b] and all(
        np.array_equal(x.audio, y.audio) for x, y in zip(a, b, strict=True)
    )


# --- the streaming cutter -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chunk_seconds", "snap_seconds", "sizes"),
    [
        (10.0, 2.0, [1024]),
        (10.0, 2.0, [1, 7, 333, 16_000, 250_000]),  # blocks smaller and larger than a chunk
        (7.5, 1.0, [441, 960]),
        (5.0, 4.0, [2048]),  # the snap window is capped at half a chunk
        (10.0, 0.0, [1152]),  # no snapping
        (6.0, 0.05, [512]),  # a window shorter than one pause: no snapping
    ],
)
def test_cutter__same_cuts_as_the_whole_array(
    chunk_seconds: float, snap_seconds: float, sizes: list[int]
) -> None:
    samples = speechlike(95.3, seed=int(chunk_seconds * 10))
    expected = whole_array_bounds(samples, RATE, chunk_seconds, snap_seconds)
    assert len(expected) > len(samples) / RATE / chunk_seconds, "snapping made chunks shorter"
    chunks = streamed(Cutter(RATE, chunk_seconds, snap_seconds), blocks(samples, sizes))
    assert [(c.first, c.end) for c in chunks] == expected
    assert [c.index for c in chunks] == list(range(len(expected)))
    assert [c.last for c in chunks] == [False] * (len(expected) - 1) + [True]
    assert np.array_equal(np.concatenate([c.audio for c in chunks]), samples)


@pytest.mark.parametrize("seconds", [0.001, 10.0, 20.0, 20.0001])
def test_cutter__edges_match_the_whole_array(seconds: float) -> None:
    samples = speechlike(seconds, seed=3)
    chunks = streamed(Cutter(RATE, 10.0), blocks(samples, [999]))
    assert [(c.first, c.end) for c in chunks] == whole_array_bounds(samples, RATE, 10.0, 2.0)


def test_cutter__a_resume_at_a_cut_gives_the_same_cuts_after_it() -> None:
    samples = speechlike(80.0, seed=5)
    full = streamed(Cutter(RATE, 10.0), blocks(samples, [4096]))
    k = 4
    after = full[k - 1]
    resumed = Cutter(RATE, 10.0, start=after.end, index=k)
    resumed.recent = samples[after.end - resumed.tail_samples : after.end]
    rest = streamed(resumed, blocks(samples[after.end :], [1000]))
    assert same(rest, full[k:])


def test_cutter__memory_stays_bounded_over_an_hour_of_audio() -> None:
    """An hour at 16 kHz is 230 MB of float32; the cutter holds about one chunk."""
    rng = np.random.default_rng(0)
    block = 16_000  # one second per block, generated as it is fed

    def hour() -> Iterator[Samples]:
        for i in range(3600):
            loud = (rng.standard_normal(block) * 0.1).astype(np.float32)
            loud[: (i % 7) * 1000] = 0.0  # a pause now and then
            yield loud

    tracemalloc.start()
    try:
        cutter = Cutter(RATE, 30.0)
        count = 0
        for samples in hour():
            for chunk in cutter.feed(samples):
                count += 1
                assert chunk.end - chunk.first <= 30 * RATE
        count += len(list(cutter.finish()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count >= 120
    assert peak < 12 * 1024**2, f"peak {peak / 1024**2:.1f} MiB while cutting an hour"


def test_split__is_the_cutter_over_one_array() -> None:
    samples = speechlike(33.0, seed=9)
    assert [(c.first, c.end) for c in split(samples, RATE, 10.0)] == whole_array_bounds(
        samples, RATE, 10.0, 2.0
    )


# --- decoding lazily ------------------------------------------------------------------------


def test_media__decodes_lazily_with_bounded_memory(tmp_path: Path) -> None:
    """Ten minutes at 8 kHz decode to 38 MB at 16 kHz; the iteration holds about a chunk."""
    rng = np.random.default_rng(1)
    path = tmp_path / "long.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        for _ in range(10):  # a minute at a time
            w.writeframes((rng.standard_normal(480_000) * 3000).astype("<i2").tobytes())
    tracemalloc.start()
    try:
        with audio.load_media(path.as_uri(), audio.MediaOptions(chunk_seconds=30.0)) as media:
            estimated = media.duration
            count = sum(1 for _ in media.chunks())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert estimated == pytest.approx(600.0)
    assert media.duration == pytest.approx(600.0, abs=0.01)
    assert count == 20
    assert peak < 16 * 1024**2, f"peak {peak / 1024**2:.1f} MiB for 38 MB of decoded audio"


def pcm_wav(path: Path, codec: str, rate: int, layout: str, seconds: float) -> Path:
    """Noise over a tone as a WAV of `codec` samples (the format chunk FFmpeg writes: an
    extensible one for more than two channels)."""
    with av.open(str(path), "w", format="wav") as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        assert isinstance(stream, av.AudioStream)
        fmt = stream.codec_context.format.name
        channels = len(stream.layout.channels)
        n = round(seconds * rate)
        tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(n) / rate)
        noise = 0.05 * np.random.default_rng(3).standard_normal((channels, n))
        samples = (tone + noise).astype(np.float32).T.reshape(1, -1)  # interleaved
        if fmt.startswith("s16"):
            data: npt.NDArray[Any] = (samples * 32767).astype(np.int16)
        elif fmt.startswith("s32"):
            data = (samples * 2**30).astype(np.int32)
        else:
            data = samples
        frame = av.AudioFrame.from_ndarray(data, format=fmt.rstrip("p"), layout=layout)
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return path


def decoded_by_default(
    path: Path, monkeypatch: pytest.MonkeyPatch, channel: int | None = None
) -> Samples:
    """`path` decoded as FFmpeg reads it by default (4,096-byte packets)."""
    with monkeypatch.context() as m:
        m.setattr(container, "wav_options", lambda _path: {})
        decoder = Decoder(path, path.as_uri(), channel=channel)
        return np.concatenate(list(decoder.from_start()))


@pytest.mark.parametrize(
    ("codec", "rate", "layout"),
    [
        ("pcm_s16le", 16_000, "mono"),
        ("pcm_f32le", 48_000, "stereo"),
        ("pcm_s32le", 22_050, "5.1"),  # WAVE_FORMAT_EXTENSIBLE
    ],
)
def test_decoder__a_pcm_wav_is_read_a_second_a_packet_to_the_same_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str, rate: int, layout: str
) -> None:
    path = pcm_wav(tmp_path / "a.wav", codec, rate, layout, seconds=12.5)
    opened, stream = container.open_audio(path, "a.wav")
    with opened:
        packets = sum(1 for p in opened.demux(stream) if p.size)
        assert packets <= 14, f"{packets} packets for 12.5 s"
    for channel in (None, 1) if layout != "mono" else (None,):
        decoder = Decoder(path, path.as_uri(), channel=channel)
        got = np.concatenate(list(decoder.from_start()))
        assert np.array_equal(got, decoded_by_default(path, monkeypatch, channel))
    # A resume by seeking lands on the same samples as decoding from the start.
    full = Decoder(path, path.as_uri())
    rest = np.concatenate(list(full.from_start(100_003)))
    resumed = Decoder(path, path.as_uri()).seek(100_003, decode.tail_signature(full.tail))
    assert resumed is not None
    assert np.array_equal(np.concatenate(list(resumed)), rest)


def test_decoder__only_a_pcm_wav_is_read_in_larger_packets(tmp_path: Path) -> None:
    pcm = pcm_wav(tmp_path / "pcm.wav", "pcm_s16le", 16_000, "mono", seconds=1.0)
    assert container.wav_options(pcm)["max_size"] == "32000"  # a second of 16-bit mono
    # A format chunk after another chunk of odd length (padded to even) is found.
    raw = pcm.read_bytes()
    junk = b"JUNK" + (3).to_bytes(4, "little") + b"abc\0"
    moved = tmp_path / "junk.wav"
    moved.write_bytes(raw[:12] + junk + raw[12:])
    assert container.wav_options(moved)["max_size"] == "32000"
    got = np.concatenate(list(Decoder(moved, moved.as_uri()).from_start()))
    assert np.array_equal(got, np.concatenate(list(Decoder(pcm, pcm.as_uri()).from_start())))
    # Compressed samples in a WAV, other containers and no file at all: FFmpeg's defaults.
    adpcm = pcm_wav(tmp_path / "adpcm.wav", "adpcm_ms", 16_000, "mono", seconds=1.0)
    flac = encode(tmp_path / "a.flac", np.zeros(16_000, np.float32), 16_000, "flac", 1024)
    for other in (adpcm, flac, tmp_path / "missing.wav"):
        assert container.wav_options(other) == {}


def test_media__progress_total_is_honest_and_exact_at_the_end(tmp_path: Path) -> None:
    samples = speechlike(125.0, seed=2)
    path = write_wav(tmp_path / "talk.wav", samples, RATE)
    with audio.load_media(path.as_uri(), audio.MediaOptions(chunk_seconds=10.0)) as media:
        totals = [media.chunks_total(0, 0)]
        chunks = []
        for chunk in media.chunks():
            chunks.append(chunk)
            totals.append(media.chunks_total(chunk.index + 1, chunk.end, finished=chunk.last))
    assert totals[0] == 13  # 125 s in 10 s chunks, from the container's duration
    assert totals[-1] == len(chunks) > 13  # snapped cuts made more, shorter chunks
    assert all(done < total for done, total in enumerate(totals[:-1], start=0))
    assert all(total - i >= 1 for i, total in enumerate(totals[1:-1], start=1))


def test_media__longer_than_max_seconds_is_refused_before_decoding(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "long.wav", speechlike(20.0), RATE)
    with pytest.raises(JobFailure) as info:
        audio.load_media(path.as_uri(), audio.MediaOptions(max_seconds=10.0))
    assert (info.value.reason, info.value.permanent) == ("SourceTooLarge", True)
    assert "the limit is 10 s" in info.value.message


def test_media__cutting_records_the_settings_and_the_source(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "a.wav", speechlike(3.0), RATE)
    opts = audio.MediaOptions(chunk_seconds=10.0)
    with audio.load_media(path.as_uri(), opts) as media:
        first = media.cutting
    st = path.stat()
    assert first.source == f"file:size={st.st_size};mtime={st.st_mtime_ns}"
    assert (first.chunk_seconds, first.snap_seconds, first.rate) == (10.0, 2.0, RATE)
    with audio.load_media(path.as_uri(), audio.MediaOptions(chunk_seconds=20.0)) as media:
        assert media.cutting.differences(first) == ["chunk_seconds 10 → 20"]
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with audio.load_media(path.as_uri(), opts) as media:
        assert media.cutting.differences(first) == ["the source changed"]


# --- resume ---------------------------------------------------------------------------------

SOURCE_SECONDS = 100.0


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same speech-like audio as WAV (44.1 kHz), FLAC, MP3 and Opus."""
    d = tmp_path_factory.mktemp("sources")
    talk = speechlike(SOURCE_SECONDS, seed=11)
    return {
        "wav": write_wav(d / "talk.wav", resample(talk, 44_100), 44_100),
        "flac": encode(d / "talk.flac", resample(talk, 22_050), 22_050, "flac", 1024),
        "mp3": encode(d / "talk.mp3", resample(talk, 44_100), 44_100, "libmp3lame", 1152),
        "opus": encode(d / "talk.ogg", resample(talk, 48_000), 48_000, "libopus", 960),
    }


@pytest.mark.parametrize("kind", ["wav", "flac", "mp3", "opus"])
def test_resume__by_seeking_continues_exactly_after_the_checkpointed_cut(
    sources: dict[str, Path], kind: str
) -> None:
    url, opts = sources[kind].as_uri(), audio.MediaOptions(chunk_seconds=10.0)
    full = every_chunk(url, opts)
    assert len(full) > 10
    for k in (3, len(full) - 2):
        with audio.load_media(url, opts) as media:
            rest = list(media.chunks(full[k - 1].resume()))
            assert media.resumed_by == "seek"
        assert same(rest, full[k:]), f"resume at chunk {k} differs"
        assert rest[0].first == full[k - 1].end  # no gap, no overlap


def test_media__the_logged_fetch_and_resume_times_are_read_from_the_options_clock(
    sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    read = clock.monotonic

    def ticking() -> float:  # every read one second after the one before
        clock.step(1.0)
        return read()

    monkeypatch.setattr(clock, "monotonic", ticking)
    url = sources["wav"].as_uri()
    opts = audio.MediaOptions(chunk_seconds=10.0, clock=clock)
    full = every_chunk(url, audio.MediaOptions(chunk_seconds=10.0))
    with capture_logs() as logs, audio.load_media(url, opts) as media:
        next(media.chunks(full[3].resume()))
    timed = {e["event"]: e.get("elapsed", e.get("seconds")) for e in logs}
    assert (timed["media_opened"], timed["media_resumed"]) == (1.0, 1.0)


def test_resume__without_a_signature_decodes_from_the_start(sources: dict[str, Path]) -> None:
    url, opts = sources["mp3"].as_uri(), audio.MediaOptions(chunk_seconds=10.0)
    full = every_chunk(url, opts)
    point = full[5].resume()
    for resume in (
        Resume(point.chunks, point.position, ""),
        Resume(point.chunks, point.position, "0badc0de"),
    ):
        with audio.load_media(url, opts) as media:
            rest = list(media.chunks(resume))
            assert media.resumed_by == "decode"
        assert same(rest, full[6:])


def test_resume__at_the_end_yields_nothing_and_knows_the_duration(
    sources: dict[str, Path],
) -> None:
    url, opts = sources["flac"].as_uri(), audio.MediaOptions(chunk_seconds=10.0)
    full = every_chunk(url, opts)
    with audio.load_media(url, opts) as media:
        assert list(media.chunks(full[-1].resume())) == []
        assert media.duration == pytest.approx(full[-1].end / RATE)


def test_resume__past_the_end_of_the_source_is_invalid(sources: dict[str, Path]) -> None:
    url = sources["wav"].as_uri()
    beyond = Resume(chunks=20, position=round((SOURCE_SECONDS + 30) * RATE), tail="12345678")
    with (
        audio.load_media(url, audio.MediaOptions(chunk_seconds=10.0)) as media,
        pytest.raises(audio.ResumeInvalid) as info,
    ):
        list(media.chunks(beyond))
    assert "before the checkpoint's position" in info.value.message


def test_resume__seeking_costs_less_than_decoding_again(sources: dict[str, Path]) -> None:
    """The seek decodes a few seconds, not the whole prefix (counted, not timed)."""
    url, opts = sources["opus"].as_uri(), audio.MediaOptions(chunk_seconds=10.0)
    full = every_chunk(url, opts)
    last, rest = full[-2], full[-1].end - full[-2].end
    decoded: dict[str, int] = {}
    how = ""
    original = Decoder._resampled

    def counting(self: Decoder, frames: Iterator[object], position: int) -> Iterator[Samples]:
        for block in original(self, frames, position):
            decoded[how] = decoded.get(how, 0) + len(block)
            yield block

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Decoder, "_resampled", counting)
        for kind, resume in (("seek", last.resume()), ("decode", Resume(last.index + 1, last.end))):
            how = kind
            with audio.load_media(url, opts) as media:
                list(media.chunks(resume))
    assert decoded["decode"] - rest == last.end  # everything before the position again
    assert decoded["seek"] - rest < (PREROLL_SECONDS + 2) * RATE  # a few seconds
