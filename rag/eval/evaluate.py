"""The evaluator: run every golden and negative query through a pipeline and score it.

Two halves, never mixed (DESIGN.md §5):

* **ranking** (before abstention): Recall@k, hit@k, MRR, nDCG@k on the ranking to
  ``depth``; no abstention band or gate can change them.
* **returned** (after abstention, what a caller receives): ``answer_support_rate``,
  ``dropped_rate``, ``false_weak_rate`` (positives) and ``abstain_rate`` (negatives).

Also: the per-query table (with each query's ``returned_as``: returned / weak / dropped / empty,
and each positive's ``lost_at``: the stage that lost its relevant unit, rag/eval/attribution.py),
latency percentiles per stage, the abstention calibration (:mod:`rag.eval.abstention`), and
the run as a mapping ready for a TREC run file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Sequence

from rag.core.progress import progress_iter

from rag.eval.abstention import calibrate_abstention
from rag.eval.attribution import row_columns, stage_metrics, trace_result
from rag.eval.chunk_metrics import chunk_metrics
from rag.eval.golden import (CorpusUnits, GoldenQuery, GoldenSet, Label, Ranges, judgement_digest,
                             overlap_ok)
from rag.eval.metric_names import tag_metric
from rag.eval.metrics import evaluate_run, first_relevant_rank, mean_metrics, percentile, rank
from rag.search.pipeline import STAGES, Hit, SearchPipeline


@dataclass
class EvalResult:
    """Everything one evaluation measured.

    Attributes:
        metrics: flat name -> value (MLflow-legal names; per tag as ``tag.<tag>.recall_at_8``, rag.eval.metric_names).
        per_query: one row per query (positives then negatives).
        calibration: see :func:`rag.eval.abstention.calibrate_abstention`.
        run: query id -> {doc id -> score} after collapsing to the first chunk per doc id.
        chunk_run: query id -> the ranking as returned, chunk by chunk, before abstention
            (:func:`chunk_run_entry`: what chunk-level metrics such as semble's NDCG@10 read).
    """

    metrics: dict[str, float]
    per_query: list[dict[str, Any]]
    calibration: dict[str, Any]
    run: dict[str, dict[str, float]] = field(default_factory=dict)
    chunk_run: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # recall and answer support at each budget of TOKEN_CURVE_BUDGETS (token_budget_curve)
    token_curve: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Collected:
    """What asking every query measured, before any mean (:func:`collect_per_query`).

    Attributes:
        rows: one per-query row per query (positives then negatives), the per-query table.
        per_query_metrics: positive query id -> its ranking metrics.
        run / chunk_run: as :class:`EvalResult`.
        timings: stage -> per-query latencies (ms).
        unanswered: ``SearchResult.unanswered`` (None, ``missing``, ``failed``) -> count.
        filtered: query id -> whether its type filter hid every relevant document.
    """

    rows: list[dict[str, Any]]
    per_query_metrics: dict[str, dict[str, float]]
    run: dict[str, dict[str, float]]
    chunk_run: dict[str, list[dict[str, Any]]]
    timings: dict[str, list[float]]
    unanswered: dict[str | None, int]
    filtered: dict[str, bool]
    token_curve: list[dict[str, float]] = field(default_factory=list)


def chunk_run_entry(hit: Any, rank_: int) -> dict[str, Any]:
    """One ranked chunk of a chunk-level run: ``rank`` (1-based, the order returned),
    ``path``, ``start_line``, ``end_line`` (1-based, inclusive; 0 when unknown), ``symbol``,
    ``category`` (the document's, ``""`` when the retriever does not say), ``chunk_id``, ``score`` (what the ranking sorted on) and ``scores`` (per stage/channel)."""
    return {"rank": rank_, "path": hit.path, "start_line": int(hit.start_line or 0),
            "end_line": int(hit.end_line or 0), "symbol": hit.symbol,
            "category": getattr(hit, "category", "") or "",
            "chunk_id": hit.chunk_id, "score": float(hit.score),
            "scores": {k: (None if v is None else float(v))
                       for k, v in (getattr(hit, "scores", None) or {}).items()}}


def hit_lines(hit: Any, units: CorpusUnits | None) -> Ranges | None:
    """The lines a ranked chunk holds: its indexed chunk's (``units.chunk_lines``, a class or
    module chunk without the lines of the chunks nested in it), else its ``start_line``..
    ``end_line``; None when the hit carries no lines (a TREC run file's docno)."""
    if units is not None and hit.chunk_id in units.chunk_lines:
        return units.chunk_lines[hit.chunk_id]
    if getattr(hit, "start_line", 0) and hit.start_line >= 1:
        return ((hit.start_line, max(hit.start_line, hit.end_line)),)
    return None


def hits_label(hit: Any, label: Label, *, units: CorpusUnits | None = None,
               min_overlap: float = 0.0) -> bool:
    """Whether a ranked chunk hits ``label`` (golden/README.md, "Which chunks are relevant").

    * another path: never;
    * a file label: any chunk of the path;
    * a span label, or a symbol label resolved to its lines (:attr:`Label.spans`): the
      chunk's lines (:func:`hit_lines`) overlap the label's lines by ``min_overlap``
      (:func:`rag.eval.golden.overlap_ok`: 0 = at least one line; a fraction = that share of
      the label's lines);
    * otherwise (a symbol label loaded without the index, or a hit without lines such as a
      run file's ``path#symbol`` / ``path#L10-20`` docno): the chunk names the label's unit
      (``path#symbol`` equals the label's doc id).
    """
    if hit.path != label.path:
        return False
    if label.unit == "file":
        return True
    lines = hit_lines(hit, units) if label.spans else None
    if lines is None:
        return bool(hit.symbol) and f"{hit.path}#{hit.symbol}" == label.doc_key
    return overlap_ok(lines, label.spans, min_overlap)


def hit_units(hit: Any, query: GoldenQuery | None, *, units: CorpusUnits | None = None,
              min_overlap: float = 0.0) -> list[str]:
    """The doc ids a ranked chunk is judged as: the doc id (:attr:`Label.doc_key`) of every
    relevant label of ``query`` it hits (``path`` for a file label, ``path#symbol``,
    ``path#L10-20``); ``[path]`` when it hits none (negatives: always ``[path]``)."""
    if query is not None:
        keys = [lab.doc_key for lab in query.relevant
                if lab.path == hit.path and hits_label(hit, lab, units=units,
                                                       min_overlap=min_overlap)]
        if keys:
            return keys
    return [hit.path]


def doc_key(hit: Hit, query: GoldenQuery | None, *, units: CorpusUnits | None = None,
            min_overlap: float = 0.0) -> str:
    """The first doc id a hit is judged as (:func:`hit_units`): ``path``, or the labelled unit
    (``path#symbol``, ``path#L10-20``) it hits."""
    return hit_units(hit, query, units=units, min_overlap=min_overlap)[0]


def collapse_units(hits: Sequence[Hit], query: GoldenQuery | None, *,
                   units: CorpusUnits | None = None,
                   min_overlap: float = 0.0) -> dict[str, tuple[float, Hit]]:
    """Doc id -> (score, hit) of the first ranked chunk judged as it (:func:`hit_units`):
    each unit counts once, at the rank of the first chunk that hits it. A chunk that hits
    two labelled units (a window over two labelled functions) enters both, with its score."""
    out: dict[str, tuple[float, Hit]] = {}
    for h in hits:
        for key in hit_units(h, query, units=units, min_overlap=min_overlap):
            out.setdefault(key, (h.score, h))
    return out


def collapse(hits: Sequence[Hit], query: GoldenQuery | None, *,
             units: CorpusUnits | None = None, min_overlap: float = 0.0) -> dict[str, float]:
    """First occurrence of each doc id in the ranked hits -> its score (several chunks of one
    file, or of one labelled unit, count once; :func:`collapse_units`)."""
    return {k: v[0] for k, v in collapse_units(hits, query, units=units,
                                               min_overlap=min_overlap).items()}


def unit_judgements(units_ranked: dict[str, tuple[float, Hit]], query: GoldenQuery, *,
                    units: CorpusUnits | None = None, min_overlap: float = 0.0,
                    ties: str = "doc_id") -> list[tuple[str, int | None]]:
    """``(doc id, judgement)`` per ranked unit (:func:`collapse_units`, ranked as the metrics
    rank them), best first; the judgement is its grade when relevant; 0 when judged not relevant — its first chunk hits one of
    the query's ``not_relevant`` labels under the same overlap rule, or it is the rest of a
    file whose relevant label the labeller narrowed to a symbol or lines (a path unit of a
    labelled path, as ``rag golden pool`` counts it); None when unjudged."""
    qrels = query.qrels
    narrowed = {lab.path for lab in query.relevant}  # a bare path unit of these: judged
    out: list[tuple[str, int | None]] = []
    for d in rank({d: v[0] for d, v in units_ranked.items()}, qrels, ties=ties):
        if qrels.get(d, 0) > 0:
            out.append((d, qrels[d]))
        elif _hits_not_relevant(units_ranked[d][1], query, units, min_overlap):
            out.append((d, 0))
        else:  # the rest of a narrowed file: judged; anything else: not
            out.append((d, 0 if d in narrowed else None))
    return out


def _hits_not_relevant(hit: Hit, query: GoldenQuery, units: CorpusUnits | None,
                       min_overlap: float) -> bool:
    return any(hits_label(hit, lab, units=units, min_overlap=min_overlap)
               for lab in query.not_relevant)


#: the context budgets, in tokens, recall and answer support are measured at
TOKEN_BUDGETS = (512, 2048, 8192)
#: the budgets of the row's token-budget curve (``token_budget.csv``): powers of two
TOKEN_CURVE_BUDGETS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def token_budget_curve(per_query: dict[str, dict[str, float]],
                       budgets: Sequence[int] = TOKEN_CURVE_BUDGETS) -> list[dict[str, float]]:
    """The mean over positives of :func:`token_budget_metrics`'s values at each budget:
    ``[{"budget": B, "recall": ..., "answer_support": ..., "queries": n}, ...]`` in budget
    order; [] when there is no positive."""
    if not per_query:
        return []
    n = len(per_query)
    return [{"budget": int(b), "queries": n,
             "recall": sum(m[f"token_recall_at_{b}"] for m in per_query.values()) / n,
             "answer_support": sum(m[f"token_support_at_{b}"] for m in per_query.values()) / n}
            for b in budgets]


def token_budget_metrics(inputs: dict[str, tuple[list[list[str]], list[str], GoldenQuery]],
                         count_tokens, budgets: Sequence[int] = TOKEN_BUDGETS
                         ) -> dict[str, dict[str, float]]:
    """Recall and answer support at a token budget: what an agent that takes the ranked
    chunks in order until ``B`` tokens of context gets, per positive query.

    Args:
        inputs: query id -> (each ranked chunk's doc ids, :func:`hit_units`; each ranked
            chunk's text; the query).
        count_tokens: texts -> word pieces each, with [CLS]/[SEP] (the embedder's tokenizer;
            2 are taken off, as ``context_tokens`` does).
        budgets: token budgets.

    Returns:
        query id -> ``{"token_recall_at_<B>": relevant units found in the chunks that fit in
        B tokens / relevant units, "token_support_at_<B>": 1.0 when any is found}`` (a chunk
        fits when the running total, it included, is at most B; the first chunk that does not
        fit ends the context).
    """
    flat = [t for _, texts, _ in inputs.values() for t in texts]
    counts = iter(count_tokens(flat)) if flat else iter(())
    out: dict[str, dict[str, float]] = {}
    for qid, (units, texts, q) in inputs.items():
        sizes = [max(next(counts) - 2, 0) for _ in texts]
        relevant = {d for d, g in q.qrels.items() if g > 0}
        m: dict[str, float] = {}
        for b in budgets:
            total, found = 0, set()
            for keys, n in zip(units, sizes):
                total += n
                if total > b:
                    break
                found.update(k for k in keys if k in relevant)
            m[f"token_recall_at_{b}"] = len(found) / len(relevant) if relevant else 0.0
            m[f"token_support_at_{b}"] = float(bool(found))
        out[qid] = m
    return out


def judged_at(units_ranked: dict[str, tuple[float, Hit]], query: GoldenQuery, k: int, *,
              units: CorpusUnits | None = None, min_overlap: float = 0.0,
              ties: str = "doc_id") -> float:
    """Judged@k (ir_measures' ``Judged@k``, over collapsed units): the share of the top ``k``
    ranked units that carry a judgement (:func:`unit_judgements`). The denominator is ``k``
    even when fewer units were ranked (an empty ranking judges 0)."""
    got = unit_judgements(units_ranked, query, units=units, min_overlap=min_overlap,
                          ties=ties)[:k]
    return sum(1 for _, j in got if j is not None) / k


def incomplete_judgement_metrics(units_ranked: dict[str, tuple[float, Hit]],
                                 query: GoldenQuery, *, units: CorpusUnits | None = None,
                                 min_overlap: float = 0.0, ties: str = "doc_id"
                                 ) -> dict[str, float]:
    """bpref, condensed nDCG@10 and condensed MRR of one positive (rag/eval/incomplete.py):
    R is the query's relevant labels, N its ``not_relevant`` labels plus the retrieved
    rest-of-file units of narrowed paths that hit none of them."""
    from rag.eval.incomplete import incomplete_metrics

    got = unit_judgements(units_ranked, query, units=units, min_overlap=min_overlap, ties=ties)
    narrowed = {lab.path for lab in query.relevant}
    extra = sum(1 for d, j in got if j == 0 and d in narrowed and not _hits_not_relevant(
        units_ranked[d][1], query, units, min_overlap))
    grades = [g for g in query.qrels.values() if g > 0]
    return incomplete_metrics([j for _, j in got], grades, len(query.not_relevant) + extra)


RETURNED_AS = ("returned", "weak", "dropped", "empty")


def returned_as(res) -> str:
    """What the caller received: ``dropped`` (the floor removed every hit), ``empty`` (no hit
    at all: no lexical match, or a filter left nothing), ``weak`` (hits flagged weak_match), or
    ``returned``."""
    if not res.hits:
        return "dropped" if res.dropped else "empty"
    return "weak" if res.weak_match else "returned"


def evaluate(retriever: Any, golden: GoldenSet, *, recall_ks: Sequence[int],
             ndcg_k: int, depth: int, progress: bool = True,
             use_expected_types: bool = False,
             gate_thresholds: Sequence[float] = (), target_false_weak: float = 0.10,
             target_dropped: float = 0.02, count_tokens=None, ties: str = "doc_id",
             min_overlap: float = 0.0, hit_url=None, trace_n: int = 5) -> EvalResult:
    """Evaluate a :class:`rag.eval.retriever.Retriever` on ``golden`` — the evaluator reads only
    what the retriever returns (a :class:`~rag.search.pipeline.SearchPipeline` is wrapped as
    :class:`rag.eval.retriever.PipelineRetriever`).

    With ``use_expected_types`` each positive that has ``types`` is asked with that type
    filter; ``filter_false_negative_rate`` is the share of those queries whose filter excludes
    the category of every relevant document (the filter hid the answer; needs the retriever's
    ``path_categories``). A query the retriever could not answer at all (e.g. missing from a
    run file, or failed at an endpoint: ``SearchResult.unanswered``) is counted in
    ``missing_queries`` / ``failed_queries`` and scores 0.

    Ranking half: metrics on the ranked list down to ``depth`` distinct units (collapsed by
    doc id) *before* abstention, averaged over positives (a positive with no ranking scores 0).
    A chunk is relevant to a file label when it is of that path, to a span or symbol label
    when its lines overlap the label's by ``min_overlap`` (``eval.min_overlap``; lines from
    ``golden.units``, see :func:`hits_label`); each labelled unit counts once, at the rank of
    the first chunk that hits it (:func:`collapse_units`). ``judged_at_<top_k>`` and
    ``judged_at_10`` (:func:`judged_at`) are the share of the top k units that carry a
    relevance judgement (relevant, hitting a ``not_relevant`` label, or the rest of a file
    whose relevant label is narrowed to a symbol or lines).

    Returned half: ``answer_support_rate`` = share of positives with a relevant unit among the
    hits actually returned; ``dropped_rate`` = share of positives whose hits were all dropped
    by the floor; ``false_weak_rate`` = share of positives with no hit or a ``weak_match``
    result; ``abstain_rate`` = share of negatives with no hit or a ``weak_match`` result.
    Negatives never enter the ranking half.

    Every abstention signal (:mod:`rag.search.signals`) is measured for every query, whatever
    the route, outside the timed search, and calibrated with ``target_false_weak`` /
    ``target_dropped`` (:func:`rag.eval.abstention.calibrate_abstention`).

    ``count_tokens`` (texts -> word pieces each, untruncated, with [CLS]/[SEP]) sizes each
    query's returned context; default: the dense channel's embedder, when there is one.

    Each positive's ``lost_at`` (:mod:`rag.eval.attribution`: not_in_candidates, fused_out,
    reranked_out, abstained, returned, or unknown where the retriever does not report that
    stage) and ``found_by`` (the channels whose candidates held a relevant chunk) go to the
    per-query table; ``lost_at/<stage>`` and ``tag.<tag>.lost_at/<stage>`` count them.

    ``candidate_pool_recall`` is the share of positives with a relevant doc among the first
    stage's top ``rerank_candidates`` chunks (before any reranking): the most a reranker of
    that pool could bring into the top k. For each ``gate_thresholds`` value t (reranker
    runs only), ``rerank_gate/<t>/abstain_rate`` and ``rerank_gate/<t>/false_weak_rate`` are
    the two rates above had abstention read the rerank score instead of the dense cosine:
    a query is flagged when its top rerank score is < t or nothing was reranked.

    ``hit_url`` (a hit -> its URL or None, :func:`rag.core.trace_links.url_maker`) adds each query's
    ``trace_urls``: the URLs of the first ``trace_n`` hits of its ranking (before abstention),
    space-separated, for the link check (``eval.check_links``).

    ``progress``: a bar on stderr, shown only when stderr is a terminal.

    Returns:
        An :class:`EvalResult`.
    """
    from rag.search.pipeline import PipelineRetriever

    if isinstance(retriever, SearchPipeline):
        if count_tokens is None and retriever.index.dense is not None:
            count_tokens = retriever.index.dense.embedder.count_tokens
        retriever = PipelineRetriever(retriever)
    got = collect_per_query(retriever, golden, recall_ks=recall_ks, ndcg_k=ndcg_k, depth=depth,
                            progress=progress, use_expected_types=use_expected_types,
                            count_tokens=count_tokens, ties=ties, min_overlap=min_overlap,
                            hit_url=hit_url, trace_n=trace_n)
    metrics = aggregate(got, golden, use_expected_types=use_expected_types,
                        gate_thresholds=gate_thresholds)
    bands = bool(getattr(retriever, "bands_on_top_dense", False))
    cal = calibrate_abstention(got.rows, target_false_weak=target_false_weak,
                               target_dropped=target_dropped, bands_on_top_dense=bands)
    metrics.update(calibration_metrics(cal))
    return EvalResult(metrics=metrics, per_query=got.rows, calibration=cal, run=got.run,
                      chunk_run=got.chunk_run, token_curve=got.token_curve)


def collect_per_query(retriever: Any, golden: GoldenSet, *, recall_ks: Sequence[int],
                      ndcg_k: int, depth: int, progress: bool = True,
                      use_expected_types: bool = False, count_tokens=None,
                      ties: str = "doc_id", min_overlap: float = 0.0, hit_url=None,
                      trace_n: int = 5) -> Collected:
    """Ask ``retriever`` (a Retriever; a pipeline is wrapped by :func:`evaluate`) every query
    of ``golden`` and measure each one: the per-query rows, ranking metrics, runs and
    timings that :func:`aggregate` averages. Arguments as :func:`evaluate`."""
    from rag.core.contract import Query

    rows: list[dict[str, Any]] = []
    per_query_metrics: dict[str, dict[str, float]] = {}
    run: dict[str, dict[str, float]] = {}
    chunk_run: dict[str, list[dict[str, Any]]] = {}
    timings: dict[str, list[float]] = {s: [] for s in (*STAGES, "total")}
    items: list[tuple[str, Any]] = [("positive", q) for q in golden.positives] + \
        [("negative", q) for q in golden.negatives]
    category = getattr(retriever, "path_categories", None)
    top_k = int(retriever.top_k)
    judge = dict(units=golden.units, min_overlap=float(min_overlap))
    judged_ks = sorted({top_k, 10})
    filtered = {}
    unanswered: dict[str | None, int] = {}
    queries = [Query(id=q.id, text=q.query,
                     types=tuple(q.types) if use_expected_types and kind == "positive" and q.types
                     else ()) for kind, q in items]
    if hasattr(retriever, "prefetch"):  # e.g. an HTTP retriever answering concurrently
        retriever.prefetch(queries, depth=depth)
    # a bar on a terminal, a line every 10 s in a log (never a bar's frames in a file)
    pairs = list(zip(items, queries))
    budget_inputs: dict[str, tuple[list[list[str]], list[str], GoldenQuery]] = {}
    for (kind, q), query in progress_iter(pairs, total=len(pairs), desc="evaluating",
                                          unit="query", enabled=progress):
        types = query.types
        res = retriever.retrieve(query, depth=depth)
        if types and category is not None:
            filtered[q.id] = not any(category.get(lab.path) in q.types for lab in q.relevant)
        unanswered[res.unanswered] = unanswered.get(res.unanswered, 0) + 1
        for s, v in res.timings_ms.items():
            timings.setdefault(s, []).append(v)
        texts = res.hit_texts
        row: dict[str, Any] = {
            "query_id": q.id, "kind": kind, "query": q.query, "tags": ",".join(q.tags),
            "judgement_digest": judgement_digest(q),
            "route": res.route, "returned_as": returned_as(res), "dropped": res.dropped,
            "weak_match": res.weak_match, "n_hits": len(res.hits), "reason": res.reason or "",
            "top_rerank": res.top_rerank, **(res.signals or {}), "gate_score": res.gate_score,
            "latency_ms": res.timings_ms["total"],
            # prompt-size estimate: the text an LLM would be handed (the returned hits)
            "context_chars": sum(len(t) for t in texts) if texts is not None else None,
            "_texts": texts,
            "top_hits": " | ".join(f"{h.path}:{h.start_line}" + (f"#{h.symbol}" if h.symbol else "")
                                   for h in res.hits[:3]),
        }
        if hit_url is not None:  # the retrieval trace's links (rag/core/trace_links.py)
            row["trace_urls"] = " ".join(u for u in map(hit_url, res.ranked[:trace_n]) if u)
        chunk_run[q.id] = [chunk_run_entry(h, i) for i, h in enumerate(res.ranked, 1)]
        if kind == "positive":
            ranked_units = collapse_units(res.ranked, q, **judge)
            scores = {d: v[0] for d, v in ranked_units.items()}
            run[q.id] = scores
            # semble's NDCG@k on the chunks as returned (rag/eval/chunk_metrics.py); the
            # ranking metrics are computed for every positive at once, after the loop
            m = chunk_metrics(res.ranked, q, subtree=golden.subtree)
            for k in judged_ks:
                m[f"judged_at_{k}"] = judged_at(ranked_units, q, k, ties=ties, **judge)
            m.update(incomplete_judgement_metrics(ranked_units, q, ties=ties, **judge))
            per_query_metrics[q.id] = m
            if res.ranked_texts is not None and len(res.ranked_texts) == len(res.ranked):
                budget_inputs[q.id] = ([hit_units(h, q, **judge) for h in res.ranked],
                                       list(res.ranked_texts), q)
            row["first_relevant_rank"] = first_relevant_rank(rank(scores, q.qrels, ties=ties),
                                                             q.qrels)
            returned = collapse(res.hits, q, **judge)
            # a relevant unit among the top_k chunks a caller would get, before abstention
            # (what answering costs in the risk-coverage curve)
            row["supported"] = any(q.qrels.get(d, 0) > 0
                                   for d in collapse(res.ranked[:top_k], q, **judge))
            # the seeds' answer-support rate: a relevant doc among the top_k hits returned
            row["answer_support"] = float(any(q.qrels.get(d, 0) > 0 for d in returned))
            row["false_weak"] = (not res.hits) or res.weak_match
            # the pool's chunks with their lines: judged like ranked hits (span labels too)
            pool = {d for p, sym, start, end, cid in res.candidates
                    for d in hit_units(SimpleNamespace(path=p, symbol=sym, chunk_id=cid,
                                                       start_line=start, end_line=end), q,
                                       **judge)}
            # the first stage's pool is known only for the built-in pipeline
            row["candidate_hit"] = (float(any(q.qrels.get(d, 0) > 0 for d in pool))
                                    if retriever.kind == "pipeline" else None)
            # where the relevant unit was lost, from what the retriever reports per stage
            row.update(row_columns(trace_result(
                res, top_k=top_k, relevant=lambda c, q=q: any(
                    q.qrels.get(d, 0) > 0 for d in hit_units(c, q, **judge)))))
        else:
            run[q.id] = collapse(res.ranked, None)
            row["abstained"] = (not res.hits) or res.weak_match
        rows.append(row)
    ranking = evaluate_run({q.id: run[q.id] for q in golden.positives},
                           {q.id: q.qrels for q in golden.positives},
                           recall_ks=recall_ks, ndcg_k=ndcg_k, ties=ties)
    for row in rows:  # the metrics are a positive's last columns, ranking metrics first
        if row["kind"] == "positive":
            m = per_query_metrics[row["query_id"]] = {**ranking[row["query_id"]],
                                                      **per_query_metrics[row["query_id"]]}
            row.update(m)
    texts = [r.pop("_texts") for r in rows]
    positives = [r["query_id"] for r in rows if r["kind"] == "positive"]
    token_curve: list[dict[str, float]] = []
    if count_tokens is not None and positives and all(q in budget_inputs for q in positives):
        at = token_budget_metrics(budget_inputs, count_tokens,
                                  budgets=sorted({*TOKEN_BUDGETS, *TOKEN_CURVE_BUDGETS}))
        token_curve = token_budget_curve(at)
        keep = {f"token_{w}_at_{b}" for b in TOKEN_BUDGETS for w in ("recall", "support")}
        for qid, m in at.items():  # the row logs TOKEN_BUDGETS; the curve is an artifact
            m = {k: v for k, v in m.items() if k in keep}
            per_query_metrics[qid].update(m)
            next(r for r in rows if r["query_id"] == qid).update(m)
    if count_tokens is not None and all(t is not None for t in texts):
        contexts = ["\n".join(t) for t in texts]  # word pieces, untruncated, no [CLS]/[SEP]
        for r, ctx, n in zip(rows, contexts, count_tokens(contexts)):
            r["context_tokens"] = max(n - 2, 0) if ctx else 0
    return Collected(rows=rows, per_query_metrics=per_query_metrics, run=run,
                     chunk_run=chunk_run, timings=timings, unanswered=unanswered,
                     filtered=filtered, token_curve=token_curve)


def aggregate(got: Collected, golden: GoldenSet, *, use_expected_types: bool = False,
              gate_thresholds: Sequence[float] = ()) -> dict[str, float]:
    """The row's metrics from the per-query measurements: means over positives (per tag
    too), the returned-half rates, latency percentiles and stage counts (the module's and
    :func:`evaluate`'s docstrings define each); the abstention calibration is added by
    :func:`evaluate`."""
    rows, per_query_metrics, timings = got.rows, got.per_query_metrics, got.timings
    unanswered, filtered = got.unanswered, got.filtered
    metrics: dict[str, float] = {}
    pos_ids = [q.id for q in golden.positives]
    metrics.update(mean_metrics(per_query_metrics, pos_ids))
    for tag in golden.tags:
        ids = [q.id for q in golden.positives if tag in q.tags]
        for k, v in mean_metrics(per_query_metrics, ids).items():
            metrics[tag_metric(tag, k)] = v
        metrics[tag_metric(tag, "n_queries")] = float(len(ids))
    pos_rows = [r for r in rows if r["kind"] == "positive"]
    neg_rows = [r for r in rows if r["kind"] == "negative"]
    metrics["answer_support_rate"] = (sum(r["answer_support"] for r in pos_rows) / len(pos_rows)
                                      if pos_rows else 0.0)
    metrics["dropped_rate"] = (sum(r["returned_as"] == "dropped" for r in pos_rows) / len(pos_rows)
                               if pos_rows else 0.0)
    if rows and all(r["context_chars"] is not None for r in rows):
        metrics["context_chars_mean"] = float(sum(r["context_chars"] for r in rows) / len(rows))
    metrics["missing_queries"] = float(unanswered.get("missing", 0))
    # queries the retriever could not answer (an endpoint's timeout or 5xx): scored 0, counted
    metrics["failed_queries"] = float(unanswered.get("failed", 0))
    if rows and "context_tokens" in rows[0]:
        metrics["context_tokens_mean"] = float(sum(r["context_tokens"] for r in rows) / len(rows))
    if use_expected_types:
        metrics["filtered_queries"] = float(len(filtered))
        metrics["filter_false_negative_rate"] = (sum(filtered.values()) / len(filtered)
                                                 if filtered else 0.0)
    metrics["n_positives"] = float(len(pos_rows))
    metrics["n_negatives"] = float(len(neg_rows))
    metrics["false_weak_rate"] = (sum(r["false_weak"] for r in pos_rows) / len(pos_rows)
                                  if pos_rows else 0.0)
    if neg_rows:
        metrics["abstain_rate"] = sum(r["abstained"] for r in neg_rows) / len(neg_rows)
    if pos_rows and all(r["candidate_hit"] is not None for r in pos_rows):
        metrics["candidate_pool_recall"] = sum(r["candidate_hit"] for r in pos_rows) / len(pos_rows)
    if any(r["top_rerank"] is not None for r in rows):
        def gated(r: dict[str, Any], t: float) -> bool:
            return r["top_rerank"] is None or r["top_rerank"] < t

        for t in gate_thresholds:
            if neg_rows:
                metrics[f"rerank_gate/{t:g}/abstain_rate"] = (
                    sum(gated(r, t) for r in neg_rows) / len(neg_rows))
            if pos_rows:
                metrics[f"rerank_gate/{t:g}/false_weak_rate"] = (
                    sum(gated(r, t) for r in pos_rows) / len(pos_rows))
    # positives lost at each stage (lost_at/<stage>, per tag too)
    metrics.update(stage_metrics(pos_rows, golden.tags))
    metrics["dropped_positives"] = float(sum(1 for r in pos_rows if r["dropped"]))
    metrics["dropped_negatives"] = float(sum(1 for r in neg_rows if r["dropped"]))
    for stage, vals in timings.items():
        if not vals:
            continue  # the stage never ran (e.g. fusion outside hybrid)
        name = "latency" if stage == "total" else f"latency_{stage}"
        metrics[f"{name}_p50_ms"] = percentile(vals, 50)
        metrics[f"{name}_p95_ms"] = percentile(vals, 95)
    return metrics


def calibration_metrics(cal: dict[str, Any]) -> dict[str, float]:
    """The calibration as flat ledger metrics: ``calibration/<key>`` for the dense summary
    (``overlap`` as 0/1) and ``abstention/<signal>/{auc, aurc, weak_threshold, drop_threshold,
    abstain_rate, false_weak_rate, abstain_ci_low, ..., met_target}`` per signal."""
    out: dict[str, float] = {}
    for k in ("positive_min_top_dense", "negative_max_top_dense", "suggested_min_dense",
              "suggested_weak_dense", "overlap"):
        if cal.get(k) is not None:
            out[f"calibration/{k}"] = float(cal[k])
    for name, c in cal.get("signals", {}).items():
        pre = f"abstention/{name}"
        out[f"{pre}/auc"] = c["auc"]
        out[f"{pre}/aurc"] = c["aurc"]
        out[f"{pre}/overlap"] = float(c["overlap"])
        out[f"{pre}/met_target"] = float(c["met_target"])
        w = c["weak"]
        if w["threshold"] is not None:
            out[f"{pre}/weak_threshold"] = w["threshold"]
        if c["drop"]["threshold"] is not None:
            out[f"{pre}/drop_threshold"] = c["drop"]["threshold"]
        out[f"{pre}/abstain_rate"] = w["abstain_rate"]
        out[f"{pre}/false_weak_rate"] = w["false_weak_rate"]
        out[f"{pre}/abstain_ci_low"], out[f"{pre}/abstain_ci_high"] = w["abstain_ci"]
        out[f"{pre}/false_weak_ci_low"], out[f"{pre}/false_weak_ci_high"] = w["false_weak_ci"]
    return out


def trec_run_lines(run: dict[str, dict[str, float]], tag: str) -> list[str]:
    """The run as TREC run-file lines ``qid Q0 docno rank score tag``, ranks 1-based, in the
    same (-score, doc id) order that the metrics use; docnos percent-encoded
    (:func:`rag.eval.golden.trec_docno`) and scores written exactly (17 significant digits),
    so the file read back (``retriever.kind=run_file``) keeps every tie and every order."""
    from rag.eval.golden import trec_docno

    lines = []
    for qid in run:
        for i, doc in enumerate(rank(run[qid]), start=1):
            lines.append(f"{qid} Q0 {trec_docno(doc)} {i} {run[qid][doc]:.17g} {tag}")
    return lines


def chunk_run_lines(chunk_run: dict[str, list[dict[str, Any]]], tag: str) -> list[str]:
    """The chunk-level run as TREC run-file lines ``qid Q0 docno rank score tag``: one line
    per ranked chunk in the order returned (several chunks of one file each get a line), the
    docno ``path#L<start>-<end>`` percent-encoded like every docno
    (:func:`rag.eval.golden.trec_docno`; ``path`` alone when the chunk has no lines)."""
    from rag.eval.golden import trec_docno

    lines = []
    for qid, hits in chunk_run.items():
        for h in hits:
            doc = (f"{h['path']}#L{h['start_line']}-{h['end_line']}" if h["start_line"] >= 1
                   else h["path"])
            lines.append(f"{qid} Q0 {trec_docno(doc)} {h['rank']} {h['score']:.17g} {tag}")
    return lines


def chunk_run_jsonl(chunk_run: dict[str, list[dict[str, Any]]],
                    queries: dict[str, str]) -> str:
    """The chunk-level run as JSON lines, one per query: ``{"query_id", "query", "hits":
    [chunk_run_entry, ...]}`` (the TREC twin's content plus symbols and per-stage scores), so
    any chunk-level metric can be recomputed from a ledger row alone."""
    import json

    return "".join(json.dumps({"query_id": qid, "query": queries.get(qid, ""), "hits": hits},
                              ensure_ascii=False) + "\n" for qid, hits in chunk_run.items())
