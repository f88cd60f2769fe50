"""The package's shape stays as ARCHITECTURE.md draws it: each part imports
only the parts below it, no import runs in a circle, llama_cpp is imported
by the runtime alone, and no module takes another's private names."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.paths import REPO

PACKAGE = REPO / "engy_local"

# What each part of engy_local may import besides itself (ARCHITECTURE.md).
BASE = {"chat", "errors"}
MAY_IMPORT: dict[str, set[str]] = {
    "chat": set(),
    "errors": set(),
    "backend": {"chat"},
    "events": BASE,
    "models": BASE,
    "grammar": BASE,
    "prompt": BASE | {"grammar"},
    "protocols": BASE,
    "runtime": BASE | {"backend", "events", "models", "grammar", "prompt"},
    "upstream": BASE | {"backend", "events", "models", "grammar", "prompt"},
    "client": BASE | {"backend", "protocols"},
    "server": BASE
    | {"backend", "events", "models", "grammar", "prompt", "protocols", "runtime", "upstream"},
    "commands": BASE
    | {"backend", "events", "models", "grammar", "prompt", "protocols", "runtime", "upstream"}
    | {"client", "server"},
    "__main__": {"commands"},
}

# Inside a part, its own parts in order (ARCHITECTURE.md): each may import
# only itself and those before it; "" is the part's own top modules.
INNER: dict[str, list[str]] = {
    "runtime": ["faults", "loading", "cache", "engine", "pool", ""],
    "prompt": ["parsing", "render", "families", "calls", ""],
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str) -> Iterator[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every import of a
    module, lazy ones inside functions included."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:  # `from . import module`
                    yield sub, [], node.lineno
                else:
                    yield target, [alias.name], node.lineno


def graph() -> dict[str, set[str]]:
    return {
        name: {t for t, _, _ in imports(name) if t in MODULES and t != name} for name in MODULES
    }


def part(name: str) -> str:
    return name.split(".")[1] if "." in name else ""


def test_each_part_imports_only_what_is_below_it() -> None:
    wrong = []
    for name, targets in graph().items():
        if name == "engy_local":
            continue
        allowed = MAY_IMPORT[part(name)] | {part(name)}
        wrong += [f"{name} -> {t}" for t in sorted(targets) if part(t) not in allowed]
    assert not wrong, "imports that run up or sideways:\n" + "\n".join(wrong)


def test_no_import_runs_in_a_circle() -> None:
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_only_the_runtime_imports_llama_cpp() -> None:
    found = [
        f"{name}:{line}"
        for name in MODULES
        for target, _, line in imports(name)
        if target.split(".")[0] == "llama_cpp" and part(name) != "runtime"
    ]
    assert not found


def test_no_private_name_is_imported_across_modules() -> None:
    found = [
        f"{name}:{line} takes {taken} from {target}"
        for name in MODULES
        for target, names, line in imports(name)
        if target.startswith("engy_local")
        for taken in names
        if taken.startswith("_") and not taken.startswith("__")
    ]
    assert not found


def inner(name: str) -> str:
    """Which of its part's parts a module is in (INNER); "" for the part's
    own top modules."""
    parts = name.split(".")
    order = INNER.get(part(name), [])
    return parts[2] if len(parts) >= 3 and parts[2] in order else ""


def test_each_inner_part_imports_only_what_is_above_it_in_its_list() -> None:
    wrong = []
    for name, targets in graph().items():
        order = INNER.get(part(name))
        if order is None:
            continue
        mine = order.index(inner(name))
        for t in sorted(targets):
            if part(t) == part(name) and order.index(inner(t)) > mine:
                wrong.append(f"{name} -> {t}")
    assert not wrong, "imports that run down the list of a part's parts:\n" + "\n".join(wrong)


def test_no_part_is_over_30_percent_of_the_package() -> None:
    """The parts stay of a size one reads as one thing (issue 60)."""
    sizes: dict[str, int] = {}
    for name, path in MODULES.items():
        sizes[part(name)] = sizes.get(part(name), 0) + path.read_text().count("\n")
    total = sum(sizes.values())
    assert {p: round(n / total, 3) for p, n in sizes.items() if n > 0.3 * total} == {}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_readable_in_one_sitting(name: str) -> None:
    """About 500 lines at most, unless the module says at its top why not."""
    text = MODULES[name].read_text()
    lines = text.count("\n")
    doc = ast.get_docstring(ast.parse(text)) or ""
    assert lines <= 520 or "Longer than" in doc, f"{name}: {lines} lines"


def test_the_layout_test_knows_every_part() -> None:
    assert {part(n) for n in MODULES if n != "engy_local"} <= set(MAY_IMPORT)
