"""Loading and validating golden sets (rag/eval/golden.py)."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest

from rag.eval.golden import GoldenError, GoldenQuery, Label, NegativeQuery, load_golden

VALID_QUERIES = textwrap.dedent('''\
    corpus: demo
    queries:
      - id: q-one
        query: how are sessions signed
        tags: [prose, session]
        relevant:
          - path: src/app/sessions.py
            symbol: SecureCookieSessionInterface
            grade: 2
          - path: docs/sessions.rst
      - id: q.two_2
        query: "  url_for  "
        tags: [symbol]
        note: free text
        relevant:
          - path: src/app/helpers.py
            symbol: url_for
    ''')
VALID_NEGATIVES = textwrap.dedent('''\
    corpus: demo
    negatives:
      - id: neg-one
        query: best pizza in town
        tags: [off_topic]
        note: nothing about food
      - id: neg-two
        query: tax law in France
    ''')
PATHS = {"src/app/sessions.py", "docs/sessions.rst", "src/app/helpers.py", "a.py"}
SYMBOLS = {("src/app/sessions.py", "SecureCookieSessionInterface"),
           ("src/app/helpers.py", "url_for"), ("a.py", "f")}


def _golden(tmp_path: Path, queries: str | None, negatives: str | None) -> Path:
    d = tmp_path / "golden"
    d.mkdir(exist_ok=True)
    for name, text in (("queries.yaml", queries), ("negatives.yaml", negatives)):
        if text is not None:
            (d / name).write_text(text, encoding="utf-8")
    return d


def _problems(d: Path, **kw) -> list[str]:
    with pytest.raises(GoldenError) as info:
        load_golden(d, **kw)
    err = info.value
    # the message lists every problem after a count header
    assert str(err).startswith(f"{len(err.problems)} problem(s) in the golden set:")
    for p in err.problems:
        assert p in str(err)
    return err.problems


# --------------------------------------------------------------------------- valid


def test_valid_set_loads(tmp_path: Path):
    d = _golden(tmp_path, VALID_QUERIES, VALID_NEGATIVES)
    g = load_golden(d, corpus_paths=PATHS, corpus_symbols=SYMBOLS)
    assert g.corpus == "demo"
    assert g.directory == d
    assert [q.id for q in g.positives] == ["q-one", "q.two_2"]
    assert [q.id for q in g.negatives] == ["neg-one", "neg-two"]
    q1, q2 = g.positives
    assert q1 == GoldenQuery(
        id="q-one", query="how are sessions signed", tags=("prose", "session"),
        relevant=(Label("src/app/sessions.py", "SecureCookieSessionInterface", 2),
                  Label("docs/sessions.rst", None, 1)),
        line=3)  # '  - id: q-one' is line 3 of queries.yaml
    assert q1.qrels == {"src/app/sessions.py#SecureCookieSessionInterface": 2,
                        "docs/sessions.rst": 1}
    assert q1.symbol_paths == {"src/app/sessions.py": {"SecureCookieSessionInterface"}}
    assert q2.query == "url_for"   # stripped
    assert q2.line == 11
    assert q2.qrels == {"src/app/helpers.py#url_for": 1}
    assert g.negatives[0] == NegativeQuery(id="neg-one", query="best pizza in town",
                                           tags=("off_topic",), note="nothing about food",
                                           line=3)
    assert g.negatives[1].tags == () and g.negatives[1].note == ""
    assert g.tags == ["prose", "session", "symbol"]   # positives' tags, sorted


def test_valid_set_loads_without_corpus_checks(tmp_path: Path):
    g = load_golden(_golden(tmp_path, VALID_QUERIES, VALID_NEGATIVES))
    assert len(g.positives) == 2 and len(g.negatives) == 2


def test_fingerprint(tmp_path: Path):
    d = _golden(tmp_path, VALID_QUERIES, VALID_NEGATIVES)
    fp = load_golden(d).fingerprint
    # reference: sha256 over name, NUL, bytes of each file, queries then negatives
    h = hashlib.sha256()
    h.update(b"queries.yaml\0" + VALID_QUERIES.encode())
    h.update(b"negatives.yaml\0" + VALID_NEGATIVES.encode())
    assert fp == h.hexdigest()
    assert load_golden(d).fingerprint == fp   # stable
    (d / "negatives.yaml").write_text(VALID_NEGATIVES + "# a comment\n", encoding="utf-8")
    fp2 = load_golden(d).fingerprint
    assert fp2 != fp
    (d / "queries.yaml").write_text(VALID_QUERIES.replace("grade: 2", "grade: 3"),
                                    encoding="utf-8")
    fp3 = load_golden(d).fingerprint
    assert fp3 not in (fp, fp2)


# --------------------------------------------------------------------------- corpus checks


LABEL_QUERIES = textwrap.dedent('''\
    queries:
      - id: ghost
        query: ghost labels
        relevant:
          - path: missing.py
          - path: a.py
            symbol: nope
          - path: a.py
            symbol: f
    ''')


def test_missing_path_and_missing_symbol_both_reported_with_lines(tmp_path: Path):
    d = _golden(tmp_path, LABEL_QUERIES, "negatives: []\n")
    problems = _problems(d, corpus_paths=PATHS, corpus_symbols=SYMBOLS)
    q = d / "queries.yaml"
    assert len(problems) == 2
    # labels start at lines 5 ('- path: missing.py') and 6 ('- path: a.py' / symbol: nope)
    assert problems[0].startswith(f"{q}:5: ")
    assert "'missing.py'" in problems[0] and "not in the corpus" in problems[0]
    assert problems[1].startswith(f"{q}:6: ")
    assert "'nope'" in problems[1] and "'a.py'" in problems[1]
    # and in the one message
    with pytest.raises(GoldenError) as info:
        load_golden(d, corpus_paths=PATHS, corpus_symbols=SYMBOLS)
    msg = str(info.value)
    assert f"{q}:5:" in msg and "missing.py" in msg
    assert f"{q}:6:" in msg and "nope" in msg


def test_symbols_only_checked_when_given(tmp_path: Path):
    d = _golden(tmp_path, LABEL_QUERIES, "negatives: []\n")
    # paths only: only missing.py is wrong
    assert len(_problems(d, corpus_paths=PATHS)) == 1
    # symbols only: only 'nope' is wrong
    problems = _problems(d, corpus_symbols=SYMBOLS)
    assert len(problems) == 1 and "'nope'" in problems[0]


# --------------------------------------------------------------------------- every problem at once


ALL_BAD_QUERIES = textwrap.dedent('''\
    queries:
      - id: dup
        query: first
        relevant:
          - path: a.py
      - id: dup
        query: second
        relevant:
          - path: a.py
      - id: empty-q
        query: "   "
        relevant:
          - path: a.py
      - id: no-rel
        query: something
      - id: typo
        query: something else
        tag: [x]
        relevant:
          - path: a.py
      - id: mixed
        query: mixed labels
        relevant:
          - path: a.py
          - path: a.py
            symbol: f
      - id: ghost
        query: ghost labels
        relevant:
          - path: missing.py
          - path: a.py
            symbol: nope
    ''')
ALL_BAD_NEGATIVES = textwrap.dedent('''\
    negatives:
      - id: dup
        query: negative with a positive's id
      - id: fine
        query: fine
    ''')


def test_all_problems_reported_in_one_error(tmp_path: Path):
    d = _golden(tmp_path, ALL_BAD_QUERIES, ALL_BAD_NEGATIVES)
    problems = _problems(d, corpus_paths=PATHS, corpus_symbols=SYMBOLS)
    q, n = d / "queries.yaml", d / "negatives.yaml"
    expected = [
        (f"{q}:6: ", "duplicate id 'dup'"),                 # within queries.yaml
        (f"{q}:10: ", "empty query"),
        (f"{q}:14: ", "'relevant'"),                        # no-rel
        (f"{q}:16: ", "unknown key(s) ['tag']"),
        (f"{q}:21: ", "'a.py' both with and without a symbol"),
        (f"{q}:30: ", "'missing.py' is not in the corpus"),
        (f"{q}:31: ", "'nope'"),
        (f"{n}:2: ", "duplicate id 'dup'"),                 # across the two files
    ]
    assert len(problems) == len(expected), problems
    for prefix, text in expected:
        assert any(p.startswith(prefix) and text in p for p in problems), (prefix, text, problems)
    # duplicates point at the first occurrence
    assert all(f"first at {q}:2" in p for p in problems if "duplicate id" in p)


@pytest.mark.parametrize("queries, negatives, fragment", [
    # duplicate id within queries.yaml
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}]}\n"
     "  - {id: a, query: y, relevant: [{path: a.py}]}\n",
     "negatives: []\n", "duplicate id 'a'"),
    # duplicate id within negatives.yaml
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}]}\n",
     "negatives:\n  - {id: n, query: x}\n  - {id: n, query: y}\n", "duplicate id 'n'"),
    # duplicate id across the files
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}]}\n",
     "negatives:\n  - {id: a, query: y}\n", "duplicate id 'a'"),
    # empty query (positive and negative)
    ("queries:\n  - {id: a, query: '', relevant: [{path: a.py}]}\n", "negatives: []\n",
     "empty query"),
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}]}\n",
     "negatives:\n  - {id: n}\n", "empty query"),
    # missing / empty relevant
    ("queries:\n  - {id: a, query: x}\n", "negatives: []\n", "'relevant'"),
    ("queries:\n  - {id: a, query: x, relevant: []}\n", "negatives: []\n", "'relevant'"),
    # unknown keys: query, label, negative
    ("queries:\n  - {id: a, query: x, relevent: [], relevant: [{path: a.py}]}\n",
     "negatives: []\n", "unknown key(s) ['relevent'] ('relevent': did you mean 'relevant'?)"),
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py, grde: 2}]}\n",
     "negatives: []\n", "unknown label key(s) ['grde'] ('grde': did you mean 'grade'?)"),
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}]}\n",
     "negatives:\n  - {id: n, query: y, relevant: [{path: a.py}]}\n",
     "unknown key(s) ['relevant']"),
    # path with and without symbol
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py, symbol: f}, {path: a.py}]}\n",
     "negatives: []\n", "both with and without a symbol"),
    # bad grades
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py, grade: 0}]}\n",
     "negatives: []\n", "grade must be an integer >= 1"),
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py, grade: 1.5}]}\n",
     "negatives: []\n", "grade must be an integer >= 1"),
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py, grade: true}]}\n",
     "negatives: []\n", "grade must be an integer >= 1"),
    # a label without a path
    ("queries:\n  - {id: a, query: x, relevant: [{symbol: f}]}\n", "negatives: []\n",
     "a label needs a 'path'"),
    # a label's provenance: hand, mined:<how> or review:<how> (judge: never in queries.yaml)
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py, source: 'judge:gpt'}]}\n",
     "negatives: []\n", "a label's source must be 'hand'"),
    # repeated label
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}, {path: a.py}]}\n",
     "negatives: []\n", "repeats a label"),
    # bad id
    ("queries:\n  - {id: 'has space', query: x, relevant: [{path: a.py}]}\n",
     "negatives: []\n", "id must match"),
    # the wrong type is named as such, not as an empty text or a missing label
    ("queries:\n  - {query: x, relevant: [{path: a.py}]}\n", "negatives: []\n",
     "the query has no 'id'"),
    ("queries:\n  - {id: a, query: 42, relevant: [{path: a.py}]}\n", "negatives: []\n",
     "'query' must be text, got int 42"),
    ("queries:\n  - {id: a, query: x, relevant: a.py}\n", "negatives: []\n",
     "'relevant' must be a list of labels (- path: ...), got str 'a.py'"),
    ("queries:\n  - {id: a, relevant: [{path: a.py}]}\n", "negatives: []\n",
     "the query has no 'query' (id 'a')"),
    # a mapping is shown as written (the loader's own line key left out)
    ("queries:\n  - {id: a, query: {k: v}, relevant: [{path: a.py}]}\n", "negatives: []\n",
     "'query' must be text, got dict {'k': 'v'} (quote it in YAML)"),
    # tags not a list of strings
    ("queries:\n  - {id: a, query: x, tags: symbol, relevant: [{path: a.py}]}\n",
     "negatives: []\n", "tags must be a list"),
    # structure
    ("queries: []\n", "negatives: []\n", "non-empty 'queries' list"),
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}]}\n", "corpus: x\n",
     "needs a 'negatives' list"),
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}]}\n", "negatives: []\nother: 1\n",
     "unknown top-level key(s) ['other']"),
    ("queries:\n  - {id: a, query: x, query: y, relevant: [{path: a.py}]}\n", "negatives: []\n",
     "duplicate key 'query'"),
    ("- just a list\n", "negatives: []\n", "expected a mapping"),
    ("queries: [unclosed\n", "negatives: []\n", "not valid YAML"),
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}]}\n", None, "file not found"),
], ids=["dup-in-queries", "dup-in-negatives", "dup-across", "empty-query", "empty-negative",
         "no-relevant", "empty-relevant", "unknown-key", "unknown-label-key",
         "unknown-negative-key", "with-and-without-symbol", "grade-0", "grade-float",
         "grade-bool", "label-no-path", "label-source", "repeated-label", "bad-id", "no-id",
         "query-not-text", "relevant-not-list", "no-query", "query-a-mapping", "tags-not-list",
         "no-queries", "no-negatives-list", "unknown-top-level-key", "duplicate-yaml-key",
         "top-not-mapping", "bad-yaml",
         "negatives-file-missing"])
def test_each_problem_is_reported(tmp_path: Path, queries, negatives, fragment):
    problems = _problems(_golden(tmp_path, queries, negatives))
    assert len(problems) == 1, problems
    assert fragment in problems[0]


def test_both_files_missing_and_missing_directory(tmp_path: Path):
    d = _golden(tmp_path, None, None)
    problems = _problems(d)
    assert len(problems) == 2 and all("file not found" in p for p in problems)
    problems = _problems(tmp_path / "nowhere")
    assert len(problems) == 1 and "golden directory not found" in problems[0]


@pytest.mark.parametrize("queries, negatives", [
    ("queries:\n  - {id: a, query: '', tags: symbol, relevant: [{path: a.py}]}\n",
     "negatives: []\n"),
    ("queries:\n  - {id: a, query: x, relevant: [{path: a.py}]}\n",
     "negatives:\n  - {id: n, query: '', tags: off_topic}\n"),
], ids=["positive", "negative"])
def test_bad_tags_reported_alongside_other_problems(tmp_path: Path, queries, negatives):
    problems = _problems(_golden(tmp_path, queries, negatives))
    assert any("empty query" in p for p in problems)
    assert any("tags must be a list" in p for p in problems), problems


def test_typescript_method_labels_are_checked_against_the_chunker(tmp_path: Path):
    """A label may name a symbol in any chunked language; a TypeScript ``Class.method`` that
    the chunker does not produce is rejected with its file and line."""
    import shutil

    from rag.index.build import build_index

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "languages" / "sample.ts",
                repo / "src" / "sample.ts")
    index = build_index(repo, embedder=None, cache_dir=None, progress=False)
    assert ("src/sample.ts", "ZodString.parse") in index.symbols
    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "queries.yaml").write_text(textwrap.dedent("""\
        queries:
          - id: ok
            query: ZodString.parse
            relevant:
              - path: src/sample.ts
                symbol: ZodString.parse
          - id: bad
            query: ZodString.nope
            relevant:
              - path: src/sample.ts
                symbol: ZodString.nope
        """))
    (golden / "negatives.yaml").write_text("negatives: []\n")
    with pytest.raises(GoldenError) as err:
        load_golden(golden, corpus_paths=index.paths, corpus_symbols=index.symbols)
    assert len(err.value.problems) == 1
    assert err.value.problems[0].startswith(f"{golden / 'queries.yaml'}:10:")  # the label's line
    assert "ZodString.nope" in err.value.problems[0]


def test_judgement_digest_is_what_is_asked_and_judged_not_where_or_by_whom():
    import hashlib

    from rag.eval.golden import GoldenQuery, Label, NegativeQuery, judgement_digest

    a, b = Label(path="a.py", symbol="f"), Label(path="b.py", grade=2, source="hand")
    q = GoldenQuery(id="q1", query="where is f", tags=("prose",), relevant=(a, b), line=3)
    # by hand: sha256 of the text, the kind, then the sorted (doc key, grade) pairs
    want = hashlib.sha256(b"where is f\0positive\0relevant\ta.py#f\t1\0relevant\tb.py\t2\0")
    assert judgement_digest(q) == want.hexdigest()[:16]
    # label order, line, tags and provenance do not change it
    moved = GoldenQuery(id="q1", query="where is f", tags=(), line=40,
                        relevant=(Label(path="b.py", grade=2, source="review:pool"), a))
    assert judgement_digest(moved) == judgement_digest(q)
    # a grade, a label, a not-relevant judgement or the text does
    for other in (GoldenQuery(id="q1", query="where is f", tags=(), relevant=(a,)),
                  GoldenQuery(id="q1", query="where is f", tags=(),
                              relevant=(a, Label(path="b.py", grade=1))),
                  GoldenQuery(id="q1", query="where is f", tags=(), relevant=(a, b),
                              not_relevant=(Label(path="c.py"),)),
                  GoldenQuery(id="q1", query="where is g", tags=(), relevant=(a, b))):
        assert judgement_digest(other) != judgement_digest(q)
    neg = NegativeQuery(id="n1", query="where is f")
    assert judgement_digest(neg) == hashlib.sha256(b"where is f\0negative\0").hexdigest()[:16]


def test_a_query_whose_labels_are_all_unresolved_loads_without_a_relevant_key(tmp_path: Path):
    # as with "relevant: []": its labels name files the corpus does not hold (kept for the
    # ideal), so it has no relevant label to match and is no error
    for rel in ("", "    relevant: []\n", "    relevant:\n"):
        d = _golden(tmp_path, "queries:\n  - id: a\n    query: x\n" + rel
                    + "    unresolved:\n      - path: gone.py\n", "negatives: []\n")
        q = load_golden(d).positives[0]
        assert q.relevant == () and [lab.path for lab in q.unresolved] == ["gone.py"]
