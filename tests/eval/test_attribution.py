"""Per-stage failure attribution (rag/eval/attribution.py): hand-built traces for every stage,
the evaluator's per-query ``lost_at`` / ``found_by`` and ``lost_at/<stage>`` counts on a scripted
retriever, ``changed_at``, and ``rag diff --changed-only`` (text and ``--json``) naming the
stage that changed each query."""

from __future__ import annotations

import json
import textwrap

import pytest

from rag.eval.attribution import (STAGES, Stage, StageTrace, attribute, changed_at,
                                  count_stages, row_columns, split_found_by, stage_metrics,
                                  trace_result)
from rag.search.pipeline import Hit, SearchResult

TOP_K = 2


def hit(path: str, score: float = 1.0) -> Hit:
    return Hit(chunk_id=f"{path}:1", path=path, symbol=None, start_line=1, end_line=5,
               category="code", score=score, scores={})


def cand(path: str) -> tuple[str, None, int, int, str]:
    return (path, None, 1, 5, f"{path}:1")


REL = "rel.py"  # the one relevant path of every scripted query


def result(ranked: list[str], *, hits: list[str] | None = None, weak: bool = False,
           dropped: int = 0, channels: dict[str, list[str]] | None = None,
           first: list[str] | None = None) -> SearchResult:
    """A SearchResult as the pipeline would report it (``hits`` default: the first TOP_K of
    ``ranked``); ``channels`` / ``first`` None = not reported (a run file, a service)."""
    r = [hit(p, 1.0 - i / 10) for i, p in enumerate(ranked)]
    return SearchResult(
        hits=r[:TOP_K] if hits is None else [hit(p) for p in hits], ranked=r, route="hybrid",
        top_dense=0.5, dropped=dropped, weak_match=weak, timings_ms={"total": 1.0},
        channel_candidates=None if channels is None else
        {n: [cand(p) for p in ps] for n, ps in channels.items()},
        first_stage_top=None if first is None else [cand(p) for p in first])


# query id -> (scripted result, expected lost_at, expected found_by, expected returned_as)
SCRIPT = {
    "q-returned": (result([REL, "x.py"], channels={"bm25": [REL, "x.py"], "dense": ["x.py"]},
                          first=[REL, "x.py"]), "returned", "bm25", "returned"),
    "q-weak": (result(["x.py", REL], weak=True, channels={"dense": ["x.py", REL]},
                      first=["x.py", REL]), "abstained", "dense", "weak"),
    "q-dropped": (result([REL, "x.py"], hits=[], dropped=2, channels={"dense": [REL]},
                         first=[REL, "x.py"]), "abstained", "dense", "dropped"),
    # in the first stage's top 2, then a reranker put two others above it
    "q-reranked": (result(["x.py", "y.py", REL], channels={"dense": [REL], "bm25": ["x.py"]},
                          first=[REL, "x.py"]), "reranked_out", "dense", "returned"),
    # both channels had it, fusion ranked it third (first_stage_top is cut to top_k)
    "q-fused": (result(["x.py", "y.py", REL], channels={"dense": ["x.py", "y.py", REL],
                                                        "bm25": [REL]},
                       first=["x.py", "y.py", REL]), "fused_out", "dense+bm25", "returned"),
    "q-nocand": (result(["x.py", "y.py"], channels={"dense": ["x.py", "y.py"], "bm25": ["y.py"]},
                        first=["x.py", "y.py"]), "not_in_candidates", "", "returned"),
    # a retriever that reports no channels: a miss is unknown, never guessed ...
    "q-unknown": (result(["x.py", "y.py", REL]), "unknown", "", "returned"),
    # ... but what it returned is still returned
    "q-unknown-hit": (result([REL, "y.py"]), "returned", "", "returned"),
}


def relevant(c) -> bool:
    return c.path == REL


@pytest.mark.parametrize("qid", list(SCRIPT))
def test_trace_of_each_stage(qid):
    res, lost_at, found_by, _ = SCRIPT[qid]
    cols = row_columns(trace_result(res, top_k=TOP_K, relevant=relevant))
    assert cols == {"lost_at": lost_at, "found_by": found_by}


def test_attribute_reads_only_what_was_reported():
    t = lambda **kw: StageTrace(**{"in_final_top_k": False, "delivered": False,  # noqa: E731
                                   "channels": (), "in_first_stage_top_k": None, **kw})
    assert attribute(t(in_final_top_k=True, delivered=True)) is Stage.RETURNED
    assert attribute(t(in_final_top_k=True, delivered=False)) is Stage.ABSTAINED
    assert attribute(t(channels=None)) is Stage.UNKNOWN
    assert attribute(t(channels=())) is Stage.NOT_IN_CANDIDATES
    # channels reported, the first stage's top not: unknown, not fused_out
    assert attribute(t(channels=("dense",))) is Stage.UNKNOWN
    assert attribute(t(channels=("dense",), in_first_stage_top_k=True)) is Stage.RERANKED_OUT
    assert attribute(t(channels=("dense",), in_first_stage_top_k=False)) is Stage.FUSED_OUT
    # a relevant chunk ranked just below top_k is not returned
    res = result(["x.py", "y.py", REL], channels={"bm25": ["x.py", "y.py", REL]},
                 first=["x.py", "y.py"])
    assert trace_result(res, top_k=2, relevant=relevant).in_final_top_k is False
    assert trace_result(res, top_k=3, relevant=relevant).in_final_top_k is True
    assert split_found_by("dense+bm25") == ["dense", "bm25"]
    assert split_found_by("") == [] and split_found_by(float("nan")) == []


def test_stage_metrics_count_every_stage_overall_and_per_tag():
    rows = [{"lost_at": "returned", "tags": "prose"}, {"lost_at": "fused_out", "tags": "prose,docs"},
            {"lost_at": "fused_out", "tags": "symbol"}, {"lost_at": "unknown", "tags": ""},
            {"lost_at": "", "tags": "prose"}]  # an old row's empty cell: not counted
    m = stage_metrics(rows, ["prose", "docs", "symbol", "none"])
    assert {k: v for k, v in m.items() if not k.startswith("tag.")} == {
        "lost_at/not_in_candidates": 0.0, "lost_at/fused_out": 2.0, "lost_at/reranked_out": 0.0,
        "lost_at/abstained": 0.0, "lost_at/returned": 1.0, "lost_at/unknown": 1.0}
    assert m["tag.prose.lost_at/returned"] == 1.0 and m["tag.prose.lost_at/fused_out"] == 1.0
    assert m["tag.docs.lost_at/fused_out"] == 1.0 and m["tag.docs.lost_at/returned"] == 0.0
    assert m["tag.symbol.lost_at/fused_out"] == 1.0
    assert all(m[f"tag.none.lost_at/{s}"] == 0.0 for s in STAGES)
    assert len(m) == len(STAGES) * 5
    assert count_stages(["abstained", "abstained", "bogus"])["abstained"] == 2


@pytest.mark.parametrize("a,b,ra,rb,want", [
    ("returned", "returned", 1, 1, None),
    ("returned", "fused_out", 1, 12, ("fused_out", "worse")),  # B lost it earlier
    ("returned", "not_in_candidates", 1, None, ("not_in_candidates", "worse")),
    ("not_in_candidates", "returned", None, 2, ("not_in_candidates", "better")),
    ("abstained", "returned", 1, 1, ("abstained", "better")),  # same rank, now delivered
    ("reranked_out", "abstained", 5, 2, ("reranked_out", "better")),
    ("returned", "returned", 1, 3, ("returned", "worse")),  # same stage: by the rank
    ("returned", "returned", 3, 1, ("returned", "better")),
    ("fused_out", "fused_out", 12, None, ("fused_out", "worse")),
    ("fused_out", "fused_out", None, 12, ("fused_out", "better")),
    ("unknown", "returned", None, 1, ("unknown", "better")),
    ("", "returned", 2, 2, ("unknown", "changed")),  # a row without attribution
    ("returned", "unknown", 1, None, ("unknown", "worse")),
])
def test_changed_at(a, b, ra, rb, want):
    assert changed_at(a, b, ra, rb) == want


GOLDEN_QUERIES = "corpus: scripted\nqueries:\n" + "".join(
    f"  - id: {q}\n    query: question {i}\n    tags: [{'prose' if i % 2 else 'symbol'}]\n"
    f"    relevant:\n      - path: {REL}\n" for i, q in enumerate(SCRIPT))
GOLDEN_NEGATIVES = textwrap.dedent("""\
    corpus: scripted
    negatives:
      - id: neg-1
        query: off topic
        tags: [off_topic]
    """)


class Scripted:
    """A user's retriever that answers each query with its scripted result."""

    kind = "python"
    top_k = TOP_K

    def retrieve(self, query, *, depth):
        if query.id == "neg-1":
            return result(["x.py"], hits=[], dropped=1)
        return SCRIPT[query.id][0]


def test_evaluator_writes_lost_at_and_found_by_and_counts_them(tmp_path):
    from rag.eval.evaluate import evaluate
    from rag.eval.golden import load_golden

    (tmp_path / "queries.yaml").write_text(GOLDEN_QUERIES)
    (tmp_path / "negatives.yaml").write_text(GOLDEN_NEGATIVES)
    golden = load_golden(tmp_path)
    out = evaluate(Scripted(), golden, recall_ks=(1, 2), ndcg_k=2, depth=10, progress=False)
    rows = {r["query_id"]: r for r in out.per_query if r["kind"] == "positive"}
    for qid, (_, lost_at, found_by, returned) in SCRIPT.items():
        assert (rows[qid]["lost_at"], rows[qid]["found_by"], rows[qid]["returned_as"]) == \
            (lost_at, found_by, returned), qid
        # abstained + returned are exactly the positives with a relevant unit in the top k
        assert rows[qid]["supported"] == (lost_at in ("abstained", "returned"))
    m = out.metrics
    assert {s: m[f"lost_at/{s}"] for s in STAGES} == {
        "not_in_candidates": 1.0, "fused_out": 1.0, "reranked_out": 1.0, "abstained": 2.0,
        "returned": 2.0, "unknown": 1.0}
    # tags alternate symbol (even position) / prose (odd position) over SCRIPT's order
    prose = [q for i, q in enumerate(SCRIPT) if i % 2]
    assert {s: m[f"tag.prose.lost_at/{s}"] for s in STAGES} == count_stages(
        SCRIPT[q][1] for q in prose)
    assert sum(m[f"tag.symbol.lost_at/{s}"] for s in STAGES) == len(SCRIPT) - len(prose)


# --- rag diff --changed-only -----------------------------------------------------------------

HEADER = "query_id,kind,tags,returned_as,first_relevant_rank,lost_at,found_by,top_hits,mrr\n"
ROWS_A = {
    "q-same": "positive,prose,returned,1,returned,dense+bm25,a.py:1,1.0",
    "q-fused": "positive,prose,returned,1,returned,dense+bm25,a.py:1,1.0",
    "q-nocand": "positive,symbol,returned,2,returned,bm25,b.py:1 | a.py:1,0.5",
    "q-rerank": "positive,\"prose,docs\",returned,1,returned,dense,c.py:1,1.0",
    "q-better": "positive,prose,empty,,not_in_candidates,,,0.0",
    "q-weak": "positive,docs,returned,1,returned,dense,d.py:1,1.0",
    "q-floor": "positive,docs,weak,1,abstained,dense,d.py:1,1.0",
}
ROWS_B = {
    "q-same": ROWS_A["q-same"],
    "q-fused": "positive,prose,returned,12,fused_out,dense,x.py:1,0.0833",
    "q-nocand": "positive,symbol,empty,,not_in_candidates,,,0.0",
    "q-rerank": "positive,\"prose,docs\",returned,4,reranked_out,dense,y.py:1,0.25",
    "q-better": "positive,prose,returned,1,returned,bm25,a.py:1,1.0",
    "q-weak": "positive,docs,weak,1,abstained,dense,d.py:1,1.0",
    "q-floor": "positive,docs,dropped,1,abstained,dense,,1.0",  # weak -> dropped: same stage
}
# the stage that changed each changed query, and how
CHANGED = {"q-fused": ("fused_out", "worse"), "q-nocand": ("not_in_candidates", "worse"),
           "q-rerank": ("reranked_out", "worse"), "q-better": ("not_in_candidates", "better"),
           "q-weak": ("abstained", "worse"), "q-floor": ("abstained", "changed")}


def _csv(rows: dict[str, str]) -> str:
    return HEADER + "".join(f"{q},{r}\n" for q, r in rows.items()) + \
        "neg-1,negative,off_topic,dropped,,,,,\n"


@pytest.fixture
def two_rows(tmp_path):
    from rag.ledger.mlflow_store import Ledger

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, tmp_path / "art")
    ids = [ledger.log_row(experiment="rag-shop", run_name=name, params={}, metrics={"mrr": 0.5},
                          tags={"corpus": "shop", "golden_fingerprint": "g1"},
                          artifacts={"per_query.csv": _csv(rows)})
           for name, rows in (("a", ROWS_A), ("b", ROWS_B))]
    return uri, ids


@pytest.mark.slow
def test_rag_diff_changed_only_names_the_stage_of_each_changed_query(two_rows, capsys):
    from rag.app.cli import main

    uri, (a, b) = two_rows
    assert main(["diff", a, b, "--changed-only", "--tracking-uri", uri]) == 0  # piped: plain
    out = capsys.readouterr().out
    assert "\x1b[" not in out and "┃" not in out  # no rich table, no colour, when piped
    assert "7 shared positive queries: B wins 1, loses 3, ties 3" in out
    assert f"{len(CHANGED)} changed" in out
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("changed queries"))
    table = {}
    for ln in lines[start + 2:]:
        if not ln.strip():
            break
        table[ln.split()[0]] = ln
    assert set(table) == set(CHANGED)  # q-same is not listed
    for q, (stage, change) in CHANGED.items():
        assert table[q].rstrip().endswith(f"{change} at {stage}"), table[q]
    # the cells say what the caller got where it was not a normal answer
    assert "abstained (weak)" in table["q-floor"] and "abstained (dropped)" in table["q-floor"]
    # per-stage totals of both rows, and per tag the stages that lost / won queries
    stage_rows = {ln.split()[0]: ln.split()[1:] for ln in lines
                  if ln.split() and ln.split()[0] in STAGES and len(ln.split()) == 4}
    assert stage_rows["returned"] == ["5", "2", "-3"]
    assert stage_rows["fused_out"] == ["0", "1", "+1"]
    assert stage_rows["abstained"] == ["1", "2", "+1"]
    docs = next(ln for ln in lines if ln.startswith("docs "))
    assert "reranked_out 1, abstained 1" in docs  # worse at, in pipeline order

    assert main(["diff", a, b, "--changed-only", "--json", "--tracking-uri", uri]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["changed_only"] is True and s["changed"] == len(CHANGED)
    got = {d["query_id"]: d for d in s["per_query"]}
    assert {q: (d["stage"], d["change"]) for q, d in got.items()} == CHANGED
    # lists, never joined strings
    assert got["q-rerank"]["tags"] == ["prose", "docs"]
    assert got["q-fused"]["found_by_a"] == ["dense", "bm25"] and got["q-fused"]["found_by_b"] == ["dense"]
    assert got["q-nocand"]["top_hits_a"] == ["b.py:1", "a.py:1"] and got["q-nocand"]["top_hits_b"] == []
    assert s["lost_at_a"]["returned"] == 5 and s["lost_at_b"]["returned"] == 2
    assert s["changed_at"] == {"not_in_candidates": {"worse": 1, "better": 1},
                               "fused_out": {"worse": 1}, "reranked_out": {"worse": 1},
                               "abstained": {"worse": 1, "changed": 1}}
    assert s["per_tag"]["docs"]["changed_at"] == {"reranked_out": {"worse": 1},
                                                  "abstained": {"worse": 1, "changed": 1}}
    assert isinstance(s["negatives_changed"], list)

    # without --changed-only every shared positive is listed
    assert main(["diff", a, b, "--json", "--tracking-uri", uri]) == 0
    assert len(json.loads(capsys.readouterr().out)["per_query"]) == len(ROWS_A)


@pytest.mark.slow
def test_rag_diff_rich_tables_on_a_terminal(two_rows, capsys):
    from rag.app.cli import main

    uri, (a, b) = two_rows
    assert main(["diff", a, b, "--changed-only", "--color", "always", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "┃" in out or "│" in out  # a rich table
    assert "worse at fused_out" in out and "q-same" not in out


def test_a_row_logged_before_attribution_shows_unknown():
    import pandas as pd

    from rag.ledger.diff import diff_per_query

    old = pd.DataFrame({"query_id": ["q1", "q2"], "tags": "prose",
                        "first_relevant_rank": [1.0, 3.0], "top_hits": ""}).set_index("query_id")
    new = old.copy()
    new["lost_at"] = ["returned", "returned"]
    new.loc["q2", "first_relevant_rank"] = 1.0
    d = {x.query_id: x for x in diff_per_query(old, new)}
    assert (d["q1"].stage, d["q1"].change) == ("unknown", "changed")  # stage '' -> returned
    assert (d["q2"].stage, d["q2"].change) == ("unknown", "better")
