"""One contract for anything that retrieves (DESIGN.md §8): the built-in pipeline, a TREC run
file, or a user's Python object are judged by the same evaluator.

A :class:`Retriever` answers a :class:`Query` with a :class:`rag.search.pipeline.SearchResult`:
``ranked`` (the ranking to ``depth`` distinct paths, before abstention), ``hits`` (what a
caller receives after abstention, with ``dropped`` / ``weak_match``), per-stage
``timings_ms`` (``total`` at least) and, where known, ``reason`` for an empty answer,
per-query abstention ``signals`` and ``hit_texts`` (the returned chunks' text, for the
context-size metrics). Everything else is optional.

Implementations are registered by name in :data:`RETRIEVERS` (``retriever.kind``); each
builder takes the composed config and keyword-only resources and returns a Retriever.

* ``pipeline`` — :class:`PipelineRetriever`, the harness's own stages.
* ``run_file`` — :class:`RunFileRetriever`, a TREC run file (``qid Q0 docno rank score tag``;
  a docno ``path#symbol`` names a symbol of that path). Queries missing from the run get an
  empty answer with ``reason`` "not in the run file" and are counted (``missing_queries``).
* ``python`` — ``retriever.factory: "module:function"``, called with the config, returning
  any object with a ``retrieve(query, *, depth)`` method.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from rag.search.pipeline import Hit, SearchPipeline, SearchResult


@dataclass(frozen=True)
class Query:
    """One question put to a retriever: its golden id, its text and (``eval.filter=expected``)
    the document categories to restrict it to (empty: all)."""

    id: str
    text: str
    types: tuple[str, ...] = ()


@runtime_checkable
class Retriever(Protocol):
    """Answers one query; see the module docstring for the result's fields.

    Attributes:
        kind: the registry name (``pipeline``, ``run_file``, ``python`` ...).
        top_k: how many hits a caller receives (the evaluator's "answer" size).
    """

    kind: str
    top_k: int

    def retrieve(self, query: Query, *, depth: int) -> SearchResult: ...


class PipelineRetriever:
    """The built-in pipeline as a :class:`Retriever`.

    Args:
        pipeline: a :class:`rag.search.pipeline.SearchPipeline`.
    """

    kind = "pipeline"

    def __init__(self, pipeline: SearchPipeline) -> None:
        self.pipeline = pipeline
        self.top_k = pipeline.options.top_k
        self._text = {c.id: c.text for c in pipeline.index.chunks}
        # categories of indexed paths: lets the evaluator tell when a type filter hid the answer
        self.path_categories = {c.path: c.category for c in pipeline.index.chunks}
        # the dense bands are the abstention (they never act on a BM25-only route)
        self.bands_on_top_dense = pipeline.gate is None and not (
            pipeline.options.rerank_gated and pipeline.reranker is not None)

    def retrieve(self, query: Query, *, depth: int) -> SearchResult:
        """Search ``query`` (with its type filter, if any), every abstention signal measured."""
        p = self.pipeline
        if query.types:
            p = SearchPipeline(p.index, replace(p.options, types=tuple(query.types)),
                               reranker=p.reranker, gate=p.gate)
        res = p.search(query.text, depth=depth, with_signals=True)
        res.hit_texts = [self._text[h.chunk_id] for h in res.hits]
        return res


def parse_run_file(path: Path) -> dict[str, list[tuple[str, float]]]:
    """A TREC run file as query id -> [(docno, score)] in the file's rank order.

    Lines are ``qid Q0 docno rank score tag`` (whitespace-separated); within a query the rank
    column orders the documents (the score is kept for display): rag writes ranks in the exact
    order its metrics used, which 6-decimal scores may not preserve.

    Raises:
        ValueError: a line without six fields or with a non-integer rank / non-numeric score,
            naming the file and the line number.
    """
    out: dict[str, list[tuple[int, str, float]]] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 6:
                raise ValueError(f"{path}:{n}: a TREC run line has 6 fields "
                                 f"(qid Q0 docno rank score tag), got {len(parts)}")
            qid, _, doc, rank, score, _ = parts
            try:
                out.setdefault(qid, []).append((int(rank), doc, float(score)))
            except ValueError:
                raise ValueError(f"{path}:{n}: rank must be an integer and score a number, got "
                                 f"{rank!r} and {score!r}") from None
    return {q: [(d, s) for _, d, s in sorted(rows, key=lambda r: (r[0], r[1]))]
            for q, rows in out.items()}


class RunFileRetriever:
    """A TREC run file (or every ``*.trec`` / ``*.run`` / ``*.txt`` file of a directory) as a
    :class:`Retriever`: no abstention (``hits`` = the first ``top_k`` of the ranking).

    Args:
        path: the run file or directory.
        top_k: hits a caller would receive.

    Raises:
        FileNotFoundError: ``path`` does not exist or the directory holds no run file.
        ValueError: a malformed line (file and line named) or a query in two files.
    """

    kind = "run_file"

    def __init__(self, path: Path, *, top_k: int = 8) -> None:
        path = Path(path)
        files = sorted(p for p in path.iterdir() if p.suffix in (".trec", ".run", ".txt")) \
            if path.is_dir() else [path]
        if not path.exists() or not files:
            raise FileNotFoundError(f"retriever.path={str(path)!r}: no run file there")
        self.run: dict[str, list[tuple[str, float]]] = {}
        h = hashlib.sha256()
        for f in files:
            h.update(f.read_bytes())
            for qid, docs in parse_run_file(f).items():
                if qid in self.run:
                    raise ValueError(f"query {qid!r} appears in two run files ({f})")
                self.run[qid] = docs
        self.fingerprint = h.hexdigest()
        self.top_k = top_k
        self.missing: list[str] = []

    def retrieve(self, query: Query, *, depth: int) -> SearchResult:
        """The run's ranking of ``query`` (empty, with a reason, if the run has none)."""
        docs = self.run.get(query.id)
        if docs is None:
            self.missing.append(query.id)
            return SearchResult(hits=[], ranked=[], route="run_file", top_dense=None, dropped=0,
                                weak_match=False, timings_ms={"total": 0.0},
                                reason="not in the run file")
        ranked = []
        for i, (doc, score) in enumerate(docs):
            path, _, symbol = doc.partition("#")
            # rank order is the truth: the score the metrics sort on falls with the rank
            ranked.append(Hit(chunk_id=f"{doc}@{i + 1}", path=path, symbol=symbol or None,
                              start_line=0, end_line=0, category="", score=float(len(docs) - i),
                              scores={"run": score}))
        return SearchResult(hits=ranked[:self.top_k], ranked=ranked, route="run_file",
                            top_dense=None, dropped=0, weak_match=False,
                            timings_ms={"total": 0.0})


def load_factory(spec: str) -> Callable[..., Any]:
    """``"package.module:function"`` -> the function.

    Raises:
        ValueError: not of that form, the module cannot be imported, or no such attribute.
    """
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"retriever.factory={spec!r}: expected 'module:function'")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ValueError(f"retriever.factory={spec!r}: cannot import {module!r} ({exc})") from None
    except AttributeError:
        raise ValueError(f"retriever.factory={spec!r}: {module!r} has no {attr!r}") from None
    if not callable(obj):
        raise ValueError(f"retriever.factory={spec!r}: {attr!r} is not callable")
    return obj


def _pipeline(cfg: Any, *, pipeline: SearchPipeline | None = None, **_: Any) -> PipelineRetriever:
    if pipeline is None:
        raise ValueError("retriever.kind=pipeline needs the built pipeline")
    return PipelineRetriever(pipeline)


def _run_file(cfg: Any, **_: Any) -> RunFileRetriever:
    from rag.config import expand_path

    if not cfg.retriever.path:
        raise ValueError("retriever.kind=run_file needs retriever.path=<TREC run file or directory>")
    return RunFileRetriever(expand_path(cfg.retriever.path, base=Path.cwd()),
                            top_k=int(cfg.search.top_k))


def _python(cfg: Any, **_: Any) -> Any:
    if not cfg.retriever.factory:
        raise ValueError("retriever.kind=python needs retriever.factory='module:function'")
    obj = load_factory(str(cfg.retriever.factory))(cfg)
    if not callable(getattr(obj, "retrieve", None)):
        raise ValueError(f"retriever.factory={cfg.retriever.factory!r} returned "
                         f"{type(obj).__name__}, which has no retrieve(query, *, depth) method")
    if not hasattr(obj, "top_k"):
        obj.top_k = int(cfg.search.top_k)
    if not hasattr(obj, "kind"):
        obj.kind = "python"
    return obj


# retriever.kind -> builder(cfg, *, pipeline=...) -> Retriever
RETRIEVERS: dict[str, Callable[..., Any]] = {"pipeline": _pipeline, "run_file": _run_file,
                                             "python": _python}


def build_retriever(cfg: Any, **resources: Any) -> Any:
    """The configured :class:`Retriever` (``retriever.kind`` in :data:`RETRIEVERS`).

    Raises:
        ValueError: an unknown kind (naming the known ones) or a builder's own error.
    """
    kind = str(cfg.retriever.kind)
    if kind not in RETRIEVERS:
        raise ValueError(f"retriever.kind must be one of {sorted(RETRIEVERS)}, got {kind!r}")
    return RETRIEVERS[kind](cfg, **resources)
