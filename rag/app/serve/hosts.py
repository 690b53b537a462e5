"""Host and Origin checks of ``rag serve``: the service answers only for the host names it is
configured with, and for no web page unless told (DNS rebinding, cross-site requests).

* **Host** (:class:`HostPolicy`): a request whose ``Host`` header names another host — a page
  on ``http://evil.example:8000`` whose name was re-pointed at 127.0.0.1 (DNS rebinding) — or
  has no ``Host`` header is answered 400 ``host_not_allowed`` and reaches nothing. The names
  accepted are ``--allowed-hosts`` (comma-separated), else ``RAG_ALLOWED_HOSTS``, else
  :data:`LOOPBACK_HOSTS` plus the address the server binds to (not a wildcard such as
  ``0.0.0.0``: a service on every interface accepts its other names only when they are listed).
  The port is not compared; ``*`` accepts any host. A trailing dot is ignored
  (``localhost.`` is ``localhost``).
* **Origin**: no CORS header is ever sent unless allowed origins are configured
  (``--allowed-origins`` / ``RAG_ALLOWED_ORIGINS``: ``scheme://host[:port]``, comma-separated,
  or ``*``; default none). A request carrying an ``Origin`` that is not allowed (a browser's,
  from a page of another site) is answered 403 ``origin_not_allowed`` unless it is a ``GET`` or
  ``HEAD`` (which the browser then cannot read: no CORS header). An allowed origin's requests
  get ``Access-Control-Allow-Origin`` (that origin, ``Vary: Origin``) and its preflight
  (``OPTIONS`` with ``Access-Control-Request-Method``) is answered 204 for ``GET`` / ``POST``
  with ``Content-Type`` and ``X-Request-ID``.

Refusals use the service's error shape (``{"detail": [{"loc", "type", "msg"}]}``, as its 413
and 422) and are logged as ``rejected`` lines; the refused value itself is never echoed or
logged. The check runs inside :class:`rag.app.serve.app.RequestGuard`, so a refusal carries the
request's ``X-Request-ID`` too.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Mapping

#: the host names a service accepts by default, besides the address it binds to
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: bind addresses that mean "every interface": no name of their own to accept
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
#: what an allowed origin's preflight may ask for
CORS_METHODS = "GET, POST"
CORS_HEADERS = "content-type, x-request-id"
CORS_MAX_AGE_S = 600
#: methods a refused origin may still use (their answers carry no CORS header: unreadable)
SAFE_METHODS = frozenset({"GET", "HEAD"})
_PORT = re.compile(r":[0-9]{1,5}")


def host_name(value: str) -> str | None:
    """The host name of a ``Host`` header value (or a configured name), lower-case, without
    its port or one trailing dot; an IPv6 address in brackets (``[::1]:8000`` -> ``[::1]``; a
    bare configured ``::1`` becomes ``[::1]``). None when it is not ``name[:port]``."""
    v = value.strip().lower()
    if not v:
        return None
    if v.startswith("["):
        end = v.find("]")
        if end < 0 or (v[end + 1:] and not _PORT.fullmatch(v[end + 1:])):
            return None
        return v[:end + 1]
    if v.count(":") > 1:  # a bare IPv6 address (a configured name, never a valid header)
        return f"[{v}]"
    name, sep, port = v.partition(":")
    if sep and not _PORT.fullmatch(sep + port):
        return None
    name = name[:-1] if name.endswith(".") else name
    return name or None


def origin_key(value: str) -> str:
    """An origin as compared: lower-case, no trailing slash (``HTTP://Localhost:3000/`` ->
    ``http://localhost:3000``)."""
    return value.strip().lower().rstrip("/")


def _split(raw: str) -> list[str]:
    return [p.strip() for p in raw.split(",") if p.strip()]


@dataclass(frozen=True)
class HostPolicy:
    """The host names and browser origins a service answers (see the module docstring).

    Attributes:
        hosts: accepted host names (:func:`host_name` form); ``("*",)`` accepts any.
        origins: allowed origins (:func:`origin_key` form); ``("*",)`` allows any, ``()`` none.
    """

    hosts: tuple[str, ...] = LOOPBACK_HOSTS
    origins: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, *, bind_host: str, hosts: str | None = None,
                      origins: str | None = None,
                      environ: Mapping[str, str] | None = None) -> "HostPolicy":
        """The policy of ``rag serve --host bind_host``: ``hosts`` (``--allowed-hosts``) if
        given, else ``RAG_ALLOWED_HOSTS`` if set, else :data:`LOOPBACK_HOSTS` plus
        ``bind_host`` (unless a wildcard); ``origins`` (``--allowed-origins``) if given, else
        ``RAG_ALLOWED_ORIGINS`` if set, else none. Both are comma-separated lists.

        Raises:
            ValueError: a listed name is not a host name, an origin is not
                ``scheme://host[:port]`` or ``*``, or a list is empty (the message names its
                source).
        """
        environ = os.environ if environ is None else environ
        source, raw = (("--allowed-hosts", hosts) if hosts is not None else
                       ("RAG_ALLOWED_HOSTS", environ.get("RAG_ALLOWED_HOSTS") or None))
        if raw is None:
            names = list(LOOPBACK_HOSTS)
            bind = host_name(bind_host) if bind_host.strip().lower() not in WILDCARD_BINDS else None
            if bind is not None and bind not in names:
                names.append(bind)
        else:
            names = []
            for part in _split(str(raw)):
                name = "*" if part == "*" else host_name(part)
                if name is None or "/" in name:
                    raise ValueError(f"{source}: {part!r} is not a host name (list names such "
                                     "as localhost,127.0.0.1,rag.internal, or *)")
                names.append(name)
            if not names:
                raise ValueError(f"{source} is empty: list the host names to answer "
                                 f"(default: {','.join(LOOPBACK_HOSTS)} and the bind address)")
        source, raw = (("--allowed-origins", origins) if origins is not None else
                       ("RAG_ALLOWED_ORIGINS", environ.get("RAG_ALLOWED_ORIGINS") or None))
        allowed = []
        for part in _split(str(raw or "")):
            key = origin_key(part)
            if key != "*" and not re.fullmatch(r"[a-z][a-z0-9+.-]*://[^/\s?#]+", key):
                raise ValueError(f"{source}: {part!r} is not an origin (scheme://host[:port], "
                                 "e.g. http://localhost:3000, or *)")
            allowed.append(key)
        return cls(hosts=tuple(dict.fromkeys(names)), origins=tuple(dict.fromkeys(allowed)))

    def host_allowed(self, value: bytes | None) -> bool:
        """Whether a request with this ``Host`` header (None: none) is answered."""
        if "*" in self.hosts:
            return True
        if value is None:
            return False
        try:
            name = host_name(value.decode("ascii"))
        except UnicodeDecodeError:
            return False
        return name is not None and name in self.hosts

    def origin_allowed(self, value: bytes) -> bool:
        """Whether a request from this ``Origin`` may be answered with CORS headers."""
        if "*" in self.origins:
            return True
        try:
            return origin_key(value.decode("ascii")) in self.origins
        except UnicodeDecodeError:
            return False

    def describe(self) -> dict:
        """The policy for the start-up log line (names and origins, no request data)."""
        return {"allowed_hosts": list(self.hosts), "allowed_origins": list(self.origins)}


class HostGuard:
    """ASGI middleware applying a :class:`HostPolicy` to every HTTP request (see the module
    docstring); other scopes (lifespan) pass through."""

    def __init__(self, app, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def _refuse(self, send, scope, status: int, header: str, kind: str, msg: str) -> None:
        from rag.app.serve.app import _send_json, log_event

        log_event(logging.INFO, {"event": "rejected", "status": status, "type": kind},
                  request_id=scope.get("state", {}).get("request_id"))
        await _send_json(send, status, {"detail": [
            {"loc": ["header", header], "type": kind, "msg": msg}]})

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for k, v in scope.get("headers", []):
            headers.setdefault(k.lower(), v)
        if not self.policy.host_allowed(headers.get(b"host")):
            await self._refuse(send, scope, 400, "host", "host_not_allowed",
                               "this service answers only for the host names "
                               f"{', '.join(self.policy.hosts)} (--allowed-hosts / "
                               "RAG_ALLOWED_HOSTS)")
            return
        origin = headers.get(b"origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET").upper()
        if not self.policy.origin_allowed(origin):
            if method in SAFE_METHODS:
                await self.app(scope, receive, send)  # no CORS header: a browser cannot read it
                return
            await self._refuse(send, scope, 403, "origin", "origin_not_allowed",
                               "requests from web pages are refused unless their origin is "
                               "listed (--allowed-origins / RAG_ALLOWED_ORIGINS)")
            return
        cors = [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]
        if method == "OPTIONS" and b"access-control-request-method" in headers:
            await send({"type": "http.response.start", "status": 204, "headers": [
                *cors, (b"access-control-allow-methods", CORS_METHODS.encode()),
                (b"access-control-allow-headers", CORS_HEADERS.encode()),
                (b"access-control-max-age", str(CORS_MAX_AGE_S).encode())]})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return

        async def with_cors(message) -> None:
            if message["type"] == "http.response.start":
                kept = [h for h in message.get("headers", [])
                        if h[0].lower() not in (b"access-control-allow-origin", b"vary")]
                message = {**message, "headers": [
                    *kept, *cors, (b"access-control-expose-headers", b"x-request-id")]}
            await send(message)

        await self.app(scope, receive, with_cors)
