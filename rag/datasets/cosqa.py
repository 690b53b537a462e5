"""CoSQA dev-500 as a rag corpus and golden set, read from local files (nothing is fetched).

CoSQA (Huang et al., "CoSQA: 20,000+ Web Queries for Code Search and Question Answering",
ACL 2021; data under the Computational Use of Data Agreement, C-UDA) pairs real web queries
with Python functions. The user supplies its retrieval files in one folder (default: the
project's ``../shared/data/cosqa``):

* ``code_idx_map.txt``: one JSON object, function source -> integer index (6,267 functions);
* ``cosqa-retrieval-dev-500.json``: 500 items; ``idx`` the query id, ``doc`` the query,
  ``retrieval_idx`` the index of its one relevant function.

``python -m rag.datasets.cosqa [--src DIR] [--out DIR]`` writes under ``--out`` (default
``$RAG_CACHE_DIR/datasets/cosqa-dev-500``, i.e. ``~/.cache/rag/datasets/cosqa-dev-500``):

* ``corpus/functions/fNNNN.py``: one file per function holding its source text exactly
  (UTF-8, no newline added or translated); ``NNNN`` is the function's index, zero-padded.
  rag's Python chunker makes exactly one chunk of each of these files, whose text is the
  whole file (checked by :func:`convert`), so with ``index.header=none`` each function is
  indexed as its raw source, as in the reference figures;
* ``golden/queries.yaml``: the 500 queries, each with its one relevant path, ``corpus:
  cosqa-dev-500``; ``golden/negatives.yaml``: ``negatives: []`` (CoSQA has no unanswerable
  queries, so abstention rates are not measured: ``abstain_rate`` is absent, not 0).

Then ``python -m rag.run corpus=cosqa eval=cosqa index.header=none search.mode=bm25`` (or
``search.mode=dense``); see experiments/cosqa.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import yaml

from rag.core.paths import project_root

CORPUS_NAME = "cosqa-dev-500"
CODE_MAP = "code_idx_map.txt"
DEV_FILE = "cosqa-retrieval-dev-500.json"
CORPUS_DIR = "corpus"
GOLDEN_DIR = "golden"


class CosqaError(RuntimeError):
    """The source folder is missing a file or holds something unexpected."""


def default_src() -> Path:
    """``../shared/data/cosqa`` next to the project root."""
    return (project_root().parent / "shared" / "data" / "cosqa").resolve()


def default_out() -> Path:
    """``$RAG_CACHE_DIR/datasets/cosqa-dev-500`` (default cache dir ``~/.cache/rag``)."""
    cache = os.environ.get("RAG_CACHE_DIR") or "~/.cache/rag"
    return (Path(cache).expanduser() / "datasets" / CORPUS_NAME).resolve()


def function_path(idx: int) -> str:
    """The corpus-relative path of function ``idx``: ``functions/f0042.py``."""
    return f"functions/f{idx:04d}.py"


def read_source(src: Path) -> tuple[dict[int, str], list[dict]]:
    """(index -> function source, dev items) from ``src``.

    Raises:
        CosqaError: a file is missing or malformed, an index repeats, or a query's
            ``retrieval_idx`` is not in the map.
    """
    src = Path(src)
    for name in (CODE_MAP, DEV_FILE):
        if not (src / name).is_file():
            raise CosqaError(f"{src / name}: not found (supply CoSQA's retrieval files in {src}; "
                             "see rag/datasets/cosqa.py)")
    try:
        code_map = json.loads((src / CODE_MAP).read_text(encoding="utf-8"))
        dev = json.loads((src / DEV_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CosqaError(f"{src}: not valid JSON: {exc}") from exc
    if not isinstance(code_map, dict) or not isinstance(dev, list):
        raise CosqaError(f"{src}: expected a JSON object in {CODE_MAP} and a list in {DEV_FILE}")
    functions: dict[int, str] = {}
    for code, idx in code_map.items():
        i = int(idx)
        if i in functions:
            raise CosqaError(f"{src / CODE_MAP}: index {i} maps two functions")
        functions[i] = code
    for item in dev:
        if int(item["retrieval_idx"]) not in functions:
            raise CosqaError(f"{src / DEV_FILE}: query {item.get('idx')!r} has retrieval_idx "
                             f"{item['retrieval_idx']!r}, not in {CODE_MAP}")
    return functions, dev


def convert(src: Path, out: Path, *, corpus_name: str = CORPUS_NAME) -> dict[str, int]:
    """Write ``out/corpus`` and ``out/golden`` from the CoSQA files in ``src``.

    Existing ``.py`` files under ``out/corpus/functions`` that are not part of the dataset are
    removed, so a re-run leaves exactly the dataset's files.

    Returns:
        Counts: ``functions``, ``queries``.

    Raises:
        CosqaError: see :func:`read_source`; or a function file would not be indexed as one
            chunk holding its whole text.
    """
    from rag.corpus.chunk import chunk_document
    from rag.corpus.walk import Document

    functions, dev = read_source(src)
    out = Path(out)
    fdir = out / CORPUS_DIR / "functions"
    fdir.mkdir(parents=True, exist_ok=True)
    wanted = {Path(function_path(i)).name for i in functions}
    for stale in fdir.glob("*.py"):
        if stale.name not in wanted:
            stale.unlink()
    for i, code in sorted(functions.items()):
        path = function_path(i)
        with warnings.catch_warnings():  # ast.parse warns on the data's invalid escapes
            warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
            chunks = chunk_document(Document(path=path, category="source", text=code,
                                             size=len(code.encode("utf-8"))))
        if len(chunks) != 1 or chunks[0].text != code:
            raise CosqaError(f"function {i}: the chunker makes {len(chunks)} chunk(s) of it, "
                             "not one chunk holding its whole text")
        target = out / CORPUS_DIR / path
        data = code.encode("utf-8")
        if not target.is_file() or target.read_bytes() != data:  # keep mtimes: chunk cache
            target.write_bytes(data)
    queries = []
    for item in dev:
        queries.append({"id": str(item["idx"]), "query": str(item["doc"]).strip(),
                        "relevant": [{"path": function_path(int(item["retrieval_idx"]))}]})
    gdir = out / GOLDEN_DIR
    gdir.mkdir(parents=True, exist_ok=True)
    head = (f"# CoSQA dev-500 (C-UDA licence), converted by python -m rag.datasets.cosqa from "
            f"{Path(src).resolve()}\n")
    body = yaml.safe_dump({"corpus": corpus_name, "queries": queries}, sort_keys=False,
                          allow_unicode=True, width=1_000_000)
    (gdir / "queries.yaml").write_text(head + body, encoding="utf-8")
    (gdir / "negatives.yaml").write_text(
        head + "# CoSQA has no unanswerable queries: abstention rates are not measured.\n"
        + yaml.safe_dump({"corpus": corpus_name, "negatives": []}, sort_keys=False),
        encoding="utf-8")
    return {"functions": len(functions), "queries": len(queries)}


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m rag.datasets.cosqa [--src DIR] [--out DIR]``."""
    ap = argparse.ArgumentParser(prog="python -m rag.datasets.cosqa",
                                 description="Convert CoSQA dev-500 (local files, nothing is "
                                             "fetched) into a rag corpus and golden set.")
    ap.add_argument("--src", type=Path, default=None,
                    help=f"folder with {CODE_MAP} and {DEV_FILE} (default: {default_src()})")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"output folder (default: {default_out()})")
    ap.add_argument("--corpus-name", default=CORPUS_NAME,
                    help="the golden set's corpus: field (the run's corpus.name)")
    args = ap.parse_args(argv)
    src = args.src.expanduser().resolve() if args.src else default_src()
    out = args.out.expanduser().resolve() if args.out else default_out()
    try:
        counts = convert(src, out, corpus_name=args.corpus_name)
    except CosqaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {counts['functions']} functions to {out / CORPUS_DIR} and "
          f"{counts['queries']} queries to {out / GOLDEN_DIR}")
    where = ("corpus=cosqa eval=cosqa" if out == default_out() and args.corpus_name == CORPUS_NAME
             else f"corpus=cosqa eval=cosqa corpus.path={out / CORPUS_DIR} "
                  f"corpus.name={args.corpus_name} eval.golden_dir={out / GOLDEN_DIR}")
    print(f"evaluate: python -m rag.run {where} index.header=none search.mode=bm25 "
          "bm25.tokenizer=identifiers   (or search.mode=dense)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
