"""The package's layers (docs/architecture.md): the import graph of rag/, computed from the
source, may not climb where the layering is already built."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rag"


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


def test_the_bottom_layers_import_only_downward():
    g = import_graph()
    assert g["core"] == set()
    assert g["corpus"] <= {"core", "names", "errors"}
    assert g["peers"] <= {"core"}
    assert g["index"] <= {"core", "corpus", "names", "errors"}
    assert g["search"] <= {"core", "corpus", "index", "names", "errors"}
    # the sweep orchestration lives in rag/app/: the ledger reads no command or runner
    assert not g["ledger"] & {"cli", "run", "stages", "report", "ledger_cli", "config", "app"}
