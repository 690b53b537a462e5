"""``python -m rag.bench.drills`` (``make drill``): the fault drills of issue 27 that run on
loopback, each against a small repository written into a temporary folder, each reporting
PASS, FAIL or SKIP with what it saw. Not part of ``make test``: the drills start servers and
real sweeps (minutes on 2 cores); their cases are also regression tests of the suite.

Drills (``--only NAME`` runs some):

* ``tracking-503``: a routing sweep against a tracking server that answers 503 to everything
  must fail before its first job with one ``error:`` line and no write (exit 2).
* ``tracking-503-recovers``: the routing sweep against a real ``mlflow server`` behind a
  proxy that answers 503 to the first requests: the command fails with one line, or every row and the
  parent are logged correctly (exactly one baseline, with the baseline's values, every other
  row compared with it) — never exit 0 with a mislabelled baseline.
* ``damaged-build``: ``rag index``, then ``embeddings.npy`` truncated and ``chunks.json``
  deleted in turn: ``rag search`` must refuse with one line naming the file (or serve an
  earlier build, saying so). Skipped where builds do not verify themselves yet.
* ``host-header``: ``rag serve`` must refuse ``Host: evil.example`` and answer its own name.
  Skipped where the service has no host check yet.
* ``secrets``: a repository with GitHub, Slack and password literals: none may come back from
  ``rag search --json``. Skipped where secrets are not detected by content yet.
* ``soak``: 2,000 requests to ``rag serve``, 16 at a time, one in five malformed (12 kinds:
  bad JSON, wrong types, an empty query, NaN, unknown fields, binary, another content type,
  a GET, a 300 kB query): no 5xx, every valid one 200, every malformed one 4xx, no query text
  in the server's log; its RSS before and after are printed.

Exit status: 0 when no drill failed (skips allowed), 1 when one did, 2 on a bad option.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator

from contextlib import contextmanager

#: the drills' repository: a tiny shop package, its labels and negatives (as tests/conftest.py)
REPO = {
    "src/shop/__init__.py": '"""A tiny shop package."""\n',
    "src/shop/cart.py": ('"""Shopping cart."""\n\n\nclass Cart:\n    """Holds line items."""\n\n'
                         '    def add_item(self, sku, quantity=1):\n'
                         '        """Add quantity units of a product to the cart."""\n'
                         '        self.items[sku] = self.items.get(sku, 0) + quantity\n'),
    "src/shop/payments.py": ('"""Payments."""\n\n\ndef refund_order(order_id):\n'
                             '    """Send money back to the customer for a cancelled order."""\n'
                             '    return {"refunded": order_id}\n'),
    "docs/guide.md": "# Shop guide\n\n## Refunds\n\nCustomers get their money back in 30 days.\n",
}
GOLDEN = {
    "queries.yaml": ("corpus: shop\nqueries:\n  - id: q1\n    query: refund_order\n"
                     "    relevant:\n      - path: src/shop/payments.py\n"
                     "  - id: q2\n    query: add a product to the cart\n"
                     "    relevant:\n      - path: src/shop/cart.py\n"),
    "negatives.yaml": "corpus: shop\nnegatives:\n  - id: n1\n    query: football world cup\n",
}
#: token-shaped secrets of the secrets drill (fakes of the right shape, never real)
SECRETS = {
    "src/shop/settings.py": ('GITHUB_TOKEN = "ghp_' + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8" + '"\n'
                             'password = "' + "Xq9!vT2#kL7pWz4m" + '"\n'),
    "README.md": ("# Shop\n\nSet `github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
                  + "0123456789ABCDEFGHIJKLMNOPQRSTUV" + "` and the Slack bot token xoxb-"
                  + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx" + ".\n"),
}


@dataclass
class Result:
    """What a drill saw: ``status`` PASS, FAIL or SKIP, and one line of detail."""

    name: str
    status: str
    detail: str


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _run(args: list[str], *, timeout_s: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=_env(),
                          timeout=timeout_s)


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _http_server(handler: type) -> Iterator[str]:
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


def _proxy(upstream: str | None, *, fail_first: int, seen: list[str]) -> type:
    """A handler answering 503 to the first ``fail_first`` requests (all of them when
    ``upstream`` is None) and forwarding the rest to ``upstream``; ``seen`` gets each path."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            with lock:
                seen.append(self.path)
                fail = upstream is None or len(seen) <= fail_first
            if fail:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            host, port = upstream.split("//", 1)[1].split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "connection", "transfer-encoding")}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _answer

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def _run_overrides(work: Path) -> list[str]:
    return ["corpus.name=shop", f"corpus.path={work / 'repo'}",
            f"eval.golden_dir={work / 'golden'}", f"paths.cache_dir={work / 'cache'}",
            f"tracking.artifact_root={work / 'mlartifacts'}",
            f"tracking.report_path={work / 'ledger.md'}",
            f"hydra.sweep.dir={work / 'multirun'}"]


def drill_tracking_503(work: Path) -> Result:
    seen: list[str] = []
    with _http_server(_proxy(None, fail_first=0, seen=seen)) as base:
        proc = _run(["-m", "rag.run", "+sweep=routing", *_run_overrides(work),
                     f"tracking.uri={base}"])
    lines = _lines(proc.stderr)
    writes = [p for p in seen if not p.endswith("/experiments/search")]
    ok = (proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
          and not writes and "ledger row" not in proc.stdout)
    return Result("tracking-503", "PASS" if ok else "FAIL",
                  f"exit {proc.returncode}, {len(seen)} requests ({len(writes)} writes), stderr: "
                  + (lines[-1] if lines else "(empty)")[:300])


def drill_tracking_503_recovers(work: Path) -> Result:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}",
         "--default-artifact-root", str(work / "server-artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**_env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    upstream = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{upstream}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    return Result("tracking-503-recovers", "FAIL", "mlflow server did not start")
                time.sleep(0.5)
        seen: list[str] = []
        with _http_server(_proxy(upstream, fail_first=2, seen=seen)) as base:
            proc = _run(["-m", "rag.run", "+sweep=routing", *_run_overrides(work),
                         f"tracking.uri={base}"])
            if proc.returncode != 0:
                lines = _lines(proc.stderr)
                ok = (len(lines) == 1 and lines[0].startswith("error: ")
                      and "tracking server" in lines[0])
                return Result("tracking-503-recovers", "PASS" if ok else "FAIL",
                              f"exit {proc.returncode} with {len(lines)} stderr line(s): "
                              + (lines[-1] if lines else "")[:300])
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=base)
            exp = client.get_experiment_by_name("rag-shop")
            runs = client.search_runs([exp.experiment_id])
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    parents = [r for r in runs if r.data.tags.get("rag.sweep_parent") == "1"]
    rows = [r for r in runs if r.data.tags.get("rag.sweep_parent") != "1"]
    base_rows = [r for r in rows if r.data.tags.get("is_baseline") == "true"]
    problems = []
    if len(parents) != 1 or parents[0].info.status != "FINISHED":
        problems.append(f"{len(parents)} parent run(s), {[p.info.status for p in parents]}")
    if len(rows) != 4 or any(r.info.status != "FINISHED" for r in rows):
        problems.append(f"{len(rows)} rows")
    if len(base_rows) != 1 or base_rows[0].data.params.get("search.mode") != "dense":
        problems.append("the baseline is not exactly the search.mode=dense row")
    elif any(r.data.tags.get("baseline_run_id") != base_rows[0].info.run_id
             for r in rows if r is not base_rows[0]):
        problems.append("a row is not compared with the baseline")
    if parents and any(r.data.tags.get("mlflow.parentRunId") != parents[0].info.run_id
                       for r in rows):
        problems.append("a row is not under the parent run")
    return Result("tracking-503-recovers", "FAIL" if problems else "PASS",
                  "; ".join(problems) or f"exit 0 after {min(len(seen), 2)} answers 503: "
                  f"{len(rows)} rows and the parent logged, one baseline")


def _current_build(work: Path) -> Path | None:
    builds = sorted((work / "cache" / "indexes").glob("*/current"))
    return builds[0].resolve() if builds else None


def _damage(work: Path, file: str, damage: Callable[[Path], None]) -> tuple[bool, str]:
    """Index afresh, damage ``file`` of the current build, search: (passed, what was seen)."""
    shutil.rmtree(work / "cache", ignore_errors=True)
    overrides = [f"paths.cache_dir={work / 'cache'}", "corpus.name=shop"]
    built = _run(["-m", "rag", "index", "--path", str(work / "repo"), *overrides])
    build = _current_build(work)
    if built.returncode != 0 or build is None:
        return False, f"rag index failed: {(_lines(built.stderr) or ['?'])[-1][:200]}"
    damage(build / file)
    proc = _run(["-m", "rag", "search", "refund_order", "-r", str(work / "repo"), *overrides])
    lines = _lines(proc.stderr)
    refused = (proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
               and file in lines[0])
    served_other = proc.returncode == 0 and any("previous" in ln or "earlier" in ln
                                                for ln in lines)
    return refused or served_other, (f"{file}: exit {proc.returncode}, "
                                     + (lines[-1] if lines else "(no stderr)")[:200])


def drill_damaged_build(work: Path) -> Result:
    try:
        from rag.index import versioned
    except ImportError:
        return Result("damaged-build", "SKIP", "rag.index.versioned missing")
    if not hasattr(versioned, "verify_build"):
        return Result("damaged-build", "SKIP", "builds do not verify themselves yet")

    def truncate(p: Path) -> None:
        with p.open("r+b") as fh:
            fh.truncate(p.stat().st_size // 2)

    seen = [_damage(work, "embeddings.npy", truncate),
            _damage(work, "chunks.json", lambda p: p.unlink())]
    return Result("damaged-build", "PASS" if all(ok for ok, _ in seen) else "FAIL",
                  " | ".join(what for _, what in seen))


def drill_host_header(work: Path) -> Result:
    try:
        from rag.app.serve import hosts  # noqa: F401 - present once the service checks Host
        from rag.app.serve import process
    except ImportError:
        return Result("host-header", "SKIP", "the service has no Host check yet")
    proc, base = process.start([f"corpus.path={work / 'repo'}", "corpus.name=shop"],
                               env={"RAG_CACHE_DIR": str(work / "cache-serve"),
                                    "RAG_SEARCH_MODE": "bm25"})
    try:
        host, port = base.split("//", 1)[1].split(":")
        statuses = {}
        for name in ("evil.example", f"127.0.0.1:{port}"):
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            conn.request("POST", "/search", body=b'{"query": "refund_order"}',
                         headers={"Host": name, "Content-Type": "application/json"})
            statuses[name] = conn.getresponse().status
            conn.close()
    finally:
        process.stop(proc)
    ok = 400 <= statuses["evil.example"] < 500 and statuses[f"127.0.0.1:{port}"] == 200
    return Result("host-header", "PASS" if ok else "FAIL",
                  ", ".join(f"Host {k}: {v}" for k, v in statuses.items()))


#: the soak: requests in all, at this many at once, one in five malformed (of the kinds below)
SOAK_REQUESTS, SOAK_CONCURRENCY = 2000, 16
#: malformed requests (method, path, content type, body): each must be a 4xx, never a 5xx
MALFORMED = (
    ("POST", "/search", "application/json", b"{not json"),
    ("POST", "/search", "application/json", b'{"query": 5}'),
    ("POST", "/search", "application/json", b'{"query": ""}'),
    ("POST", "/search", "application/json", b'{"query": "x", "top_k": -3}'),
    ("POST", "/search", "application/json", b'{"query": "x", "top_k": "many"}'),
    ("POST", "/search", "application/json", b'{"query": "x", "min_dense": NaN}'),
    ("POST", "/search", "application/json", b'{"query": "x", "surprise": 1}'),
    ("POST", "/search", "application/json", b"\xff\xfe\x00binary"),
    ("POST", "/search", "text/plain", b"query=refund"),
    ("POST", "/search", "application/json", b"[1, 2, 3]"),
    ("GET", "/search", "application/json", b""),
    ("POST", "/search", "application/json", b'{"query": "' + b"x" * 300_000 + b'"}'),
)


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def drill_soak(work: Path) -> Result:
    """:data:`SOAK_REQUESTS` requests to a ``rag serve`` on the fixture repository,
    :data:`SOAK_CONCURRENCY` at a time, one in five malformed (:data:`MALFORMED`): no 5xx, every
    valid one a 200, every malformed one a 4xx, no query text in the server's log (each valid
    query carries a marker word), and the server's RSS after against before (printed, not
    judged: one run is no leak test)."""
    from concurrent.futures import ThreadPoolExecutor

    from rag.app.serve import process

    log = work / "soak-serve.log"
    proc, base = process.start([f"corpus.path={work / 'repo'}", "corpus.name=shop"],
                               env={"RAG_CACHE_DIR": str(work / "cache-soak"),
                                    "RAG_SEARCH_MODE": "bm25"}, log_path=log)
    host, port = base.split("//", 1)[1].split(":")
    marker = "zqxsoakmarker"

    def one(i: int) -> tuple[bool, int]:
        if i % 5 == 4:
            method, path, ctype, body = MALFORMED[(i // 5) % len(MALFORMED)]
        else:
            method, path, ctype = "POST", "/search", "application/json"
            body = json.dumps({"query": f"refund order {marker}{i}"}).encode()
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            conn.request(method, path, body=body or None, headers={"Content-Type": ctype})
            status = conn.getresponse().status
        except OSError:
            status = 0
        finally:
            conn.close()
        return i % 5 != 4, status

    try:
        before = _rss_kb(proc.pid)
        with ThreadPoolExecutor(SOAK_CONCURRENCY) as pool:
            got = list(pool.map(one, range(SOAK_REQUESTS)))
        after = _rss_kb(proc.pid)
    finally:
        process.stop(proc)
    five = sum(1 for _, st in got if st >= 500 or st == 0)
    bad_valid = sum(1 for valid, st in got if valid and st != 200)
    bad_malformed = sum(1 for valid, st in got if not valid and not 400 <= st < 500)
    leaked = marker in log.read_text(encoding="utf-8", errors="replace")
    ok = not (five or bad_valid or bad_malformed or leaked)
    rss = (f"RSS {before // 1024} -> {after // 1024} MB" if before and after else "RSS ?")
    return Result("soak", "PASS" if ok else "FAIL",
                  f"{len(got)} requests ({len(got) // 5} malformed of {len(MALFORMED)} kinds): "
                  f"{five} 5xx or no answer, {bad_valid} valid not 200, {bad_malformed} "
                  f"malformed not 4xx, query text in the log: {'yes' if leaked else 'no'}; {rss}")


def drill_secrets(work: Path) -> Result:
    try:
        from rag.corpus import secrets
    except ImportError:
        return Result("secrets", "SKIP", "no content rules for secrets yet")
    if not hasattr(secrets, "TokenRule"):
        return Result("secrets", "SKIP", "no content rules for secrets yet")
    repo = _write(work / "secrets-repo", {**REPO, **SECRETS})
    overrides = [f"paths.cache_dir={work / 'cache-secrets'}", "corpus.name=shopsecrets"]
    built = _run(["-m", "rag", "index", "--path", str(repo), *overrides])
    if built.returncode != 0:
        return Result("secrets", "FAIL", f"rag index: {(_lines(built.stderr) or ['?'])[-1][:200]}")
    literals = ["ghp_A1b2C3d4", "github_pat_11ABCDEFG", "xoxb-123456789012", "Xq9!vT2#kL7pWz4m"]
    leaked = set()
    for query in ("GITHUB_TOKEN", "password", "Slack bot token", "github_pat"):
        proc = _run(["-m", "rag", "search", query, "--json", "-r", str(repo), "--mode", "bm25",
                     *overrides])
        leaked |= {lit for lit in literals if lit in proc.stdout}
    return Result("secrets", "FAIL" if leaked else "PASS",
                  f"leaked: {sorted(leaked)}" if leaked else "no secret literal returned")


#: name -> drill, in the order they run
DRILLS: dict[str, Callable[[Path], Result]] = {
    "tracking-503": drill_tracking_503,
    "tracking-503-recovers": drill_tracking_503_recovers,
    "damaged-build": drill_damaged_build,
    "host-header": drill_host_header,
    "secrets": drill_secrets,
    "soak": drill_soak,
}


def main(argv: list[str] | None = None) -> int:
    """Run the drills; print one line per drill; 0 when none failed, 1 when one did."""
    parser = argparse.ArgumentParser(prog="python -m rag.bench.drills",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(DRILLS), default=None,
                        help="run only these drills")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary folder (its path is printed)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rag-drills-"))
    results = []
    try:
        for name in args.only or list(DRILLS):
            work = root / name
            _write(work / "repo", REPO)
            _write(work / "golden", GOLDEN)
            t0 = time.monotonic()
            try:
                res = DRILLS[name](work)
            except Exception as exc:  # noqa: BLE001 - a drill that crashes is a failure
                res = Result(name, "FAIL", f"the drill crashed: {type(exc).__name__}: {exc}")
            results.append(res)
            print(f"{res.status:4}  {name:22} {time.monotonic() - t0:6.1f} s  {res.detail}",
                  flush=True)
    finally:
        if args.keep:
            print(f"drill folders kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    failed = [r for r in results if r.status == "FAIL"]
    print(f"{len(results) - len(failed)} of {len(results)} drills passed or skipped"
          + (f"; failed: {', '.join(r.name for r in failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
