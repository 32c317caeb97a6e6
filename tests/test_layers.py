"""The architecture as a test: which package may import which (docs/ARCHITECTURE.md).

Every import statement of the product (module level or inside a function, ``TYPE_CHECKING``
blocks included) is read with :mod:`ast`; a module may import only from its own layer or a
lower one, and no two modules may import each other in a cycle. A wrong arrow fails here
before it becomes a knot.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("noc_assistant", "knowledge", "detectors", "guardrails", "prompts", "evals")

#: module prefix → layer; the longest matching prefix names a module's layer. A module may
#: import from its layer or below. Keep in step with docs/ARCHITECTURE.md.
LAYERS: dict[str, int] = {
    # 0: the domain and the knowledge: no I/O beyond reading their own files
    "noc_assistant": 0,  # the package itself: errors, models, settings, inventory, timefmt
    "knowledge": 0,
    "guardrails": 0,
    "detectors": 0,
    "prompts": 0,
    # 1: parts that stand alone: reading input, storage, the LLM server and client, the
    # simulator, mail and Prometheus
    "noc_assistant.ingest": 1,
    "noc_assistant.store": 1,
    "noc_assistant.serving": 1,
    "noc_assistant.simulate": 1,
    "noc_assistant.integrations.llm": 1,
    "noc_assistant.integrations.mail": 1,
    "noc_assistant.integrations.tmf621": 1,
    "noc_assistant.integrations.prometheus": 1,
    # 2: from an incident to what a person reads
    "noc_assistant.triage": 2,
    # 3: the streaming core, which ranks what it correlates
    "noc_assistant.stream": 3,
    # 4: what runs the core beside outside systems, and the NOC's own decisions
    "noc_assistant.integrations": 4,
    "noc_assistant.ops": 4,
    # 5: entry points and evaluation
    "evals": 5,
    "noc_assistant.api": 5,
    "noc_assistant.cli": 5,
    "noc_assistant.__main__": 5,
}


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path


def imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) of every import of the project's packages in one file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # "from pkg import mod" imports the module mod (the package's __init__ runs first
            # for every import of a sub-module, so it is not counted as an arrow of its own)
            subs = [f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}")]
            names = subs if len(subs) == len(node.names) else [base, *subs]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES:
                yield node.lineno, name


def _is_module(name: str) -> bool:
    head = ROOT.joinpath(*name.split("."))
    return head.with_suffix(".py").is_file() or (head / "__init__.py").is_file()


def wrong_arrows(
    extra: tuple[str, str] | None = None,
) -> list[str]:
    found = []
    for module, path in modules():
        edges = list(imports(module, path))
        if extra is not None and extra[0] == module:
            edges.append((0, extra[1]))
        for line, target in edges:
            if layer(target) > layer(module):
                found.append(
                    f"{path.relative_to(ROOT)}:{line}: {module} (layer {layer(module)}) imports "
                    f"{target} (layer {layer(target)})"
                )
    return found


def cycles() -> list[list[str]]:
    """Cycles among modules (Tarjan's strongly connected components of size > 1)."""
    graph: dict[str, set[str]] = {}
    known = {m for m, _ in modules()}
    for module, path in modules():
        graph[module] = {t for _, t in imports(module, path) if t in known and t != module}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_import_points_to_the_same_or_a_lower_layer() -> None:
    assert wrong_arrows() == []


def test_a_planted_wrong_import_is_caught() -> None:
    planted = wrong_arrows(("noc_assistant.store.base", "noc_assistant.stream.pipeline"))
    assert len(planted) == 1 and "imports noc_assistant.stream.pipeline (layer 3)" in planted[0]
    assert wrong_arrows(("noc_assistant.models", "noc_assistant.cli")) != []


def test_no_import_cycle_between_modules() -> None:
    assert cycles() == []


@pytest.mark.parametrize("module", sorted(m for m, _ in modules() if not m.endswith("__main__")))
def test_all_lists_what_exists(module: str) -> None:
    """A module's ``__all__`` (where it has one) names only what the module defines or
    imports, each once."""
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        return
    assert len(names) == len(set(names)), f"{module}.__all__ repeats a name"
    missing = [n for n in names if not hasattr(mod, n)]
    assert missing == [], f"{module}.__all__ names what it lacks: {missing}"


#: the most lines a module and a function of the product may have (docs/ARCHITECTURE.md)
MODULE_LINES, FUNCTION_LINES = 600, 80


def oversized(paths: Iterator[Path] | None = None) -> list[str]:
    """Modules over :data:`MODULE_LINES` lines and functions over :data:`FUNCTION_LINES`,
    except a numba kernel (decorated with ``kernel`` or ``njit``) whose docstring says why it
    is long (it names the rule: "over 80 lines")."""
    found = []
    for path in paths if paths is not None else (p for _, p in modules()):
        source = path.read_text()
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if source.count("\n") > MODULE_LINES:
            found.append(f"{where}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source, str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            explained = "over 80 lines" in (ast.get_docstring(node) or "") and any(
                "kernel" in ast.unparse(d) or "njit" in ast.unparse(d) for d in node.decorator_list
            )
            if length > FUNCTION_LINES and not explained:
                found.append(f"{where}:{node.lineno}: {node.name} is {length} lines")
    return found


def test_no_module_over_600_lines_and_no_function_over_80() -> None:
    assert oversized() == []


def test_an_oversized_function_is_caught(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    planted = tmp_path / "long.py"
    planted.write_text(f"def long() -> None:\n{body}\n")
    assert oversized(iter([planted])) == [f"{planted}:1: long is {FUNCTION_LINES + 1} lines"]
