"""A semble-format dataset (repos.json, snapshots/*.tar.gz, annotations/*.json) in a
temporary directory: three Go files of a tiny chi router and three annotated queries."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path


SOURCES = {
    "router.go": "package chi\n\n// Router routes requests\nfunc NewRouter() *Mux {\n\treturn &Mux{}\n}\n\n"
                 "func (mx *Mux) Handle(pattern string) {\n\tmx.handle(pattern)\n}\n",
    "tree.go": "package chi\n\n// radix tree for path matching\ntype node struct {\n\tprefix string\n}\n\n"
               "func (n *node) findRoute(path string) *node {\n\treturn n\n}\n",
    "middleware/logger.go": "package middleware\n\n// Logger logs each request\nfunc Logger() {\n}\n",
    "README.md": "# chi\n\nA lightweight router.\n",
}


def _tarball(path: Path, top: str, files: dict[str, str], extra=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra or ():
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


ANNOTATIONS = [
    {"query": "radix tree path matching", "relevant": ["src/tree.go"], "secondary": [],
     "category": "semantic"},
    {"query": "NewRouter", "relevant": [{"path": "src/router.go", "start_line": 4, "end_line": 6}],
     "secondary": ["src/README.md", "docs/guide.md"]},
    {"query": "how are requests logged", "relevant": ["src/middleware/logger.go"],
     "secondary": ["src/gone.go"], "category": "architecture"},
]


def make_dataset(root: Path, *, repos=("chi",), annotations=ANNOTATIONS) -> Path:
    entries = []
    for name in repos:
        entries.append({"name": name, "language": "go", "url": f"https://x/{name}.git",
                        "revision": "0" * 40, "benchmark_root": "src"})
        _tarball(root / "snapshots" / f"{name}.tar.gz", name, SOURCES)
        (root / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "annotations" / f"{name}.json").write_text(json.dumps(annotations))
    (root / "repos.json").write_text(json.dumps(entries))
    return root
