"""Benchmark section 1: our BM25 channel against rank-bm25's ``BM25Okapi`` used directly.

Both score the same token lists (our code-aware tokenizer, :mod:`rag.index.tokenize`), so
the build times compare index construction alone; tokenizing is reported once, separately.
A query is timed end to end on each side: ours is :meth:`BM25Channel.search` (tokenize,
score every chunk, top ``depth`` positive scores); the peer is ``tokenize`` +
``BM25Okapi.get_scores`` + ``numpy.argsort`` (what rank-bm25's own ``get_top_n`` does).
``BM25Okapi`` gets ``epsilon=0``, as our ``rank_bm25`` backend does (see
:class:`rag.index.bm25.RankBM25Scorer`), so both rank by the same Okapi formula.

The large corpus replicates the default corpus's chunks until it reaches about
``target_chunks``; each replica's paths get a ``replicaNN/`` prefix, so the replicas are
distinct documents (their ``path`` header tokens differ).
"""

from __future__ import annotations

import gc
import math
import time
from typing import Sequence

import numpy as np

from rag.bench.measure import progress, ratio, spread, summary
from rag.index.bm25 import BM25Channel, Bm25sScorer
from rag.index.tokenize import tokenize


def _header(path: str, symbol: str | None) -> str:
    # the same header as Chunk.indexed_text (rag/corpus/chunk.py)
    return f"{path}: {symbol}\n" if symbol else f"{path}\n"


def corpus_tokens(chunks: Sequence, *, replicas: int = 1) -> list[list[str]]:
    """Token lists of ``chunks`` (objects with ``path``, ``symbol``, ``text``), ``replicas``
    times over; replica ``r > 0`` prefixes every path with ``replica{r:02d}/``.

    The header line ends in a newline, so tokenizing header and body apart gives exactly the
    tokens of the whole ``indexed_text`` (no token spans a line break); bodies are tokenized
    once and reused by every replica.
    """
    bodies = [tokenize(c.text) for c in chunks]
    out = []
    for r in range(replicas):
        prefix = f"replica{r:02d}/" if r else ""
        out.extend(tokenize(_header(prefix + c.path, c.symbol)) + body
                   for c, body in zip(chunks, bodies))
    return out


def reference_ranking(scores: np.ndarray, depth: int) -> list[int]:
    """The top ``depth`` chunks with a positive score, ordered by (-score, index): the order
    our channel returns, applied to the peer's float64 scores."""
    pos = np.flatnonzero(scores > 0)
    order = np.lexsort((pos, -scores[pos]))
    return [int(i) for i in pos[order[:depth]]]


def _okapi(tokens: list[list[str]], k1: float, b: float):
    from rank_bm25 import BM25Okapi

    return BM25Okapi(tokens, k1=k1, b=b, epsilon=0.0)


def bench_corpus(tokens: list[list[str]], queries: Sequence[str], *, label: str, k1: float,
                 b: float, depth: int, build_reps: int, query_passes: int) -> dict:
    """Build both indexes ``build_reps`` times (alternating which goes first) and time every
    query ``query_passes`` times on each (alternating per query); compare the rankings.

    Returns:
        JSON-ready dict: chunk count, ``build_ours``/``build_rank_bm25`` (s), query latency
        ``query_ours``/``query_rank_bm25`` (ms, p50 = median, with p95), their ratios (peer /
        ours: how many times faster ours is), and the ranking comparison.
    """
    n = len(tokens)
    t_ours: list[float] = []
    t_peer: list[float] = []
    ours = peer = None
    for rep in range(build_reps):
        for side in ((0, 1) if rep % 2 == 0 else (1, 0)):
            if side == 0:
                ours = None
            else:
                peer = None
            gc.collect()
            t0 = time.perf_counter()
            if side == 0:
                ours = BM25Channel(Bm25sScorer.build(tokens, k1=k1, b=b), backend="bm25s", n_chunks=n)
                t_ours.append(time.perf_counter() - t0)
            else:
                peer = _okapi(tokens, k1, b)
                t_peer.append(time.perf_counter() - t0)
        progress(f"bm25 {label}: build {rep + 1}/{build_reps} (ours {t_ours[-1]:.2f} s, "
                 f"rank_bm25 {t_peer[-1]:.2f} s)")

    peer_scores: dict[str, np.ndarray] = {}
    our_ranking: dict[str, list[int]] = {}

    def peer_search(q: str) -> list[int]:
        s = np.asarray(peer.get_scores(tokenize(q)))
        peer_scores[q] = s  # kept for the ranking comparison (outside the timing)
        return [int(i) for i in np.argsort(s)[::-1][:depth]]

    def our_search(q: str) -> None:
        our_ranking[q] = [i for i, _ in ours.search(q, depth)]

    our_search(queries[0])  # first-call costs (imports, caches) are not a query
    peer_search(queries[0])
    q_ours: list[float] = []
    q_peer: list[float] = []
    for p in range(query_passes):
        for i, q in enumerate(queries):
            for side in ((0, 1) if (i + p) % 2 == 0 else (1, 0)):
                t0 = time.perf_counter()
                if side == 0:
                    our_search(q)
                    q_ours.append((time.perf_counter() - t0) * 1000.0)
                else:
                    peer_search(q)
                    q_peer.append((time.perf_counter() - t0) * 1000.0)
        progress(f"bm25 {label}: query pass {p + 1}/{query_passes}")

    identical = 0
    differing: list[str] = []
    max_rel_diff = 0.0
    for q in queries:
        ref_scores = peer_scores[q].astype(np.float64)
        if our_ranking[q] == reference_ranking(ref_scores, depth):
            identical += 1
        else:
            differing.append(q)
        top = ref_scores.max() if ref_scores.size else 0.0
        if top > 0:
            diff = np.abs(ours.score(q).astype(np.float64) - ref_scores).max()
            max_rel_diff = max(max_rel_diff, float(diff / top))
    build_ours = summary(t_ours, unit="s")
    build_peer = summary(t_peer, unit="s")
    qo = summary(q_ours, unit="ms", p95=True)
    qp = summary(q_peer, unit="ms", p95=True)
    return {
        "label": label, "chunks": n, "queries": len(queries), "depth": depth,
        "build_ours": build_ours, "build_rank_bm25": build_peer,
        "build_ratio_rank_bm25_over_ours": ratio(build_peer["median"], build_ours["median"]),
        "query_ours": qo, "query_rank_bm25": qp,
        "query_speedup_p50": ratio(qp["median"], qo["median"]),
        "rankings_identical": identical, "rankings_compared": len(queries),
        "rankings_differing_queries": differing[:10],
        "max_score_diff_relative_to_top": max_rel_diff,
    }


def bench_bm25(chunks: Sequence, queries: Sequence[str], *, k1: float, b: float, depth: int,
               target_chunks: int, build_reps: int, query_passes: int,
               large_build_reps: int, large_query_passes: int,
               large_max_queries: int | None = None) -> dict:
    """Section 1 on the default corpus and on its replication to about ``target_chunks``.

    Args:
        chunks: the default corpus's chunks (:class:`rag.corpus.chunk.Chunk`).
        queries: query texts (the golden queries).
        depth: chunks ranked per query (``search.candidates``).
        target_chunks: size of the replicated corpus (rounded up to whole replicas).
        large_max_queries: on the replicated corpus, only the first this many queries spread evenly over
            the list (every query is ranked on the default corpus; rank_bm25 takes ~0.1-0.2 s per query at 50k).
    """
    t0 = time.perf_counter()
    tokens = corpus_tokens(chunks)
    tok_s = time.perf_counter() - t0
    n_tokens = sum(len(t) for t in tokens)
    out = {"tokenize": {"chunks": len(tokens), "tokens": n_tokens, "seconds": tok_s,
                        "chunks_per_s": len(tokens) / tok_s if tok_s else None},
           "target_chunks": target_chunks}
    out["default"] = bench_corpus(tokens, queries, label="default corpus", k1=k1, b=b,
                                  depth=depth, build_reps=build_reps, query_passes=query_passes)
    replicas = max(1, math.ceil(target_chunks / max(len(chunks), 1)))
    del tokens
    big = corpus_tokens(chunks, replicas=replicas)
    progress(f"bm25: replicated corpus {len(big)} chunks ({replicas} replicas)")
    out["replicated"] = bench_corpus(big, spread(queries, large_max_queries),
                                     label=f"{replicas} replicas", k1=k1, b=b,
                                     depth=depth, build_reps=large_build_reps,
                                     query_passes=large_query_passes)
    out["replicated"]["replicas"] = replicas
    del big
    gc.collect()
    return out
