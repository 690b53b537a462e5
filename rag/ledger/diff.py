"""Per-query comparison of two ledger rows (``rag diff RUN_A RUN_B``).

For every positive query both rows answered, the rank of the first relevant hit in each
(None = not retrieved), who wins (the lower rank), and the queries that moved most with
their top hits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd


@dataclass
class QueryDiff:
    """One query's first-relevant rank in A and B (None: no relevant hit retrieved)."""

    query_id: str
    tags: str
    rank_a: int | None
    rank_b: int | None
    outcome: str  # "win" (B better), "loss" (B worse), "tie"
    top_hits_a: str
    top_hits_b: str

    @property
    def movement(self) -> float:
        """|1/rank_a - 1/rank_b|: the change in reciprocal rank."""
        rr = lambda r: 0.0 if r is None else 1.0 / r  # noqa: E731
        return abs(rr(self.rank_a) - rr(self.rank_b))


def _rank(v: Any) -> int | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return None
    return int(float(v))


def diff_per_query(a: pd.DataFrame, b: pd.DataFrame) -> list[QueryDiff]:
    """Compare the positives two per_query tables share (indexed by query id).

    B wins a query when it ranks the first relevant doc strictly higher (a smaller rank, or
    any rank against none); equal ranks, or neither retrieving one, are ties.
    """
    out = []
    for qid in a.index.intersection(b.index):
        ra, rb = _rank(a.at[qid, "first_relevant_rank"]), _rank(b.at[qid, "first_relevant_rank"])
        if ra == rb:
            outcome = "tie"
        elif rb is not None and (ra is None or rb < ra):
            outcome = "win"
        else:
            outcome = "loss"
        out.append(QueryDiff(query_id=str(qid), tags=str(a.at[qid, "tags"]), rank_a=ra, rank_b=rb,
                             outcome=outcome, top_hits_a=str(a.at[qid, "top_hits"]),
                             top_hits_b=str(b.at[qid, "top_hits"])))
    return out


def summarize(diffs: list[QueryDiff], *, run_a: str, run_b: str, top: int = 10) -> dict[str, Any]:
    """Counts of wins/losses/ties (from B's point of view) and the ``top`` queries that moved
    most (by change in reciprocal rank), as a JSON-ready dict."""
    counts = {k: sum(d.outcome == k for d in diffs) for k in ("win", "loss", "tie")}
    moved = sorted((d for d in diffs if d.outcome != "tie"), key=lambda d: (-d.movement, d.query_id))
    return {"run_a": run_a, "run_b": run_b, "queries": len(diffs), "wins_b": counts["win"],
            "losses_b": counts["loss"], "ties": counts["tie"],
            "moved_most": [asdict(d) | {"rr_change": round(d.movement, 4)} for d in moved[:top]],
            "per_query": [asdict(d) for d in diffs]}


def render_text(summary: dict[str, Any]) -> str:
    """The plain-text form of :func:`summarize`."""
    fmt = lambda r: "-" if r is None else str(r)  # noqa: E731
    lines = [f"A = {summary['run_a']}", f"B = {summary['run_b']}",
             f"{summary['queries']} shared positive queries: B wins {summary['wins_b']}, "
             f"loses {summary['losses_b']}, ties {summary['ties']} "
             "(rank of the first relevant hit; '-' = none retrieved)", "",
             f"{'query':40} {'tags':16} {'A':>4} {'B':>4}  outcome"]
    for d in summary["per_query"]:
        lines.append(f"{d['query_id'][:40]:40} {d['tags'][:16]:16} {fmt(d['rank_a']):>4} "
                     f"{fmt(d['rank_b']):>4}  {d['outcome']}")
    lines += ["", "moved most:"]
    for d in summary["moved_most"]:
        lines += [f"  {d['query_id']}: A {fmt(d['rank_a'])} -> B {fmt(d['rank_b'])} "
                  f"({d['outcome']}, reciprocal rank change {d['rr_change']:.3f})",
                  f"    A top hits: {d['top_hits_a']}", f"    B top hits: {d['top_hits_b']}"]
    return "\n".join(lines)
