"""A `file://` source names the file its whole path names, percent-decoded; a raw '#' or '?' is
a character of the name."""

from __future__ import annotations

from pathlib import Path

from recall.media import fetch


def test_local_path__a_raw_hash_or_question_mark_is_part_of_the_file_name(tmp_path: Path) -> None:
    """`file:///…/take#2.wav` names that file, never `take` (urlsplit would cut a fragment)."""
    (tmp_path / "take").write_bytes(b"another file")
    for name in ("take#2.wav", "why?.wav"):
        (tmp_path / name).write_bytes(name.encode())
        url = f"file://{tmp_path}/{name}"
        assert fetch.local_path(url, max_bytes=100).read_bytes() == name.encode()
    encoded = f"file://{tmp_path}/take%232.wav"
    assert fetch.local_path(encoded, max_bytes=100).name == "take#2.wav"


def test_local_path__file_colon_one_slash_names_the_same_file(tmp_path: Path) -> None:
    (tmp_path / "a.wav").write_bytes(b"a")
    assert fetch.local_path(f"file:{tmp_path}/a.wav", max_bytes=100) == tmp_path / "a.wav"
