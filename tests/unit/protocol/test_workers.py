"""The worker registration record: what a renewal writes and what a reader makes of it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from recall.protocol.workers import (
    ANNOTATION_DRAIN,
    ANNOTATION_ENGINE_ERROR,
    ANNOTATION_ENGINE_MODEL,
    ANNOTATION_ENGINE_STATE,
    FAILED,
    LOADED,
    LOADING,
    MAX_ENGINE_ERROR,
    EngineState,
    read,
    registration,
)
from recall.resources import RawObject

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def renewed(**kwargs: Any) -> RawObject:
    return registration("ns", "w1", "whisper", duration=15, now=NOW, **kwargs)


def test_engine_state__written_by_the_renewal_and_read_back() -> None:
    loaded = EngineState(LOADED, "tiny.en@sha256:" + "ab" * 32)
    raw = renewed(engine_state=loaded)
    assert raw["metadata"]["annotations"][ANNOTATION_ENGINE_STATE] == "loaded"
    assert read(raw).engine_state == loaded
    failed = EngineState(FAILED, error="ModelNotFound: model directory /m does not exist")
    assert read(renewed(engine_state=failed)).engine_state == failed
    assert failed.reason == "ModelNotFound"
    assert read(renewed(engine_state=EngineState(LOADING))).engine_state == EngineState(LOADING)
    for said in (True, False):  # whether the model is multilingual, once it said
        multilingual = EngineState(LOADED, "base@sha256:1", multilingual=said)
        assert read(renewed(engine_state=multilingual)).engine_state == multilingual


def test_engine_state__the_renewal_replaces_it_and_keeps_the_operators_request() -> None:
    before = renewed(engine_state=EngineState(FAILED, error="ModelUnavailable: no answer"))
    kept = {**before["metadata"]["annotations"], ANNOTATION_DRAIN: "d1"}
    after = renewed(engine_state=EngineState(LOADED, "tiny.en@sha256:1"), keep=kept)
    annotations = after["metadata"]["annotations"]
    assert annotations[ANNOTATION_ENGINE_MODEL] == "tiny.en@sha256:1"
    assert ANNOTATION_ENGINE_ERROR not in annotations  # the old failure is gone
    assert annotations[ANNOTATION_DRAIN] == "d1"
    unsaid = renewed(keep=annotations)["metadata"]["annotations"]
    assert not {ANNOTATION_ENGINE_STATE, ANNOTATION_ENGINE_MODEL} & set(unsaid)


def test_engine_state__none_from_a_worker_that_does_not_say_and_a_long_error_cut() -> None:
    assert read(renewed()).engine_state is None
    long = EngineState(FAILED, error="ModelInvalid: " + "x" * 2000)
    written = long.annotations()[ANNOTATION_ENGINE_ERROR]
    assert len(written) == MAX_ENGINE_ERROR and written.startswith("ModelInvalid: ")
