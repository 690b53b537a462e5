"""A loopback HTTP server for link-check tests: HEAD (and GET) answered by path —
``/missing...`` 404, ``/slow...`` (or a path holding one of ``slow_parts``) after ``slow_s``
seconds, ``/moved...`` 301 to ``/ok``,
anything else 200 — and every request's method and path recorded. Started on 127.0.0.1 by the
test, in a thread of the test's own process, and shut down by it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _handler(seen: list[tuple[str, str]], slow_s: float, rules: dict[str, int],
             slow_parts: tuple[str, ...]):
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append((self.command, self.path))
            path = self.path
            if path.startswith("/slow") or any(part in path for part in slow_parts):
                time.sleep(slow_s)
            status = next((code for part, code in rules.items() if part in path), None)
            if status is None:
                status = 404 if path.startswith("/missing") else \
                    301 if path.startswith("/moved") else 200
            self.send_response(status)
            if status == 301:
                self.send_header("Location", "/ok-after-redirect")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = _answer
        do_GET = _answer

        def log_message(self, *args) -> None:  # quiet
            pass

    return Handler


@contextmanager
def link_server(*, slow_s: float = 3.0, rules: dict[str, int] | None = None,
                slow_parts: tuple[str, ...] = ()) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """``(base URL, requests seen)`` of a server running for the ``with`` block.
    ``rules``: a path part -> the status answered for paths that contain it."""
    seen: list[tuple[str, str]] = []
    with loopback(_handler(seen, slow_s, rules or {}, slow_parts)) as base:
        yield base, seen


@contextmanager
def loopback(handler) -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a threading HTTP server with ``handler`` (a
    BaseHTTPRequestHandler class), on a free port, for the ``with`` block; shut down after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
