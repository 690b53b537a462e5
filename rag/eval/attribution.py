"""Per-stage failure attribution: where each positive's relevant unit was lost.

One vocabulary (:class:`Stage`), in pipeline order, used by the per-query table (column
``lost_at``), the row's counts (``lost_at/<stage>``, per tag ``tag.<tag>.lost_at/<stage>``),
``rag diff`` and ``rag gate``:

====================  ========================================================================
stage                 the first relevant unit of the query ...
====================  ========================================================================
not_in_candidates     is in no channel's candidates (each channel's top ``search.candidates``
                      chunks on a hybrid route, the channel's ranking pool on a single-channel
                      route; a type filter that leaves nothing makes nothing a candidate)
fused_out             is in at least one channel's candidates, but the first stage's ranking
                      (the fusion; on a single-channel route that channel's own order; then
                      the ranking stage) put it below ``top_k`` and no reranker brought it
                      back
reranked_out          was in the first stage's top ``top_k``; the reranker moved it out
abstained             is in the final top ``top_k``, but abstention dropped the answer or
                      flagged it ``weak_match`` (``returned_as`` says which)
returned              is in the top ``top_k`` hits a caller receives, not flagged
unknown               the retriever does not report the stage that lost it (a TREC run file, an
                      HTTP service, a user's object: only the built-in pipeline reports its
                      channels' candidates and its ranking before reranking); never guessed
====================  ========================================================================

Relevance is judged exactly as the ranking metrics judge it (the evaluator passes its own
predicate: a chunk is relevant when it hits a relevant label of the query), on chunks: "top
``top_k``" means the first ``top_k`` chunks, as a caller receives them. So ``abstained`` and
``returned`` together are the positives whose ``supported`` is true.

The data comes from what a :class:`rag.search.pipeline.SearchResult` reports:
``channel_candidates`` (channel name -> the chunks it handed on, None when not reported) and
``first_stage_top`` (the first stage's top ``top_k`` before any reranking, None when not
reported), besides ``ranked`` and ``hits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping, Sequence

from rag.eval.metric_names import tag_metric


class Stage(str, Enum):
    """Where a positive's relevant unit was lost (module docstring); values are the names
    written to the per-query table and the ledger."""

    NOT_IN_CANDIDATES = "not_in_candidates"
    FUSED_OUT = "fused_out"
    RERANKED_OUT = "reranked_out"
    ABSTAINED = "abstained"
    RETURNED = "returned"
    UNKNOWN = "unknown"


# every stage name, in pipeline order (how far the relevant unit got), ``unknown`` last
STAGES: tuple[str, ...] = tuple(s.value for s in Stage)
# one line per stage, for legends (rag diff, rag gate)
STAGE_HELP: dict[str, str] = {
    Stage.NOT_IN_CANDIDATES.value: "in no channel's candidates",
    Stage.FUSED_OUT.value: "in a channel's candidates, its chunk ranked below the top_k "
                           "chunks by the first stage (the fusion, or a single-channel "
                           "route's own order, then the ranking stage); its rank in units, "
                           "which counts a file's unlabelled chunks once, can still be "
                           "within top_k",
    Stage.RERANKED_OUT.value: "in the first stage's top_k, moved out by the reranker",
    Stage.ABSTAINED.value: "in the final top_k, dropped or flagged weak by abstention",
    Stage.RETURNED.value: "returned to the caller",
    Stage.UNKNOWN.value: "the retriever does not report that stage",
}
# the per-query table's columns
LOST_AT_COLUMN = "lost_at"
FOUND_BY_COLUMN = "found_by"
# channels joined in the per-query table's found_by column
FOUND_BY_SEP = "+"
LOST_AT_METRIC = "lost_at"


def lost_at_metric(stage: str | Stage, tag: str | None = None) -> str:
    """The ledger name of the count of positives lost at ``stage``: ``lost_at/fused_out``, per
    tag ``tag.prose.lost_at/fused_out`` (a ``/``, not a ``.``: a metric name never holds a dot,
    rag.eval.metric_names)."""
    name = f"{LOST_AT_METRIC}/{Stage(stage).value}"
    return name if tag is None else tag_metric(tag, name)


def stage_depth(stage: str) -> int | None:
    """How far a relevant unit lost at ``stage`` got: 0 (``not_in_candidates``) ..
    4 (``returned``); None for ``unknown`` or a name outside the vocabulary (e.g. ``""`` in a
    row logged before attribution existed)."""
    try:
        s = Stage(stage)
    except ValueError:
        return None
    return None if s is Stage.UNKNOWN else STAGES.index(s.value)


@dataclass(frozen=True)
class StageTrace:
    """What one result tells about one positive, stage by stage.

    Attributes:
        in_final_top_k: a relevant chunk among the first ``top_k`` of the final ranking.
        delivered: the caller received the hits unflagged (not dropped, not ``weak_match``).
        channels: the channels whose candidates held a relevant chunk, in the result's order
            (empty: none did); None when the retriever does not report its channels.
        in_first_stage_top_k: a relevant chunk among the first stage's top ``top_k`` (before
            reranking); None when not reported.
    """

    in_final_top_k: bool
    delivered: bool
    channels: tuple[str, ...] | None
    in_first_stage_top_k: bool | None


def attribute(trace: StageTrace) -> Stage:
    """The stage that lost the positive (module docstring), from what was reported only."""
    if trace.in_final_top_k:
        return Stage.RETURNED if trace.delivered else Stage.ABSTAINED
    if trace.channels is None:
        return Stage.UNKNOWN
    if not trace.channels:
        return Stage.NOT_IN_CANDIDATES
    if trace.in_first_stage_top_k is None:
        return Stage.UNKNOWN
    return Stage.RERANKED_OUT if trace.in_first_stage_top_k else Stage.FUSED_OUT


def _chunk(c: Any) -> Any:
    """A ``(path, symbol, start_line, end_line, chunk_id)`` tuple as an object with those
    attributes (what relevance predicates read); anything else as it is."""
    if isinstance(c, tuple):
        path, symbol, start, end, cid = c
        return SimpleNamespace(path=path, symbol=symbol, start_line=start, end_line=end,
                               chunk_id=cid)
    return c


def trace_result(res: Any, *, top_k: int, relevant: Callable[[Any], bool]) -> StageTrace:
    """The :class:`StageTrace` of one positive from a :class:`rag.search.pipeline.SearchResult`.

    Args:
        res: the result (``ranked``, ``hits``, ``dropped``, ``weak_match`` and, when reported,
            ``channel_candidates`` and ``first_stage_top``).
        top_k: hits a caller receives.
        relevant: chunk (``path``, ``symbol``, ``start_line``, ``end_line``, ``chunk_id``
            attributes) -> whether it hits a relevant label of the query.
    """
    in_final = any(relevant(h) for h in res.ranked[:top_k])
    delivered = bool(res.hits) and not res.weak_match
    pools = getattr(res, "channel_candidates", None)
    channels = None if pools is None else tuple(
        name for name, chunks in pools.items() if any(relevant(_chunk(c)) for c in chunks))
    first = getattr(res, "first_stage_top", None)
    in_first = None if first is None else any(relevant(_chunk(c)) for c in first[:top_k])
    return StageTrace(in_final_top_k=in_final, delivered=delivered, channels=channels,
                      in_first_stage_top_k=in_first)


def row_columns(trace: StageTrace) -> dict[str, str]:
    """The per-query table's ``lost_at`` and ``found_by`` (channels joined with ``+``; empty
    when none held a relevant chunk or the retriever does not report channels — ``lost_at``
    then says ``not_in_candidates`` or ``unknown``)."""
    return {LOST_AT_COLUMN: attribute(trace).value,
            FOUND_BY_COLUMN: FOUND_BY_SEP.join(trace.channels or ())}


def split_found_by(value: Any) -> list[str]:
    """The per-query table's ``found_by`` cell as a list of channel names."""
    if value is None or (isinstance(value, float) and value != value):
        return []
    return [c for c in str(value).split(FOUND_BY_SEP) if c]


def split_tags(value: Any) -> list[str]:
    """The per-query table's ``tags`` cell (``"prose,docs"``) as a list."""
    if value is None or (isinstance(value, float) and value != value):
        return []
    return [t for t in str(value).split(",") if t]


def count_stages(stages: Iterable[str]) -> dict[str, int]:
    """Stage name -> how many of ``stages`` (every stage of the vocabulary, zeros included;
    a name outside it, e.g. an empty cell of an old row, is not counted)."""
    out = dict.fromkeys(STAGES, 0)
    for s in stages:
        if s in out:
            out[s] += 1
    return out


def stage_metrics(rows: Sequence[Mapping[str, Any]], tags: Iterable[str]) -> dict[str, float]:
    """The row's counts: ``lost_at/<stage>`` over the positive rows and
    ``tag.<tag>.lost_at/<stage>`` over each tag's positives, every stage (zeros included).

    Args:
        rows: per-query rows of positives (``lost_at``, and ``tags`` joined with commas).
        tags: the golden set's tags.
    """
    out = {lost_at_metric(s): float(n)
           for s, n in count_stages(r[LOST_AT_COLUMN] for r in rows).items()}
    for tag in tags:
        mine = [r[LOST_AT_COLUMN] for r in rows if tag in split_tags(r.get("tags"))]
        out.update({lost_at_metric(s, tag): float(n) for s, n in count_stages(mine).items()})
    return out


def changed_at(stage_a: str, stage_b: str, rank_a: int | None, rank_b: int | None
               ) -> tuple[str, str] | None:
    """Which stage changed a query between rows A and B, and how: ``(stage, "worse")``,
    ``(stage, "better")``, or None when nothing changed (same stage and same first relevant
    rank).

    * B lost the unit at an earlier stage than A: that stage (B's ``lost_at``), worse;
    * B got it past the stage where A lost it: that stage (A's ``lost_at``), better;
    * same stage, another rank: that stage, better or worse by the rank (None = not ranked);
    * ``unknown`` (or a row without attribution) on either side: ``unknown``, judged by the
      rank (``"worse"`` / ``"better"``; ``"changed"`` when the ranks are equal).
    """
    if stage_a == stage_b and rank_a == rank_b:
        return None
    da, db = stage_depth(stage_a), stage_depth(stage_b)

    def by_rank() -> str:
        if rank_a == rank_b:
            return "changed"
        if rank_b is not None and (rank_a is None or rank_b < rank_a):
            return "better"
        return "worse"

    if da is None or db is None:
        return Stage.UNKNOWN.value, by_rank()
    if db < da:
        return stage_b, "worse"
    if db > da:
        return stage_a, "better"
    return stage_a, by_rank()
