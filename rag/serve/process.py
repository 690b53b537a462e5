"""Start and stop ``rag serve`` as a child process on a free loopback port (for the benchmark
and the tests; traffic never leaves 127.0.0.1)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(overrides: list[str], *, env: dict[str, str] | None = None, capture: bool = False,
          timeout_s: float = 600.0) -> tuple[subprocess.Popen, str]:
    """Run ``python -m rag serve`` on a free port and wait until GET /health answers.

    Returns:
        (process, base URL). With ``capture`` its stdout+stderr go to ``process.stdout``.

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout_s`` (with its
            output when captured).
    """
    port = free_port()
    out: Any = subprocess.PIPE if capture else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "rag", "serve", "--port", str(port), *overrides],
                            stdout=out, stderr=subprocess.STDOUT if capture else subprocess.DEVNULL,
                            text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"{base}/health", timeout=2)
            return proc, base
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                tail = proc.stdout.read()[-2000:] if capture and proc.stdout else ""
                raise RuntimeError(f"rag serve did not start: {tail}") from None
            time.sleep(0.5)


def stop(proc: subprocess.Popen) -> str:
    """SIGTERM the server's process group and return what it printed (if captured)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return out or ""
