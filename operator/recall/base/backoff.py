"""Backoff: how long to wait before a retry, as client-go's `wait.Backoff`.

Exponential from `initial` by `factor`, capped at `cap`, then stretched by a random share of
up to `jitter` of itself (client-go's jitter: a retry never comes sooner than the delay, and
clients turned away together come back apart). `steps` bounds the retries where a caller gives
up (None: never). Pure: the random number comes from the caller's `rng` or is given as `u`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.0
    steps: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.cap:
            raise ValueError("a backoff needs 0 < initial <= cap")
        if self.factor < 1 or self.jitter < 0:
            raise ValueError("a backoff needs factor >= 1 and jitter >= 0")

    def base(self, retry: int) -> float:
        """The delay before retry number `retry` (0 is the first), before the jitter."""
        if retry <= 0:
            return self.initial
        # Past the cap the exponent only overflows: stop growing once there.
        grown = self.initial
        for _ in range(retry):
            grown *= self.factor
            if grown >= self.cap:
                return self.cap
        return grown

    def delay(
        self, retry: int, *, u: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds before retry number `retry`: `base(retry)` stretched by `jitter × u` of
        itself, `u` in [0, 1) given or drawn from `rng` (the module's by default)."""
        d = self.base(retry)
        if not self.jitter:
            return d
        share = (rng or random).random() if u is None else u
        return d * (1 + self.jitter * share)

    def exhausted(self, retry: int) -> bool:
        """True once `retry` is past the retries this backoff allows."""
        return self.steps is not None and retry >= self.steps

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The delays in order, `steps` of them (forever when unbounded), each jittered afresh."""
        retry = 0
        while not self.exhausted(retry):
            yield self.delay(retry, rng=rng)
            retry += 1
