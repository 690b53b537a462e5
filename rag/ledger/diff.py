"""Per-query comparison of two ledger rows (``rag diff RUN_A RUN_B``).

For every positive query both rows answered, the rank of the first relevant unit in each
row's ranking *before* abstention (None = not retrieved to ``eval.depth``), what the caller
received (``returned_as``: returned, weak, dropped by the floor, or empty — no hit at all),
who wins (the lower rank), the stage that lost the relevant unit in each row (``lost_at``,
rag/eval/attribution.py) and, for every query that changed, the stage that changed it
(:func:`rag.eval.attribution.changed_at`); per tag, the same counts; and the queries that
moved most with their top hits. A query with no returned hit is thus told apart: dropped,
weak, or not retrieved — and where it was lost.

Output: readable tables (rich) on a terminal, plain text when piped, JSON (``--json``) with
lists, never joined strings.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd

from rag.eval.attribution import (FOUND_BY_COLUMN, LOST_AT_COLUMN, STAGE_HELP, STAGES, changed_at,
                                  count_stages, split_found_by, split_tags)


class DiffError(ValueError):
    """Two rows that cannot be compared (different corpora, no shared query, a per-query
    table that is not one); the message is one line naming both rows."""


@dataclass
class QueryDiff:
    """One positive query in rows A and B.

    Attributes:
        rank_a, rank_b: first relevant rank (None: no relevant unit retrieved to the depth).
        outcome: ``win`` (B ranks it better), ``loss`` (B worse), ``tie`` (same rank).
        returned_a, returned_b: what the caller received (returned, weak, dropped, empty;
            ``""`` for rows logged before the column existed).
        lost_at_a, lost_at_b: the stage that lost the relevant unit (rag/eval/attribution.py;
            ``""`` for rows logged before attribution existed).
        found_by_a, found_by_b: the channels whose candidates held a relevant chunk.
        stage, change: for a query that changed, the stage that changed it and ``better`` /
            ``worse`` / ``changed`` (:func:`rag.eval.attribution.changed_at`); None otherwise.
    """

    query_id: str
    tags: list[str]
    rank_a: int | None
    rank_b: int | None
    outcome: str  # "win" (B better), "loss" (B worse), "tie"
    top_hits_a: list[str]
    top_hits_b: list[str]
    returned_a: str = ""
    returned_b: str = ""
    lost_at_a: str = ""
    lost_at_b: str = ""
    found_by_a: list[str] = field(default_factory=list)
    found_by_b: list[str] = field(default_factory=list)
    stage: str | None = None
    change: str | None = None

    @property
    def movement(self) -> float:
        """|1/rank_a - 1/rank_b|: the change in reciprocal rank."""
        rr = lambda r: 0.0 if r is None else 1.0 / r  # noqa: E731
        return abs(rr(self.rank_a) - rr(self.rank_b))

    @property
    def changed(self) -> bool:
        """The rank, the losing stage or what the caller received differs between A and B."""
        return self.stage is not None


def _rank(v: Any) -> int | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return None
    return int(float(v))


def _text(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _hits(v: Any) -> list[str]:
    """The per-query table's ``top_hits`` cell (``"a.py:1#f | b.py:3"``) as a list."""
    return [h.strip() for h in _text(v).split(" | ") if h.strip()]


def diff_per_query(a: pd.DataFrame, b: pd.DataFrame) -> list[QueryDiff]:
    """Compare the positives two per_query tables share (indexed by query id).

    B wins a query when it ranks the first relevant doc strictly higher (a smaller rank, or
    any rank against none); equal ranks, or neither retrieving one, are ties. A query changed
    when its rank, its ``lost_at`` stage or its ``returned_as`` differs; ``stage`` names the
    stage that changed it (a change of ``returned_as`` alone, e.g. weak -> dropped, is
    ``abstained``, or ``unknown`` without attribution).
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
        col = lambda f, c: _text(f.at[qid, c]) if c in f.columns else ""  # noqa: E731
        lost_a, lost_b = col(a, LOST_AT_COLUMN), col(b, LOST_AT_COLUMN)
        got_a, got_b = col(a, "returned_as"), col(b, "returned_as")
        moved = changed_at(lost_a, lost_b, ra, rb)
        if moved is None and got_a != got_b:
            moved = (lost_a if lost_a == lost_b and lost_a else "unknown", "changed")
        out.append(QueryDiff(
            query_id=str(qid), tags=split_tags(col(a, "tags")), rank_a=ra, rank_b=rb,
            outcome=outcome, top_hits_a=_hits(col(a, "top_hits")),
            top_hits_b=_hits(col(b, "top_hits")), returned_a=got_a, returned_b=got_b,
            lost_at_a=lost_a, lost_at_b=lost_b,
            found_by_a=split_found_by(col(a, FOUND_BY_COLUMN)),
            found_by_b=split_found_by(col(b, FOUND_BY_COLUMN)),
            stage=moved[0] if moved else None, change=moved[1] if moved else None))
    return out


def _counts(diffs: Sequence[QueryDiff]) -> dict[str, Any]:
    """Wins/losses/ties, changed queries, each row's ``lost_at`` counts (every stage) and, for
    the changed queries, stage -> {``better``, ``worse``, ``changed``: how many}."""
    order = {s: i for i, s in enumerate(STAGES)}
    moved: dict[str, dict[str, int]] = {}
    for d in sorted((d for d in diffs if d.changed), key=lambda d: order.get(d.stage, 99)):
        by = moved.setdefault(d.stage, {})
        by[d.change] = by.get(d.change, 0) + 1
    return {"queries": len(diffs), "wins_b": sum(d.outcome == "win" for d in diffs),
            "losses_b": sum(d.outcome == "loss" for d in diffs),
            "ties": sum(d.outcome == "tie" for d in diffs),
            "changed": sum(d.changed for d in diffs),
            "lost_at_a": count_stages(d.lost_at_a for d in diffs),
            "lost_at_b": count_stages(d.lost_at_b for d in diffs),
            "changed_at": moved}


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


def never_acting_abstention(a: tuple[str, str | None], b: tuple[str, str | None]) -> str | None:
    """One sentence when exactly one of two sides (``(name, search.mode)``; a mode of None:
    not known) has an abstention that never acts (:func:`rag.search.abstain.never_acts`):
    its answer support and abstention rates then compare a pipeline that can abstain with one
    that cannot; None otherwise."""
    from rag.search.abstain import never_acts

    if not (a[1] and b[1]):
        return None
    off = [(name, mode) for name, mode in (a, b) if never_acts(mode)]
    if len(off) != 1:
        return None
    name, mode = off[0]
    return (f"{name}'s abstention never acts (search.mode={mode} runs no dense channel): "
            "answer_support_rate, abstain_rate, false_weak_rate, dropped_rate and the "
            "'abstained' stage compare a pipeline that can abstain with one that cannot, not "
            "two abstentions")


def compare_rows(ledger: Any, ref_a: str, ref_b: str, *, top: int = 10,
                 changed_only: bool = False) -> dict[str, Any]:
    """The summary (:func:`summarize`, plus ``notes``) of two ledger rows of one store.

    Args:
        ledger: an open :class:`rag.ledger.mlflow_store.Ledger`.
        ref_a, ref_b: run ids or unique prefixes of finished rows (A = baseline).
        top: queries listed as moved most.
        changed_only: list only the queries that changed (:func:`summarize`).

    Raises:
        LookupError: a reference matches no finished row, or several.
        LedgerError: a row has no per_query.csv artifact.
        DiffError: the rows are from different corpora, share no positive query, or a
            per_query.csv is not a per-query table.
    """
    from rag.ledger.sweep import per_query_frame

    ids = [ledger.resolve_run_id(r) for r in (ref_a, ref_b)]
    runs = [ledger.client.get_run(i) for i in ids]
    tags = [dict(r.data.tags) for r in runs]
    notes = check_comparable(ids[0], tags[0], ids[1], tags[1])
    acting = never_acting_abstention(
        *((f"row {i[:8]}", r.data.params.get("search.mode")) for i, r in zip(ids, runs)))
    if acting:
        notes.append(f"note: {acting}")
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
        if LOST_AT_COLUMN not in frame.columns:
            notes.append(f"note: row {rid[:8]} was logged before per-stage attribution (no "
                         f"{LOST_AT_COLUMN} column): its stages show as '?'")
    diffs = diff_per_query(*frames)
    negatives = negatives_changed(*texts)
    if not diffs:
        raise DiffError(f"rows {ids[0][:8]} and {ids[1][:8]} share no positive query "
                        f"({len(frames[0])} and {len(frames[1])} positives; golden sets "
                        f"{tags[0].get('golden_dir', '?')} and {tags[1].get('golden_dir', '?')})")
    return summarize(diffs, run_a=ids[0], run_b=ids[1], top=top,
                     changed_only=changed_only) | {"notes": notes, **negatives,
                                                   "paired": paired_tests(*frames)}


def paired_tests(a: pd.DataFrame, b: pd.DataFrame) -> list[dict[str, Any]]:
    """B against A on the positives both per-query tables hold, with the comparison engine the
    sweeps and ``rag gate`` use (:func:`rag.eval.significance.compare_paired`: paired
    randomization test, 95% bootstrap CI of the mean difference, minimum detectable effect at
    α 0.05 and power 0.8), Holm-adjusted across the tested metrics (the columns declared
    ``significance`` in rag/eval/measures/).

    Returns:
        One dict per metric present in both: ``metric``, ``queries``, ``delta`` (mean of
        B - A), ``ci_low``, ``ci_high``, ``p``, ``p_holm``, ``mde``; [] when they share none.
    """
    from rag.eval.significance import holm
    from rag.ledger.sweep import compare_per_query, significance_columns

    common = a.index.intersection(b.index)
    if len(common) == 0:
        return []
    metrics = tuple(m for m in significance_columns(b) if m in a.columns)
    got = compare_per_query(a, b, metrics=metrics)
    rows = [{"metric": m, "queries": int(got["paired_queries"]), "delta": got[f"{m}_delta"],
             "ci_low": got[f"{m}_ci_low"], "ci_high": got[f"{m}_ci_high"], "p": got[f"{m}_p"],
             "mde": got[f"{m}_mde"]} for m in metrics if f"{m}_p" in got]
    for r, adj in zip(rows, holm([r["p"] for r in rows])):
        r["p_holm"] = adj
    # JSON-ready (``rag diff --json``): a value the pairs cannot give is null, never NaN
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in r.items()} for r in rows]


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


def summarize(diffs: list[QueryDiff], *, run_a: str, run_b: str, top: int = 10,
              changed_only: bool = False) -> dict[str, Any]:
    """The comparison as a JSON-ready dict (lists, never joined strings).

    Keys: ``run_a``, ``run_b``, the counts of :func:`_counts` over every shared positive
    (``queries``, ``wins_b``, ``losses_b``, ``ties``, ``changed``, ``lost_at_a``,
    ``lost_at_b``, ``changed_at``), ``per_tag`` (tag -> the same counts over its queries),
    ``moved_most`` (the ``top`` queries by change in reciprocal rank, with ``rr_change``),
    ``per_query`` (every shared positive, or only the changed ones with ``changed_only``)
    and ``changed_only``.
    """
    moved = sorted((d for d in diffs if d.outcome != "tie"), key=lambda d: (-d.movement, d.query_id))
    tags = sorted({t for d in diffs for t in d.tags})
    shown = [d for d in diffs if d.changed] if changed_only else diffs
    return {"run_a": run_a, "run_b": run_b, **_counts(diffs),
            "per_tag": {t: _counts([d for d in diffs if t in d.tags]) for t in tags},
            "moved_most": [asdict(d) | {"rr_change": round(d.movement, 4)} for d in moved[:top]],
            "changed_only": changed_only,
            "per_query": [asdict(d) for d in shown]}


def _effect(v: float | None) -> str:
    """A minimum detectable effect, 4 decimals (rag.eval.significance.effect_text)."""
    from rag.eval.significance import effect_text

    return effect_text(v, 4)


def _rank_cell(r: int | None) -> str:
    return "-" if r is None else str(r)


def _stage_cell(lost_at: str, returned_as: str) -> str:
    """A row's stage as shown: ``lost_at`` (``?`` for a row without attribution), with what
    the caller got when it was not a normal answer (``abstained (weak)``, ``? (dropped)``)."""
    stage = lost_at or "?"
    if returned_as in ("weak", "dropped", "empty") and stage not in ("not_in_candidates",
                                                                     "fused_out", "reranked_out"):
        return f"{stage} ({returned_as})"
    return stage


def _changed_cell(stage: str | None, change: str | None) -> str:
    return "" if stage is None else f"{change} at {stage}"


def _by_stage(counts: Mapping[str, Mapping[str, int]], kind: str) -> str:
    """``fused_out 3, abstained 1``: the stages where ``kind`` (better/worse) changes happened."""
    return ", ".join(f"{s} {c[kind]}" for s, c in counts.items() if c.get(kind))


@dataclass
class Table:
    """One block of output: rendered as a rich table on a terminal, as aligned plain text
    otherwise. ``right``: the indexes of right-aligned (numeric) columns."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    right: tuple[int, ...] = ()


def summary_blocks(summary: dict[str, Any]) -> list[str | Table]:
    """The output of ``rag diff`` as lines and :class:`Table` blocks, in order."""
    out: list[str | Table] = [f"A = {summary['run_a']}", f"B = {summary['run_b']}",
                              *summary.get("notes", [])]
    if "queries" not in summary:  # only negatives (tests build partial summaries)
        summary = {"queries": 0, "wins_b": 0, "losses_b": 0, "ties": 0, **summary}
    out.append(f"{summary['queries']} shared positive queries: B wins {summary['wins_b']}, "
               f"loses {summary['losses_b']}, ties {summary['ties']} (rank of the first relevant "
               "unit in the ranking before abstention; '-' = not retrieved); "
               f"{summary.get('changed', 0)} changed (rank, stage or what the caller got)")
    out.append("stages: " + "; ".join(f"{s} = {h}" for s, h in STAGE_HELP.items()))
    rows = summary.get("per_query", [])
    title = ("changed queries" if summary.get("changed_only") else "per query") + \
        " (stage: where the relevant unit was lost; changed: the stage that changed it)"
    out.append(Table(title, ["query", "tags", "A", "B", "outcome", "A stage", "B stage",
                             "changed"],
                     [[d["query_id"], ",".join(d["tags"]), _rank_cell(d["rank_a"]),
                       _rank_cell(d["rank_b"]), d["outcome"],
                       _stage_cell(d.get("lost_at_a", ""), d.get("returned_a", "")),
                       _stage_cell(d.get("lost_at_b", ""), d.get("returned_b", "")),
                       _changed_cell(d.get("stage"), d.get("change"))] for d in rows],
                     right=(2, 3)))
    if any(summary.get("lost_at_a", {}).values()) or any(summary.get("lost_at_b", {}).values()):
        # (rows logged before attribution count nothing: no table of zeros)
        out.append(Table("where the positives were lost", ["stage", "A", "B", "B - A"],
                         [[s, str(summary["lost_at_a"][s]), str(summary["lost_at_b"][s]),
                           f"{summary['lost_at_b'][s] - summary['lost_at_a'][s]:+d}"]
                          for s in STAGES], right=(1, 2, 3)))
    if summary.get("per_tag"):
        out.append(Table("per tag", ["tag", "queries", "wins", "losses", "ties", "changed",
                                     "worse at", "better at"],
                         [[t, str(c["queries"]), str(c["wins_b"]), str(c["losses_b"]),
                           str(c["ties"]), str(c["changed"]), _by_stage(c["changed_at"], "worse"),
                           _by_stage(c["changed_at"], "better")]
                          for t, c in summary["per_tag"].items()], right=(1, 2, 3, 4, 5)))
    if summary.get("negatives"):
        out += [f"{summary['negatives']} shared negatives: A abstained on "
                f"{summary['negatives_abstained_a']}, B on {summary['negatives_abstained_b']} "
                "(no hit, dropped or weak)"]
        out += [f"  {d['query_id']}: A {d['returned_a']} -> B {d['returned_b']}"
                for d in summary.get("negatives_changed", [])]

    if summary.get("paired"):
        n = summary["paired"][0]["queries"]
        out.append(Table(f"paired tests, B - A on {n} shared positives (randomization test, "
                         "95% bootstrap CI, p Holm-adjusted across these metrics; MDE: the "
                         "smallest difference these queries detect at α 0.05, power 0.8)",
                         ["metric", "B - A", "95% CI", "p", "p (Holm)", "MDE"],
                         [[r["metric"], f"{r['delta']:+.4f}",
                           f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]", f"{r['p']:.4f}",
                           f"{r['p_holm']:.4f}", _effect(r["mde"])]
                          for r in summary["paired"]], right=(1, 2, 3, 4, 5)))

    def hits(d: dict, side: str) -> str:
        """The returned top hits, or why there were none (the rank is of the ranking before
        abstention, so a dropped query can rank and still return nothing)."""
        shown = d[f"top_hits_{side}"]
        if shown:
            return " | ".join(shown)
        return f"(none returned: {d.get(f'returned_{side}') or 'no hit'})"

    lines = ["moved most:"]
    for d in summary.get("moved_most", []):
        where = _changed_cell(d.get("stage"), d.get("change"))
        lines += [f"  {d['query_id']}: A {_rank_cell(d['rank_a'])} -> B {_rank_cell(d['rank_b'])} "
                  f"({d['outcome']}, reciprocal rank change {d['rr_change']:.3f}"
                  + (f", {where}" if where else "") + ")",
                  f"    A top hits: {hits(d, 'a')}", f"    B top hits: {hits(d, 'b')}"]
    out += ["", *lines]
    return out


def plain_table(t: Table) -> list[str]:
    """A :class:`Table` as aligned plain-text lines (title, header, rows)."""
    cells = [t.columns, *t.rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(t.columns))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in t.right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return ["", f"{t.title}:", line(t.columns), *(line(r) for r in t.rows)]


def render_text(summary: dict[str, Any]) -> str:
    """The plain-text form of :func:`summarize` (what ``rag diff`` prints when piped)."""
    lines: list[str] = []
    for block in summary_blocks(summary):
        lines += plain_table(block) if isinstance(block, Table) else [block]
    return "\n".join(lines)


def print_rich(summary: dict[str, Any], *, file: Any = None) -> None:
    """Print :func:`summarize` with rich tables (``rag diff`` on a terminal)."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=file, highlight=False)
    for block in summary_blocks(summary):
        if isinstance(block, Table):
            table = RichTable(title=block.title, title_justify="left")
            for i, c in enumerate(block.columns):
                table.add_column(c, justify="right" if i in block.right else "left",
                                 overflow="fold")
            for r in block.rows:
                table.add_row(*r)
            console.print(table)
        else:
            console.print(block, markup=False)


if __name__ == "__main__":  # the command is `rag diff` (rag/app/cli.py); this module is its library
    import sys

    print("error: run `rag diff RUN_A RUN_B` (python -m rag.ledger.diff is not a command)",
          file=sys.stderr)
    raise SystemExit(2)
