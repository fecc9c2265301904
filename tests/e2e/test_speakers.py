"""Speaker labels through the whole system: the local Whisper engine in worker processes on an
espeak-ng dialogue of two voices with known turns; a job killed mid-way and resumed from its
checkpoint gets the labels of an unbroken run; more voices asked than there are completes
with a condition."""

from __future__ import annotations

import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.media.types import Word
from recall.resources import API_VERSION, BATCH_PLURAL, GROUP, VERSION, Phase
from recall.transcripts import load_transcript
from recall_dev import dialogue, speech
from tests.helpers import Procs, get_job, wait_for_phase

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> dialogue.Dialogue:
    """Two voices, six turns of 3-8 s: about 40 s."""
    out = tmp_path_factory.mktemp("dialogue") / "talk.wav"
    try:
        return dialogue.make(out, speakers=2, turns=6, seed=3, low=3.0, high=8.0)
    except speech.SpeechUnavailable as e:
        pytest.fail(str(e))


def whisper_batch(
    kube: Kube,
    namespace: str,
    name: str,
    items: dict[str, str],
    *,
    transcript: dict[str, object],
    checkpoint_seconds: float | None = None,
    lease: int = 6,
) -> None:
    defaults: dict[str, object] = {
        "language": "en",
        "leaseDurationSeconds": lease,
        "maxAttempts": 5,
        "engine": {"name": "whisper", "chunkSeconds": 10},
        "transcript": transcript,
    }
    if checkpoint_seconds is not None:
        defaults["checkpointSeconds"] = checkpoint_seconds
    body = {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": name},
        "spec": {
            "items": [{"key": k, "source": {"url": url}} for k, url in items.items()],
            "defaults": defaults,
        },
    }
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, BATCH_PLURAL, body)


def labelled_words(
    kube: Kube, results: Bucket, namespace: str, job_name: str
) -> tuple[list[Word], int | None]:
    job = get_job(kube, namespace, job_name)
    assert job.status.result is not None
    transcript = load_transcript(results, job.status.result.transcript)
    assert transcript is not None
    for s in transcript.segments:
        assert s.speaker in {w.speaker for w in s.words or []}
    return [w for s in transcript.segments for w in s.words or []], job.status.result.speakers


def truth_of(talk: dialogue.Dialogue, word: Word) -> int | None:
    mid = (word.start + word.end) / 2
    near = min(talk.turns, key=lambda t: 0 if t.start <= mid <= t.end else
               min(abs(mid - t.start), abs(mid - t.end)))  # fmt: skip
    return near.speaker


def test_speakers__labelled_by_voice_and_the_same_after_a_kill_and_resume(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, talk: dialogue.Dialogue
) -> None:
    procs.recall("operator", "operator", "--namespace", namespace)
    source = {"talk": talk.path.as_uri()}
    speakers: dict[str, object] = {"words": True, "speakers": {}}
    whisper_batch(kube, namespace, "whole", source, transcript=speakers)
    whole = procs.worker("whole", "--engine", "whisper", "--namespace", namespace,
                         "--idle-exit", "5")  # fmt: skip
    wait_for_phase(kube, namespace, "whole-talk", Phase.SUCCEEDED, timeout=240, procs=procs)
    assert whole.wait(timeout=60) == 0
    assert "speakers_labelled" in whole.event_names()
    words, found = labelled_words(kube, results, namespace, "whole-talk")
    # On a miss, what decides the voices: the attempts, the words and the worker's log.
    status = get_job(kube, namespace, "whole-talk").status.model_dump_json(exclude_none=True)
    said = " ".join(f"{w.text}@{w.start:.2f}-{w.end:.2f}:{w.speaker}" for w in words)
    assert found == 2, f"{status}\nwords: {said}\n{procs.dump()}"
    assert words[0].speaker == "S1" and {w.speaker for w in words} == {"S1", "S2"}
    # The labels follow the voices: S1 is the first turn's voice, S2 the other.
    names = {talk.turns[0].speaker: "S1", 1 - talk.turns[0].speaker: "S2"}
    right = sum(w.speaker == names[truth_of(talk, w) or 0] for w in words)
    assert right >= 0.9 * len(words), f"{right} of {len(words)} words labelled right"

    # The same file, killed once 2 chunks are checkpointed, then resumed by another worker.
    whisper_batch(kube, namespace, "again", source, transcript=speakers, checkpoint_seconds=1)
    first = procs.worker("first", "--engine", "whisper", "--namespace", namespace,
                         env={"RECALL_FAULT": "worker-after-chunk:2"})  # fmt: skip
    assert first.wait(timeout=180) < 0, "the fault should have killed the first worker"
    second = procs.worker("second", "--engine", "whisper", "--namespace", namespace,
                          "--idle-exit", "30")  # fmt: skip
    wait_for_phase(kube, namespace, "again-talk", Phase.SUCCEEDED, timeout=240, procs=procs)
    assert second.wait(timeout=60) == 0
    assert "resumed" in second.event_names()
    again, found_again = labelled_words(kube, results, namespace, "again-talk")
    assert found_again == 2
    # The words themselves may differ between two runs (a window decoded in another batch,
    # with other text before it as its prompt), the voices do not: both runs label by voice as
    # well, with the same names, and a word of one said within a word of the other (by its
    # middle) has that word's label.
    right_again = sum(w.speaker == names[truth_of(talk, w) or 0] for w in again)
    assert right_again >= 0.9 * len(again), f"{right_again} of {len(again)} words right again"
    paired = [(w, u) for w in again for u in words if u.start <= (w.start + w.end) / 2 <= u.end]
    same = sum(w.speaker == u.speaker for w, u in paired)
    assert len(paired) >= 0.5 * len(again), f"{len(paired)} of {len(again)} words paired"
    assert same >= 0.95 * len(paired), [(w.text, u.text, w.speaker, u.speaker) for w, u in paired]


def test_speakers__more_voices_asked_than_there_are_completes_with_a_condition(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, talk: dialogue.Dialogue
) -> None:
    procs.recall("operator", "operator", "--namespace", namespace)
    # One unbroken run, even on a busy machine: a lost lease would resume the job, and a
    # resumed run decodes other words than this test expects.
    talk_uri = talk.path.as_uri()
    whisper_batch(kube, namespace, "four", {"talk": talk_uri},
                  transcript={"speakers": {"count": 4}}, lease=30)  # fmt: skip
    procs.worker("w", "--engine", "whisper", "--namespace", namespace, "--idle-exit", "5")
    wait_for_phase(kube, namespace, "four-talk", Phase.SUCCEEDED, timeout=240, procs=procs)
    job = get_job(kube, namespace, "four-talk")
    assert job.status.result is not None
    # On a miss, what decides the voices: the attempts (a resumed run decodes other words),
    # the words and the worker's log (speakers_labelled says how many windows were embedded).
    assert job.status.result.speakers == 2 and job.status.result.speakers_asked == 4, (
        job.status.model_dump_json(exclude_none=True),
        load_transcript(results, job.status.result.transcript),
        procs.dump(),
    )
    (fewer,) = [c for c in job.status.conditions if c.type == "SpeakersFewer"]
    assert fewer.status == "True" and "4 speakers were asked for, 2 voices" in (fewer.message or "")
    transcript = load_transcript(results, job.status.result.transcript)
    assert transcript is not None
    assert {s.speaker for s in transcript.segments} == {"S1", "S2"}
