"""rag/golden/commit_filters.py, and the git miner's use of it: subjects cleaned into queries,
housekeeping commits skipped by reason, tests, changelogs and whitespace-only hunks never
labels, long symbols narrowed to their changed lines, crowded commits capped. Every expected
value is worked out by hand from the inputs written here."""

from __future__ import annotations

import shutil

import pytest

from rag.golden.commit_filters import HOUSEKEEPING, clean_subject, conventional_type, file_kind, housekeeping_reason
from rag.golden.miners.git import mine_git

from test_mining import Repo


@pytest.mark.parametrize("subject, query", [
    ("fix(context): skip chmod on pre-existing dirs in SaveUploadedFile (#4702)",
     "skip chmod on pre-existing dirs in SaveUploadedFile"),
    ("feat(router)!: add literal colon support (#1432) (#2857)", "add literal colon support"),
    ("docs: fix `BindXML` comment referencing `binding.BindXML` (#4717)",
     "fix BindXML comment referencing binding.BindXML"),
    ("Handle quoted values, fixes #12", "Handle quoted values"),
    ("Handle quoted values (closes #12, #13)", "Handle quoted values"),
    ("ABC-123: Retry the upload when the token expired", "Retry the upload when the token expired"),
    ("[cli] Show the help text for unknown options gh-881", "Show the help text for unknown options"),
    ("Support Python 3.12 (see pallets/click#2610).", "Support Python 3.12"),
    ("Ready release gin 1.9.1 (by: thinkerou) (#3630)", "Ready release gin 1.9.1"),
    ("Allow header according to RFC 7231 (HTTP 405)", "Allow header according to RFC 7231 (HTTP 405)"),
    ("Escape & in C# identifiers", "Escape & in C# identifiers"),
    ("(#12)", ""), ("fix #2786 (#2796)", ""),  # nothing left: generic, skipped
    ("Fix #12: handle empty input in parser", "handle empty input in parser"),
    ("Closes #5 - support unicode paths in walker", "support unicode paths in walker"),
    # the Go project's package prefix
    ("tree: remove duplicate assignment", "remove duplicate assignment"),
    ("net/http, render: support HTTP/2 push (#12)", "support HTTP/2 push"),
    ("README: mention the router", "README: mention the router"),  # not lower case: kept
    ("fix: a colon: inside", "a colon: inside"),  # one prefix only
])
def test_clean_subject(subject, query):
    assert clean_subject(subject) == query


def test_conventional_type():
    assert conventional_type("chore(deps): bump x") == ("chore", "deps")
    assert conventional_type("Fix!: y") == ("fix", None)
    # the Go project's prefix: an area, no type
    assert conventional_type("context.go: fix asserts") == (None, "context.go")
    assert conventional_type("binding, render: fix the JSON type") == (None, "binding, render")
    assert conventional_type("Add a context: the request's") == (None, None)


@pytest.mark.parametrize("path, kind", [
    ("go.sum", "manifest"), ("sub/package.json", "manifest"), ("requirements-dev.txt", "manifest"),
    (".github/workflows/test.yml", "ci"), (".github/ISSUE_TEMPLATE/bug.md", "ci"),
    (".golangci.yml", "ci"), ("Makefile", "ci"), ("CHANGES.rst", "changelog"),
    ("AUTHORS", "changelog"), ("README.md", "docs"), ("docs/api.py", "docs"),
    ("context.go", "code"), ("src/click/core.py", "code"), ("notes.txt", "docs"),
    ("pyproject.toml", "config"), ("src/app/settings.toml", "code"),
])
def test_file_kind(path, kind):
    assert file_kind(path) == kind


@pytest.mark.parametrize("subject, changed, reason", [
    ("chore(deps): bump golang.org/x/net from 0.50.0 to 0.51.0 (#4548)", ["go.mod", "go.sum"],
     "dependency_bump"),
    ("Pin the lock file", ["poetry.lock"], "dependency_bump"),
    ("upgrade bson dependency to mongo-driver v2", ["binding/bson.go", "go.mod"], "dependency_bump"),
    ("update validator library to version 10.30.3 (#4707)", ["go.mod"], "dependency_bump"),
    ("ci(lint): update tooling and workflows", [".github/workflows/ci.yml", "tree.go"], "ci"),
    ("Run the tests on Python 3.12", [".github/workflows/tests.yaml", "tox.ini"], "ci"),
    ("Add help to the targets", ["Makefile"], "ci"),
    ("Fix lint warnings reported by ruff", ["src/a.py"], "lint_or_format"),
    ("style: wrap long lines", ["src/a.py"], "lint_or_format"),
    ("Add type annotations for instance attributes", ["src/a.py"], "lint_or_format"),
    ("for loop can be modernized using range over int", ["tree.go"], "lint_or_format"),
    ("Add latest free threaded python to tox and ci", ["tox.ini", "pyproject.toml"], "ci"),
    ("docs(context): fix AbortWithStatusPureJSON comment typo", ["context.go"], "typo"),
    ("docs: add document to constant AuthProxyUserKey", ["auth.go"], "docs_only"),
    ("Add Acme to projects using Cobra", ["site/content/projects_using_cobra.md"], "docs_only"),
    ("Add a build badge", ["README.md"], "docs_only"),
    ("Update the changelog for 8.1.8", ["CHANGES.rst"], "changelog"),
    ("drop support for python 3.7", ["src/click/_compat.py"], "version_support"),
    ("start version 8.0.1.dev0", ["src/click/__init__.py"], "version_support"),
    ("refactor: remove headers parameter from writeHeader (#1234)", ["render/render.go"],
     "removal"),
    ("Delete the unused helper", ["src/a.py"], "removal"),
    ("Move the option decorators to their own module", ["src/a.py"], "code_move"),
    ("modify interface check way", ["render/json.go"], "vague_change"),
    ("minor tweaks,optimize code (#2788)", ["render/json.go"], "vague_change"),
    # real changes whose words look like housekeeping
    ("Support locale-aware date formatting", ["src/fmt.py"], None),
    ("Handle whitespace in header values", ["src/headers.py"], None),
    ("Improve type checking of config values at load", ["src/config.py"], None),
    ("chore(router): match method added to routergroup", ["routergroup.go"], None),
    ("Update the context to copy its Keys", ["context.go"], None),
    # a first word only: a removal or move named later is a change in behaviour
    ("Support removal of a route at runtime", ["tree.go"], None),
    ("Add a remove method to the router", ["tree.go"], None),
    ("tree: remove duplicate assignment", ["tree.go"], "removal"),
    # the area prefix's own word is still read by the keyword checks
    ("typo: fix comment", ["a/b.go"], "typo"), ("gofmt: apply to tree.go", ["a/b.go"], "lint_or_format"),
    ("mypy: fix errors", ["a/b.py"], "lint_or_format"),
    ("dependabot: bump x from 1 to 2", ["a/b.go"], "dependency_bump"),
    ("lint: check the error of Close", ["context.go"], "lint_or_format"),
    ("Add support for Go modules", ["tree.go"], None),
    ("Document the retry option in the README and read it in the client",
     ["README.md", "src/client.py"], None),
])
def test_housekeeping_reason(subject, changed, reason):
    assert housekeeping_reason(subject, changed) == reason


def test_every_housekeeping_reason_is_a_git_skip_reason():
    from rag.golden.miners.git import SKIPS

    assert set(HOUSEKEEPING) <= set(SKIPS) and {"test_only", "too_many_labels"} <= set(SKIPS)


APP = '''"""The app."""

SHORT = 1
LONGER = 2


def route(path):
    return path


def big(n):
''' + "".join(f"    x{i} = n + {i}\n" for i in range(160)) + '''    return n


''' + "".join(f"def helper{i}():\n    return {i}\n\n\n" for i in range(9))

TEST_APP = '''from pkg.app import route


def test_route():
    assert route("/a") == "/a"
'''


@pytest.fixture(scope="module")
def housekeeping_history(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    r = Repo(tmp_path_factory.mktemp("filters") / "repo")
    c = {}
    r.write("pkg/app.py", APP)
    r.write("tests/test_app.py", TEST_APP)
    r.write("README.md", "# App\n\nAn app.\n")
    r.write("CHANGES.rst", "Changes\n=======\n\n- first\n")
    r.write(".github/workflows/ci.yml", "on: push\n")
    r.write("requirements.txt", "requests==2.31.0\n")
    c["root"] = r.commit("Add the app module with its routes and tests")
    # route is lines 7-8; tests/test_app.py and CHANGES.rst change beside it
    r.edit("pkg/app.py", 8, ['    return path.rstrip("/") or "/"'])
    r.edit("tests/test_app.py", 5, ['    assert route("/a/") == "/a"'])
    r.edit("CHANGES.rst", 4, ["- first", "- trailing slashes"])
    c["route"] = r.commit("fix(app): handle trailing slashes in route (#123)")
    r.edit("tests/test_app.py", 5, ['    assert route("/") == "/"'])
    c["test"] = r.commit("Check the root path in the route test")
    r.write(".github/workflows/ci.yml", "on: [push, pull_request]\n")
    c["ci"] = r.commit("Run the checks on pull requests too")
    r.edit("README.md", 3, ["An app. ![build](https://ci.example/badge.svg)"])
    c["badge"] = r.commit("Show the build status in the readme")
    r.write("requirements.txt", "requests==2.32.0\n")
    c["bump"] = r.commit("Bump requests from 2.31.0 to 2.32.0")
    r.edit("pkg/app.py", 1, ['"""The app module."""'])
    c["lint"] = r.commit("Fix the lint warnings in the app module")
    # a gofmt-style realignment: SHORT and LONGER only gain spaces, one constant is new
    r.edit("pkg/app.py", 3, ["SHORT        = 1", "LONGER       = 2", "LONGEST_NAME = 3"])
    r.edit("pkg/app.py", 6, [])  # LONGER = 2 (its old line, now 6) goes
    c["align"] = r.commit("Add the longest name setting beside the others")
    # one line inside big (lines 12-173 at this point: def at 12)
    r.edit("pkg/app.py", 40, ["    x27 = n + 27 if n else 0"])
    c["big"] = r.commit("Guard the empty count in the big handler")
    # a pure deletion inside big: labelled by the lines around it, not the whole function
    r.edit("pkg/app.py", _lines(r, "pkg/app.py").index("    x30 = n + 30") + 1, [])
    c["big_cut"] = r.commit("Stop counting the thirtieth step in the big handler")
    text = (r.root / "pkg/app.py").read_text()
    for i in range(9):
        text = text.replace(f"    return {i}\n", f"    return {i} * 2\n")
    (r.root / "pkg/app.py").write_text(text)
    c["many"] = r.commit("Double what every helper returns for the new scale")
    return r, c


def _lines(r, path):
    return (r.root / path).read_text().splitlines()


def test_git_housekeeping_and_label_filters(housekeeping_history):
    r, c = housekeeping_history
    app = _lines(r, "pkg/app.py")
    assert app[2:5] == ["SHORT        = 1", "LONGER       = 2", "LONGEST_NAME = 3"]
    big_line = app.index("    x27 = n + 27 if n else 0") + 1
    cut = app.index("    x29 = n + 29") + 1
    assert app[cut] == "    x31 = n + 31"
    res = mine_git(r.root, max_candidates=None)
    got = {x["commit"]: (x["query"], x["relevant"]) for x in res.candidates}
    assert got == {
        # only the constant that is new: the realigned SHORT and LONGER lines are whitespace
        c["align"]: ("Add the longest name setting beside the others",
                     [{"path": "pkg/app.py", "lines": [5, 5]}]),
        # a 163-line function: labelled by the line that changed
        c["big"]: ("Guard the empty count in the big handler",
                   [{"path": "pkg/app.py", "lines": [big_line, big_line]}]),
        # a line deleted inside it: the lines on either side (x29 and x31, now adjacent)
        c["big_cut"]: ("Stop counting the thirtieth step in the big handler",
                       [{"path": "pkg/app.py", "lines": [cut, cut + 1]}]),
        # its test and changelog lines are left out, the PR number and prefix dropped
        c["route"]: ("handle trailing slashes in route", [{"path": "pkg/app.py", "symbol": "route"}]),
    }
    assert {k: v for k, v in res.skipped.items() if v} == {
        "test_only": 1,        # the route test alone
        "ci": 1,               # the workflow alone
        "docs_only": 1,        # the README badge
        "dependency_bump": 1,  # requirements.txt (before generic_subject, which it also is)
        "lint_or_format": 1,   # "lint" in the subject
        "too_many_labels": 2,  # the root commit (13 labels) and the nine helpers
    }
    assert "1 test file(s) left out" in next(x["note"] for x in res.candidates
                                                if x["commit"] == c["route"])


def test_non_code_lines_by_language():
    from rag.golden.commit_filters import non_code_lines

    go = ('package gin\n\nimport (\n\t"net/http"\n\tjson "encoding/json"\n)\n\n'
          '// Handle does it.\nfunc Handle() {\n\t/* inline\n\t   block */\n\treturn\n}\n')
    assert sorted(non_code_lines("a.go", go)) == [1, 3, 4, 5, 6, 8, 10, 11]  # package, imports, comments
    py = ('"""Module."""\nimport os\nfrom x import y\n\n\ndef f():\n    """Doc\n    more."""\n'
          '    # note\n    return os\n')
    assert sorted(non_code_lines("a.py", py)) == [1, 2, 3, 7, 8, 9]
    assert sorted(non_code_lines("a.ts", "import { z } from 'zod';\n// c\nexport const a = 1;\n")) == [1, 2]
    assert non_code_lines("README.md", "# Title\n") == frozenset()


def test_bundles_and_shallow_clones_are_refused_in_one_line(housekeeping_history, tmp_path):
    import subprocess

    from rag.golden.mining import MiningError

    r, _ = housekeeping_history
    bundle = tmp_path / "repo.bundle"
    subprocess.run(["git", "-C", str(r.root), "bundle", "create", str(bundle), "--all"],
                   check=True, capture_output=True)
    with pytest.raises(MiningError, match=r"a git bundle; clone it first \(git clone .*repo.bundle DIR\)"):
        mine_git(bundle)
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "2", r.root.as_uri(), str(shallow)],
                   check=True, capture_output=True)
    with pytest.raises(MiningError, match=r"a shallow clone \(2 commits of history\)"):
        mine_git(shallow)
    assert mine_git(shallow, allow_shallow=True).examined == 2


def test_odd_file_names_and_message_bytes(tmp_path):
    """A path git C-quotes (a quote, non-ASCII) and a commit body holding \\x1e and \\x1f
    are read as they are."""
    from rag.golden.miners.git import _unquote

    assert _unquote('"src/\\303\\251t\\303\\251.py"') == "src/été.py"
    assert _unquote('"src/日本 \\"q\\".py"') == 'src/日本 "q".py'
    r = Repo(tmp_path / "odd")
    name = 'src/日本 "q".py'
    r.write(name, "def parse_value(text):\n    return text\n")
    r.commit("Add the value parser for quoted names")
    r.edit(name, 2, ["    return text.strip()"])
    r.commit("Strip blanks around parsed values\n\nbody with \x1e and \x1f bytes")
    res = mine_git(r.root, max_candidates=None)
    assert [(x["query"], x["relevant"]) for x in res.candidates][0] == (
        "Strip blanks around parsed values", [{"path": name, "symbol": "parse_value"}])
    assert res.skipped["no_indexable_file"] == 0


def test_mine_never_overwrites_a_candidates_file_without_force(housekeeping_history, tmp_path, capsys):
    import argparse

    from rag.golden.mining import add_mine_parser, mine_command

    r, _ = housekeeping_history
    ap = argparse.ArgumentParser()
    add_mine_parser(ap.add_subparsers(dest="action"))
    out = tmp_path / "candidates-git.yaml"
    argv = ["mine", "--from", "git", "--path", str(r.root), "--out", str(out)]
    assert mine_command(ap.parse_args(argv)) == 0
    out.write_text(out.read_text() + "# a reviewer's verdicts live here\n")
    assert mine_command(ap.parse_args(argv)) == 2
    assert "exists (it may hold review verdicts" in capsys.readouterr().err
    assert out.read_text().endswith("# a reviewer's verdicts live here\n")
    assert mine_command(ap.parse_args([*argv, "--force"])) == 0
