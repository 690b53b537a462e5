"""The Retriever contract over HTTP: where hits, signals and timings sit in a retriever
server's JSON answer (``retriever.response``), and the request rag sends its own server
(``retriever.request``; placeholders in rag/eval/retriever.py). Defaults: ``rag serve``'s answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class HttpHitMapping:
    """Where each field of one hit sits inside a hit object of an HTTP retriever's answer
    (dotted paths; null or "": the answer has no such field)."""

    path: str = "path"
    symbol: Optional[str] = "symbol"
    start_line: Optional[str] = "start_line"
    end_line: Optional[str] = "end_line"
    category: Optional[str] = "category"
    # the value the ranking sorted on (absent: the rank order decides)
    score: Optional[str] = "score"
    scores: Optional[str] = "scores"
    chunk_id: Optional[str] = "chunk_id"
    text: Optional[str] = "text"


@dataclass
class HttpResponseMapping:
    """Where things sit in an HTTP retriever's JSON answer: dotted paths (``data.results``;
    a number indexes a list), null or "" for a field the answer does not have. Defaults:
    ``rag serve``'s answer (the seed's hit shape plus ``dropped`` / ``weak_match``)."""

    # the hits a caller receives (after abstention)
    hits: str = "hits"
    # the ranking before abstention; an answer without it is ranked by its hits
    ranked: Optional[str] = "ranked"
    dropped: Optional[str] = "dropped"
    weak_match: Optional[str] = "weak_match"
    reason: Optional[str] = "reason"
    route: Optional[str] = "route"
    # the server's own per-stage timings (logged as latency_server_<stage>_*)
    timings: Optional[str] = "timings_ms"
    signals: Optional[str] = "signals"
    top_dense: Optional[str] = "top_dense"
    top_rerank: Optional[str] = "top_rerank"
    gate_score: Optional[str] = "gate_score"
    # which signal the server's abstention read (top_dense, rerank, learned)
    abstention: Optional[str] = "abstention"
    hit: HttpHitMapping = field(default_factory=HttpHitMapping)


# rag serve's request for an evaluation: the ranking to eval.depth before abstention, every
# abstention signal and the returned chunks' text (placeholders: rag/eval/retriever.py)
HTTP_REQUEST = ('{"query": "{query}", "top_k": "{top_k}", "depth": "{depth}", '
                '"types": "{types}", "signals": true, "with_text": true}')
