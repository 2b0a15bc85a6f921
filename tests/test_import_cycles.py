"""No import cycles among the shipped packages' modules (pure Python: read with ast, nothing
imported). Every import counts, also one inside a function: a lazy import only hides a cycle
from start-up, the two modules still cannot be understood, tested or moved apart."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("routing_lib", "routelake_dev", "schemas")

# Cycles allowed, each as the largest set of modules it may span: none today. A cycle found
# later goes here only with the reason it cannot be broken.
KNOWN_CYCLES: list[frozenset[str]] = []


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Absolute names of what `module` imports: `from a import b` yields a.b (a submodule or
    a name in a; the caller keeps what is a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules importing it runs. Importing a.b.c runs a and a.b first,
    so those count too, except the importer's own packages (already running when it is)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        for imported in _imported_names(name, path):
            parts = imported.split(".")
            for i in range(1, len(parts) + 1):
                target = ".".join(parts[:i])
                if target in modules and target != name and target not in own:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def test_the_cycle_finder_finds_a_cycle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_relative_imports_and_parent_packages():
    graph = import_graph()
    # a lazy import inside a handler
    assert "routing_lib.jobs.route_state" in graph["routing_lib.cli.run"]
    # importing routing_lib.jobs.backfill runs routing_lib/jobs/__init__.py first
    assert "routing_lib.jobs" in graph["routing_lib.cli.backfill"]
    # a package's own __init__ is not an import of its modules
    assert "routing_lib.cli" not in graph["routing_lib.cli.run"]


def test_no_import_cycles_but_the_known_ones():
    for component in cycles(import_graph()):
        assert any(component <= known for known in KNOWN_CYCLES), (
            f"import cycle among {sorted(component)}"
        )


def test_jobs_and_the_command_line_do_not_import_each_other():
    """routectl runs the jobs; the jobs know nothing of routectl. Only their spark-submit entry
    files (routing_lib/jobs/submit) go through the command line, and nothing imports those."""
    graph = import_graph()
    for module, imports in graph.items():
        if module.startswith("routing_lib.jobs") and not module.startswith(
            "routing_lib.jobs.submit"
        ):
            assert not {m for m in imports if m.startswith("routing_lib.cli")}, module
        assert not {m for m in imports if m.startswith("routing_lib.jobs.submit")}, module
