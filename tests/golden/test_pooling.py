"""rag golden pool (TREC-style pooling of ledger rows) and rag golden review (judging the
pooled pairs into the golden files, comments and order kept)."""

from __future__ import annotations

import argparse
import io
import json
import textwrap
from pathlib import Path

import pytest

from conftest import FIXTURE_FILES, FIXTURE_NEGATIVES, write_tree
from rag.eval.golden import load_golden
from rag.golden.pooling import (PoolError, PoolQuery, RunSource, add_pool_parser, judgement,
                              load_pool_queries, parse_run_text, pool, pool_command, read_pool)
from rag.golden.review import (GoldenEditor, ScriptKeys, add_review_parser, hit_code, review,
                        review_command, use_color)

QUERIES = textwrap.dedent("""\
    # Shop golden set: hand-labelled.
    corpus: shop
    queries:

      # ---- symbols
      - id: sym-auth-callback
        query: handleAuthCallback   # the provider's callback
        tags: [symbol]
        relevant:
          - path: src/shop/payments.py
            symbol: handleAuthCallback

      # ---- prose
      - id: prose-voucher
        query: how do customers use a voucher to pay less
        tags: [prose]
        relevant:
          - path: src/shop/cart.py
            symbol: apply_discount_code
        note: the discount helper
    # end of the positives
    """)

CANDIDATES = textwrap.dedent("""\
    # mined from the issue tracker
    candidates:
      - id: cand-refund
        query: give the customer their money back
        tags: [prose]
        source: mined:github 12
    """)

# two fake rows; docnos percent-encoded as rag writes them (a space in a section title)
RUN_A = textwrap.dedent("""\
    sym-auth-callback Q0 src/shop/payments.py#handleAuthCallback 1 0.9 a
    sym-auth-callback Q0 src/shop/cart.py 2 0.5 a
    sym-auth-callback Q0 docs/guide.md 3 0.4 a
    prose-voucher Q0 src/shop/cart.py#apply_discount_code 1 0.8 a
    prose-voucher Q0 src/shop/payments.py 2 0.3 a
    cand-refund Q0 src/shop/payments.py 1 0.7 a
    cand-refund Q0 docs/guide.md#Refunds 2 0.6 a
    """)
RUN_B = textwrap.dedent("""\
    sym-auth-callback Q0 tests/test_cart.py 2 0.6 b
    sym-auth-callback Q0 src/shop/cart.py 1 0.7 b
    prose-voucher Q0 src/shop/cart.py 1 0.9 b
    prose-voucher Q0 docs/guide.md#Shop%20guide 2 0.5 b
    prose-voucher Q0 src/shop/payments.py 3 0.2 b
    """)


@pytest.fixture
def setup(tmp_path):
    repo = write_tree(tmp_path / "repo", FIXTURE_FILES)
    golden = write_tree(tmp_path / "golden", {"queries.yaml": QUERIES,
                                               "negatives.yaml": FIXTURE_NEGATIVES})
    cands = tmp_path / "candidates.yaml"
    cands.write_text(CANDIDATES, encoding="utf-8")
    (tmp_path / "a.trec").write_text(RUN_A, encoding="utf-8")
    (tmp_path / "b.trec").write_text(RUN_B, encoding="utf-8")
    return tmp_path, repo, golden, cands


def _parse(add, argv):
    parser = argparse.ArgumentParser()
    add(parser.add_subparsers(dest="action"))
    return parser.parse_args(argv)


def _pool(tmp_path, golden, cands, *source, depth="2"):
    out = tmp_path / "pool.jsonl"
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), *source,
                                    "--queries", str(golden / "queries.yaml"),
                                    "--queries", str(cands), "--depth", depth, "--out", str(out)])
    assert pool_command(args) == 0
    return out


def _hits(records):
    return {r["query_id"]: [(h["doc"], h["best_rank"], [Path(x).stem for x in h["runs"]],
                             h["judged"]) for h in r["hits"]] for r in records}


# the union of the two rows' top 2, by hand: best rank, then rows that found it, then doc id
EXPECTED_POOL = {
    "sym-auth-callback": [
        ("src/shop/cart.py", 1, ["a", "b"], None),
        ("src/shop/payments.py#handleAuthCallback", 1, ["a"], "relevant"),
        ("tests/test_cart.py", 2, ["b"], None)],  # docs/guide.md is at rank 3: not pooled
    "prose-voucher": [
        # a whole-file hit of a path the query labels at symbol level: another chunk of it
        ("src/shop/cart.py", 1, ["b"], "not_relevant"),
        ("src/shop/cart.py#apply_discount_code", 1, ["a"], "relevant"),
        ("docs/guide.md#Shop guide", 2, ["b"], None),
        ("src/shop/payments.py", 2, ["a"], None)],
    "cand-refund": [
        ("src/shop/payments.py", 1, ["a"], None),
        ("docs/guide.md#Refunds", 2, ["a"], None)],
}


def test_pool_union_of_run_files(setup, capsys):
    tmp_path, _, golden, cands = setup
    out = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"),
                str(tmp_path / "b.trec"))
    header, records = read_pool(out)
    assert header["depth"] == 2 and header["corpus"] == "shop"
    assert [r["label"] for r in header["runs"]] == ["a.trec", "b.trec"]
    assert _hits(records) == EXPECTED_POOL
    cand = records[2]
    assert cand["origin"] == str(cands.resolve()) and cand["source"] == "mined:github 12"
    assert cand["missing_in"] == [str(tmp_path / "b.trec")]
    assert records[0]["origin"] == "queries.yaml"
    assert records[1]["hits"][2]["docno"] == "docs/guide.md#Shop%20guide"
    assert records[1]["hits"][2]["symbol"] == "Shop guide"
    assert "9 units, 6 unjudged (0 proposed labels) in 3 queries" in capsys.readouterr().out
    # the golden set is untouched; a pool never overwrites it
    assert (golden / "queries.yaml").read_text() == QUERIES
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), "--run-file",
                                    str(tmp_path / "a.trec"), "--out", str(golden / "queries.yaml")])
    assert pool_command(args) == 2
    assert "never a golden file" in capsys.readouterr().err


def test_pool_functions_and_judgement():
    q = PoolQuery(id="q", query="x", origin="queries.yaml",
                  relevant=[{"path": "a.py", "symbol": "f"}, {"path": "b.py"},
                            {"path": "c.py", "lines": [3, 9]}],
                  not_relevant=[{"path": "d.py"}])
    assert judgement("a.py#f", q.relevant, q.not_relevant) == ("relevant", "a.py#f")
    assert judgement("a.py#g", q.relevant, q.not_relevant) == (None, None)
    assert judgement("a.py", q.relevant, q.not_relevant) == ("not_relevant", "a.py#f")
    assert judgement("b.py#anything", q.relevant, q.not_relevant) == ("relevant", "b.py")
    assert judgement("c.py#L3-9", q.relevant, q.not_relevant) == ("relevant", "c.py#L3-9")
    assert judgement("d.py#h", q.relevant, q.not_relevant) == ("not_relevant", "d.py")
    assert judgement("e.py", q.relevant, q.not_relevant) == (None, None)
    runs = [RunSource("r1", "r1", parse_run_text("q Q0 a.py#f 1 1 t\nq Q0 e.py 2 0.5 t\n", "r1")),
            RunSource("r2", "r2", {"q": ["e.py", "c.py#L3-9", "x.py"]})]
    (rec,) = pool([q], runs, depth=2)
    assert [(h["doc"], h["best_rank"], h["runs"], h["lines"]) for h in rec["hits"]] == [
        ("e.py", 1, ["r1", "r2"], None), ("a.py#f", 1, ["r1"], None),
        ("c.py#L3-9", 2, ["r2"], [3, 9])]
    with pytest.raises(PoolError, match="r:1: a TREC run line has 6 fields"):
        parse_run_text("q Q0 a.py 1\n", "r")
    with pytest.raises(PoolError, match="depth must be >= 1"):
        pool([q], runs, depth=0)


@pytest.mark.slow
def test_pool_from_a_sqlite_mlflow_sweep(setup, capsys):
    from mlflow.tracking import MlflowClient

    tmp_path, repo, golden, cands = setup
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("rag-shop", artifact_location=(tmp_path / "art").as_uri())
    ids = []
    for name, text, sweep in (("a", RUN_A, "sw1"), ("b", RUN_B, "sw1"), ("c", RUN_B, "other")):
        run = client.create_run(exp, run_name=name, tags={
            "sweep_id": sweep, "sweep_job": f"job-{name}", "corpus": "shop",
            "corpus_root": str(repo)})
        client.log_text(run.info.run_id, text, "run.trec")
        client.set_terminated(run.info.run_id, status="FINISHED")
        ids.append(run.info.run_id)
    out = _pool(tmp_path, golden, cands, "--sweep", "sw1", "--tracking-uri", uri)
    header, records = read_pool(out)
    assert [r["id"] for r in header["runs"]] == ids[:2]
    assert [r["label"] for r in header["runs"]] == ["job-a", "job-b"]
    assert header["corpus_root"] == str(repo)
    names = {ids[0]: "a", ids[1]: "b"}
    got = {q: [(d, r, [names[x] for x in runs], j) for d, r, runs, j in hits]
           for q, hits in _hits(records).items()}
    assert got == EXPECTED_POOL
    # --runs takes unique prefixes too
    out = _pool(tmp_path, golden, cands, "--runs", ids[0][:10], ids[1],
                "--tracking-uri", uri)
    assert [r["id"] for r in read_pool(out)[0]["runs"]] == ids[:2]
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), "--sweep", "nope",
                                    "--tracking-uri", uri, "--out", str(tmp_path / "p.jsonl")])
    assert pool_command(args) == 2
    assert "no finished ledger row is tagged sweep_id='nope'" in capsys.readouterr().err


# the golden files after the scripted sessions below: comments, blank lines and key order
# kept; judgements appended where they belong
AFTER_QUERIES = textwrap.dedent("""\
    # Shop golden set: hand-labelled.
    corpus: shop
    queries:

      # ---- symbols
      - id: sym-auth-callback
        query: handleAuthCallback in payments # the provider's callback
        tags: [symbol]
        relevant:
          - path: src/shop/payments.py
            symbol: handleAuthCallback
          - path: tests/test_cart.py
            source: review:pool
        not_relevant:
          - path: src/shop/cart.py
            source: review:pool

      # ---- prose
      - id: prose-voucher
        query: how do customers use a voucher to pay less
        tags: [prose]
        relevant:
          - path: src/shop/cart.py
            symbol: apply_discount_code
        not_relevant:
          - path: src/shop/payments.py
            source: review:pool
        note: the discount helper

      - id: cand-refund
        query: give the customer their money back
        tags: [prose]
        source: mined:github 12
        relevant:
          - path: docs/guide.md
            symbol: Refunds
            source: review:pool
        not_relevant:
          - path: src/shop/payments.py
            source: review:pool
    # end of the positives
    """)

AFTER_CANDIDATES = textwrap.dedent("""\
    # mined from the issue tracker
    candidates:
      - id: cand-refund
        query: give the customer their money back
        tags: [prose]
        source: mined:github 12
        not_relevant:
          - path: src/shop/payments.py
            source: review:pool
    """)


def _review(tmp_path, golden, pool_file, repo, script: str, *, color="never", extra=()):
    sfile = tmp_path / "keys.txt"
    sfile.write_text(script, encoding="utf-8")
    args = _parse(add_review_parser, ["review", "--pool", str(pool_file), "--golden", str(golden),
                                      "--corpus-root", str(repo), "--script", str(sfile),
                                      "--color", color, *extra])
    out = io.StringIO()
    rc = review_command(args, stdout=out)
    return rc, out.getvalue()


def test_scripted_review_writes_golden_files_and_resumes(setup, capsys):
    tmp_path, repo, golden, cands = setup
    pool_file = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"),
                      str(tmp_path / "b.trec"))
    capsys.readouterr()
    rc, out = _review(tmp_path, golden, pool_file, repo, textwrap.dedent("""\
        n
        # a comment line is ignored
        e handleAuthCallback in payments
        y
        s
        n
        n
        q
        y
        """))
    assert rc == 0, out
    assert out.startswith("6 unjudged pair(s)")
    # the hit's code, plain (not a terminal): the file from its first line
    assert "[1/6] sym-auth-callback (queries.yaml)" in out
    assert "  hit: src/shop/cart.py  best rank 1, found by 2/2 ranking(s): a.trec, b.trec" in out
    assert "  1 | \"\"\"Shopping cart.\"\"\"" in out
    # the query's terms, and the lines holding them (* in the gutter)
    assert "  terms: handleauthcallback (absent)" in out
    assert "\x1b[" not in out
    # the edit shows the same pair again, with the new text
    assert "  query: handleAuthCallback in payments\n" in out
    assert "[5/6] cand-refund (candidate from candidates.yaml; source: mined:github 12)" in out
    assert ("judged 4 pair(s) (1 relevant, 3 not relevant), skipped 1, edited 1 query text(s); "
            "2 left for the next session") in out
    # the candidate's "not relevant" waits in its own file until its first "y"
    assert cands.read_text() == AFTER_CANDIDATES
    load_golden(golden)

    # a second session skips every judged pair: the skipped one and the last are left
    rc, out = _review(tmp_path, golden, pool_file, repo, "s\ny\n")
    assert rc == 0, out
    assert out.startswith("2 unjudged pair(s)")
    assert "[1/2] prose-voucher (queries.yaml)" in out
    assert "  hit: docs/guide.md#Shop guide  best rank 2" in out
    assert "docs/guide.md:1-4" in out  # the section's lines, found by chunking the file
    assert "[2/2] cand-refund" in out and "docs/guide.md:9-11" in out
    assert (golden / "queries.yaml").read_text() == AFTER_QUERIES
    # its first y moved the candidate, with its not-relevant judgement, out of its file
    assert cands.read_text() == "# mined from the issue tracker\ncandidates: []\n"
    g = load_golden(golden)
    cand = next(q for q in g.positives if q.id == "cand-refund")
    assert cand.source == "mined:github 12"
    assert [lab.doc_key for lab in cand.relevant] == ["docs/guide.md#Refunds"]
    assert [lab.doc_key for lab in cand.not_relevant] == ["src/shop/payments.py"]

    # a third: only the twice-skipped pair is left; the end of a script quits
    rc, out = _review(tmp_path, golden, pool_file, repo, "")
    assert rc == 0 and out.startswith("1 unjudged pair(s)")
    assert (golden / "queries.yaml").read_text() == AFTER_QUERIES


def test_a_named_reviewer_lands_in_each_label_source(setup, capsys):
    tmp_path, repo, golden, cands = setup
    pool_file = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"),
                      str(tmp_path / "b.trec"))
    capsys.readouterr()
    rc, out = _review(tmp_path, golden, pool_file, repo, "n\ny\nq\n",
                      extra=("--reviewer", "agent:helper-1"))
    assert rc == 0, out
    g = load_golden(golden)
    q = next(q for q in g.positives if q.id == "sym-auth-callback")
    # the first pair (cart.py) judged not relevant, the second (tests/test_cart.py) relevant
    assert [(lab.doc_key, lab.source) for lab in q.not_relevant] == [
        ("src/shop/cart.py", "review:pool by agent:helper-1")]
    assert ("tests/test_cart.py", "review:pool by agent:helper-1") in [
        (lab.doc_key, lab.source) for lab in q.relevant]
    # rag golden check counts both kinds of label, and says how many of each
    from rag.app.cli import main

    n_rel = sum(len(x.relevant) for x in g.positives)
    n_not = sum(len(x.not_relevant) for x in g.positives)
    assert n_not == 1
    main(["golden", "check", "--path", str(repo), "--golden", str(golden)])
    assert (f"{len(g.positives)} queries, {n_rel + 1} labels ({n_rel} relevant, 1 not_relevant) "
            "checked against") in capsys.readouterr().out
    # a name that would not make a well-formed source is refused before anything is written
    before = (golden / "queries.yaml").read_text()
    rc, out = _review(tmp_path, golden, pool_file, repo, "n\n", extra=("--reviewer", "two words"))
    assert rc == 2
    assert "--reviewer 'two words': one word" in capsys.readouterr().err
    assert (golden / "queries.yaml").read_text() == before


def test_script_errors_and_undo(setup, capsys):
    tmp_path, repo, golden, cands = setup
    pool_file = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"),
                      str(tmp_path / "b.trec"))
    capsys.readouterr()
    before = (golden / "queries.yaml").read_text()
    rc, _ = _review(tmp_path, golden, pool_file, repo, "n\nmaybe\ny\nn because\n")
    assert rc == 2
    err = capsys.readouterr().err
    # every bad line named, and nothing judged: not even the good line before them
    assert "keys.txt:2: unknown key 'maybe';" in err and "keys.txt:4: unknown key 'n because'" in err
    assert "nothing was judged" in err
    assert (golden / "queries.yaml").read_text() == before
    # a write that would break the golden set is undone (here: a source the schema refuses)
    cands.write_text(CANDIDATES.replace("mined:github 12", "somewhere"), encoding="utf-8")
    before = (golden / "queries.yaml").read_text()
    rc, _ = _review(tmp_path, golden, pool_file, repo, "s\ns\ns\ns\ny\n")
    assert rc == 2
    assert "the write was undone" in capsys.readouterr().err
    assert (golden / "queries.yaml").read_text() == before


def test_a_mined_candidate_moves_without_its_per_source_keys(setup, capsys):
    """A candidate as `rag golden mine` writes it (kind, leakage, leakage_masked beside the
    queries.yaml keys) moves into queries.yaml at its first y: the miner's keys are dropped
    (queries.yaml refuses unknown keys: the write used to be undone and the session stopped)."""
    tmp_path, repo, golden, cands = setup
    cands.write_text(textwrap.dedent("""\
        candidates:
        - id: doc-refund
          query: Give the customer their money back.
          source: mined:docstring
          tags: [mined_docstring]
          types: [source]
          relevant:
          - path: src/shop/payments.py
          note: function docstring summary
          kind: function
          leakage: 1.0
          leakage_masked: 0.5
          commit: 0123abcd
        """), encoding="utf-8")
    run = tmp_path / "c.trec"
    run.write_text("doc-refund Q0 src/shop/payments.py 1 0.7 c\n"
                   "doc-refund Q0 docs/guide.md#Refunds 2 0.6 c\n", encoding="utf-8")
    out = tmp_path / "pool.jsonl"
    assert pool_command(_parse(add_pool_parser, [
        "pool", "--golden", str(golden), "--run-file", str(run), "--queries", str(cands),
        "--out", str(out)])) == 0
    # the candidate's own label comes first, a proposal (also ranked 1st by the run)
    rc, text = _review(tmp_path, golden, out, repo, "y\nq\n")
    assert rc == 0, text
    assert "  hit: src/shop/payments.py  proposed by the miner; best rank 1" in text
    assert "judged 1 pair(s) (1 relevant, 0 not relevant)" in text
    moved = (golden / "queries.yaml").read_text().split("- id: doc-refund\n")[1]
    # moved, not copied: only the judged label, in the relevant list's place
    assert moved == ("    query: Give the customer their money back.\n"
                     "    source: mined:docstring\n"
                     "    tags: [mined_docstring]\n"
                     "    types: [source]\n"
                     "    relevant:\n"
                     "      - path: src/shop/payments.py\n"
                     "        source: mined:docstring\n"
                     "    note: function docstring summary\n"
                     "# end of the positives\n")
    assert "doc-refund" not in cands.read_text()
    # the run's other hit is still to judge, now against queries.yaml
    rc, text = _review(tmp_path, golden, out, repo, "n\n")
    assert "1 unjudged pair(s)" in text and "doc-refund (queries.yaml" in text
    assert "not_relevant:\n      - path: docs/guide.md\n        symbol: Refunds" in \
        (golden / "queries.yaml").read_text()
    g = load_golden(golden)
    q = next(q for q in g.positives if q.id == "doc-refund")
    assert (q.source, q.tags, q.types) == ("mined:docstring", ("mined_docstring",), ("source",))


def test_y_with_a_unit_narrows_a_whole_file_hit(setup, capsys):
    """A pool's new hits are whole files (a run names unlabelled chunks by path); 'y SYMBOL'
    or 'y L<a>-<b>' labels only that part, and the rest of the file then counts as judged."""
    tmp_path, repo, golden, cands = setup
    pool_file = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"),
                      str(tmp_path / "b.trec"))
    capsys.readouterr()
    # pending, in pool order: sym-auth-callback: cart.py, tests/test_cart.py;
    # prose-voucher: docs/guide.md#Shop guide, payments.py; cand-refund: payments.py, ...
    rc, out = _review(tmp_path, golden, pool_file, repo, textwrap.dedent("""\
        y apply_discount_code
        y no_such_function
        y Shop guide
        y L9-11
        q
        """))
    # a script's verdict that names a unit the hit lacks is not applied: exit 1, the rest saved
    assert rc == 1, out
    assert "2 'y UNIT' verdict(s) of the script could not be applied" in \
        capsys.readouterr().err
    assert "not judged: 'no_such_function' is not a symbol of tests/test_cart.py; skipped" in out
    assert "y Shop guide" in out and "not judged: docs/guide.md#Shop guide is not a whole-file hit" in out
    assert "judged 2 pair(s) (2 relevant, 0 not relevant), skipped 2" in out
    g = load_golden(golden)
    by = {q.id: q for q in g.positives}
    assert [lab.doc_key for lab in by["sym-auth-callback"].relevant] == [
        "src/shop/payments.py#handleAuthCallback", "src/shop/cart.py#apply_discount_code"]
    assert [lab.doc_key for lab in by["prose-voucher"].relevant] == [
        "src/shop/cart.py#apply_discount_code", "src/shop/payments.py#L9-11"]
    # the narrowed files are judged now (the rest of each counts as not relevant): a new
    # session starts at the pairs left
    rc, out = _review(tmp_path, golden, pool_file, repo, "q\n")
    assert out.startswith("4 unjudged pair(s)")
    # a span past the end of the file is refused
    from rag.golden.review import narrowed_doc
    assert narrowed_doc(repo, "tests/test_cart.py", "L1-3") == (
        None, "L1-3 is not a span of tests/test_cart.py (1 <= start <= end <= 2)")
    assert narrowed_doc(repo, "tests/test_cart.py", "test_add_item") == (
        "tests/test_cart.py#test_add_item", None)


def test_rich_or_plain_output(setup):
    tmp_path, repo, golden, cands = setup
    pool_file = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"),
                      str(tmp_path / "b.trec"))

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert use_color("auto", Tty()) is True
    assert use_color("auto", io.StringIO()) is False
    assert use_color("never", Tty()) is False and use_color("always", io.StringIO()) is True
    for color in (True, False):
        out = io.StringIO()
        review(pool_file, golden, repo, ScriptKeys(iter(["q"]), "s"), out, color=color)
        text = out.getvalue()
        assert ("\x1b[" in text) is color
        assert "Shopping cart." in text and "sym-auth-callback" in text
    # through the command: --color auto follows the output stream
    sfile = tmp_path / "q.txt"
    sfile.write_text("q\n")
    args = _parse(add_review_parser, ["review", "--pool", str(pool_file), "--golden",
                                      str(golden), "--corpus-root", str(repo), "--script",
                                      str(sfile)])
    tty = Tty()
    assert review_command(args, stdout=tty) == 0 and "\x1b[" in tty.getvalue()
    plain = io.StringIO()
    assert review_command(args, stdout=plain) == 0 and "\x1b[" not in plain.getvalue()


def test_hit_code_symbol_span_and_missing(setup):
    _, repo, _, _ = setup
    code = hit_code(repo, "src/shop/cart.py#Cart.total_price")
    assert (code.start, code.end, code.first) == (14, 16, 11)  # 3 lines of context above
    assert code.lines[code.start - code.first].strip() == "def total_price(self):"
    span = hit_code(repo, "src/shop/cart.py#L19-20", context=0)
    assert (span.start, span.end, len(span.lines)) == (19, 20, 2)
    # a whole-file unit with the ranked chunk's lines: those lines, not the file's top
    chunk = hit_code(repo, "src/shop/cart.py", lines=(14, 16), context=1)
    assert (chunk.first, chunk.start, chunk.end, len(chunk.lines)) == (13, 14, 16, 5)
    short = hit_code(repo, "src/shop/cart.py", max_lines=3)
    assert short.total > 3 and len(short.lines) == 3
    gone = hit_code(repo, "src/shop/cart.py#nope")
    assert "not found" in gone.note and gone.start == 1


def test_whole_file_not_relevant_replaces_narrower_labels(tmp_path):
    golden = write_tree(tmp_path / "g", {
        "queries.yaml": textwrap.dedent("""\
            queries:
              - id: q1
                query: something
                relevant:
                  - path: a.py
                not_relevant:
                  - path: b.py
                    symbol: f  # this one only

              - id: q2
                query: other
                relevant:
                  - path: c.py
            """),
        "negatives.yaml": "negatives: []\n"})
    ed = GoldenEditor(golden)
    assert ed.judged("q1", "queries.yaml", "b.py") is None
    ed.judge("q1", "queries.yaml", "b.py", relevant=False)
    assert ed.replaced == ["b.py#f"]
    assert (golden / "queries.yaml").read_text() == textwrap.dedent("""\
        queries:
          - id: q1
            query: something
            relevant:
              - path: a.py
            not_relevant:
              - path: b.py

          - id: q2
            query: other
            relevant:
              - path: c.py
        """)
    load_golden(golden)


def test_load_pool_queries_candidates_and_errors(setup):
    tmp_path, _, golden, cands = setup
    warned = []
    bad = tmp_path / "bad.yaml"
    bad.write_text("candidates:\n  - id: neg-football\n    query: the cup\n"
                   "  - id: sym-auth-callback\n    query: dup\n")
    qs = load_pool_queries(golden, [golden / "queries.yaml", cands, bad], warn=warned.append)
    assert [q.id for q in qs] == ["sym-auth-callback", "prose-voucher", "cand-refund"]
    assert len(warned) == 2 and "negative" in warned[0] and "already read" in warned[1]
    bad.write_text("candidates:\n  - id: x\n")
    with pytest.raises(PoolError, match="needs an 'id' and a non-empty 'query'"):
        load_pool_queries(golden, [bad])
    bad.write_text("nothing: here\n")
    with pytest.raises(PoolError, match="'queries:' or 'candidates:'"):
        load_pool_queries(golden, [bad])
    # a candidate's labels edited by hand into something else: named, not dropped
    for labels, why in [("relevant: notalist", "relevant: must be a list of labels"),
                        ("relevant: [{symbol: f}]", "relevant: label 1 ({'symbol': 'f'}) needs a 'path'"),
                        ("not_relevant: [{path: a.py, lines: [3]}]",
                         "not_relevant: label 1 ({'path': 'a.py', 'lines': [3]}) needs")]:
        bad.write_text(f"candidates:\n  - id: c1\n    query: the refund\n    {labels}\n")
        with pytest.raises(PoolError) as err:
            load_pool_queries(golden, [bad])
        assert str(err.value).startswith(f"{bad.resolve()}: candidate 'c1': {why}"), str(err.value)
    (tmp_path / "notpool.jsonl").write_text(json.dumps({"x": 1}) + "\n")
    with pytest.raises(PoolError, match="not a pool file"):
        read_pool(tmp_path / "notpool.jsonl")


def test_review_refuses_another_corpus_and_hits_not_in_the_corpus(setup, capsys):
    """A pool of another corpus is refused in one line; a `y` on a hit whose file is not in
    the corpus is not written (the label would not load), and the set still loads."""
    tmp_path, repo, golden, cands = setup
    (tmp_path / "gone.trec").write_text("sym-auth-callback Q0 src/shop/nope.py 1 9.0 r\n",
                                        encoding="utf-8")
    pool_file = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "gone.trec"))
    capsys.readouterr()
    before = (golden / "queries.yaml").read_text()
    rc, out = _review(tmp_path, golden, pool_file, repo, "y\n")
    assert rc == 0
    assert "not judged: src/shop/nope.py is not in the corpus" in out
    assert (golden / "queries.yaml").read_text() == before
    load_golden(golden)
    other = write_tree(tmp_path / "other", {
        "queries.yaml": QUERIES.replace("corpus: shop", "corpus: flask-3.1.3"),
        "negatives.yaml": FIXTURE_NEGATIVES})
    rc, _ = _review(tmp_path, other, pool_file, repo, "y\n")
    assert rc == 2
    assert "labels corpus 'flask-3.1.3'" in capsys.readouterr().err


def test_chunk_units_and_a_chunk_level_row(setup, capsys):
    """A row's run.chunks.jsonl pools each chunk at its own unit (its symbol, else its lines),
    a unit once; its lines let a span label judge a symbol chunk it overlaps."""
    from mlflow.tracking import MlflowClient

    from rag.golden.pooling import chunk_unit, parse_chunk_run

    assert chunk_unit("a.py", "f", 3, 9) == "a.py#f"
    assert chunk_unit("a.py", "<module>", 1, 4) == "a.py#L1-4"
    assert chunk_unit("a.md", None, 10, 12) == "a.md#L10-12"
    assert chunk_unit("a.py", None, 0, 0) == "a.py"
    text = "\n".join(json.dumps(r) for r in [
        {"query_id": "prose-voucher", "query": "q", "hits": [
            {"rank": 2, "path": "src/shop/cart.py", "start_line": 1, "end_line": 3,
             "symbol": "<module>"},
            {"rank": 1, "path": "src/shop/payments.py", "start_line": 5, "end_line": 12,
             "symbol": "refund"},
            {"rank": 3, "path": "src/shop/payments.py", "start_line": 13, "end_line": 20,
             "symbol": "refund"}]}]) + "\n"
    ranking, lines = parse_chunk_run(text, "t")
    assert ranking == {"prose-voucher": ["src/shop/payments.py#refund", "src/shop/cart.py#L1-3"]}
    assert lines == {"src/shop/payments.py#refund": (5, 12), "src/shop/cart.py#L1-3": (1, 3)}
    with pytest.raises(PoolError, match="t:1: not a chunk-run line"):
        parse_chunk_run('{"hits": []}\n', "t")
    # a span label overlapping the chunk's lines judges it; one beside them does not
    assert judgement("src/shop/payments.py#refund", [{"path": "src/shop/payments.py",
                                                      "lines": [11, 14]}], [],
                     lines=(5, 12)) == ("relevant", "src/shop/payments.py#L11-14")
    assert judgement("src/shop/payments.py#refund", [{"path": "src/shop/payments.py",
                                                      "lines": [13, 14]}], [],
                     lines=(5, 12)) == (None, None)
    # through the ledger: the chunk-level artifact wins over run.trec
    tmp_path, repo, golden, cands = setup
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("rag-shop", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp, run_name="c", tags={"sweep_id": "sw", "corpus": "shop",
                                                      "corpus_root": str(repo)})
    client.log_text(run.info.run_id, RUN_B, "run.trec.txt")
    client.log_text(run.info.run_id, text, "run.chunks.jsonl")
    client.set_terminated(run.info.run_id, status="FINISHED")
    out = _pool(tmp_path, golden, cands, "--sweep", "sw", "--tracking-uri", uri)
    _, records = read_pool(out)
    voucher = next(r for r in records if r["query_id"] == "prose-voucher")
    assert [(h["doc"], h["chunk_lines"], h["judged"]) for h in voucher["hits"]] == [
        ("src/shop/payments.py#refund", [5, 12], None),
        ("src/shop/cart.py#L1-3", [1, 3], None)]


def test_proposals_come_first_and_rag_ranks_what_no_row_did(setup, capsys):
    """A candidate's own labels are proposals (never judgements) ahead of the rankings' hits;
    the queries no row ranked (every candidate) are ranked by the ranker pool_command is
    given, over --path."""
    tmp_path, repo, golden, cands = setup
    cands.write_text(CANDIDATES + "    relevant:\n      - path: src/shop/payments.py\n"
                     "        symbol: refund\n    not_relevant:\n      - path: docs/guide.md\n",
                     encoding="utf-8")
    calls = []

    def rank(root, queries, *, modes, depth, overrides):
        calls.append((root, [q.id for q in queries], modes, depth, overrides))
        return [RunSource(id="rag:bm25", label="rag bm25", ranking={
            "cand-refund": ["src/shop/cart.py#L1-3", "docs/guide.md", "src/shop/payments.py#refund"]},
            lines={"src/shop/cart.py#L1-3": (1, 3)})]

    out = tmp_path / "p.jsonl"
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), "--run-file",
                                    str(tmp_path / "b.trec"), "--queries", str(golden / "queries.yaml"),
                                    str(cands), "--path", str(repo), "--modes", "bm25",
                                    "--depth", "3", "--out", str(out), "search.top_k=5"])
    assert pool_command(args, rank=rank) == 0
    # b.trec ranks both golden queries, not the candidate: only it goes to the ranker
    assert calls == [(repo, ["cand-refund"], ["bm25"], 3, ["search.top_k=5"])]
    header, records = read_pool(out)
    assert [r["id"] for r in header["runs"]] == [str(tmp_path / "b.trec"), "rag:bm25"]
    cand = next(r for r in records if r["query_id"] == "cand-refund")
    assert [(h["doc"], h["proposed"], h["runs"], h["judged"]) for h in cand["hits"]] == [
        # the proposal, found by the ranker too (rank 3)
        ("src/shop/payments.py#refund", True, ["rag:bm25"], None),
        ("src/shop/cart.py#L1-3", False, ["rag:bm25"], None),
        # judged by the candidate's not_relevant (a review's n)
        ("docs/guide.md", False, ["rag:bm25"], "not_relevant")]
    assert "1 proposed labels" in capsys.readouterr().out
    # nothing to rank with: one line
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), "--out", str(out)])
    assert pool_command(args) == 2
    assert "nothing ranks the queries: give --path DIR" in capsys.readouterr().err


def test_several_queries_files_after_one_flag(setup):
    tmp_path, repo, golden, cands = setup
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), "--queries",
                                    str(golden / "queries.yaml"), str(cands)])
    assert args.queries == [str(golden / "queries.yaml"), str(cands)]


def test_a_candidates_file_edited_into_invalid_yaml_names_its_line(setup, capsys):
    tmp_path, repo, golden, cands = setup
    cands.write_text(CANDIDATES + "  - id: [broken\n", encoding="utf-8")
    out = tmp_path / "never.jsonl"
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), "--run-file",
                                    str(tmp_path / "a.trec"), "--queries", str(cands),
                                    "--out", str(out)])
    assert pool_command(args) == 2
    err = capsys.readouterr().err
    assert f"{cands}:8: not valid YAML" in err and "nothing was pooled" in err
    assert not out.exists()
    # review reads the candidates file only when a pair needs it: the same line, nothing written
    pool_file = _pool(tmp_path, golden, _fresh_cands(tmp_path),
                      "--run-file", str(tmp_path / "a.trec"))
    bad = tmp_path / "fresh.yaml"
    bad.write_text(bad.read_text() + "  - id: [broken\n", encoding="utf-8")
    before = (golden / "queries.yaml").read_text()
    rc, _ = _review(tmp_path, golden, pool_file, repo, "s\ns\ns\ns\ns\nn\n")
    assert rc == 2
    assert f"{bad}:8: not valid YAML" in capsys.readouterr().err
    assert (golden / "queries.yaml").read_text() == before


def _fresh_cands(tmp_path):
    f = tmp_path / "fresh.yaml"
    f.write_text(CANDIDATES, encoding="utf-8")
    return f


def test_pool_and_review_refuse_malformed_input_in_one_line(setup, capsys):
    tmp_path, repo, golden, cands = setup
    other = tmp_path / "more.yaml"
    other.write_text("queries:\n  - {id: extra-q, query: where, relevant: [{path: a.py}]}\n")
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), "--run-file",
                                    str(tmp_path / "a.trec"), "--queries", str(other)])
    assert pool_command(args) == 2
    assert "a queries file other than" in capsys.readouterr().err
    empty = tmp_path / "empty.yaml"
    empty.write_text("candidates: []\n")
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), "--path", str(repo),
                                    "--queries", str(empty)])
    assert pool_command(args, rank=lambda *a, **k: []) == 2
    assert "no query to pool in" in capsys.readouterr().err
    args = _parse(add_pool_parser, ["pool", "--golden", str(golden), "--run-file",
                                    str(tmp_path / "a.trec"), "--out", str(tmp_path), "--depth", "2"])
    assert pool_command(args) == 2 and "is a directory" in capsys.readouterr().err
    # a pool file edited into garbage: one line, nothing judged
    good = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"))
    lines = good.read_text().splitlines()
    for bad in ('{"query_id": "q", "query": "x", "origin": "queries.yaml", "hits": 5}',
                '{"query_id": "q", "query": "x", "origin": "queries.yaml", "hits": [{"doc": 7}]}'):
        good.write_text("\n".join([lines[0], bad]) + "\n")
        rc, _ = _review(tmp_path, golden, good, repo, "y\n")
        assert rc == 2
        assert f"{good}:2:" in capsys.readouterr().err
    # a label whose lines are not two integers is left out: it judges nothing, never crashes
    from rag.golden.pooling import well_formed_labels
    assert well_formed_labels([{"path": "a.py", "lines": ["a", 2]}, {"path": "b.py"}]) == [{"path": "b.py"}]


def test_a_judgement_lands_in_one_query_and_never_adds_a_problem(tmp_path):
    """An anchored list two queries share (&shared / *shared) is unshared before a label is
    appended; a set that does not load may still take judgements that add no new problem."""
    repo = write_tree(tmp_path / "repo", FIXTURE_FILES)
    golden = write_tree(tmp_path / "g", {"negatives.yaml": FIXTURE_NEGATIVES, "queries.yaml": (
        "corpus: shop\nqueries:\n"
        "  - id: qa\n    query: a\n    relevant: &shared\n      - path: src/shop/cart.py\n"
        "  - id: qb\n    query: b\n    relevant: *shared\n")})
    ed = GoldenEditor(golden)
    ed.judge("qb", "queries.yaml", "src/shop/payments.py#refund_order", relevant=True)
    g = load_golden(golden)
    by = {q.id: [lab.doc_key for lab in q.relevant] for q in g.positives}
    assert by == {"qa": ["src/shop/cart.py"],
                  "qb": ["src/shop/cart.py", "src/shop/payments.py#refund_order"]}
    # a set with a problem already (an unknown key): a judgement adding none is written, one
    # adding another (cart.py both relevant and not relevant) is undone
    text = (golden / "queries.yaml").read_text() + "  - id: qc\n    query: c\n    oops: 1\n" \
        "    relevant:\n      - path: docs/guide.md\n"
    (golden / "queries.yaml").write_text(text)
    ed = GoldenEditor(golden)
    assert ed.load_problem and "unknown key(s) ['oops']" in ed.load_problem
    ed.judge("qc", "queries.yaml", "src/shop/cart.py", relevant=False)
    assert "not_relevant" in (golden / "queries.yaml").read_text()
    before = (golden / "queries.yaml").read_text()
    with pytest.raises(Exception, match="the write was undone"):
        ed.judge("qc", "queries.yaml", "src/shop/cart.py", relevant=True)
    assert (golden / "queries.yaml").read_text() == before


def test_review_from_a_stdin_that_is_no_terminal_says_why_it_stopped(setup, capsys):
    tmp_path, repo, golden, cands = setup
    pool_file = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"),
                      str(tmp_path / "b.trec"))
    capsys.readouterr()
    args = _parse(add_review_parser, ["review", "--pool", str(pool_file), "--golden",
                                      str(golden), "--corpus-root", str(repo)])
    out = io.StringIO()
    # `rag golden review ... </dev/null`: an empty script; 6 pairs are left
    assert review_command(args, stdin=io.StringIO("n\n"), stdout=out) == 0
    err = capsys.readouterr().err
    assert "standard input is not a terminal" in err and "ended with 5 pair(s) left" in err
    assert "judged 1 pair(s) (0 relevant, 1 not relevant)" in out.getvalue()
