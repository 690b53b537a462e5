"""The corpus walk (rag/corpus/walk.py): git's listing, ripgrep's ignore files, default
excludes and secrets. Every expected count below is worked out by hand in the comments."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rag.corpus.walk import (
    DEFAULT_EXCLUDES,
    EXCLUDE_GROUPS,
    WalkStats,
    has_private_key_block,
    listing_key,
    looks_minified,
    secret_kind,
    walk_corpus,
)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

# A fake key: base64 of plain ASCII, never a real key. Assembled at run time so that this
# file does not itself hold a private-key block (it is indexed when rag indexes itself).
_B64 = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2"  # "ABC...uv"
FAKE_BODY = "\n".join([_B64] * 4)
_DASH = "-" * 5


def _block(kind: str = "") -> str:
    label = f"{kind} PRIVATE KEY" if kind else "PRIVATE KEY"
    return f"{_DASH}BEGIN {label}{_DASH}\n{FAKE_BODY}\n{_DASH}END {label}{_DASH}\n"


_CERT_B64 = "Q0VSVElGSUNBVEVDRVJUSUZJQ0FURUNFUlRJRklDQVRFQ0VSVElGSUNBVEVDRVJU"  # "CERTIFICATE..."
CERT = (f"{_DASH}BEGIN CERTIFICATE{_DASH}\n" + "\n".join([_CERT_B64] * 4)
        + f"\n{_DASH}END CERTIFICATE{_DASH}\n")


def _write(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data, encoding="utf-8")
    return root


def _walk(root: Path, **kw) -> tuple[list[str], WalkStats]:
    stats = WalkStats()
    paths = [d.path for d in walk_corpus(root, stats=stats, **kw)]
    return paths, stats


@pytest.fixture
def git_env(tmp_path: Path, monkeypatch) -> Path:
    """Git isolated from the user's configuration: no system or global config, no global
    ignore file, a fixed identity. Returns the directory holding the test repositories."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    for k, v in (("GIT_AUTHOR_NAME", "t"), ("GIT_AUTHOR_EMAIL", "t@example.invalid"),
                 ("GIT_COMMITTER_NAME", "t"), ("GIT_COMMITTER_EMAIL", "t@example.invalid")):
        monkeypatch.setenv(k, v)
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(k, raising=False)
    return tmp_path


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


# --------------------------------------------------------------------------- git listing

GIT_FILES = {
    ".gitignore": "*.log\nbuild/\n",
    "README.md": "# Demo\n",
    "docs/index.md": "# Docs\n",
    "src/pkg/app.py": "def run():\n    return 1\n",
    "src/pkg/tracked.log": "tracked although *.log is ignored\n",
    "src/pkg/new.py": "NEW = 1\n",               # untracked, not ignored: listed
    "debug.log": "noise\n",                       # .gitignore
    "notes.local": "only .git/info/exclude ignores this\n",
    "src/pkg/cache.local": "x\n",                  # .git/info/exclude, below the root too
    "data/x.glob": "only core.excludesFile ignores this\n",
    "build/out.py": "def built():\n    pass\n",   # .gitignore build/
}


@pytest.fixture
def git_repo(git_env: Path) -> Path:
    repo = git_env / "repo"
    _write(repo, GIT_FILES)
    git(repo, "init", "-q")
    (repo / ".git/info").mkdir(parents=True, exist_ok=True)
    (repo / ".git/info/exclude").write_text("*.local\n")
    (git_env / "global-ignore").write_text("*.glob\n")
    git(repo, "config", "core.excludesFile", str(git_env / "global-ignore"))
    git(repo, "add", ".gitignore", "README.md", "docs/index.md", "src/pkg/app.py")
    git(repo, "add", "-f", "src/pkg/tracked.log")
    git(repo, "commit", "-q", "-m", "init")
    return repo


@needs_git
def test_git_listing_is_what_git_ls_files_lists(git_repo: Path):
    paths, stats = _walk(git_repo)
    assert stats.listing == "git"
    assert sorted(paths) == [".gitignore", "README.md", "docs/index.md", "src/pkg/app.py",
                             "src/pkg/new.py", "src/pkg/tracked.log"]
    want = git(git_repo, "ls-files", "-z", "-co", "--exclude-standard").split("\0")
    assert sorted(paths) == sorted(p for p in want if p)
    # .git (1); gitignored: debug.log, notes.local, src/pkg/cache.local (files), build/ and
    # data/ (directories git ignores whole, one each) = 5
    assert stats.skipped == {"git_dir": 1, "gitignored": 5}
    assert stats.as_dict()["walk_listing"] == "git"


@needs_git
def test_git_listing_from_a_subdirectory_root(git_repo: Path):
    paths, stats = _walk(git_repo / "src")
    assert stats.listing == "git"
    assert sorted(paths) == ["pkg/app.py", "pkg/new.py", "pkg/tracked.log"]
    assert stats.skipped == {"gitignored": 1}  # pkg/cache.local (.git/info/exclude)


@needs_git
def test_outside_git_only_gitignore_files_apply(git_repo: Path):
    # the same tree walked without git: .git/info/exclude and core.excludesFile do not count,
    # and a tracked file that .gitignore matches is skipped
    paths, stats = _walk(git_repo, use_git=False)
    assert stats.listing == "filesystem"
    assert sorted(paths) == [".gitignore", "README.md", "data/x.glob", "docs/index.md",
                             "notes.local", "src/pkg/app.py", "src/pkg/cache.local",
                             "src/pkg/new.py"]
    # debug.log, src/pkg/tracked.log, build/ (dir)
    assert stats.skipped == {"git_dir": 1, "gitignored": 3}


@needs_git
def test_nested_repository_is_listed_by_its_own_git(git_repo: Path):
    nested = git_repo / "vendor/lib"
    _write(nested, {"a.py": "A = 1\n", "b.tmp": "tmp\n", ".gitignore": "*.tmp\n"})
    git(nested, "init", "-q")
    paths, stats = _walk(git_repo)
    assert {"vendor/lib/a.py", "vendor/lib/.gitignore"} <= set(paths)
    assert "vendor/lib/b.tmp" not in paths
    # .git twice (outer, nested); gitignored: the 5 above + vendor/lib/b.tmp
    assert stats.skipped == {"git_dir": 2, "gitignored": 6}


@needs_git
def test_root_ignored_by_the_enclosing_repository_is_walked_as_plain_files(git_env: Path):
    repo = git_env / "outer"
    _write(repo, {".gitignore": "corpora/\n", "corpora/x/app.py": "X = 1\n",
                  "corpora/x/.gitignore": "*.log\n", "corpora/x/a.log": "log\n"})
    git(repo, "init", "-q")
    paths, stats = _walk(repo / "corpora/x")
    assert stats.listing == "filesystem"
    assert sorted(paths) == [".gitignore", "app.py"]
    assert stats.skipped == {"gitignored": 1}


@needs_git
def test_listing_key_follows_git_state(git_repo: Path, tmp_path: Path):
    before = listing_key(git_repo)
    assert before and listing_key(git_repo) == before
    (git_repo / ".git/info/exclude").write_text("*.local\n*.py\n")  # hides src/pkg/new.py
    assert listing_key(git_repo) != before
    plain = _write(tmp_path / "plain", {"a.py": "A = 1\n"})
    assert listing_key(plain) == ""


# --------------------------------------------------------------------------- .ignore / .rgignore

IGNORE_TREE = {
    ".gitignore": "*.log\nlogs/\n",
    ".ignore": "!keep.log\n*.tmp\n!logs/\n",
    ".rgignore": "!special.tmp\nnotes.md\n",
    "sub/.ignore": "!notes.md\n",  # loses to the root .rgignore: rank beats depth
    "keep.log": "gitignored, re-included by .ignore\n",
    "other.log": "gitignored\n",
    "a.tmp": "ignored by .ignore\n",
    "special.tmp": "ignored by .ignore, re-included by .rgignore\n",
    "notes.md": "ignored by .rgignore\n",
    "sub/notes.md": "ignored by the root .rgignore\n",
    "sub/x.tmp": "ignored by the root .ignore\n",
    "logs/a.txt": "logs/ is gitignored, re-included by .ignore\n",
    "main.py": "MAIN = 1\n",
}
IGNORE_KEPT = [".gitignore", ".ignore", ".rgignore", "keep.log", "logs/a.txt", "main.py",
               "special.tmp", "sub/.ignore"]


@pytest.mark.parametrize("in_git", [False, pytest.param(True, marks=needs_git)])
def test_ignore_and_rgignore_precedence(tmp_path: Path, in_git: bool, request):
    root = _write(tmp_path / "t", IGNORE_TREE)
    if in_git:
        request.getfixturevalue("git_env")
        git(root, "init", "-q")
    paths, stats = _walk(root)
    assert sorted(paths) == IGNORE_KEPT
    want = {"gitignored": 1,   # other.log
            "dotignore": 2,    # a.tmp, sub/x.tmp
            "rgignore": 2}     # notes.md, sub/notes.md
    if in_git:
        want["git_dir"] = 1
    assert stats.skipped == want
    assert stats.listing == ("git" if in_git else "filesystem")


@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep is not installed")
def test_ignore_precedence_agrees_with_ripgrep(tmp_path: Path):
    root = _write(tmp_path / "t", IGNORE_TREE)
    out = subprocess.run(["rg", "--files", "--hidden", "--no-require-git", "--no-config"],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    assert sorted(out.split()) == IGNORE_KEPT


@needs_git
def test_ignore_files_above_a_subdirectory_root_apply_in_git(git_env: Path):
    repo = _write(git_env / "r", {".ignore": "*.gen.py\n", "pkg/a.py": "A = 1\n",
                                  "pkg/b.gen.py": "B = 1\n"})
    git(repo, "init", "-q")
    paths, stats = _walk(repo / "pkg")
    assert paths == ["a.py"] and stats.skipped == {"dotignore": 1}


# --------------------------------------------------------------------------- default excludes

EXCLUDE_TREE: dict[str, str | bytes] = {
    "README.md": "# App\n",
    "src/pkg/app.py": "def run():\n    return 1\n",
    "src/pkg/normal.js": "function f(a) {\n  return a + 1;\n}\n" * 40,
    "tools/build/release.sh": "#!/bin/sh\necho release\n",  # a build/ that is source
    # lock_file: 9
    "uv.lock": "version = 1\n", "poetry.lock": "x\n", "Cargo.lock": "x\n",
    "package-lock.json": "{}\n", "yarn.lock": "x\n", "pnpm-lock.yaml": "x: 1\n",
    "go.sum": "x\n", "Gemfile.lock": "x\n", "composer.lock": "{}\n",
    # package_metadata: PKG-INFO + pkg.egg-info/ (a directory, once) = 2
    "PKG-INFO": "Metadata-Version: 2.1\nName: app\n",
    "src/app.egg-info/PKG-INFO": "Name: app\n", "src/app.egg-info/SOURCES.txt": "x\n",
    # dependency_dir: node_modules/, .venv/, myenv/ (holds pyvenv.cfg) = 3
    "node_modules/left-pad/index.js": "module.exports = 1;\n",
    ".venv/lib/site.py": "x = 1\n",
    "myenv/pyvenv.cfg": "home = /usr/bin\n", "myenv/lib/x.py": "x = 1\n",
    # build_output: dist/, __pycache__/ (under src/pkg), .tox/, build/ (setuptools copy of
    # src/pkg: build/lib/pkg), target/ (cargo's CACHEDIR.TAG) = 5
    "dist/app.js": "var a = 1;\n",
    "src/pkg/__pycache__/app.cpython-311.pyc": "not really bytecode\n",
    ".tox/py311/log.txt": "x\n",
    "build/lib/pkg/app.py": "def run():\n    return 1\n",
    "target/CACHEDIR.TAG": "Signature: 8a477f597d28d172789f06886806bc55\n",
    "target/debug/app.d": "x\n",
    # minified: 3 by name + 1 by average line length (static/big.js) = 4
    "static/app.min.js": "var a=1;\n", "static/vendor.bundle.js": "var b=2;\n",
    "static/site.min.css": "a{b:c}\n",
    "static/big.js": "var x=" + "1+" * 997 + "1;\n",  # 2,003 bytes, one line
}
EXCLUDE_KEPT = ["README.md", "src/pkg/app.py", "src/pkg/normal.js", "tools/build/release.sh"]


def test_each_default_exclude_with_its_count(tmp_path: Path):
    root = _write(tmp_path / "t", EXCLUDE_TREE)
    paths, stats = _walk(root)
    assert sorted(paths) == EXCLUDE_KEPT
    assert stats.skipped == {"lock_file": 9, "package_metadata": 2, "dependency_dir": 3,
                             "build_output": 5, "minified": 4}
    d = stats.as_dict()
    assert d["files_skipped_lock_file"] == 9 and d["files_skipped_secret"] == 0
    assert set(EXCLUDE_GROUPS) <= {k[len("files_skipped_"):] for k in d
                                   if k.startswith("files_skipped_")}


def test_overrides_re_include_and_replace_the_defaults(tmp_path: Path):
    root = _write(tmp_path / "t", EXCLUDE_TREE)
    # include= re-allows one lock file and the minified heuristic's file; the rest stay out
    paths, stats = _walk(root, include=["uv.lock", "static/big.js"])
    assert sorted(paths) == sorted([*EXCLUDE_KEPT, "uv.lock", "static/big.js"])
    assert stats.skipped["lock_file"] == 8 and stats.skipped["minified"] == 3
    # a directory pattern re-allows a guarded output directory
    paths, _ = _walk(root, include=["build/"])
    assert "build/lib/pkg/app.py" in paths
    # exclude= replaces the list: a built-in pattern keeps its reason, a new one is "excluded"
    _write(root, {"data/table.csv": "a,b\n1,2\n"})
    paths, stats = _walk(root, exclude=["*.lock", "*.csv"])
    assert "data/table.csv" not in paths and "package-lock.json" in paths
    assert stats.skipped["excluded"] == 1
    assert stats.skipped["lock_file"] == 6  # the *.lock files; package-lock, pnpm, go.sum kept
    # exclude=[]: only the content heuristic (static/big.js) skips anything
    paths, stats = _walk(root, exclude=[])
    assert stats.skipped == {"minified": 1}
    assert len(paths) == len(EXCLUDE_TREE) + 1 - 1


def test_default_excludes_list_is_the_documented_groups():
    import pathspec

    assert DEFAULT_EXCLUDES == tuple(p for ps in EXCLUDE_GROUPS.values() for p in ps)
    locks = pathspec.GitIgnoreSpec.from_lines(EXCLUDE_GROUPS["lock_file"])
    for name in ("uv.lock", "package-lock.json", "yarn.lock", "pnpm-lock.yaml", "poetry.lock",
                 "Cargo.lock", "Gemfile.lock", "composer.lock", "go.sum", "a/b/Pipfile.lock"):
        assert locks.match_file(name), name
    assert not locks.match_file("package.json") and not locks.match_file("go.mod")


def test_build_dir_outside_git_is_kept_without_build_traces(tmp_path: Path):
    root = _write(tmp_path / "t", {"build/make_release.py": "def main():\n    pass\n",
                                   "build/lib/helper.sh": "echo\n",   # lib/ repeats no package
                                   "target/Target.java": "class Target {}\n",
                                   "src/app.py": "A = 1\n"})
    paths, stats = _walk(root)
    assert sorted(paths) == ["build/lib/helper.sh", "build/make_release.py", "src/app.py",
                             "target/Target.java"]
    assert stats.skipped == {}


@needs_git
def test_build_dir_in_git_is_kept_when_tracked(git_env: Path):
    repo = _write(git_env / "r", {"build/release.sh": "echo\n", "tools/build/out.o.txt": "x\n",
                                  "src/app.py": "A = 1\n"})
    git(repo, "init", "-q")
    git(repo, "add", "build/release.sh", "src/app.py")
    git(repo, "commit", "-q", "-m", "i")
    paths, stats = _walk(repo)
    # build/ holds a tracked file: source. tools/build/ is untracked and not ignored: output
    assert sorted(paths) == ["build/release.sh", "src/app.py"]
    assert stats.skipped == {"git_dir": 1, "build_output": 1}


def test_unpacked_sdist_indexes_only_sources_and_docs(tmp_path: Path):
    root = _write(tmp_path / "foo-1.0", {
        "PKG-INFO": "Metadata-Version: 2.1\nName: foo\n\n# foo\n\nThe README again.\n",
        "README.md": "# foo\n\nThe README.\n",
        "pyproject.toml": "[project]\nname = 'foo'\n",
        "setup.cfg": "[metadata]\nname = foo\n",
        "uv.lock": "version = 1\n[[package]]\nname = 'foo'\n",
        "src/foo/__init__.py": "def hello():\n    return 'hi'\n",
        "src/foo.egg-info/PKG-INFO": "Name: foo\n\n# foo\n\nThe README again.\n",
        "src/foo.egg-info/SOURCES.txt": "src/foo/__init__.py\n",
        "src/foo.egg-info/top_level.txt": "foo\n",
        "docs/index.rst": "foo\n===\n\nHello.\n",
    })
    paths, stats = _walk(root)
    assert sorted(paths) == ["README.md", "docs/index.rst", "pyproject.toml", "setup.cfg",
                             "src/foo/__init__.py"]
    # PKG-INFO and src/foo.egg-info/ (a directory, once); uv.lock
    assert stats.skipped == {"package_metadata": 2, "lock_file": 1}


def test_code_content_keeps_source_files_by_suffix_only(tmp_path: Path):
    root = _write(tmp_path / "repo", {
        "README.md": "# repo\n", "docs/guide.rst": "Guide\n=====\n", "NOTES.txt": "n\n",
        "config.yml": "a: 1\n", "package.json": "{}\n", "Makefile": "all:\n\ttrue\n",
        "bin/tool": "#!/bin/sh\necho hi\n",                 # no suffix: not code by suffix
        "src/app.go": "package app\n", "src/view.tsx": "export {}\n",
        "doc/man_docs.go": "package doc\n",                  # Go code in a doc/ directory
        "tests/test_app.py": "def test_x():\n    pass\n",   # tests and examples are code
        "examples/demo.rb": "puts 1\n", "lib/run.bash": "echo 1\n",
        # languages rag windows are code too (semble's benchmark has Haskell, Zig and Lua)
        "src/Data/Aeson.hs": "module Data.Aeson where\n", "lib/std/mem.zig": "const a = 1;\n",
        "lua/lazy/init.lua": "local M = {}\n",
    })
    kept = ["doc/man_docs.go", "examples/demo.rb", "lib/run.bash", "lib/std/mem.zig",
            "lua/lazy/init.lua", "src/Data/Aeson.hs", "src/app.go", "src/view.tsx",
            "tests/test_app.py"]
    paths, stats = _walk(root, content="code")
    assert sorted(paths) == kept
    # README.md, docs/guide.rst, NOTES.txt, config.yml, package.json, Makefile, bin/tool: 7
    assert stats.skipped == {"not_code": 7}
    # an include pattern re-allows an excluded path, never a file that is not code
    paths, _ = _walk(root, content="code", include=["README.md"])
    assert sorted(paths) == kept
    # the default indexes them all
    assert len(_walk(root)[0]) == 16
    with pytest.raises(ValueError, match="corpus.content must be one of"):
        _walk(root, content="docs")


def test_walk_settings_carry_the_content_scope(compose):
    from rag.corpus.walk import walk_settings

    assert walk_settings(compose([]).corpus)["content"] == "all"
    assert walk_settings(compose(["corpus.content=code"]).corpus)["content"] == "code"


def test_minified_heuristic_thresholds():
    one_line = lambda n: b"x" * (n - 1) + b"\n"  # noqa: E731
    assert not looks_minified("a.js", one_line(1023))           # under 1 KB: never
    assert looks_minified("a.js", one_line(1024))                # 1,024 chars on one line
    assert looks_minified("a.js", one_line(600) * 2)             # average 600 > 300
    assert not looks_minified("a.js", one_line(60) * 100)        # 6 KB of ordinary lines
    assert looks_minified("a.css", one_line(301) * 4)            # average 301 > 300
    assert not looks_minified("a.css", one_line(300) * 4)        # average 300: kept
    assert not looks_minified("a.json", one_line(1000) * 2)      # other files: > 1,000
    assert looks_minified("a.json", one_line(1001) * 2)
    assert not looks_minified("notes.md", one_line(5000))        # documentation: never


# --------------------------------------------------------------------------- secrets

SA_JSON = ('{"type": "service_account", "private_key": "'
           + _block().replace("\n", "\\n") + '", "client_email": "x@example.invalid"}\n')
SECRET_TREE: dict[str, str | bytes] = {
    "src/app.py": "def run():\n    return 1\n",
    "docs/keys.md": (f"A PEM private key starts with\n\n    {_DASH}BEGIN RSA PRIVATE KEY{_DASH}\n"
                     f"    MIIE...\n    {_DASH}END RSA PRIVATE KEY{_DASH}\n\nNever commit one.\n"),
    "certs/ca.pem": CERT,                                   # a certificate: kept
    "certs/server.pem": CERT + _block(),                    # secret: private_key
    "certs/server.key": _block("EC"),                       # secret: private_key
    "tests/test_tls.py": f'KEY = """{_block("RSA")}"""\n\n\ndef test_tls():\n    assert KEY\n',
    "config/service-account.json": SA_JSON,                 # secret: private_key
    "deploy/id_ed25519": _block("OPENSSH"),                 # secret: ssh_key (by name)
    "deploy/id_ed25519.pub": "ssh-ed25519 AAAAC3Nza fake@example\n",
    "deploy/app.jks": b"\xfe\xed\xfe\xed\x00\x00\x00\x02",  # secret: keystore (binary too)
    ".env": "DEBUG=1\nAPI_KEY=abc\n",                       # secret: env_credentials
    ".env.example": "DEBUG=1\nAPI_KEY=\nDB_PASSWORD=<your password>\n",  # kept
    ".env.local": "DATABASE_URL=postgres://app:hunter2@db/app\n",  # secret: URL password
    ".netrc": "machine example.com login me password pw\n",  # secret: netrc
    ".pypirc": "[pypi]\nusername = __token__\npassword = pypi-AgEIcHlwaS5vcmc\n",  # secret
    "ci/.pypirc": "[pypi]\nusername = __token__\npassword =\n",  # kept: no password
    ".aws/credentials": "[default]\naws_access_key_id = AKIAEXAMPLE\n"
                        "aws_secret_access_key = abc123\n",  # secret: aws_credentials
}
SECRET_KEPT = [".env.example", "certs/ca.pem", "ci/.pypirc", "deploy/id_ed25519.pub",
               "docs/keys.md", "src/app.py"]
SECRET_KINDS = {
    "certs/server.pem": "private_key", "certs/server.key": "private_key",
    "tests/test_tls.py": "private_key", "config/service-account.json": "private_key",
    "deploy/id_ed25519": "ssh_key", "deploy/app.jks": "keystore", ".env": "env_credentials",
    ".env.local": "env_credentials", ".netrc": "netrc", ".pypirc": "pypirc_password",
    ".aws/credentials": "aws_credentials",
}


def test_secrets_are_skipped_and_counted(tmp_path: Path, caplog):
    root = _write(tmp_path / "t", SECRET_TREE)
    with caplog.at_level(logging.INFO, logger="rag.corpus.walk"):
        paths, stats = _walk(root)
    assert sorted(paths) == SECRET_KEPT
    assert stats.skipped == {"secret": 11}
    assert dict(stats.secrets) == SECRET_KINDS
    # paths and kinds are logged; no secret's content ever is
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "certs/server.pem" in text and "private_key" in text
    for leaked in (_B64, "abc123", "hunter2", "API_KEY=abc", "pypi-AgEIcHlwaS5vcmc"):
        assert leaked not in text


def test_secrets_win_over_include_and_exclude(tmp_path: Path):
    root = _write(tmp_path / "t", SECRET_TREE)
    paths, stats = _walk(root, exclude=[], include=["*.pem", "*.key", ".env", "*"])
    assert sorted(paths) == SECRET_KEPT and stats.skipped["secret"] == 11


def test_index_secrets_opt_in_indexes_them(tmp_path: Path):
    root = _write(tmp_path / "t", SECRET_TREE)
    paths, stats = _walk(root, index_secrets=True)
    # every file but the binary keystore
    assert sorted(paths) == sorted(set(SECRET_TREE) - {"deploy/app.jks"})
    assert stats.skipped == {"binary": 1} and stats.secrets == []


@pytest.mark.parametrize("path, text, kind", [
    ("a.env", "API_KEY=abc\n", "env_credentials"),
    (".env", "export GITHUB_TOKEN='ghp_x'\n", "env_credentials"),
    (".env", "SMTP_PASS=s3cret\n", "env_credentials"),
    (".env", "API_KEY=\nSECRET_KEY=''\nTOKEN=${TOKEN}\nPASSWORD=<password>\n", None),
    (".env", "AUTH_TOKEN=changeme\nAPI_KEY=your-api-key\nKEY=xxxx\nUSE_TOKEN=true\n", None),
    (".env", "# API_KEY=abc\nFOO=bar\n", None),
    (".env.example", "API_KEY=abc\n", "env_credentials"),   # the same rule for every name
    (".envrc", "export AWS_SECRET_ACCESS_KEY=$(pass show aws)\n", None),
    ("settings.env", "DSN=postgres://u:${PW}@h/db\n", None),
    ("README.md", "API_KEY=abc\n", None),                    # only .env-like names
    ("credentials", "[x]\naws_session_token = tok\n", "aws_credentials"),
    ("home/.aws/config", "[x]\naws_secret_access_key = k\n", "aws_credentials"),
    (".pypirc", "[pypi]\npassword: <token>\n", None),
    ("_netrc", "", "netrc"),
    (".git-credentials", "https://u:p@example.com\n", "git_credentials"),
    ("id_rsa", "", "ssh_key"),
    ("keys/a.p12", "", "keystore"),
    ("keys/a.pfx", "", "keystore"),
    ("keys/a.keystore", "", "keystore"),
])
def test_secret_kind(path: str, text: str, kind: str | None):
    assert secret_kind(path, text.encode()) == kind


@pytest.mark.parametrize("kind", ["", "RSA", "EC", "DSA", "OPENSSH", "ENCRYPTED"])
def test_private_key_blocks_of_every_kind(kind: str):
    assert has_private_key_block(_block(kind).encode())
    assert has_private_key_block(("x = 1\n" + _block(kind) + "y = 2\n").encode())
    # Python concatenated string literals
    lines = _block(kind).splitlines()
    concat = "KEY = (\n" + "".join(f'    "{ln}\\n"\n' for ln in lines) + ")\n"
    assert has_private_key_block(concat.encode())


def test_code_that_names_the_marker_is_not_a_key():
    src = (f'BEGIN = "{_DASH}BEGIN RSA PRIVATE KEY{_DASH}"\n'
           f'END = "{_DASH}END RSA PRIVATE KEY{_DASH}"\n'
           f'PATTERN = re.compile(r"{_DASH}BEGIN [A-Z ]*PRIVATE KEY{_DASH}(.+?){_DASH}END")\n')
    assert not has_private_key_block(src.encode())
    assert not has_private_key_block(CERT.encode())
    # this test file builds its fake keys at run time: indexing rag itself keeps it
    assert secret_kind("tests/corpus/test_walk.py", Path(__file__).read_bytes()) is None


def test_search_never_serves_a_private_key(tmp_path: Path):
    from rag.index.build import build_index
    from rag.search.pipeline import SearchOptions, SearchPipeline

    root = _write(tmp_path / "t", SECRET_TREE)
    idx = build_index(root, embedder=None, cache_dir=None, progress=False)
    assert idx.stats["files_skipped_secret"] == 11
    assert not any(_B64 in c.text or "hunter2" in c.text for c in idx.chunks)
    res = SearchPipeline(idx, SearchOptions(mode="bm25")).search("PRIVATE KEY", depth=20)
    text_of = {c.id: c.text for c in idx.chunks}
    assert res.ranked, "the documentation stub mentions PRIVATE KEY and is found"
    assert {h.path for h in res.ranked} <= set(SECRET_KEPT)
    for h in res.ranked + res.hits:
        assert _B64 not in text_of[h.chunk_id]


# --------------------------------------------------------------------------- order


@needs_git
def test_git_walk_order_is_top_down(git_repo: Path):
    paths = [d.path for d in walk_corpus(git_repo)]

    def key(p: str):
        parts = p.split("/")
        return [(0, x) if i == len(parts) - 1 else (1, x) for i, x in enumerate(parts)]
    assert paths == sorted(paths, key=key)


@needs_git
def test_git_dir_in_the_environment_is_not_used(git_repo: Path, tmp_path: Path, monkeypatch):
    # GIT_DIR naming another repository must not make an unrelated directory its work tree
    monkeypatch.setenv("GIT_DIR", str(git_repo / ".git"))
    root = _write(tmp_path / "plain", {"a.py": "A = 1\n"})
    paths, stats = _walk(root)
    assert paths == ["a.py"] and stats.listing == "filesystem"
    assert os.environ["GIT_DIR"]  # the caller's environment is left as it was


@needs_git
def test_without_a_git_binary_the_gitignore_walk_is_used(git_repo: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(git_repo / "no-such-bin"))
    paths, stats = _walk(git_repo)
    assert stats.listing == "filesystem"
    assert "notes.local" in paths and "debug.log" not in paths  # only .gitignore applies


# --------------------------------------------------------------------------- secrets, round 2
# Every credential below is assembled at run time (this file is indexed when rag indexes
# itself, and must not hold one); the values are made up.

_PEM_LINES = _block("RSA").splitlines()
_SK = "wJ8rXUtnFEMI/K7MDENG" + "bPxRfiCYzq9AbCdEfGh1"  # 40 characters, AWS secret-like
_AKID = "AKIA" + "Q3RT7ZL2MXWPV4NB"
_TOKEN_KEY = ":_auth" + "Token="
_NPM = "npm_" + "Zx81kQ" * 6


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize("prefix", ["", "// ", "# ", " * ", "> ", ";; ", "-- ", "| ", "% ",
                                    "> > ", "\t"])
def test_private_key_lines_with_a_comment_or_quote_prefix_are_keys(prefix: str):
    text = "\n".join(prefix + line for line in _PEM_LINES) + "\n"
    assert secret_kind("notes.txt", text.encode()) == "private_key"
    # the documentation stub stays a stub whatever the prefix
    stub = "\n".join(prefix + line for line in
                     [_PEM_LINES[0], "MIIEpAIBAAKCAQEA...", _PEM_LINES[-1]]) + "\n"
    assert secret_kind("notes.txt", stub.encode()) is None


@pytest.mark.parametrize("text", [
    # a Javadoc / C block comment
    "/**\n" + "".join(f" * {ln}\n" for ln in _PEM_LINES) + " */\nclass A {}\n",
    # HTML with <br> after each line, and in one line
    "<p>" + "<br>\n".join(_PEM_LINES) + "<br></p>\n",
    "<pre>" + "<br/>".join(_PEM_LINES) + "</pre>\n",
    # SQL: lines joined with '||chr(10)||'
    "INSERT INTO keys VALUES ('" + "'||chr(10)||'".join(_PEM_LINES) + "');\n",
    # T-SQL: + CHAR(10) +
    "SELECT '" + "' + CHAR(10) + '".join(_PEM_LINES) + "';\n",
    # Java/JS string concatenation with a trailing +
    "String k =\n" + "".join(f'    "{ln}\\n" +\n' for ln in _PEM_LINES) + '    "";\n',
    # YAML block, JSON inside JSON (doubled escapes)
    "tls:\n  key: |\n" + "".join(f"    {ln}\n" for ln in _PEM_LINES),
    '{"a": "{\\"k\\": \\"' + "\\\\n".join(_PEM_LINES) + '\\"}"}\n',
    # numbered listing: no stripping rule applies, the END marker bounds the material
    "".join(f"{i:03d} {ln}\n" for i, ln in enumerate(_PEM_LINES, 1)),
    # a UTF-8 BOM first
    "\ufeff" + "\n".join(_PEM_LINES) + "\n",
])
def test_private_key_blocks_in_any_wrapping(text: str):
    assert secret_kind("doc.txt", text.encode()) == "private_key"


def test_the_marker_far_from_material_is_not_a_key():
    # material more than PEM_WINDOW_LINES lines after a BEGIN marker is not its key
    text = (_PEM_LINES[0] + "\n" + "x = 1\n" * 120 + "\n".join(_PEM_LINES[1:-1]) + "\n")
    assert secret_kind("a.py", text.encode()) is None
    # a marker, then code of bare words: no line of 24 base64 characters
    code = _PEM_LINES[0] + "\n" + "    pass\n    return\n    continue\n" * 10
    assert secret_kind("a.py", code.encode()) is None


@pytest.mark.parametrize("path, data, kind", [
    (".env", b"\xef\xbb\xbfAPI_KEY=abc\n", "env_credentials"),
    (".env.local", b"\xef\xbb\xbfDATABASE_URL=postgres://a:b9x@h/d\n", "env_credentials"),
    (".pypirc", b"\xef\xbb\xbfpassword = pypi-AgEIcHlwaS5vcmc\n", "pypirc_password"),
    ("credentials", b"\xef\xbb\xbfaws_secret_access_key = abc123\n", "aws_credentials"),
    (".pgpass", b"\xef\xbb\xbfdb:5432:app:app:S3cr3t\n", "pgpass"),
    (".env", b"\xef\xbb\xbfDEBUG=1\n", None),
])
def test_a_byte_order_mark_hides_nothing(path: str, data: bytes, kind: str | None):
    assert secret_kind(path, data) == kind


@pytest.mark.parametrize("path, text, kind", [
    # AWS, in any text file
    ("notes.txt", f"aws_secret_access_key = {_SK}\n", "aws_credentials"),
    ("app/settings.py", f'AWS_SECRET_ACCESS_KEY = "{_SK}"\n', "aws_credentials"),
    ("out.json", f'{{"Credentials": {{"SecretAccessKey": "{_SK}"}}}}\n', "aws_credentials"),
    ("deploy.sh", f"export ID={_AKID}\nexport S={_SK}\n", "aws_credentials"),  # a pair
    ("docs/aws.md", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
                    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", None),
    ("a.py", f"KEY_ID = '{_AKID}'\n", None),                          # an id alone
    ("a.py", f"ID = '{_AKID}'\nSHA = '{'0123456789abcdef' * 2}01234567'\n", None),  # hex
    ("a.py", "aws_secret_access_key = os.environ['AWS_SECRET_ACCESS_KEY']\n", None),
    # npm
    ("ci/npmrc.txt", f"//registry.npmjs.org/{_TOKEN_KEY}{_NPM}\n", "npm_token"),
    ("README.md", f"//registry.npmjs.org/{_TOKEN_KEY}${{NPM_TOKEN}}\n", None),
    ("README.md", f"//registry.npmjs.org/{_TOKEN_KEY}MYTOKEN1\n", None),
    (".npmrc", "_auth = " + _b64("me:pw9") + "\n", "npm_token"),
    ("web/.npmrc", "registry=https://registry.example.com/\n", None),
    # .pgpass
    (".pgpass", "db.internal:5432:app:app:S3cr3t!\n", "pgpass"),
    ("home/.pgpass", "# host:port:database:user:password\nlocalhost:5432:*:me:\n", None),
    # docker config.json
    (".docker/config.json", '{"auths": {"https://index.docker.io/v1/": {"auth": "'
     + _b64("me:hunter22") + '"}}}\n', "docker_auth"),
    ("notes.md", '"auths": {"r.example": {"auth": "' + _b64("me:hunter22") + '"}}\n',
     "docker_auth"),
    ("x.json", '{"auths": {"r": {"auth": ""}, "q": {"auth": "' + _b64("me:<password>")
     + '"}}}\n', None),
    # URLs with a password, in config-like files only
    ("git/config", '[remote "origin"]\n\turl = https://me:' + "ghp_a1B2c3@github.com/x/y\n",
     "url_password"),
    ("conf/app.yaml", "db: postgres://app:Xk29fj@db.internal/app\n", "url_password"),
    ("requirements.txt", "git+https://me:" + "t0kEn9@git.example.com/x.git\n", "url_password"),
    ("x.ini", "url = https://u:$uperS3cret@h/\n", "url_password"),
    ("x.ini", "url = https://u:$DB_PASSWORD@h/\n", None),
    ("settings.toml", 'url = "redis://:${REDIS_PASSWORD}@cache"\n', None),
    ("setup.cfg", "url = https://user:password@host/\n", None),
    (".github/workflows/ci.yml", "DATABASE_URL: postgres://postgres:postgres@localhost/t\n",
     None),
    ("conf/app.yaml", "db: postgres://app:{{ db_password }}@db/app\n", None),
    ("README.md", "postgres://app:Xk29fj@db.internal/app\n", None),      # docs: not config
    ("tests/test_db.py", "URL = 'postgres://app:Xk29fj@localhost/db'\n", None),
    # .env-like names
    (".env-local", "API_KEY=abc\n", "env_credentials"),
    (".env_prod", "DATABASE_URL=postgres://a:b9x@h/d\n", "env_credentials"),
    ("env.json", '{\n  "API_KEY": "abc123",\n  "DEBUG": true\n}\n', "env_credentials"),
    ("env.json", '{\n  "API_KEY": "",\n  "TOKEN": "<token>"\n}\n', None),
    (".env", "DB_PASSWORD=$uperS3cret\n", "env_credentials"),   # not an UPPER_CASE variable
    (".env", "DB_PASSWORD=$DB_PASSWORD_FROM_VAULT\nAPI_KEY=password\n", None),
])
def test_content_secrets_in_any_file(path: str, text: str, kind: str | None):
    assert secret_kind(path, text.encode()) == kind


def test_extra_documents_are_checked_for_secrets(tmp_path: Path):
    from rag.corpus.walk import Document
    from rag.index.build import build_index

    root = _write(tmp_path / "t", {"src/app.py": "def run():\n    return 1\n"})
    extra = [Document(path="issues/1.md", category="issue", size=1,
                      text="Our key, sorry:\n\n```\n" + _block("RSA") + "```\n"),
             Document(path="issues/2.md", category="issue", size=1,
                      text=f"creds: aws_secret_access_key={_SK}\n"),
             Document(path="issues/3.md", category="issue", size=1, text="A plain bug.\n")]
    idx = build_index(root, embedder=None, cache_dir=None, progress=False, extra_docs=extra)
    assert idx.paths == {"src/app.py", "issues/3.md"}
    assert idx.stats["files_skipped_secret"] == 2 and idx.stats["files_issue"] == 1
    assert not any(_B64 in c.text or _SK in c.text for c in idx.chunks)
    opt_in = build_index(root, embedder=None, cache_dir=None, progress=False,
                         extra_docs=extra, walk={"index_secrets": True})
    assert opt_in.paths == {"src/app.py", "issues/1.md", "issues/2.md", "issues/3.md"}


def test_beir_ids_named_like_secrets_are_kept_and_secret_documents_reported(tmp_path: Path):
    import json

    from rag.datasets.beir import mapped_path, original_doc_id, prepare_beir
    from rag.datasets.common import DatasetError

    assert mapped_path("identity") == "_ids/identity_doc"
    assert mapped_path("x.p12") == "_ids/x.p12_doc"
    assert mapped_path("credentials") == "_ids/credentials_doc"
    assert mapped_path("prod.env") == "_ids/prod.env_doc"
    assert mapped_path("id_rsa") == "_ids/id_5Frsa"      # escaping already hides the name
    assert mapped_path("doc1") == "_ids/doc1" and mapped_path("x.json") == "_ids/x.json"
    corpus = [{"_id": "identity", "text": "who am I"}, {"_id": "x.p12", "text": "a note"},
              {"_id": "prod.env", "text": "API_KEY=abc\n"},
              {"_id": "leak", "text": _block("RSA")},
              {"_id": "aws", "text": f"aws_secret_access_key = {_SK}\n"}]
    src = tmp_path / "b"
    src.mkdir()
    (src / "qrels").mkdir()
    (src / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (src / "queries.jsonl").write_text('{"_id": "q1", "text": "who"}\n')
    (src / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\tidentity\t1\nq1\tx.p12\t1\nq1\tprod.env\t1\n")
    p = prepare_beir(src, split="test", name="b", cache_root=tmp_path / "c")
    files = sorted(str(f.relative_to(p.corpus_root)) for f in p.corpus_root.rglob("*"))
    assert files == ["_ids", "_ids/identity_doc", "_ids/prod.env_doc", "_ids/x.p12_doc"]
    paths, stats = _walk(p.corpus_root)
    assert sorted(paths) == files[1:] and stats.skipped["secret"] == 0
    assert original_doc_id("_ids/identity_doc", p.manifest) == "identity"
    assert p.manifest["counts"]["secrets"] == 2 and p.manifest["counts"]["files"] == 3
    assert "2 documents hold a secret and are not written (the corpus walk never indexes " \
           "one): corpus.jsonl:4 (private_key), corpus.jsonl:5 (aws_credentials)" \
           in p.manifest["notes"]
    # a label on a secret document: an error that says so, with the corpus line
    (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tleak\t1\n")
    with pytest.raises(DatasetError, match=r"test\.tsv:2: document 'leak' \(corpus\.jsonl:4\) "
                                           r"holds a secret \(private_key\)"):
        prepare_beir(src, split="test", name="b", cache_root=tmp_path / "c")


def test_stat_fingerprint_sees_empty_directories(tmp_path: Path):
    from rag.index.build import build_index
    from rag.index.store import stat_fingerprint

    root = _write(tmp_path / "t", {"src/app.py": "def run():\n    return 1\n",
                                   "build/tool.py": "def tool():\n    return 2\n"})
    store = tmp_path / "store"
    first = build_index(root, embedder=None, cache_dir=None, progress=False, chunk_store=store,
                        walk={"use_git": False})
    assert first.paths == {"src/app.py", "build/tool.py"}  # no build traces: source
    before = stat_fingerprint(root)
    (root / "build" / "CMakeFiles").mkdir()  # an empty directory: build/ is now an output
    assert stat_fingerprint(root) != before
    again = build_index(root, embedder=None, cache_dir=None, progress=False, chunk_store=store,
                        walk={"use_git": False})
    assert again.stats["corpus_read"] == 1 and again.paths == {"src/app.py"}
    (root / "empty").mkdir()
    assert stat_fingerprint(root) != stat_fingerprint(root / "src")


def test_documentation_that_elides_a_token_is_not_a_secret():
    """README-style examples write the value as an ellipsis: a placeholder, not a token."""
    from rag.corpus.walk import secret_kind

    key = "//registry.example/:_auth" + "Token="  # built at run time: this file stays indexable
    assert secret_kind("README.md", (key + "\u2026\n").encode()) is None
    assert secret_kind("docs/npm.md", (key + "...\n").encode()) is None
    line = key + "npm_" + "AbC123realTokenValue99" + "\n"
    assert secret_kind(".npmrc", line.encode()) == "npm_token"
