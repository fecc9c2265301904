"""Decoding at the edges: 8 or more channels, codecs a seek does not reproduce (AAC), a stream
whose sample rate or layout changes midway, encoder padding at the length limit, malformed
URLs, and a few undecodable packets in an otherwise good file.

Media files are made with PyAV in `tmp_path`, a few seconds each.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import pytest
from structlog.testing import capture_logs

from recall import media as audio
from recall.media import container, decode
from recall.media.decode import Decoder
from recall.media.fetch import display_url, fetch
from recall.media.types import Chunk
from recall.resources.errors import JobFailure
from tests.audio import encode

RATE = audio.SAMPLE_RATE
Samples = npt.NDArray[np.float32]
LAYOUTS = {1: "mono", 2: "stereo", 8: "7.1", 16: "16c"}  # "16c" is FFmpeg's 9.1.6


def tones(channels: int, rate: int, seconds: float) -> Samples:
    """A different tone on every channel, with a little noise: (channels, samples)."""
    t = np.arange(round(seconds * rate)) / rate
    rows = [0.2 * np.sin(2 * np.pi * (150 + 70 * c) * t) for c in range(channels)]
    noise = 0.02 * np.random.default_rng(channels).standard_normal((channels, len(t)))
    return (np.stack(rows) + noise).astype(np.float32)


def write(path: Path, samples: Samples, rate: int, codec: str, **options: str) -> Path:
    """`samples` (channels, n) encoded with `codec` into `path`, the container by its suffix."""
    layout = LAYOUTS[len(samples)]
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=rate, layout=layout, options=options)
        assert isinstance(stream, av.AudioStream)
        size = stream.codec_context.frame_size or 1024
        for i in range(0, samples.shape[1], size):
            block = np.ascontiguousarray(samples[:, i : i + size].T.reshape(1, -1))
            frame = av.AudioFrame.from_ndarray(block, format="flt", layout=layout)
            frame.sample_rate, frame.pts = rate, i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def wav(path: Path, samples: Samples, rate: int) -> Path:
    return write(path, samples, rate, "pcm_s16le")


def chunks(url: str, opts: audio.MediaOptions, after: Chunk | None = None) -> list[Chunk]:
    with audio.load_media(url, opts) as media:
        return list(media.chunks(after.resume() if after else None))


def resumed(url: str, opts: audio.MediaOptions, after: Chunk) -> tuple[list[Chunk], str | None]:
    with audio.load_media(url, opts) as media:
        return list(media.chunks(after.resume())), media.resumed_by


def same(a: list[Chunk], b: list[Chunk]) -> bool:
    key = [(c.index, c.channel, c.first, c.end, c.tail, c.last) for c in a]
    return key == [(c.index, c.channel, c.first, c.end, c.tail, c.last) for c in b] and all(
        np.array_equal(x.audio, y.audio) for x, y in zip(a, b, strict=True)
    )


# --- 8 channels or more ---------------------------------------------------------------------


@pytest.mark.parametrize("channels", [8, 16])
def test_split__8_and_16_channels_each_on_its_own(tmp_path: Path, channels: int) -> None:
    """PyAV mishandles planar frames of 8 channels or more (its `to_ndarray` crashed the
    process): each channel comes out as it is, and a resume by seeking is exact."""
    samples = tones(channels, RATE, 12.0)
    url = wav(tmp_path / "many.wav", samples, RATE).as_uri()
    opts = audio.MediaOptions(chunk_seconds=5, snap_seconds=0, split=True)
    whole = chunks(url, opts)
    assert len(whole) == 3 * channels
    for c in range(channels):
        got = np.concatenate([x.audio for x in whole if x.channel == f"ch{c}"])
        assert np.abs(got - samples[c]).max() < 1e-3, f"channel {c}"
    at = whole[3 * (channels - 1) + 1]  # 10 s into the last channel
    rest, by = resumed(url, opts, at)
    assert by == "seek"
    assert same(rest, whole[3 * (channels - 1) + 2 :])


def test_resume__8_channel_opus_split_seeks_exactly(tmp_path: Path) -> None:
    """Opus decodes to planar frames: the seek cuts the first one (not on the resampler's
    grid) without handing PyAV a planar frame of 8 channels."""
    url = write(tmp_path / "many.ogg", tones(8, 48_000, 12.0), 48_000, "libopus").as_uri()
    opts = audio.MediaOptions(chunk_seconds=5, snap_seconds=0, split=True)
    whole = chunks(url, opts)
    assert [c.channel for c in whole] == [f"ch{c}" for c in range(8) for _ in range(3)]
    for k in (4, 3 * 7 + 1):  # inside the second and the last channel
        rest, by = resumed(url, opts, whole[k])
        assert by == "seek"
        assert same(rest, whole[k + 1 :]), f"resume after chunk {k} differs"


def test_dropped__a_planar_frame_of_16_channels_is_cut_in_its_own_format() -> None:
    data = (np.arange(16 * 100, dtype=np.float32) / 1600).reshape(1, -1)  # interleaved
    packed = av.AudioFrame.from_ndarray(data, format="flt", layout="16c")
    packed.sample_rate = 48_000
    planar = decode._converted(packed, "fltp")
    cut = decode._dropped(planar, 7)
    assert (cut.format.name, cut.samples, cut.sample_rate) == ("fltp", 93, 48_000)
    back = decode._converted(cut, "flt").to_ndarray()
    assert np.array_equal(back, data[:, 7 * 16 :])


# --- codecs a seek does not reproduce -------------------------------------------------------


def pns_talk(rate: int, seconds: float = 30.0) -> Samples:
    """A tone with noise at 5-10 s and 22-28 s (coded by noise substitution) and digital
    silence at 17-21 s: a resume at 20 s signs silence, which a seek reproduces exactly, and
    the noise after it is drawn from the AAC decoder's random generator."""
    t = np.arange(round(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * 300 * t)
    rng = np.random.default_rng(5)
    for a, b in ((5, 10), (22, 28)):
        x[a * rate : b * rate] += 0.3 * rng.standard_normal((b - a) * rate)
    x[17 * rate : 21 * rate] = 0.0
    return x.astype(np.float32)[None]


@pytest.mark.parametrize("name", ["talk.m4a", "talk.aac"])
def test_resume__aac_decodes_again_to_the_uninterrupted_samples(tmp_path: Path, name: str) -> None:
    rate = 44_100
    url = write(tmp_path / name, pns_talk(rate), rate, "aac", b="32k").as_uri()
    opts = audio.MediaOptions(chunk_seconds=10.0)
    whole = chunks(url, opts)
    k = next(i for i, c in enumerate(whole) if c.end == 20 * RATE)  # a cut in the silence
    rest, by = resumed(url, opts, whole[k])
    assert by == "decode"
    assert same(rest, whole[k + 1 :])


def test_resume__vorbis_seeks_exactly(tmp_path: Path) -> None:
    rate = 44_100
    samples = np.repeat(pns_talk(rate), 2, axis=0)  # FFmpeg's own encoder: stereo only
    url = write(tmp_path / "talk.ogg", samples, rate, "vorbis", strict="experimental").as_uri()
    opts = audio.MediaOptions(chunk_seconds=7.0)
    whole = chunks(url, opts)
    for k in (1, 2):
        rest, by = resumed(url, opts, whole[k])
        assert by == "seek"
        assert same(rest, whole[k + 1 :])


# --- a stream that changes midway -----------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "split_channels"),
    [
        ((44_100, 1), (48_000, 1), 1),  # the sample rate changes
        ((44_100, 1), (48_000, 2), 1),  # mono, then stereo
        ((48_000, 2), (44_100, 1), 2),  # stereo, then mono: the second channel goes on
    ],
)
def test_decode__concatenated_adts_files_with_another_rate_or_layout(
    tmp_path: Path,
    first: tuple[int, int],
    second: tuple[int, int],
    split_channels: int,
) -> None:
    parts = [
        write(tmp_path / f"{i}.aac", tones(channels, rate, 2.0), rate, "aac").read_bytes()
        for i, (rate, channels) in enumerate((first, second))
    ]
    path = tmp_path / "both.aac"
    path.write_bytes(b"".join(parts))
    mixed = chunks(path.as_uri(), audio.MediaOptions(chunk_seconds=3.0))
    assert 4.0 <= mixed[-1].end / RATE < 4.2  # both parts, with the codec's padding
    split = chunks(path.as_uri(), audio.MediaOptions(chunk_seconds=3.0, split=True))
    assert {c.channel for c in split} == (
        {None} if split_channels == 1 else {f"ch{c}" for c in range(split_channels)}
    )
    for c in split:
        assert np.abs(c.audio[-RATE // 2 :]).max() > 0.05  # the second part is heard


def test_resume__mp3_whose_sample_rate_changes_is_exact(tmp_path: Path) -> None:
    parts = [
        encode(tmp_path / f"{rate}.mp3", tones(1, rate, 8.0)[0], rate, "libmp3lame", 1152)
        for rate in (44_100, 48_000)
    ]
    path = tmp_path / "both.mp3"
    path.write_bytes(b"".join(p.read_bytes() for p in parts))
    opts = audio.MediaOptions(chunk_seconds=3.0, snap_seconds=0)
    whole = chunks(path.as_uri(), opts)
    assert whole[-1].end / RATE > 15.9
    for k in range(1, len(whole) - 1):
        rest, _ = resumed(path.as_uri(), opts, whole[k])
        assert same(rest, whole[k + 1 :]), f"resume after chunk {k} differs"


# --- the length limit -----------------------------------------------------------------------


def test_limit__encoder_padding_at_exactly_the_limit_is_accepted(tmp_path: Path) -> None:
    rate = 44_100
    path = write(tmp_path / "ten.m4a", tones(1, rate, 10.0), rate, "aac")
    assert container.probe(path, path.as_uri()) == pytest.approx(10.0)
    got = chunks(path.as_uri(), audio.MediaOptions(max_seconds=10.0))
    assert got[-1].end > 10 * RATE  # the padding: decoded longer than the limit, accepted


def test_limit__messages_say_how_long_with_enough_precision(tmp_path: Path) -> None:
    path = wav(tmp_path / "long.wav", tones(1, RATE, 10.5), RATE)
    with pytest.raises(JobFailure) as info:
        audio.load_media(path.as_uri(), audio.MediaOptions(max_seconds=10.0))
    assert (info.value.reason, info.value.permanent) == ("SourceTooLarge", True)
    assert info.value.message.endswith(": 10.5 s long, the limit is 10 s")
    decoder = Decoder(path, path.as_uri(), max_samples=10 * RATE)  # no container check
    with pytest.raises(JobFailure) as info:
        list(decoder.from_start())
    assert info.value.message.endswith(": more than 10.1 s long, the limit is 10 s")
    assert container.over_limit(10.1, 10.0) is False
    assert container.over_limit(10.11, 10.0) is True


# --- malformed URLs -------------------------------------------------------------------------


def test_fetch__a_malformed_url_is_rejected_without_its_credentials() -> None:
    with pytest.raises(JobFailure) as info:
        fetch("https://u:pw@[::1/x?sig=2", max_bytes=1, http_timeout=1.0)
    assert (info.value.reason, info.value.permanent) == ("SourceRejected", True)
    message = info.value.message
    assert "\n" not in message and "pw" not in message and "sig" not in message
    assert message == "https://***@[::1/x?…: not a valid URL"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://host:abc/x#access_token=SECRET", "https://host:abc/x"),
        ("https://u:pw@host:abc/a\nb?sig=1#t", "https://***@host:abc/ab?…"),
        ("https://u:pw@[::1/x?sig=2", "https://***@[::1/x?…"),
        ("https://host/x#access_token=SECRET", "https://host/x"),
        # A password holding what ends a URL's host (a token's base64 / + =, a ? or a #).
        ("http://bob:pa/ss@example.com:99999/a", "http://***@example.com:99999/a"),
        ("http://bob:pa?ss@example.com/a", "http://***@example.com/a"),
        ("http://bob:pa#ss@host/x", "http://***@host/x"),
        ("http://bob:123/ss@host/a", "http://***@host/a"),
    ],
)
def test_display_url__hides_fragments_and_keeps_one_line(url: str, shown: str) -> None:
    assert display_url(url) == shown


# --- undecodable packets --------------------------------------------------------------------


def damaged_mp3(tmp_path: Path, seconds: float = 40.0) -> Path:
    """An MP3 with 20 kB of random bytes three quarters through it."""
    rate = 44_100
    good = encode(tmp_path / "good.mp3", tones(1, rate, seconds)[0], rate, "libmp3lame", 1152)
    data = good.read_bytes()
    at = len(data) * 3 // 4
    path = tmp_path / "damaged.mp3"
    path.write_bytes(data[:at] + np.random.default_rng(1).bytes(20_000) + data[at:])
    return path


def test_decode__a_few_bad_packets_are_skipped_and_a_resume_stays_exact(tmp_path: Path) -> None:
    url = damaged_mp3(tmp_path).as_uri()
    opts = audio.MediaOptions(chunk_seconds=5.0)
    with capture_logs() as logs:
        whole = chunks(url, opts)
    skipped = [e for e in logs if e["event"] == "packet_skipped"]
    assert 0 < len(skipped) <= decode.SKIP_IN_A_ROW
    assert all(e["log_level"] == "warning" for e in skipped)
    assert whole[-1].end / RATE > 39.5
    assert whole[2].tail and not whole[-2].tail  # no signature once a packet was skipped
    for k in (2, 5, len(whole) - 2):  # before the damage (by seeking) and after it
        rest, by = resumed(url, opts, whole[k])
        assert by == ("seek" if whole[k].tail else "decode")
        assert same(rest, whole[k + 1 :]), f"resume after chunk {k} differs"


def test_decode__a_mostly_undecodable_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "noise.mp3"
    good = damaged_mp3(tmp_path, seconds=4.0).read_bytes()
    rng = np.random.default_rng(2)
    path.write_bytes(
        good[:2000]
        + b"".join(good[i : i + 400] + rng.bytes(2000) for i in range(2000, len(good), 400))
    )
    with pytest.raises(JobFailure) as info:
        chunks(path.as_uri(), audio.MediaOptions(chunk_seconds=5.0))
    assert (info.value.reason, info.value.permanent) == ("UndecodableMedia", True)
    assert "packets undecodable" in info.value.message
