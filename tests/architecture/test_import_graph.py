"""The import graph of the five packages: layers point down, and no module imports itself back.

Every module is parsed with ``ast``; every ``import`` counts, wherever it sits: at module level,
inside a function (a lazy import is still a dependency, and still a circle when it runs), and
under ``if TYPE_CHECKING:`` (the type names a lower layer would otherwise have to know about an
upper one). ``importlib.import_module`` by name is not seen; it is used downwards or
sideways (the config loader reaching ``labse_common.sections.<section>``, the filters
dispatcher reaching ``filters.bitext.cli_<command>``), and upwards only by a registry reaching
the module that holds its entries (``labse_common.registry``: the plugin pattern, the names
declared beside their code).

Allowed directions (a package may import itself and the packages listed for it, nothing else):

    labse_common  ->  (only itself: the bottom layer)
    labse_model   ->  labse_common
    mining        ->  labse_common, labse_model
    filters       ->  labse_common, labse_model, mining
    pipelines     ->  labse_common, labse_model, mining, filters
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.source_ast import parse_file

REPO = Path(__file__).resolve().parents[2]

ALLOWED: dict[str, frozenset[str]] = {
    "labse_common": frozenset(),
    "labse_model": frozenset({"labse_common"}),
    "mining": frozenset({"labse_common", "labse_model"}),
    "filters": frozenset({"labse_common", "labse_model", "mining"}),
    "pipelines": frozenset({"labse_common", "labse_model", "mining", "filters"}),
}
PACKAGES = tuple(ALLOWED)
#: module -> {module of the tree it imports: the line of the first such import}
Graph = dict[str, dict[str, int]]

# Circles known and owned elsewhere, each listed with why it stays for now; an entry that is no
# longer exactly a circle fails the test, so the list cannot outlive (or hide a growing) circle.
KNOWN_CYCLES: list[frozenset[str]] = [
    # None now. The last one, the object-store modules (filesystems, remote, remote_errors,
    # s3_download, s3_upload), was broken by modules below them all: labse_common.s3_limits
    # (the LABSE_S3_* limits), labse_common.s3_client (the boto3 client builder, below
    # filesystems) and labse_common.remote_failures (the failure behind Beam's wrappers).
]


def module_files() -> dict[str, Path]:
    """Every module of the five packages, by dotted name (a package is its ``__init__``)."""
    found: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported_names(module: str, path: Path, tree: ast.Module) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of everything ``module`` imports, relative imports resolved."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                # ``from a import b``: ``a.b`` when b is a module, else a name of ``a`` (resolved
                # to the longest module prefix below).
                yield f"{target}.{alias.name}", node.lineno


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module of the tree ``name`` refers to: the longest known prefix, or None (outside)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph() -> tuple[Graph, dict[str, list[tuple[str, int]]]]:
    """(module -> {imported module of the tree: first line}, module -> [(top package, line)])."""
    modules = module_files()
    graph: Graph = {m: {} for m in modules}
    packages: dict[str, list[tuple[str, int]]] = {m: [] for m in modules}
    for module, path in modules.items():
        tree = parse_file(path)
        for name, line in _imported_names(module, path, tree):
            top = name.split(".")[0]
            if top in ALLOWED and (top, line) not in packages[module]:
                packages[module].append((top, line))
            target = _resolve(name, modules)
            if target and target != module:
                graph[module].setdefault(target, line)
    return graph, packages


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the tree is deep enough for recursion to be a worry)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def one_cycle(component: list[str], graph: Graph) -> list[str]:
    """A shortest circle through the component's first module (breadth-first), to print."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt not in members:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    return component


def describe(cycle: list[str], graph: Graph) -> str:
    modules = module_files()
    steps = [
        f"  {a} ({modules[a].relative_to(REPO)}:{graph[a][b]}) imports {b}"
        for a, b in zip(cycle, cycle[1:])
    ]
    return "\n".join(steps)


@pytest.fixture(scope="module")
def graph_and_packages():
    return import_graph()


def test_the_parser_sees_every_kind_of_import(graph_and_packages):
    # Guards the checks below against passing on a graph that misses edges.
    graph, packages = graph_and_packages
    assert len(graph) > 100
    assert "labse_common.config_sections" in graph["labse_common.cli"]  # module level
    assert "labse_model.embed_store" in graph["mining.mine"]  # inside a function
    assert "labse_model.vocab.build" in graph["labse_model.vocab"]  # a package's __init__
    assert ("labse_common", 9) in packages["pipelines"]  # nested under an ``if``
    cycle_free = {"a": {"b": 1}, "b": {"c": 1}, "c": {}}
    assert strongly_connected(cycle_free) == []
    assert strongly_connected(cycle_free | {"c": {"a": 1}}) == [["a", "b", "c"]]


def test_layers_point_down(graph_and_packages):
    _, packages = graph_and_packages
    modules = module_files()
    upward = [
        f"{modules[m].relative_to(REPO)}:{line}: {m} imports {top} "
        f"({m.split('.')[0]} may import only {sorted(ALLOWED[m.split('.')[0]]) or 'itself'})"
        for m, hits in sorted(packages.items())
        for top, line in hits
        if top != m.split(".")[0] and top not in ALLOWED[m.split(".")[0]]
    ]
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_no_import_circle(graph_and_packages):
    graph, _ = graph_and_packages
    components = strongly_connected(graph)
    found = [frozenset(c) for c in components]
    stale = [sorted(k) for k in KNOWN_CYCLES if k not in found]
    assert not stale, f"listed as known but no longer a circle: {stale} (remove the entry)"
    new = [c for c in components if frozenset(c) not in KNOWN_CYCLES]
    report = "\n".join(
        f"circle among {len(c)} modules ({', '.join(c)}), e.g.:\n"
        + describe(one_cycle(c, graph), graph)
        for c in new
    )
    assert not new, "import circles:\n" + report


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
