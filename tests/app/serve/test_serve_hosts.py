"""rag serve's Host and Origin checks (rag/app/serve/hosts.py): only the configured host names
are answered (DNS rebinding), no CORS header unless an origin is listed, a foreign page's POST
is refused; in the service's error shape, with its request id. The app here serves a refused
index (no model loaded): the checks run before any route, so what a route answers for an
accepted request (its own 409/503 for that index) is only told apart from the checks' 400/403."""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import run_overrides
from rag.app.serve.hosts import LOOPBACK_HOSTS, HostPolicy, host_name


def test_host_names_by_hand():
    assert host_name("127.0.0.1:8000") == "127.0.0.1"
    assert host_name("LocalHost") == "localhost"
    assert host_name("localhost.:80") == "localhost"
    assert host_name("[::1]:8000") == "[::1]" and host_name("[::1]") == "[::1]"
    assert host_name("::1") == "[::1]"  # a configured bare IPv6 address
    assert host_name("evil.example:8000") == "evil.example"
    for bad in ("", " ", "a:b", "[::1", "[::1]x", "h:123456"):
        assert host_name(bad) is None, bad


def test_policy_defaults_flags_and_environment():
    none: dict = {}
    assert HostPolicy.from_settings(bind_host="127.0.0.1", environ=none) == \
        HostPolicy(hosts=LOOPBACK_HOSTS, origins=())
    assert LOOPBACK_HOSTS == ("127.0.0.1", "localhost", "[::1]")
    # the bind address is added; a wildcard bind adds nothing
    assert HostPolicy.from_settings(bind_host="10.0.0.5", environ=none).hosts == \
        (*LOOPBACK_HOSTS, "10.0.0.5")
    assert HostPolicy.from_settings(bind_host="0.0.0.0", environ=none).hosts == LOOPBACK_HOSTS
    assert HostPolicy.from_settings(bind_host="::", environ=none).hosts == LOOPBACK_HOSTS
    env = {"RAG_ALLOWED_HOSTS": "rag.internal, LOCALHOST",
           "RAG_ALLOWED_ORIGINS": "http://localhost:3000/"}
    got = HostPolicy.from_settings(bind_host="127.0.0.1", environ=env)
    assert got.hosts == ("rag.internal", "localhost") and got.origins == ("http://localhost:3000",)
    # the flag wins over the environment
    got = HostPolicy.from_settings(bind_host="127.0.0.1", hosts="a.example", origins="*",
                                   environ=env)
    assert got.hosts == ("a.example",) and got.origins == ("*",)
    with pytest.raises(ValueError, match="--allowed-hosts: 'http://x/' is not a host name"):
        HostPolicy.from_settings(bind_host="127.0.0.1", hosts="http://x/", environ=none)
    with pytest.raises(ValueError, match="--allowed-hosts is empty"):
        HostPolicy.from_settings(bind_host="127.0.0.1", hosts=" , ", environ=none)
    with pytest.raises(ValueError, match="RAG_ALLOWED_ORIGINS: 'localhost:3000' is not an origin"):
        HostPolicy.from_settings(bind_host="127.0.0.1",
                                 environ={"RAG_ALLOWED_ORIGINS": "localhost:3000"})


def test_policy_decisions():
    p = HostPolicy(hosts=LOOPBACK_HOSTS, origins=("http://localhost:3000",))
    assert p.host_allowed(b"127.0.0.1:8123") and p.host_allowed(b"localhost")
    assert p.host_allowed(b"[::1]:8123")
    assert not p.host_allowed(b"evil.example") and not p.host_allowed(None)
    assert not p.host_allowed(b"127.0.0.1.evil.example") and not p.host_allowed(b"\xff")
    assert HostPolicy(hosts=("*",)).host_allowed(None)
    assert p.origin_allowed(b"HTTP://LOCALHOST:3000") and not p.origin_allowed(b"http://localhost:3001")
    assert not p.origin_allowed(b"null") and not HostPolicy().origin_allowed(b"http://localhost:3000")


@pytest.fixture
def app(tmp_path, fixture_repo, fixture_golden, compose):
    from rag.app.serve.app import create_app

    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden))
    policy = HostPolicy.from_settings(bind_host="127.0.0.1",
                                      origins="http://localhost:3000", environ={})
    return create_app(cfg, None, {"refused": "a test index"}, hosts=policy)


def test_only_configured_hosts_are_answered(app, caplog):
    import logging

    from fastapi.testclient import TestClient

    caplog.set_level(logging.INFO, logger="rag.serve")
    client = TestClient(app, base_url="http://127.0.0.1:8123")
    for host in ("127.0.0.1:8123", "localhost", "[::1]:8123", "LOCALHOST."):
        r = client.get("/health", headers={"Host": host})
        assert r.status_code not in (400, 403) and "status" in r.json(), host
    for method in ("get", "post"):
        r = getattr(client, method)("/health" if method == "get" else "/search",
                                    headers={"Host": "evil.example", "X-Request-ID": "req-1"},
                                    **({} if method == "get" else {"json": {"query": "x"}}))
        assert r.status_code == 400
        detail = r.json()["detail"]
        assert [(d["loc"], d["type"]) for d in detail] == [(["header", "host"], "host_not_allowed")]
        assert "evil.example" not in r.text and r.headers["x-request-id"] == "req-1"
        assert "access-control-allow-origin" not in r.headers
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "rag.serve"]
    refused = [x for x in lines if x.get("type") == "host_not_allowed"]
    assert len(refused) == 2 and all(x["status"] == 400 and x["request_id"] == "req-1"
                                     for x in refused)
    assert "evil.example" not in caplog.text


def _raw(app, headers: list[tuple[bytes, bytes]], method: str = "GET") -> tuple[int, dict]:
    """Drive the ASGI app with a request whose headers are exactly ``headers``."""
    sent: list = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.0",
             "method": method, "scheme": "http", "path": "/health", "raw_path": b"/health",
             "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8123)}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body)


def test_a_request_without_host_is_refused(app):
    status, body = _raw(app, [])
    assert status == 400 and body["detail"][0]["type"] == "host_not_allowed"
    status, body = _raw(app, [(b"host", b"127.0.0.1:8123")])
    assert status not in (400, 403) and "status" in body  # the route's own answer


def test_origins_no_cors_unless_listed(app):
    from fastapi.testclient import TestClient

    client = TestClient(app, base_url="http://127.0.0.1:8123")
    # no Origin (curl, the evaluation client): no CORS header
    r = client.post("/search", json={"query": "x"})
    assert r.status_code == 409 and not any(h.startswith("access-control") for h in r.headers)
    refused_index = r.json()  # the route's own answer for this index
    # a page of another site: its POST is refused, its GET answered without CORS headers
    evil = {"Origin": "http://evil.example"}
    r = client.post("/search", json={"query": "x"}, headers=evil)
    assert r.status_code == 403
    assert [(d["loc"], d["type"]) for d in r.json()["detail"]] == \
        [(["header", "origin"], "origin_not_allowed")]
    assert "access-control-allow-origin" not in r.headers and "x-request-id" in r.headers
    r = client.get("/health", headers=evil)
    assert r.status_code not in (400, 403) and "access-control-allow-origin" not in r.headers
    pre = client.options("/search", headers={**evil, "Access-Control-Request-Method": "POST"})
    assert pre.status_code == 403
    # the listed origin: CORS headers on its answers, its preflight answered
    ok = {"Origin": "http://localhost:3000"}
    r = client.post("/search", json={"query": "x"}, headers=ok)
    assert r.status_code == 409 and r.json() == refused_index
    assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert r.headers["vary"] == "Origin" and "x-request-id" in r.headers["access-control-expose-headers"]
    pre = client.options("/search", headers={**ok, "Access-Control-Request-Method": "POST",
                                             "Access-Control-Request-Headers": "content-type"})
    assert pre.status_code == 204
    assert pre.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert "content-type" in pre.headers["access-control-allow-headers"]
    # a listed origin does not open other host names
    r = client.post("/search", json={"query": "x"}, headers={**ok, "Host": "evil.example"})
    assert r.status_code == 400


def test_rag_serve_refuses_a_bad_host_setting(capsys):
    from rag.app.cli import main

    assert main(["serve", "--allowed-hosts", "https://x.example/"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --allowed-hosts: 'https://x.example/' is not a host name (list names "
                   "such as localhost,127.0.0.1,rag.internal, or *)"]
