"""The package's shape, checked: no import cycle, no upward import, small modules and functions.

The layers: ``voice``, ``instruct``, ``backends`` and ``judges`` are lower layers and never import ``engine``,
``ui``, ``api`` or ``studio``; the UI never imports torch (``test_the_ui_never_imports_torch``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "voicelab"
LOWER_LAYERS = ("voicelab.voice", "voicelab.instruct", "voicelab.backends", "voicelab.judges")
UPPER_LAYERS = ("voicelab.engine", "voicelab.ui", "voicelab.api", "voicelab.studio")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(path: Path, known: set[str], types_too: bool = False) -> set[str]:
    """Modules of the package this file imports (at any level; TYPE_CHECKING blocks only with ``types_too``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(node)
        for block in ast.walk(tree)
        if not types_too and isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        out.update(name for name in names if name in known)
    return out


def graph(types_too: bool = False) -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(path, set(found), types_too) - {name} for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> Iterator[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> Iterator[list[str]]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                yield [*stack[stack.index(nxt) :], nxt]
            elif nxt not in state:
                yield from visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            yield from visit(node)


def test_no_import_cycles() -> None:
    edges = {k: {v for v in vs if not k.startswith(v + ".")} for k, vs in graph().items()}  # a package's own init
    assert list(cycles(edges)) == []


def test_no_import_cycles_through_type_only_imports() -> None:
    """Two modules that name each other's types depend on each other, imported under TYPE_CHECKING or not."""
    edges = {k: {v for v in vs if not k.startswith(v + ".")} for k, vs in graph(types_too=True).items()}
    assert list(cycles(edges)) == []


def test_lower_layers_never_import_upward() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module.startswith(LOWER_LAYERS)
        for target in targets
        if target.startswith(UPPER_LAYERS)
    ]
    assert upward == []


def test_the_voice_matching_cannot_read_the_judges() -> None:
    """A judge that is optimised against stops being a judge: nothing under ``voice`` (the profile, the matcher,
    its renderers) imports ``judges``, and the profile's judge embedding is read by the scorer alone."""
    reaching = [
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module.startswith("voicelab.voice")
        for target in targets
        if target.startswith("voicelab.judges")
    ]
    assert reaching == []
    reads = re.compile(r"\.judge_embedding\b")
    readers = {
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if reads.search(path.read_text("utf-8"))
    }
    assert readers == {"voice/profile.py", "engine/scoring.py"}


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_and_functions_stay_small(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert len(source.splitlines()) <= MAX_MODULE_LINES, f"{path.name} has more than {MAX_MODULE_LINES} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_the_cycle_check_can_fail() -> None:
    assert list(cycles({"a": {"b"}, "b": {"a"}})) == [["a", "b", "a"]]


def test_every_bench_module_serves_a_benchmark_a_user_runs() -> None:
    """``voicelab/bench`` holds the benchmarks ``python -m voicelab bench NAME`` runs and what they import; a one-off
    investigation lives in the repository's ``tools/`` folder, outside the package."""
    from voicelab.cli import BENCHMARKS

    edges = graph(types_too=True)
    reached, todo = set(), list(BENCHMARKS.values())
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(edges.get(name, ()))
    bench = {name for name in modules() if name.startswith("voicelab.bench.")}
    assert sorted(bench - reached) == []
