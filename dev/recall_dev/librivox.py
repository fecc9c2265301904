"""Real read speech: the LibriVox clips Debian's `pocketsphinx-testdata` ships (chapter 1 of
Sense and Sensibility, a public-domain LibriVox recording), with their transcription.

    clips()                         # [(path, "he was not an ill disposed young man"), ...]
    recording(out, repeat=4)        # the clips joined, `repeat` times over: (seconds, text)

`hack/install-system-deps.sh` installs the package; without it `SpeechUnavailable` says so.
The clips are 16 kHz mono 16-bit WAV, 3 to 7 s each, 25 s in all.
"""

from __future__ import annotations

import re
import wave
from pathlib import Path

from recall_dev.speech import SpeechUnavailable

DIRECTORY = Path("/usr/share/pocketsphinx/test/data/librivox")


def clips(directory: Path = DIRECTORY) -> list[tuple[Path, str]]:
    """Every clip and what is said in it, in the order of the transcription."""
    listing = directory / "transcription"
    if not listing.is_file():
        raise SpeechUnavailable(
            f"{listing} is missing: the LibriVox clips come with Debian's pocketsphinx-testdata "
            "(hack/install-system-deps.sh installs it)"
        )
    out = []
    for line in listing.read_text().splitlines():
        match = re.match(r"<s>\s*(.*?)\s*</s>\s*\((.+)\)", line.strip())
        if match:
            out.append((directory / f"{match.group(2)}.wav", match.group(1)))
    return out


def recording(out: Path, *, repeat: int = 1, pause_seconds: float = 0.8) -> tuple[float, str]:
    """The clips joined with `pause_seconds` of silence after each, `repeat` times over, as one
    WAV at `out`; its seconds and what is said in it."""
    frames: list[bytes] = []
    said: list[str] = []
    params: tuple[int, int, int] | None = None
    for _ in range(repeat):
        for path, text in clips():
            with wave.open(str(path)) as w:
                params = (w.getnchannels(), w.getsampwidth(), w.getframerate())
                frames.append(w.readframes(w.getnframes()))
            channels, width, rate = params
            frames.append(b"\0" * round(pause_seconds * rate) * channels * width)
            said.append(text)
    if params is None:
        raise SpeechUnavailable("no LibriVox clips found")
    channels, width, rate = params
    with wave.open(str(out), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(b"".join(frames))
    return sum(len(f) for f in frames) / (rate * channels * width), " ".join(said)
