"""Command-line manners (rag/app/cli.py, rag/core/exit_codes.py): --version, shell completion, no
traceback on a closed stdout, one exit-code table, no progress frames in a redirected stderr —
and the run's link check end to end (`python -m rag.run ... eval.check_links=true` against a
loopback server)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from rag.app.cli import build_parser, main
from rag.core.exit_codes import ExitCode

from conftest import (FIXTURE_NEGATIVES, FIXTURE_QUERIES, PROJECT, free_port, run_overrides,
                      run_rag, write_tree)
from linkserver import link_server
from git_repos import git, git_repo

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def rag(*argv: str, env: dict | None = None, closed_stdout: bool = False,
        module: str = "rag") -> subprocess.CompletedProcess:
    """:func:`conftest.run_rag` with the offline environment by default."""
    return run_rag(*argv, env=env or ENV, closed_stdout=closed_stdout, module=module)


def test_exit_code_table_is_the_documented_one():
    assert [(c.name, int(c)) for c in ExitCode] == [
        ("OK", 0), ("FINDINGS", 1), ("ERROR", 2), ("NO_RESULT", 3), ("INCONCLUSIVE", 4),
        ("INTERRUPTED", 130), ("BROKEN_PIPE", 141)]
    from rag.app.gate import EXIT_INCONCLUSIVE

    assert EXIT_INCONCLUSIVE == ExitCode.INCONCLUSIVE
    table = (PROJECT / "docs" / "cli.md").read_text()
    for c in ExitCode:
        assert f"| {int(c)} | `{c.name}` |" in table, c.name


def test_version_and_completion_scripts(capsys):
    proc = rag("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"rag {version('rag')}"
    assert main(["completion", "bash"]) == 0
    bash = capsys.readouterr().out
    assert "complete" in bash and "search" in bash and "--check-links" in bash
    assert main(["completion", "zsh"]) == 0
    zsh = capsys.readouterr().out
    assert zsh.startswith("#compdef rag") and "--check-links" in zsh
    with pytest.raises(SystemExit) as exc:
        main(["completion", "fish"])
    assert exc.value.code == ExitCode.ERROR


@pytest.mark.slow
def test_closed_stdout_exits_141_without_a_traceback(tmp_path):
    proc = rag("completion", "bash", closed_stdout=True)
    assert proc.returncode == ExitCode.BROKEN_PIPE and proc.stderr == ""
    repo = write_tree(tmp_path / "repo", {"src/pay.py": "def handleAuthCallback(r):\n    return r\n",
                                          "README.md": "# pay\n"})
    env = {**ENV, "RAG_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    proc = rag("search", "handleAuthCallback", "--mode", "bm25", "-r", str(repo),
               "embedder.query_backend=torch", env=env, closed_stdout=True)
    assert proc.returncode == ExitCode.BROKEN_PIPE, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


@pytest.mark.slow
def test_bad_values_and_group_options_exit_2_in_one_line():
    for args, where in ((["search.top_k=many"], "search.top_k='many'"),
                        (["corpus=nosuch"], "corpus=nosuch: no such corpus config"),
                        (["eval.check_links=maybe"], "eval.check_links='maybe'"),
                        (["corpus.url_template='ftp://h/{path}'"], None)):
        proc = rag(*args, "tracking.enabled=false", module="rag.run")
        assert proc.returncode == ExitCode.ERROR, (args, proc.stderr[-1500:])
        lines = proc.stderr.strip().splitlines()
        assert lines[-1].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
        if where:
            assert len(lines) == 1 and where in lines[0], lines
        else:  # validated after composition: the template's own message
            assert "must be an http:// or https:// URL" in lines[-1]


def test_search_exit_codes_hits_urls_and_stale_index(tmp_path, monkeypatch, capsys):
    from rag.app import search_cli
    from rag.index import versioned

    # five files: BM25's IDF scores a term found in fewer than half of the chunks
    repo = git_repo(tmp_path / "repo", {"src/pay.py": "def handleAuthCallback(r):\n    return r\n",
                                        "README.md": "# pay\n\nPayments.\n",
                                        "src/cart.py": "def total(c):\n    return 0\n",
                                        "src/refund.py": "def refund(o):\n    return o\n",
                                        "docs/deploy.md": "# Deploy\n\nUse nginx.\n"},
                    remote="https://ci:tok@github.com/org/pay.git")
    head = git(repo, "rev-parse", "HEAD")
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    base = ["-r", str(repo), "--mode", "bm25", "embedder.query_backend=torch"]
    assert main(["search", "handleAuthCallback", *base, "--json"]) == ExitCode.OK
    out = json.loads(capsys.readouterr().out)
    assert out["hits"][0]["url"] == f"https://github.com/org/pay/blob/{head}/src/pay.py#L1-L2"
    assert out["index"]["commit"] == head and out["index"]["dirty"] is False
    assert out["index"]["stale"] is False
    # nothing ranked at all: no result (3), the JSON still printed
    assert main(["search", "zzqx", *base, "--json"]) == ExitCode.NO_RESULT
    assert json.loads(capsys.readouterr().out)["hits"] == []
    # a build 25 h old (the clock passed in) is served, flagged stale, with a warning
    manifest = versioned.read_manifest(next((tmp_path / "cache" / "indexes").iterdir()))
    args = build_parser().parse_args(["search", "handleAuthCallback", "--json"])
    args.overrides = [f"corpus.path={repo}", "search.mode=bm25", "embedder.query_backend=torch"]
    args.corpus = None
    for hours, stale in ((25, True), (23, False)):
        assert search_cli.search_command(args, now=manifest["built_at"] + hours * 3600) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["index"]["stale"] is stale
        assert ("is 25.0 h old (index.max_age_h=24)" in captured.err) is stale


@pytest.mark.slow
def test_run_checks_trace_links_on_a_loopback_server_and_writes_no_progress_frames(
        tmp_path):
    closed = free_port()
    issue = f"http://127.0.0.1:{closed}/o/shop/issues/7"
    repo = git_repo(tmp_path / "repo", {
        "src/shop/payments.py": "def handleAuthCallback(request):\n    \"\"\"Verify the "
                                "provider's signed callback.\"\"\"\n    return request\n",
        "src/shop/cart.py": "def apply_discount_code(cart, code):\n    \"\"\"Reduce the total "
                            "when a valid voucher code is entered.\"\"\"\n    return cart\n",
        "docs/guide.md": "# Shop guide\n\n## Deploying the shop\n\nRun the shop behind nginx "
                         "in production.\n"})
    head = git(repo, "rev-parse", "HEAD")
    (tmp_path / "issues.json").write_text(json.dumps([{
        "number": 7, "title": "Refund button crashes on a cancelled order", "url": issue,
        "body": "Clicking refund on a cancelled order raises KeyError."}]))
    queries = yaml.safe_load(FIXTURE_QUERIES)
    queries["queries"].append({"id": "issue-refund", "query": "refund button crashes",
                               "tags": ["prose"], "relevant": [{"path": issue}]})
    golden = write_tree(tmp_path / "golden", {"queries.yaml": yaml.safe_dump(queries),
                                              "negatives.yaml": FIXTURE_NEGATIVES})
    err_file = tmp_path / "stderr.txt"
    with link_server(slow_s=3.0, rules={"payments.py": 404}, slow_parts=("cart.py",)) as (base, seen):
        template = f"{base}/org/shop/blob/{{commit}}/{{path}}#L{{start_line}}-L{{end_line}}"
        args = [*run_overrides(tmp_path, repo, golden), f"corpus.url_template='{template}'",
                f"corpus.github_export=[{tmp_path / 'issues.json'}]", "eval.check_links=true",
                "links.timeout_s=0.5", "links.concurrency=3", f"hydra.run.dir={tmp_path / 'out'}"]
        with err_file.open("w") as err:
            proc = subprocess.run([sys.executable, "-m", "rag.run", *args], stdout=subprocess.PIPE,
                                  stderr=err, text=True, env=ENV, cwd=PROJECT, timeout=600)
    stderr = err_file.read_text()
    assert proc.returncode == 0, stderr[-3000:]
    assert "\r" not in stderr  # tqdm draws frames with \r: none in a redirected stderr
    assert {m for m, _ in seen} == {"HEAD"}
    assert all(p.startswith(f"/org/shop/blob/{head}/") for _, p in seen)
    # the report: one line of counts, one per failed URL
    summary = next(ln for ln in proc.stdout.splitlines() if ln.startswith("links: "))
    db = tmp_path / "mlflow.db"
    with sqlite3.connect(db) as con:
        (run_id,) = con.execute("SELECT run_uuid FROM runs").fetchone()
        metrics = dict(con.execute("SELECT key, value FROM metrics WHERE run_uuid = ?", (run_id,)))
        tags = dict(con.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (run_id,)))
    links = json.loads(next((tmp_path / "mlartifacts").rglob("links.json")).read_text())
    by = {r["url"]: r for r in links["results"]}
    assert by[issue]["error"] == "refused" and "issue-refund" in by[issue]["queries"]
    errors = {r["error"] for r in links["results"]}
    assert {"http_404", "timeout", "refused", None} <= errors
    for r in links["results"]:
        path = r["url"].split("/blob/", 1)[-1]
        expected = ("refused" if r["url"] == issue else "http_404" if "payments.py" in path
                    else "timeout" if "cart.py" in path else None)
        assert r["error"] == expected, r
    n, failed = len(links["results"]), sum(r["error"] is not None for r in links["results"])
    assert metrics["links/urls"] == n and metrics["links/checked"] == n
    assert metrics["links/failed"] == failed
    assert metrics["links/failed_share"] == pytest.approx(failed / n)
    assert summary.startswith(f"links: {n} URL(s) in the traces, {n} checked, {failed} failed")
    assert tags["corpus_commit"] == head and tags["url_template"] == template
    assert tags["url_template_from"] == "config"
    # the per-query traces carry the URLs of their top links.top_n hits
    csv = next((tmp_path / "mlartifacts").rglob("per_query.csv")).read_text()
    assert "trace_urls" in csv.splitlines()[0] and f"/org/shop/blob/{head}/" in csv
