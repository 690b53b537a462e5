"""Ranking metrics (rag/eval/metrics.py) and the run collapse of rag/eval/evaluate.py.

Hand-computed cases first, then parity with trec_eval (pytrec_eval-terrier) on randomised
runs, then the collapse of several chunks of one path into one judged document.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rag.eval.evaluate import collapse, doc_key
from rag.eval.golden import GoldenQuery, Label
from rag.eval.metrics import evaluate_run, first_relevant_rank, mean_metrics, percentile, \
    query_metrics, rank
from reference_metrics import hit_at, ndcg_at, recall_at, reciprocal_rank
import reference_metrics
from rag.search.pipeline import Hit

KS = (1, 3, 5, 8, 10, 20, 40)

# --------------------------------------------------------------------------- hand-computed

# q-bin: binary qrels, 3 relevant docs; a and y tie at 0.8 -> a first (doc id ascending).
#   ranking: x(0.9) a(0.8) y(0.8) b(0.5) c(0.1); relevant a, b, c at ranks 2, 4, 5.
# q-graded: graded qrels p=3, r=2, q=1; ranking q(5) p(4) z(3); relevant q, p at ranks 1, 2.
# q-empty: nothing retrieved.
RUN = {
    "q-bin": {"x": 0.9, "y": 0.8, "a": 0.8, "b": 0.5, "c": 0.1},
    "q-graded": {"q": 5.0, "p": 4.0, "z": 3.0},
    "q-empty": {},
}
QRELS = {
    "q-bin": {"a": 1, "b": 1, "c": 1},
    "q-graded": {"p": 3, "q": 1, "r": 2},
    "q-empty": {"a": 1},
}

L2 = math.log2
# q-bin nDCG@10: DCG = 1/log2(3) + 1/log2(5) + 1/log2(6)            (ranks 2, 4, 5)
#               IDCG = 1/log2(2) + 1/log2(3) + 1/log2(4) = 1 + 0.6309 + 0.5
NDCG_BIN = (1 / L2(3) + 1 / L2(5) + 1 / L2(6)) / (1 + 1 / L2(3) + 1 / L2(4))
# q-graded nDCG@10: DCG = 1/log2(2) + 3/log2(3)                     (q=1 at 1, p=3 at 2)
#                   IDCG = 3/log2(2) + 2/log2(3) + 1/log2(4)        (ideal 3, 2, 1)
NDCG_GRADED = (1 / 1 + 3 / L2(3)) / (3 / 1 + 2 / L2(3) + 1 / L2(4))


def test_hand_values_of_the_constants():
    # pin the constants to decimal values worked out by hand, so a typo in them is caught
    # q-bin: (0.630930 + 0.430677 + 0.386853) / 2.130930 = 1.448460 / 2.130930
    assert NDCG_BIN == pytest.approx(0.679731, abs=1e-5)
    # q-graded: (1 + 1.892789) / (3 + 1.261860 + 0.5) = 2.892789 / 4.761860
    assert NDCG_GRADED == pytest.approx(0.607491, abs=1e-5)


def test_rank_breaks_ties_by_doc_id_ascending():
    assert rank(RUN["q-bin"]) == ["x", "a", "y", "b", "c"]
    # insertion order does not matter, only (-score, doc id)
    assert rank({"b": 1.0, "a": 1.0, "c": 2.0}) == ["c", "a", "b"]
    assert rank({}) == []


def test_tie_decides_mrr():
    # b and a tie; a sorts first, so the relevant b is at rank 2 -> MRR 1/2
    assert query_metrics({"b": 1.0, "a": 1.0}, {"b": 1})["mrr"] == 0.5
    # same tie, relevant a -> rank 1
    assert query_metrics({"b": 1.0, "a": 1.0}, {"a": 1})["mrr"] == 1.0


def test_binary_query_metrics():
    m = query_metrics(RUN["q-bin"], QRELS["q-bin"])
    # relevant at ranks 2, 4, 5 of x a y b c
    assert m["recall_at_1"] == 0.0
    assert m["recall_at_3"] == pytest.approx(1 / 3)   # a
    assert m["recall_at_5"] == 1.0                    # a, b, c
    assert m["recall_at_40"] == 1.0
    assert m["hit_at_1"] == 0.0
    assert m["hit_at_3"] == 1.0
    assert m["mrr"] == 0.5
    assert m["ndcg_at_10"] == pytest.approx(NDCG_BIN, abs=1e-12)
    assert m["map"] == pytest.approx((1 / 2 + 2 / 4 + 3 / 5) / 3)  # precision at 2, 4, 5
    assert set(m) == {f"recall_at_{k}" for k in KS} | {f"hit_at_{k}" for k in KS} | \
        {"mrr", "ndcg_at_10", "map"}


def test_graded_query_metrics():
    m = query_metrics(RUN["q-graded"], QRELS["q-graded"])
    # 3 relevant (p, q, r), k=1 retrieves q only: 1/3, recall is not capped at k
    assert m["recall_at_1"] == pytest.approx(1 / 3)
    assert m["recall_at_3"] == pytest.approx(2 / 3)   # r never retrieved
    assert m["hit_at_1"] == 1.0
    assert m["mrr"] == 1.0
    assert m["ndcg_at_10"] == pytest.approx(NDCG_GRADED, abs=1e-12)


def test_ndcg_cutoff_truncates_the_ideal_too():
    ranking = rank(RUN["q-graded"])  # q p z
    # k=1: DCG = 1/1 (q has grade 1); IDCG@1 = 3/1 (best grade 3) -> 1/3
    assert ndcg_at(ranking, QRELS["q-graded"], 1) == pytest.approx(1 / 3)
    # k=2: DCG = 1 + 3/log2(3); IDCG@2 = 3 + 2/log2(3)
    assert ndcg_at(ranking, QRELS["q-graded"], 2) == pytest.approx(
        (1 + 3 / L2(3)) / (3 + 2 / L2(3)))
    # perfect order gives 1
    assert ndcg_at(["p", "r", "q"], QRELS["q-graded"], 10) == pytest.approx(1.0)


def test_empty_run_scores_zero_everywhere():
    m = query_metrics({}, QRELS["q-empty"])
    assert m and all(v == 0.0 for v in m.values())


def test_grade_zero_is_not_relevant_and_no_relevant_gives_zero():
    rel = {"a": 0, "b": 1}
    assert recall_at(["a", "b"], rel, 1) == 0.0
    assert recall_at(["a", "b"], rel, 2) == 1.0
    assert hit_at(["a", "b"], rel, 1) == 0.0
    assert reciprocal_rank(["a", "b"], rel) == 0.5
    assert first_relevant_rank(["a", "b"], rel) == 2
    assert first_relevant_rank(["a"], rel) is None
    # nothing relevant at all -> 0, not a ZeroDivisionError
    assert recall_at(["a"], {"a": 0}, 5) == 0.0
    assert ndcg_at(["a"], {"a": 0}, 5) == 0.0
    assert reciprocal_rank(["a"], {}) == 0.0


def test_evaluate_run_and_means():
    per_q = evaluate_run(RUN, QRELS)
    assert set(per_q) == {"q-bin", "q-graded", "q-empty"}
    assert all(v == 0.0 for v in per_q["q-empty"].values())
    means = mean_metrics(per_q)
    # MRR: (1/2 + 1 + 0) / 3 = 1/2
    assert means["mrr"] == pytest.approx(0.5)
    # Recall@1: (0 + 1/3 + 0) / 3 = 1/9
    assert means["recall_at_1"] == pytest.approx(1 / 9)
    # Recall@3: (1/3 + 2/3 + 0) / 3 = 1/3
    assert means["recall_at_3"] == pytest.approx(1 / 3)
    assert means["ndcg_at_10"] == pytest.approx((NDCG_BIN + NDCG_GRADED) / 3)
    # subset of queries
    sub = mean_metrics(per_q, ["q-bin", "q-graded"])
    assert sub["mrr"] == pytest.approx(0.75)   # (1/2 + 1) / 2
    assert mean_metrics(per_q, []) == {}
    assert mean_metrics({}) == {}


def test_evaluate_run_query_missing_from_run_scores_zero_and_extra_run_queries_ignored():
    per_q = evaluate_run({"other": {"a": 1.0}}, {"q": {"a": 1}}, recall_ks=(2,), ndcg_k=5)
    assert per_q == {"q": {"recall_at_2": 0.0, "hit_at_2": 0.0, "mrr": 0.0, "ndcg_at_5": 0.0,
                           "map": 0.0}}


def test_percentile_linear_interpolation():
    # [1,2,3,4] at 50: position 0.5*3 = 1.5 -> 2 + 0.5*(3-2) = 2.5
    assert percentile([4, 1, 3, 2], 50) == 2.5
    # [10..50] at 95: position 0.95*4 = 3.8 -> 40 + 0.8*10 = 48
    assert percentile([10, 20, 30, 40, 50], 95) == pytest.approx(48.0)
    assert percentile([7.0], 95) == 7.0
    assert math.isnan(percentile([], 50))


# --------------------------------------------------------------------------- pytrec_eval parity


def _random_case(seed: int = 20240917, n_queries: int = 200):
    """Runs with many tied scores, some empty runs, and graded or binary qrels."""
    rng = np.random.default_rng(seed)
    docs = [f"d{i:03d}" for i in range(80)]
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for n in range(n_queries):
        qid = f"q{n:03d}"
        size = 0 if rng.random() < 0.1 else int(rng.integers(1, 60))
        pool = rng.choice(len(docs), size=size, replace=False)
        # few distinct score values -> many ties
        run[qid] = {docs[i]: float(rng.integers(0, 6)) / 4.0 for i in pool}
        n_rel = int(rng.integers(1, 12))
        judged = rng.choice(len(docs), size=n_rel, replace=False)
        if n % 2:
            grades = rng.integers(0, 4, size=n_rel)  # graded, some 0 (judged non-relevant)
            grades[0] = max(int(grades[0]), 1)  # at least one relevant doc
        else:
            grades = np.ones(n_rel, dtype=int)
        qrels[qid] = {docs[i]: int(g) for i, g in zip(judged, grades)}
    return run, qrels


def _trec_eval(run, qrels, strict_order: bool):
    import pytrec_eval

    ks = ",".join(str(k) for k in KS)
    measures = {f"recall.{ks}", f"success.{ks}", "recip_rank", "ndcg_cut.10", "map"}
    ev = pytrec_eval.RelevanceEvaluator(qrels, measures)
    if strict_order:
        # trec_eval breaks ties by docno descending; ours by doc id ascending. Feed it our
        # order as strictly decreasing scores so it ranks exactly as rank() does.
        trec_run = {q: {d: float(len(s) - i) for i, d in enumerate(rank(s))}
                    for q, s in run.items() if s}
    else:
        trec_run = {q: dict(s) for q, s in run.items() if s}
    return ev.evaluate(trec_run)


def test_parity_with_trec_eval_on_random_runs():
    run, qrels = _random_case()
    ours = evaluate_run(run, qrels, recall_ks=KS, ndcg_k=10)
    theirs = _trec_eval(run, qrels, strict_order=True)

    empty = {q for q, s in run.items() if not s}
    assert 5 <= len(empty) <= 40  # the fixture really has empty runs
    assert set(theirs) == set(run) - empty  # trec_eval omits queries with no run
    graded = sum(1 for r in qrels.values() if any(g > 1 for g in r.values()))
    assert graded >= 30  # and really has graded qrels

    for q, t in theirs.items():
        o = ours[q]
        for k in KS:
            assert o[f"recall_at_{k}"] == pytest.approx(t[f"recall_{k}"], abs=1e-9), (q, k)
            assert o[f"hit_at_{k}"] == pytest.approx(t[f"success_{k}"], abs=1e-9), (q, k)
        assert o["mrr"] == pytest.approx(t["recip_rank"], abs=1e-9), q
        assert o["ndcg_at_10"] == pytest.approx(t["ndcg_cut_10"], abs=1e-9), q
        assert o["map"] == pytest.approx(t["map"], abs=1e-9), q  # rag/eval/measures/
    for q in empty:
        assert all(v == 0.0 for v in ours[q].values()), q

    # mean over all queries = mean over the non-empty ones scaled by their share
    means = mean_metrics(ours)
    for name, trec_name in (("mrr", "recip_rank"), ("ndcg_at_10", "ndcg_cut_10"),
                            ("recall_at_8", "recall_8")):
        total = sum(t[trec_name] for t in theirs.values())
        assert means[name] == pytest.approx(total / len(run), abs=1e-9)


def test_random_fixture_ties_do_change_trec_eval_results():
    # guards the parity test: without the strict-order conversion trec_eval disagrees on
    # some query, i.e. the random runs exercise tie-breaking.
    run, qrels = _random_case()
    ours = evaluate_run(run, qrels, recall_ks=KS, ndcg_k=10)
    raw = _trec_eval(run, qrels, strict_order=False)
    differing = [q for q, t in raw.items()
                 if abs(ours[q]["mrr"] - t["recip_rank"]) > 1e-9
                 or abs(ours[q]["ndcg_at_10"] - t["ndcg_cut_10"]) > 1e-9]
    assert differing


@pytest.mark.parametrize("ties", ["doc_id", "pessimistic"])
def test_whole_run_values_equal_the_per_query_formulas_bit_for_bit(ties):
    # the vectorised evaluator (rag/eval/ranked.py) against tests/reference_metrics.py, one
    # query at a time, on runs full of ties, empty runs, graded qrels, negative grades and a
    # query judged with nothing relevant: every value equal with ==, not approximately
    run, qrels = _random_case(seed=7)
    qrels["q-neg"] = {"d001": -1, "d002": 2}
    run["q-neg"] = {"d001": 1.0, "d002": 1.0, "d003": 1.0}
    qrels["q-none"] = {"d004": 0}
    run["q-none"] = {"d004": 3.0, "d005": 2.0}
    qrels["q-absent"] = {"d006": 1}  # in the qrels, not in the run
    run["not-judged"] = {"d007": 1.0}  # in the run, not in the qrels: ignored
    ours = evaluate_run(run, qrels, recall_ks=KS, ndcg_k=10, ties=ties)
    assert list(ours) == list(qrels)
    for q, rel in qrels.items():
        ref = reference_metrics.query_metrics(rank(run.get(q, {}), rel, ties=ties), rel,
                                              recall_ks=KS, ndcg_k=10)
        assert ours[q] == ref, q
        assert list(ours[q]) == list(ref), q  # the column order of per_query.csv too
    assert query_metrics(run["q-neg"], qrels["q-neg"], ties=ties) == ours["q-neg"]


def test_mean_metrics_equals_numpy_mean_of_each_column():
    per_q = evaluate_run(*_random_case(seed=3), recall_ks=KS)
    means = mean_metrics(per_q)
    for k in per_q["q000"]:
        assert means[k] == float(np.mean([v[k] for v in per_q.values()])), k


# --------------------------------------------------------------------------- collapse / doc_key


def _hit(path: str, symbol: str | None, score: float, start: int = 1) -> Hit:
    return Hit(chunk_id=f"{path}:{start}-{start + 9}", path=path, symbol=symbol,
               start_line=start, end_line=start + 9, category="source", score=score,
               scores={"dense": None, "bm25": score, "rrf": None})


def _query(*labels: Label) -> GoldenQuery:
    return GoldenQuery(id="q", query="anything", tags=("symbol",), relevant=tuple(labels))


def test_collapse_keeps_first_chunk_of_each_path():
    hits = [_hit("a.py", "f", 0.9, 1), _hit("b.py", None, 0.8, 1),
            _hit("a.py", "g", 0.7, 20), _hit("a.py", "<module>", 0.6, 1),
            _hit("c.md", "Intro", 0.5, 1)]
    assert collapse(hits, None) == {"a.py": 0.9, "b.py": 0.8, "c.md": 0.5}
    # the first occurrence wins even if a later chunk of the path has a higher score
    assert collapse([_hit("a.py", "f", 0.1), _hit("a.py", "g", 0.9)], None) == {"a.py": 0.1}
    assert collapse([], None) == {}


def test_file_counts_once_in_metrics():
    # three chunks of the one relevant file: Recall@3 = 1, and b.py is at rank 2 not 4
    hits = [_hit("a.py", "f", 0.9), _hit("a.py", "g", 0.8), _hit("a.py", "h", 0.7),
            _hit("b.py", None, 0.6)]
    m = query_metrics(collapse(hits, None), {"a.py": 1, "b.py": 1}, recall_ks=(2,))
    assert m["recall_at_2"] == 1.0
    # nDCG@10 = (1 + 1/log2(3)) / (1 + 1/log2(3)) = 1 (both relevant at ranks 1, 2)
    assert m["ndcg_at_10"] == pytest.approx(1.0)


def test_symbol_labels_key_hits_as_path_hash_symbol():
    q = _query(Label("a.py", "Flask.url_for", 2), Label("b.py"))
    assert q.symbol_paths == {"a.py": {"Flask.url_for"}}
    assert q.qrels == {"a.py#Flask.url_for": 2, "b.py": 1}
    # the labelled symbol of the labelled path
    assert doc_key(_hit("a.py", "Flask.url_for", 1.0), q) == "a.py#Flask.url_for"
    # another symbol of the same path stays at path level (so it is not relevant)
    assert doc_key(_hit("a.py", "Flask.make_response", 1.0), q) == "a.py"
    assert doc_key(_hit("a.py", None, 1.0), q) == "a.py"
    # the same symbol name in another path is not the labelled one
    assert doc_key(_hit("c.py", "Flask.url_for", 1.0), q) == "c.py"
    # a path-level label: any chunk of b.py keys as the path
    assert doc_key(_hit("b.py", "helper", 1.0), q) == "b.py"
    # no query (negatives): always the path
    assert doc_key(_hit("a.py", "Flask.url_for", 1.0), None) == "a.py"


def test_symbol_collapse_and_metrics():
    q = _query(Label("a.py", "g", 2), Label("b.py"))
    hits = [_hit("a.py", "f", 0.9, 1), _hit("a.py", "g", 0.8, 20), _hit("a.py", "g", 0.75, 40),
            _hit("b.py", None, 0.7), _hit("a.py", None, 0.6, 60)]
    scores = collapse(hits, q)
    assert scores == {"a.py": 0.9, "a.py#g": 0.8, "b.py": 0.7}
    m = query_metrics(scores, q.qrels, recall_ks=(1, 3))
    # ranking a.py (not relevant), a.py#g (grade 2), b.py (grade 1)
    assert rank(scores) == ["a.py", "a.py#g", "b.py"]
    assert m["mrr"] == 0.5
    assert m["recall_at_1"] == 0.0
    assert m["recall_at_3"] == 1.0
    # DCG = 2/log2(3) + 1/log2(4); IDCG = 2/1 + 1/log2(3)
    assert m["ndcg_at_10"] == pytest.approx((2 / L2(3) + 1 / L2(4)) / (2 + 1 / L2(3)))


# --------------------------------------------------------------------------- eval.ties


def test_ties_pessimistic_puts_relevant_after_its_ties():
    from rag.eval.metrics import first_relevant_rank, query_metrics, rank

    scores = {"a": 3.0, "b": 2.0, "c": 2.0, "d": 2.0, "e": 1.0}
    rel = {"c": 1}
    assert rank(scores) == ["a", "b", "c", "d", "e"]
    assert rank(scores, rel, ties="doc_id") == ["a", "b", "c", "d", "e"]
    assert rank(scores, rel, ties="pessimistic") == ["a", "b", "d", "c", "e"]
    assert first_relevant_rank(rank(scores, rel, ties="pessimistic"), rel) == 4
    m_id = query_metrics(scores, rel, recall_ks=(3, 4), ndcg_k=10)
    m_pe = query_metrics(scores, rel, recall_ks=(3, 4), ndcg_k=10, ties="pessimistic")
    # doc_id: c is 3rd -> MRR 1/3, in the top 3, nDCG 1/log2(4)
    assert m_id["mrr"] == pytest.approx(1 / 3)
    assert m_id["recall_at_3"] == 1.0 and m_id["hit_at_3"] == 1.0
    assert m_id["ndcg_at_10"] == pytest.approx(0.5)
    # pessimistic: c is 4th (worst rank among b, c, d) -> MRR 1/4, out of the top 3
    assert m_pe["mrr"] == pytest.approx(0.25)
    assert m_pe["recall_at_3"] == 0.0 and m_pe["hit_at_3"] == 0.0
    assert m_pe["recall_at_4"] == 1.0
    assert m_pe["ndcg_at_10"] == pytest.approx(1 / math.log2(5))


def test_ties_pessimistic_with_graded_relevant_docs_tied_together():
    from rag.eval.metrics import query_metrics, rank

    scores = {"a": 1.0, "b": 1.0, "c": 1.0}
    rel = {"a": 1, "c": 2}
    # non-relevant first, then by ascending grade: the order that minimises every metric
    assert rank(scores, rel, ties="pessimistic") == ["b", "a", "c"]
    pe = query_metrics(scores, rel, recall_ks=(1, 2), ndcg_k=3, ties="pessimistic")
    assert pe["mrr"] == pytest.approx(0.5)
    assert pe["recall_at_1"] == 0.0 and pe["recall_at_2"] == pytest.approx(0.5)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert pe["ndcg_at_3"] == pytest.approx((1 / math.log2(3) + 2 / math.log2(4)) / ideal)
    di = query_metrics(scores, rel, recall_ks=(1, 2), ndcg_k=3)
    assert di["mrr"] == 1.0
    assert di["ndcg_at_3"] == pytest.approx((1 + 2 / math.log2(4)) / ideal)


def test_ties_pessimistic_equals_the_reference_rank_formula():
    """CoSQA's reference: rank = 1 + #docs scoring higher + #other docs scoring the same."""
    from rag.eval.metrics import evaluate_run, first_relevant_rank, rank

    rng = np.random.default_rng(0)
    run, qrels = {}, {}
    for q in range(200):
        scores = {f"d{i:03d}": float(rng.integers(0, 6)) for i in range(30)}
        target = f"d{int(rng.integers(0, 30)):03d}"
        run[f"q{q}"], qrels[f"q{q}"] = scores, {target: 1}
        s = scores[target]
        expected = 1 + sum(v > s for v in scores.values()) + sum(
            v == s for d, v in scores.items() if d != target)
        assert first_relevant_rank(rank(scores, qrels[f"q{q}"], ties="pessimistic"),
                                   qrels[f"q{q}"]) == expected
    per_q = evaluate_run(run, qrels, recall_ks=(10,), ties="pessimistic")
    per_d = evaluate_run(run, qrels, recall_ks=(10,))
    assert all(per_q[q]["mrr"] <= per_d[q]["mrr"] for q in run)
    assert any(per_q[q]["mrr"] < per_d[q]["mrr"] for q in run)


def test_ties_rules_agree_without_ties_and_unknown_rule_is_refused():
    from rag.eval.metrics import query_metrics, rank

    scores = {"a": 0.3, "b": 0.9, "c": 0.5}
    rel = {"a": 1}
    assert rank(scores, rel, ties="pessimistic") == rank(scores) == ["b", "c", "a"]
    assert query_metrics(scores, rel, ties="pessimistic") == query_metrics(scores, rel)
    with pytest.raises(ValueError, match="eval.ties"):
        rank(scores, rel, ties="optimistic")


def test_eval_ties_config_key():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    from rag.app.config import project_root, register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(project_root() / "conf"), version_base="1.3"):
        assert str(compose("config").eval.ties.value) == "doc_id"
        cfg = compose("config", overrides=["eval.ties=pessimistic"])
        assert cfg.eval.ties.value == "pessimistic"
        with pytest.raises(ConfigCompositionException):
            compose("config", overrides=["eval.ties=optimistic"])
