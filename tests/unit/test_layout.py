"""The runtime package's layout: no import cycles among its modules (imports made at module
level; lazy imports inside functions are how the CLI keeps start-up fast and are allowed),
and nothing in it imports the development tools."""

from __future__ import annotations

import ast
from pathlib import Path

import recall

PACKAGE = Path(recall.__file__).resolve().parent


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:  # module level only
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in top_level_imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def test_no_import_cycles() -> None:
    edges = graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_runtime_does_not_import_the_dev_tools() -> None:
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        lazy_ok = path.name == "cli.py"  # mounts `recall dev` only when the tools are there
        if "recall_dev" in text and not lazy_ok:
            raise AssertionError(f"{path} mentions recall_dev")
        for node in ast.parse(text).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("recall_dev"):
                raise AssertionError(f"{path} imports {node.module} at module level")
