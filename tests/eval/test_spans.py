"""Span-anchored labels (issue 14): line-span labels, symbol labels resolved to their lines,
relevance by overlap (eval.min_overlap), the unit collapse, judged coverage, not_relevant /
source validation, and the window chunker (corpus.chunker) in the cache keys.

Every expected value is computed by hand in the comments. The fixture file
``src/shop/cart.py`` (tests/conftest.py) is chunked by symbol as::

    1-2    <module>              (the docstring and the import)
    5-13   Cart                  (lines 5-9 and 13: the class minus its two methods)
    10-12  Cart.add_item
    14-16  Cart.total_price
    19-21  apply_discount_code
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from conftest import FIXTURE_NEGATIVES, run_overrides, write_tree
from rag.eval.evaluate import collapse, collapse_units, evaluate, hits_label, judged_at
from rag.eval.golden import (CorpusUnits, GoldenError, GoldenQuery, Label, chunk_line_sets,
                             corpus_units, load_golden, overlap_ok, trec_docno)
from rag.eval.metrics import query_metrics, rank
from rag.search.pipeline import Hit, SearchOptions, SearchPipeline, SearchResult

L2 = math.log2


def _hit(path: str, start: int, end: int, score: float, symbol: str | None = None) -> Hit:
    return Hit(chunk_id=f"{path}:{start}-{end}", path=path, symbol=symbol, start_line=start,
               end_line=end, category="source", score=score, scores={"bm25": score})


def _span(path: str, start: int, end: int, grade: int = 1) -> Label:
    return Label(path, grade=grade, lines=(start, end), spans=((start, end),))


def _query(*relevant: Label, not_relevant: tuple[Label, ...] = ()) -> GoldenQuery:
    return GoldenQuery(id="q", query="anything", tags=("prose",), relevant=tuple(relevant),
                       not_relevant=not_relevant)


# --------------------------------------------------------------------------- overlap rule


def test_overlap_any_line_by_default():
    assert overlap_ok(((10, 19),), ((15, 24),))            # lines 15-19 in common
    assert overlap_ok(((10, 19),), ((19, 30),))            # one line is enough
    assert not overlap_ok(((10, 19),), ((20, 30),))        # adjacent is not overlapping
    assert not overlap_ok(((1, 4), (8, 9)), ((5, 7),))     # a hole in the chunk


def test_fractional_min_overlap_counts_the_labels_lines():
    # chunk 10-19, label 15-24 (10 lines): 5 common lines = 0.5 of the label
    assert overlap_ok(((10, 19),), ((15, 24),), 0.5)
    assert not overlap_ok(((10, 19),), ((15, 24),), 0.6)
    # the denominator is the label, never the chunk: a 100-line window covering a 2-line span
    # covers all of it (1.0) ...
    assert overlap_ok(((1, 100),), ((10, 11),), 1.0)
    # ... and a 1-line chunk covers 1/100 of a 100-line span
    assert not overlap_ok(((10, 10),), ((1, 100),), 0.5)
    assert overlap_ok(((10, 10),), ((1, 100),), 0.01)
    # a label of several ranges: lines 1-4 and 11-16 (10 lines); chunk 3-12 covers 3, 4, 11, 12
    assert overlap_ok(((3, 12),), ((1, 4), (11, 16)), 0.4)
    assert not overlap_ok(((3, 12),), ((1, 4), (11, 16)), 0.41)


def test_class_and_module_chunks_hold_their_lines_less_nested_chunks(fixture_repo):
    from rag.corpus.chunk import chunk_document
    from rag.corpus.walk import Document, walk_corpus

    doc = next(d for d in walk_corpus(fixture_repo) if d.path == "src/shop/cart.py")
    chunks = chunk_document(doc)
    lines = {c.symbol: chunk_line_sets(chunks)[c.id] for c in chunks}
    # Cart: its header, docstring and attribute; the blank lines between methods are not its
    assert lines == {"<module>": ((1, 2),), "Cart": ((5, 8),),
                     "Cart.add_item": ((10, 12),), "Cart.total_price": ((14, 16),),
                     "apply_discount_code": ((19, 21),)}
    # a class with an attribute after a method: its chunk's range holds the method's lines
    text = 'class Cart:\n    """Doc."""\n\n    def add_item(self):\n        pass\n\n    currency = 1\n'
    chunks = chunk_document(Document(path="cart.py", category="source", text=text,
                                     size=len(text)))
    lines = {c.symbol: chunk_line_sets(chunks)[c.id] for c in chunks}
    # (its range less the nested chunk: the blank line 3 counts as its own here)
    assert lines == {"Cart": ((1, 3), (6, 7)), "Cart.add_item": ((4, 5),)}
    cart = next(c for c in chunks if c.symbol == "Cart")
    assert (cart.start_line, cart.end_line) == (1, 7)   # its range holds add_item's lines
    units = CorpusUnits.from_chunks(chunks)
    add_item = _span("cart.py", 4, 5)
    hit = _hit("cart.py", 1, 7, 1.0, "Cart")
    # with the index's line structure the class chunk does not hit its method's lines ...
    assert not hits_label(hit, add_item, units=units)
    # ... by its bare range it would
    assert hits_label(hit, add_item, units=None)


# --------------------------------------------------------------------------- collapse


def test_a_unit_counts_once_at_its_first_chunk():
    q = _query(_span("a.py", 8, 12), Label("b.py"))
    hits = [_hit("a.py", 1, 10, 0.9), _hit("a.py", 5, 15, 0.8), _hit("a.py", 30, 40, 0.7),
            _hit("b.py", 1, 10, 0.6), _hit("b.py", 20, 30, 0.5)]
    scores = collapse(hits, q)
    # 1-10 and 5-15 both hit 8-12: one unit at 0.9; 30-40 hits nothing: the path, once
    assert scores == {"a.py#L8-12": 0.9, "a.py": 0.7, "b.py": 0.6}
    assert rank(scores) == ["a.py#L8-12", "a.py", "b.py"]
    m = query_metrics(scores, q.qrels, recall_ks=(1, 3))
    assert m["mrr"] == 1.0 and m["recall_at_1"] == 0.5 and m["recall_at_3"] == 1.0
    # DCG = 1 + 1/log2(4); IDCG = 1 + 1/log2(3)
    assert m["ndcg_at_10"] == pytest.approx((1 + 1 / L2(4)) / (1 + 1 / L2(3)))


def test_a_chunk_over_two_labelled_units_enters_both():
    q = _query(_span("a.py", 2, 3), _span("a.py", 8, 9))
    scores = collapse([_hit("a.py", 1, 10, 0.9)], q)
    assert scores == {"a.py#L2-3": 0.9, "a.py#L8-9": 0.9}
    assert query_metrics(scores, q.qrels, recall_ks=(2,))["recall_at_2"] == 1.0


def test_min_overlap_half_moves_the_unit_to_a_later_chunk():
    q = _query(_span("a.py", 8, 17))                     # 10 lines
    hits = [_hit("a.py", 1, 10, 0.9), _hit("a.py", 5, 15, 0.8)]
    # any overlap: 1-10 (lines 8-10) hits it
    assert collapse(hits, q) == {"a.py#L8-17": 0.9}
    # half: 1-10 covers 3/10, no; 5-15 covers 8-15 = 8/10, yes (and 1-10 is the path)
    assert collapse(hits, q, min_overlap=0.5) == {"a.py": 0.9, "a.py#L8-17": 0.8}


# --------------------------------------------------------------------------- span = symbol


SPAN_QUERIES = textwrap.dedent('''\
    corpus: shop
    queries:
      - id: prose-voucher
        query: how do customers use a voucher to pay less
        tags: [prose]
        relevant:
          - path: src/shop/cart.py
            LABEL
      - id: prose-total
        query: sum of the prices of the items in the cart
        tags: [prose]
        relevant:
          - path: src/shop/cart.py
            TOTAL
    ''')


def _golden_dir(tmp_path: Path, name: str, voucher: str, total: str) -> Path:
    text = SPAN_QUERIES.replace("LABEL", voucher).replace("TOTAL", total)
    return write_tree(tmp_path / name, {"queries.yaml": text, "negatives.yaml": FIXTURE_NEGATIVES})


@pytest.mark.parametrize("chunker", ["symbol", "window"])
def test_span_label_and_symbol_label_give_the_same_metrics(tmp_path, fixture_repo, chunker):
    from rag.index.build import build_index

    index = build_index(fixture_repo, embedder=None, cache_dir=None, progress=False,
                        chunker=chunker, window_lines=4, window_overlap=1)
    units = corpus_units(index)
    by_symbol = load_golden(_golden_dir(tmp_path, "sym", "symbol: apply_discount_code",
                                        "symbol: Cart.total_price"),
                            corpus_paths=index.paths, corpus_symbols=index.symbols, units=units)
    by_lines = load_golden(_golden_dir(tmp_path, "lines", "lines: [19, 21]", "lines: [14, 16]"),
                           corpus_paths=index.paths, corpus_symbols=index.symbols, units=units)
    assert by_symbol.positives[0].relevant[0].spans == ((19, 21),)
    assert by_symbol.positives[1].relevant[0].spans == ((14, 16),)
    pipe = SearchPipeline(index, SearchOptions(mode="bm25", top_k=3))
    a = evaluate(pipe, by_symbol, recall_ks=[1, 3], ndcg_k=10, depth=10, progress=False)
    b = evaluate(pipe, by_lines, recall_ks=[1, 3], ndcg_k=10, depth=10, progress=False)
    keys = [k for k in a.metrics if k.startswith(("recall", "hit", "mrr", "ndcg", "judged"))]
    assert keys and {k: a.metrics[k] for k in keys} == {k: b.metrics[k] for k in keys}
    assert a.metrics["mrr"] > 0
    # the same units, named by symbol or by lines
    rename = {"src/shop/cart.py#apply_discount_code": "src/shop/cart.py#L19-21",
              "src/shop/cart.py#Cart.total_price": "src/shop/cart.py#L14-16"}
    for qid in a.run:
        assert {rename.get(d, d): s for d, s in a.run[qid].items()} == b.run[qid]


def test_symbol_labels_keep_their_meaning_under_the_symbol_chunker(tmp_path, fixture_repo):
    """Resolved to lines, a symbol label hits exactly the chunks carrying the symbol."""
    from rag.index.build import build_index

    index = build_index(fixture_repo, embedder=None, cache_dir=None, progress=False)
    units = corpus_units(index)
    for c in index.chunks:
        if not c.symbol:
            continue
        lab = Label(c.path, c.symbol, spans=units.symbol_lines[(c.path, c.symbol)])
        others = [o for o in index.chunks if o.path == c.path]
        assert [hits_label(_as_hit(o), lab, units=units) for o in others] == \
            [o.symbol == c.symbol for o in others], c.id


def _as_hit(c) -> Hit:
    return Hit(chunk_id=c.id, path=c.path, symbol=c.symbol, start_line=c.start_line,
               end_line=c.end_line, category=c.category, score=1.0, scores={})


# --------------------------------------------------------------------------- judged coverage


def test_judged_coverage_by_hand():
    q = _query(_span("a.py", 8, 12),
               not_relevant=(Label("c.py"), _span("a.py", 30, 35)))
    hits = [_hit("a.py", 1, 10, 0.9),    # relevant: unit a.py#L8-12 (judged)
            _hit("x.py", 1, 10, 0.85),   # no judgement
            _hit("a.py", 30, 40, 0.7),   # unit a.py; its first chunk hits a.py 30-35 (judged)
            _hit("c.py", 1, 10, 0.6),    # judged not relevant (the whole file)
            _hit("d.py", 1, 10, 0.5)]    # no judgement
    units = collapse_units(hits, q)
    assert list(units) == ["a.py#L8-12", "x.py", "a.py", "c.py", "d.py"]
    assert judged_at(units, q, 1) == 1.0           # 1/1
    assert judged_at(units, q, 3) == pytest.approx(2 / 3)
    assert judged_at(units, q, 5) == pytest.approx(3 / 5)
    assert judged_at(units, q, 10) == pytest.approx(3 / 10)   # k is the denominator
    # not_relevant never moves the relevance metrics
    assert collapse(hits, q) == collapse(hits, _query(_span("a.py", 8, 12)))
    # judgements [1, None, 0, 0, None]: R = 1, N = 2 (c.py and a.py 30-35; the a.py unit hits
    # the latter); the relevant unit first: bpref 1, the condensed list [1, 0, 0] too
    from rag.eval.evaluate import incomplete_judgement_metrics, unit_judgements

    assert [j for _, j in unit_judgements(units, q)] == [1, None, 0, 0, None]
    assert incomplete_judgement_metrics(units, q) == {
        "bpref": 1.0, "condensed_ndcg_at_10": 1.0, "condensed_mrr": 1.0}
    # the relevant unit below an unjudged and a judged non-relevant one: MRR 1/3, but the
    # condensed MRR 1/2 (the unjudged x.py is dropped) and bpref 1 - min(1, 1)/min(1, 2) = 0
    late = [_hit("x.py", 1, 10, 0.95), _hit("c.py", 1, 10, 0.9), _hit("a.py", 1, 10, 0.8)]
    got = incomplete_judgement_metrics(collapse_units(late, q), q)
    assert got == {"bpref": 0.0, "condensed_ndcg_at_10": pytest.approx(1 / math.log2(3)),
                   "condensed_mrr": 0.5}


class _Fixed:
    """A retriever answering every query with the same ranking."""

    kind = "fixed"

    def __init__(self, hits: list[Hit], top_k: int) -> None:
        self.hits, self.top_k = hits, top_k

    def retrieve(self, query, *, depth: int) -> SearchResult:
        return SearchResult(hits=self.hits[:self.top_k], ranked=self.hits, route="fixed",
                            top_dense=None, dropped=0, weak_match=False,
                            timings_ms={"total": 1.0})


def test_judged_at_top_k_and_10_in_the_row(tmp_path):
    golden = write_tree(tmp_path / "g", {"queries.yaml": textwrap.dedent('''\
        queries:
          - id: q1
            query: one
            source: hand
            relevant: [{path: a.py, lines: [8, 12]}]
            not_relevant: [{path: c.py}]
          - id: q2
            query: two
            source: "mined:git 0123abc"
            note: no judgement among the hits but its own
            relevant: [{path: d.py}]
        '''), "negatives.yaml": "negatives: []\n"})
    g = load_golden(golden)
    assert [q.source for q in g.positives] == ["hand", "mined:git 0123abc"]
    hits = [_hit("a.py", 1, 10, 0.9), _hit("x.py", 1, 10, 0.8), _hit("c.py", 1, 10, 0.7),
            _hit("d.py", 1, 10, 0.6)]
    res = evaluate(_Fixed(hits, top_k=3), g, recall_ks=[1], ndcg_k=10, depth=10, progress=False)
    # q1: a.py#L8-12, x.py, c.py, d.py -> judged@3 = 2/3, judged@10 = 2/10
    # q2: a.py, x.py, c.py, d.py -> judged@3 = 0, judged@10 = 1/10
    assert res.metrics["judged_at_3"] == pytest.approx((2 / 3 + 0) / 2)
    assert res.metrics["judged_at_10"] == pytest.approx((0.2 + 0.1) / 2)
    rows = {r["query_id"]: r for r in res.per_query}
    assert rows["q1"]["judged_at_3"] == pytest.approx(2 / 3)


# --------------------------------------------------------------------------- validation


def _problems(tmp_path: Path, labels: str, **kw) -> list[str]:
    d = write_tree(tmp_path / "v", {"queries.yaml": "queries:\n  - id: q\n    query: x\n"
                                    + textwrap.indent(labels, "    "),
                                    "negatives.yaml": "negatives: []\n"})
    with pytest.raises(GoldenError) as info:
        load_golden(d, **kw)
    return info.value.problems


@pytest.mark.parametrize("labels, line, fragment", [
    ("relevant:\n  - path: a.py\n    lines: [0, 3]\n", 5, "need 1 <= start <= end"),
    ("relevant:\n  - path: a.py\n    lines: [5, 3]\n", 5, "need 1 <= start <= end"),
    ("relevant:\n  - path: a.py\n    lines: [a, 3]\n", 5, "two integers"),
    ("relevant:\n  - path: a.py\n    lines: [1.5, 3]\n", 5, "two integers"),
    ("relevant:\n  - path: a.py\n    lines: 3\n", 5, "two integers"),
    ("relevant:\n  - path: a.py\n    lines: [true, 3]\n", 5, "two integers"),
    ("relevant:\n  - path: a.py\n    lines: [1, 2]\n    symbol: f\n", 5, "never both"),
    ("relevant:\n  - path: a.py\n    line: [1, 2]\n", 5, "unknown label key(s) ['line']"),
    ("relevant:\n  - path: a.py\nnot_relevant:\n  - path: b.py\n    grde: 1\n", 7,
     "unknown label key(s) ['grde']"),
    ("relevant:\n  - path: a.py\nnot_relevant: b.py\n", 2, "not_relevant must be a list"),
    ("relevant:\n  - path: a.py\nnot_relevant:\n  - path: a.py\n", 2,
     "judges 'a.py' both relevant and not relevant"),
    ("relevant:\n  - path: a.py\n  - path: a.py\n    lines: [1, 2]\n", 2,
     "both with and without a symbol or lines"),
    ("relevant:\n  - path: a.py\n    lines: [1, 2]\n  - path: a.py\n    lines: [1, 2]\n", 2,
     "repeats a label"),
    ("relevant:\n  - path: a.py\nsource: scraped\n", 2, "source must be"),
    ("relevant:\n  - path: a.py\nsourse: hand\n", 2, "unknown key(s) ['sourse']"),
])
def test_label_errors_name_file_and_line(tmp_path, labels, line, fragment):
    problems = _problems(tmp_path, labels)
    q = tmp_path / "v" / "queries.yaml"
    assert any(p.startswith(f"{q}:{line}: ") and fragment in p for p in problems), problems


def test_span_must_end_within_its_file(tmp_path):
    units = CorpusUnits(line_counts={"a.py": 21}, symbol_lines={}, chunk_lines={})
    problems = _problems(tmp_path, "relevant:\n  - path: a.py\n    lines: [20, 22]\n",
                         corpus_paths={"a.py"}, units=units)
    q = tmp_path / "v" / "queries.yaml"
    assert problems == [f"{q}:5: query 'q': lines [20, 22] end after the last line of 'a.py' (21)"]
    ok = write_tree(tmp_path / "ok", {"queries.yaml": "queries:\n  - id: q\n    query: x\n"
                                      "    relevant:\n      - path: a.py\n        lines: [21, 21]\n",
                                      "negatives.yaml": "negatives: []\n"})
    g = load_golden(ok, corpus_paths={"a.py"}, units=units)
    assert g.positives[0].relevant[0].doc_key == "a.py#L21-21"


# --------------------------------------------------------------------------- TREC artifacts


def test_span_docnos_in_run_and_qrels_agree():
    assert trec_docno("docs/a b.md#L10-20") == "docs/a%20b.md#L10-20"
    from rag.eval.evaluate import trec_run_lines

    q = _query(_span("a.py", 8, 12))
    run = {"q": collapse([_hit("a.py", 1, 10, 0.9), _hit("b.py", 1, 5, 0.5)], q)}
    assert trec_run_lines(run, "t") == ["q Q0 a.py#L8-12 1 0.90000000000000002 t",
                                        "q Q0 b.py 2 0.5 t"]


class _FakeEmbedder:
    model_id = "fake"
    dim = 4

    def count_tokens(self, texts):
        return [len(t.split()) + 2 for t in texts]


SPAN_ROW_QUERIES = textwrap.dedent('''\
    corpus: shop
    queries:
      - id: prose-voucher
        query: voucher code total discount
        relevant:
          - path: src/shop/cart.py
            lines: [19, 21]
      - id: prose-total
        query: sum of unit price times quantity total
        relevant:
          - path: src/shop/cart.py
            lines: [14, 16]
          - path: src/shop/payments.py
            symbol: refund_order
      - id: prose-deploy
        query: deploy the shop behind nginx
        relevant:
          - path: docs/guide.md
    ''')


def test_row_with_span_labels_rescored_by_trec_eval(tmp_path, fixture_repo, compose):
    """A row's qrels.txt + run.trec with span labels (windows judged by overlap), scored by
    trec_eval, give the row."""
    import pytrec_eval
    from mlflow.tracking import MlflowClient

    import rag.app.run as run_mod
    from rag.app.stages import StageCache

    golden = write_tree(tmp_path / "golden", {"queries.yaml": SPAN_ROW_QUERIES,
                                              "negatives.yaml": FIXTURE_NEGATIVES})
    metrics = run_mod.run_job(compose(run_overrides(
        tmp_path, fixture_repo, golden, "search.mode=bm25", "corpus.chunker=window",
        "corpus.window_lines=5", "corpus.window_overlap=2")),
        stages=StageCache(embedder=_FakeEmbedder()))
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    row = client.search_runs([client.get_experiment_by_name("rag-shop").experiment_id])[0]
    qrels_file = Path(client.download_artifacts(row.info.run_id, "qrels.txt", str(tmp_path)))
    run_file = Path(client.download_artifacts(row.info.run_id, "run.trec.txt", str(tmp_path)))
    qlines = qrels_file.read_text().split("\n")
    assert "prose-voucher 0 src/shop/cart.py#L19-21 1" in qlines
    qrels: dict[str, dict[str, int]] = {}
    for line in filter(None, qlines):
        qid, _, doc, rel = line.split()
        qrels.setdefault(qid, {})[doc] = int(rel)
    run: dict[str, dict[str, float]] = {}
    for line in filter(None, run_file.read_text().split("\n")):
        qid, _, doc, rnk, _score, _tag = line.split()
        run.setdefault(qid, {})[doc] = -float(rnk)
    assert "src/shop/cart.py#L19-21" in run["prose-voucher"]   # windows judged by overlap
    got = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "recall.8", "ndcg_cut.10"}) \
        .evaluate(run)
    n = metrics["n_positives"]
    assert metrics["mrr"] > 0
    for ours, theirs in (("mrr", "recip_rank"), ("recall_at_8", "recall_8"),
                         ("ndcg_at_10", "ndcg_cut_10")):
        value = sum(q[theirs] for q in got.values()) / n
        assert value == pytest.approx(metrics[ours], abs=1e-9), ours
    assert "judged_at_8" in metrics and "judged_at_10" in metrics


# --------------------------------------------------------------------------- the chunker key


def test_window_chunker_changes_the_stage_key_and_the_chunk_store(compose, tmp_path,
                                                                  fixture_repo, fixture_golden):
    from rag.index.build import build_index
    from rag.app.stages import stage_key

    base = run_overrides(tmp_path, fixture_repo, fixture_golden)
    sym, win = compose(base), compose([*base, "corpus.chunker=window"])
    assert stage_key("index", corpus=sym.corpus) != stage_key("index", corpus=win.corpus)
    assert stage_key("index", corpus=win.corpus) == stage_key(
        "index", corpus=compose([*base, "chunking=window80", "corpus.window_lines=60",
                                 "corpus.window_overlap=10"]).corpus)
    store = tmp_path / "chunks"
    kw = dict(embedder=None, cache_dir=None, progress=False, chunk_store=store)
    a = build_index(fixture_repo, chunker="symbol", **kw)
    b = build_index(fixture_repo, chunker="window", window_lines=5, window_overlap=1, **kw)
    assert {c.kind for c in b.chunks} == {"window"} and "function" in {c.kind for c in a.chunks}
    assert b.stats["corpus_read"] == 1      # its own store entry, not the symbol chunks
    assert b.symbols == a.symbols           # symbol labels resolve on the symbol chunker
    assert b.line_counts["src/shop/cart.py"] == 21 == a.line_counts["src/shop/cart.py"]
    again = build_index(fixture_repo, chunker="window", window_lines=5, window_overlap=1, **kw)
    assert again.stats["corpus_read"] == 0
    assert [c.id for c in again.chunks] == [c.id for c in b.chunks]
    assert again.line_counts == b.line_counts and again.symbols == a.symbols
    with pytest.raises(ValueError, match="corpus.chunker"):
        from rag.app.config import validate

        validate(compose([*base, "corpus.chunker=lines"]))
    with pytest.raises(ValueError, match="eval.min_overlap"):
        from rag.app.config import validate

        validate(compose([*base, "eval.min_overlap=1.5"]))


def test_the_rest_of_a_narrowed_file_counts_as_judged():
    """A relevant label narrowed to lines judges the rest of its file not relevant (as
    rag golden pool counts it), so review never has to ask about it."""
    q = _query(_span("a.py", 8, 12))
    hits = [_hit("a.py", 50, 60, 0.9),   # unit a.py: the rest of a narrowed file -> judged
            _hit("x.py", 1, 10, 0.8)]    # no judgement
    units = collapse_units(hits, q)
    assert list(units) == ["a.py", "x.py"]
    assert judged_at(units, q, 2) == pytest.approx(1 / 2)


def test_candidate_pool_recall_judges_span_labels_by_lines():
    """The first stage's pool carries each chunk's lines, so a span label (or a symbol label
    on windows) counts there exactly as it counts in the ranking."""
    q = _query(_span("a.py", 8, 12))
    hit = _hit("a.py", 1, 10, 0.9)
    res = SearchResult(hits=[hit], ranked=[hit], route="fixed", top_dense=None, dropped=0,
                       weak_match=False, timings_ms={"total": 1.0},
                       candidates=[(hit.path, hit.symbol, hit.start_line, hit.end_line,
                                    hit.chunk_id)])

    class _Pipe:
        kind, top_k = "pipeline", 1

        def retrieve(self, query, *, depth):
            return res

    from rag.eval.golden import GoldenSet

    g = GoldenSet(positives=[q], negatives=[], fingerprint="", directory=Path("."))
    m = evaluate(_Pipe(), g, recall_ks=[1], ndcg_k=1, depth=1, progress=False).metrics
    assert m["candidate_pool_recall"] == 1.0
