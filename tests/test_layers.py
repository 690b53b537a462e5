"""The package's layers (docs/architecture.md): the import graph of rag/, computed from the
source, may not climb where the layering is already built."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rag"


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, set[str]]:
    """Top-level room of rag (``corpus``, ``run``, ...) -> the rooms it imports (at module
    level or inside functions), itself excluded."""
    edges: dict[str, set[str]] = {}
    for f in PACKAGE.rglob("*.py"):
        room = f.relative_to(PACKAGE).parts[0].removesuffix(".py")
        out = edges.setdefault(room, set())
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and
                     node.level == 0 else [a.name for a in node.names]
                     if isinstance(node, ast.Import) else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "rag" and len(parts) > 1 and parts[1] != room:
                    out.add(parts[1])
    return edges


#: the layers of docs/architecture.md, bottom first: a room may import rooms of its own layer or
#: below, never above; the top layer (the application: the config schema, the stage cache, the
#: runner and the commands) alone reads the whole config
LAYERS = [
    {"core", "names", "errors", "exit_codes", "trace_links", "__init__"},
    {"corpus"},
    {"index"},
    {"search", "peers"},
    {"eval"},
    {"ledger", "datasets", "retriever"},
    {"golden"},
    {"app", "config", "config_cache", "stages", "run", "search_cli", "serve", "bench", "gate",
     "golden_cli", "ledger_cli", "reranker_cli", "report", "cli", "__main__"},
]


def layer_of(room: str) -> int:
    for i, rooms in enumerate(LAYERS):
        if room in rooms:
            return i
    raise AssertionError(f"rag/{room}: in no layer of tests/test_layers.py LAYERS "
                         "(docs/architecture.md says where a new room goes)")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one room (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycles_finds_a_cycle_and_only_it():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_import_graph_has_no_cycle():
    assert cycles(import_graph()) == []


def test_no_room_imports_a_layer_above_its_own():
    for room in import_graph():  # every room is in a layer, imported or not
        layer_of(room)
    climbs = [f"rag/{room} imports rag/{dep}" for room, deps in import_graph().items()
              for dep in sorted(deps) if layer_of(dep) > layer_of(room)]
    assert climbs == []


def test_no_main_block_imports_the_cli():
    offenders = []
    for f in PACKAGE.rglob("*.py"):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in tree.body:
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                    and getattr(node.test.left, "id", None) == "__name__"):
                for sub in ast.walk(node):
                    if (isinstance(sub, ast.ImportFrom) and sub.module == "rag.cli") or (
                            isinstance(sub, ast.Import)
                            and any(a.name == "rag.cli" for a in sub.names)):
                        offenders.append(str(f.relative_to(PACKAGE)))
    assert offenders == []


def test_the_bottom_layers_import_only_downward():
    g = import_graph()
    assert g["core"] == set()
    assert g["corpus"] <= {"core", "names", "errors"}
    assert g["peers"] <= {"core"}
    assert g["index"] <= {"core", "corpus", "names", "errors"}
    assert g["search"] <= {"core", "corpus", "index", "names", "errors"}
    # the sweep orchestration lives in rag/app/: the ledger reads no command or runner
    assert not g["ledger"] & {"cli", "run", "stages", "report", "ledger_cli", "config", "app"}
