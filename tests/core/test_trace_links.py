"""Trace links (rag/core/trace_links.py): URL templates, the commit of a git work tree, each hit's
URL, and the bounded HEAD check against a loopback server (200, 404, a timeout, a refused
connection, a redirect, the budget)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rag.core.trace_links import (LinkError, SourceRef, check_links, check_url_template, hit_url,
                             public_url, resolve_source, run_links, template_from_remote,
                             trace_urls)

from conftest import free_port, write_tree
from git_repos import git, git_repo
from linkserver import link_server

GH = "https://github.com/org/repo/blob/{commit}/{path}#L{start_line}-L{end_line}"


def hit(path: str, start: int = 3, end: int = 9):
    return SimpleNamespace(path=path, start_line=start, end_line=end)


@pytest.mark.parametrize("template, problem", [
    ("https://u:secret@h/{path}", "no user name or password"),
    ("ftp://h/{path}", "http:// or https://"),
    ("https://h/{sha}/{path}", "unknown placeholder {sha}"),
    ("https://h/{path!r}", "no format spec"),
    ("https://h/{path:>9}", "no format spec"),
    ("https://h/{path", "expected '}'"),
    ("https://h/a b/{path}", "no spaces"),
    ("https://{path}", "no placeholder in the scheme or host"),
    ("https://{commit}.example.org/{path}", "no placeholder in the scheme or host"),
    ("https://h:abc/{path}", "port must be a number"),
])
def test_bad_templates_are_refused_by_name(template, problem):
    with pytest.raises(LinkError) as err:
        check_url_template(template)
    assert problem in str(err.value) and str(err.value).startswith("corpus.url_template")
    assert "secret" not in str(err.value)


def test_templates_derived_only_from_https_forge_remotes_and_never_with_credentials():
    assert template_from_remote("https://bot:ghp_token@github.com/org/repo.git") == GH
    assert template_from_remote("https://github.com/org/repo/") == GH
    assert template_from_remote("https://gitlab.example.org:8443/g/sub/repo.git") == (
        "https://gitlab.example.org:8443/g/sub/repo/-/blob/{commit}/{path}"
        "#L{start_line}-{end_line}")
    for remote in ("git@github.com:org/repo.git", "ssh://git@github.com/org/repo.git",
                   "http://github.com/org/repo.git", "https://example.org/org/repo.git",
                   "https://github.com/justorg", "/srv/git/repo.git", None, ""):
        assert template_from_remote(remote) is None, remote


def test_resolve_source_pins_the_commit_of_a_work_tree_and_its_subdirectory(tmp_path):
    repo = git_repo(tmp_path / "repo", {"pkg/src/a b.py": "x = 1\n", "README.md": "r\n"},
                    remote="https://tok@github.com/org/repo.git")
    head = git(repo, "rev-parse", "HEAD")
    src = resolve_source(repo / "pkg")
    assert (src.commit, src.dirty, src.prefix, src.template_from) == (head, False, "pkg/", "remote")
    assert "tok" not in src.url_template
    # the path from the repository root, percent-encoded; the lines of the hit
    assert hit_url(hit("src/a b.py"), src) == (
        f"https://github.com/org/repo/blob/{head}/pkg/src/a%20b.py#L3-L9")
    # a configured template wins over the remote's
    mine = resolve_source(repo, url_template="http://127.0.0.1:1/{commit}/{path}?l={start_line}")
    assert mine.template_from == "config"
    assert hit_url(hit("README.md", 1, 1), mine) == f"http://127.0.0.1:1/{head}/README.md?l=1"
    # an untracked, not ignored file makes the tree dirty; links still point at HEAD
    (repo / "new.py").write_text("y = 2\n")
    assert resolve_source(repo).dirty is True and resolve_source(repo).commit == head


def test_outside_git_only_commit_free_templates_and_export_urls_link(tmp_path):
    plain = write_tree(tmp_path / "plain", {"a.py": "x = 1\n"})
    src = resolve_source(plain)
    assert src == SourceRef() and not src.usable
    assert hit_url(hit("a.py"), src) is None
    # a gh export document keeps its canonical URL whatever the source
    issue = "https://github.com/o/shop/issues/7"
    assert hit_url(hit(issue), src) == issue
    assert run_links(src, github_export=False) is None
    assert run_links(src, github_export=True)(hit(issue)) == issue
    # a template that needs {commit} cannot link without one; one that does not can
    assert not resolve_source(plain, url_template=GH).usable
    flat = resolve_source(plain, url_template="https://docs.example.org/{path}#{start_line}")
    assert hit_url(hit("a.py", 4, 5), flat) == "https://docs.example.org/a.py#4"


def test_source_round_trips_through_a_manifest_and_a_serve_time_template():
    src = SourceRef(commit="a" * 40, dirty=True, prefix="p/", url_template=GH,
                    template_from="remote")
    back = SourceRef.from_dict(json.loads(json.dumps(src.as_dict())))
    assert back == src
    other = back.with_template("https://mirror.example.org/{commit}/{path}")
    assert hit_url(hit("x.py"), other) == f"https://mirror.example.org/{'a' * 40}/p/x.py"
    assert back.with_template(None) is back
    assert SourceRef.from_dict(None) == SourceRef()


def test_trace_urls_dedupes_within_the_top_n_of_each_trace():
    traces = [("q1", ["u1", "u2", None, "u3", "u4", "u9"]), ("q2", ["u2", "u5"]), ("q3", [])]
    assert trace_urls(traces, top_n=5) == {"u1": ["q1"], "u2": ["q1", "q2"], "u3": ["q1"],
                                           "u4": ["q1"], "u5": ["q2"]}


def test_public_url_drops_credentials():
    assert public_url("https://a:b@h.org/x?y=1") == "https://h.org/x?y=1"
    assert public_url("https://h.org/x") == "https://h.org/x"


def test_head_check_reports_404_timeout_refused_and_redirect_without_raising():
    closed = f"http://127.0.0.1:{free_port()}/nobody-listens"
    with link_server(slow_s=3.0) as (base, seen):
        urls = {f"{base}/ok": ["q1"], f"{base}/missing/file.py": ["q1", "q2"],
                f"{base}/slow/file.py": ["q2"], closed: ["q3"], f"{base}/moved": ["q3"]}
        t0 = time.monotonic()
        report = check_links(urls, concurrency=4, timeout_s=0.5, budget_s=20)
        took = time.monotonic() - t0
    by = {r.url: r for r in report.results}
    assert [r.url for r in report.results] == list(urls)  # input order
    assert (by[f"{base}/ok"].ok, by[f"{base}/ok"].status) == (True, 200)
    assert (by[f"{base}/missing/file.py"].status, by[f"{base}/missing/file.py"].error) == (404, "http_404")
    assert by[f"{base}/missing/file.py"].queries == ["q1", "q2"]
    assert (by[f"{base}/slow/file.py"].status, by[f"{base}/slow/file.py"].error) == (None, "timeout")
    assert (by[closed].status, by[closed].error) == (None, "refused")
    assert (by[f"{base}/moved"].ok, by[f"{base}/moved"].status) == (True, 200)
    # only HEAD requests, the redirect followed with HEAD too
    assert {m for m, _ in seen} == {"HEAD"} and ("HEAD", "/ok-after-redirect") in seen
    m = report.metrics()
    assert (m["links/urls"], m["links/checked"], m["links/failed"]) == (5, 5, 3)
    assert m["links/failed_share"] == pytest.approx(3 / 5)
    assert (m["links/failed_http_404"], m["links/failed_timeout"], m["links/failed_refused"]) == (1, 1, 1)
    assert took < 3.0  # the slow answer was not waited for
    lines = report.lines()
    assert lines[0].startswith("links: 5 URL(s) in the traces, 5 checked, 3 failed (60.0%)")
    assert any("http_404" in ln and "/missing/file.py" in ln and "q1, q2" in ln for ln in lines)


def test_budget_bounds_the_check_and_reports_what_was_not_checked():
    clock = [0.0]

    def request(url, timeout):  # each request takes 4 fake seconds
        clock[0] += 4.0
        return 200, None

    report = check_links([f"http://h/{i}" for i in range(5)], concurrency=1, timeout_s=5,
                         budget_s=10, request=request, clock=lambda: clock[0])
    # starts at 0, 4 and 8 s; at 12 s the 10 s budget is spent
    assert [r.error for r in report.results] == [None, None, None, "not_checked", "not_checked"]
    m = report.metrics()
    assert (m["links/checked"], m["links/not_checked"], m["links/failed_share"]) == (3, 2, 0.0)
    assert "2 not checked (links.budget_s spent)" in report.lines()[0]


def test_a_request_that_raises_is_a_failure_not_an_abort():
    def request(url, timeout):
        raise RuntimeError("boom")

    report = check_links(["http://h/a"], concurrency=2, timeout_s=1, budget_s=5, request=request)
    assert report.results[0].error == "connection" and report.metrics()["links/failed_share"] == 1.0
    assert check_links([], concurrency=2, timeout_s=1, budget_s=5).metrics()["links/urls"] == 0


def test_github_export_urls_must_be_plain_http_links(tmp_path):
    from rag.corpus.github import GitHubExportError, load_github_export

    f = tmp_path / "x.json"
    f.write_text(json.dumps([{"number": 1, "title": "t", "url": "https://a:pw@github.com/o/r/issues/1"},
                             {"number": 2, "title": "u", "url": "javascript:alert(1)"},
                             {"number": 3, "title": "v", "url": "https://github.com/o/r/pull/3"}]))
    with pytest.raises(GitHubExportError) as err:
        load_github_export(f)
    msg = str(err.value)
    assert "record 0: url holds a user name or password" in msg and "pw" not in msg
    assert "record 1: url 'javascript:alert(1)' is not an http(s) URL" in msg
    f.write_text(json.dumps([{"number": 3, "title": "v", "url": " https://github.com/o/r/pull/3 "}]))
    assert [d.path for d in load_github_export(f)] == ["https://github.com/o/r/pull/3"]



def test_urls_differing_only_in_their_fragment_share_one_request():
    asked = []

    def request(url, timeout):
        asked.append(url)
        return (404, "http_404") if "gone" in url else (200, None)

    report = check_links({"http://h/a.py#L1-L3": ["q1"], "http://h/a.py#L9-L12": ["q2"],
                          "http://h/gone.py#L1-L2": ["q1"], "http://h/gone.py#L5-L6": ["q3"]},
                         concurrency=2, timeout_s=1, budget_s=5, request=request)
    assert sorted(asked) == ["http://h/a.py", "http://h/gone.py"]
    assert [(r.url, r.error, r.queries) for r in report.results] == [
        ("http://h/a.py#L1-L3", None, ["q1"]), ("http://h/a.py#L9-L12", None, ["q2"]),
        ("http://h/gone.py#L1-L2", "http_404", ["q1"]), ("http://h/gone.py#L5-L6", "http_404", ["q3"])]
    assert report.metrics()["links/failed_share"] == 0.5
