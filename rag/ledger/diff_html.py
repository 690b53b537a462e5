"""The side-by-side page of two ledger rows (``rag diff A B --html FILE``): one self-contained
HTML file (inline CSS, no script, no network) in the spirit of DiffIR (Jose, Nguyen, MacAvaney,
Dalton, Yates: "DiffIR: Exploring Differences in Ranking Models' Behavior", SIGIR 2021 demo).

For every positive query both rows answered, most-changed first (change in reciprocal rank of
the first relevant unit, then the queries whose losing stage or answer changed, then the
rest): the query with its terms, the rank in A and in B, the stage that lost the relevant unit
in each row and the stage that changed it (rag/eval/attribution.py), and the two rankings side
by side — each hit's ``path:start-end``, symbol, category, final score and per-channel /
per-feature scores (``scores`` of ``run.chunks.jsonl``), whether it is relevant (judged against
the row's golden set, when it is on this machine), and the chunk's own lines with the query's
terms highlighted (read from the row's ``corpus_root``, when it is on this machine).

The page is built from a :func:`rag.ledger.diff.summarize` summary plus what
:func:`page_inputs` reads; :func:`render_html` is pure (strings in, a string out).
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

#: hits shown per side and query, and lines shown per hit
DEFAULT_HITS, DEFAULT_LINES = 10, 30

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1b1b;background:#fff}
h1{font-size:1.3em} h2{font-size:1.05em;margin:0}
table.meta{border-collapse:collapse;margin:.5em 0 1em} table.meta td,table.meta th{
border:1px solid #ccc;padding:2px 8px;text-align:left}
section.query{border:1px solid #bbb;border-radius:6px;margin:1em 0;padding:.6em .8em}
section.query.worse{border-left:6px solid #c62828} section.query.better{border-left:6px solid #2e7d32}
.sides{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1em;margin-top:.5em}
h2,.head,.scores{overflow-wrap:anywhere}
.side h3{font-size:.95em;margin:.2em 0}
ol.hits{margin:0;padding-left:1.6em} ol.hits li{margin:.35em 0}
.hit.relevant>.head{background:#e8f5e9} .head{font-family:ui-monospace,monospace;font-size:.9em}
.scores{color:#555;font-size:.8em;font-family:ui-monospace,monospace}
pre{background:#f6f6f6;padding:4px 6px;margin:2px 0;overflow-x:auto;font-size:.8em;max-height:18em}
mark{background:#ffe082;padding:0}
.tag{display:inline-block;background:#eee;border-radius:3px;padding:0 4px;margin-right:3px;font-size:.8em}
.rel{color:#2e7d32;font-weight:bold} .muted{color:#777}
"""


class DiffPageError(ValueError):
    """A ``run.chunks.jsonl`` that cannot be read (``where:line``: the problem)."""


@dataclass
class PageInputs:
    """What the page shows beyond the summary.

    Attributes:
        rankings_a, rankings_b: query id -> the row's ranked chunks (``run.chunks.jsonl``
            entries: ``rank``, ``path``, ``start_line``, ``end_line``, ``symbol``,
            ``category``, ``score``, ``scores``), in rank order; empty for a row logged
            before the file existed.
        queries: query id -> its text.
        read_lines_a, read_lines_b: ``(path, start, end) -> lines`` of each row's corpus
            (1-based, inclusive), or None when the text is not available on this machine;
            each side reads its own row's tree (two rows may index different versions).
        relevant: ``(query id, hit) -> bool | None`` (None: not judged here).
        notes: what could not be shown, and why.
    """

    rankings_a: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rankings_b: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    queries: dict[str, str] = field(default_factory=dict)
    read_lines_a: Callable[[str, int, int], list[str] | None] = lambda p, s, e: None
    read_lines_b: Callable[[str, int, int], list[str] | None] = lambda p, s, e: None
    relevant: Callable[[str, Mapping[str, Any]], bool | None] = lambda q, h: None
    notes: list[str] = field(default_factory=list)


def parse_chunk_runs(text: str, where: str) -> dict[str, list[dict[str, Any]]]:
    """``run.chunks.jsonl`` (:func:`rag.eval.evaluate.chunk_run_jsonl`: one JSON object per
    line with ``query_id`` and ``hits``) as query id -> hits sorted by rank.

    Raises:
        DiffPageError: a line that is not JSON or lacks ``query_id`` / ``hits``.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            qid, hits = str(rec["query_id"]), list(rec["hits"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DiffPageError(f"{where}:{n}: not a chunk-run line ({exc})") from None
        out.setdefault(qid, []).extend(h for h in hits if isinstance(h, dict))
    for hits in out.values():
        hits.sort(key=lambda h: _int(h.get("rank")))
    return out


def _int(v: Any, default: int = 0) -> int:
    """``v`` as an int (a rank, a line), ``default`` when it is none (a hand-made run)."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def query_terms(query: str) -> list[str]:
    """The query's terms as BM25 reads them (:func:`rag.index.tokenize.tokenize`: lower case,
    identifiers split, stopwords out), distinct, longest first (so a longer term is marked
    before a shorter one it contains)."""
    from rag.index.tokenize import tokenize

    return sorted(dict.fromkeys(tokenize(query)), key=lambda t: (-len(t), t))


def _starts_part(text: str, i: int) -> bool:
    """Whether an identifier part starts at ``text[i]``: the text's start, after a character
    that is not a letter or digit (``_``, ``.``, a space), or a camelCase hump (``userId``)."""
    if i == 0:
        return True
    before = text[i - 1]
    return not before.isalnum() or (before.islower() and text[i].isupper())


def highlight(text: str, terms: Sequence[str]) -> str:
    """``text`` HTML-escaped, each case-insensitive occurrence of a term that starts an
    identifier part (:func:`_starts_part`: ``user`` in ``username``, ``get_user`` and
    ``getUser``, not ``id`` in ``valid``) wrapped in ``<mark>``.
    ``highlight("a<b> Foo", ["foo"])`` is ``'a&lt;b&gt; <mark>Foo</mark>'``."""
    terms = [t for t in terms if t]
    if not terms:
        return html.escape(text)
    pattern = re.compile("|".join(re.escape(t) for t in terms), re.IGNORECASE)
    out, last, pos = [], 0, 0
    while (m := pattern.search(text, pos)) is not None:
        if not _starts_part(text, m.start()):
            pos = m.start() + 1
            continue
        out += [html.escape(text[last:m.start()]), f"<mark>{html.escape(m.group(0))}</mark>"]
        last = pos = m.end()
    out.append(html.escape(text[last:]))
    return "".join(out)


def _order(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The shared positives, most-changed first (see the module docstring)."""
    rr = lambda r: 0.0 if r is None else 1.0 / r  # noqa: E731
    return sorted(summary.get("per_query", []),
                  key=lambda d: (-abs(rr(d["rank_a"]) - rr(d["rank_b"])),
                                 d.get("stage") is None, d["query_id"]))


def _fmt(v: Any) -> str:
    import math

    if isinstance(v, float) and (not math.isfinite(v) or abs(v) >= 1e300):
        return "n/a"  # MLflow's ±1.8e308 stands for infinity
    return "—" if v is None else f"{v:.4g}" if isinstance(v, float) else html.escape(str(v))


def _hit_html(hit: Mapping[str, Any], *, qid: str, terms: Sequence[str], inputs: PageInputs,
              read_lines: Callable[[str, int, int], list[str] | None], max_lines: int) -> str:
    path, start, end = str(hit.get("path", "?")), _int(hit.get("start_line")), \
        _int(hit.get("end_line"))
    where = f"{path}:{start}-{end}" if start else path
    rel = inputs.relevant(qid, hit)
    sym = f" <b>{html.escape(str(hit['symbol']))}</b>" if hit.get("symbol") else ""
    cat = f' <span class="tag">{html.escape(str(hit["category"]))}</span>' \
        if hit.get("category") else ""
    mark = ' <span class="rel" title="relevant">✓ relevant</span>' if rel else ""
    scores = hit.get("scores") if isinstance(hit.get("scores"), dict) else {}
    score_text = "score " + _fmt(hit.get("score")) + "".join(
        f" · {html.escape(str(k))} {_fmt(v)}" for k, v in scores.items() if v is not None)
    body = ""
    if start:
        lines = read_lines(path, start, min(end or start, start + max_lines - 1))
        if lines is not None:
            more = (end - start + 1) - len(lines)
            body = ("<pre>" + highlight("\n".join(lines), terms) + "</pre>"
                    + (f'<div class="muted">… {more} more lines</div>' if more > 0 else ""))
    cls = "hit relevant" if rel else "hit"
    return (f'<li class="{cls}"><div class="head">{highlight(where, terms)}{sym}{cat}{mark}'
            f'</div><div class="scores">{score_text}</div>{body}</li>')


def _side_html(title: str, hits: list[dict[str, Any]] | None, *, qid: str,
               terms: Sequence[str], inputs: PageInputs,
               read_lines: Callable[[str, int, int], list[str] | None], top: int,
               max_lines: int) -> str:
    if not hits:
        inner = '<p class="muted">no ranking recorded for this query</p>'
    else:
        inner = '<ol class="hits">' + "".join(
            _hit_html(h, qid=qid, terms=terms, inputs=inputs, read_lines=read_lines,
                      max_lines=max_lines)
            for h in hits[:top]) + "</ol>"
    return f'<div class="side"><h3>{html.escape(title)}</h3>{inner}</div>'


def render_html(summary: Mapping[str, Any], inputs: PageInputs, *, top: int = DEFAULT_HITS,
                max_lines: int = DEFAULT_LINES, max_queries: int | None = None) -> str:
    """The page (module docstring) as one HTML document.

    Args:
        summary: :func:`rag.ledger.diff.compare_rows`'s summary, with every shared positive
            under ``per_query`` (``changed_only=False``) or only the changed ones.
        inputs: the rankings, texts and judgements (:class:`PageInputs`).
        top: hits shown per side; max_lines: lines shown per hit; max_queries: queries shown
            (None: all).
    """
    from rag.eval.attribution import STAGE_HELP

    a, b = str(summary.get("run_a", "A")), str(summary.get("run_b", "B"))
    e = html.escape
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             # nothing on the page may load anything: styles are inline, there is no script
             '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
             'style-src \'unsafe-inline\'">',
             f"<title>rag diff {e(a[:8])} vs {e(b[:8])}</title>",
             "<meta name=\"viewport\" content=\"width=device-width\">",
             f"<style>{CSS}</style></head><body>",
             f"<h1>rag diff: A = row {e(a[:8])}, B = row {e(b[:8])}</h1>",
             f'<p id="counts">{summary.get("queries", 0)} shared positive queries: B wins '
             f'{summary.get("wins_b", 0)}, loses {summary.get("losses_b", 0)}, ties '
             f'{summary.get("ties", 0)}; {summary.get("changed", 0)} changed (rank, stage or '
             "answer). Rank: of the first relevant unit, before abstention; — not retrieved."
             "</p>"]
    notes = [*summary.get("notes", []), *inputs.notes]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{e(str(n))}</li>" for n in notes) + "</ul>")
    if summary.get("paired"):
        parts.append('<table class="meta" id="paired"><tr><th>metric</th><th>B − A</th>'
                     "<th>95% CI</th><th>p</th><th>p (Holm)</th></tr>" + "".join(
                         f"<tr><td>{e(r['metric'])}</td><td>{_fmt(r['delta'])}</td>"
                         f"<td>[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]</td>"
                         f"<td>{_fmt(r['p'])}</td><td>{_fmt(r['p_holm'])}</td></tr>"
                         for r in summary["paired"]) + "</table>")
    parts.append("<p class=\"muted\">stages: " + "; ".join(
        f"{e(s)} = {e(h)}" for s, h in STAGE_HELP.items()) + "</p>")
    shown = _order(summary)
    if max_queries is not None:
        if len(shown) > max_queries:
            parts.append(f'<p class="muted">the {max_queries} of {len(shown)} queries that '
                         "changed most are shown</p>")
        shown = shown[:max_queries]
    if not shown:
        parts.append('<p id="none">No shared positive query '
                     + ("changed its rank, stage or answer." if summary.get("changed_only")
                        else "to show.") + "</p>")
    for d in shown:
        qid = str(d["query_id"])
        text = inputs.queries.get(qid, "")
        terms = query_terms(text) if text else []
        rank = lambda r: "—" if r is None else str(r)  # noqa: E731
        cls = {"loss": "worse", "win": "better"}.get(d.get("outcome"), "same")
        changed = (f", {e(str(d['change']))} at {e(str(d['stage']))}"
                   if d.get("stage") else "")
        tags = "".join(f'<span class="tag">{e(t)}</span>' for t in d.get("tags", []))
        parts.append(
            f'<section class="query {cls}" id="q-{e(qid)}" data-query-id="{e(qid)}">'
            f"<h2>{e(qid)}: {e(text) if text else '<span class=muted>(no text)</span>'}</h2>"
            f"<div>{tags} rank A {rank(d['rank_a'])} → B {rank(d['rank_b'])} "
            f"({e(str(d.get('outcome', '')))}{changed}); lost at: A "
            f"{e(d.get('lost_at_a') or '?')}, B {e(d.get('lost_at_b') or '?')}; terms: "
            f"{e(', '.join(terms)) or '—'}</div>"
            '<div class="sides">'
            + _side_html(f"A (row {a[:8]})", inputs.rankings_a.get(qid), qid=qid, terms=terms,
                         inputs=inputs, read_lines=inputs.read_lines_a, top=top,
                         max_lines=max_lines)
            + _side_html(f"B (row {b[:8]})", inputs.rankings_b.get(qid), qid=qid, terms=terms,
                         inputs=inputs, read_lines=inputs.read_lines_b, top=top,
                         max_lines=max_lines)
            + "</div></section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def corpus_reader(root: Path) -> Callable[[str, int, int], list[str] | None]:
    """``(path, start, end) -> lines`` of the files under ``root`` (1-based, inclusive); None
    for a path outside ``root``, missing or unreadable. Files are read once."""
    cache: dict[str, list[str] | None] = {}
    base = root.resolve()

    def read(path: str, start: int, end: int) -> list[str] | None:
        if path not in cache:
            p = (base / path).resolve()
            try:
                p.relative_to(base)
                cache[path] = p.read_text(encoding="utf-8", errors="replace").splitlines()
            except (ValueError, OSError):
                cache[path] = None
        lines = cache[path]
        return None if lines is None else lines[max(start, 1) - 1:max(end, start)]

    return read


def golden_judge(golden_dir: Path) -> tuple[Callable[[str, Mapping[str, Any]], bool | None],
                                            str] | None:
    """``(query id, hit) -> relevant?`` by the labels in ``golden_dir`` (a chunk is relevant
    when it hits a label: :func:`rag.eval.evaluate.hits_label`, golden/README.md "Which
    chunks are relevant"), with the golden set's fingerprint; None when the golden set
    cannot be loaded here."""
    from types import SimpleNamespace

    from rag.eval.evaluate import hits_label
    from rag.eval.golden import GoldenError, load_golden

    try:
        golden = load_golden(golden_dir)
    except (GoldenError, OSError, ValueError):
        return None
    by_id = {q.id: q for q in golden.positives}

    def judge(qid: str, hit: Mapping[str, Any]) -> bool | None:
        q = by_id.get(qid)
        if q is None:
            return None
        h = SimpleNamespace(path=str(hit.get("path", "")), symbol=hit.get("symbol"),
                            chunk_id=hit.get("chunk_id"),
                            start_line=_int(hit.get("start_line")),
                            end_line=_int(hit.get("end_line")))
        return any(hits_label(h, lab) for lab in q.relevant)

    return judge, golden.fingerprint


def page_inputs(ledger: Any, run_a: str, run_b: str) -> PageInputs:
    """Read what the page shows of two rows of ``ledger`` (full run ids): each row's
    ``run.chunks.jsonl``, the query texts of row B's (else A's) per-query table, each row's
    corpus text under its own ``corpus_root`` tag and the labels under B's ``golden_dir`` tag —
    each only where it exists here; what is missing is said in ``notes``.

    Raises:
        DiffPageError: a ``run.chunks.jsonl`` that is not one.
    """
    import io

    import pandas as pd

    from rag.ledger.mlflow_store import CHUNK_RUN_JSONL, LedgerError

    inputs = PageInputs()
    for rid, attr in ((run_a, "rankings_a"), (run_b, "rankings_b")):
        try:
            text = ledger.download_text(rid, CHUNK_RUN_JSONL)
        except LedgerError:
            inputs.notes.append(f"row {rid[:8]} has no {CHUNK_RUN_JSONL} (logged before it "
                                "existed): its rankings are not shown")
            continue
        setattr(inputs, attr, parse_chunk_runs(text, f"row {rid[:8]} {CHUNK_RUN_JSONL}"))
    for rid in (run_b, run_a):
        try:
            frame = pd.read_csv(io.StringIO(ledger.download_text(rid, "per_query.csv")),
                                dtype={"query_id": str}, keep_default_na=False)
        except (LedgerError, ValueError):
            continue
        if "query" in frame.columns:
            for q, t in zip(frame["query_id"], frame["query"]):
                inputs.queries.setdefault(str(q), str(t))
    tags_a = dict(ledger.client.get_run(run_a).data.tags)
    tags = dict(ledger.client.get_run(run_b).data.tags)
    by_root: dict[str, Callable[[str, int, int], list[str] | None]] = {}
    for side, t, rid in (("a", tags_a, run_a), ("b", tags, run_b)):
        root = t.get("corpus_root")
        if root and Path(root).is_dir():
            if root not in by_root:  # one reader (and its file cache) per tree
                by_root[root] = corpus_reader(Path(root))
            setattr(inputs, f"read_lines_{side}", by_root[root])
        else:
            inputs.notes.append(f"row {rid[:8]}'s corpus ({root or 'no corpus_root tag'}) is "
                                "not on this machine: its chunk texts are not shown")
    gdir = tags.get("golden_dir")
    got = golden_judge(Path(gdir)) if gdir and Path(gdir).is_dir() else None
    if got is None:
        inputs.notes.append(f"the golden set ({gdir or 'no golden_dir tag'}) cannot be read "
                            "here: relevant hits are not marked")
    else:
        inputs.relevant = got[0]
        if tags.get("golden_fingerprint") and got[1] != tags["golden_fingerprint"]:
            inputs.notes.append(f"the labels in {gdir} changed since row {run_b[:8]} was "
                                "logged: hits are marked relevant by the labels as they are now")
    return inputs
