"""``rag golden mine --from docstrings``: a Python docstring's summary as the query, the symbol
it documents as the label (its own docstring masked when leakage is measured); see
rag/golden/mining.py's docstring."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path
from typing import Any

from rag.golden.mining import MineResult, MiningError, WORD, chunks_of, leakage, mask_docstrings, safe_id, walk_documents

#: ``rag golden mine --from docstrings``
SOURCE = "docstrings"
#: the tag its candidates carry
TAG = "mined_docstring"
#: what ``examined`` counts
NOUN = "documented symbols"
#: every skip reason (each counted, 0 too)
SKIPS = ("short_summary", "duplicate_summary", "over_max")


def docstring_summary(doc: str) -> str:
    """The summary of a cleaned docstring: the first sentence (up to ``.``, ``!`` or ``?``
    followed by a space) of its first paragraph, lines joined by single spaces."""
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    joined = " ".join(para.split())
    m = re.match(r"(.+?[.!?])(?=\s)", joined)
    return m.group(1) if m else joined


def _documented_symbols(tree: ast.Module) -> list[tuple[str, str, str]]:
    """(symbol, kind, docstring) of every definition the Python chunker makes a chunk of."""
    out: list[tuple[str, str, str]] = []

    def visit_class(node: ast.ClassDef, prefix: str) -> None:
        qual = f"{prefix}{node.name}"
        doc = ast.get_docstring(node)
        if doc:
            out.append((qual, "class", doc))
        for child in node.body:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(child)
                if d:
                    out.append((f"{qual}.{child.name}", "method", d))
            elif isinstance(child, ast.ClassDef):
                visit_class(child, f"{qual}.")

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            d = ast.get_docstring(node)
            if d:
                out.append((node.name, "function", d))
        elif isinstance(node, ast.ClassDef):
            visit_class(node, "")
    return out


def mine_docstrings(root: Path, *, max_candidates: int | None = 200, min_words: int = 3,
                    max_file_bytes: int = 1_000_000, exclude: list[str] | None = None,
                    include: list[str] | None = None) -> MineResult:
    """Candidates from the docstrings of the corpus's Python files (module docstring)."""
    from rag.corpus.languages import language_name

    root = Path(root)
    if not root.is_dir():
        raise MiningError(f"--path {root}: not a directory")
    docs = walk_documents(root, max_file_bytes=max_file_bytes, exclude=exclude, include=include)
    skipped: Counter = Counter({r: 0 for r in SKIPS})
    found: list[dict[str, Any]] = []
    examined = 0
    for path, doc in docs.items():
        if language_name(path) != "python":
            continue
        try:
            tree = ast.parse(doc.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        syms = _documented_symbols(tree)
        if not syms:
            continue
        chunks = chunks_of(path, doc.text)
        masked_chunks = chunks_of(path, mask_docstrings(doc.text, "python"))
        for symbol, kind, text in syms:
            examined += 1
            summary = docstring_summary(text)
            if len(WORD.findall(summary)) < min_words:
                skipped["short_summary"] += 1
                continue
            body = "".join(c.text for c in chunks if c.symbol == symbol)
            masked = "".join(c.text for c in masked_chunks if c.symbol == symbol)
            if not body:  # not a chunk of its own (the chunker and this walk disagree)
                continue
            found.append({"path": path, "symbol": symbol, "kind": kind, "query": summary,
                          "category": doc.category,
                          "leakage": leakage(summary, body),
                          "leakage_masked": leakage(summary, masked)})
    counts = Counter(" ".join(f["query"].lower().split()) for f in found)
    unique = []
    for f in found:
        if counts[" ".join(f["query"].lower().split())] > 1:
            skipped["duplicate_summary"] += 1
        else:
            unique.append(f)
    if max_candidates is not None and len(unique) > max_candidates:
        step = len(unique) / max_candidates
        keep = [unique[int(i * step)] for i in range(max_candidates)]
        skipped["over_max"] += len(unique) - len(keep)
        unique = keep
    seen_ids: set[str] = set()
    candidates = [{
        "id": safe_id("doc", f"{f['path']}-{f['symbol']}", seen_ids),
        "query": f["query"],
        "source": "mined:docstring",
        "tags": [TAG],
        "types": [f["category"]],
        "relevant": [{"path": f["path"], "symbol": f["symbol"]}],
        "note": (f"{f['kind']} docstring summary; {int(round(100 * f['leakage']))}% of its "
                 f"tokens are in the chunk, {int(round(100 * f['leakage_masked']))}% with "
                 "docstrings masked"),
        "kind": f["kind"],
        "leakage": f["leakage"],
        "leakage_masked": f["leakage_masked"],
    } for f in unique]
    return MineResult("docstrings", candidates, skipped, examined)


def from_args(args, *, root: Path, max_candidates: int | None, walk: dict) -> MineResult:
    """Run this miner with ``rag golden mine``'s parsed options (``walk``: the walker's
    ``max_file_bytes`` / ``exclude`` / ``include``)."""
    return mine_docstrings(root, max_candidates=max_candidates, min_words=args.min_words,
                           **walk)
