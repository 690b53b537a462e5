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
    {"core", "__init__"},
    {"corpus"},
    {"index"},
    {"search", "peers"},
    {"eval"},
    {"ledger", "datasets"},
    {"golden"},
    {"app", "bench", "run", "report", "gate", "__main__"},
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
                    if (isinstance(sub, ast.ImportFrom) and sub.module == "rag.app.cli") or (
                            isinstance(sub, ast.Import)
                            and any(a.name == "rag.app.cli" for a in sub.names)):
                        offenders.append(str(f.relative_to(PACKAGE)))
    assert offenders == []


def test_the_bottom_layers_import_only_downward():
    g = import_graph()
    assert g["core"] == set()
    assert g["corpus"] <= {"core"}
    assert g["peers"] <= {"core"}
    assert g["index"] <= {"core", "corpus"}
    assert g["search"] <= {"core", "corpus", "index"}
    # the sweep orchestration lives in rag/app/: the ledger reads no command, runner or schema
    assert "app" not in g["ledger"]


def test_the_top_level_holds_only_rooms_and_entry_points():
    """rag/ holds folders (the rooms) and the thin ``python -m rag.<name>`` entry points that
    run a module of rag/app/ as ``__main__``; nothing with logic of its own."""
    loose = sorted(f.stem for f in PACKAGE.glob("*.py") if f.stem not in {"__init__", "__main__"})
    for stem in loose:
        assert (PACKAGE / "app" / f"{stem}.py").is_file(), f"rag/{stem}.py: not an entry point"
        text = (PACKAGE / f"{stem}.py").read_text(encoding="utf-8")
        assert f'runpy.run_module("rag.app.{stem}", run_name="__main__"' in text
        assert len(text.splitlines()) < 10
    assert loose == ["gate", "report", "run"]
