"""Links for retrieval traces: every hit a URL a person can open to check it, pinned to the
commit that was indexed, and a bounded check that those URLs answer.

**Where a hit's URL comes from** (:func:`hit_url`):

* a document whose path is already a URL — an issue or pull request of a gh export
  (rag/corpus/github.py) — keeps that canonical URL;
* any other hit fills a URL template with ``{commit}`` (the resolved commit of the corpus's
  git work tree), ``{path}`` (the hit's path from the repository root, percent-encoded),
  ``{start_line}`` and ``{end_line}``. The template is ``corpus.url_template``, e.g.
  ``https://host/org/repo/blob/{commit}/{path}#L{start_line}-L{end_line}``; when it is null
  and the corpus is a git work tree whose ``remote.origin.url`` is an ``https://`` URL on a
  known forge (:data:`FORGES`: GitHub, GitLab), it is derived from that URL with any
  user name or password removed — an ssh or http remote derives nothing;
* otherwise (no template, or a template that needs ``{commit}`` outside git) the hit has no
  URL (``url: null``).

The commit is resolved once per index (:func:`resolve_source`: ``git rev-parse HEAD``), with
``dirty`` set when the work tree has uncommitted or untracked, not-ignored changes — the
indexed text may then differ from what the link shows. A published build records it in its
manifest (``source``), so links stay pinned to what that build indexed.

**The link check** (:func:`check_links`), as the seed's benchmark does it: the URLs of the top
``links.top_n`` (5) hits of each query's trace, deduplicated, are sent bounded ``HEAD``
requests — ``links.concurrency`` at a time, each with ``links.timeout_s``, all within
``links.budget_s``; a URL not started within the budget is reported ``not_checked``. Every
failure is reported per URL (an HTTP status >= 400, a timeout, a refused connection, ...) with
the failed share; nothing raises, so an evaluation is never aborted by a link. Requests to a
loopback host never go through a proxy.
"""

from __future__ import annotations

import ipaddress
import queue
import re
import string
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# the placeholders a URL template may use
PLACEHOLDERS = ("commit", "path", "start_line", "end_line")

# forge kind -> URL template over the repository's web address {base}; chosen by host name
# (:func:`forge_of`): the host itself (github.com) or its first label (github.example.com)
FORGES = {
    "github": "{base}/blob/{{commit}}/{{path}}#L{{start_line}}-L{{end_line}}",
    "gitlab": "{base}/-/blob/{{commit}}/{{path}}#L{{start_line}}-{{end_line}}",
}

# why a URL failed (LinkResult.error): an HTTP status >= 400 is "http_<status>"
FAILURES = ("timeout", "refused", "dns", "tls", "connection", "invalid_url", "not_checked")


class LinkError(ValueError):
    """A URL template that cannot be used (unknown placeholder, credentials, not http(s))."""


def check_url_template(template: str, *, key: str = "corpus.url_template") -> None:
    """Refuse a URL template that would make unusable or unsafe links.

    Raises:
        LinkError: naming ``key``: a placeholder other than :data:`PLACEHOLDERS`, a format
            spec or conversion, unbalanced braces, a scheme other than http/https, no host,
            or a user name / password in the URL (links are logged and shown).
    """
    try:
        parts = urllib.parse.urlsplit(template.replace("{", "").replace("}", ""))
    except ValueError:
        raise LinkError(f"{key}: not a URL") from None
    if "@" in parts.netloc:  # checked first: no message below may echo a password
        raise LinkError(f"{key}: put no user name or password in a link template (links are "
                        "logged and shown)")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise LinkError(f"{key}={template!r}: must be an http:// or https:// URL with a host")
    # the host is the template's own: a placeholder there would send the link check to hosts
    # named by the corpus's paths (https://{path} -> https://src/...)
    raw = urllib.parse.urlsplit(template)
    if "{" in raw.scheme + raw.netloc or "}" in raw.scheme + raw.netloc:
        raise LinkError(f"{key}={template!r}: no placeholder in the scheme or host; the "
                        "placeholders belong in the path, query or fragment")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not 0-65535
    except ValueError:
        raise LinkError(f"{key}={template!r}: the port must be a number in 0-65535") from None
    if any(c.isspace() for c in template):
        raise LinkError(f"{key}={template!r}: a URL has no spaces (write %20)")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise LinkError(f"{key}={template!r}: {exc} (placeholders: "
                        + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
                        + "; {{ and }} for literal braces)") from None
    for _, name, spec, conv in parsed:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            raise LinkError(f"{key}={template!r}: unknown placeholder {{{name}}}; use "
                            + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
        if spec or conv:
            raise LinkError(f"{key}={template!r}: {{{name}}} takes no format spec or conversion")


@dataclass(frozen=True)
class SourceRef:
    """Where the indexed files can be opened: the commit and the URL template.

    Attributes:
        commit: ``git rev-parse HEAD`` of the corpus's work tree (40 hex), or None outside git.
        dirty: the work tree had uncommitted or untracked (not ignored) changes when resolved.
        prefix: the corpus directory relative to the repository root (``""`` or ``"sub/"``).
        url_template: the template links are made with (configured or derived), or None.
        template_from: ``config``, ``remote`` (derived from remote.origin.url) or ``none``.
    """

    commit: str | None = None
    dirty: bool = False
    prefix: str = ""
    url_template: str | None = None
    template_from: str = "none"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (recorded in a build manifest as ``source``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "SourceRef":
        """The inverse of :meth:`as_dict`; an empty or missing record is no source."""
        data = data or {}
        return cls(**{k: data[k] for k in ("commit", "dirty", "prefix", "url_template",
                                           "template_from") if k in data})

    def with_template(self, template: str | None) -> "SourceRef":
        """This source with ``template`` (``corpus.url_template`` at serve time) instead of the
        recorded one, when given."""
        if not template:
            return self
        return SourceRef(commit=self.commit, dirty=self.dirty, prefix=self.prefix,
                         url_template=str(template), template_from="config")

    @property
    def usable(self) -> bool:
        """Whether a source file's hit can get a URL (a template, and a commit if it asks)."""
        return bool(self.url_template) and (self.commit is not None
                                            or "{commit}" not in self.url_template)


def _git(root: Path, *args: str) -> str | None:
    """stdout of ``git -C root ARGS`` stripped, or None when git fails or is missing."""
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def forge_of(host: str) -> str | None:
    """The :data:`FORGES` kind of a host name (``github.com``, ``gitlab.example.org``), or None."""
    host = host.lower()
    for kind in FORGES:
        if host == f"{kind}.com" or host.split(".", 1)[0] == kind:
            return kind
    return None


def template_from_remote(remote: str | None) -> str | None:
    """A URL template for a git remote: only an ``https://`` URL on a known forge
    (:func:`forge_of`), with any ``user:password@`` removed and a trailing ``.git`` or ``/``
    dropped; None for anything else (ssh, http, a local path, an unknown host)."""
    if not remote:
        return None
    try:
        parts = urllib.parse.urlsplit(remote.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme != "https" or not host or forge_of(host) is None:
        return None
    path = parts.path.rstrip("/").removesuffix(".git").rstrip("/")
    if path.count("/") < 2:  # /org/repo at least
        return None
    netloc = host + (f":{port}" if port else "")
    base = urllib.parse.urlunsplit(("https", netloc, path, "", ""))
    return FORGES[forge_of(host)].format(base=base.replace("{", "{{").replace("}", "}}"))


def resolve_source(root: Path, *, url_template: str | None = None) -> SourceRef:
    """Resolve, once, the commit and URL template of the corpus directory ``root``.

    ``root`` may be a subdirectory of a work tree (``prefix``); a directory in which git tracks
    nothing (not a repository, or one that ignores it) has no commit. ``url_template``
    (``corpus.url_template``) wins over one derived from ``remote.origin.url``
    (:func:`template_from_remote`).

    Raises:
        LinkError: ``url_template`` is unusable (:func:`check_url_template`).
    """
    if url_template:
        check_url_template(url_template)
    commit = _git(root, "rev-parse", "--verify", "HEAD^{commit}")
    tracked = _git(root, "ls-files", "--", ".") if commit else None
    if not commit or not re.fullmatch(r"[0-9a-f]{40,64}", commit) or not tracked:
        return SourceRef(url_template=url_template or None,
                         template_from="config" if url_template else "none")
    prefix = _git(root, "rev-parse", "--show-prefix") or ""
    dirty = bool(_git(root, "status", "--porcelain", "--", "."))
    derived = None if url_template else template_from_remote(
        _git(root, "config", "--get", "remote.origin.url"))
    template = url_template or derived
    return SourceRef(commit=commit, dirty=dirty, prefix=prefix, url_template=template,
                     template_from="config" if url_template else "remote" if derived else "none")


def is_url(path: str) -> bool:
    """Whether a hit's path is itself a web address (a gh export's issue or pull request)."""
    return path.startswith(("https://", "http://"))


def hit_url(hit: Any, source: SourceRef) -> str | None:
    """The URL of one hit (anything with ``path``, ``start_line``, ``end_line``): its own path
    when that is a URL, else ``source``'s template filled in, else None."""
    path = str(hit.path)
    if is_url(path):
        return path
    if not source.usable:
        return None
    rel = urllib.parse.quote(source.prefix + path, safe="/-._~")
    return source.url_template.format(commit=source.commit or "", path=rel,  # type: ignore[union-attr]
                                      start_line=int(hit.start_line), end_line=int(hit.end_line))


def url_maker(source: SourceRef) -> Callable[[Any], str | None] | None:
    """``hit -> URL`` for ``source``, or None when no hit of a source file can get one (hits
    whose path is a URL still could: use :func:`hit_url` directly for those)."""
    if not source.usable:
        return None
    return lambda hit: hit_url(hit, source)


def public_url(url: str) -> str:
    """``url`` without any user name or password (safe to log and show)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<invalid url>"
    if "@" not in parts.netloc:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


# --- the link check -----------------------------------------------------------------------


@dataclass
class LinkResult:
    """One checked URL.

    Attributes:
        url: the URL (without credentials).
        ok: the final answer (after redirects) was a status < 400.
        status: the HTTP status, or None when no answer came.
        error: None when ok; else ``http_<status>`` or one of :data:`FAILURES`.
        ms: wall time of the request in milliseconds (0 when not checked).
        queries: ids of the queries whose trace holds the URL.
    """

    url: str
    ok: bool
    status: int | None
    error: str | None
    ms: float
    queries: list[str] = field(default_factory=list)


@dataclass
class LinkReport:
    """The outcome of :func:`check_links`.

    Attributes:
        results: one per distinct URL, in first-seen order.
        elapsed_s: wall seconds of the whole check.
    """

    results: list[LinkResult]
    elapsed_s: float

    @property
    def checked(self) -> int:
        """URLs that were requested (not ``not_checked``)."""
        return sum(r.error != "not_checked" for r in self.results)

    @property
    def failed(self) -> list[LinkResult]:
        """Requested URLs that did not answer < 400."""
        return [r for r in self.results if not r.ok and r.error != "not_checked"]

    def metrics(self) -> dict[str, float]:
        """Flat ledger metrics: ``links/urls``, ``links/checked``, ``links/failed``,
        ``links/failed_share`` (failed / checked; 0 when nothing was checked),
        ``links/not_checked``, ``links/elapsed_s`` and ``links/failed_<reason>`` per reason."""
        out = {"links/urls": float(len(self.results)), "links/checked": float(self.checked),
               "links/failed": float(len(self.failed)),
               "links/failed_share": len(self.failed) / self.checked if self.checked else 0.0,
               "links/not_checked": float(len(self.results) - self.checked),
               "links/elapsed_s": float(self.elapsed_s)}
        for r in self.failed:
            key = f"links/failed_{r.error}"
            out[key] = out.get(key, 0.0) + 1.0
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``links.json`` artifact): the metrics and every result."""
        return {**{k.split("/", 1)[1]: v for k, v in self.metrics().items()},
                "results": [asdict(r) for r in self.results]}

    def lines(self, *, limit: int = 20) -> list[str]:
        """Human-readable summary: one line of counts, then one per failed URL (at most
        ``limit``, then a count of the rest)."""
        n, failed = self.checked, self.failed
        share = f"{100 * len(failed) / n:.1f}%" if n else "n/a"
        head = (f"links: {len(self.results)} URL(s) in the traces, {n} checked, "
                f"{len(failed)} failed ({share}) in {self.elapsed_s:.1f} s")
        skipped = len(self.results) - n
        if skipped:
            head += f"; {skipped} not checked (links.budget_s spent)"
        out = [head]
        for r in failed[:limit]:
            who = ", ".join(r.queries[:3]) + (" ..." if len(r.queries) > 3 else "")
            out.append(f"  {r.error:>12}  {r.url}" + (f"  (queries: {who})" if who else ""))
        if len(failed) > limit:
            out.append(f"  ... and {len(failed) - limit} more (links.json)")
        return out


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is a loopback address or ``localhost``."""
    try:
        host = urllib.parse.urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _KeepHead(urllib.request.HTTPRedirectHandler):
    """Follow a redirect with HEAD again (urllib's default re-sends it as GET)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401, PLR0913
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and req.get_method() == "HEAD":
            new.method = "HEAD"
        return new


def _classify(exc: BaseException) -> str:
    """One of :data:`FAILURES` for a request that got no HTTP answer."""
    import socket
    import ssl

    reason = getattr(exc, "reason", exc)
    if isinstance(reason, (TimeoutError, socket.timeout)) or "timed out" in str(reason):
        return "timeout"
    if isinstance(reason, ConnectionRefusedError):
        return "refused"
    if isinstance(reason, socket.gaierror):
        return "dns"
    if isinstance(reason, ssl.SSLError):
        return "tls"
    if isinstance(exc, ValueError):
        return "invalid_url"
    return "connection"


def head(url: str, *, timeout_s: float,
         openers: tuple[urllib.request.OpenerDirector, urllib.request.OpenerDirector] | None = None
         ) -> tuple[int | None, str | None]:
    """One ``HEAD`` request: ``(status, error)`` — ``(200, None)``, ``(404, "http_404")``,
    ``(None, "timeout")``, ...; never raises. ``openers``: (direct, via the environment's
    proxies); a loopback URL always goes direct."""
    direct, proxied = openers or _openers()
    opener = direct if is_loopback(url) else proxied
    req = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "rag-link-check"})
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
        exc.close()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, _classify(exc)
    except Exception as exc:  # noqa: BLE001 - a link never aborts the caller
        return None, "connection" if not isinstance(exc, ValueError) else "invalid_url"
    return status, None if status < 400 else f"http_{status}"


def _openers() -> tuple[urllib.request.OpenerDirector, urllib.request.OpenerDirector]:
    return (urllib.request.build_opener(urllib.request.ProxyHandler({}), _KeepHead()),
            urllib.request.build_opener(_KeepHead()))


def trace_urls(traces: Iterable[tuple[str, Sequence[str | None]]], *,
               top_n: int) -> dict[str, list[str]]:
    """Distinct URLs of the first ``top_n`` hits of each (query id, hit URLs) trace, in
    first-seen order, each with the ids of the queries that hold it (None URLs skipped)."""
    out: dict[str, list[str]] = {}
    for qid, urls in traces:
        for url in list(urls)[:top_n]:
            if url:
                ids = out.setdefault(url, [])
                if qid not in ids:
                    ids.append(qid)
    return out


def check_links(urls: dict[str, list[str]] | Sequence[str], *, concurrency: int,
                timeout_s: float, budget_s: float,
                request: Callable[[str, float], tuple[int | None, str | None]] | None = None,
                clock: Callable[[], float] = time.monotonic) -> LinkReport:
    """Send a bounded ``HEAD`` request to every URL and report each outcome; never raises.

    Args:
        urls: the URLs (or URL -> query ids, :func:`trace_urls`); duplicates, and URLs that
            differ only in their ``#fragment``, are requested once (each URL is reported).
        concurrency: requests in flight at once (>= 1).
        timeout_s: seconds per request (connect and each read).
        budget_s: wall seconds for the whole check: no request starts after it, a request's
            timeout is cut to what is left, and the call returns by then (plus about one
            ``timeout_s`` at worst); URLs not started are ``not_checked``.
        request: ``(url, timeout_s) -> (status, error)`` (default :func:`head`).
        clock: monotonic seconds (tests pass their own).

    Returns:
        A :class:`LinkReport` with one result per distinct URL, in input order.
    """
    owners = dict(urls) if isinstance(urls, dict) else {u: [] for u in urls}
    order = list(owners)
    if request is None:
        openers = _openers()
        request = lambda u, t: head(u, timeout_s=t, openers=openers)  # noqa: E731
    # one request per resource: URLs that differ only in their #fragment (the lines of two
    # chunks of one file) share it
    resources = list(dict.fromkeys(urllib.parse.urldefrag(u).url for u in order))
    start = clock()
    deadline = start + max(float(budget_s), 0.0)
    results: dict[str, tuple[int | None, str | None, float]] = {}
    lock = threading.Lock()
    todo: queue.SimpleQueue[str] = queue.SimpleQueue()
    for u in resources:
        todo.put(u)

    def worker() -> None:
        while True:
            try:
                url = todo.get_nowait()
            except queue.Empty:
                return
            left = deadline - clock()
            if left <= 0:
                continue  # reported not_checked below
            t0 = clock()
            try:
                status, error = request(url, min(float(timeout_s), left))
            except Exception:  # noqa: BLE001 - a link never aborts the caller
                status, error = None, "connection"
            with lock:
                results[url] = (status, error, round((clock() - t0) * 1000, 1))

    threads = [threading.Thread(target=worker, name=f"link-check-{i}", daemon=True)
               for i in range(max(1, min(int(concurrency), len(resources))))]
    for t in threads:
        t.start()
    for t in threads:  # each request is bounded by its timeout: wait past the budget by one
        t.join(timeout=max(deadline - clock(), 0.0) + float(timeout_s) + 1.0)
    with lock:
        done = dict(results)
    out = []
    for u in order:
        status, error, ms = done.get(urllib.parse.urldefrag(u).url, (None, "not_checked", 0.0))
        out.append(LinkResult(url=public_url(u), ok=error is None, status=status, error=error,
                              ms=ms, queries=list(owners[u])))
    return LinkReport(results=out, elapsed_s=round(clock() - start, 3))


def check_from_config(urls: dict[str, list[str]] | Sequence[str], links_cfg: Any) -> LinkReport:
    """:func:`check_links` with the ``links`` config node's settings (rag/app/config.py
    ``LinkCheckConfig``: ``concurrency``, ``timeout_s``, ``budget_s``)."""
    return check_links(urls, concurrency=int(links_cfg.concurrency),
                       timeout_s=float(links_cfg.timeout_s), budget_s=float(links_cfg.budget_s))


def run_links(source: SourceRef, *, github_export: bool) -> Callable[[Any], str | None] | None:
    """The ``hit -> URL`` a run's per-query traces use: every hit of a usable ``source``,
    or only the gh export documents' own URLs (``github_export``); None when no hit can have
    one (the per-query table then has no ``trace_urls`` column)."""
    if source.usable or github_export:
        return lambda hit: hit_url(hit, source)
    return None


def source_tags(source: SourceRef) -> dict[str, str]:
    """Ledger tags naming what a run's links point at: ``corpus_commit`` (with ``-dirty``
    when the work tree had changes) and ``url_template`` (its source in ``url_template_from``)."""
    tags: dict[str, str] = {}
    if source.commit:
        tags["corpus_commit"] = source.commit + ("-dirty" if source.dirty else "")
    if source.url_template:
        tags["url_template"] = source.url_template
        tags["url_template_from"] = source.template_from
    return tags


def check_run_traces(rows: Iterable[dict[str, Any]], links_cfg: Any) -> LinkReport:
    """The link check of a run (``eval.check_links``): the distinct URLs of the per-query
    rows' ``trace_urls`` (already cut to ``links.top_n``), checked with ``links_cfg``
    (:func:`check_from_config`). Never raises."""
    traces = [(str(r.get("query_id")), str(r.get("trace_urls") or "").split()) for r in rows]
    return check_from_config(trace_urls(traces, top_n=int(links_cfg.top_n)), links_cfg)
