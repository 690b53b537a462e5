"""rag serve under malformed input: every bad body is a 4xx that names the field and the problem
type but never echoes the value; a body over the limit is a 413; nothing derived from the query
reaches a log line (tracebacks included); the service stays up. Most cases drive the app in
process; the last test starts a real `rag serve` on 127.0.0.1 and talks HTTP to it."""

from __future__ import annotations

import http.client
import json
import logging
import select
import socket

import pytest

from rag.app.stages import StageCache

from conftest import FIXTURE_FILES, PROJECT, write_tree

SENTINEL = "zqxjvortexsentinel"
S = SENTINEL.encode()
ERROR_KEYS = {"loc", "type", "msg"}  # all a validation error may carry: never input or ctx
API_FIELDS = {"query", "corpus", "mode", "prose_mode", "top_k", "candidates", "rerank", "min_dense",
              "weak_dense", "types"}
LOGGERS = ("", "rag", "rag.serve", "uvicorn", "uvicorn.error", "uvicorn.access", "fastapi",
           "starlette")


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder):
    """(cfg, index) for the fixture shop repository, built once for this module."""
    from hydra import compose, initialize_config_dir

    from rag.app.config import register_configs

    tmp = tmp_path_factory.mktemp("serve_bad_input")
    repo = write_tree(tmp / "repo", FIXTURE_FILES)
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["corpus.name=shop", f"corpus.path={repo}",
                                           f"paths.cache_dir={tmp / 'cache'}"])
    index = StageCache().index(cfg, repo, embedder, progress=False)
    return cfg, index


def make_client(served, **kwargs):
    """A TestClient that re-raises any exception reaching Starlette's server-error layer, so a
    request that would have been a 500 with uvicorn's traceback fails the test loudly."""
    from fastapi.testclient import TestClient

    from rag.app.serve.app import create_app

    cfg, index = served
    return TestClient(create_app(cfg, index, **kwargs), raise_server_exceptions=True)


@pytest.fixture
def client(served):
    return make_client(served)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []
        self.records: list[logging.LogRecord] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if any(record is seen for seen in self.records):
            return  # the same record, propagated to another logger holding this handler
        self.records.append(record)
        # the formatted line includes any traceback (exc_info) and stack_info
        self.lines.append(self.format(record))


@pytest.fixture
def logs():
    """Every log line any logger writes during the test (root, rag, uvicorn, fastapi,
    starlette — handlers on each in case one does not propagate), tracebacks included."""
    handler = _Collect()
    saved = []
    for name in LOGGERS:
        lg = logging.getLogger(name)
        saved.append((lg, lg.level))
        lg.setLevel(logging.DEBUG)
        lg.addHandler(handler)
    yield handler.lines
    for lg, level in saved:
        lg.removeHandler(handler)
        lg.setLevel(level)


def rejected(lines: list[str]) -> list[dict]:
    """The JSON ``rejected`` log lines of the rag.serve logger."""
    out = []
    for line in lines:
        if line.startswith("rag.serve "):
            entry = json.loads(line.split(" ", 2)[2])
            if entry.get("event") == "rejected":
                out.append(entry)
    return out


def post(client, body: bytes, content_type: str | None = "application/json"):
    headers = {"content-type": content_type} if content_type else {}
    return client.post("/search", content=body, headers=headers)


def assert_still_up(client) -> None:
    r = client.post("/search", json={"query": "refund money", "mode": "bm25"})
    assert r.status_code == 200 and r.json()["hits"][0]["path"] == "src/shop/payments.py"
    assert client.get("/health").json()["status"] == "ok"


# (case id, raw body with S standing for the sentinel, field loc prefix, error type)
MALFORMED = [
    ("nan", b'{"query": "S", "min_dense": NaN}', ["body", "min_dense"], "finite_number"),
    ("infinity", b'{"query": "S", "weak_dense": Infinity}', ["body", "weak_dense"],
     "finite_number"),
    ("minus-infinity", b'{"query": "S", "min_dense": -Infinity}', ["body", "min_dense"],
     "finite_number"),
    ("nan-int", b'{"query": "S", "top_k": NaN}', ["body", "top_k"], "int_type"),
    ("bool-int", b'{"query": "S", "top_k": true}', ["body", "top_k"], "int_type"),
    ("float-int", b'{"query": "S", "top_k": 2.0}', ["body", "top_k"], "int_type"),
    ("float-overflow", b'{"query": "S", "weak_dense": 1e400}', ["body", "weak_dense"],
     "finite_number"),
    ("int-overflow", b'{"query": "S", "candidates": 1e400}', ["body", "candidates"],
     "int_type"),
    ("lone-high-surrogate", b'{"query": "S\\ud800"}', ["body", "query"], "value_error"),
    ("lone-low-surrogate", b'{"query": "\\udfffS"}', ["body", "query"], "value_error"),
    ("reversed-pair", b'{"query": "S\\udc00\\ud800"}', ["body", "query"], "value_error"),
    ("surrogate-raw-bytes", b'{"query": "S\xed\xa0\x80"}', ["body", "query"], "value_error"),
    ("surrogate-in-corpus", b'{"query": "S", "corpus": "S\\ud800"}', ["body", "corpus"],
     "value_error"),
    ("surrogate-in-types", b'{"query": "S", "types": ["\\ud800S"]}', ["body", "types", 0],
     "string_unicode"),
    ("surrogate-in-key", b'{"query": "S", "S\\ud800": 1}', ["body"], "string_unicode"),
    ("not-utf8", b'{"query": "S\xff\xfe"}', ["body"], "json_invalid"),
    ("latin1", '{"query": "S caf\u00e9"}'.encode("latin-1"), ["body"], "json_invalid"),
    ("invalid-json", b'{"query": "S"', ["body"], "json_invalid"),
    ("trailing-garbage", b'{"query": "S"} S', ["body"], "json_invalid"),
    ("deep-nesting", b'{"query": "S", "types": ' + b"[" * 30000 + b"]" * 30000 + b"}", ["body"],
     "json_invalid"),
    ("empty-body", b"", ["body"], "missing"),
    ("null-body", b"null", ["body"], "model_attributes_type"),
    ("list-body", b'["S"]', ["body"], "model_attributes_type"),
    ("string-body", b'"S"', ["body"], "model_attributes_type"),
    ("number-body", b"42", ["body"], "model_attributes_type"),
    ("query-missing", b'{"corpus": "S"}', ["body", "query"], "missing"),
    ("query-null", b'{"query": null}', ["body", "query"], "string_type"),
    ("query-number", b'{"query": 12345}', ["body", "query"], "string_type"),
    ("query-bool", b'{"query": true}', ["body", "query"], "string_type"),
    ("query-list", b'{"query": ["S"]}', ["body", "query"], "string_type"),
    ("query-object", b'{"query": {"S": "S"}}', ["body", "query"], "string_type"),
    ("query-too-long", b'{"query": "' + b"S" * 200 + b'"}', ["body", "query"], "string_too_long"),
    ("types-junk", b'{"query": "S", "types": ["S"]}', ["body", "types", 0], "literal_error"),
    ("types-string", b'{"query": "S", "types": "S"}', ["body", "types"], "list_type"),
    ("types-mixed", b'{"query": "S", "types": ["source", null, 7, {"S": 1}]}', ["body", "types", 1],
     "literal_error"),
    ("types-object", b'{"query": "S", "types": {"S": "source"}}', ["body", "types"], "list_type"),
    ("mode-junk", b'{"query": "S", "mode": "S"}', ["body", "mode"], "literal_error"),
    ("top_k-string", b'{"query": "S", "top_k": "S"}', ["body", "top_k"], "int_type"),
    ("top_k-numeric-string", b'{"query": "S", "top_k": "5"}', ["body", "top_k"], "int_type"),
    ("top_k-fraction", b'{"query": "S", "top_k": 2.5}', ["body", "top_k"], "int_type"),
    ("top_k-huge", b'{"query": "S", "top_k": 100000000000000000000000000000}', ["body", "top_k"],
     "less_than_equal"),
    ("rerank-junk", b'{"query": "S", "rerank": "S"}', ["body", "rerank"], "bool_parsing"),
    ("min_dense-string", b'{"query": "S", "min_dense": "S"}', ["body", "min_dense"],
     "float_parsing"),
    ("min_dense-range", b'{"query": "S", "min_dense": 7}', ["body", "min_dense"],
     "less_than_equal"),
    ("unknown-field-value", b'{"query": "x", "colour": "S"}', ["body", "colour"],
     "extra_forbidden"),
]


@pytest.mark.parametrize("body,loc,kind", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_body_is_a_4xx_naming_the_field_never_echoed_or_logged(client, logs, body, loc,
                                                                          kind):
    r = post(client, body.replace(b"S", S))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail
    assert all(set(d) == ERROR_KEYS for d in detail), detail
    assert any(d["loc"][:len(loc)] == loc and d["type"] == kind for d in detail), detail
    assert SENTINEL not in r.text
    # one rejected line naming the same field and type, and no trace of the query anywhere
    entries = rejected(logs)
    assert len(entries) == 1 and entries[0]["status"] == 422
    # the log names this API's fields only: a field the client invented is "<unknown field>"
    log_loc = [p if isinstance(p, int) or p == "body" or p in API_FIELDS else "<unknown field>"
               for p in loc]
    assert any(e["loc"][:len(loc)] == log_loc and e["type"] == kind for e in entries[0]["errors"])
    assert all(set(e) == {"loc", "type"} for e in entries[0]["errors"])
    assert not any(SENTINEL in line for line in logs), logs
    assert not any("Traceback" in line for line in logs)
    assert_still_up(client)


def test_unknown_field_named_in_the_answer_never_in_the_log(client, logs):
    r = post(client, b'{"query": "x", "S": 1}'.replace(b"S", S))
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": ["body", SENTINEL], "type": "extra_forbidden",
                                   "msg": "Extra inputs are not permitted"}]
    assert rejected(logs)[0]["errors"] == [{"loc": ["body", "<unknown field>"],
                                            "type": "extra_forbidden"}]
    # a key that is not name-like (spaces, 5 KB) is not echoed either
    r = post(client, b'{"query": "x", "S S": 1, "' + S * 300 + b'": 2}')
    assert r.status_code == 422 and SENTINEL not in r.text
    assert [d["loc"] for d in r.json()["detail"]] == [["body", "<unknown field>"]] * 2
    assert not any(SENTINEL in line for line in logs)


def test_body_that_is_not_declared_json_is_a_422(client, logs):
    for ctype in ("text/plain", None, "application/x-www-form-urlencoded"):
        r = post(client, b'{"query": "S"}'.replace(b"S", S), ctype)
        assert r.status_code == 422 and SENTINEL not in r.text, (ctype, r.text)
        # the content type named as the problem (curl's default form encoding, none, text)
        assert r.json()["detail"][0]["loc"] == ["header", "content-type"]
    assert not any(SENTINEL in line for line in logs)
    assert_still_up(client)


def test_odd_but_valid_text_is_searched(client, logs):
    for query in (f"{SENTINEL}\u0000", f"{SENTINEL} \U0001f600 \u202e\u0301", "\u00a0\u3000x",
                  f"{SENTINEL}" + "\ufffd" * 50, "x" * 2000):
        r = client.post("/search", json={"query": query})
        assert r.status_code == 200, (query[:20], r.text)
        assert SENTINEL not in r.text
    lines = [json.loads(line.split(" ", 2)[2]) for line in logs if line.startswith("rag.serve ")]
    assert [line["query_chars"] for line in lines] == [len(SENTINEL) + 1, len(SENTINEL) + 5, 3,
                                                       len(SENTINEL) + 50, 2000]
    assert not any(SENTINEL in line for line in logs)


def test_top_k_beyond_the_served_pool_grows_it_unless_candidates_says_otherwise(served):
    from omegaconf import OmegaConf

    cfg, index = served
    small = OmegaConf.merge(cfg, {"search": {"candidates": 3}})
    client = make_client((small, index))
    # dense scores every chunk: with the bands at 0 nothing is dropped, so the hits are the pool
    body = {"query": "shop", "mode": "dense", "min_dense": 0.0, "weak_dense": 0.0}
    assert len(index.chunks) > 8
    r = client.post("/search", json={**body, "top_k": 8})
    assert r.status_code == 200, r.text
    assert len(r.json()["hits"]) == 8  # not the served pool's 3
    r = client.post("/search", json={**body, "top_k": 8, "candidates": 7})
    assert r.status_code == 422 and "candidates must be >= top_k" in r.text


def test_corpus_mismatch_does_not_echo_the_corpus(client, logs):
    r = client.post("/search", json={"query": "x", "corpus": SENTINEL})
    assert r.status_code == 404 and SENTINEL not in r.text and "shop" in r.text
    r = client.post("/search", json={"query": "x", "corpus": SENTINEL * 20})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "string_too_long"
    assert not any(SENTINEL in line for line in logs)


def test_oversized_bodies_get_413_before_parsing(served, logs):
    client = make_client(served)
    big = json.dumps({"query": SENTINEL * 1_200_000}).encode()  # 21.6 MB
    r = post(client, big)
    assert r.status_code == 413 and SENTINEL not in r.text
    assert r.json() == {"detail": [{"loc": ["body"], "type": "body_too_large",
                                    "msg": "request body is over the limit of 65536 bytes"}]}
    assert r.headers["connection"] == "close"

    def chunked():  # no Content-Length: counted while it streams
        yield b'{"query": "'
        for _ in range(200):
            yield S * 1000
        yield b'"}'

    r = client.post("/search", content=chunked(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["detail"][0]["type"] == "body_too_large"
    # just under the limit is parsed (and here refused for its length, not its size)
    near = b'{"query": "' + b"x" * (65536 - 14) + b'"}'
    assert len(near) == 65535
    assert post(client, near).json()["detail"][0]["type"] == "string_too_long"
    entries = rejected(logs)
    assert [e["status"] for e in entries] == [413, 413, 422]
    # every line also has ts, level and request_id (tests/app/serve/test_serve_logs.py)
    assert {k: v for k, v in entries[0].items() if k not in ("ts", "level", "request_id")} == {
        "event": "rejected", "status": 413, "type": "body_too_large", "limit_bytes": 65536,
        "body_bytes": len(big)}
    assert not any(SENTINEL in line for line in logs)
    assert_still_up(client)


def test_body_limit_is_configurable(served, monkeypatch):
    from rag.app.serve.app import DEFAULT_MAX_BODY_BYTES, resolve_max_body_bytes

    small = make_client(served, max_body_bytes=40)
    body = json.dumps({"query": "refund money", "mode": "bm25", "top_k": 3}).encode()
    assert len(body) == 53
    r = post(small, body)
    assert r.status_code == 413 and "40 bytes" in r.json()["detail"][0]["msg"]
    assert post(small, b'{"query": "refund money"}').status_code == 200
    assert small.get("/health").status_code == 200

    monkeypatch.delenv("RAG_MAX_BODY_BYTES", raising=False)
    assert resolve_max_body_bytes() == DEFAULT_MAX_BODY_BYTES == 65536
    monkeypatch.setenv("RAG_MAX_BODY_BYTES", "1000")
    assert resolve_max_body_bytes() == 1000
    assert resolve_max_body_bytes("2048") == 2048  # --max-body-bytes wins over the env flag
    for bad in ("0", "-5", "64k", "1.5"):
        with pytest.raises(ValueError, match="positive integer"):
            resolve_max_body_bytes(bad)
    monkeypatch.setenv("RAG_MAX_BODY_BYTES", "lots")
    with pytest.raises(ValueError, match="RAG_MAX_BODY_BYTES"):
        resolve_max_body_bytes()


def test_rag_serve_refuses_a_bad_limit_in_one_line(capsys, monkeypatch):
    from rag.app.cli import main

    monkeypatch.delenv("RAG_MAX_BODY_BYTES", raising=False)
    assert main(["serve", "--max-body-bytes", "many"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --max-body-bytes must be a positive integer")
    assert "Traceback" not in err


def test_internal_bug_is_a_500_logged_without_query_text(served, logs, monkeypatch):
    """A real bug may still be a 500, but its log line carries the exception's type and code
    location only — not its message (which here quotes the query), args or traceback text."""
    from rag.search.pipeline import SearchPipeline

    def broken(self, query, *args, **kwargs):
        secret = query  # noqa: F841 — a local holding the text, as a real frame would
        raise KeyError(f"no entry for {query!r}")

    client = make_client(served)
    monkeypatch.setattr(SearchPipeline, "search", broken)
    r = client.post("/search", json={"query": f"find {SENTINEL}"})
    assert r.status_code == 500 and r.json() == {"detail": "internal error"}
    assert SENTINEL not in r.text
    errors = [json.loads(line.split(" ", 2)[2]) for line in logs
              if line.startswith("rag.serve ERROR ")]
    assert len(errors) == 1 and errors[0]["error"] == "KeyError" and errors[0]["route"] == "/search"
    assert any("in broken" in w for w in errors[0]["where"])
    assert not any(SENTINEL in line for line in logs)
    assert not any("Traceback" in line for line in logs)
    monkeypatch.undo()
    assert_still_up(client)


# ---- a real `rag serve` process on 127.0.0.1 --------------------------------------------------


def _http(base: str, method: str, path: str, body: bytes | None = None,
          headers: dict | None = None) -> tuple[int, bytes]:
    """One request with http.client (never through a proxy): (status, body)."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _chunked_post(base: str, total_bytes: int) -> tuple[int, bytes]:
    """POST a chunked body of ``total_bytes`` holding the sentinel over a raw socket, reading
    the answer as soon as one arrives; (status, body)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                     b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b'{"query": "' + S * 3600
        sent = 0
        try:
            while sent < total_bytes:
                if select.select([sock], [], [], 0)[0]:
                    break  # the server has answered
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
            else:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data:
                head, _, rest = data.partition(b"\r\n\r\n")
                length = [int(h.split(b":")[1]) for h in head.split(b"\r\n")
                          if h.lower().startswith(b"content-length:")]
                if length and len(rest) >= length[0]:
                    break
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), rest


@pytest.mark.slow
def test_rag_serve_process_under_hostile_input(fixture_repo, tmp_path):
    """NaN, Infinity, lone surrogates and 20 MB bodies to a running `rag serve`: 4xx, no echo,
    no query text in the process's log, and /health answers after each."""
    from rag.app.serve import process

    log_path = tmp_path / "serve.log"
    proc, base = process.start([f"corpus.path={fixture_repo}", "corpus.name=shop"],
                               options=["--max-body-bytes", "100000"], log_path=log_path,
                               env={"RAG_CACHE_DIR": str(tmp_path / "cache"),
                                    "RAG_SEARCH_MODE": "bm25"})
    json_ct = {"Content-Type": "application/json"}
    answers: list[tuple[str, int, bytes]] = []
    try:
        for name, body in [("nan", b'{"query": "S", "min_dense": NaN}'),
                           ("infinity", b'{"query": "S", "weak_dense": Infinity}'),
                           ("surrogate", b'{"query": "S\\ud800"}'),
                           ("surrogate-bytes", b'{"query": "S\xed\xa0\x80"}'),
                           ("not-utf8", b'{"query": "S\xff"}'),
                           ("not-an-object", b'["S"]'),
                           ("types-junk", b'{"query": "S", "types": ["S", 3]}')]:
            status, text = _http(base, "POST", "/search", body.replace(b"S", S), json_ct)
            answers.append((name, status, text))
            assert _http(base, "GET", "/health")[0] == 200
        big = json.dumps({"query": SENTINEL * 1_200_000}).encode()  # 21.6 MB, sent in full
        answers.append(("20MB", *_http(base, "POST", "/search", big, json_ct)))
        assert _http(base, "GET", "/health")[0] == 200
        answers.append(("20MB-chunked", *_chunked_post(base, 20_000_000)))
        assert _http(base, "GET", "/health")[0] == 200
        status, text = _http(base, "POST", "/search", b'{"query": "refund_order"}', json_ct)
        assert status == 200 and json.loads(text)["hits"][0]["symbol"] == "refund_order"
    finally:
        process.stop(proc)
    statuses = {name: status for name, status, _ in answers}
    assert statuses == {"nan": 422, "infinity": 422, "surrogate": 422, "surrogate-bytes": 422,
                        "not-utf8": 422, "not-an-object": 422, "types-junk": 422, "20MB": 413,
                        "20MB-chunked": 413}
    for name, _, text in answers:
        assert S not in text, name
        assert len(text) < 1000, name
    details = {name: json.loads(text)["detail"] for name, _, text in answers}
    assert details["nan"][0]["loc"] == ["body", "min_dense"]
    assert details["infinity"][0]["loc"] == ["body", "weak_dense"]
    assert details["surrogate"][0]["loc"] == ["body", "query"]
    assert details["20MB"][0]["msg"] == "request body is over the limit of 100000 bytes"
    out = log_path.read_text(encoding="utf-8", errors="replace")
    assert SENTINEL not in out
    assert "Traceback" not in out and "Exception in ASGI application" not in out
    assert out.count('"event": "rejected"') == len(answers)
    assert '"query_chars": 12' in out  # the valid request's line
