"""The contract every retriever answers in (DESIGN.md §8): a :class:`Query` in, a
:class:`SearchResult` of :class:`Hit` chunks out. Plain dataclasses in the bottom layer, so that
the pipeline, the peers, the evaluator and the service share them without importing one
another; :mod:`rag.search.pipeline` and :mod:`rag.eval.retriever` re-export them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Query:
    """One question put to a retriever: its golden id, its text and (``eval.filter=expected``)
    the document categories to restrict it to (empty: all)."""

    id: str
    text: str
    types: tuple[str, ...] = ()


@dataclass
class Hit:
    """One returned chunk; ``score`` is the value the final ranking sorted on."""

    chunk_id: str
    path: str
    symbol: str | None
    start_line: int
    end_line: int
    category: str
    score: float
    scores: dict[str, float | None]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (the seed's hit shape plus ``chunk_id`` and ``score``)."""
        return asdict(self)


@dataclass
class SearchResult:
    """The answer to one query.

    Attributes:
        hits: what a caller receives: the first ``top_k`` of ``ranked``, after abstention
            (empty when dropped).
        ranked: the ranking down to ``depth`` distinct paths *before* abstention (what the
            ranking metrics score); never emptied by a threshold.
        route: the effective mode (bm25, dense, hybrid).
        top_dense: the best dense cosine over the corpus, or None if dense did not run.
        top_rerank: the best rerank score of the candidates, or None if no reranker ran.
        candidates: (path, symbol, start_line, end_line, chunk id) of the first stage's top
            ``rerank_candidates`` chunks, before any reranking (the pool a reranker can
            reorder), best first; the lines let span labels judge them.
        dropped: number of hits removed by the ``min_dense`` floor.
        weak_match: the top dense cosine fell in the weak band.
        timings_ms: wall time per stage (rag/search/pipeline.py ``STAGES``) and ``total``.
        channel_candidates: channel name -> the chunks (as ``candidates``) it handed on:
            its top ``candidates`` matches on a hybrid route, its ranking pool on a
            single-channel route, best first; None when the retriever does not report its
            channels (per-stage failure attribution, rag/eval/attribution.py).
        first_stage_top: the first stage's top ``top_k`` chunks (fused on a hybrid route)
            before any reranking; None when not reported.
    """

    hits: list[Hit]
    ranked: list[Hit]
    route: str
    top_dense: float | None
    dropped: int
    weak_match: bool
    timings_ms: dict[str, float] = field(default_factory=dict)
    # why nothing was returned, when an abstention was forced (e.g. an empty type filter)
    # or a lexical route found no hit (BM25Channel.empty_reason)
    reason: str | None = None
    top_rerank: float | None = None
    candidates: list[tuple[str, str | None, int, int, str]] = field(default_factory=list)
    # abstention signals (rag/search/signals.py), when asked for or when a learned gate ran
    signals: dict[str, float | None] | None = None
    # P(answerable) from the learned gate, when one decided abstention
    gate_score: float | None = None
    # the text of each returned hit, when the retriever knows it (context-size metrics)
    hit_texts: list[str] | None = None
    # the text of each ranked chunk (``ranked``), when the retriever knows it: recall at a
    # token budget (rag/eval/evaluate.py token_budget_metrics)
    ranked_texts: list[str] | None = None
    # why the retriever could not answer at all: "missing" (not in a run file) or "failed"
    # (an endpoint's timeout or error); the query scores 0 and is counted by the evaluator
    unanswered: str | None = None
    # per channel, the chunks it handed on; the first stage's top_k before reranking (None:
    # not reported, e.g. by a run file or a service; rag/eval/attribution.py)
    channel_candidates: dict[str, list[tuple[str, str | None, int, int, str]]] | None = None
    first_stage_top: list[tuple[str, str | None, int, int, str]] | None = None
