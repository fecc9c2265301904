"""`recall submit s3://bucket/prefix/`: the object URLs it lists are the ones the API server and
the item lists accept (no whitespace, no raw '#' or '?'), and each names its own object."""

from __future__ import annotations

from pathlib import Path

from recall.base.settings import StoreSettings
from recall.bucket import Location, Stores
from recall.cli.commands import _list_objects
from recall.cli.submission import MAX_ITEMS, collect, submission_for
from recall.worker.sources import object_reader

KEYS = ["my talk.wav", "day#2/keynote.wav", "day/keynote.wav", "50%/a.wav", "why?.wav"]


def media_folder(root: Path) -> str:
    """A folder holding `KEYS`, each object's bytes its key; its URL as a listing prefix."""
    for key in KEYS:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(key.encode())
    return root.as_uri() + "/"


def test_list_objects__urls_carry_no_whitespace_and_name_their_object(tmp_path: Path) -> None:
    urls = _list_objects(media_folder(tmp_path / "media"))
    assert len(urls) == len(KEYS)
    read = object_reader(Stores(StoreSettings()))
    for url in urls:
        assert url.split() == [url] and "#" not in url and "?" not in url
        key = Location.parse(url).prefix.rsplit("/media/", 1)[1]
        path, _ = read(url, tmp_path, 100)
        assert path.read_bytes() == key.encode()
        path.unlink()
    assert sorted(Location.parse(u).prefix.rsplit("/media/", 1)[1] for u in urls) == sorted(KEYS)


def test_submit__a_key_with_a_space_leaves_the_item_lists_one_item_a_line(tmp_path: Path) -> None:
    prefix = media_folder(tmp_path / "media")
    media = collect(["s3://media/talks/"], lambda _: _list_objects(prefix))
    plan = submission_for(media * (MAX_ITEMS // len(KEYS) + 1), name="b")  # lists, not inline
    assert plan.lists
    for text in plan.lists.values():
        assert all(len(line.split()) == 2 for line in text.splitlines())


def test_submit__an_item_s_key_is_made_from_the_decoded_object_name(tmp_path: Path) -> None:
    prefix = media_folder(tmp_path / "media")
    media = collect(["s3://media/talks/"], lambda _: _list_objects(prefix))
    keys = sorted(m.key for m in media)
    assert "my-talk" in keys and "why" in keys
    assert not any("20" in k or "3f" in k for k in keys)
