"""The retrieval pipeline: route -> channels -> fusion -> ranking -> rerank -> abstention -> hits.

The pipeline names no channel: a route is one registered channel (rag/search/channels.py
``CHANNELS``) or a fusion (rag/search/fusion.py ``FUSIONS``, ``fusion.method``) over
``search.fuse``. Every hit carries its per-stage scores (one per
registered channel, then the fusion method's (``rrf``, ``wsum``, ``combmnz``), the ranking stage's features (``rank:<feature>``) and its
score (``ranking``), and ``rerank``; None where a stage did not score it), so a result can be
attributed to a stage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rag.core.contract import Hit, Query, SearchResult  # noqa: F401 - the contract types, re-exported
from rag.index.build import Index
from rag.search.abstain import Band, band
from rag.search.channels import CHANNEL_NAMES, channel_of, has_channel, top_matches
from rag.search.fusion import DEFAULT_METHOD, DEFAULT_NORM, fuse
from rag.search.ranking import RankingOptions, RankingStage
from rag.search.ranking.query_shape import query_shape
from rag.search.route import route

# every stage a search may time, in pipeline order (a channel's own stage is its name)
STAGES = ("route", "embed_query", *CHANNEL_NAMES, "fusion", "ranking", "rerank", "abstain")


@dataclass(frozen=True)
class SearchOptions:
    """Every search flag (the ``search``, ``fusion`` and ``abstain`` config groups)."""

    mode: str = "auto"
    prose_mode: str = "dense"
    top_k: int = 8
    candidates: int = 40
    # the chunks of a single-channel route the ranking stage re-ranks, at any depth
    rank_pool: int = 400
    rrf_k: int = 60
    # how a hybrid route fuses its channels (rag/search/fusion.py FUSIONS) and, for the
    # score-based methods, how each channel's candidate scores are normalised (NORMS)
    fusion_method: str = DEFAULT_METHOD
    fusion_norm: str = DEFAULT_NORM
    min_dense: float = 0.45
    weak_dense: float = 0.55
    # document categories to search (empty: all); applied before scoring
    types: tuple[str, ...] = ()
    # the first-stage chunks handed to the reranker (and whose paths give the pool recall)
    rerank_candidates: int = 40
    # abstention on the top rerank score instead of the dense cosine (None: not gated)
    rerank_min: float | None = None
    rerank_weak: float | None = None
    # the channels a hybrid route fuses (rag/search/channels.py CHANNEL_NAMES)
    fuse: tuple[str, ...] = ("dense", "bm25")
    # fusion weights: channel -> weight for prose queries, and for identifier-shaped ones
    # (rag/search/ranking/query_shape.py); a channel left out weighs 1
    fusion_weights: tuple[tuple[str, float], ...] = ()
    identifier_weights: tuple[tuple[str, float], ...] = ()
    # the channel a single-channel route chosen by the router (``auto``) falls back to when it
    # finds nothing (None: none); a mode named outright is never second-guessed
    fallback: str | None = None
    # the ranking stage (rag/search/ranking/); disabled: the first stage's order is kept
    ranking: RankingOptions = RankingOptions(enabled=False)
    # a returned chunk that an answering ranking feature matched (the definition of the
    # queried identifier) makes the query answerable: never flagged weak or dropped
    trust_definitions: bool = True

    @classmethod
    def from_config(cls, cfg: Any) -> "SearchOptions":
        """Build from a composed config (``cfg.search``, ``cfg.fusion``, ``cfg.abstain``,
        ``cfg.rerank``)."""
        r = cfg.rerank
        return cls(mode=str(getattr(cfg.search.mode, "value", cfg.search.mode)),
                   prose_mode=str(getattr(cfg.search.prose_mode, "value", cfg.search.prose_mode)),
                   top_k=int(cfg.search.top_k), candidates=int(cfg.search.candidates),
                   rank_pool=int(cfg.search.get("rank_pool", cls.rank_pool)),
                   rrf_k=int(cfg.fusion.rrf_k),
                   fusion_method=str(cfg.fusion.get("method", cls.fusion_method)),
                   fusion_norm=str(cfg.fusion.get("norm", cls.fusion_norm)),
                   # a band left null (abstain.calibration=auto decides) starts at the seed's
                   min_dense=(cls.min_dense if cfg.abstain.get("min_dense") is None
                              else float(cfg.abstain.min_dense)),
                   weak_dense=(cls.weak_dense if cfg.abstain.get("weak_dense") is None
                               else float(cfg.abstain.weak_dense)),
                   rerank_candidates=int(r.candidates),
                   rerank_min=None if r.min_score is None else float(r.min_score),
                   rerank_weak=None if r.weak_score is None else float(r.weak_score),
                   fuse=tuple(str(c) for c in cfg.search.fuse),
                   fusion_weights=_weights(cfg.fusion.get("weights")),
                   identifier_weights=_weights(cfg.fusion.get("identifier_weights")),
                   fallback=(None if cfg.search.get("fallback") is None
                             else str(cfg.search.fallback)),
                   ranking=RankingOptions.from_config(cfg.get("ranking")),
                   trust_definitions=bool(cfg.abstain.get("trust_definitions", True)))

    @property
    def rerank_gated(self) -> bool:
        """Whether abstention reads the top rerank score (a rerank threshold is set)."""
        return self.rerank_min is not None or self.rerank_weak is not None


def _weights(node: Any) -> tuple[tuple[str, float], ...]:
    """A ``channel: weight`` mapping of the config as sorted pairs (None: none)."""
    if not node:
        return ()
    return tuple(sorted((str(k), float(v)) for k, v in dict(node).items()))


class SearchPipeline:
    """Runs one query through the configured stages over an :class:`Index`."""

    def __init__(self, index: Index, options: SearchOptions, reranker=None, gate=None) -> None:
        """Args:
            index: the chunks and channels.
            options: the search flags.
            reranker: a second stage (``score(query, chunks)``), or None.
            gate: a :class:`rag.search.signals.LearnedGate` that decides abstention instead of
                the dense bands, or None.
        """
        self.index = index
        self.options = options
        self.reranker = reranker
        self.gate = gate
        self.ranking = RankingStage(options.ranking) if options.ranking.enabled else None
        model = getattr(self.ranking, "model", None)
        if model is not None and options.mode in ("hybrid", "auto") \
                and model.fusion != options.fusion_method:
            # its first_stage column was learned on another fusion's score scale
            raise ValueError(f"ranking.model {options.ranking.model} was trained on "
                             f"first-stage scores of fusion {model.fusion!r}, this search fuses "
                             f"with {options.fusion_method!r}: pass fusion={model.fusion}, or "
                             "retrain it under this fusion (rag ranking train)")
        from rag.search.signals import DENSE_SIGNALS

        self._gate_reads_dense = gate is not None and any(f in DENSE_SIGNALS
                                                          for f in gate.features)

    def _signals(self, query: str, dense_scores, bm25_scores, allowed, top_rerank,
                 precomputed=None):
        """Every abstention signal, scoring the channels the route did not run.

        Signals are always measured on the whole corpus: whether the corpus answers a query
        does not depend on the caller's type filter, and a filtered signal would let a gate
        learn "was this query filtered" instead (so with a filter both channels are rescored,
        or taken unfiltered from ``precomputed``).
        """
        from rag.search.signals import compute_signals
        from rag.search.term_coverage import coverage_of

        if allowed is not None:
            dense_scores = bm25_scores = None
        given = precomputed or {}
        dense_scores = given.get("dense") if dense_scores is None else dense_scores
        bm25_scores = given.get("bm25") if bm25_scores is None else bm25_scores
        if dense_scores is None and self.index.dense is not None:
            dense_scores = self.index.dense.score(query)
        if bm25_scores is None and self.index.bm25 is not None:
            bm25_scores = self.index.bm25.score(query)
        coverage = coverage_of(self.index)
        return compute_signals(dense_scores=dense_scores, bm25_scores=bm25_scores,
                               chunk_paths=self.index.chunk_paths, top_rerank=top_rerank,
                               term_coverage=None if coverage is None else coverage.coverage(query))

    def search(self, query: str, *, depth: int | None = None,
               with_signals: bool = False,
               precomputed: dict[str, np.ndarray] | None = None) -> SearchResult:
        """Search one query.

        Args:
            query: the question or identifier.
            depth: ``ranked`` runs until it holds this many distinct paths (default: just the
                ``top_k`` hits). A single-channel route ranks up to ``max(candidates,
                10 * depth)`` chunks; a hybrid route fuses the top ``candidates`` chunks of
                each channel, so its ranking can hold fewer than ``depth`` paths.
            with_signals: also compute every abstention signal (``result.signals``), scoring
                the channels the route skipped *after* the timed search (evaluation only).
            precomputed: channel name -> that channel's scores of this query over every chunk,
                unfiltered, as ``channel.score(query)`` returns them (``rag serve`` embeds
                concurrent queries in one batch: rag/search/batching.py); a channel named here
                is not scored again, and its time is the caller's to report.

        Raises:
            ValueError: empty query, a dense route on an index without embeddings, or
                precomputed scores whose length is not the number of chunks.
        """
        if not query or not query.strip():
            raise ValueError("empty query")
        o = self.options
        want_paths = depth or 0
        t: dict[str, float] = {}
        t_start = time.perf_counter()

        t0 = time.perf_counter()
        eff = route(query, mode=o.mode, prose_mode=o.prose_mode)
        t["route"] = time.perf_counter() - t0
        # a single-channel route hands the stage its first ``rank_pool`` chunks (more when an
        # evaluation asks for a deeper list: the rest keeps the channel's order)
        head_size = max(o.candidates, o.rank_pool) if self.ranking is not None else o.candidates
        pool = o.candidates if eff == "hybrid" else max(head_size, o.top_k, 10 * want_paths)
        allowed = None
        if o.types:
            allowed = self.index.category_mask(o.types)
            if not allowed.any():
                t["total"] = time.perf_counter() - t_start
                return SearchResult(
                    hits=[], ranked=[], route=eff, top_dense=None, dropped=0, weak_match=False,
                    timings_ms={k: v * 1000.0 for k, v in t.items()},
                    reason=f"no indexed chunk has type(s) {sorted(o.types)}; the filter is never "
                           "dropped silently", channel_candidates={}, first_stage_top=[])

        names = list(o.fuse) if eff == "hybrid" else [eff]
        channel_scores: dict[str, np.ndarray] = {}  # every channel that ran: all chunks
        no_match: dict[str, float | None] = {}
        ranks: dict[str, list[tuple[int, float]]] = {}

        def run_channel(name: str) -> None:
            try:
                channel = channel_of(self.index, name)
            except ValueError as exc:
                raise ValueError(f"route {eff!r}: {exc}") from None
            t0 = time.perf_counter()
            inner: dict[str, float] = {}
            if precomputed is not None and name in precomputed:
                sc = precomputed[name]
                if sc.shape != (len(self.index.chunks),):
                    raise ValueError(f"precomputed {name!r} scores have shape {sc.shape}, "
                                     f"not ({len(self.index.chunks)},)")
            elif getattr(channel, "takes_hints", False):  # an ANN searches to the pool, filtered
                sc = channel.score(query, timings=inner, k=pool, allowed=allowed)
            else:
                sc = channel.score(query, timings=inner)
            if allowed is not None:  # filtered out before ranking: never a candidate
                sc = np.where(allowed, sc, -np.inf).astype(sc.dtype)
            channel_scores[name] = sc
            no_match[name] = channel.no_match
            ranks[name] = top_matches(sc, pool, channel.no_match)
            t.update(inner)
            t[name] = time.perf_counter() - t0 - sum(inner.values())

        for name in names:
            run_channel(name)
        fell_back = None
        if (eff != o.mode and eff != "hybrid" and not ranks[eff] and o.fallback
                and o.fallback != eff and has_channel(self.index, o.fallback)):
            # a route the router chose (``auto``) that found nothing (an identifier BM25 has
            # no term for) is answered by the fallback channel, and says so in the route; a
            # mode asked for by name is never second-guessed
            run_channel(o.fallback)
            fell_back, names = eff, [*names, o.fallback]
        dense_scores = channel_scores.get("dense")
        bm25_scores = channel_scores.get("bm25")
        fused_scores: dict[int, float] | None = None
        if eff == "hybrid":
            t0 = time.perf_counter()
            weights = dict(o.identifier_weights if query_shape(query).identifier
                           else o.fusion_weights)
            fused = fuse(o.fusion_method, {n: ranks[n] for n in names}, k=o.rrf_k,
                         weights=weights, norm=o.fusion_norm)
            fused_scores = dict(fused)
            order = fused
            t["fusion"] = time.perf_counter() - t0
        else:
            order = ranks[o.fallback] if fell_back else ranks[eff]
        ranking_values: dict[str, dict[int, float]] | None = None
        if self.ranking is not None and order:
            t0 = time.perf_counter()
            # the stage re-ranks the first ``rank_pool`` chunks of a single-channel route (a
            # hybrid route: its fused pool): a deeper list asked for by an evaluation
            # (``depth``) keeps its tail in the channel's order below them, so the top of the
            # ranking is the same at any depth (``rag search`` ranks what the row measured)
            head, tail = (order, []) if eff == "hybrid" else (order[:head_size],
                                                             order[head_size:])
            ranked, ranking_values = self.ranking.rank(
                query, head, self.index,
                channels={n: (channel_scores[n], no_match[n]) for n in channel_scores})
            if tail:
                seen = {i for i, _ in ranked}
                floor = min((s for _, s in ranked), default=0.0)
                ranked = ranked + [(i, floor - 1.0 - n * 1e-6) for n, (i, _) in
                                   enumerate(p for p in tail if p[0] not in seen)]
            order = ranked
            t["ranking"] = time.perf_counter() - t0

        def chunk_rows(pairs) -> list[tuple[str, str | None, int, int, str]]:
            return [(c.path, c.symbol, c.start_line, c.end_line, c.id)
                    for c in (self.index.chunks[i] for i, _ in pairs)]

        candidates = chunk_rows(order[:o.rerank_candidates])
        # what each stage handed on, for per-stage failure attribution
        channel_candidates = {n: chunk_rows(ranks[n]) for n in names}
        first_stage_top = chunk_rows(order[:o.top_k])
        rerank_scores: dict[int, float] | None = None
        top_rerank = None
        if self.reranker is not None and order:
            # rerank the top `rerank_candidates`; the rest keeps its order below them
            t0 = time.perf_counter()
            head = order[:o.rerank_candidates]
            scored = self.reranker.score(query, [self.index.chunks[i] for i, _ in head])
            rerank_scores = {i: float(s) for (i, _), s in zip(head, scored)}
            reranked = sorted(rerank_scores.items(), key=lambda kv: (-kv[1], kv[0]))
            floor = min(rerank_scores.values())
            order = reranked + [(i, floor - 1.0 - n * 1e-6)
                                for n, (i, _) in enumerate(order[o.rerank_candidates:])]
            top_rerank = reranked[0][1]
            t["rerank"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        top_dense = float(dense_scores.max()) if dense_scores is not None and len(dense_scores) else None
        if top_dense is not None and not np.isfinite(top_dense):
            top_dense = None
        signals = gate_score = None
        if self.gate is not None and (dense_scores is not None or not self._gate_reads_dense):
            # like the dense bands, a gate reading dense signals acts only where the route ran
            # the dense channel: a BM25 route (``--mode bm25``, symbols under ``auto``) is
            # never flagged
            signals = self._signals(query, dense_scores, bm25_scores, allowed, top_rerank,
                                    precomputed)
            gate_score = self.gate.probability(signals)
            lo = self.gate.min_score if self.gate.min_score is not None else float("-inf")
            decision = band(gate_score, min_dense=lo,
                            weak_dense=self.gate.weak_score if self.gate.weak_score is not None else lo)
            floor = ("learned gate P(answerable)", gate_score, lo)
        elif o.rerank_gated and self.reranker is not None:
            lo = o.rerank_min if o.rerank_min is not None else float("-inf")
            decision = band(top_rerank, min_dense=lo,
                            weak_dense=o.rerank_weak if o.rerank_weak is not None else lo)
            floor = ("top rerank score", top_rerank, lo)
        else:
            decision = band(top_dense, min_dense=o.min_dense, weak_dense=o.weak_dense)
            floor = ("top dense cosine", top_dense, o.min_dense)
        if ((decision.drop or decision.weak_match) and o.trust_definitions
                and self.ranking is not None and ranking_values):
            # an identifier the corpus defines, returned: the corpus answers the query
            keys = self.ranking.answering_keys
            if any(ranking_values.get(k, {}).get(i, 0.0) > 0
                   for k in keys for i, _ in order[:o.top_k]):
                decision = Band(drop=False, weak_match=False)
        cut = o.top_k
        if want_paths:
            seen: set[str] = set()
            cut = len(order)
            for n, (i, _) in enumerate(order):
                seen.add(self.index.chunks[i].path)
                if len(seen) == want_paths:
                    cut = n + 1
                    break
            cut = max(cut, o.top_k)
        ranked = [self._hit(i, s, channel_scores, no_match, fused_scores, rerank_scores,
                            ranking_values)
                  for i, s in order[:cut]]
        # abstention acts on what is returned, never on the ranking (DESIGN.md §5: ranking
        # metrics must not move with a threshold)
        hits = ranked[:o.top_k]
        dropped = 0
        if decision.drop:
            dropped = len(hits)
            hits = []
        t["abstain"] = time.perf_counter() - t0
        timings = {k: v * 1000.0 for k, v in t.items()}
        timings["total"] = (time.perf_counter() - t_start) * 1000.0
        if with_signals and signals is None:
            signals = self._signals(query, dense_scores, bm25_scores, allowed, top_rerank,
                                    precomputed)
        # a lexical route that found nothing says why (no term in the corpus, or IDF 0); so
        # does a result the abstention floor dropped
        explain = getattr(channel_of(self.index, eff), "empty_reason", None) if eff in ranks else None
        reason = explain(query, allowed) if explain is not None and not ranks[eff] else None
        if fell_back and reason:
            reason = f"{reason}; answered by the {o.fallback} channel instead"
        if decision.drop and dropped:
            what, value, lo = floor
            reason = (f"dropped by abstention: {what} {value:.3f} < floor {lo:.3f}"
                      if value is not None else f"dropped by abstention: no {what}")
        return SearchResult(hits=hits, ranked=ranked,
                            route=f"{eff}>{o.fallback}" if fell_back else eff,
                            top_dense=top_dense,
                            dropped=dropped, weak_match=decision.weak_match, timings_ms=timings,
                            top_rerank=top_rerank, candidates=candidates, signals=signals,
                            gate_score=gate_score, reason=reason,
                            channel_candidates=channel_candidates,
                            first_stage_top=first_stage_top)

    def _hit(self, i: int, score: float, channel_scores: dict[str, np.ndarray],
             no_match: dict[str, float | None], fused_scores, rerank_scores=None,
             ranking_values=None) -> Hit:
        """A hit with every stage's score for chunk ``i``: each registered channel's (None
        where it did not run or found no match, see ``Channel.no_match``), the fusion's under
        its method's name (``rrf``; None outside hybrid or for a chunk outside every fused
        pool), each ranking feature's and the
        ranking score (only when the stage ran; a feature that did not score the chunk: None)
        and rerank (None where it did not score the chunk)."""
        from rag.search.channels import is_match

        c = self.index.chunks[i]
        scores: dict[str, float | None] = {}
        for name in dict.fromkeys((*CHANNEL_NAMES, *channel_scores)):
            sc = channel_scores.get(name)
            scores[name] = (float(sc[i]) if sc is not None and is_match(sc[i], no_match[name])
                            else None)
        scores[self.options.fusion_method] = (fused_scores.get(i) if fused_scores is not None
                                              else None)
        if ranking_values is not None:
            for key, vals in ranking_values.items():
                scores[key] = vals.get(i)
        scores["rerank"] = rerank_scores.get(i) if rerank_scores is not None else None
        return Hit(chunk_id=c.id, path=c.path, symbol=c.symbol, start_line=c.start_line,
                   end_line=c.end_line, category=c.category, score=float(score), scores=scores)


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
        # top_dense is calibrated as the dense bands would act (never on a BM25-only route),
        # whatever abstention is in force: a learned gate reading it acts where they would
        self.bands_on_top_dense = True

    def retrieve(self, query: Query, *, depth: int) -> SearchResult:
        """Search ``query`` (with its type filter, if any), every abstention signal measured."""
        p = self.pipeline
        if query.types:
            p = SearchPipeline(p.index, replace(p.options, types=tuple(query.types)),
                               reranker=p.reranker, gate=p.gate)
        res = p.search(query.text, depth=depth, with_signals=True)
        res.hit_texts = [self._text[h.chunk_id] for h in res.hits]
        res.ranked_texts = [self._text[h.chunk_id] for h in res.ranked]
        return res
