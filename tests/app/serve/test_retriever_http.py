"""retriever.kind=http (rag/eval/retriever.py HttpRetriever): a service over HTTP judged by the same
evaluator. `rag serve` on 127.0.0.1 gives exactly the in-process metrics; a service that goes
away mid-run gives counted failures and warnings, never a traceback; one that is not there
fails the run with one error line before any row. Loopback only; servers stopped by PID."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rag.app.stages import StageCache

from conftest import run_overrides
from rag.eval.retriever import (RETRIEVAL_FAILED, HttpRetriever, Query, dig, fill_template,
                           public_url)

RANKING = ("recall_at_1", "recall_at_3", "recall_at_8", "recall_at_40", "hit_at_1", "hit_at_8",
           "mrr", "ndcg_at_10", "tag.prose.mrr", "tag.symbol.mrr", "tag.docs.mrr")
RETURNED = ("answer_support_rate", "dropped_rate", "false_weak_rate", "abstain_rate",
            "dropped_positives", "dropped_negatives", "n_positives", "n_negatives",
            "context_chars_mean", "context_tokens_mean")


def test_template_mapping_and_url_helpers():
    t = json.loads('{"q": "{query}", "k": "{top_k}", "opts": {"t": "{types}", "d": "{depth}"},'
                   ' "note": "depth={depth}", "fixed": true}')
    assert fill_template(t, {"query": "a \"b\"", "top_k": 8, "depth": 40, "types": None}) == {
        "q": 'a "b"', "k": 8, "opts": {"d": 40}, "note": "depth=40", "fixed": True}
    assert fill_template(t, {"query": "x", "top_k": 1, "depth": 2,
                             "types": ["source"]})["opts"]["t"] == ["source"]
    assert dig({"data": {"results": [{"f": 1}, {"f": 2}]}}, "data.results.1.f") == 2
    with pytest.raises(KeyError, match="'data.nope'"):
        dig({"data": {}}, "data.nope")
    assert public_url("https://user:secret@example.org:8443/v1/search?key=abc#x") == \
        "https://example.org:8443/v1/search"
    for request, why in [('{"q": "{query}", "k": "{topk}"}', r"unknown placeholder.*\{topk\}"),
                         ('{"k": "{top_k}"}', "never sends the query"),
                         ("{query}", "not JSON"), ('["{query}"]', "JSON object")]:
        with pytest.raises(ValueError, match=why):
            HttpRetriever("http://127.0.0.1:9/search", request=request, probe=False)
    with pytest.raises(ValueError, match=r"\$RAG_TEST_NO_SUCH_VAR is not set"):
        HttpRetriever("http://127.0.0.1:9/search", headers=["X-Key: $RAG_TEST_NO_SUCH_VAR"],
                      probe=False)
    with pytest.raises(ValueError, match="http:// or https://"):
        HttpRetriever("ftp://127.0.0.1/search", probe=False)


class Stub(BaseHTTPRequestHandler):
    """A user's service with its own answer shape: {"data": {"results": [{"file", "rank_score"}]}}.
    The query text picks the behaviour."""

    calls: dict[str, int] = {}
    seen: list[dict] = []

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):  # noqa: N802 — http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Stub.seen.append({"body": body, "auth": self.headers.get("Authorization")})
        q = body["q"]
        n = Stub.calls[q] = Stub.calls.get(q, 0) + 1
        if q == "slow":
            time.sleep(1.5)
        status, payload = 200, {"data": {"results": [
            {"file": "a.py", "rank_score": 0.9, "name": "f"}, {"file": "b.py", "rank_score": 0.4}]}}
        if q == "flaky" and n == 1 or q == "down":
            status, payload = 503, {"detail": "overloaded"}
        if q == "bad-request":
            status, payload = 422, {"detail": "no"}
        raw = b"<html>oops" if q == "not-json" else json.dumps(payload).encode()
        if q == "no-hits-key":
            raw = b'{"data": {}}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def stub():
    Stub.calls, Stub.seen = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/search"
    finally:
        server.shutdown()
        server.server_close()


def test_http_retriever_maps_retries_and_counts_failures(stub, monkeypatch, capsys):
    monkeypatch.setenv("RAG_TEST_TOKEN", "s3cret")
    r = HttpRetriever(stub, top_k=1, headers=["Authorization: Bearer $RAG_TEST_TOKEN"],
                      request='{"q": "{query}", "n": "{depth}", "types": "{types}"}',
                      response={"hits": "data.results", "ranked": None, "timings": None,
                                "hit": {"path": "file", "score": "rank_score", "symbol": "name"}},
                      timeout_s=0.5, retries=2, backoff_s=0.01, concurrency=4)
    assert r.tags == {"retriever_url": stub}
    ok = r.retrieve(Query(id="q1", text="refund", types=("source",)), depth=40)
    assert [(h.path, h.symbol, h.score) for h in ok.ranked] == [("a.py", "f", 0.9), ("b.py", None, 0.4)]
    assert [h.path for h in ok.hits] == ["a.py"] and ok.reason is None
    assert ok.timings_ms["total"] > 0 and ok.hit_texts is None  # no text in this answer
    assert Stub.seen[0] == {"body": {"q": "refund", "n": 40, "types": ["source"]},
                            "auth": "Bearer s3cret"}
    # a 503 once, then an answer: retried, not a failure
    assert r.retrieve(Query(id="q2", text="flaky"), depth=40).ranked and Stub.calls["flaky"] == 2
    failed = {q: r.retrieve(Query(id=q, text=q), depth=40)
              for q in ("down", "slow", "bad-request", "not-json", "no-hits-key")}
    assert all(res.ranked == [] and res.hits == [] and res.reason.startswith(RETRIEVAL_FAILED)
               for res in failed.values())
    assert failed["down"].reason == f"{RETRIEVAL_FAILED}: HTTP 503: " \
                                    '{"detail": "overloaded"} (3 attempts)'
    assert Stub.calls["down"] == 3 and Stub.calls["bad-request"] == 1  # a 4xx is not retried
    assert failed["slow"].reason == f"{RETRIEVAL_FAILED}: timeout after 0.5 s"
    assert failed["not-json"].reason == f"{RETRIEVAL_FAILED}: the answer is not JSON"
    assert "no 'data.results' in the answer" in failed["no-hits-key"].reason
    assert [q for q, _ in r.failures] == ["down", "slow", "bad-request", "not-json", "no-hits-key"]
    err = capsys.readouterr().err
    assert err.count("warning: retriever.kind=http") == 3 and "further failed queries" in err
    assert "s3cret" not in err and "Traceback" not in err
    # prefetch: 4 in flight, each answered once from the cache
    qs = [Query(id=f"p{i}", text=f"refund {i}") for i in range(8)]
    before = r.requests
    r.prefetch(qs, depth=40)
    assert r.requests - before == 8
    assert all(r.retrieve(q, depth=40).ranked for q in qs) and r.requests - before == 8


def trec_run(client, run_id: str, dest) -> list[str]:
    """The row's TREC run artifact (run.trec or run.trec.txt) as lines."""
    dest.mkdir()
    name = next(a.path for a in client.list_artifacts(run_id) if a.path.startswith("run.trec"))
    with open(client.download_artifacts(run_id, name, str(dest)), encoding="utf-8") as fh:
        return fh.read().splitlines()


@pytest.mark.slow
def test_rag_serve_over_http_gives_the_in_process_metrics(tmp_path, fixture_repo, fixture_golden,
                                                          compose, embedder, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    import rag.eval.retriever as retriever_mod
    import rag.app.run as run_mod
    from rag.app.serve import process

    stages = StageCache(embedder=embedder)
    local = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden)), stages=stages)
    # the torch query encoder, as in process: the served metrics must then be equal to the
    # last bit (rag serve's default ONNX export scores within ~1e-6, so near-ties may swap)
    proc, base = process.start([f"corpus.path={fixture_repo}", "corpus.name=shop",
                                f"paths.cache_dir={tmp_path / 'cache'}",
                                "embedder.query_backend=torch"])
    url = f"{base}/search"
    try:
        remote = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                                       "retriever=http", f"retriever.url={url}")), stages=stages)
        assert {k: remote[k] for k in RANKING} == {k: local[k] for k in RANKING}
        assert {k: remote[k] for k in RETURNED} == {k: local[k] for k in RETURNED}
        same = [k for k in local if k.startswith(("abstention/", "calibration/"))]
        assert same and {k: remote[k] for k in same} == {k: local[k] for k in same}
        assert remote["latency_p50_ms"] > 0 and "latency_server_total_p50_ms" in remote
        # the whole ranking to eval.depth, scores included: the two rows' TREC runs are equal
        client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
        exp = client.get_experiment_by_name("rag-shop")
        first, second = client.search_runs([exp.experiment_id],
                                           order_by=["attributes.start_time ASC"])
        runs = [trec_run(client, r.info.run_id, tmp_path / f"run{n}") for n, r in enumerate((first, second))]
        assert runs[0] == runs[1] and len(runs[0]) > 3 * 5  # deeper than the hits returned
        assert second.data.tags["retriever"] == "http"

        # the service goes away after two queries: the row is still logged, the other queries
        # fail (counted in per_query.csv, the first ones printed), no traceback
        asked = []
        real = retriever_mod.HttpRetriever._ask

        def ask_then_stop(self, query, depth):
            if len(asked) == 2 and proc.poll() is None:
                process.stop(proc)
            asked.append(query.id)
            return real(self, query, depth)

        monkeypatch.setattr(retriever_mod.HttpRetriever, "_ask", ask_then_stop)
        capsys.readouterr()
        cut = run_mod.run_job(compose(run_overrides(
            tmp_path, fixture_repo, fixture_golden, "retriever=http", f"retriever.url={url}",
            "retriever.backoff_s=0.01")), stages=stages)
    finally:
        if proc.poll() is None:
            process.stop(proc)
    err = capsys.readouterr().err
    assert len(asked) == 4 and cut["n_positives"] == 3
    assert err.count(f"{RETRIEVAL_FAILED}: cannot connect") == 2 and "Traceback" not in err
    row = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])[0]
    assert row.data.tags["retriever"] == "http"
    per_query = client.download_artifacts(row.info.run_id, "per_query.csv", str(tmp_path))
    with open(per_query, encoding="utf-8") as fh:
        reasons = [r["reason"] for r in csv.DictReader(io.StringIO(fh.read()))]
    assert sum(r.startswith(RETRIEVAL_FAILED) for r in reasons) == 2
    assert cut["failed_queries"] == 2.0 and remote["failed_queries"] == 0.0

    # nothing listening: one error line before any row is logged
    rows = len(client.search_runs([exp.experiment_id]))
    with pytest.raises(run_mod.RunError, match=r"retriever.url=http://127.0.0.1:\d+/search: "
                                               r"cannot connect .*is the service running\?"):
        run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                              "retriever=http", f"retriever.url={url}")), stages=stages)
    assert len(client.search_runs([exp.experiment_id])) == rows
