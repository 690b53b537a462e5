"""``rag golden show FILE``: a file's chunks as the index cuts them — lines, kind, symbol —
and its category, for writing labels by hand (golden/README.md "three units": a ``symbol``
label names one of these symbols, a ``lines`` label a span of these lines)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


class ShowError(ValueError):
    """A file ``rag golden show`` cannot show: one line, exit 2."""


def file_chunks(root: Path, path: str) -> dict[str, Any]:
    """The chunks of ``root/path`` as :func:`rag.corpus.chunk.chunk_document` cuts them.

    Returns:
        ``{"path", "category", "language", "lines", "chunks": [{"start_line", "end_line",
        "kind", "symbol", "label"}]}`` (a ``module`` chunk also has ``runs``: the ``[a, b]``
        runs of its lines that no symbol holds): ``lines`` the file's line count; ``label`` the
        label that names the chunk's unit (``{path, symbol}``; ``{path, lines}`` for a
        window; None for ``<module>`` code, whose chunk spans the lines between the symbols:
        label a span of them).

    Raises:
        ShowError: the file is missing, a directory, or not text (binary).
    """
    from rag.corpus.chunk import chunk_document, split_lines
    from rag.corpus.languages import MODULE_SYMBOL, language_name
    from rag.corpus.walk import Document, categorize

    f = Path(root) / path
    if f.is_dir():
        raise ShowError(f"{f}: is a directory (give a file)")
    if not f.is_file():
        raise ShowError(f"{f}: no such file")
    data = f.read_bytes()
    if b"\0" in data[:8192]:
        raise ShowError(f"{f}: a binary file (never indexed)")
    text = data.decode("utf-8", errors="replace")
    category = categorize(path)
    chunks = chunk_document(Document(path=path, category=category, text=text, size=len(data)))
    out = []
    held = [(c.start_line, c.end_line) for c in chunks if c.kind != "module"]
    blank = {n for n, line in enumerate(split_lines(text), 1) if not line.strip()}
    for c in sorted(chunks, key=lambda c: (c.start_line, c.end_line)):
        if c.symbol and c.symbol != MODULE_SYMBOL:
            label = {"path": path, "symbol": c.symbol}
        elif c.kind == "module":  # its lines are those no symbol holds: pick a span of them
            label = None
        else:
            label = {"path": path, "lines": [c.start_line, c.end_line]}
        row = {"start_line": c.start_line, "end_line": c.end_line, "kind": c.kind,
               "symbol": c.symbol, "label": label}
        if c.kind == "module":
            row["runs"] = _runs_outside(c.start_line, c.end_line, held, blank)
        out.append(row)
    return {"path": path, "category": category, "language": language_name(path),
            "lines": len(split_lines(text)), "chunks": out}


def _runs_outside(start: int, end: int, held: list[tuple[int, int]],
                  blank: set[int] | frozenset[int] = frozenset()) -> list[list[int]]:
    """The runs ``[a, b]`` of lines ``start..end`` (1-based, inclusive) that no span of
    ``held`` covers: where module code lies between the symbols. ``blank`` lines never
    start or end a run, and a run goes on across them (blank lines between two methods
    are no module code)."""
    covered = set()
    for a, b in held:
        covered.update(range(max(a, start), min(b, end) + 1))
    runs: list[list[int]] = []
    joinable = False  # only uncovered blank lines since the last run's end
    for n in range(start, end + 1):
        if n in covered:
            joinable = False
        elif n in blank:
            continue
        elif runs and joinable:
            runs[-1][1] = n
        else:
            runs.append([n, n])
            joinable = True
    return runs


#: module-code runs shown per row of the table (the JSON lists them all)
SHOWN_RUNS = 3


def _relative(file: str, root: str | None) -> tuple[Path, str]:
    """(corpus directory, FILE's corpus-relative POSIX path)."""
    import os

    def absolute(p: Path) -> Path:  # absolute, a symlink kept as its own name
        return Path(os.path.abspath(p))

    f = Path(file).expanduser()
    if root is not None:
        base = Path(root).expanduser().resolve()
        if not base.is_dir():
            raise ShowError(f"--path {root}: not a directory")
        # relative: to the corpus directory, unless only the current directory holds it
        in_cwd = not f.is_absolute() and (Path.cwd() / f).exists() and not (base / f).exists()
        full = absolute(f if f.is_absolute() or in_cwd else base / f)
    else:
        full = absolute(f)
        base = next((d for d in full.parents if (d / ".git").exists()), full.parent)
    try:
        return base, full.relative_to(base).as_posix()
    except ValueError:
        raise ShowError(f"{file}: not under the corpus directory {base}") from None


def add_show_parser(sub) -> argparse.ArgumentParser:
    """Register ``show`` on the ``rag golden`` action subparsers."""
    p = sub.add_parser(
        "show", help="a file's chunks (lines, kind, symbol) and category, for writing labels",
        description=(
            "Print the chunks rag cuts FILE into, as the index does: each chunk's lines, kind "
            "and symbol, and the label that names its unit (path + symbol, or path + lines "
            "for module code and windows), with the file's category. FILE is a path on disk "
            "or relative to --path; its corpus-relative path (what a label's path: is) is "
            "taken from --path, else the enclosing git work tree."))
    p.add_argument("file", metavar="FILE", help="the file")
    p.add_argument("--path", default=None, metavar="DIR",
                   help="the corpus directory (default: the enclosing git work tree, else "
                        "the file's directory)")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def show_command(args: argparse.Namespace) -> int:
    """``rag golden show``: exit 0, or 2 with one ``error:`` line."""
    try:
        root, rel = _relative(args.file, args.path)
        got = file_chunks(root, rel)
    except (ShowError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from rag.golden.review import indexed_paths

    got["indexed"] = rel in indexed_paths(root)
    if not got["indexed"]:
        print(f"warning: rag does not index {rel} under {root} (ignored, excluded, a secret, "
              "a symlink, binary or too large): a label on it will not resolve", file=sys.stderr)
    if args.json:
        print(json.dumps(got, indent=2, ensure_ascii=False))
        return 0
    kinds = {c["kind"] for c in got["chunks"]}
    how = got["language"] or ("sections" if "section" in kinds else "line windows")
    print(f"{got['path']}  ({got['category']}, {how}, {got['lines']} lines, "
          f"{len(got['chunks'])} chunks)")
    def span_of(c: dict[str, Any]) -> str:  # module code: only the lines between symbols
        runs = c.get("runs") or [[c["start_line"], c["end_line"]]]
        text = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs[:SHOWN_RUNS])
        return text + (f", … (+{len(runs) - SHOWN_RUNS})" if len(runs) > SHOWN_RUNS else "")

    width = max([len(span_of(c)) for c in got["chunks"]] + [5])
    print(f"  {'lines':<{width}}  {'kind':<8}  label")
    for c in got["chunks"]:
        span = span_of(c)
        lab = c["label"]
        what = (f"symbol: {lab['symbol']}" if lab and "symbol" in lab
                else f"lines: [{lab['lines'][0]}, {lab['lines'][1]}]" if lab
                else "(module code: the lines no symbol holds; label a span of them)")
        print(f"  {span:<{width}}  {c['kind']:<8}  {what}")
    print(f"a label: {{path: {got['path']}, symbol: ...}} or {{path: {got['path']}, "
          "lines: [start, end]}")
    return 0
