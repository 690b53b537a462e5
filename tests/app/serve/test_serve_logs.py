"""rag serve's log lines (ts, level, request_id; 413 and 422 logged), correlation ids made with
a rotatable HMAC key (never the query or its plain hash), each hit's URL and the stale flag
(the clock passed in)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import time

import pytest

from rag.app.stages import StageCache

from conftest import run_overrides

COMMIT = "c0ffee" + "0" * 34
BUILT_AT = 1_800_000_000.0
KEY_A = b"k" * 40
KEY_B = b"rotated-key-" + b"x" * 30


@pytest.fixture
def app_parts(fixture_repo, fixture_golden, tmp_path, compose, embedder):
    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden,
                                "corpus.url_template='https://code.example.org/{commit}/{path}"
                                "#L{start_line}-L{end_line}'"))
    index = StageCache().index(cfg, fixture_repo, embedder, progress=False)
    manifest = {"build_id": "20270115T080000-abcdef", "built_at": BUILT_AT,
                "source": {"commit": COMMIT, "dirty": False, "prefix": "shop/",
                           "url_template": None, "template_from": "none"}}
    return cfg, index, manifest


def client_for(app_parts, **kwargs):
    from fastapi.testclient import TestClient

    from rag.app.serve.app import create_app

    cfg, index, manifest = app_parts
    return TestClient(create_app(cfg, index, manifest, max_body_bytes=4096, **kwargs))


def lines(caplog) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "rag.serve"]


def test_lines_carry_ts_level_and_request_id_and_refusals_are_logged(app_parts, caplog):
    caplog.set_level(logging.INFO, logger="rag.serve")
    client = client_for(app_parts, clock=lambda: BUILT_AT + 3600)
    ok = client.post("/search", json={"query": "handleAuthCallback", "mode": "bm25"},
                     headers={"X-Request-ID": "req-42.a:b"})
    assert ok.status_code == 200 and ok.headers["x-request-id"] == "req-42.a:b"
    bad = client.post("/search", json={"query": "x", "topk": 3}, headers={"X-Request-ID": "a b!"})
    generated = bad.headers["x-request-id"]
    assert bad.status_code == 422 and re.fullmatch(r"[0-9a-f]{32}", generated)
    blank = client.post("/search", json={"query": "   "})
    big = client.post("/search", json={"query": "q" * 5000})
    assert (blank.status_code, big.status_code) == (422, 413)
    got = lines(caplog)
    assert [(x["event"], x.get("status"), x["level"]) for x in got] == [
        ("search", None, "info"), ("rejected", 422, "info"), ("search", 422, "info"),
        ("rejected", 413, "info")]
    assert [x["request_id"] for x in got[:2]] == ["req-42.a:b", generated]
    assert got[2]["request_id"] == blank.headers["x-request-id"]
    assert got[3]["request_id"] == big.headers["x-request-id"]
    for x in got:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", x["ts"])
    assert "a b!" not in caplog.text and "correlation_id" not in caplog.text  # no key: none


def test_hits_link_to_the_recorded_commit_and_a_25h_old_build_is_stale(app_parts, caplog):
    caplog.set_level(logging.INFO, logger="rag.serve")
    for hours, stale in ((23.0, False), (25.0, True)):
        client = client_for(app_parts, clock=lambda h=hours: BUILT_AT + h * 3600)
        body = client.post("/search", json={"query": "handleAuthCallback", "mode": "bm25",
                                            "depth": 3}).json()
        assert body["index"]["stale"] is stale and body["index"]["age_s"] == hours * 3600
        assert body["index"]["commit"] == COMMIT
        first = body["hits"][0]
        assert first["url"] == (f"https://code.example.org/{COMMIT}/shop/src/shop/payments.py"
                                f"#L{first['start_line']}-L{first['end_line']}")
        assert all(h["url"].startswith(f"https://code.example.org/{COMMIT}/shop/")
                   for h in body["ranked"])
        assert client.get("/health").json()["index"]["stale"] is stale
    warnings = [x for x in lines(caplog) if x["event"] == "stale_index"]
    assert warnings and all(x["level"] == "warning" and x["age_h"] == 25.0 for x in warnings)


def test_correlation_ids_are_hmacs_of_a_rotatable_key_never_the_query(app_parts, caplog, tmp_path):
    from rag.app.serve.app import CorrelationKeys

    caplog.set_level(logging.INFO, logger="rag.serve")
    key_file = tmp_path / "log.key"
    key_file.write_bytes(KEY_A + b"\n")
    keys = CorrelationKeys.from_env({}, path=str(key_file))
    client = client_for(app_parts, correlation=keys)
    query = "how do customers use a voucher"

    def ask() -> dict:
        assert client.post("/search", json={"query": f"  {query} "}).status_code == 200
        return [x for x in lines(caplog) if x["event"] == "search"][-1]

    def expected(key: bytes) -> tuple[str, str]:
        return (hmac.new(key, query.encode(), hashlib.sha256).hexdigest()[:32],
                hmac.new(key, b"rag key id", hashlib.sha256).hexdigest()[:8])

    first, again = ask(), ask()
    assert (first["correlation_id"], first["key_id"]) == expected(KEY_A)
    assert again["correlation_id"] == first["correlation_id"]  # the same question, grouped
    # rotation: replace the file; the next line uses the new key and names it
    key_file.write_bytes(KEY_B)
    os.utime(key_file, ns=(time.time_ns(), time.time_ns() + 10**9))
    rotated = ask()
    assert (rotated["correlation_id"], rotated["key_id"]) == expected(KEY_B)
    assert rotated["key_id"] != first["key_id"]
    # a key too short after rotation: no correlation id (never a weaker one), one error line
    key_file.write_bytes(b"short")
    weak = ask()
    assert "correlation_id" not in weak and "key_id" not in weak
    assert [x["level"] for x in lines(caplog) if x["event"] == "correlation_key_unusable"] == ["error"]
    text = caplog.text
    assert query not in text and "voucher" not in text
    assert hashlib.sha256(query.encode()).hexdigest()[:16] not in text  # no plain hash
    assert KEY_A.decode() not in text and KEY_B.decode() not in text


def test_weak_or_missing_keys_are_refused_at_start(tmp_path):
    from rag.app.serve.app import CorrelationKeys

    assert CorrelationKeys.from_env({}) is None
    with pytest.raises(ValueError, match="RAG_LOG_HMAC_KEY: .* at least 32 bytes"):
        CorrelationKeys.from_env({"RAG_LOG_HMAC_KEY": "password"})
    with pytest.raises(ValueError, match="cannot read"):
        CorrelationKeys.from_env({"RAG_LOG_HMAC_KEY_FILE": str(tmp_path / "none.key")})
    env_key = CorrelationKeys.from_env({"RAG_LOG_HMAC_KEY": (KEY_A + b" ").decode()})
    assert env_key.correlate("q")["correlation_id"] == hmac.new(
        KEY_A, b"q", hashlib.sha256).hexdigest()[:32]
