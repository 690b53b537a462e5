"""rag golden mine (rag/golden/mining.py): git history, docstrings and gh exports as candidate
queries; every expected value below is worked out by hand from the scripted inputs."""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rag.corpus.chunk import split_lines
from rag.golden.miners import miners
from rag.golden.miners.docstrings import mine_docstrings
from rag.golden.miners.git import SKIPS as GIT_SKIPS
from rag.golden.miners.git import map_line, mine_git
from rag.golden.miners.github import mine_github
from rag.golden.mining import (add_mine_parser, is_generic, leakage, mask_docstrings,
                               mine_command)


def test_every_module_of_the_miners_folder_is_a_source_of_rag_golden_mine():
    from pathlib import Path

    import rag.golden.miners as pkg

    files = {p.stem for p in Path(pkg.__file__).parent.glob("*.py") if p.stem != "__init__"}
    assert set(miners()) == files == {"git", "docstrings", "github"}
    assert {m.TAG for m in miners().values()} == {"mined_git", "mined_docstring", "mined_github"}
    import argparse

    sub = argparse.ArgumentParser().add_subparsers()
    choices = next(a.choices for a in add_mine_parser(sub)._actions if a.dest == "source")
    assert choices == sorted(files)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

PARSE_V1 = '''"""Parsing helpers."""

import re


def parse_header(line):
    name, _, value = line.partition(":")
    return name.strip(), value.strip()


class Reader:
    """Read lines."""

    def read(self, text):
        return text.splitlines()
'''


class Repo:
    """A scripted git repository with strictly increasing commit dates (so log order is fixed)."""

    def __init__(self, root: Path):
        self.root = root
        self.tick = 0
        root.mkdir()
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.name", "T")
        self.git("config", "user.email", "t@example.com")
        self.git("config", "commit.gpgsign", "false")

    def git(self, *args: str) -> str:
        self.tick += 1
        date = f"2024-01-01T00:{self.tick // 60:02d}:{self.tick % 60:02d}+00:00"
        env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            env.pop(k, None)
        return subprocess.run(["git", *args], cwd=self.root, env=env, check=True,
                              capture_output=True, text=True).stdout

    def write(self, rel: str, text: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")

    def edit(self, rel: str, line: int, new: list[str]) -> None:
        """Replace 1-based ``line`` by the lines ``new`` (``[]`` deletes it)."""
        lines = (self.root / rel).read_text(encoding="utf-8").split("\n")
        lines[line - 1:line] = new
        (self.root / rel).write_text("\n".join(lines), encoding="utf-8")

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A feature history with every kind of commit the git miner skips."""
    r = Repo(tmp_path_factory.mktemp("mine") / "repo")
    c = {}
    r.write("pkg/parse.py", PARSE_V1)
    r.write("README.md", "# Demo\n\nA demo parser.\n")
    c["A"] = r.commit("Add the header parser and the line reader")
    r.edit("pkg/parse.py", 8, ["    return name.strip(), value.strip().strip('\"')"])
    c["B"] = r.commit("Handle quoted values when parsing headers\n\n"
                      "Quoted values kept their quotes.\n\nSigned-off-by: T <t@example.com>")
    r.edit("pkg/parse.py", 7, ['    name,_,value = line.partition( ":" )'])
    c["C"] = r.commit("Use consistent spacing around the partition call")
    r.edit("pkg/parse.py", 15, ["        return list(text.splitlines())  # debug"])
    c["D"] = r.commit("Add a debug flag to the reader output")
    r.git("revert", "--no-edit", "HEAD")
    r.write("poetry.lock", "[[package]]\nname = 'x'\n")
    c["F"] = r.commit("Pin the dependencies in the lock file")
    r.write("logo.png", "\x89PNG\r\n\x1a\n\x00\x00binary")
    c["P"] = r.commit("Add the logo image for the project page")
    r.edit("README.md", 3, ["A demo parser of headers."])
    c["G"] = r.commit("wip")
    r.write("pkg/__init__.py", '__version__ = "1.2.0"\n')
    c["H"] = r.commit("Bump version to 1.2.0")
    r.write("pkg/tables.py", "".join(f"T{i} = {i}\n" for i in range(600)))
    c["I"] = r.commit("Add generated lookup tables for the encoder")
    r.git("checkout", "-q", "-b", "csv")
    r.write("pkg/writer.py",
            'def write_rows(rows):\n    return "\\n".join(",".join(r) for r in rows)\n')
    c["K"] = r.commit("feat(writer): add a CSV writer for parsed rows")
    r.git("checkout", "-q", "main")
    r.edit("pkg/parse.py", 15, ["        lines = text.splitlines()",
                                 '        return [l for l in lines if not l.startswith("#")]'])
    c["L"] = r.commit("Skip comment lines in the reader")
    r.git("merge", "-q", "--no-ff", "csv", "-m", "Merge branch 'csv'")
    (r.root / "pkg/core").mkdir()
    r.git("mv", "pkg/parse.py", "pkg/core/parse.py")
    c["M"] = r.commit("The parser now lives in the core package")
    r.edit("pkg/core/parse.py", 1, ["# Copyright demo", "# License: MIT", '"""Parsing helpers."""'])
    c["N"] = r.commit("Add a licence header to the parser module")
    r.edit("pkg/core/parse.py", 16, ["    def read(self, text):", "        if not text: return []"])
    c["Q"] = r.commit("Return an empty list for empty input")
    r.edit("pkg/core/parse.py", 17, ["        if not text.strip(): return []"])
    c["R"] = r.commit("Treat blank input as empty in the reader")
    return r, c


HEAD_PARSE = '''# Copyright demo
# License: MIT
"""Parsing helpers."""

import re


def parse_header(line):
    name,_,value = line.partition( ":" )
    return name.strip(), value.strip().strip('"')


class Reader:
    """Read lines."""

    def read(self, text):
        if not text.strip(): return []
        lines = text.splitlines()
        return [l for l in lines if not l.startswith("#")]
'''


def test_the_scripted_history_ends_where_the_expectations_assume(history):
    r, _ = history
    assert (r.root / "pkg/core/parse.py").read_text() == HEAD_PARSE
    assert len(r.git("log", "--format=%H").split()) == 17


def test_git_candidates_labels_and_skip_counts(history):
    r, c = history
    res = mine_git(r.root, max_candidates=None)
    core = "pkg/core/parse.py"
    got = [(x["commit"], x["query"], x["relevant"]) for x in res.candidates]
    assert got == [
        # line 17 at HEAD, inside Reader.read
        (c["R"], "Treat blank input as empty in the reader",
         [{"path": core, "symbol": "Reader.read"}]),
        # pkg/parse.py 15-16 when committed: +2 (licence) and +1 (Q's line) since, renamed
        (c["L"], "Skip comment lines in the reader", [{"path": core, "symbol": "Reader.read"}]),
        # the conventional-commit prefix is dropped from the query
        (c["K"], "add a CSV writer for parsed rows",
         [{"path": "pkg/writer.py", "symbol": "write_rows"}]),
        # line 8 when committed -> 10 at HEAD (parse_header), through the rename
        (c["B"], "Handle quoted values when parsing headers",
         [{"path": core, "symbol": "parse_header"}]),
        # the root commit: README line 3 and parse.py lines 7, 8, 15 were rewritten since;
        # the module docstring (3) and the import (5) hold no behaviour: no label
        (c["A"], "Add the header parser and the line reader",
         [{"path": "README.md", "symbol": "Demo"},
          {"path": core, "symbol": "parse_header"},
          {"path": core, "symbol": "Reader"},
          {"path": core, "symbol": "Reader.read"}]),
    ]
    assert dict(res.skipped) == {
        "merge": 1,             # Merge branch 'csv'
        "revert": 1,            # Revert "Add a debug flag ..."
        "generic_subject": 1,   # Bump version to 1.2.0
        "dependency_bump": 1,   # poetry.lock only
        "ci": 0, "lint_or_format": 0, "typo": 0, "changelog": 0,
        "version_support": 0, "removal": 0, "code_move": 0, "vague_change": 0,
        "docs_only": 1,         # wip, a README edit (housekeeping comes before generic)
        "no_indexable_file": 1,  # logo.png only (binary files are not indexed)
        "test_only": 0,
        "too_large": 1,         # 600 generated lines
        "no_line_change": 1,    # the pure rename
        "whitespace_only": 1,   # the respacing
        "changed_since": 2,     # D (reverted, then rewritten by L) and Q (rewritten by R)
        "comments_or_imports_only": 1,  # N: a licence header, two comment lines
        "no_label": 0,
        "too_many_labels": 0,
    }
    assert tuple(res.skipped) == GIT_SKIPS
    assert res.examined == 17 and len(res.candidates) + sum(res.skipped.values()) == 17
    assert res.extra == {"at": c["R"], "files_differ_from_worktree": 0}
    first, root = res.candidates[0], res.candidates[-1]
    assert first["id"] == f"git-{c['R'][:10]}" and first["source"] == f"mined:git {c['R']}"
    assert first["tags"] == ["mined_git"]
    assert first["note"] == "1 indexed file(s), 2 changed line(s) in the commit"
    assert root["note"] == ("2 indexed file(s), 18 changed line(s) in the commit; 4 of its 18 "
                            f"new line(s) rewritten since; lines as at {c['R'][:10]}")


def test_git_with_body_and_max(history):
    r, c = history
    res = mine_git(r.root, max_candidates=2, with_body=True)
    assert [x["commit"] for x in res.candidates] == [c["R"], c["L"]]
    # R, Q (rewritten by R), N (comments only), M (a rename), the merge, L
    assert res.examined == 6 and res.skipped["changed_since"] == 1
    # the body joins the query, its Signed-off-by trailer does not
    b = mine_git(r.root, with_body=True, max_candidates=None).candidates[3]
    assert b["query"] == ("Handle quoted values when parsing headers\n\n"
                          "Quoted values kept their quotes.")
    assert b["subject"] == "Handle quoted values when parsing headers"


def test_git_older_revision_in_a_matching_work_tree(history, tmp_path):
    r, c = history
    wt = tmp_path / "wt"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(wt), c["L"]], cwd=r.root,
                   check=True, capture_output=True)
    try:
        res = mine_git(wt, at=c["L"], max_candidates=None)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=r.root,
                       check=True, capture_output=True)
    got = {x["commit"]: x["relevant"] for x in res.candidates}
    assert got[c["B"]] == [{"path": "pkg/parse.py", "symbol": "parse_header"}]
    assert got[c["L"]] == [{"path": "pkg/parse.py", "symbol": "Reader.read"}]
    # D's line 15 was reverted (E) and then rewritten by L itself
    assert res.skipped["changed_since"] == 1 and res.skipped["merge"] == 0


def test_map_line_through_insertions_deletions_and_rewrites():
    # +2 at the top; old 7-8 -> new 9; old 20-22 deleted (git names new line 20, before them)
    hunks = [(0, 0, 1, 2), (7, 2, 9, 1), (20, 3, 20, 0)]
    assert [map_line(n, hunks) for n in (1, 6, 7, 8, 9, 19, 20, 22, 23)] == \
        [3, 8, None, None, 10, 20, None, None, 21]


def test_generic_subjects():
    for s in ("wip", "fix", "Fix typo in README", "Bump version to 1.2.0", "v2.0.1",
              "Release 3.1.0", "update docs"):
        assert is_generic(s), s
    for s in ("Handle quoted values when parsing headers", "Fix crash on empty config file"):
        assert not is_generic(s), s


STORE = '''"""Module doc."""


def load_config(path):
    """Load the config file from a path.

    More text.
    """
    return open(path).read()


class Cache:
    """Keep parsed entries in memory."""

    def get(self, key):
        """Return one cached entry."""
        return self.store[key]

    def put(self, key, value):
        """Store it."""
        self.store[key] = value


def helper():
    """Return one cached entry."""

    def inner():
        """A nested function is no chunk of its own."""
'''


def test_docstring_candidates_and_leakage(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/store.py").write_text(STORE)
    res = mine_docstrings(tmp_path, max_candidates=None)
    # load_config: query tokens {load, config, file, path} ("the", "from", "a" are
    # stopwords); with its docstring masked the chunk is "def load_config(path): ...
    # return open(path).read()": load, config, path remain -> 3/4.
    # Cache: {keep, parsed, entries, memory}; masked, the class chunk is "class Cache:" -> 0.
    assert [(x["id"], x["query"], x["relevant"], x["leakage"], x["leakage_masked"])
            for x in res.candidates] == [
        ("doc-pkg-store.py-load_config", "Load the config file from a path.",
         [{"path": "pkg/store.py", "symbol": "load_config"}], 1.0, 0.75),
        ("doc-pkg-store.py-Cache", "Keep parsed entries in memory.",
         [{"path": "pkg/store.py", "symbol": "Cache"}], 1.0, 0.0),
    ]
    # how it was made is the tag; the file's category is a type (a tag "source", "example"
    # or "config" would mix mined queries into per-tag metrics of another meaning)
    assert res.candidates[0]["tags"] == ["mined_docstring"]
    assert res.candidates[0]["types"] == ["source"]
    # its source names it alone (what a re-mine matches a review's decisions on)
    assert res.candidates[0]["source"] == "mined:docstring pkg/store.py#load_config"
    # Cache.put's "Store it." has 2 words; Cache.get and helper share a summary; inner is
    # not a chunk (a function nested in a function), so it is not even examined
    assert dict(res.skipped) == {"short_summary": 1, "duplicate_summary": 2, "over_max": 0}
    assert res.examined == 5
    assert len(mine_docstrings(tmp_path, max_candidates=1).candidates) == 1
    # a documented example file: category "example" goes to types, never to tags
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples/demo.py").write_text('def run_demo():\n    """Run the shop demo server."""\n')
    demo = [c for c in mine_docstrings(tmp_path, max_candidates=None).candidates
            if c["relevant"] == [{"path": "examples/demo.py", "symbol": "run_demo"}]]
    assert [(c["tags"], c["types"]) for c in demo] == [(["mined_docstring"], ["example"])]


def test_leakage_by_hand():
    assert leakage("Load the config file", "def load_config(): pass") == round(2 / 3, 3)
    assert leakage("the a of", "anything") == 0.0


def test_mask_docstrings_keeps_lines_and_parses():
    text = ('"""Module\n\ndoc."""\nimport os\n\n\ndef only():\n    """Only a docstring."""\n\n\n'
            'class K:\n    """Class\n    doc.\n    """\n    x = 1  # keep\n\n'
            '    def m(self):  # method\n        """M doc."""\n        return os.sep\n\n\n'
            'def inline(): "inline doc"\r\n')
    masked = mask_docstrings(text, "python")
    assert masked == ('\n\n\nimport os\n\n\ndef only():\n    ""\n\n\n'
                      'class K:\n\n\n\n    x = 1  # keep\n\n'
                      '    def m(self):  # method\n\n        return os.sep\n\n\n'
                      'def inline(): ""\r\n')
    assert len(split_lines(masked)) == len(split_lines(text))
    tree = ast.parse(masked)
    assert not any(ast.get_docstring(n) for n in ast.walk(tree)
                   if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)))
    assert mask_docstrings(text, "typescript") == text
    assert mask_docstrings("def broken(:\n", "python") == "def broken(:\n"
    # code after the literal on its line: that docstring stays
    assert mask_docstrings('def f():\n    """d"""; x = 1\n', "python") == \
        'def f():\n    """d"""; x = 1\n'


def _gh_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    for rel in ("pkg/store.py", "pkg/toml.py", "pkg/util.py", "tests/test_store.py",
                "README.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {rel}\n")
    (root / "poetry.lock").write_text("[x]\n")
    return root


def _gh_exports(tmp_path: Path) -> list[Path]:
    u = "https://github.com/o/r"
    issues = [
        {"number": 10, "title": "Crash when the config file is empty", "body": "Traceback",
         "url": f"{u}/issues/10"},
        {"number": 11, "title": "Support TOML configuration files", "body": "",
         "url": f"{u}/issues/11"},
        {"number": 12, "title": "Add YAML support to the loader", "url": f"{u}/issues/12"},
    ]

    def pr(n, title, files, *, merged=True, refs=(), body=""):
        return {"number": n, "title": title, "body": body, "url": f"{u}/pull/{n}",
                "mergedAt": "2024-01-01T00:00:00Z" if merged else None,
                "closingIssuesReferences": [{"number": i, "url": f"{u}/issues/{i}"}
                                            for i in refs],
                "files": [{"path": f, "additions": 1, "deletions": 0} for f in files]}

    prs = [
        pr(20, "Handle empty config files", ["pkg/store.py", "tests/test_store.py",
                                             "poetry.lock"], refs=[10]),
        pr(21, "Read TOML configs", ["pkg/toml.py"], body="Fixes #11."),
        pr(22, "Refactor the cache eviction policy", ["pkg/store.py"]),
        pr(23, "Experimental async loader", ["pkg/store.py"], merged=False),
        pr(24, "Update docs", ["README.md"]),
        pr(25, "Regenerate the lock file for new pins", ["poetry.lock"]),
        pr(26, "Also handle whitespace-only config files", ["pkg/store.py", "pkg/util.py"],
           body="closes https://github.com/o/r/issues/10"),
    ]
    (tmp_path / "issues.json").write_text(json.dumps(issues))
    (tmp_path / "prs.json").write_text(json.dumps(prs))
    return [tmp_path / "prs.json", tmp_path / "issues.json"]


def test_github_issue_and_pr_candidates(tmp_path):
    root = _gh_corpus(tmp_path)
    res = mine_github(root, _gh_exports(tmp_path), max_candidates=None)
    got = [(x["id"], x["query"], [lab["path"] for lab in x["relevant"]], x["prs"])
           for x in res.candidates]
    assert got == [
        ("gh-pr-22", "Refactor the cache eviction policy", ["pkg/store.py"], [22]),
        ("gh-issue-11", "Support TOML configuration files", ["pkg/toml.py"], [21]),
        # issue 10 is closed by #20 (closingIssuesReferences) and #26 (its body)
        ("gh-issue-10", "Crash when the config file is empty",
         ["pkg/store.py", "tests/test_store.py", "pkg/util.py"], [20, 26]),
    ]
    assert res.candidates[2]["source"] == "mined:github https://github.com/o/r/issues/10"
    assert res.candidates[2]["tags"] == ["mined_github"]
    assert dict(res.skipped) == {"not_merged": 1, "issue_without_pr": 1, "generic_title": 1,
                                 "no_indexable_file": 1, "too_large": 0, "over_max": 0}
    assert res.examined == 10
    with_body = mine_github(root, _gh_exports(tmp_path), with_body=True, max_files=2)
    assert [x["query"] for x in with_body.candidates] == [
        "Refactor the cache eviction policy", "Support TOML configuration files"]
    assert with_body.skipped["too_large"] == 1  # issue 10 has 3 indexed files


def _args(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_mine_parser(ap.add_subparsers(dest="action"))
    return ap.parse_args(["mine", *argv])


def test_mine_command_writes_a_candidates_file_never_the_golden_set(tmp_path, capsys):
    root = _gh_corpus(tmp_path)
    exports = _gh_exports(tmp_path)
    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "queries.yaml").write_text("corpus: demo-1.0\nqueries: []\n")
    argv = ["--from", "github", "--path", str(root), "--golden", str(golden),
            "--export", str(exports[0]), "--export", str(exports[1])]
    assert mine_command(_args(*argv)) == 0
    err = capsys.readouterr().err
    assert "examined 10 issues and PRs: 3 candidates; skipped: not_merged 1" in err
    text = (golden / "candidates-github.yaml").read_text()
    assert text.startswith("# Candidates mined by `rag golden mine --from github`: NOT a golden")
    data = yaml.safe_load(text)
    assert data["corpus"] == "demo-1.0" and data["source"] == "github"
    assert data["skipped"]["generic_title"] == 1 and len(data["candidates"]) == 3
    assert (golden / "queries.yaml").read_text() == "corpus: demo-1.0\nqueries: []\n"
    assert mine_command(_args(*argv, "--out", str(golden / "queries.yaml"))) == 2
    assert "never written into the golden set" in capsys.readouterr().err
    assert mine_command(_args("--from", "git", "--path", str(root), "--out",
                              str(tmp_path / "c.yaml"))) == 2
    assert "not inside a git work tree" in capsys.readouterr().err


def test_mine_command_git_file_round_trips(history, tmp_path):
    r, c = history
    out = tmp_path / "cand.yaml"
    assert mine_command(_args("--from", "git", "--path", str(r.root), "--out", str(out),
                              "--with-body")) == 0
    data = yaml.safe_load(out.read_text())
    assert data["at"] == c["R"] and data["skipped"]["merge"] == 1
    # without --golden or --corpus: the name rag.run corpus.path=DIR gives the directory
    assert data["corpus"] == r.root.name
    assert [x["commit"] for x in data["candidates"]] == [c[k] for k in "RLKBA"]
    assert data["candidates"][3]["query"].endswith("\n\nQuoted values kept their quotes.")
    assert data["candidates"][1]["relevant"] == [{"path": "pkg/core/parse.py", "symbol": "Reader.read"}]


def test_a_remine_leaves_out_what_review_decided_one_candidate_at_a_time(tmp_path, capsys):
    """A query of queries.yaml mined from one docstring hides that symbol only (every
    docstring candidate names its symbol in its source), a discarded one is skipped and its
    entry carried over as it was, --max counts new candidates only, a bad --max is still
    refused, and a discarded: that is not a list (or a file that does not parse) is refused,
    not silently dropped."""
    from rag.app.cli import main

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/store.py").write_text(STORE)
    golden, out = tmp_path / "golden", tmp_path / "cand.yaml"
    golden.mkdir()
    (golden / "queries.yaml").write_text(
        "queries:\n- id: q1\n  query: Load the config file from a path.\n"
        "  source: mined:docstring pkg/store.py#load_config\n")
    args = ["golden", "mine", "--from", "docstrings", "--path", str(tmp_path),
            "--golden", str(golden), "--out", str(out)]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.rstrip().endswith("already_golden 1, discarded_in_review 0")
    first = yaml.safe_load(out.read_text())
    assert [c["relevant"][0]["symbol"] for c in first["candidates"]] == ["Cache"]
    kept = {"source": "mined:docstring pkg/store.py#Cache", "query": "Keep parsed entries."}
    first["discarded"] = [kept, {"query": "no source: kept as it was"}]
    out.write_text(yaml.safe_dump(first))
    assert main([*args, "--force"]) == 0
    assert "already_golden 1, discarded_in_review 1" in capsys.readouterr().err
    again = yaml.safe_load(out.read_text())
    assert again["candidates"] == [] and again["discarded"] == first["discarded"]
    assert main([*args, "--force", "--max", "-1"]) == 2
    assert "--max must be >= 0" in capsys.readouterr().err
    # a discarded: that cannot be read is refused, even with --force: overwriting the file
    # would propose what review discarded again; the file is left as it was
    broken = out.read_text().replace("discarded:", "old:") + "discarded: oops\n"
    out.write_text(broken)
    assert main([*args, "--force", "--max", "1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out}: discarded: is not a list; "
                                               "its candidates discarded in review"), err
    assert out.read_text() == broken
    out.write_text("candidates:\n- id: [unclosed\n")
    assert main([*args, "--force"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out}:3: cannot read its discarded: "), err
    assert "expected ',' or ']'" in err[0]  # the parser's own words, where it noticed (end)
    # moved away, the next mine starts over: Cache is proposed again
    out.unlink()
    assert main([*args, "--max", "1"]) == 0
    capsys.readouterr()
    assert [c["relevant"][0]["symbol"] for c in yaml.safe_load(out.read_text())["candidates"]] \
        == ["Cache"]
