"""rag gate: margins, the paired test and Holm on hand-made per-query tables (p-values against
an exact enumeration of the sign flips), exit codes 0 / 1 / 2 of the command, JUnit XML and the
markdown summary; real rows of the tests/fixtures/gate corpus; and the gate `make test` runs:
a fresh run of the fixture's pinned condition against its expected.yaml."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rag.app.gate import (DROP_NOT_SIGNIFICANT, EXIT_CANNOT_COMPARE, EXIT_INCONCLUSIVE,
                      EXIT_PASS, EXIT_REGRESSION, IMPROVEMENT, INCONCLUSIVE, REGRESSION, RISE_NOT_SIGNIFICANT, WITHIN_MARGIN, Check,
                      GateError, GateOptions, Side, compare, judge, merge_overrides,
                      per_query_values, render_junit, render_markdown)

PROJECT = Path(__file__).resolve().parents[2]
FIXTURE = PROJECT / "tests" / "fixtures" / "gate"
N_RESAMPLES = GateOptions().n_resamples
METRIC_COLS = ("mrr", "recall_at_8", "ndcg_at_10", "answer_support")


def exact_p(d) -> float:
    """The exact two-sided sign-flip p-value of mean(d): the share of all 2^n sign vectors whose
    |mean| is at least the observed one (the reference the gate's Monte Carlo p estimates)."""
    d = np.asarray(d, dtype=float)
    if not d.any():
        return 1.0
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=d.size)))
    return float(np.mean(np.abs(signs @ d) / d.size >= abs(d.mean()) - 1e-12))


def close_to_exact(p: float, d) -> bool:
    """The gate's p (N_RESAMPLES random flips, add-one smoothed) within 4 standard errors of
    the exact p."""
    pe = exact_p(d)
    return abs(p - pe) <= 4 * math.sqrt(pe * (1 - pe) / N_RESAMPLES) + 1 / (N_RESAMPLES + 1)


# --- hand-made per-query tables ------------------------------------------------------------

def table(n: int = 10, tags=None, **cols) -> pd.DataFrame:
    """A per-query table of positives q0..q{n-1} as the gate reads it (indexed by query id):
    every metric 1.0, returned at rank 1, unless ``cols`` gives a column's values."""
    ids = [f"q{i}" for i in range(n)]
    data = {"kind": "positive", "tags": tags or ["prose"] * n, "returned_as": "returned",
            "first_relevant_rank": 1.0, "lost_at": "returned",
            **{c: [1.0] * n for c in METRIC_COLS}}
    data.update(cols)
    return pd.DataFrame(data, index=pd.Index(ids, name="query_id"))


def side(frame, label="row b", golden="g1", corpus="shop", metrics=None, kind="row") -> Side:
    return Side(label=label, kind=kind, ref=label, corpus=corpus, golden_fingerprint=golden,
                corpus_fingerprint=None, overrides=[], metrics=metrics or {}, per_query=frame)


def test_margin_and_paired_test_both_decide_with_holm_across_the_metrics():
    base = table()
    cand = table(mrr=[0.5] * 10,                      # -0.5 on every query
                 recall_at_8=[0.0] + [1.0] * 9,       # -1 on one query
                 ndcg_at_10=[0.995] * 10,             # a significant move inside the margin
                 answer_support=[0.0] * 4 + [1.0] * 6)  # -1 on four queries
    r = compare(side(base, "row a"), side(cand))
    c = {x.metric: x for x in r.checks}
    assert list(c) == ["mrr", "recall_at_8", "ndcg_at_10", "answer_support_rate"]
    d = {"mrr": [-0.5] * 10, "recall_at_8": [-1.0] + [0.0] * 9,
         "ndcg_at_10": [-0.005] * 10, "answer_support_rate": [-1.0] * 4 + [0.0] * 6}
    # by hand: exact p = 2/2^10, 1, 2/2^10, 2/2^4
    assert [exact_p(d[m]) for m in c] == [2 / 1024, 1.0, 2 / 1024, 2 / 16]
    for m, x in c.items():
        assert x.n == 10 and x.baseline == 1.0
        assert x.delta == pytest.approx(float(np.mean(d[m])))
        assert close_to_exact(x.p, d[m]), (m, x.p)
        assert x.ci_low <= x.delta + 1e-12 and x.delta - 1e-12 <= x.ci_high
    assert (c["mrr"].ci_low, c["mrr"].ci_high) == pytest.approx((-0.5, -0.5))  # constant d
    assert c["recall_at_8"].p == 1.0  # one nonzero difference: every flip is as extreme
    # Holm over the 4 paired checks: smallest p x4, next x3 (but never below the previous)
    p = {m: x.p for m, x in c.items()}
    assert c["mrr"].p_holm == pytest.approx(4 * p["mrr"])
    assert c["ndcg_at_10"].p_holm == pytest.approx(max(4 * p["mrr"], 3 * p["ndcg_at_10"]))
    assert c["answer_support_rate"].p_holm == pytest.approx(max(4 * p["mrr"],
                                                                2 * p["answer_support_rate"]))
    assert c["recall_at_8"].p_holm == 1.0
    assert {m: x.verdict for m, x in c.items()} == {
        "mrr": REGRESSION,                        # -0.5 > margin, p (Holm) ~ 0.008
        # -0.1 > margin, p = 1: not shown, and its CI reaches past -0.01: undecided
        "recall_at_8": INCONCLUSIVE,
        "ndcg_at_10": WITHIN_MARGIN,              # significant, but -0.005 < margin 0.01
        "answer_support_rate": INCONCLUSIVE}      # -0.4, p (Holm) ~ 0.25, CI reaches -1
    assert r.exit_code == EXIT_REGRESSION and [x.metric for x in r.regressions] == ["mrr"]
    # the queries that would decide one: n (half-width / |gain + margin|)^2, by hand from
    # the check's own CI, and never fewer than one more than it has: recall_at_8's CI
    # [-0.3, 0] (bootstrap) gives 10 (0.15 / 0.09)^2 = 27.8 -> 28; answer support's CI
    # [-0.7, -0.1] lies wholly past -0.01 (only the test keeps it undecided): no CI-based
    # count, the text says why
    r8, a = c["recall_at_8"], c["answer_support_rate"]
    assert r8.queries_needed == max(11, math.ceil(10 * ((r8.ci_high - r8.ci_low) / 2
                                                        / abs(-0.1 + 0.01)) ** 2))
    assert a.queries_needed is None and a.ci_high < -0.01
    # a wider margin for mrr alone leaves the two undecided checks: inconclusive (exit 4)
    wide = compare(side(base, "row a"), side(cand), GateOptions(margins=(("mrr", 0.6),)))
    assert wide.checks[0].verdict == WITHIN_MARGIN
    assert wide.exit_code == EXIT_INCONCLUSIVE and wide.verdict == "inconclusive"
    assert "## rag gate: INCONCLUSIVE" in render_markdown(wide)
    assert "Inconclusive (neither a regression nor ruled out): " in render_markdown(wide)
    assert "more paired queries" in render_markdown(wide)
    junit = render_junit(wide)
    assert junit.count("<skipped") == 2 and 'skipped="2"' in junit and "<failure" not in junit
    # margins wide enough to rule the drops out: pass
    calm = compare(side(base, "row a"), side(cand), GateOptions(margin=1.0))
    assert calm.exit_code == EXIT_PASS


def test_holm_and_margins_by_hand():
    def chk(metric, delta, p=None, lower=False, margin=0.01):
        return Check(metric=metric, tag=None, baseline=0.5, candidate=0.5 + delta, delta=delta,
                     margin=margin, lower_is_better=lower, n=None if p is None else 30, p=p)

    checks = [chk("a", -0.10, 0.01), chk("b", -0.10, 0.04), chk("c", +0.10, 0.03),
              chk("d", -0.10, 0.5), chk("margin_only_drop", -0.02), chk("margin_only_flat", -0.01),
              chk("latency_p50_ms", +5.0, 0.001, lower=True, margin=1.0)]
    out = {c.metric: c for c in judge(checks, GateOptions())}
    # Holm over the 5 paired p's [0.01, 0.04, 0.03, 0.5, 0.001], by hand: sorted 0.001 x5 =
    # 0.005, 0.01 x4 = 0.04, 0.03 x3 = 0.09, 0.04 x2 = 0.08 -> 0.09 (monotone), 0.5 x1 = 0.5
    assert {m: c.p_holm for m, c in out.items()} == pytest.approx({
        "a": 0.04, "b": 0.09, "c": 0.09, "d": 0.5, "margin_only_drop": None,
        "margin_only_flat": None, "latency_p50_ms": 0.005})
    assert {m: c.verdict for m, c in out.items()} == {
        "a": REGRESSION,
        "b": DROP_NOT_SIGNIFICANT,     # p 0.04 < 0.05 alone, 0.09 after Holm
        "c": RISE_NOT_SIGNIFICANT,
        "d": DROP_NOT_SIGNIFICANT,
        "margin_only_drop": REGRESSION,  # no test: the margin decides
        "margin_only_flat": WITHIN_MARGIN,  # exactly the margin is allowed
        "latency_p50_ms": REGRESSION}  # lower is better: +5 ms beyond 1 ms
    # at alpha 0.1 b and c pass Holm
    loose = {c.metric: c.verdict for c in judge(checks, GateOptions(alpha=0.1))}
    assert loose["b"] == REGRESSION and loose["c"] == IMPROVEMENT


def test_pairing_is_by_query_id_on_the_shared_positives():
    base = table()
    cand = table(answer_support=[0.0] * 4 + [1.0] * 6, mrr=[0.5] * 10)
    cand = cand.drop(index="q0").iloc[::-1]  # another order, one query fewer ...
    cand.loc["q-extra"] = cand.iloc[0]       # ... and one the baseline lacks
    cand.loc["q-extra", "mrr"] = 0.0
    r = compare(side(base, "row a"), side(cand))
    c = {x.metric: x for x in r.checks}
    assert c["answer_support_rate"].n == 9
    assert c["answer_support_rate"].delta == pytest.approx(-3 / 9)  # q1..q3 of q1..q9
    assert c["mrr"].candidate == pytest.approx(0.5) and c["mrr"].n == 9
    assert "9 positives paired (10 in row a, 10 in row b)" in r.notes


def test_lower_is_better_and_improvements():
    base = table()
    dropped = table(returned_as=["dropped"] * 10, lost_at=["abstained"] * 10,
                    answer_support=[0.0] * 10)
    assert per_query_values(dropped, "dropped_rate").tolist() == [1.0] * 10
    opts = GateOptions(metrics=("dropped_rate", "answer_support_rate"))
    worse = compare(side(base, "row a"), side(dropped), opts)
    assert [(c.metric, c.delta, c.verdict) for c in worse.checks] == [
        ("dropped_rate", 1.0, REGRESSION), ("answer_support_rate", -1.0, REGRESSION)]
    assert worse.lost_at_baseline["returned"] == 10 and worse.lost_at_candidate["abstained"] == 10
    assert {q["query_id"]: (q["stage"], q["change"]) for q in worse.changed} == \
        {f"q{i}": ("abstained", "worse") for i in range(10)}
    better = compare(side(dropped, "row a"), side(base), opts)
    assert better.exit_code == EXIT_PASS
    assert [c.metric for c in better.improvements] == ["dropped_rate", "answer_support_rate"]
    # booleans as the per_query.csv writes them count 1/0
    t = table(answer_support=["True", "False"] + ["True"] * 8)
    assert per_query_values(t, "answer_support_rate").tolist() == [1.0, 0.0] + [1.0] * 8
    assert per_query_values(t, "no_such_metric") is None


def test_per_tag_catches_a_drop_the_headline_hides():
    tags = ["prose"] * 8 + ["symbol"] * 8
    base = table(16, tags, mrr=[1.0] * 8 + [0.5] * 8)
    cand = table(16, tags, mrr=[0.0] * 8 + [1.0] * 8)  # prose -1 each, symbol +0.5 each
    opts = GateOptions(metrics=("mrr",), max_severe_drops=-1)  # the per-query guard off here
    head = compare(side(base, "row a"), side(cand), opts)
    d = [-1.0] * 8 + [0.5] * 8
    assert head.checks[0].delta == pytest.approx(-0.25) and exact_p(d) > 0.1
    assert close_to_exact(head.checks[0].p, d)
    # a drop the test cannot show, whose CI reaches past the margin: undecided, not a pass
    assert head.exit_code == EXIT_INCONCLUSIVE and head.checks[0].verdict == INCONCLUSIVE
    assert head.checks[0].queries_needed > 16
    # with it (the default): the 8 prose queries that went from rank 1 to lost fail the gate
    # by name, though the mean's drop is not significant
    guarded = compare(side(base, "row a"), side(cand), GateOptions(metrics=("mrr",)))
    assert guarded.exit_code == EXIT_REGRESSION and guarded.guard_failed
    assert [d["query_id"] for d in guarded.severe_drops] == [f"q{i}" for i in range(8)]
    assert "Severe drops: 8 queries" in render_markdown(guarded)
    assert 'name="severe_drops"' in render_junit(guarded) and "<failure" in render_junit(guarded)
    # 8 allowed: the guard passes, and the mean's undecided drop remains (a drop of 0.5,
    # symbol 0.5 -> 1 the other way, is none)
    assert compare(side(base, "row a"), side(cand), GateOptions(
        metrics=("mrr",), max_severe_drops=8)).exit_code == EXIT_INCONCLUSIVE
    tagged = compare(side(base, "row a"), side(cand),
                     GateOptions(metrics=("mrr",), per_tag=True, max_severe_drops=-1))
    c = {x.metric: x for x in tagged.checks}
    assert list(c) == ["mrr", "tag.prose.mrr", "tag.symbol.mrr"]
    assert (c["tag.prose.mrr"].n, c["tag.prose.mrr"].delta) == (8, -1.0)
    assert close_to_exact(c["tag.prose.mrr"].p, [-1.0] * 8)  # exact 2/256
    # one Holm family of 3: the two p ~ 0.008 tests x3 and x2
    assert c["tag.prose.mrr"].p_holm < 0.05 and c["tag.symbol.mrr"].p_holm < 0.05
    assert (c["tag.prose.mrr"].verdict, c["tag.symbol.mrr"].verdict) == (REGRESSION, IMPROVEMENT)
    assert tagged.exit_code == EXIT_REGRESSION
    only = compare(side(base, "row a"), side(cand),
                   GateOptions(metrics=("mrr",), per_tag=True, tags=("symbol",),
                               max_severe_drops=-1))
    assert [x.metric for x in only.checks] == ["mrr", "tag.symbol.mrr"]
    assert only.exit_code == EXIT_INCONCLUSIVE  # the headline drop is still undecided
    with pytest.raises(GateError, match="no positive query has tag"):
        compare(side(base, "row a"), side(cand),
                GateOptions(metrics=("mrr",), per_tag=True, tags=("nope",)))


def test_margin_only_per_tag_checks_the_rows_tag_metrics_and_names_what_it_cannot():
    head = {"mrr": 0.8}
    exp = side(None, "expected.yaml", metrics={**head, "tag.prose.mrr": 0.8}, kind="expected")
    row = side(None, metrics={"mrr": 0.8, "tag.prose.n_queries": 5.0, "tag.prose.mrr": 0.7,
                              "tag.docs.n_queries": 2.0, "tag.docs.mrr": 0.1})
    r = compare(exp, row, GateOptions(metrics=("mrr",), per_tag=True))
    assert [(c.metric, c.verdict, c.p) for c in r.checks] == [
        ("mrr", WITHIN_MARGIN, None), ("tag.prose.mrr", REGRESSION, None)]
    assert r.checks[1].delta == pytest.approx(-0.1)
    assert "tag.docs.mrr: not gated (expected.yaml has neither per-query values nor the " \
        "metric)" in r.notes
    assert any(n.startswith("margin only: expected.yaml has no per-query table") for n in r.notes)
    assert r.test.startswith("margin only")


def test_sides_that_cannot_be_compared():
    t = table()
    with pytest.raises(GateError, match="row a is corpus 'shop', row b corpus 'flask'"):
        compare(side(t, "row a"), side(t, corpus="flask"))
    with pytest.raises(GateError, match="the golden sets differ"):
        compare(side(t, "row a"), side(t, golden="g2"))
    with pytest.raises(GateError, match="does not record its golden set fingerprint"):
        compare(side(t, "row a"), side(t, golden=None))
    with pytest.raises(GateError, match="share no positive query"):
        compare(side(t, "row a"), side(t.rename(index=lambda q: "x" + q)))
    with pytest.raises(GateError, match="has no metric 'nope'"):
        compare(side(t, "row a"), side(t), GateOptions(metrics=("nope",)))


def digested(frame: pd.DataFrame, changed=()) -> pd.DataFrame:
    """``frame`` with a judgement digest per query (``d-<id>``; ``x-<id>`` for ``changed``)."""
    return frame.assign(judgement_digest=[("x-" if q in changed else "d-") + q
                                          for q in frame.index])


def test_coverage_guard_names_the_queries_tags_and_metrics_the_candidate_lacks():
    tags = ["prose"] * 8 + ["api"] * 2
    base = digested(table(10, tags))
    # another golden set: q8, q9 (every "api" query) removed, q3 relabelled
    cand = digested(table(10, tags), changed=("q3",)).drop(index=["q8", "q9"])
    r = compare(side(base, "row a"), side(cand, golden="g2"), GateOptions(metrics=("mrr",)))
    assert r.coverage_lost == [{"kind": "query", "name": "q3", "why": "relabelled"},
                               {"kind": "query", "name": "q8", "why": "missing"},
                               {"kind": "query", "name": "q9", "why": "missing"},
                               {"kind": "tag", "name": "api", "why": "missing"}]
    # the means are identical on the 7 queries judged the same way; the guard alone fails it
    assert [(c.metric, c.n, c.verdict) for c in r.checks] == [("mrr", 7, WITHIN_MARGIN)]
    assert r.coverage_failed and r.exit_code == EXIT_REGRESSION and r.verdict == "regression"
    md = render_markdown(r)
    assert "Coverage lost: the candidate lacks what the baseline measured: 3 queries (q3 " \
        "relabelled, q8, q9), 1 tag (api)" in md
    assert "queries are paired where their judgements agree" in md
    root = ET.fromstring(render_junit(r))
    assert ("coverage", True, False) in cases(root)
    assert json.loads(json.dumps(r.as_json()))["coverage_lost"][1] == \
        {"kind": "query", "name": "q8", "why": "missing"}
    # switched off: listed, not failed
    off = compare(side(base, "row a"), side(cand, golden="g2"),
                  GateOptions(metrics=("mrr",), coverage=False))
    assert off.exit_code == EXIT_PASS and len(off.coverage_lost) == 4
    assert ("coverage", False, False) in cases(ET.fromstring(render_junit(off)))
    assert "Coverage (not gated, --no-coverage-guard): the candidate lacks" in render_markdown(off)
    # a gated metric the baseline has and the candidate lacks: by name, not "cannot compare"
    lacking = compare(side(base, "row a"), side(cand.drop(columns=["ndcg_at_10"])),
                      GateOptions(metrics=("mrr", "ndcg_at_10")))
    assert {"kind": "metric", "name": "ndcg_at_10", "why": "missing"} in lacking.coverage_lost
    assert [c.metric for c in lacking.checks] == ["mrr"] and lacking.exit_code == EXIT_REGRESSION
    # the same golden set, every query kept: nothing lost
    same = compare(side(base, "row a"), side(base), GateOptions(metrics=("mrr",)))
    assert same.coverage_lost == [] and same.exit_code == EXIT_PASS
    # other golden sets without digests cannot be paired: still refused
    with pytest.raises(GateError, match="no per-query judgement digests"):
        compare(side(table(), "row a"), side(table(), golden="g2"))


def test_superiority_passes_only_a_gain_shown_past_the_margin():
    base = table(12, mrr=[0.5] * 12)
    opts = GateOptions(metrics=("mrr",), superior=("mrr",), max_severe_drops=-1)
    # the same values: within the margin is no longer enough
    same = compare(side(base, "row a"), side(base), opts)
    assert same.checks[0].verdict == INCONCLUSIVE and same.exit_code == EXIT_INCONCLUSIVE
    assert same.checks[0].queries_needed is None and same.checks[0].mode == "superiority"
    assert "more queries would not show it better" in render_markdown(same)
    # a superiority check is inconclusive when no gain is shown, not "ruled out"
    assert "Inconclusive (not shown better): " in render_markdown(same)
    # +0.5 on every query: exact p = 2/2^12, shown better
    better = compare(side(base, "row a"), side(table(12, mrr=[1.0] * 12)), opts)
    assert better.checks[0].verdict == IMPROVEMENT and better.exit_code == EXIT_PASS
    # +0.5 on 2 of 12 queries: a gain past the margin (0.0833) that 12 pairs cannot show;
    # the 95% CI is [0, 0.1667] (bootstrap), half-width ~0.0833: about 12 * (0.0833 /
    # (0.0833 - 0.01))^2 ~ 15.5 pairs would clear +0.01
    some = compare(side(base, "row a"), side(table(12, mrr=[1.0] * 2 + [0.5] * 10)), opts)
    c = some.checks[0]
    assert c.verdict == INCONCLUSIVE and some.exit_code == EXIT_INCONCLUSIVE
    half = (c.ci_high - c.ci_low) / 2
    assert c.queries_needed == max(13, math.ceil(12 * (half / (c.delta - 0.01)) ** 2))
    # non-inferiority (the default) passes the same values
    assert compare(side(base, "row a"), side(base), GateOptions(
        metrics=("mrr",), max_severe_drops=-1)).exit_code == EXIT_PASS


def test_superiority_options_from_the_command_line():
    from rag.app.cli import build_parser
    from rag.app.gate import options_from_args

    parse = lambda *a: options_from_args(build_parser().parse_args(["gate", "A", "B", *a]))  # noqa: E731
    assert parse().superior == () and parse().coverage is True
    assert parse("--superior", "mrr").superior == ("mrr",)
    assert parse("--mode", "superiority").superior == GateOptions().metrics
    assert parse("--no-coverage-guard").coverage is False
    with pytest.raises(GateError, match="--superior 'nope' is not a gated metric"):
        parse("--superior", "nope")


def test_merge_overrides_drops_where_the_baseline_was_logged():
    assert merge_overrides(["search.mode=bm25", "x=1", "tracking.uri=sqlite:///a.db",
                            "tracking.run_name=base"], ["search.mode=dense"]) == \
        ["x=1", "search.mode=dense"]
    assert merge_overrides(["+a=1"], ["a=2", "b=3"]) == ["a=2", "b=3"]


# --- the command, on logged rows -----------------------------------------------------------

def csv_text(frame: pd.DataFrame) -> str:
    """``frame`` as a per_query.csv artifact (with one negative, as rag.app.run writes)."""
    out = frame.reset_index()
    out.loc[len(out)] = {"query_id": "neg-1", "kind": "negative", "tags": "off_topic",
                         "returned_as": "dropped"}
    return out.to_csv(index=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store for the module's command tests (creating one costs seconds): rows of corpus
    shop (golden set g1) with the same values, a drop, another corpus / golden set, none, a
    broken table; ``row`` logs another."""
    from rag.ledger.mlflow_store import Ledger

    tmp_path = tmp_path_factory.mktemp("gate_store")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, tmp_path / "art")

    def row(name, frame, corpus="shop", golden="g1", overrides=(), csv=None):
        tags = {"corpus": corpus, "hydra_overrides": json.dumps(list(overrides))}
        if golden:
            tags["golden_fingerprint"] = golden
        metrics = {m: float(frame[c].mean()) for m, c in (
            ("mrr", "mrr"), ("recall_at_8", "recall_at_8"), ("ndcg_at_10", "ndcg_at_10"),
            ("answer_support_rate", "answer_support"))}
        return ledger.log_row(experiment=f"rag-{corpus}", run_name=name, params={},
                              metrics=metrics, tags=tags,
                              artifacts={"per_query.csv": csv or csv_text(frame)})

    drop = table(mrr=[0.5] * 10, first_relevant_rank=[2.0] * 10)
    ids = {"base": row("base", table(), overrides=["search.mode=hybrid",
                                                   "tracking.uri=sqlite:///elsewhere.db"]),
           "same": row("same", table()), "drop": row("drop", drop),
           "flask": row("flask", table(), corpus="flask"), "g2": row("g2", table(), golden="g2"),
           "nofp": row("nofp", table(), golden=None),
           "tiny": row("tiny", table(), corpus="tinyshop"),
           "bad": row("bad", table(), csv="hello\nworld\n")}
    return uri, ids, ledger, row


def gate(args, capsys, tmp_path):
    """``rag gate ARGS --junit --markdown``: (exit code, stdout, stderr lines, JUnit root,
    markdown)."""
    from rag.app.cli import main

    junit, md = tmp_path / "out" / "gate.xml", tmp_path / "out" / "gate.md"
    for f in (junit, md):
        f.unlink(missing_ok=True)
    code = main(["gate", *args, "--junit", str(junit), "--markdown", str(md)])
    out, err = capsys.readouterr()
    return code, out, err.splitlines(), ET.parse(junit).getroot(), md.read_text()


def cases(root):
    """(name, has failure, has error) of every JUnit testcase."""
    return [(c.get("name"), c.find("failure") is not None, c.find("error") is not None)
            for c in root.iter("testcase")]


def test_a_candidate_that_stops_abstaining_fails_on_the_negatives(store, capsys, tmp_path):
    uri, ids, _, row = store

    def with_negatives(abstained):
        out = table().reset_index()
        out["abstained"] = ""  # a positive's cell is empty, as rag.app.run writes it
        for i, a in enumerate(abstained):
            out.loc[len(out)] = {"query_id": f"neg-{i}", "kind": "negative",
                                 "tags": "off_topic", "abstained": a,
                                 "returned_as": "dropped" if a else "returned"}
        return out.to_csv(index=False)

    base = row("abstains", table(), csv=with_negatives([True] * 10))
    same = row("abstains_too", table(), csv=with_negatives([True] * 10))
    lost = row("never_abstains", table(), csv=with_negatives([False] * 10))
    code, *_, root, md = gate([base, same, "--tracking-uri", uri], capsys, tmp_path)
    assert code == EXIT_PASS and ("abstain_rate", False, False) in cases(root)
    assert ("abstention_stopped", False, False) in cases(root)  # listed whenever it ran
    code, out, err, root, md = gate([base, lost, "--tracking-uri", uri], capsys, tmp_path)
    # the same positives, every one of 10 negatives now answered: paired over the negatives,
    # p = 2 / 2^10 (exact sign-flip) ~ 0.002, Holm x 5 checks < 0.05
    assert code == EXIT_REGRESSION, out
    assert ("abstain_rate", True, False) in cases(root)
    # ... and the abstention guard names the negatives it stopped abstaining on
    assert ("abstention_stopped", True, False) in cases(root)
    assert sum(f for _, f, _ in cases(root)) == 2
    assert "Abstention stopped: the candidate abstains on none of the shared negatives; the " \
        "baseline abstained on 10: `neg-0`" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| `abstain_rate`"))
    assert "| 1.0000 | 0.0000 | -1.0000 |" in line and "| 10 |" in line
    # three negatives: no paired test can be significant (exact p = 2 / 2^3 = 0.25), yet a
    # candidate that abstains on none of them fails, by the guard
    base3 = row("abstains3", table(), csv=with_negatives([True] * 3))
    lost3 = row("never3", table(), csv=with_negatives([False] * 3))
    code, out, err, root, md = gate([base3, lost3, "--tracking-uri", uri, "--json"], capsys,
                                    tmp_path)
    got = json.loads(out)
    assert code == EXIT_REGRESSION and got["abstention_stopped"] == ["neg-0", "neg-1", "neg-2"]
    assert got["regressions"] == [] and ("abstention_stopped", True, False) in cases(root)
    # one negative still abstained on: not stopped (the paired test decides the rest)
    some = row("some3", table(), csv=with_negatives([False, False, True]))
    code, out, err, root, md = gate([base3, some, "--tracking-uri", uri, "--json"], capsys,
                                    tmp_path)
    assert json.loads(out)["abstention_stopped"] == [] and code != EXIT_REGRESSION
    # the baseline abstained on neg-0 only, the candidate on neg-1 only: it still abstains
    moved_base = row("b_tff", table(), csv=with_negatives([True, False, False]))
    moved_cand = row("c_ftf", table(), csv=with_negatives([False, True, False]))
    code, out, *_ = gate([moved_base, moved_cand, "--tracking-uri", uri, "--json"], capsys,
                         tmp_path)
    assert json.loads(out)["abstention_stopped"] == []
    # off with --no-abstention-guard, and not run when abstain_rate is not gated
    for extra in (["--no-abstention-guard"], ["--metrics", "mrr"]):
        code, out, err, root, md = gate([base3, lost3, "--tracking-uri", uri, "--json", *extra],
                                        capsys, tmp_path)
        got = json.loads(out)
        assert got["abstention_stopped"] is None and code != EXIT_REGRESSION, extra
        assert "abstention_stopped" not in [n for n, *_ in cases(root)]
    # negatives that share no id are said, never silently left out
    renamed = row("renamed", table(), csv=with_negatives([False] * 10).replace("neg-", "other-"))
    code, out, err, root, md = gate([base, renamed, "--tracking-uri", uri], capsys, tmp_path)
    assert ("abstain_rate", False, False) not in cases(root)
    assert "abstain_rate: not gated" in md and "share no negative query" in md


@pytest.mark.slow
def test_exit_0_on_the_same_values_1_on_a_significant_drop(store, capsys, tmp_path):
    uri, ids, _, _ = store
    code, out, err, root, md = gate([ids["base"], ids["same"], "--tracking-uri", uri], capsys,
                                    tmp_path)
    assert code == EXIT_PASS and err == []
    assert out.startswith("rag gate: pass (0 regression(s), 0 improvement(s)); summary in ")
    # 4 metric checks, the per-query guard and the coverage guard (the rows' one negative
    # records no abstention: abstain_rate is noted, not gated)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "0", "0")
    positives_metrics = [m for m in GateOptions().metrics if m != "abstain_rate"]
    assert cases(root) == [(m, False, False)
                           for m in (*positives_metrics, "severe_drops", "coverage")]
    assert md.startswith("## rag gate: PASS\n")
    assert f"- baseline: row {ids['base'][:8]} (corpus shop, golden set g1)" in md
    assert md.count("| within margin |") == 4
    assert "the same row as the baseline" not in md
    # a row against itself passes, and says that it compared nothing
    code, out, err, root, md = gate([ids["base"], ids["base"][:8], "--tracking-uri", uri],
                                    capsys, tmp_path)
    assert code == EXIT_PASS
    assert (f"- candidate: row {ids['base'][:8]} (corpus shop) — **the same row as the "
            "baseline**: this gate compares nothing") in md

    code, out, err, root, md = gate([ids["base"][:8], ids["drop"], "--tracking-uri", uri],
                                    capsys, tmp_path)
    assert code == EXIT_REGRESSION and err == []
    # no query of the drop row loses 0.9 of its reciprocal rank: the per-query guard passes,
    # as its own test case
    assert (root.get("tests"), root.get("failures")) == ("6", "1")
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("6", "1", "0")
    assert ("mrr", True, False) in cases(root) and sum(f for _, f, _ in cases(root)) == 1
    failure = next(c for c in root.iter("testcase") if c.get("name") == "mrr").find("failure")
    assert "delta -0.5000" in failure.get("message") and failure.get("type") == REGRESSION
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["baseline"] == ids["base"] and props["candidate"] == ids["drop"]
    assert md.startswith("## rag gate: REGRESSION\n") and "Regressions: `mrr` -0.5000" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| `mrr`"))
    assert "| 1.0000 | 0.5000 | -0.5000 | 0.01 |" in row and "[-0.5000, -0.5000] | 10 |" in row
    assert "10 positives changed" in md and "returned 10" in md

    # --json: lists, not joined strings; the same verdicts
    from rag.app.cli import main

    assert main(["gate", ids["base"], ids["drop"], "--tracking-uri", uri, "--json"]) == 1
    j = json.loads(capsys.readouterr().out)
    assert j["verdict"] == "regression" and j["regressions"] == ["mrr"]
    assert isinstance(j["changed_queries"], list) and len(j["changed_queries"]) == 10
    assert j["changed_queries"][0]["tags"] == ["prose"]
    assert j["lost_at"]["candidate"]["returned"] == 10
    assert [c["metric"] for c in j["checks"]] == positives_metrics  # no negative abstains
    # and a margin that allows it passes
    assert main(["gate", ids["base"], ids["drop"], "--tracking-uri", uri, "--margin",
                 "mrr=0.5"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("cand,why", [
    ("flask", "cannot compare: row {base} is corpus 'shop', row {cand} corpus 'flask'"),
    ("g2", "cannot compare: the golden sets differ (row {base}: g1, row {cand}: g2)"),
    ("nofp", "cannot compare: row {cand} does not record its golden set fingerprint"),
    ("0123abcd", "no ledger row matches run id '0123abcd'"),
    ("bad", "per_query.csv of row {cand} is not a per-query table"),
])
def test_exit_2_when_the_rows_cannot_be_compared(store, capsys, tmp_path, cand, why):
    uri, ids, _, _ = store
    code, out, err, root, md = gate([ids["base"], ids.get(cand, cand), "--tracking-uri", uri],
                                    capsys, tmp_path)
    assert code == EXIT_CANNOT_COMPARE and out == ""
    want = why.format(base=ids["base"][:8], cand=ids.get(cand, cand)[:8])
    assert len(err) == 1 and err[0].startswith("error: ") and want in err[0], err
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("1", "0", "1")
    assert cases(root) == [("compare", False, True)]
    assert want in root.find(".//error").get("message")
    assert md.startswith("## rag gate: COULD NOT COMPARE\n") and want in md


def test_exit_2_for_bad_usage_and_a_missing_store(store, capsys, tmp_path):
    from rag.app.cli import main

    uri, ids, _, _ = store
    for argv, why in [([ids["base"]], "give one candidate row (or --fresh)"),
                      ([ids["base"], ids["same"], "--margin", "x"], "--margin 'x'"),
                      ([ids["base"], ids["same"], "--alpha", "1.5"], "--alpha must be between"),
                      ([ids["base"], ids["same"], "--metrics", "nope"], "has no metric 'nope'"),
                      ([ids["base"], "--fresh", "tracking.uri=sqlite:///x.db"],
                       "--fresh sets tracking.uri=sqlite:///x.db itself")]:
        assert main(["gate", *argv, "--tracking-uri", uri]) == EXIT_CANNOT_COMPARE, argv
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and why in err[0], (argv, err)
    missing = tmp_path / "none.db"
    assert main(["gate", "a", "b", "--tracking-uri", f"sqlite:///{missing}"]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not missing.exists()


def test_against_an_expectation_with_and_without_a_pinned_table(store, capsys, tmp_path):
    import yaml

    uri, ids, _, _ = store
    exp = tmp_path / "labels" / "expected.yaml"
    exp.parent.mkdir()
    exp.write_text(yaml.safe_dump({"corpus": "shop", "golden_fingerprint": "g1", "metrics": {
        "mrr": 1.0, "recall_at_8": 1.0, "ndcg_at_10": 1.0, "answer_support_rate": 1.0}}))
    # no per-query table pinned: the margin alone decides, and the output says so
    code, _, _, root, md = gate([str(exp), ids["drop"], "--tracking-uri", uri], capsys, tmp_path)
    assert code == EXIT_REGRESSION and "margin only" in md and "| — | — |" in md
    assert (root.get("tests"), root.get("failures")) == ("5", "1")  # 4 checks, coverage
    code, *_ = gate([str(exp.parent), ids["same"], "--tracking-uri", uri], capsys, tmp_path)
    assert code == EXIT_PASS  # the golden directory holding it names it too

    # the fixture's expectation pins its table: another golden set is refused
    code, _, err, *_ = gate([str(FIXTURE / "golden"), ids["tiny"], "--tracking-uri", uri],
                            capsys, tmp_path)
    assert code == 2 and "the golden sets differ" in err[0]
    # the pinned table carries each query's judgement digest: a candidate whose golden set
    # lost two queries is paired on the rest, and the coverage guard names the two
    import io

    import pandas as pd

    lines = (FIXTURE / "golden" / "expected_per_query.csv").read_text().splitlines(True)
    kept = [lines[0], *(ln for ln in lines[1:]
                        if not ln.startswith(("prose-bulk,", "prose-delivery,")))]
    assert len(kept) == len(lines) - 2
    _, _, _, row = store
    fewer_id = row("fewer", pd.read_csv(io.StringIO("".join(kept))), corpus="tinyshop",
                   golden="g-fewer", csv="".join(kept))
    code, _, _, root, md = gate([str(FIXTURE / "golden"), fewer_id, "--tracking-uri", uri],
                                capsys, tmp_path)
    assert code == EXIT_REGRESSION and ("coverage", True, False) in cases(root)
    assert "prose-bulk" in md and "prose-delivery" in md
    # a pinned table edited by hand is refused
    edited = tmp_path / "edited"
    shutil.copytree(FIXTURE / "golden", edited)
    pq = edited / "expected_per_query.csv"
    pq.write_text(pq.read_text().replace("prose-bulk,positive", "prose-bulk,positive ", 1))
    code, _, err, *_ = gate([str(edited), ids["same"], "--tracking-uri", uri], capsys, tmp_path)
    assert code == 2 and "does not match per_query_sha256" in err[0]


def test_what_names_an_expectation(tmp_path, monkeypatch):
    from rag.app.gate import is_expectation

    monkeypatch.chdir(tmp_path)
    (tmp_path / "0123abcd").write_text("x")  # a file named like a run id: still a run id
    (tmp_path / "notes").write_text("x")
    (tmp_path / "golden").mkdir()
    assert [is_expectation(r) for r in ("0123abcd", "notes", "golden", "x/expected.yaml",
                                        "e.yml", "./0123abcd", "0666d347")] == [
        False, True, True, True, True, True, False]


def test_a_path_that_holds_no_expectation_is_refused_as_such(store, capsys, tmp_path):
    uri, ids, _, _ = store
    empty = tmp_path / "golden-without-pin"
    empty.mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    for ref, why in [(str(empty), "a directory without an expected.yaml"),
                     (str(notes), "notes.txt: expected a mapping"),
                     (str(tmp_path / "gone"), "gone: cannot read")]:
        code, _, err, *_ = gate([ref, ids["same"], "--tracking-uri", uri], capsys, tmp_path)
        assert code == EXIT_CANNOT_COMPARE and len(err) == 1 and why in err[0], (ref, err)
        assert "no ledger row" not in err[0]


def test_fresh_runs_the_baselines_condition_plus_the_overrides_given(store, capsys, tmp_path):
    from rag.app.cli import build_parser
    from rag.app.gate import run as gate_run

    uri, ids, _, row = store
    asked = []

    def fresh(overrides, *, tracking_uri):
        asked.append((list(overrides), tracking_uri))
        row("fresh-1", table(mrr=[0.5] * 10))  # what the run would log
        return "fresh-1"

    parser = build_parser()
    args, rest = parser.parse_known_args(["gate", ids["base"], "--fresh", "search.mode=bm25",
                                          "--tracking-uri", uri])
    assert gate_run(args, rest, parser, fresh=fresh) == EXIT_REGRESSION
    # the baseline's condition with the override applied; where it was logged is dropped
    assert asked == [(["search.mode=bm25"], uri)]
    assert "## rag gate: REGRESSION" in capsys.readouterr().out


def test_unwritable_output_files_are_refused_before_anything_runs(store, capsys, tmp_path):
    from rag.app.cli import build_parser, main
    from rag.app.gate import run as gate_run

    uri, ids, _, _ = store
    good = tmp_path / "ok" / "gate.md"
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    for bad, why in [(str(tmp_path), "it is a directory"), ("/proc/nope/x", ""),
                     (str(plain / "gate.xml"), "")]:
        for flag, other in (("--junit", "--markdown"), ("--markdown", "--junit")):
            code = main(["gate", ids["base"], ids["drop"], "--tracking-uri", uri, flag, bad,
                         other, str(good)])
            err = capsys.readouterr().err.splitlines()
            assert code == EXIT_CANNOT_COMPARE, (bad, flag)
            assert len(err) == 1 and err[0].startswith(f"error: cannot write {bad}: "), err
            assert why in err[0] and "Traceback" not in err[0]
            assert not good.exists()  # nothing written when either cannot be
    # --fresh does not run either
    ran = []
    parser = build_parser()
    args, rest = parser.parse_known_args(["gate", ids["base"], "--fresh", "search.mode=bm25",
                                          "--tracking-uri", uri, "--junit", str(tmp_path)])
    assert gate_run(args, rest, parser, fresh=lambda *a, **k: ran.append(a)) == 2 and not ran
    assert capsys.readouterr().err.startswith(f"error: cannot write {tmp_path}: ")
    # an OSError while writing (a full device) is one error line too
    if Path("/dev/full").exists():
        for argv in ([ids["base"], ids["drop"]], [ids["base"], ids["flask"]]):
            code = main(["gate", *argv, "--tracking-uri", uri, "--junit", "/dev/full"])
            out, err = capsys.readouterr()
            assert code == EXIT_CANNOT_COMPARE and len(err.splitlines()) == 1, err
            assert "cannot write /dev/full: No space left on device" in err


def test_metric_options_are_checked_and_de_duplicated(store, capsys):
    from rag.app.cli import build_parser, main
    from rag.app.gate import options_from_args

    uri, ids, _, _ = store
    for argv, why in [
            (["--metrics", "tag.prose.mrr"], "--metrics 'tag.prose.mrr': a per-tag metric is "
                                             "not gated by name; give --metrics mrr --tags prose"),
            (["--metrics", "mrr,tag.nosuch.mrr"], "--tags nosuch (or --per-tag"),
            (["--margin", "mmr=0.05"], "--margin 'mmr=0.05': mmr is not a gated metric (gated: "
                                       "mrr, recall_at_8, ndcg_at_10, answer_support_rate, "
                                       "abstain_rate)"),
            (["--margin", "=0.1"], "--margin '=0.1': (empty) is not a gated metric"),
            (["--margin", "mrr=0.1=0.2"], "mrr=0.1 is not a gated metric"),
            (["--metrics", "mrr", "--margin", "ndcg_at_10=0.1"], "(gated: mrr)")]:
        assert main(["gate", ids["base"], ids["drop"], "--tracking-uri", uri, *argv]) == 2, argv
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and why in err[0], (argv, err)
    parser = build_parser()
    args, _ = parser.parse_known_args(["gate", "a", "b", "--metrics", "mrr,mrr", "--metrics",
                                       "recall_at_8,mrr", "--tags", "prose,prose",
                                       "--margin", "tag.prose.mrr=0.2"])
    o = options_from_args(args)
    assert o.metrics == ("mrr", "recall_at_8") and o.tags == ("prose",) and o.per_tag
    assert o.margin_for("tag.prose.mrr") == 0.2
    # one Holm family of 2 headline + 2 per-tag checks, not 3 + 6
    assert main(["gate", ids["base"], ids["drop"], "--tracking-uri", uri, "--metrics", "mrr,mrr",
                 "--tags", "prose,prose", "--json"]) == 1
    j = json.loads(capsys.readouterr().out)
    assert [c["metric"] for c in j["checks"]] == ["mrr", "tag.prose.mrr"]


@pytest.mark.parametrize("text, why", [
    ("metrics: {mrr: .nan}\n", "expected.yaml: metrics.mrr: value must be a finite number"),
    ("metrics: {mrr: .inf}\n", "expected.yaml: metrics.mrr: value must be a finite number"),
    ("metrics: {mrr: {value: 1.0, tolerance: .nan}}\n",
     "expected.yaml: metrics.mrr: tolerance must be a finite number >= 0"),
    ("overrides: search.mode=bm25\nmetrics: {mrr: 1.0}\n",
     "expected.yaml: overrides must be a list of KEY=VALUE strings"),
    ("overrides: [1, 2]\nmetrics: {mrr: 1.0}\n",
     "expected.yaml: overrides must be a list of KEY=VALUE strings"),
    ("corpus: shop\n\tmetrics: {mrr: 1.0}\n", "expected.yaml:2:1: found character '\\t' that "
                                             "cannot start any token (not valid YAML)"),
    (b"corpus: \xff\xfe shop\nmetrics: {mrr: 1.0}\n", "expected.yaml: not UTF-8 text"),
])
def test_bad_expected_yaml_is_one_error_line(store, capsys, tmp_path, text, why):
    from rag.app.cli import main

    uri, ids, _, _ = store
    exp = tmp_path / "expected.yaml"
    exp.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["gate", str(exp), ids["same"], "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and why in err[0], err


def test_a_pinned_table_that_is_not_utf8_is_one_error_line(store, capsys, tmp_path):
    from rag.app.cli import main

    uri, ids, _, _ = store
    edited = tmp_path / "golden"
    shutil.copytree(FIXTURE / "golden", edited)
    (edited / "expected_per_query.csv").write_bytes(b"query_id,kind\n\xff\xfe,positive\n")
    assert main(["gate", str(edited), ids["same"], "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "expected_per_query.csv: not UTF-8 text" in err[0], err


def test_json_never_prints_nan():
    from rag.app.gate import _json

    opts = GateOptions(metrics=("mrr",))
    r = compare(side(None, "row a", metrics={"mrr": float("nan")}),
                side(None, metrics={"mrr": 0.5}), opts)
    text = _json(r.as_json())
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["checks"][0]["baseline"] is None


@pytest.mark.slow
def test_gate_to_a_closed_stdout_exits_141_silently(store):
    from conftest import run_rag

    uri, ids, _, _ = store
    for extra in ([], ["--json"]):
        proc = run_rag("gate", ids["base"], ids["drop"], "--tracking-uri", uri, *extra,
                       closed_stdout=True, timeout=300)
        assert proc.returncode == 141 and proc.stderr == "", (extra, proc.stderr[-2000:])


# --- real rows of the fixture corpus -------------------------------------------------------

FIXTURE_CONDITION = ["corpus.name=tinyshop", f"corpus.path={FIXTURE / 'corpus'}",
                     f"eval.golden_dir={FIXTURE / 'golden'}", "search.mode=hybrid",
                     "abstain.min_dense=0.2", "abstain.weak_dense=0.3"]


@pytest.fixture(scope="module")
def fixture_rows(tmp_path_factory, embedder):
    """Rows of the fixture corpus in one store: its pinned condition twice, and the same
    condition with an abstention floor that drops every answer."""
    from hydra import compose, initialize_config_dir

    import rag.app.run as run_mod
    from rag.app.config import register_configs
    from rag.app.gate import row_by_name
    from rag.ledger.mlflow_store import Ledger
    from rag.app.stages import StageCache

    register_configs()
    tmp = tmp_path_factory.mktemp("gate_rows")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    stages = StageCache(embedder=embedder)
    where = [f"paths.output_dir={tmp}", f"paths.cache_dir={tmp / 'cache'}", f"tracking.uri={uri}"]
    runs = {"hybrid": [], "again": [], "floor": ["abstain.min_dense=0.9", "abstain.weak_dense=0.95",
                                               "abstain.trust_definitions=false"]}
    for name, extra in runs.items():
        with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[*FIXTURE_CONDITION, *where, *extra,
                                               f"tracking.run_name={name}"])
        run_mod.run_job(cfg, stages=stages)
    ledger = Ledger(uri, create=False)
    return uri, {n: row_by_name(ledger, n) for n in runs}


@pytest.mark.slow
def test_fixture_rows_same_config_passes_a_dropped_answer_fails(fixture_rows, capsys, tmp_path):
    uri, ids = fixture_rows
    code, _, err, root, md = gate([ids["hybrid"], ids["again"], "--tracking-uri", uri, "--per-tag"],
                                  capsys, tmp_path)
    assert code == EXIT_PASS and err == []
    # 4 metrics x (headline + money, prose, symbol), abstain_rate over the negatives
    assert (root.get("tests"), root.get("failures")) == ("20", "0")  # and the three guards
    assert md.count("| within margin |") == 17 and "positives changed" not in md

    code, _, err, root, md = gate([ids["hybrid"], ids["floor"], "--tracking-uri", uri], capsys,
                                  tmp_path)
    assert code == EXIT_REGRESSION
    # abstention never moves the ranking: only the returned half regresses
    assert [n for n, failed, _ in cases(root) if failed] == ["answer_support_rate"]
    assert "| abstained | in the final top_k, dropped or flagged weak by abstention | 0 | 12 | +12 |" in md
    assert "Worse, by the stage that lost them: abstained 12" in md

    # against the pinned expectation: paired on the pinned per-query table
    code, _, err, root, md = gate([str(FIXTURE / "golden" / "expected.yaml"), ids["again"],
                                   "--tracking-uri", uri], capsys, tmp_path)
    assert code == EXIT_PASS and "Holm-corrected across the 5 paired checks" in md
    assert "indexed files differ" not in md  # the same 9 files, read from an absolute path
    code, *_ = gate([str(FIXTURE / "golden"), ids["floor"], "--tracking-uri", uri, "--per-tag"],
                    capsys, tmp_path)
    assert code == EXIT_REGRESSION


def test_fixture_rows_diff_names_the_losing_stage(fixture_rows, capsys):
    from rag.app.cli import main

    uri, ids = fixture_rows
    assert main(["diff", ids["hybrid"], ids["floor"], "--changed-only", "--json",
                 "--tracking-uri", uri]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["changed"] == 12 and len(s["per_query"]) == 12
    assert {(d["lost_at_a"], d["lost_at_b"], d["returned_b"], d["stage"], d["change"])
            for d in s["per_query"]} == {("returned", "abstained", "dropped", "abstained", "worse")}
    assert main(["diff", ids["hybrid"], ids["again"], "--changed-only", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "0 changed" in out


def test_fixture_rows_diff_html_shows_both_rankings_of_every_query(fixture_rows, capsys,
                                                                    tmp_path):
    from rag.app.cli import main

    uri, ids = fixture_rows
    out = tmp_path / "page" / "diff.html"
    assert main(["diff", ids["hybrid"], ids["floor"], "--html", str(out), "--json",
                 "--tracking-uri", uri]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert captured.err.startswith(f"wrote {out} (")
    page = out.read_text()
    n = len(summary["per_query"])
    assert page.count('<section class="query') == n and page.count('<div class="side">') == 2 * n
    # every ranking of both rows is there (abstention never moves it: the same hits)
    assert page.count('<ol class="hits">') == 2 * n
    assert f"A (row {ids['hybrid'][:8]})" in page and f"B (row {ids['floor'][:8]})" in page
    assert "<mark>" in page and 'class="hit relevant"' in page  # texts and labels are here
    assert not list(out.parent.glob(".*tmp*"))
    # an unwritable page: one line, nothing compared
    assert main(["diff", ids["hybrid"], ids["floor"], "--html", str(tmp_path),
                 "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: cannot write {tmp_path}: it is a directory"]


@pytest.mark.slow
def test_make_test_gates_a_fresh_run_against_the_pinned_expectation(tmp_path):
    """The gate `make test` runs: `rag gate golden/expected.yaml --fresh` re-runs the fixture's
    pinned condition (python -m rag.run, as CI would) and must pass against it."""
    junit, md = tmp_path / "gate.xml", tmp_path / "gate.md"
    proc = subprocess.run(
        [sys.executable, "-m", "rag.gate", "tests/fixtures/gate/golden/expected.yaml", "--fresh",
         f"paths.output_dir={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}",
         "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--junit", str(junit),
         "--markdown", str(md)],
        cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == EXIT_PASS, proc.stderr[-3000:] + proc.stdout[-2000:]
    assert proc.stdout.startswith("rag gate: pass")
    root = ET.parse(junit).getroot()
    # 4 metric checks, abstain_rate over the negatives, the per-query, coverage and abstention
    # guards
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("8", "0", "0")
    text = md.read_text()
    assert text.startswith("## rag gate: PASS") and "Holm-corrected across the 5 paired checks" in text
    assert "fresh run: -m rag.run corpus.name=tinyshop" in proc.stderr


def test_sequential_gate_stops_early_on_a_broken_candidate():
    base = table(40)
    broken = table(40, mrr=[0.5] * 40)  # -0.5 on every query
    opts = GateOptions(metrics=("mrr",), sequential=True, max_severe_drops=-1)
    r = compare(side(base, "row a"), side(broken), opts)
    c = r.checks[0]
    assert c.verdict == REGRESSION and r.exit_code == EXIT_REGRESSION
    # the confidence sequence rules out anything above -margin well before the 40th query
    assert c.decided_at is not None and c.decided_at < 40
    assert c.cs_high < -0.01 and c.cs_low <= -0.5 <= c.cs_high
    assert "Sequential: `mrr` decided after" in render_markdown(r) and "sequential" in r.test
    # no difference at all: 40 queries cannot rule out a drop of 0.01 anytime-validly
    same = compare(side(base, "row a"), side(base), opts)
    assert same.checks[0].verdict == INCONCLUSIVE and same.checks[0].decided_at is None
    # a metric that is not a share cannot be bounded
    wide = table(40, mrr=[3.0] * 40)
    with pytest.raises(GateError, match="outside \\[0, 1\\]"):
        compare(side(base, "row a"), side(wide), opts)


def test_per_query_tables_the_gate_cannot_trust_are_refused():
    base = table()
    # a cell that is not a number: refused by name, never a quiet margin-only pass
    odd = table(mrr=[1.0] * 9 + ["n/a"])
    with pytest.raises(GateError, match="row b: column 'mrr' of query 'q9' holds 'n/a', not a "
                                        "number"):
        compare(side(base, "row a"), side(odd))
    # a share outside [0, 1]
    with pytest.raises(GateError, match="column 'mrr' of query 'q0' is 5, outside \\[0, 1\\]"):
        compare(side(base, "row a"), side(table(mrr=[5.0] * 10)))
    # a query listed twice
    with pytest.raises(GateError, match="lists query 'q0' more than once"):
        from rag.app.gate import _frame

        _frame("query_id,kind,mrr\nq0,positive,1\nq0,positive,0\n", "row b")


def test_a_ci_wholly_past_the_margin_without_significance_names_no_count():
    # -1 on 4 of 24 queries: the bootstrap CI lies below -0.01, the exact sign-flip p is
    # 2/16 = 0.125
    base = table(24)
    cand = table(24, mrr=[0.0] * 4 + [1.0] * 20, first_relevant_rank=[None] * 4 + [1.0] * 20)
    c = compare(side(base, "row a"), side(cand), GateOptions(
        metrics=("mrr",), max_severe_drops=-1)).checks[0]
    assert c.verdict == INCONCLUSIVE and c.ci_high < -0.01 and c.queries_needed is None
    from rag.app.gate import inconclusive_text

    assert "lies past the margin 0.01 but the paired test is not significant" in \
        inconclusive_text(c)


def test_junit_and_markdown_hold_no_control_character():
    t = table(2).rename(index={"q0": "evil\x1b[31mRED\x01"})
    r = compare(side(t, "row a"), side(t.assign(mrr=[0.0, 1.0])), GateOptions(metrics=("mrr",)))
    xml = render_junit(r)
    ET.fromstring(xml)  # well-formed
    assert "\x1b" not in xml and "\x1b" not in render_markdown(r) and "evil?[31mRED?" in xml


def test_a_side_whose_abstention_never_acts_is_noted():
    from rag.app.gate import Side, abstention_notes
    from rag.search.abstain import never_acts

    assert [m for m in ("auto", "hybrid", "dense", "bm25", "grep") if never_acts(m)] == \
        ["bm25", "grep"]

    def side(mode):
        return Side(label="row x", kind="row", ref=mode or "none", corpus="shop",
                    golden_fingerprint="g", corpus_fingerprint="c", overrides=[], metrics={},
                    mode=mode)

    note = abstention_notes(side("hybrid"), side("bm25"))
    assert note[0].startswith("Note: the candidate's abstention never acts (search.mode=bm25 "
                              "runs no dense channel): answer_support_rate, ") and note[1] == ""
    assert abstention_notes(side("grep"), side("dense"))[0].startswith("Note: the baseline's")
    # both abstain, neither does, or a side without a mode (an expectation): no note
    for a, b in (("hybrid", "dense"), ("bm25", "grep"), (None, "bm25")):
        assert abstention_notes(side(a), side(b)) == []
