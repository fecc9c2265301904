"""Voice-like test signals, the same on every machine (numpy only: the reference script that
made `reference.json` with Torch and librosa imports this file by its path).

Each is a glottal pulse train (a pitch that glides) through three formant resonators, with
a little noise, at 16 kHz: close enough to speech that the speaker model's features and
vectors are exercised over their usual range, made from seeds rather than stored audio.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

RATE = 16_000
# (seed, pitch in Hz, formants in Hz, seconds, level)
VOICES = (
    (1, 110.0, (700.0, 1200.0, 2500.0), 2.0, 0.3),
    (2, 210.0, (850.0, 1600.0, 2900.0), 2.0, 0.05),
    (3, 150.0, (400.0, 2000.0, 2600.0), 1.2, 0.5),
    (4, 95.0, (600.0, 1000.0, 2400.0), 2.0, 0.002),
)


def voice(seed: int, pitch: float, formants: tuple[float, ...], seconds: float,
          level: float) -> npt.NDArray[np.float32]:  # fmt: skip
    rng = np.random.default_rng(seed)
    n = round(seconds * RATE)
    t = np.arange(n) / RATE
    f0 = pitch * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t + seed))
    phase = np.cumsum(f0) / RATE
    pulses = (np.diff(np.floor(phase), prepend=0) > 0).astype(np.float64)
    out = pulses.copy()
    for f in formants:  # a two-pole resonator per formant
        r = np.exp(-np.pi * 80.0 / RATE)
        a1, a2 = -2 * r * np.cos(2 * np.pi * f / RATE), r * r
        y = np.zeros(n)
        for i in range(n):
            y[i] = out[i] - a1 * (y[i - 1] if i else 0) - a2 * (y[i - 2] if i > 1 else 0)
        out = y
    out += 0.01 * rng.standard_normal(n) * np.abs(out).max()
    out *= level / np.abs(out).max()
    return out.astype(np.float32)


def all_voices() -> list[npt.NDArray[np.float32]]:
    return [voice(*v) for v in VOICES]
