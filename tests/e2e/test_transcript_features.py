"""Redaction, channels and seams through the whole system: the real worker (local Whisper, or
the simulated engine on the real audio path) through the real API server and SeaweedFS.

- Redaction: nothing of what was redacted reaches the results store (chunk records of a
  killed attempt included), the published outputs, the job's status, an Event or a log line;
  only `original.json` (keepOriginal) holds it; the silenced audio copy is published and named
  in `status.published.audio`.
- Channels: a Batch default of `channels: split` on a mixed archive: a stereo file's channels
  transcribed on their own and labelled, a mono file as one channel with a condition.
- Seams: a recording cut mid-sentence reads as one sentence in every output.
"""

from __future__ import annotations

import io
import json
import re
import wave
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.resources import API_VERSION, BATCH_PLURAL, GROUP, VERSION, Phase, TranscriptionJob
from recall.transcripts import load_transcript
from recall_dev import speech
from tests.helpers import Procs, get_job, wait_for, wait_for_phase

pytestmark = pytest.mark.slow
FORMATS = ["json", "aws.json", "srt", "vtt", "txt"]
CALL = [
    "Hello, this is the support line of the city library.",
    "My email is maria at example dot org.",
    "My phone number is five five five, one two three four.",
    "We are open from nine to six every day except on Sunday.",
]
# One sentence, long enough to be cut in the middle by 5 second chunks.
LONG = [
    "Scientists at the university have built a small robot that can walk across sand and "
    "climb over rocks without falling down, and the students who helped them are proud."
]


def spoken(tmp_path: Path, name: str, sentences: list[str]) -> Path:
    out = tmp_path / f"{name}.wav"
    try:
        speech.synthesize(sentences, out, words_per_minute=120, pause_seconds=0.7)
    except speech.SpeechUnavailable as e:
        pytest.fail(str(e))
    return out


def create_job(kube: Kube, namespace: str, name: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": API_VERSION, "kind": "TranscriptionJob", "metadata": {"name": name}}
    kube.create_job(namespace, {**body, "spec": spec})


def wait_published(kube: Kube, namespace: str, name: str, procs: Procs) -> TranscriptionJob:
    """Job `name` as read once its outputs are published."""
    return wait_for(
        lambda: (j := get_job(kube, namespace, name)).status.published is not None and j,
        timeout=240,
        message=procs.dump,
    )


def texts(bucket: Bucket, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every object of `bucket` as text (but those whose key ends with one of `skip`)."""
    out = {}
    for o in bucket.list():
        if not o.key.endswith(skip):
            out[o.key] = (bucket.get(o.key) or b"").decode(errors="replace")
    return out


def secrets_of(original: Any, redacted: Any) -> list[str]:
    """The words of the unredacted transcript said inside the redacted spans."""
    spans = [(w.start, w.end) for s in redacted.segments for w in s.words or [] if w.redacted]
    out = set()
    for s in original.segments:
        for w in s.words or []:
            word = w.text.strip().strip(".,?!").lower()
            inside = any(a - 0.01 <= w.start and w.end <= b + 0.01 for a, b in spans)
            digits = sum(c.isdigit() for c in word)
            if inside and (digits >= 3 or (not digits and len(word) >= 4)):
                out.add(word)
    return sorted(out)


def test_redaction__nothing_redacted_reaches_the_store_status_events_or_logs(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, outputs: Bucket, tmp_path: Path
) -> None:
    path = spoken(tmp_path, "call", CALL)
    procs.recall("operator", "operator", "--namespace", namespace)
    redact = {"types": ["email", "phone"], "audio": True, "keepOriginal": True}
    create_job(
        kube,
        namespace,
        "call",
        {
            "source": {"url": path.as_uri()},
            "language": "en",
            "leaseDurationSeconds": 6,
            "checkpointSeconds": 1,
            "engine": {"name": "whisper", "chunkSeconds": 5},
            "transcript": {"redact": redact},
            "output": {"url": outputs.url_of("calls/{key}"), "formats": FORMATS},
        },
    )
    fault = {"RECALL_FAULT": "worker-after-chunk:3"}  # killed once 3 chunks are checkpointed
    first = procs.worker("first", "--engine", "whisper", "--namespace", namespace, env=fault)
    assert first.wait(timeout=180) < 0, "the fault should have killed the first worker"
    # The killed attempt's chunk records, and its kept original if it got as far as writing it
    # (`original.json` in its scratch: where the unredacted words may be).
    killed = texts(results, skip=("original.json",))
    assert any("/c00000" in k for k in killed)
    procs.worker("second", "--engine", "whisper", "--namespace", namespace, "--idle-exit", "30")
    job = wait_published(kube, namespace, "call", procs)
    assert job.status.phase == Phase.SUCCEEDED and job.status.result is not None
    directory = job.status.result.transcript.rsplit("/", 1)[0] + "/"
    redacted = load_transcript(results, job.status.result.transcript)
    original = load_transcript(results, directory + "original.json")
    assert redacted is not None and original is not None
    kinds = {w.redacted for s in redacted.segments for w in s.words or [] if w.redacted}
    assert kinds == {"email", "phone"}, (redacted.text, original.text)
    secrets = secrets_of(original, redacted)
    assert secrets, original.text
    # Where the unredacted words must not be: everything but original.json.
    haystack = {**killed, **texts(results, skip=("original.json",)), **texts(outputs)}
    haystack["status"] = json.dumps(job.to_api())
    events = kube.core.list_namespaced_event(namespace).items
    haystack["events"] = "\n".join(f"{e.reason} {e.message}" for e in events)
    for log in procs.logs.glob("*.log"):
        haystack[log.name] = log.read_text(errors="replace")
    for secret in secrets:
        pattern = re.compile(rf"(?<![\w.]){re.escape(secret)}(?![\w])", re.IGNORECASE)
        leaks = [where for where, text in haystack.items() if pattern.search(text)]
        assert not leaks, f"{secret!r} in {leaks}"
    # Every output shows the tags; aws.json as AWS's content redaction writes it.
    txt = (outputs.get("calls/call.txt") or b"").decode()
    assert "[EMAIL]" in txt and "[PHONE]" in txt
    aws = json.loads(outputs.get("calls/call.aws.json") or b"{}")
    assert aws["isRedacted"] is True and "[PII]" in aws["results"]["transcripts"][0]["transcript"]
    pii = [i for i in aws["results"]["items"] if i["alternatives"][0]["content"] == "[PII]"]
    assert {r["category"] for i in pii for r in i["alternatives"][0]["redactions"]} == {
        "EMAIL",
        "PHONE",
    }
    # The audio with the redacted spans silenced, published and named.
    published = job.status.published
    assert published is not None and published.audio == outputs.url_of("calls/call.redacted.wav")
    with wave.open(io.BytesIO(outputs.get("calls/call.redacted.wav") or b"")) as w:
        rate = w.getframerate()
        samples = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    for s in redacted.segments:
        for word in s.words or []:
            if word.redacted:
                span = samples[int(word.start * rate) + 1 : int(word.end * rate) - 1]
                assert len(span) and not span.any()
    assert np.abs(samples).max() > 1000  # the rest is still there


def stereo(path: Path, left: Path, right: Path, delay: float) -> None:
    """A stereo WAV of two mono WAVs, the right one `delay` seconds later."""
    chans = []
    for p in (left, right):
        with wave.open(str(p)) as w:
            rate = w.getframerate()
            chans.append(np.frombuffer(w.readframes(w.getnframes()), "<i2"))
    shift = int(delay * rate)
    n = max(len(chans[0]), len(chans[1]) + shift)
    frames = np.zeros((n, 2), "<i2")
    frames[: len(chans[0]), 0] = chans[0]
    frames[shift : shift + len(chans[1]), 1] = chans[1]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames.tobytes())


def test_channels__a_batch_default_of_split_on_a_mixed_archive(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, tmp_path: Path
) -> None:
    """Whisper on a call recorded in two channels (caller left, agent right) and on a mono
    file, both under one Batch default of `channels: split`."""
    agent = spoken(tmp_path, "agent", ["Good morning, city library, how can I help?"])
    caller = spoken(tmp_path, "caller", ["I would like to renew a book, please."])
    call = tmp_path / "call.wav"
    stereo(call, agent, caller, delay=2.0)  # they overlap
    procs.recall("operator", "operator", "--namespace", namespace)
    kube.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        BATCH_PLURAL,
        {
            "apiVersion": API_VERSION,
            "kind": "Batch",
            "metadata": {"name": "calls"},
            "spec": {
                "items": [
                    {"key": "stereo", "source": {"url": call.as_uri()}},
                    {"key": "mono", "source": {"url": agent.as_uri()}},
                ],
                "defaults": {
                    "language": "en",
                    "engine": {"name": "whisper", "chunkSeconds": 5},
                    "transcript": {"channels": "split", "words": True},
                    "maxAttempts": 2,
                },
            },
        },
    )
    procs.worker("w", "--engine", "whisper", "--namespace", namespace, "--idle-exit", "20")
    for name in ("calls-stereo", "calls-mono"):
        wait_for_phase(kube, namespace, name, Phase.SUCCEEDED, timeout=240, procs=procs)
    job = get_job(kube, namespace, "calls-stereo")
    assert job.status.result is not None and job.status.result.channels == 2
    assert not any(c.type == "MonoSource" for c in job.status.conditions)
    transcript = load_transcript(results, job.status.result.transcript)
    assert transcript is not None
    by = {
        ch: " ".join(s.text for s in transcript.segments if s.channel == ch)
        for ch in ("ch0", "ch1")
    }
    assert "help" in speech.normalise(by["ch0"]) and "renew" in speech.normalise(by["ch1"])
    assert "renew" not in speech.normalise(by["ch0"])  # each channel on its own
    starts = [s.start for s in transcript.segments]
    assert starts == sorted(starts)  # interleaved by time
    assert all(w.channel == s.channel for s in transcript.segments for w in s.words or [])
    mono = get_job(kube, namespace, "calls-mono")
    assert mono.status.result is not None and mono.status.result.channels == 1
    (condition,) = [c for c in mono.status.conditions if c.type == "MonoSource"]
    assert condition.status == "True" and "one channel" in (condition.message or "")
    assert mono.status.attempts == 1  # not retried


def test_seams__a_recording_cut_mid_sentence_reads_as_one_sentence(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, outputs: Bucket, tmp_path: Path
) -> None:
    path = spoken(tmp_path, "long", LONG)
    procs.recall("operator", "operator", "--namespace", namespace)
    create_job(
        kube,
        namespace,
        "long",
        {
            "source": {"url": path.as_uri()},
            "language": "en",
            "engine": {"name": "whisper", "chunkSeconds": 5},
            "output": {"url": outputs.url_of("{key}"), "formats": FORMATS},
        },
    )
    procs.worker("w", "--engine", "whisper", "--namespace", namespace, "--idle-exit", "10")
    job = wait_published(kube, namespace, "long", procs)
    assert job.status.progress is not None and job.status.progress.chunks_total >= 3
    for fmt in FORMATS:
        body = (outputs.get(f"long.{fmt}") or b"").decode()
        assert body and "..." not in body and "…" not in body, (fmt, body)
    txt = (outputs.get("long.txt") or b"").decode().strip()
    assert not re.search(r"\. [a-z]", txt), txt  # no full stop inside the sentence
    wer = jiwer.wer(speech.normalise(LONG[0]), speech.normalise(txt))
    assert wer <= 0.3, f"WER {wer:.2f}: {txt}"
