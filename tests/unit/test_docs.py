"""The README is a front page whose links hold; the generated docs are current and complete."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic_settings import BaseSettings

from recall.base import settings
from recall_dev import docs

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^```[a-z]*\n(?P<body>.*?)^```", re.M | re.S)


def slugify(heading: str) -> str:
    """A heading's anchor as MkDocs makes it (Python-Markdown's toc `slugify`)."""
    text = unicodedata.normalize("NFKD", heading.replace("`", ""))
    text = re.sub(r"[^\w\s-]", "", text.encode("ascii", "ignore").decode()).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slugify(m[1].strip()) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_readme__shows_the_two_commands() -> None:
    assert "make demo" in README and "make test" in README


def test_readme__is_a_front_page() -> None:
    assert len(README.splitlines()) <= 230


def test_readme__every_relative_link_resolves() -> None:
    broken = []
    for m in LINK.finditer(README):
        target = m["target"]
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path if path else ROOT / "README.md"
        if not page.exists() or (anchor and anchor not in _anchors(page)):
            broken.append(target)
    assert broken == []


def nav_pages(nav: list[Any]) -> list[str]:
    """The pages of mkdocs' nav, its sections opened."""
    pages: list[str] = []
    for entry in nav:
        for value in entry.values():
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_readme__links_every_docs_page_of_the_site() -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages = set(nav_pages(nav)) - {"index.md"}
    assert sorted(p for p in pages if f"(docs/{p}" not in README) == []


def test_generated_pages__are_current() -> None:
    stale = [str(p) for p, text in docs.generated().items() if (ROOT / p).read_text() != text]
    assert stale == [], "run `make docs`"


@pytest.mark.parametrize("cls", docs.settings_classes(settings), ids=lambda c: c.__name__)
def test_configuration_reference__lists_every_setting(cls: type[BaseSettings]) -> None:
    page = (ROOT / docs.CONFIGURATION).read_text()
    prefix = cls.model_config["env_prefix"]
    missing = [n for n in cls.model_fields if f"| `{prefix}{n.upper()}` |" not in page]
    assert missing == []


def test_configuration_reference__covers_the_known_components() -> None:
    found = {cls.__name__ for cls in docs.settings_classes(settings)}
    assert {"WorkerSettings", "OperatorSettings", "StoreSettings", "ApiSettings"} <= found


def test_chart_values__each_has_a_comment_on_itself_or_a_parent() -> None:
    assert docs.undocumented_values((ROOT / docs.VALUES).read_text()) == []


def test_cell__escapes_html_outside_code_spans() -> None:
    cell = docs._cell("reads <volume>/a.wav & more,\n `<fullname>-worker` > 0 | `a|b`")
    assert cell == "reads &lt;volume>/a.wav &amp; more, `<fullname>-worker` > 0 \\| `a\\|b`"


def test_cell__what_a_value_says_in_angle_brackets_shows_on_the_site() -> None:
    markdown = pytest.importorskip("markdown")
    row = "| " + " | ".join(docs._cell(c) for c in ("`a`", "under <prefix>/scratch/ only")) + " |"
    html = markdown.markdown(f"| value | meaning |\n| --- | --- |\n{row}\n", extensions=["tables"])
    assert "under &lt;prefix&gt;/scratch/ only" in html  # Markdown writes the > out itself
    assert "<prefix>" not in html


def test_configuration_reference__no_bare_tag_in_a_table_cell() -> None:
    page = (ROOT / docs.CONFIGURATION).read_text()
    rows = [line for line in page.splitlines() if line.startswith("|")]
    bare = [r for r in rows if re.search(r"<[A-Za-z/!]", re.sub(r"(`+).+?\1", "", r))]
    assert bare == []


def test_documented_values__a_comment_covers_its_mapping_and_runs_to_its_key() -> None:
    text = """\
# A plain comment documents nothing.
plain: 1
# -- The probe's timing,
# over two lines.
probe:
  period: 5
group:
  # -- A leaf.
  leaf: x
  bare: y
"""
    values = docs.documented_values(text)
    assert [(v.path, v.doc) for v in values] == [
        (("probe",), "The probe's timing, over two lines."),
        (("group", "leaf"), "A leaf."),
    ]
    assert docs.undocumented_values(text) == ["plain", "group.bare"]


def test_values_section__refuses_an_undocumented_value() -> None:
    with pytest.raises(docs.DocsError, match=r"group\.bare"):
        docs.values_section("group:\n  bare: 1\n", {})


def test_package_table__one_row_per_subpackage_of_the_tree() -> None:
    table = docs.packages_table()
    on_disk = {p.parent.name for p in (ROOT / "operator" / "recall").glob("*/__init__.py")}
    rows = set(re.findall(r"^\| `recall/(\w+)/` \|", table, re.M))
    assert rows == on_disk
    for name in on_disk:
        for module in (ROOT / "operator" / "recall" / name).glob("*.py"):
            if module.stem != "__init__":
                assert re.search(rf"^\| `recall/{name}/` \|.*\b{module.stem}\b", table, re.M)


def test_development_page__needs_its_markers() -> None:
    with pytest.raises(docs.DocsError, match="markers"):
        docs.development_page("# Development\n")
