"""``rag serve``: the retriever over HTTP, with per-request overrides of every search flag.

* ``POST /search`` — body :class:`SearchRequest`; unknown or invalid fields get 422 naming the
  field; an empty query 422; a query over ``MAX_QUERY_CHARS`` 422. For an evaluation
  (``retriever.kind=http``, rag/eval/retriever.py) ``depth`` adds ``ranked`` (the ranking to that
  many distinct paths before abstention, with each hit's ``score``), ``signals: true`` every
  abstention signal and which one the abstention read, ``with_text: true`` each hit's text.
* ``GET /health`` — readiness: 200 when the published build answers, 503 (``refusing``,
  ``no index``, ``degraded``) when the service cannot answer from it; the build id and age,
  the index's size, embedder and corpus fingerprint (rag/app/serve/index_holder.py).

A newly published build is swapped in between requests (``--reload-s`` polls, SIGHUP): each
request is answered wholly from one build, named in its answer's ``index.build_id``.

Bad input is a 4xx, never a 500: every malformed body (invalid JSON, not an object, wrong types,
non-finite numbers, unpaired surrogates) gets 422 whose ``detail`` lists each error's ``loc``,
``type`` and ``msg`` but never the offending value (:func:`public_errors`); a body over
``max_body_bytes`` (``--max-body-bytes`` / ``RAG_MAX_BODY_BYTES``, default 64 KiB) gets 413 before
anything parses it (:class:`RequestGuard`). An exception escaping the app (a bug) is a 500 whose
log line holds the exception's *type* and code location only — never its message, arguments,
locals or traceback text, any of which may hold the query.

Concurrent searches share their query embedding: the queries that arrive within
``batch_wait_ms`` (``--batch-wait-ms`` / ``RAG_BATCH_WAIT_MS``, default 5) are embedded in one
encoder call of at most ``max_batch`` (``--max-batch`` / ``RAG_MAX_BATCH``, default 16; 1 turns
batching off) and scored by one matrix product (:mod:`rag.search.batching`); each request then
finishes its own pipeline with those dense scores. ``timings_ms`` then holds the batch's
``embed_query`` and ``dense`` times, ``batch_wait`` (queued before the batch started) and the
``total`` including them; the log line adds ``batch`` (queries in the batch).

Service defaults come from the composed config, and the seed's environment flags map onto the
same keys as the Hydra overrides (:data:`ENV_FLAGS`). One JSON log line per request records
query *length*, flags, retrieved path/category/score and per-stage latency — never the query
text, a hash of it, chunk text or embeddings.

**Log lines** (:func:`log_event`) are JSON objects with ``ts`` (UTC, ISO 8601, milliseconds),
``level``, ``event`` and — for a request — ``request_id``: the client's ``X-Request-ID`` when it
is a plain token (:data:`REQUEST_ID`), else a new one; every response echoes it in
``X-Request-ID``. Refused requests (413, 422, 4xx of the search) are logged like answered ones.

**Correlation ids** (optional, :class:`CorrelationKeys`): with a key (``--log-key-file FILE`` /
``RAG_LOG_HMAC_KEY_FILE``, or ``RAG_LOG_HMAC_KEY``; at least :data:`MIN_KEY_BYTES` bytes) a
search's line carries ``correlation_id`` = HMAC-SHA256(key, the stripped query) (RFC 2104),
hex, first 32 digits, and ``key_id`` (8 hex digits of HMAC-SHA256(key, "rag key id")), so
repeated questions can be grouped without logging them. Never a plain hash: common questions
could be hashed offline and matched (the seed's observability review). The key file is re-read
when it changes, so a key is rotated by replacing the file, without a restart; the ``key_id``
of each line says which key made it. The key itself is never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Optional

from omegaconf import OmegaConf
from rag.app.config import SearchMode
from rag.corpus.walk import CATEGORIES
from pydantic import BaseModel, ConfigDict, Field, field_validator
# the handlers' request type, at module level: FastAPI resolves their (string) annotations here
from starlette.requests import Request

MAX_QUERY_CHARS = 2000
MAX_CORPUS_CHARS = 200
# 2000 characters of query are at most 24 000 bytes of JSON (a surrogate pair escaped as
# \uXXXX\uXXXX is 12 bytes per character), so 64 KiB never refuses a real query
DEFAULT_MAX_BODY_BYTES = 64 * 1024
# a body over the limit but at most this size is read and discarded before the 413 is sent, so
# clients that write the whole body before reading the answer (http.client, urllib) still get
# the 413 instead of a reset connection; a larger one is answered at once and the connection closed
DRAIN_MAX_BYTES = 32 * 1024 * 1024
# FastAPI's 400 detail when reading the body raised something other than a JSON syntax error
_UNPARSABLE_BODY = "There was an error parsing the body"
log = logging.getLogger("rag.serve")
# an X-Request-ID echoed as it came: a plain token; anything else is replaced by a new id
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# the shortest correlation key accepted (bytes): 256 bits, as HMAC-SHA256's block of output
MIN_KEY_BYTES = 32

# environment flag -> config key (the same keys as Hydra overrides and request fields)
ENV_FLAGS = {
    "RAG_SEARCH_MODE": "search.mode",
    "RAG_PROSE_MODE": "search.prose_mode",
    "RAG_RERANK_ENABLED": "rerank.enabled",
    "RAG_RERANK_KIND": "rerank.kind",
    "RAG_RERANK_MODEL": "rerank.model",
    "RAG_RERANK_CANDIDATES": "rerank.candidates",
    "RAG_TOP_K": "search.top_k",
    "RAG_CANDIDATES": "search.candidates",
    "RAG_MIN_DENSE_SCORE": "abstain.min_dense",
    "RAG_WEAK_DENSE_SCORE": "abstain.weak_dense",
}

# the walker's vocabulary (rag/corpus/walk.py CATEGORIES), not a second list
Category = Literal[CATEGORIES]  # type: ignore[valid-type]


def env_overrides(environ: dict[str, str] | None = None) -> list[str]:
    """Hydra overrides from the seed's environment flags that are set."""
    environ = dict(os.environ if environ is None else environ)
    return [f"{key}={environ[name]}" for name, key in ENV_FLAGS.items() if environ.get(name)]


def resolve_max_body_bytes(value: int | str | None = None,
                           environ: dict[str, str] | None = None) -> int:
    """The request body limit in bytes: ``value`` (``--max-body-bytes``) if given, else the
    ``RAG_MAX_BODY_BYTES`` environment flag if set, else :data:`DEFAULT_MAX_BODY_BYTES`.

    Raises:
        ValueError: the chosen value is not a positive integer (the message names its source).
    """
    environ = os.environ if environ is None else environ
    source, raw = ("--max-body-bytes", value) if value is not None else \
        ("RAG_MAX_BODY_BYTES", environ.get("RAG_MAX_BODY_BYTES") or None)
    if raw is None:
        return DEFAULT_MAX_BODY_BYTES
    try:
        limit = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{source} must be a positive integer (bytes), got {raw!r}") from None
    if limit < 1:
        raise ValueError(f"{source} must be a positive integer (bytes), got {raw!r}")
    return limit


def _env_or_flag(value, name: str, flag: str, environ) -> tuple[str, Any]:
    environ = os.environ if environ is None else environ
    return (flag, value) if value is not None else (name, environ.get(name) or None)


def resolve_batching(wait_ms: float | str | None = None, max_batch: int | str | None = None,
                     environ: dict[str, str] | None = None) -> tuple[float, int]:
    """``(batch_wait_ms, max_batch)`` of the query-embedding batches: each from its option
    (``--batch-wait-ms``, ``--max-batch``) if given, else its environment flag
    (``RAG_BATCH_WAIT_MS``, ``RAG_MAX_BATCH``) if set, else the defaults (5 ms, 16).

    Raises:
        ValueError: a chosen value is not a finite number >= 0 (wait) or an integer >= 1
            (batch); the message names its source.
    """
    from rag.search.batching import DEFAULT_BATCH_WAIT_MS, DEFAULT_MAX_BATCH

    source, raw = _env_or_flag(wait_ms, "RAG_BATCH_WAIT_MS", "--batch-wait-ms", environ)
    wait = DEFAULT_BATCH_WAIT_MS
    if raw is not None:
        try:
            wait = float(str(raw).strip())
        except ValueError:
            wait = float("nan")
        if not (0 <= wait < float("inf")):
            raise ValueError(f"{source} must be a number of milliseconds >= 0, got {raw!r}")
    source, raw = _env_or_flag(max_batch, "RAG_MAX_BATCH", "--max-batch", environ)
    batch = DEFAULT_MAX_BATCH
    if raw is not None:
        try:
            batch = int(str(raw).strip())
        except ValueError:
            batch = 0
        if batch < 1:
            raise ValueError(f"{source} must be a positive integer (queries), got {raw!r}")
    return wait, batch


class SearchRequest(BaseModel):
    """One search; every field but ``query`` overrides the service default for this request."""

    # non-finite numbers (JSON NaN/Infinity, which Python's json module accepts) are refused
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    corpus: Optional[str] = Field(default=None, min_length=1, max_length=MAX_CORPUS_CHARS)
    # the config's vocabulary (rag/app/config.py SearchMode), not a second list
    mode: Optional[Literal[tuple(m.value for m in SearchMode)]] = None  # type: ignore[valid-type]
    prose_mode: Optional[Literal["dense", "hybrid"]] = None
    # strict: JSON true is not 1 and 2.0 is not 2 (a wrong type is a 422, as documented)
    top_k: Optional[int] = Field(default=None, ge=1, le=200, strict=True)
    candidates: Optional[int] = Field(default=None, ge=1, le=2000, strict=True)
    rerank: Optional[bool] = None
    min_dense: Optional[float] = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    weak_dense: Optional[float] = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    types: Optional[list[Category]] = None
    # evaluation (``retriever.kind=http``): also return ``ranked``, the ranking down to this
    # many distinct paths *before* abstention, each with its ``score``
    depth: Optional[int] = Field(default=None, ge=1, le=1000)
    # also return every abstention signal, top_dense / top_rerank / gate_score and which
    # signal the abstention read (``abstention``: top_dense, rerank or learned)
    signals: Optional[bool] = None
    # the returned hits also carry their chunk ``text``
    with_text: Optional[bool] = None

    @field_validator("query", "corpus", mode="before")
    @classmethod
    def _utf8_text(cls, value: Any) -> Any:
        """Refuse text that cannot be encoded as UTF-8 (an unpaired surrogate such as the JSON
        escape ``"\\ud800"``) — it could be neither searched nor written to a log or response."""
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("must be valid Unicode text (it holds an unpaired "
                                 "surrogate)") from None
        return value


_SAFE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def _loc_part(part: Any, *, for_log: bool) -> Any:
    """One element of an error's ``loc`` as it may be shown: positions and this API's own names
    as they are; a field name the client invented only in a response (the client's own key,
    if it looks like a name) and never in a log line."""
    if isinstance(part, int) and not isinstance(part, bool):
        return part
    if isinstance(part, str) and (part == "body" or part in SearchRequest.model_fields):
        return part
    if not for_log and isinstance(part, str) and _SAFE_NAME.fullmatch(part):
        return part
    return "<unknown field>"


def public_errors(errors: list[dict], *, for_log: bool = False) -> list[dict]:
    """Validation errors as they may leave the process: ``loc``, ``type`` and (not for a log)
    ``msg`` of each — never ``input``, ``ctx`` or anything else holding the submitted value."""
    out = []
    for err in errors:
        kind = str(err.get("type", "invalid"))
        item: dict = {"loc": [_loc_part(p, for_log=for_log) for p in err.get("loc", ())],
                      "type": kind if _SAFE_NAME.fullmatch(kind) else "invalid"}
        if not for_log:
            msg = str(err.get("msg", ""))[:300]
            value = err.get("input")
            if isinstance(value, str) and len(value) >= 3 and value in msg:
                msg = kind  # a message that quotes the input is replaced by the error type
            item["msg"] = msg.encode("utf-8", "replace").decode("utf-8")
        out.append(item)
    return out


def _where(exc: BaseException) -> list[str]:
    """Code locations (file:line in function) of the innermost frames of ``exc``'s traceback:
    enough to find a bug, with no message, arguments or local values."""
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return [f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in frames]


def _with_request_id(send, request_id: str):
    """ASGI ``send`` that adds ``X-Request-ID: request_id`` to the response's headers."""
    async def wrapped(message) -> None:
        if message["type"] == "http.response.start":
            headers = [h for h in message.get("headers", []) if h[0].lower() != b"x-request-id"]
            message = {**message, "headers": [*headers, (b"x-request-id", request_id.encode())]}
        await send(message)

    return wrapped


async def _send_json(send, status: int, body: dict, *, close: bool = False) -> None:
    """Send a complete JSON response over ASGI ``send``."""
    payload = json.dumps(body).encode("utf-8")
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


async def _drain(receive, budget: int) -> None:
    """Read and discard request body messages until the body ends, the client goes away or
    ``budget`` bytes were discarded."""
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def log_event(level: int, event: dict, *, request_id: str | None = None,
              clock: Callable[[], float] = time.time) -> None:
    """Write one JSON log line to the ``rag.app.serve`` logger: ``ts`` (UTC ISO 8601 of ``clock()``,
    epoch seconds), ``level`` (``info``, ``warning``, ``error``), ``request_id`` when given, then
    ``event``'s fields (which must hold no query text or secret)."""
    line = {"ts": datetime.fromtimestamp(clock(), timezone.utc).isoformat(timespec="milliseconds"),
            "level": logging.getLevelName(level).lower()}
    if request_id is not None:
        line["request_id"] = request_id
    log.log(level, json.dumps({**line, **event}))


def request_id_of(headers: dict[bytes, bytes]) -> str:
    """The request's id: its ``X-Request-ID`` header when that is a plain token
    (:data:`REQUEST_ID`), else a new random one (32 hex digits) — a header value that is not a
    token is never echoed or logged."""
    raw = headers.get(b"x-request-id", b"")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        text = ""
    return text if REQUEST_ID.fullmatch(text) else uuid.uuid4().hex


class CorrelationKeys:
    """The HMAC key of log correlation ids, from a file (re-read when it changes: rotation
    without a restart) or fixed bytes.

    Args:
        path: a file whose content (surrounding whitespace stripped) is the key.
        key: the key itself (e.g. ``RAG_LOG_HMAC_KEY``); ``path`` wins when both are given.

    Raises:
        ValueError: the key (as first read) is shorter than :data:`MIN_KEY_BYTES` bytes or the
            file cannot be read (the message names the file or the variable, never the key).
    """

    def __init__(self, *, path: str | os.PathLike | None = None, key: bytes | None = None,
                 source: str = "RAG_LOG_HMAC_KEY") -> None:
        self.path = Path(path) if path is not None else None
        self._source = str(self.path) if self.path is not None else source
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._key = self._checked(key) if self.path is None else None
        self._problem: str | None = None
        if self.path is not None:
            self._reload()
            if self._key is None:
                raise ValueError(self._problem or f"{self._source}: no key")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, *,
                 path: str | None = None) -> "CorrelationKeys | None":
        """The keys ``rag serve`` uses: ``path`` (``--log-key-file``), else the file named by
        ``RAG_LOG_HMAC_KEY_FILE``, else the bytes of ``RAG_LOG_HMAC_KEY``; None when none is set
        (no correlation ids).

        Raises:
            ValueError: see the class.
        """
        environ = os.environ if environ is None else environ
        path = path or environ.get("RAG_LOG_HMAC_KEY_FILE") or None
        if path:
            return cls(path=path)
        if environ.get("RAG_LOG_HMAC_KEY"):
            return cls(key=environ["RAG_LOG_HMAC_KEY"].strip().encode("utf-8"))
        return None

    def _checked(self, key: bytes | None) -> bytes:
        if not key or len(key) < MIN_KEY_BYTES:
            raise ValueError(f"{self._source}: the log correlation key must be at least "
                             f"{MIN_KEY_BYTES} bytes (e.g. `openssl rand -hex 32`)")
        return key

    def _reload(self) -> None:
        """Re-read the key file when its inode, size or mtime changed; on a failure keep no
        key (no correlation id is better than a wrong or weak one)."""
        assert self.path is not None
        try:
            st = os.stat(self.path)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp == self._stamp:
                return
            key = self._checked(self.path.read_bytes().strip())
        except (OSError, ValueError) as exc:
            problem = str(exc) if isinstance(exc, ValueError) else \
                f"{self._source}: cannot read the log correlation key ({type(exc).__name__})"
            if problem != self._problem:
                log_event(logging.ERROR, {"event": "correlation_key_unusable", "problem": problem})
            self._key, self._stamp, self._problem = None, None, problem
            return
        self._key, self._stamp, self._problem = key, stamp, None

    @staticmethod
    def key_id(key: bytes) -> str:
        """8 hex digits naming a key in logs: HMAC-SHA256(key, "rag key id"), not the key."""
        return hmac.new(key, b"rag key id", hashlib.sha256).hexdigest()[:8]

    def _current(self) -> bytes | None:
        with self._lock:
            if self.path is not None:
                self._reload()
            return self._key

    def current_key_id(self) -> str | None:
        """The :meth:`key_id` of the key in use now (None while the key file is unusable)."""
        key = self._current()
        return None if key is None else self.key_id(key)

    def correlate(self, text: str) -> dict[str, str]:
        """``{"correlation_id": ..., "key_id": ...}`` for ``text`` (stripped, UTF-8):
        HMAC-SHA256 hex, first 32 digits; ``{}`` while the key file is unusable."""
        key = self._current()
        if key is None:
            return {}
        digest = hmac.new(key, text.strip().encode("utf-8"), hashlib.sha256).hexdigest()
        return {"correlation_id": digest[:32], "key_id": self.key_id(key)}


class RequestGuard:
    """ASGI middleware around the app (inside Starlette's server-error layer, so nothing it
    stops reaches uvicorn's or Starlette's traceback logging).

    * A body over ``max_body_bytes`` is answered 413 and never parsed or kept: decided from
      ``Content-Length`` before any of it is read, or as soon as a streamed (chunked) body
      passes the limit. The rest of it (up to :data:`DRAIN_MAX_BYTES`) is read and discarded
      before the answer, so a client that writes the whole body before reading still sees the
      413; past that the 413 is sent at once and the connection closed.
    * Any exception escaping the app becomes a 500 ``{"detail": "internal error"}`` and one log
      line with the exception's type and code location (:func:`_where`) — its message, args
      and locals may hold the query and are never logged.
    * Every request gets an id (:func:`request_id_of`), kept in ``scope["state"]["request_id"]``
      for the handlers' log lines and sent back in the ``X-Request-ID`` response header.
    """

    def __init__(self, app, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def _too_large(self, send, seen: int | None, request_id: str) -> None:
        log_event(logging.INFO, {"event": "rejected", "status": 413, "type": "body_too_large",
                                 "limit_bytes": self.max_body_bytes, "body_bytes": seen},
                  request_id=request_id)
        await _send_json(send, 413, {"detail": [{
            "loc": ["body"], "type": "body_too_large",
            "msg": f"request body is over the limit of {self.max_body_bytes} bytes"}]}, close=True)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        request_id = request_id_of(headers)
        scope.setdefault("state", {})["request_id"] = request_id
        send = _with_request_id(send, request_id)
        try:
            declared = int(headers[b"content-length"]) if b"content-length" in headers else None
        except ValueError:
            declared = None  # the HTTP server refuses a malformed Content-Length itself
        limit = self.max_body_bytes
        if declared is not None and declared > limit:
            # a client waiting for "100 Continue" has not sent the body and never will
            expects = b"100-continue" in headers.get(b"expect", b"").lower()
            if declared <= DRAIN_MAX_BYTES and not expects:
                await _drain(receive, DRAIN_MAX_BYTES)
            await self._too_large(send, declared, request_id)
            return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            chunk = message.get("body", b"")
            total += len(chunk)
            more = message.get("more_body", False)
            if total > limit:
                if more:
                    await _drain(receive, DRAIN_MAX_BYTES - total)
                await self._too_large(send, None, request_id)
                return
            chunks.append(chunk)
            if not more:
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        started = False

        async def tracked_send(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, replay, tracked_send)
        except Exception as exc:  # noqa: BLE001 — the one place a bug becomes a 500
            route = scope.get("path") if scope.get("path") in ("/search", "/health") else "<other>"
            log_event(logging.ERROR, {"event": "error", "status": 500, "route": route,
                                      "error": type(exc).__name__, "where": _where(exc)},
                      request_id=request_id)
            if not started:
                await _send_json(send, 500, {"detail": "internal error"})


def create_app(cfg, index, manifest: dict | None = None, *,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, options=None, gate=None,
               batch_wait_ms: float | None = None, max_batch: int | None = None,
               correlation: CorrelationKeys | None = None,
               clock: Callable[[], float] = time.time, reranker=None, hosts=None,
               builds=None):
    """A FastAPI app serving ``index`` with ``cfg``'s search flags as defaults.

    ``builds``: the corpus's published builds (:class:`rag.app.serve.index_holder.
    PublishedBuilds`); with them ``app.state.holder`` (:class:`~rag.app.serve.index_holder.
    IndexHolder`) swaps in a newly published build when checked (``rag serve`` checks every
    ``--reload-s`` seconds and on SIGHUP). Every request is answered wholly from one build,
    named in its answer's ``index.build_id``; ``/health`` is readiness (200 only when the
    published build answers; 503 with ``status`` ``refusing``, ``no index`` or ``degraded``).

    ``options`` / ``gate``: the default search options and learned abstention gate
    (:func:`rag.app.search_cli.search_abstention`; default: ``cfg``'s flags, no gate). A request's
    ``min_dense`` / ``weak_dense`` move the dense bands; a learned gate keeps its own thresholds.

    ``manifest`` is the published build's (:mod:`rag.index.versioned`); if it carries
    ``refused`` (the index's embedder or dimension differs from the config), every search is
    answered 409 naming the mismatch and nothing is scored. A request body over
    ``max_body_bytes`` is answered 413 (:class:`RequestGuard`).

    ``batch_wait_ms`` / ``max_batch``: concurrent queries' embeddings are batched
    (:class:`rag.search.batching.DenseBatcher`; defaults 5 ms, 16; ``max_batch=1``: off). The
    app's batcher is ``app.state.batcher`` (None when off, or the index has no dense channel
    or an approximate one: ``dense.index=hnsw|ivf``).

    Each hit carries ``url`` (rag/core/trace_links.py: the manifest's recorded commit and
    ``corpus.url_template`` or the recorded template; a gh export document's own URL); the
    answer's ``index`` says whether the build is ``stale`` (older than ``index.max_age_h``
    by ``clock``, epoch seconds; a warning is logged). ``correlation``: HMAC keys for the
    search lines' ``correlation_id`` (:class:`CorrelationKeys`; None: no correlation id).

    ``reranker``: the second stage, already built and loaded (``rag serve`` builds it at
    start-up when ``rerank.enabled``, :func:`rag.app.search_cli.search_reranker`); None: built
    on the first request that asks for one (``"rerank": true``; 422 if it cannot be).
    ``hosts``: the :class:`rag.app.serve.hosts.HostPolicy` (accepted ``Host`` names and
    ``Origin`` s; ``rag serve`` always passes one); None checks neither (in-process use).
    """
    from fastapi import FastAPI, HTTPException
    from fastapi.exception_handlers import http_exception_handler
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from rag.search.batching import dense_needed
    from rag.app.serve.index_holder import IndexHolder, serve_build
    from rag.search.pipeline import SearchOptions, SearchPipeline
    from rag.app.search_cli import hit_dicts, index_info as build_info
    from rag.core.trace_links import hit_url

    manifest = manifest or {}
    # the config keys a request reads, resolved once: cfg.corpus.name is an interpolation
    # (${rag_corpus_name:...}) that OmegaConf parses again at every access — 29% of the
    # server's CPU under 8 concurrent clients (py-spy, 2026-12-01)
    served_corpus = str(cfg.corpus.name)
    rerank_default = bool(cfg.rerank.enabled)
    max_age_h = cfg.index.max_age_h
    defaults = options if options is not None else SearchOptions.from_config(cfg)
    # FastAPI's own telemetry log records would carry exception messages: off
    app = FastAPI(title="rag", description="Retrieval over a code repository.",
                  telemetry={"logs": False})
    if hosts is not None:  # inside RequestGuard: a refusal carries the request's id
        from rag.app.serve.hosts import HostGuard

        app.add_middleware(HostGuard, policy=hosts)
    app.add_middleware(RequestGuard, max_body_bytes=max_body_bytes)
    # the build answered from (swapped live when `builds` names a new one: index_holder.py)
    def prepare(new_index, new_manifest):
        return serve_build(cfg, new_index, new_manifest, max_batch=max_batch,
                           batch_wait_ms=batch_wait_ms)

    holder = IndexHolder(prepare(index, manifest), prepare=prepare, builds=builds)
    app.state.holder = holder
    app.state.batcher = holder.current.batcher

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request, exc: RequestValidationError):
        """422 naming each bad field and the problem type, never echoing the value; a body
        sent as another content type (curl's default form encoding) is said to be one."""
        errors = list(exc.errors())
        ctype = request.headers.get("content-type", "")
        if request.method == "POST" and not ctype.split(";")[0].strip().endswith("json"):
            errors = [{"loc": ("header", "content-type"), "type": "content_type",
                       "msg": "the body must be JSON, sent with Content-Type: "
                              "application/json"}]
        log_event(logging.INFO, {"event": "rejected", "status": 422,
                                 "errors": public_errors(errors, for_log=True)},
                  request_id=_rid(request))
        return JSONResponse({"detail": public_errors(errors)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc: StarletteHTTPException):
        """FastAPI's bare 400 for a body it could not decode at all (bytes that are not UTF-8,
        JSON nested past Python's recursion limit) becomes the same 422 as any other JSON that
        does not parse; every other HTTP error keeps FastAPI's answer."""
        if exc.status_code == 400 and exc.detail == _UNPARSABLE_BODY:
            errors = [{"loc": ["body"], "type": "json_invalid",
                       "msg": "the body is not JSON text in UTF-8 (or is nested too deeply)"}]
            log_event(logging.INFO, {"event": "rejected", "status": 422,
                                     "errors": public_errors(errors, for_log=True)},
                      request_id=_rid(request))
            return JSONResponse({"detail": errors}, status_code=422)
        return await http_exception_handler(request, exc)

    rerankers: list = [] if reranker is None else [reranker]
    reranker_lock = threading.Lock()
    def get_reranker():
        """The configured reranker (``rerank.kind``), created and loaded on first use, once
        (late interaction: the torch model beside the ONNX query encoder). A cross-encoder
        is never trained inside a request: without a model, ``rag reranker train`` is named."""
        with reranker_lock:
            if not rerankers:
                from rag.app.config import expand_path
                from rag.search.rerank import RerankerError, build_reranker

                rcfg = cfg if cfg.rerank.enabled else OmegaConf.merge(cfg, {"rerank": {"enabled": True}})
                try:
                    built = build_reranker(rcfg, getattr(getattr(index, "dense", None),
                                                         "embedder", None),
                                           expand_path(cfg.paths.cache_dir),
                                           train_if_missing=False)
                    rerankers.append(built.load() if hasattr(built, "load") else built)
                except RerankerError as exc:
                    raise ValueError(str(exc)) from None
            return rerankers[0]

    def index_info(request_id: str | None = None, manifest: dict = manifest) -> dict:
        info = {"build_id": manifest.get("build_id"),
                **build_info(manifest, max_age_h=max_age_h, now=clock())}
        if info["stale"]:
            log_event(logging.WARNING, {"event": "stale_index", "version": info["version"],
                                        "age_h": round(info["age_s"] / 3600, 2),
                                        "max_age_h": max_age_h},
                      request_id=request_id, clock=clock)
        return info

    @app.get("/health")
    def health():
        """Readiness (index_holder.py): 200 when the published build answers, else 503."""
        with holder.use() as build:
            status, body = holder.health(build, now=clock())
            if status == 200 or body["status"] == "degraded":
                idx = build.index
                body.update(corpus=served_corpus, chunks=len(idx.chunks),
                            embedder=idx.dense.embedder.model_id if idx.dense else None,
                            corpus_fingerprint=idx.corpus_fingerprint,
                            index=index_info(manifest=build.manifest))
        return JSONResponse(body, status_code=status)

    @app.post("/search")
    def search(req: SearchRequest, request: Request) -> dict:
        with holder.use() as build:  # the whole answer from this one build
            if build.batcher is None:
                return _search(req, _rid(request), build)
            with build.batcher.request():
                return _search(req, _rid(request), build)

    def _search(req: SearchRequest, request_id: str | None, build) -> dict:
        index, refused, source, batcher = build.index, build.refused, build.source, build.batcher
        t0 = time.perf_counter()
        entry: dict = {"event": "search", "query_chars": len(req.query), "build": build.build_id}
        if correlation is not None:  # HMAC of the query with a secret key, never the query
            entry.update(correlation.correlate(req.query))
        try:
            if refused:
                raise HTTPException(status_code=409, detail=refused)
            if not req.query.strip():
                raise HTTPException(status_code=422, detail="query: must not be blank")
            if req.corpus not in (None, served_corpus):
                raise HTTPException(status_code=404, detail=f"corpus: not served here (this "
                                                            f"service: {served_corpus!r})")
            use_rerank = rerank_default if req.rerank is None else req.rerank
            reranker = None
            if use_rerank:
                try:
                    reranker = get_reranker()
                except ValueError as exc:
                    raise HTTPException(status_code=422, detail=f"rerank: {exc}") from None
            opts = SearchOptions(**{**defaults.__dict__, **{
                k: v for k, v in {"mode": req.mode, "prose_mode": req.prose_mode,
                                  "top_k": req.top_k, "candidates": req.candidates,
                                  "min_dense": req.min_dense, "weak_dense": req.weak_dense,
                                  "types": tuple(req.types) if req.types else None}.items()
                if v is not None}})
            if opts.min_dense > opts.weak_dense:
                raise HTTPException(status_code=422, detail="min_dense must be <= weak_dense")
            if req.candidates is None and opts.candidates < opts.top_k:
                # a request's top_k beyond the served pool grows it to hold that many
                opts = SearchOptions(**{**opts.__dict__, "candidates": opts.top_k})
            if reranker is not None and opts.rerank_candidates < opts.top_k:
                # and the reranker re-scores every hit returned, as rag search --top-k does
                opts = SearchOptions(**{**opts.__dict__, "rerank_candidates": opts.top_k})
            if opts.candidates < opts.top_k:
                raise HTTPException(status_code=422, detail="candidates must be >= top_k")
            entry.update(top_k=opts.top_k, mode=opts.mode, types=list(opts.types),
                         rerank=bool(reranker))
            # bands given in the request win over the learned gate (as abstain.min_dense /
            # weak_dense do for rag search under abstain.signal=auto)
            req_gate = None if (req.min_dense is not None or req.weak_dense is not None) else gate
            batched = None
            if batcher is not None and dense_needed(index, opts, req.query,
                                                    signals=bool(req.signals)):
                batched = batcher.scores(req.query)
            res = SearchPipeline(index, opts, reranker=reranker, gate=req_gate).search(
                req.query, depth=req.depth, with_signals=bool(req.signals),
                precomputed={"dense": batched.scores} if batched is not None else None)
            if batched is not None:
                # the batch's share of the work, as an unbatched search would have timed it
                for stage, ms in batched.timings_ms.items():
                    res.timings_ms[stage] = res.timings_ms.get(stage, 0.0) + ms
                res.timings_ms["total"] += sum(batched.timings_ms.values())
                entry["batch"] = batched.batch_size
            entry.update(route=res.route, dropped=res.dropped, weak_match=res.weak_match,
                         hits=[{"path": h.path, "category": h.category, "score": round(h.score, 4)}
                               for h in res.hits],
                         stage_ms={k: round(v, 3) for k, v in res.timings_ms.items()})
            hits = hit_dicts(res.hits, source)
            if req.with_text:
                for h, out in zip(res.hits, hits):
                    out["text"] = build.text(h.chunk_id)
            body = {"hits": hits,
                    "route": res.route, "dropped": res.dropped, "weak_match": res.weak_match,
                    "reason": res.reason, "timings_ms": res.timings_ms,
                    "index": {"corpus": served_corpus, "chunks": len(index.chunks),
                              "corpus_fingerprint": index.corpus_fingerprint,
                              **index_info(request_id, build.manifest)}}
            if req.depth is not None:
                body["ranked"] = [{**h.as_dict(), "url": hit_url(h, source)} for h in res.ranked]
            if req.signals:
                body.update(signals=res.signals, top_dense=res.top_dense,
                            top_rerank=res.top_rerank, gate_score=res.gate_score,
                            abstention="learned" if req_gate is not None else
                            "rerank" if opts.rerank_gated and reranker is not None else "top_dense")
            return body
        except HTTPException as exc:
            entry.update(failure_stage="validate", status=exc.status_code)
            raise
        except Exception:
            entry.update(failure_stage="search", status=500)
            raise
        finally:
            entry["total_ms"] = round((time.perf_counter() - t0) * 1000, 3)
            log_event(logging.INFO, entry, request_id=request_id, clock=clock)

    return app


def _rid(request) -> str | None:
    """The request id :class:`RequestGuard` gave ``request`` (None outside the guard)."""
    return getattr(request.state, "request_id", None)


def serve(host: str, port: int, overrides: list[str], *,
          body_limit: int | str | None = None, batch_wait_ms: float | str | None = None,
          max_batch: int | str | None = None, log_key_file: str | None = None,
          allowed_hosts: str | None = None, allowed_origins: str | None = None,
          reload_s: float | str | None = None) -> int:
    """Load the index and serve it with uvicorn (127.0.0.1 by default); a newly published
    build is swapped in live, checked every ``reload_s`` seconds (``--reload-s``, else
    ``RAG_RELOAD_S``, else 5; 0: only on SIGHUP) and at once on SIGHUP
    (rag/app/serve/index_holder.py).

    ``body_limit`` is ``--max-body-bytes``; without it ``RAG_MAX_BODY_BYTES`` or 64 KiB applies
    (:func:`resolve_max_body_bytes`). ``batch_wait_ms`` / ``max_batch`` are
    ``--batch-wait-ms`` / ``--max-batch`` (else ``RAG_BATCH_WAIT_MS`` / ``RAG_MAX_BATCH``, else
    5 ms / 16: :func:`resolve_batching`). ``log_key_file`` is ``--log-key-file`` (else
    ``RAG_LOG_HMAC_KEY_FILE`` / ``RAG_LOG_HMAC_KEY``: :meth:`CorrelationKeys.from_env`).
    ``allowed_hosts`` / ``allowed_origins`` are ``--allowed-hosts`` / ``--allowed-origins``
    (else ``RAG_ALLOWED_HOSTS`` / ``RAG_ALLOWED_ORIGINS``, else the loopback names and
    ``host``, and no origin: :meth:`rag.app.serve.hosts.HostPolicy.from_settings`).
    Returns 2 (:attr:`rag.core.exit_codes.ExitCode.ERROR`) with one ``error:`` line if a value is
    invalid; an override the service does not read
    (:func:`rag.app.search_cli.check_overrides`) and a reranker that cannot be built
    (``rerank.enabled``, e.g. ``RAG_RERANK_ENABLED=true``, is built and loaded before the
    server starts) exit 2 with one line too.
    """
    import uvicorn

    from rag.core.exit_codes import ExitCode
    from rag.app.search_cli import (SERVING_QUERY_BACKEND, UNREAD_WITHOUT_LINK_CHECK, _load,
                                    check_overrides, search_reranker)
    from rag.app.serve.hosts import HostPolicy

    try:
        limit = resolve_max_body_bytes(body_limit)
        wait_ms, batch = resolve_batching(batch_wait_ms, max_batch)
        correlation = CorrelationKeys.from_env(path=log_key_file)
        from rag.app.serve.index_holder import resolve_reload_s

        every_s = resolve_reload_s(reload_s)
        hosts = HostPolicy.from_settings(bind_host=host, hosts=allowed_hosts,
                                         origins=allowed_origins)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(ExitCode.ERROR)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    overrides = env_overrides() + overrides
    check_overrides(overrides, command="rag serve", unread=UNREAD_WITHOUT_LINK_CHECK)
    cfg, index, manifest = _load(overrides, strict=False, query_backend=SERVING_QUERY_BACKEND)
    if manifest.get("refused"):
        log_event(logging.ERROR, {"event": "index_refused", "reason": manifest["refused"]})
    from rag.app.search_cli import search_abstention

    reranker = search_reranker(cfg, index) if index is not None else None
    options, gate = (search_abstention(cfg, index, has_reranker=reranker is not None)
                     if index is not None else (None, None))
    app = create_app(cfg, index, manifest, max_body_bytes=limit, options=options, gate=gate,
                     batch_wait_ms=wait_ms, max_batch=batch, correlation=correlation,
                     reranker=reranker, hosts=hosts, builds=_published_builds(cfg, index))
    holder = app.state.holder
    holder.check()  # a damaged published build shows on /health from the first request
    holder.start(every_s)
    _on_sighup(holder.wake)
    log_event(logging.INFO, {"event": "start", "host": host, "port": port,
                             "index": manifest.get("build_id"),
                             "rerank": getattr(reranker, "kind", None), **hosts.describe(),
                             "key_id": correlation.current_key_id() if correlation else None})
    # uvicorn's access log would print the request line only (no body), but keep it off:
    # our own JSON line per request is the log of record
    try:
        uvicorn.run(app, host=host, port=port, access_log=False, log_level="warning")
    finally:
        holder.stop()
    return int(ExitCode.OK)


def _published_builds(cfg, index):
    """The published builds ``rag serve`` watches (None when it serves no index)."""
    from rag.app.serve.index_holder import PublishedBuilds

    dense = getattr(index, "dense", None)
    return None if dense is None else PublishedBuilds.for_config(cfg, dense.embedder)


def _on_sighup(wake: Callable[[], None]) -> None:
    """Check for a new build at once on SIGHUP (``kill -HUP <pid>``); not on a platform
    without it."""
    import signal

    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda *_: wake())
