"""rag diff --html: the side-by-side page's parts by hand (highlighting, ordering, escaping,
relevance marks, what is missing said), and its rendering in headless Chromium."""

from __future__ import annotations

import json
import re

import pytest

from rag.ledger.diff_html import (DiffPageError, PageInputs, corpus_reader, highlight,
                                  parse_chunk_runs, query_terms, render_html)
from rag.ledger.screenshots import capture, chromium_binary


def test_highlight_marks_terms_that_start_an_identifier_part_and_escapes_the_rest():
    assert highlight("a<b> Foo", ["foo"]) == "a&lt;b&gt; <mark>Foo</mark>"
    # username, get_user, getUser: marked; "valid" holds "id" mid-word: not
    assert highlight("username get_user getUser valid", ["user", "id"]) == \
        "<mark>user</mark>name get_<mark>user</mark> get<mark>User</mark> valid"
    assert highlight("x & y", []) == "x &amp; y"
    # a longer term first, so "session" is not split by "sess"
    assert highlight("session", query_terms("sess session")) == "<mark>session</mark>"


def test_query_terms_are_bm25s_longest_first():
    assert query_terms("Where is the session cookie set?")[:2] == ["session", "cookie"]


def test_chunk_runs_are_read_by_rank_and_a_bad_line_is_named():
    text = "\n".join([json.dumps({"query_id": "q1", "hits": [{"rank": 2, "path": "b.py"},
                                                            {"rank": 1, "path": "a.py"}]}),
                      "", json.dumps({"query_id": 7, "hits": []})])
    assert parse_chunk_runs(text, "run") == {"q1": [{"rank": 1, "path": "a.py"},
                                                    {"rank": 2, "path": "b.py"}], "7": []}
    with pytest.raises(DiffPageError, match=r"^row x run.chunks.jsonl:2: not a chunk-run line"):
        parse_chunk_runs('{"query_id": "q", "hits": []}\n{nope', "row x run.chunks.jsonl")


def test_corpus_reader_reads_lines_and_never_outside_the_root(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.py").write_text("one\ntwo\nthree\n")
    (tmp_path / "secret.txt").write_text("no\n")
    read = corpus_reader(tmp_path / "c")
    assert read("a.py", 2, 3) == ["two", "three"]
    assert read("../secret.txt", 1, 1) is None and read("missing.py", 1, 2) is None


def summary_of(*rows):
    per_query = [{"query_id": q, "tags": ["prose"], "rank_a": ra, "rank_b": rb,
                  "outcome": "tie" if ra == rb else ("win" if rb is not None and
                                                     (ra is None or rb < ra) else "loss"),
                  "lost_at_a": "returned", "lost_at_b": "fused_out" if rb is None else "returned",
                  "stage": None if ra == rb else "fusion", "change": None if ra == rb else "x"}
                 for q, ra, rb in rows]
    return {"run_a": "a" * 32, "run_b": "b" * 32, "queries": len(rows), "wins_b": 0,
            "losses_b": 1, "ties": 1, "changed": 1, "notes": ["note one"], "per_query": per_query,
            "paired": [{"metric": "mrr", "delta": -0.5, "ci_low": -1.0, "ci_high": 0.0,
                        "p": 0.5, "p_holm": 0.5}]}


def inputs_for(tmp_path):
    (tmp_path / "auth.py").write_text("def login(user):\n    return check_session(user)\n")
    hit = lambda path, rank, **kw: {"rank": rank, "path": path, "start_line": 1,  # noqa: E731
                                    "end_line": 2, "symbol": "login", "category": "source",
                                    "score": 0.5, "scores": {"bm25": 3.25, "dense": None}, **kw}
    return PageInputs(
        rankings_a={"q1": [hit("auth.py", 1)], "q2": [hit("auth.py", 1)]},
        rankings_b={"q1": [hit("other.py", 1), hit("auth.py", 2)], "q2": [hit("auth.py", 1)]},
        queries={"q1": "<script>alert(1)</script> login session", "q2": "same"},
        read_lines_a=corpus_reader(tmp_path), read_lines_b=corpus_reader(tmp_path),
        relevant=lambda q, h: h["path"] == "auth.py", notes=["the corpus is here"])


def test_the_page_lists_the_most_changed_query_first_with_both_rankings(tmp_path):
    page = render_html(summary_of(("q2", 1, 1), ("q1", 1, None)), inputs_for(tmp_path))
    # q1 lost its rank-1 answer (reciprocal rank 1 -> 0): first; q2 (unchanged) after
    assert page.index('id="q-q1"') < page.index('id="q-q2"')
    q1 = page[page.index('id="q-q1"'):page.index('id="q-q2"')]
    assert "rank A 1 → B —" in q1 and "lost at: A returned, B fused_out" in q1
    a_side, b_side = q1.split('<div class="side">')[1:3]
    assert "A (row aaaaaaaa)" in a_side and "B (row bbbbbbbb)" in b_side
    assert a_side.count("<li ") == 1 and b_side.count("<li ") == 2
    # B's relevant hit is its second, marked; the other is not
    assert re.search(r'<li class="hit">.*other\.py', b_side)
    assert re.search(r'<li class="hit relevant">.*auth\.py', b_side)
    # the chunk's own lines with the query's terms marked; scores, None ones left out
    assert "def <mark>login</mark>(user):" in q1 and "check_<mark>session</mark>(user)" in q1
    assert "score 0.5 · bm25 3.25</div>" in q1
    # the query text is escaped, never a live script; no network: a CSP, no script, no URL
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "default-src 'none'" in page and not re.search(r"(src|href)=\"https?:", page)
    assert "note one" in page and "the corpus is here" in page and 'id="paired"' in page
    # at most N queries, saying so; none: said
    few = render_html(summary_of(("q2", 1, 1), ("q1", 1, None)), inputs_for(tmp_path),
                      max_queries=1)
    assert few.count('<section class="query') == 1 and "the 1 of 2 queries" in few
    empty = render_html({**summary_of(), "changed_only": True}, inputs_for(tmp_path))
    assert "No shared positive query changed its rank, stage or answer." in empty


@pytest.mark.skipif(chromium_binary() is None,
                    reason="Debian's chromium is not installed (make sysdeps)")
def test_headless_chromium_renders_both_rankings(tmp_path):
    from rag.ledger.screenshots import text_of

    out = tmp_path / "diff.html"
    out.write_text(render_html(summary_of(("q2", 1, 1), ("q1", 1, None)), inputs_for(tmp_path)))
    png = tmp_path / "diff.png"
    dom = capture(chromium_binary(), out.as_uri(), png, profile=tmp_path / "profile",
                  budget_ms=2000, window=(1400, 900))
    assert png.stat().st_size > 10_000  # a real picture, not a blank page
    assert dom.count('<section class="query') == 2 and dom.count('<ol class="hits">') == 4
    text = text_of(dom)
    assert "A (row aaaaaaaa)" in text and "B (row bbbbbbbb)" in text and "other.py:1-2" in text


def test_hand_made_hits_with_odd_fields_still_render(tmp_path):
    text = json.dumps({"query_id": "q1", "hits": [
        {"rank": "2", "path": "a.py", "start_line": "abc", "scores": [1, 2]},
        {"rank": None, "path": "b.py", "start_line": 1, "end_line": 2,
         "score": float("inf"), "scores": {"bm25": 1.7976931348623157e308}}]})
    runs = parse_chunk_runs(text, "run")
    assert [h["path"] for h in runs["q1"]] == ["b.py", "a.py"]  # a rank that is none sorts first
    inputs = PageInputs(rankings_a=runs, rankings_b=runs, queries={"q1": "find a"})
    page = render_html(summary_of(("q1", 1, 2)), inputs)
    assert page.count("<li ") == 4 and "score n/a · bm25 n/a" in page
    assert "inf" not in page.split("<body>")[-1].replace("info", "")


def test_sweep_page_names_never_collide():
    from rag.ledger.sweep import diff_page_name

    assert diff_page_name("search.mode=bm25") == "diff/search.mode=bm25.html"
    long_a, long_b = "x=" + "a" * 130 + ",k1=0.9", "x=" + "a" * 130 + ",k1=1.2"
    names = {diff_page_name(j) for j in (long_a, long_b, "rerank.model=a/b", "rerank.model=a:b")}
    assert len(names) == 4 and all(len(n) < 150 for n in names)


def test_each_side_reads_its_own_rows_tree(tmp_path):
    """Two rows over two versions of a file: A's hit shows A's lines, B's shows B's; a row
    whose tree is gone says so and shows no text."""
    from types import SimpleNamespace

    from rag.ledger.diff_html import page_inputs
    from rag.ledger.mlflow_store import LedgerError

    old, new = tmp_path / "v1", tmp_path / "v2"
    for root, body in ((old, "def login():\n    return 'old'\n"),
                       (new, "def login():\n    return 'new'\n")):
        root.mkdir()
        (root / "auth.py").write_text(body)
    line = json.dumps({"query_id": "q1", "hits": [{"rank": 1, "path": "auth.py",
                                                   "start_line": 1, "end_line": 2}]})
    roots = {"a" * 32: str(old), "b" * 32: str(new), "c" * 32: str(tmp_path / "gone")}

    class Ledger:
        client = SimpleNamespace(get_run=lambda rid: SimpleNamespace(
            data=SimpleNamespace(tags={"corpus_root": roots[rid]})))

        def download_text(self, rid, name):
            if name == "per_query.csv":
                raise LedgerError("none")
            return line

    summary = summary_of(("q1", 1, 1))
    page = render_html(summary, page_inputs(Ledger(), "a" * 32, "b" * 32))
    a_side, b_side = page.split('<div class="side">')[1:3]
    assert "return &#x27;old" in a_side and "return &#x27;new" not in a_side
    assert "return &#x27;new" in b_side and "return &#x27;old" not in b_side
    gone = page_inputs(Ledger(), "c" * 32, "b" * 32)
    assert gone.read_lines_a("auth.py", 1, 1) is None
    assert gone.read_lines_b("auth.py", 1, 1) == ["def login():"]
    assert any(n.startswith("row cccccccc's corpus") for n in gone.notes)
