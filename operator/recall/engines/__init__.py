"""Engines: local Whisper (default), an OpenAI-compatible API, and a simulated one.

The `Engine` interface and its implementations. May import `recall.media`, `recall.resources`
and `recall.base`; never a component (operator, worker, command line) nor the stores.

`make_engine(settings)` builds the worker's engine once per process, importing only the chosen
one: a simulated worker starts without loading a model.
"""

from __future__ import annotations

from recall.base.settings import WorkerSettings
from recall.engines.base import Engine
from recall.engines.models import OpenStore
from recall.media.fetch import ObjectReader

__all__ = ["Engine", "make_engine"]


def make_engine(
    settings: WorkerSettings,
    objects: ObjectReader | None = None,
    models: OpenStore | None = None,
) -> Engine:
    """The worker's engine; `objects` reads media from stores, `models` opens store models."""
    if settings.engine == "simulated":
        from recall.engines.simulated import SimulatedEngine
        from recall.media import MediaOptions

        return SimulatedEngine(
            chunks=settings.simulated_chunks,
            chunk_delay_seconds=settings.simulated_chunk_delay,
            chunk_seconds=settings.chunk_seconds,
            record_path=settings.simulated_record,
            words_per_minute=settings.simulated_words_per_minute,
            batch_size=settings.batch_size,
            media=MediaOptions.from_settings(settings, objects)
            if settings.simulated_media
            else None,
        )
    if settings.engine == "openai":
        from recall.engines.openai import OpenAIEngine

        return OpenAIEngine.from_settings(settings, objects)
    from recall.engines.whisper import WhisperEngine

    return WhisperEngine.from_settings(settings, objects, models)
