"""`recall submit` gives every item its own key (the CRD's list-map refuses a repeated one, and a
repeat in an item list fails the whole Batch), keeps the key of a name that no other shares,
and keeps the order of the inputs."""

from __future__ import annotations

from pathlib import Path

from recall.cli import submission


def test_collect__a_renamed_repeat_never_takes_another_file_s_key(tmp_path: Path) -> None:
    for name in ("a.mp3", "a.wav", "a-2.mp3", "b.mp3"):
        (tmp_path / name).write_bytes(b"")
    media = submission.collect([str(tmp_path)])
    by_file = {Path(m.url).name: m.key for m in media}
    assert [Path(m.url).name for m in media] == ["a-2.mp3", "a.mp3", "a.wav", "b.mp3"]
    assert by_file == {"a-2.mp3": "a-2", "a.mp3": "a", "a.wav": "a-3", "b.mp3": "b"}


def test_unique_keys__distinct_in_order_and_unchanged_where_unshared() -> None:
    assert submission.unique_keys(["a", "a", "a"]) == ["a", "a-2", "a-3"]
    assert submission.unique_keys(["a", "a", "a-2"]) == ["a", "a-3", "a-2"]
    assert submission.unique_keys(["a-2", "A", "a", "a-3"]) == ["a-2", "a", "a-4", "a-3"]
    names = [f"talk {i % 7}" if i % 3 else f"talk-{i % 5}" for i in range(200)]
    keys = submission.unique_keys(names)
    assert len(set(keys)) == len(keys) == 200
    assert all(len(k) <= 63 for k in submission.unique_keys(["x" * 80] * 1000))
