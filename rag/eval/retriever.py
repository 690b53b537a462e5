"""One contract for anything that retrieves (DESIGN.md §8): the built-in pipeline, a TREC run
file, or a user's Python object are judged by the same evaluator.

A :class:`Retriever` answers a :class:`Query` with a :class:`rag.search.pipeline.SearchResult`:
``ranked`` (the ranking to ``depth`` distinct paths, before abstention), ``hits`` (what a
caller receives after abstention, with ``dropped`` / ``weak_match``), per-stage
``timings_ms`` (``total`` at least) and, where known, ``reason`` for an empty answer,
per-query abstention ``signals`` and ``hit_texts`` (the returned chunks' text, for the
context-size metrics). Everything else is optional: ``channel_candidates`` (each channel's
candidates, by channel name) and ``first_stage_top`` (the top ``top_k`` before reranking)
let the evaluator say at which stage a positive was lost (rag/eval/attribution.py); only
the built-in pipeline reports them, so for the others a positive not returned is lost at
``unknown``.

Implementations are registered by name in :data:`RETRIEVERS` (``retriever.kind``); each
builder takes the composed config and keyword-only resources and returns a Retriever.

* ``pipeline`` — :class:`PipelineRetriever`, the harness's own stages.
* ``run_file`` — :class:`RunFileRetriever`, a TREC run file (``qid Q0 docno rank score tag``;
  a docno ``path#symbol`` names a symbol of that path). Queries missing from the run get an
  empty answer with ``reason`` "not in the run file" and are counted (``missing_queries``).
* ``python`` — ``retriever.factory: "module:function"``, called with the config, returning
  any object with a ``retrieve(query, *, depth)`` method.
* ``semble`` / ``ripgrep`` — peers (rag/peers/): PyPI semble 0.7.0 in its model-free modes,
  and ripgrep as semble's benchmark runs it; opened on the corpus root (``open(root)``).
* ``http`` — :class:`HttpRetriever`, each query POSTed to ``retriever.url`` (``rag serve``
  itself, or a user's service). A query the service could not answer (timeout, connection
  error or 5xx after the retries, another 4xx, an answer that does not map) gets an empty
  answer whose ``reason`` starts with :data:`RETRIEVAL_FAILED`: counted, never silently
  scored as "no hit".

A retriever may carry ``tags`` (ledger tag -> value: what was evaluated, e.g. the run file's
fingerprint or the endpoint URL without credentials).
"""

from __future__ import annotations

import hashlib
import http.client
import importlib
import json
import math
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from rag.eval.golden import unquote_docno
from rag.core.contract import Hit, Query, SearchResult  # noqa: F401 - re-exported
from rag.search.pipeline import PipelineRetriever, SearchPipeline  # noqa: F401 - re-exported


@runtime_checkable
class Retriever(Protocol):
    """Answers one query; see the module docstring for the result's fields.

    Attributes:
        kind: the registry name (``pipeline``, ``run_file``, ``python`` ...).
        top_k: how many hits a caller receives (the evaluator's "answer" size).
    """

    kind: str
    top_k: int

    def retrieve(self, query: Query, *, depth: int) -> SearchResult: ...


def parse_run_file(path: Path) -> dict[str, list[tuple[str, float]]]:
    """A TREC run file as query id -> [(docno, score)] in the file's rank order.

    Lines are ``qid Q0 docno rank score tag`` (whitespace-separated); within a query the rank
    column orders the documents (the score is kept for display): rag writes ranks in the exact
    order its metrics used, which 6-decimal scores may not preserve.

    Raises:
        ValueError: a line without six fields or with a non-integer rank / non-numeric score,
            naming the file and the line number.
    """
    out: dict[str, list[tuple[int, str, float]]] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 6:
                raise ValueError(f"{path}:{n}: a TREC run line has 6 fields "
                                 f"(qid Q0 docno rank score tag), got {len(parts)}")
            qid, _, doc, rank, score, _ = parts
            try:
                out.setdefault(qid, []).append((int(rank), doc, float(score)))
            except ValueError:
                raise ValueError(f"{path}:{n}: rank must be an integer and score a number, got "
                                 f"{rank!r} and {score!r}") from None
    return {q: [(d, s) for _, d, s in sorted(rows, key=lambda r: (r[0], r[1]))]
            for q, rows in out.items()}


class RunFileRetriever:
    """A TREC run file (or every ``*.trec`` / ``*.run`` / ``*.txt`` file of a directory) as a
    :class:`Retriever`: no abstention (``hits`` = the first ``top_k`` of the ranking).

    Args:
        path: the run file or directory.
        top_k: hits a caller would receive.

    Raises:
        FileNotFoundError: ``path`` does not exist or the directory holds no run file.
        ValueError: a malformed line (file and line named) or a query in two files.
    """

    kind = "run_file"

    def __init__(self, path: Path, *, top_k: int = 8) -> None:
        path = Path(path)
        # a directory: its run files (a row's qrels.txt beside its run.trec is not one)
        files = sorted(p for p in path.iterdir() if p.suffix in (".trec", ".run", ".txt")
                       and not p.name.startswith("qrels")) if path.is_dir() else [path]
        if not path.exists() or not files:
            raise FileNotFoundError(f"retriever.path={str(path)!r}: no run file there")
        self.run: dict[str, list[tuple[str, float]]] = {}
        h = hashlib.sha256()
        for f in files:
            h.update(f.read_bytes())
            for qid, docs in parse_run_file(f).items():
                if qid in self.run:
                    raise ValueError(f"query {qid!r} appears in two run files ({f})")
                self.run[qid] = docs
        self.fingerprint = h.hexdigest()
        self.tags = {"retriever_run_fingerprint": self.fingerprint}
        self.top_k = top_k
        self.missing: list[str] = []

    def retrieve(self, query: Query, *, depth: int) -> SearchResult:
        """The run's ranking of ``query`` (empty, with a reason, if the run has none)."""
        docs = self.run.get(query.id)
        if docs is None:
            self.missing.append(query.id)
            return SearchResult(hits=[], ranked=[], route="run_file", top_dense=None, dropped=0,
                                weak_match=False, timings_ms={"total": 0.0},
                                reason="not in the run file", unanswered="missing")
        ranked = []
        # rank order is the truth; the file's scores are kept when they agree with it (so
        # ties stay ties, e.g. for eval.ties=pessimistic), else the score falls with the rank
        scores = [s for _, s in docs]
        keep = all(a >= b for a, b in zip(scores, scores[1:]))
        for i, (doc, score) in enumerate(docs):
            path, _, symbol = unquote_docno(doc).partition("#")
            ranked.append(Hit(chunk_id=f"{doc}@{i + 1}", path=path, symbol=symbol or None,
                              start_line=0, end_line=0, category="",
                              score=score if keep else float(len(docs) - i),
                              scores={"run": score}))
        return SearchResult(hits=ranked[:self.top_k], ranked=ranked, route="run_file",
                            top_dense=None, dropped=0, weak_match=False,
                            timings_ms={"total": 0.0})


# the reason of every query an external retriever could not answer starts with this (the
# evaluator counts them: ``failed_queries``)
RETRIEVAL_FAILED = "retrieval failed"
# request-template placeholders (HttpRetriever)
PLACEHOLDERS = ("query", "top_k", "depth", "types")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")
_ENV_VAR = re.compile(r"\$\$|\$([A-Za-z_]\w*)")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_OMIT = object()
# failures printed one by one before the rest are only counted
_PRINTED_FAILURES = 3


def public_url(url: str) -> str:
    """``url`` as a ledger tag may hold it: no user:password, query string or fragment."""
    u = urllib.parse.urlsplit(url)
    host = u.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return urllib.parse.urlunsplit((u.scheme, host + (f":{u.port}" if u.port else ""), u.path,
                                    "", ""))


def dig(obj: Any, path: str) -> Any:
    """The value at dotted ``path`` inside parsed JSON (``data.results.0``: a number indexes a
    list).

    Raises:
        KeyError: the path does not exist (naming it).
    """
    for part in path.split("."):
        if isinstance(obj, list) and re.fullmatch(r"-?\d+", part) and -len(obj) <= int(part) < len(obj):
            obj = obj[int(part)]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            raise KeyError(f"no {path!r} in the answer")
    return obj


def _get(obj: Any, path: str | None, default: Any = None) -> Any:
    if not path:
        return default
    try:
        return dig(obj, path)
    except KeyError:
        return default


def fill_template(template: Any, values: dict[str, Any]) -> Any:
    """The request body: ``template`` (parsed JSON) with every string that is exactly
    ``"{name}"`` replaced by ``values[name]`` as it is (a number stays a number; a None value
    leaves its key out) and every ``{name}`` inside a longer string by its text."""
    if isinstance(template, dict):
        out = {k: fill_template(v, values) for k, v in template.items()}
        return {k: v for k, v in out.items() if v is not _OMIT}
    if isinstance(template, list):
        return [x for x in (fill_template(v, values) for v in template) if x is not _OMIT]
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole:
            value = values[whole.group(1)]
            return _OMIT if value is None else value
        return _PLACEHOLDER.sub(lambda m: "" if values[m.group(1)] is None
                                else (",".join(values[m.group(1)])
                                      if isinstance(values[m.group(1)], list)
                                      else str(values[m.group(1)])), template)
    return template


def _placeholders(template: Any) -> set[str]:
    if isinstance(template, dict):
        return set().union(*(_placeholders(v) for v in template.values())) if template else set()
    if isinstance(template, list):
        return set().union(*(_placeholders(v) for v in template)) if template else set()
    return set(_PLACEHOLDER.findall(template)) if isinstance(template, str) else set()


def _expand_env(value: str, *, what: str) -> str:
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        if m.group(1) not in os.environ:
            raise ValueError(f"{what}: environment variable ${m.group(1)} is not set")
        return os.environ[m.group(1)]

    return _ENV_VAR.sub(sub, value)


def _why(exc: BaseException) -> str:
    """A short, secret-free description of a connection error."""
    reason = getattr(exc, "reason", exc)
    text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    return text[:200]


class HttpRetriever:
    """An HTTP endpoint as a :class:`Retriever`: each query is POSTed as JSON and the answer
    mapped onto a :class:`SearchResult` (defaults: ``rag serve``'s request and answer).

    Args:
        url: the endpoint (``http://`` or ``https://``).
        top_k: hits a caller receives (``{top_k}``; a longer ``hits`` list is cut to it).
        headers: ``"Name: value"`` each; ``$NAME`` in a value is read from the environment
            (``$$``: a dollar sign), so no secret needs to sit in the config or the ledger.
        request: the JSON body template; see :func:`fill_template` and :data:`PLACEHOLDERS`
            (``{depth}``: eval.depth, distinct paths wanted; ``{types}``: the query's type
            filter, a list, its key left out when there is none).
        response: dotted paths into the answer (:class:`rag.core.http_contract.HttpResponseMapping`, as a
            dict; missing keys take its defaults). Without ``ranked`` in an answer, its hits
            are the ranking (an abstaining service then ranks nothing for that query).
        timeout_s: per request; a timeout is not retried.
        retries: further attempts after a connection error, a 5xx or a 429, the n-th after
            ``backoff_s * 2**(n-1)`` seconds.
        concurrency: requests in flight in :meth:`prefetch`.
        path_categories: path -> category of the evaluated corpus (type-filter accounting).
        probe: refuse (ValueError) an endpoint that accepts no TCP connection, before any
            query is sent (not when a proxy carries the requests).

    A query that fails (timeout, connection error or 5xx after the retries, another 4xx, an
    answer that is not JSON or does not map) gets an empty answer whose ``reason`` starts with
    :data:`RETRIEVAL_FAILED`; the first few are printed to stderr, all are kept in
    ``failures``. ``timings_ms["total"]`` is the client's wall time for the query (retries
    included); the server's own stages are ``server_<stage>``.

    Raises:
        ValueError: a bad url, header, template or mapping, a missing environment variable,
            or (``probe``) an endpoint that cannot be reached.
    """

    kind = "http"

    def __init__(self, url: str, *, top_k: int = 8, headers: Any = (),
                 request: str | None = None, response: dict | None = None,
                 timeout_s: float = 30.0, retries: int = 2, backoff_s: float = 0.5,
                 concurrency: int = 1, path_categories: dict[str, str] | None = None,
                 probe: bool = True) -> None:
        from dataclasses import asdict

        from rag.core.http_contract import HTTP_REQUEST, HttpResponseMapping

        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"retriever.url must be an http:// or https:// URL, got "
                             f"{public_url(url)!r}")
        finite = all(math.isfinite(float(v)) for v in (timeout_s, backoff_s))
        if not finite or timeout_s <= 0 or retries < 0 or backoff_s < 0 or concurrency < 1:
            raise ValueError("need retriever.timeout_s > 0, retries >= 0, backoff_s >= 0 and "
                             f"concurrency >= 1; got {timeout_s}, {retries}, {backoff_s}, "
                             f"{concurrency}")
        self.url = url
        self.endpoint = public_url(url)
        self.tags = {"retriever_url": self.endpoint}
        self.top_k = int(top_k)
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.concurrency = int(concurrency)
        self.headers: list[tuple[str, str]] = []
        for h in headers:
            name, sep, value = str(h).partition(":")
            if not sep or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name.strip()):
                raise ValueError(f"retriever.headers: expected 'Name: value', got a header "
                                 f"named {name.strip()[:40]!r}")
            _expand_env(value, what=f"retriever.headers {name.strip()}")  # every $VAR is set
            self.headers.append((name.strip(), value.strip()))
        text = HTTP_REQUEST if request is None else request
        try:
            self.template = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"retriever.request is not JSON ({exc}); placeholders go inside "
                             'strings: {"query": "{query}", "top_k": "{top_k}"}') from None
        if not isinstance(self.template, dict):
            raise ValueError("retriever.request must be a JSON object")
        unknown = _placeholders(self.template) - set(PLACEHOLDERS)
        if unknown:
            raise ValueError(f"retriever.request: unknown placeholder(s) "
                             f"{sorted('{' + u + '}' for u in unknown)}; known: "
                             f"{['{' + p + '}' for p in PLACEHOLDERS]}")
        if "query" not in _placeholders(self.template):
            raise ValueError('retriever.request never sends the query: put "{query}" in it')
        defaults = asdict(HttpResponseMapping())
        given = dict(response or {})
        self.mapping = {**defaults, **{k: v for k, v in given.items() if k != "hit"},
                        "hit": {**defaults["hit"], **(given.get("hit") or {})}}
        if not self.mapping["hits"] or not self.mapping["hit"]["path"]:
            raise ValueError("retriever.response.hits and retriever.response.hit.path are needed")
        self.path_categories = path_categories
        self.failures: list[tuple[str, str]] = []
        self.requests = 0
        self._abstention: set[str] = set()
        self._cache: dict[tuple, SearchResult] = {}
        self._lock = threading.Lock()
        host = parts.hostname
        self._direct = host in _LOOPBACK or not urllib.request.getproxies().get(parts.scheme) \
            or bool(urllib.request.proxy_bypass(host))
        # loopback never goes through a proxy set in the environment
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({})) \
            if host in _LOOPBACK else urllib.request.build_opener()
        if probe and self._direct:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                socket.create_connection((host, port), timeout=min(self.timeout_s, 5.0)).close()
            except OSError as exc:
                raise ValueError(f"retriever.url={self.endpoint}: cannot connect ({_why(exc)}); "
                                 "is the service running?") from None

    @property
    def bands_on_top_dense(self) -> bool:
        """Whether every answer said its abstention read the dense bands."""
        return self._abstention == {"top_dense"}

    def retrieve(self, query: Query, *, depth: int) -> SearchResult:
        """POST ``query``; a prefetched answer is used once."""
        with self._lock:
            res = self._cache.pop((query, depth), None)
        return res if res is not None else self._ask(query, depth)

    def prefetch(self, queries: list[Query], *, depth: int) -> None:
        """Ask ``queries`` ``concurrency`` at a time; :meth:`retrieve` then answers from them
        (with ``concurrency`` 1: nothing is done, each query is asked when retrieved)."""
        if self.concurrency <= 1:
            return
        def ask(q: Query) -> SearchResult:
            try:
                return self._ask(q, depth)
            except Exception as exc:  # noqa: BLE001 - one query's failure never ends the run
                return self._failed(q, f"{type(exc).__name__}: {exc}", time.perf_counter())

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            results = list(pool.map(ask, queries))
        with self._lock:
            self._cache.update(((q, depth), r) for q, r in zip(queries, results))

    def _ask(self, query: Query, depth: int) -> SearchResult:
        body = json.dumps(fill_template(self.template, {
            "query": query.text, "top_k": self.top_k, "depth": int(depth),
            "types": list(query.types) or None})).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        t0 = time.perf_counter()
        try:  # expanded per request: a rotated token is picked up
            headers.update((n, _expand_env(v, what=f"retriever.headers {n}"))
                           for n, v in self.headers)
        except ValueError as exc:
            return self._failed(query, str(exc), t0)
        attempt = 0
        while True:
            with self._lock:
                self.requests += 1
            req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with self._opener.open(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                break
            except urllib.error.HTTPError as exc:
                try:
                    detail = exc.read(300).decode("utf-8", "replace").strip()
                except Exception:  # noqa: BLE001 — the status says enough
                    detail = ""
                why = f"HTTP {exc.code}" + (f": {detail[:200]}" if detail else "")
                retry = exc.code >= 500 or exc.code == 429
            except TimeoutError:
                return self._failed(query, f"timeout after {self.timeout_s:g} s", t0)
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, TimeoutError):
                    return self._failed(query, f"timeout after {self.timeout_s:g} s", t0)
                why, retry = f"cannot connect: {_why(exc)}", True
            except (OSError, http.client.HTTPException) as exc:
                why, retry = f"connection error: {_why(exc) or type(exc).__name__}", True
            if not retry or attempt >= self.retries:
                tries = f" ({attempt + 1} attempts)" if attempt else ""
                return self._failed(query, why + tries, t0)
            time.sleep(self.backoff_s * 2 ** attempt)
            attempt += 1
        total = (time.perf_counter() - t0) * 1000.0
        try:
            data = json.loads(raw)
        except ValueError:
            return self._failed(query, "the answer is not JSON", t0)
        except RecursionError:
            return self._failed(query, "the answer's JSON is nested too deeply", t0)
        try:
            return self._result(data, depth, total)
        except (KeyError, TypeError, ValueError, IndexError, OverflowError, RecursionError) as exc:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            return self._failed(query, f"the answer does not map: {msg}", t0)

    def _failed(self, query: Query, why: str, t0: float) -> SearchResult:
        reason = f"{RETRIEVAL_FAILED}: {why}"
        with self._lock:
            self.failures.append((query.id, reason))
            n = len(self.failures)
        if n <= _PRINTED_FAILURES:
            print(f"warning: retriever.kind=http {self.endpoint}: query {query.id}: {reason}",
                  file=sys.stderr)
        if n == _PRINTED_FAILURES + 1:
            print("warning: further failed queries are not printed; each is counted "
                  f"(reason '{RETRIEVAL_FAILED}: ...' in per_query.csv)", file=sys.stderr)
        return SearchResult(hits=[], ranked=[], route="http", top_dense=None, dropped=0,
                            weak_match=False, reason=reason, hit_texts=[], unanswered="failed",
                            timings_ms={"total": (time.perf_counter() - t0) * 1000.0})

    def _hits(self, raw: Any, what: str) -> list[Hit]:
        if not isinstance(raw, list):
            raise ValueError(f"{what} is not a list")
        hm = self.mapping["hit"]
        values = [_get(h, hm["score"]) for h in raw] if hm["score"] else []
        # the answer's order is the ranking; its scores are used only when they agree with it
        # (finite, non-increasing), so ties stay ties and distances are never inverted
        scored = bool(values) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in values) and all(a >= b for a, b in zip(values, values[1:]))
        out = []
        for i, h in enumerate(raw):
            path = dig(h, hm["path"])
            if not isinstance(path, str) or not path:
                raise ValueError(f"{what}[{i}]: the path is not a non-empty string")
            scores = _get(h, hm["scores"]) or {}
            if not isinstance(scores, dict):
                raise ValueError(f"{what}[{i}]: scores is not an object")
            out.append(Hit(
                chunk_id=str(_get(h, hm["chunk_id"]) or f"{path}@{i + 1}"), path=path,
                symbol=_get(h, hm["symbol"]) or None,
                start_line=int(_get(h, hm["start_line"]) or 0),
                end_line=int(_get(h, hm["end_line"]) or 0),
                category=str(_get(h, hm["category"]) or ""),
                # no score: the answer's order decides
                score=float(dig(h, hm["score"])) if scored else float(len(raw) - i),
                scores={str(k): None if v is None else float(v) for k, v in scores.items()}))
        return out

    def _result(self, data: Any, depth: int, total_ms: float) -> SearchResult:
        m = self.mapping
        raw_hits = dig(data, m["hits"])
        hits = self._hits(raw_hits, m["hits"])
        raw_ranked = _get(data, m["ranked"])
        ranked = self._hits(raw_ranked, m["ranked"]) if raw_ranked is not None else list(hits)
        # the ranking to `depth` distinct paths (at least top_k entries), as the pipeline cuts
        seen: set[str] = set()
        for n, h in enumerate(ranked):
            seen.add(h.path)
            if len(seen) == depth:
                ranked = ranked[:max(n + 1, self.top_k)]
                break
        texts = [_get(h, m["hit"]["text"]) for h in raw_hits[:self.top_k]]
        timings = {"total": total_ms}
        server = _get(data, m["timings"])
        if isinstance(server, dict):
            timings.update((f"server_{k}", float(v)) for k, v in server.items()
                           if isinstance(v, (int, float)) and math.isfinite(v))
        abstention = _get(data, m["abstention"])
        if abstention is not None:
            with self._lock:
                self._abstention.add(str(abstention))
        signals = _get(data, m["signals"])

        def num(key: str) -> float | None:
            v = _get(data, m[key])
            return None if v is None else float(v)

        reason = _get(data, m["reason"])
        return SearchResult(
            hits=hits[:self.top_k], ranked=ranked, route=str(_get(data, m["route"]) or "http"),
            top_dense=num("top_dense"), dropped=int(_get(data, m["dropped"]) or 0),
            weak_match=bool(_get(data, m["weak_match"]) or False), timings_ms=timings,
            reason=None if reason is None else str(reason), top_rerank=num("top_rerank"),
            signals=({str(k): None if v is None else float(v) for k, v in signals.items()}
                     if isinstance(signals, dict) else None),
            gate_score=num("gate_score"),
            # the returned context, when the answer carries it (nothing returned: none)
            hit_texts=texts if all(isinstance(t, str) for t in texts) else None)


def load_factory(spec: str) -> Callable[..., Any]:
    """``"package.module:function"`` -> the function.

    Raises:
        ValueError: not of that form, the module cannot be imported, or no such attribute.
    """
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"retriever.factory={spec!r}: expected 'module:function'")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ValueError(f"retriever.factory={spec!r}: cannot import {module!r} ({exc})") from None
    except AttributeError:
        raise ValueError(f"retriever.factory={spec!r}: {module!r} has no {attr!r}") from None
    if not callable(obj):
        raise ValueError(f"retriever.factory={spec!r}: {attr!r} is not callable")
    return obj


def _pipeline(cfg: Any, *, pipeline: SearchPipeline | None = None, **_: Any) -> PipelineRetriever:
    if pipeline is None:
        raise ValueError("retriever.kind=pipeline needs the built pipeline")
    return PipelineRetriever(pipeline)


def _run_file(cfg: Any, **_: Any) -> RunFileRetriever:
    from rag.core.paths import expand_path

    if not cfg.retriever.path:
        raise ValueError("retriever.kind=run_file needs retriever.path=<TREC run file or directory>")
    return RunFileRetriever(expand_path(cfg.retriever.path, base=Path.cwd()),
                            top_k=int(cfg.search.top_k))


def _python(cfg: Any, **_: Any) -> Any:
    if not cfg.retriever.factory:
        raise ValueError("retriever.kind=python needs retriever.factory='module:function'")
    obj = load_factory(str(cfg.retriever.factory))(cfg)
    if not callable(getattr(obj, "retrieve", None)):
        raise ValueError(f"retriever.factory={cfg.retriever.factory!r} returned "
                         f"{type(obj).__name__}, which has no retrieve(query, *, depth) method")
    if not hasattr(obj, "top_k"):
        obj.top_k = int(cfg.search.top_k)
    if not hasattr(obj, "kind"):
        obj.kind = "python"
    return obj


def _http(cfg: Any, *, pipeline: SearchPipeline | None = None, **_: Any) -> HttpRetriever:
    from omegaconf import OmegaConf

    r = cfg.retriever
    if not r.url:
        raise ValueError("retriever.kind=http needs retriever.url=http://HOST:PORT/PATH")
    cats = ({c.path: c.category for c in pipeline.index.chunks}
            if pipeline is not None else None)
    return HttpRetriever(str(r.url), top_k=int(cfg.search.top_k), headers=list(r.headers),
                         request=str(r.request),
                         response=OmegaConf.to_container(r.response, resolve=True),
                         timeout_s=float(r.timeout_s), retries=int(r.retries),
                         backoff_s=float(r.backoff_s), concurrency=int(r.concurrency),
                         path_categories=cats)


def _semble(cfg: Any, **kw: Any) -> Any:
    from rag.peers.semble_retriever import build

    return build(cfg, **kw)


def _ripgrep(cfg: Any, **kw: Any) -> Any:
    from rag.peers.ripgrep_retriever import build

    return build(cfg, **kw)


# retriever.kind -> builder(cfg, *, pipeline=...) -> Retriever. A retriever with an
# ``open(corpus_root)`` method (the peers, rag/peers/) is opened on the run's corpus root once
# it is known, and ``close()``d when the run ends.
RETRIEVERS: dict[str, Callable[..., Any]] = {"pipeline": _pipeline, "run_file": _run_file,
                                             "python": _python, "http": _http,
                                             "semble": _semble, "ripgrep": _ripgrep}


def build_retriever(cfg: Any, **resources: Any) -> Any:
    """The configured :class:`Retriever` (``retriever.kind`` in :data:`RETRIEVERS`).

    Raises:
        ValueError: an unknown kind (naming the known ones) or a builder's own error.
    """
    kind = str(cfg.retriever.kind)
    if kind not in RETRIEVERS:
        raise ValueError(f"retriever.kind must be one of {sorted(RETRIEVERS)}, got {kind!r}")
    return RETRIEVERS[kind](cfg, **resources)
