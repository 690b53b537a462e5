"""Per-query comparison of two ledger rows (``rag diff RUN_A RUN_B``).

For every positive query both rows answered, the rank of the first relevant unit in each
row's ranking *before* abstention (None = not retrieved to ``eval.depth``), what the caller
received (``returned_as``: returned, weak, dropped by the floor, or empty — no hit at all),
who wins (the lower rank), and the queries that moved most with their top hits. A query with
no returned hit is thus told apart: dropped, weak, or not retrieved.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import pandas as pd


class DiffError(ValueError):
    """Two rows that cannot be compared (different corpora, no shared query, a per-query
    table that is not one); the message is one line naming both rows."""


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
    # what the caller received in A / B: returned, weak, dropped, empty ("" for rows logged
    # before the column existed)
    returned_a: str = ""
    returned_b: str = ""

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
        got = lambda f: str(f.at[qid, "returned_as"]) if "returned_as" in f.columns else ""  # noqa: E731
        out.append(QueryDiff(query_id=str(qid), tags=str(a.at[qid, "tags"]), rank_a=ra, rank_b=rb,
                             outcome=outcome, top_hits_a=str(a.at[qid, "top_hits"]),
                             top_hits_b=str(b.at[qid, "top_hits"]),
                             returned_a=got(a), returned_b=got(b)))
    return out


def check_comparable(run_a: str, tags_a: Mapping[str, str], run_b: str,
                     tags_b: Mapping[str, str]) -> list[str]:
    """Refuse two rows from different corpora; note a golden set that changed.

    Args:
        run_a, run_b: the rows' run ids (shown abbreviated to 8 characters).
        tags_a, tags_b: their MLflow tags (``corpus``, ``corpus_root``, ``golden_dir``,
            ``golden_fingerprint``; a missing tag is not compared).

    Returns:
        Notes for the output (empty when corpus and golden set are the same).

    Raises:
        DiffError: the ``corpus`` tags differ (naming both corpora and golden sets).
    """
    def name(t: Mapping[str, str]) -> str:
        where = t.get("corpus_root")
        return f"{t.get('corpus', '?')!r}" + (f" ({where})" if where else "")

    def golden(t: Mapping[str, str]) -> str:
        return f"{t.get('golden_dir', '?')} [{t.get('golden_fingerprint', '?')[:12]}]"

    a, b = run_a[:8], run_b[:8]
    if tags_a.get("corpus") and tags_b.get("corpus") and tags_a["corpus"] != tags_b["corpus"]:
        raise DiffError(f"rows {a} and {b} are from different corpora: {a} evaluated corpus "
                        f"{name(tags_a)} with golden set {golden(tags_a)}, {b} corpus "
                        f"{name(tags_b)} with golden set {golden(tags_b)}; a per-query "
                        "comparison needs two rows of one corpus")
    notes = []
    ga, gb = tags_a.get("golden_fingerprint"), tags_b.get("golden_fingerprint")
    if ga and gb and ga != gb:
        notes.append(f"note: the golden sets differ ({a}: {golden(tags_a)}, {b}: "
                     f"{golden(tags_b)}); only the queries both answered are compared")
    return notes


def compare_rows(ledger: Any, ref_a: str, ref_b: str, *, top: int = 10) -> dict[str, Any]:
    """The summary (:func:`summarize`, plus ``notes``) of two ledger rows of one store.

    Args:
        ledger: an open :class:`rag.ledger.mlflow_store.Ledger`.
        ref_a, ref_b: run ids or unique prefixes of finished rows (A = baseline).

    Raises:
        LookupError: a reference matches no finished row, or several.
        LedgerError: a row has no per_query.csv artifact.
        DiffError: the rows are from different corpora, share no positive query, or a
            per_query.csv is not a per-query table.
    """
    from rag.ledger.sweep import per_query_frame

    ids = [ledger.resolve_run_id(r) for r in (ref_a, ref_b)]
    tags = [dict(ledger.client.get_run(i).data.tags) for i in ids]
    notes = check_comparable(ids[0], tags[0], ids[1], tags[1])
    frames, texts = [], []
    for rid in ids:
        text = ledger.download_text(rid, "per_query.csv")
        texts.append(text)
        try:
            frame = per_query_frame(text)
            missing = sorted({"first_relevant_rank", "tags", "top_hits"} - set(frame.columns))
        except (KeyError, ValueError) as exc:  # pandas' parser errors are ValueErrors
            missing = [str(exc).splitlines()[0] if str(exc) else type(exc).__name__]
        if missing:
            raise DiffError(f"per_query.csv of row {rid[:8]} is not a per-query table "
                            f"(missing: {', '.join(missing)})")
        frames.append(frame)
    diffs = diff_per_query(*frames)
    negatives = negatives_changed(*texts)
    if not diffs:
        raise DiffError(f"rows {ids[0][:8]} and {ids[1][:8]} share no positive query "
                        f"({len(frames[0])} and {len(frames[1])} positives; golden sets "
                        f"{tags[0].get('golden_dir', '?')} and {tags[1].get('golden_dir', '?')})")
    return summarize(diffs, run_a=ids[0], run_b=ids[1], top=top) | {"notes": notes,
                                                                     **negatives}


def negatives_changed(csv_a: str, csv_b: str) -> dict[str, Any]:
    """The negatives both rows answered: how many each abstained on (no hit or weak), and those
    whose ``returned_as`` changed (empty lists for rows logged before the column existed)."""
    import io

    def negs(text: str) -> pd.DataFrame:
        df = pd.read_csv(io.StringIO(text), dtype={"query_id": str}, keep_default_na=False)
        if "kind" not in df.columns or "returned_as" not in df.columns:
            return pd.DataFrame(columns=["returned_as"])
        return df[df["kind"] == "negative"].set_index("query_id")

    a, b = negs(csv_a), negs(csv_b)
    common = a.index.intersection(b.index)
    abstained = lambda f: int(sum(f.at[q, "returned_as"] != "returned" for q in common))  # noqa: E731
    changed = [{"query_id": str(q), "returned_a": str(a.at[q, "returned_as"]),
                "returned_b": str(b.at[q, "returned_as"])}
               for q in common if a.at[q, "returned_as"] != b.at[q, "returned_as"]]
    return {"negatives": len(common), "negatives_abstained_a": abstained(a),
            "negatives_abstained_b": abstained(b), "negatives_changed": changed}


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
    why = lambda s: "" if s in ("", "returned") else s  # noqa: E731
    lines = [f"A = {summary['run_a']}", f"B = {summary['run_b']}", *summary.get("notes", []),
             f"{summary['queries']} shared positive queries: B wins {summary['wins_b']}, "
             f"loses {summary['losses_b']}, ties {summary['ties']} (rank of the first relevant "
             "unit in the ranking before abstention; '-' = not retrieved; the 'returned' columns "
             "say what a caller got when it was not a normal answer: weak, dropped by the floor, "
             "or empty)", "",
             f"{'query':40} {'tags':16} {'A':>4} {'B':>4}  {'outcome':7} {'A returned':10} B returned"]
    for d in summary["per_query"]:
        lines.append(f"{d['query_id'][:40]:40} {d['tags'][:16]:16} {fmt(d['rank_a']):>4} "
                     f"{fmt(d['rank_b']):>4}  {d['outcome']:7} {why(d.get('returned_a', '')):10} "
                     f"{why(d.get('returned_b', ''))}".rstrip())
    if summary.get("negatives"):
        lines += ["", f"{summary['negatives']} shared negatives: A abstained on "
                  f"{summary['negatives_abstained_a']}, B on {summary['negatives_abstained_b']} "
                  "(no hit, dropped or weak)"]
        lines += [f"  {d['query_id']}: A {d['returned_a']} -> B {d['returned_b']}"
                  for d in summary.get("negatives_changed", [])]
    def hits(d: dict, side: str) -> str:
        """The returned top hits, or why there were none (the rank is of the ranking before
        abstention, so a dropped query can rank and still return nothing)."""
        shown = d[f"top_hits_{side}"]
        if shown and shown != "nan":
            return shown
        return f"(none returned: {d.get(f'returned_{side}') or 'no hit'})"

    lines += ["", "moved most:"]
    for d in summary["moved_most"]:
        lines += [f"  {d['query_id']}: A {fmt(d['rank_a'])} -> B {fmt(d['rank_b'])} "
                  f"({d['outcome']}, reciprocal rank change {d['rr_change']:.3f})",
                  f"    A top hits: {hits(d, 'a')}", f"    B top hits: {hits(d, 'b')}"]
    return "\n".join(lines)


if __name__ == "__main__":  # python -m rag.ledger.diff RUN_A RUN_B [...] = rag diff
    import sys

    from rag.cli import main

    raise SystemExit(main(["diff", *sys.argv[1:]]))
