"""rag golden judge (rag/golden/judge.py) against a loopback stub endpoint
(tests/judgeserver.py): grades kept apart from people's labels with their provenance and
cost, agreement with people (Cohen's kappa against scikit-learn's, the confusion matrix by
hand), and the metric change the grades make. Nothing is sent anywhere but 127.0.0.1."""

from __future__ import annotations

import argparse
import io
import json

import pytest
import yaml

from judgeserver import COMPLETION_TOKENS, PROMPT_TOKENS, judge_server
from rag.golden.judge import (ChatJudge, add_judge_parser, judge_command, judged_file,
                              load_judgements, metric_effect, parse_grade)
from test_pooling import _parse, _pool, setup  # noqa: F401 - the shop fixture


def _args(*argv):
    return _parse(add_judge_parser, ["judge", *argv])


def test_parse_grade():
    assert parse_grade("##final score: 2") == 2
    assert parse_grade("M: 2, T: 1\n##Final Score: 3") == 3
    assert parse_grade("1") == 1
    assert parse_grade("I cannot tell") is None and parse_grade("final score: 7") is None


def test_judge_a_pool_apart_from_people(setup, monkeypatch):
    tmp_path, repo, golden, cands = setup
    pool_file = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"),
                      str(tmp_path / "b.trec"))
    before = (golden / "queries.yaml").read_text()
    monkeypatch.setenv("STUB_KEY", "s3cret-key")
    with judge_server({"voucher": 3, "def test_": 1, "Refunds": 2}) as (url, seen):
        out = io.StringIO()
        assert judge_command(_args("--golden", str(golden), "--pool", str(pool_file), "--url",
                                   url, "--model", "stub-1", "--key-env", "STUB_KEY",
                                   "--corpus-root", str(repo), "--price-in", "0.5",
                                   "--price-out", "2"), stdout=out) == 0
    # the 6 unjudged pairs (test_pooling's EXPECTED_POOL), each once
    assert len(seen) == 6
    assert all(r["headers"]["Authorization"] == "Bearer s3cret-key" for r in seen)
    assert seen[0]["body"]["model"] == "stub-1" and seen[0]["body"]["temperature"] == 0
    path = judged_file(golden, "stub-1")
    text = path.read_text()
    assert "s3cret-key" not in text and "s3cret-key" not in out.getvalue()
    data = yaml.safe_load(text)
    assert data["judge"]["model"] == "stub-1" and data["judge"]["prompt"] == "umbrela-1"
    assert data["usage"]["prompt_tokens"] == 6 * PROMPT_TOKENS
    # cost: 600/1000 * 0.5 + 30/1000 * 2
    assert data["usage"]["cost"] == pytest.approx(0.6 * 0.5 + 0.03 * 2)
    assert {j["source"] for j in data["judgements"]} == {"judge:stub-1"}
    grades = load_judgements(path)
    assert grades[("cand-refund", "docs/guide.md#Refunds")] == 2
    assert grades[("sym-auth-callback", "tests/test_cart.py")] == 1
    # never into queries.yaml; a second run resumes: nothing left to grade
    assert (golden / "queries.yaml").read_text() == before
    with judge_server({}) as (url, seen):
        assert judge_command(_args("--golden", str(golden), "--pool", str(pool_file), "--url",
                                   url, "--model", "stub-1", "--corpus-root", str(repo)),
                             stdout=io.StringIO()) == 0
        assert seen == []
    assert "graded 6 pair(s)" in out.getvalue() and "cost 0.36" in out.getvalue()


def test_calibrate_kappa_and_confusion(setup, tmp_path):
    from sklearn.metrics import cohen_kappa_score

    _, repo, golden, _ = setup
    # people: relevant handleAuthCallback and apply_discount_code; add one not_relevant
    text = (golden / "queries.yaml").read_text()
    q = text.replace("    note: the discount helper",
                     "    not_relevant:\n      - path: src/shop/payments.py\n"
                     "        symbol: refund_order\n    note: the discount helper")
    assert q != text
    (golden / "queries.yaml").write_text(q)
    # the stub grades by a word of the passage: the callback 3, the discount 1, refund 2
    with judge_server({"Verify the provider": 3, "voucher": 1, "money back": 2}) as (url, _):
        out = io.StringIO()
        assert judge_command(_args("--golden", str(golden), "--calibrate", "--url", url,
                                   "--model", "m", "--corpus-root", str(repo), "--json"),
                             stdout=out) == 0
    got = json.loads(out.getvalue())
    # people [1, 1, 0]; judge at >= 2: [1, 0, 1]
    assert got["n"] == 3
    assert got["confusion"] == {"relevant": [0, 1, 0, 1], "not_relevant": [0, 0, 1, 0]}
    assert got["kappa"] == pytest.approx(cohen_kappa_score([1, 1, 0], [1, 0, 1]))
    assert got["agreement"] == pytest.approx(1 / 3)


def test_endpoint_errors_are_one_line(setup, capsys):
    tmp_path, repo, golden, cands = setup
    pool_file = _pool(tmp_path, golden, cands, "--run-file", str(tmp_path / "a.trec"))
    capsys.readouterr()
    with judge_server({}) as (url, _):
        assert judge_command(_args("--golden", str(golden), "--pool", str(pool_file), "--url",
                                   url.replace("/v1", "/v1/broken"), "--model", "m",
                                   "--corpus-root", str(repo)), stdout=io.StringIO()) == 2
    assert "HTTP 500" in capsys.readouterr().err
    assert judge_command(_args("--golden", str(golden), "--pool", str(pool_file), "--url",
                               "http://127.0.0.1:9/v1", "--model", "m", "--corpus-root",
                               str(repo), "--timeout", "2"), stdout=io.StringIO()) == 2
    assert capsys.readouterr().err.startswith("error: http://127.0.0.1:9/v1/chat/completions")


def test_metric_effect_by_hand(setup):
    from rag.golden.review import GoldenEditor

    _, _, golden, _ = setup
    # one ranking, one query whose one relevant label is ranked 2nd; rank 1 is unjudged
    records = [{"query_id": "prose-voucher", "origin": "queries.yaml", "hits": [
        {"doc": "src/shop/other.py", "ranks": {"r": 1}},
        {"doc": "src/shop/cart.py#apply_discount_code", "ranks": {"r": 2}}]}]
    editor = GoldenEditor(golden, verify=False)
    rows = {e["metric"]: e for e in metric_effect(records, editor, {
        ("prose-voucher", "src/shop/other.py"): 3})}
    # people: MRR 1/2; with the judge's 3 at rank 1: MRR 1; nDCG@10 people (1/log2 3) / 1,
    # with the judge (1 + 1/log2 3) / (1 + 1/log2 3) = 1; judged@10 1/10 -> 2/10
    import math
    assert (rows["mrr"]["people"], rows["mrr"]["with_judge"]) == (0.5, 1.0)
    assert rows["ndcg_at_10"]["people"] == round(1 / math.log2(3), 4)
    assert rows["ndcg_at_10"]["with_judge"] == 1.0
    assert (rows["judged_at_10"]["people"], rows["judged_at_10"]["with_judge"]) == (0.1, 0.2)


def test_no_secret_no_outside_file_no_redirect(setup, tmp_path, monkeypatch, capsys):
    """A pool naming a gitignored .env or a path outside the corpus sends neither; a redirect
    is an error, never followed with the key; what was graded before a failure is kept."""
    from http.server import BaseHTTPRequestHandler

    from linkserver import loopback

    tmp, repo, golden, cands = setup
    (repo / ".env").write_text("AWS_SECRET_ACCESS_KEY=AKIA-SUPER-SECRET\n")
    (repo / ".gitignore").write_text("build/\n*.log\n.env\n")
    run = tmp / "evil.trec"
    run.write_text("sym-auth-callback Q0 .env 1 1 x\nsym-auth-callback Q0 ../../etc/hostname 2 1 x\n"
                   "sym-auth-callback Q0 src/shop/cart.py 3 1 x\n")
    pool_file = _pool(tmp, golden, cands, "--run-file", str(run), depth="3")
    capsys.readouterr()
    with judge_server({}) as (url, seen):
        assert judge_command(_args("--golden", str(golden), "--pool", str(pool_file), "--url",
                                   url, "--model", "m", "--corpus-root", str(repo)),
                             stdout=io.StringIO()) == 0
    assert len(seen) == 1 and "src/shop/cart.py" in seen[0]["body"]["messages"][-1]["content"]
    assert "AKIA" not in json.dumps(seen)
    assert "not a file rag indexes" in capsys.readouterr().err

    hits = []

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self):
            hits.append(dict(self.headers))
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:9/v1/chat/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    monkeypatch.setenv("K", "sk-SECRET")
    with loopback(Redirect) as base:
        assert judge_command(_args("--golden", str(golden), "--pool", str(pool_file), "--url",
                                   f"{base}/v1?api-version=1", "--model", "m2", "--key-env",
                                   "K", "--corpus-root", str(repo)), stdout=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert "HTTP 302" in err and "redirects are not followed" in err
    assert "api-version" not in err and "sk-SECRET" not in err  # the URL shown without its query
    assert len(hits) == 1


def test_judged_files_keep_their_provenance(tmp_path):
    from rag.golden.judge import Judged, JudgeError, check_same_judge, read_judged, write_judgements

    assert judged_file(tmp_path, "a b") != judged_file(tmp_path, "a/b")
    assert judged_file(tmp_path, "gpt-4o").name == "judged-gpt-4o.yaml"
    judge = ChatJudge(url="http://127.0.0.1:1/v1", model="m")
    judge.usage.requests, judge.usage.prompt_tokens = 2, 200
    path = tmp_path / "j.yaml"
    write_judgements(path, judge, Judged(grades={("q", "a.py"): (2, "judge:old")}))
    got = read_judged(path)
    assert got.grades == {("q", "a.py"): (2, "judge:old")}  # each grade keeps its own source
    # a later session adds its usage to the file's
    judge2 = ChatJudge(url="http://127.0.0.1:2/v1", model="m")
    judge2.usage.requests = 3
    write_judgements(path, judge2, got)
    assert read_judged(path).usage["requests"] == 5
    check_same_judge(read_judged(path), judge2, path)  # another endpoint: the same judge
    with pytest.raises(JudgeError, match="another judge"):
        check_same_judge(read_judged(path), ChatJudge(url="http://x/v1", model="other"), path)
    path.write_text("judgements:\n  - {query_id: q, doc: a.py, grade: 7, source: 'judge:m'}\n")
    with pytest.raises(JudgeError, match="entry 1 needs query_id, doc, a grade 0-3"):
        read_judged(path)


def test_grades_made_before_a_failure_are_kept(setup, capsys):
    from http.server import BaseHTTPRequestHandler

    from linkserver import loopback

    tmp, repo, golden, cands = setup
    pool_file = _pool(tmp, golden, cands, "--run-file", str(tmp / "a.trec"), str(tmp / "b.trec"))
    served = []

    class FailsThird(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            served.append(1)
            if len(served) >= 3:
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps({"choices": [{"message": {"content": "##final score: 1"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    with loopback(FailsThird) as base:
        assert judge_command(_args("--golden", str(golden), "--pool", str(pool_file), "--url",
                                   f"{base}/v1", "--model", "m", "--corpus-root", str(repo)),
                             stdout=io.StringIO()) == 2
    assert "HTTP 500" in capsys.readouterr().err
    assert len(load_judgements(judged_file(golden, "m"))) == 2
