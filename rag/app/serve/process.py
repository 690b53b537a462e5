"""Start and stop ``rag serve`` as a child process on a free loopback port (for the benchmark
and the tests; traffic never leaves 127.0.0.1)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

# loopback traffic never goes through an HTTP proxy set in the environment
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(overrides: list[str], *, env: dict[str, str] | None = None, capture: bool = False,
          timeout_s: float = 600.0, options: Sequence[str] = (),
          log_path: str | os.PathLike | None = None) -> tuple[subprocess.Popen, str]:
    """Run ``python -m rag serve`` on a free port and wait until GET /health answers — with
    any HTTP status: a 503 (readiness: ``degraded``, ``refusing``) is a server that is up.

    Args:
        overrides: KEY=VALUE config overrides.
        options: ``rag serve`` options placed before them (e.g. ``["--max-body-bytes", "4096"]``).
        capture: its stdout+stderr go to ``process.stdout`` (returned by :func:`stop`).
        log_path: its stdout+stderr go to this file instead (readable while it runs, and a
            chatty server can never block on a full pipe); takes precedence over ``capture``.

    Returns:
        (process, base URL).

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout_s`` (with its
            output when captured or logged).
    """
    port = free_port()
    log_file = None if log_path is None else open(log_path, "w", encoding="utf-8")  # noqa: SIM115
    out: Any = log_file or (subprocess.PIPE if capture else subprocess.DEVNULL)
    err: Any = subprocess.STDOUT if (log_file or capture) else subprocess.DEVNULL
    try:
        proc = subprocess.Popen([sys.executable, "-m", "rag", "serve", "--host", "127.0.0.1",
                                 "--port", str(port), *options, *overrides],
                                stdout=out, stderr=err, text=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
                                start_new_session=True)
    finally:
        if log_file is not None:
            log_file.close()  # the child holds its own descriptor
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with _LOOPBACK.open(f"{base}/health", timeout=2):
                return proc, base
        except urllib.error.HTTPError as exc:  # it answered: up, if not ready
            exc.close()
            return proc, base
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                if log_path is not None:
                    with open(log_path, encoding="utf-8", errors="replace") as fh:
                        tail = fh.read()[-2000:]
                else:
                    tail = proc.stdout.read()[-2000:] if capture and proc.stdout else ""
                raise RuntimeError(f"rag serve did not start: {tail}") from None
            time.sleep(0.5)


def health(base: str, *, timeout_s: float = 10.0) -> tuple[int, dict]:
    """(HTTP status, JSON body) of ``GET {base}/health`` — 503 included, not raised."""
    import json

    try:
        with _LOOPBACK.open(f"{base}/health", timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"{}")


def stop(proc: subprocess.Popen) -> str:
    """SIGTERM the server's process group and return what it printed (if captured)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return out or ""
