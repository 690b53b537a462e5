"""What ``rag golden mine --from git`` does with a commit message and its changed files before a
commit becomes a candidate: the subject cleaned into a query (:func:`clean_subject`), and the
housekeeping commits that make no query named by a reason (:func:`housekeeping_reason`).

The rules are the conventions most repositories follow, not any one repository's: the
Conventional Commits prefix (https://www.conventionalcommits.org/en/v1.0.0/), GitHub's
``(#123)`` squash-merge suffix and closing keywords
(https://docs.github.com/en/issues/tracking-your-work-with-issues/using-issues/linking-a-pull-request-to-an-issue),
Jira-style ticket keys, Dependabot/Renovate subjects, and the file names of CI systems,
dependency manifests and changelogs. Their precision, measured by hand on samples of real
histories, is in golden/README.md ("Mined from git").
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Iterable

#: every reason :func:`housekeeping_reason` returns, in the order it tries them
HOUSEKEEPING = ("dependency_bump", "ci", "lint_or_format", "typo", "docs_only", "changelog",
                "version_support", "removal", "code_move", "vague_change")

#: a Conventional Commits prefix: ``fix:``, ``feat(router)!:``, ``chore(deps):``
CONVENTIONAL_PREFIX = re.compile(
    r"^(?P<type>feat|feature|fix|bugfix|hotfix|chore|docs?|refactor|perf|test|tests|build|ci|"
    r"style|revert|deps|release|security|types?|lint)(?:\((?P<scope>[^)]*)\))?!?:\s*", re.I)

#: the Go project's prefix (https://go.dev/doc/contribute#commit_messages): the package or
#: area the change is in, lower case, before a colon: ``tree:``, ``net/http:``, ``binding, render:``
AREA_PREFIX = re.compile(r"^(?P<scope>[a-z][\w.-]*(?:/[\w.-]+)*(?:\s*,\s*[a-z][\w.-]*(?:/[\w.-]+)*)*)"
                         r":\s+")

# references a query never needs: GitHub's squash suffix and closing keywords, gh-123, [#12],
# "PR #12", "issue #12", a Jira-style key in front ("ABC-123: ", "[ABC-123] ")
_REFERENCE_PATTERNS = (
    re.compile(r"\s*\((?:(?:fix(?:es|ed)?|close[sd]?|resolve[sd]?|refs?|see|issue|pr)\s*)?"
               r"(?:[\w.-]+/[\w.-]+)?#\d+(?:\s*[,&]\s*(?:[\w.-]+/[\w.-]+)?#\d+)*\)", re.I),
    re.compile(r"\s*\[#?\d+\]"),
    re.compile(r"\s*\b(?:fix(?:es|ed)?|close[sd]?|resolve[sd]?|refs?|see)\s+"
               r"(?:[\w.-]+/[\w.-]+)?#\d+(?:\s*[,&]\s*#\d+)*", re.I),
    re.compile(r"\s*\b(?:pr|pull request|issue)\s*#?\d+\b", re.I),
    re.compile(r"\s*\bgh-\d+\b", re.I),
    re.compile(r"(?<![\w&])#\d+\b"),
    re.compile(r"^\s*\[?[A-Z][A-Z0-9]+-\d+\]?\s*[:\-]?\s*"),
    re.compile(r"\s*\(\s*(?:by:?\s*@?[\w.-]+)?\s*\)", re.I),
)
_BRACKET_TAG = re.compile(r"^\s*\[[\w\s./-]{1,20}\]\s*|\s*\[(?:ci skip|skip ci|wip)\]", re.I)


def clean_subject(subject: str) -> str:
    """A commit subject as a query: without its Conventional Commits prefix (or the Go
    project's package prefix, ``tree: ...``, :data:`AREA_PREFIX`), a leading ``[tag]``, PR/issue references (``(#4723)``, ``fixes #12``, ``gh-12``, ``PR #9``, a
    leading ``ABC-123:`` ticket key), backticks around identifiers and a trailing full stop.

    Returns ``""`` when nothing is left (``"fix #2786 (#2796)"``). Example:
    ``"fix(context): skip chmod on pre-existing dirs in `SaveUploadedFile` (#4702)"`` →
    ``"skip chmod on pre-existing dirs in SaveUploadedFile"``.
    """
    text = subject.strip()
    text = CONVENTIONAL_PREFIX.sub("", text) if CONVENTIONAL_PREFIX.match(text) \
        else AREA_PREFIX.sub("", text)
    text = _BRACKET_TAG.sub(" ", text)
    for pattern in _REFERENCE_PATTERNS:
        text = pattern.sub("", text)
    text = text.replace("`", "")
    return " ".join(text.split()).strip(" .;,:-–—")


def conventional_type(subject: str) -> tuple[str | None, str | None]:
    """``(type, scope)`` of a Conventional Commits subject, lower-cased; ``(None, scope)``
    for a Go-style package prefix (``tree: ...`` -> ``(None, "tree")``); ``(None, None)``
    for a subject with neither."""
    m = CONVENTIONAL_PREFIX.match(subject.strip())
    if not m:
        area = AREA_PREFIX.match(subject.strip())
        return None, area.group("scope").lower() if area else None
    return m.group("type").lower(), (m.group("scope") or "").strip().lower() or None


# --------------------------------------------------------------------------- file kinds

_MANIFESTS = frozenset("""
    go.mod go.sum go.work go.work.sum package.json package-lock.json npm-shrinkwrap.json
    yarn.lock pnpm-lock.yaml bun.lockb requirements.txt constraints.txt poetry.lock pdm.lock
    uv.lock pipfile pipfile.lock cargo.toml cargo.lock gemfile gemfile.lock composer.json
    composer.lock mix.exs mix.lock pom.xml build.gradle build.gradle.kts gradle.properties
    libs.versions.toml packages.lock.json directory.packages.props podfile podfile.lock
    package.resolved build.sbt pubspec.yaml pubspec.lock
""".split())
_CI_DIRS = (".github/workflows/", ".github/actions/", ".circleci/", ".buildkite/", ".azure/",
            ".gitlab/", ".woodpecker/", ".drone/")
_CI_NAMES = frozenset("""
    .travis.yml .gitlab-ci.yml appveyor.yml .appveyor.yml azure-pipelines.yml jenkinsfile
    .drone.yml codecov.yml .codecov.yml .golangci.yml .golangci.yaml .pre-commit-config.yaml
    .goreleaser.yml .goreleaser.yaml dependabot.yml renovate.json .renovaterc .mergify.yml
    .readthedocs.yaml .readthedocs.yml .editorconfig .gitignore .gitattributes codeowners
    .coveragerc tox.ini noxfile.py .flake8 .pylintrc .eslintrc .eslintrc.js .eslintrc.json
    .prettierrc .prettierrc.json .rubocop.yml .clang-format .rustfmt.toml rustfmt.toml
    .markdownlint.json .yamllint funding.yml makefile gnumakefile justfile taskfile.yml
    dockerfile .dockerignore docker-compose.yml docker-compose.yaml
""".split())
_CHANGELOG = re.compile(r"^(changes|changelog|history|news|release[-_ ]?notes|authors|"
                        r"contributors)(\.[a-z]+)?$", re.I)
_DOC_SUFFIXES = (".md", ".rst", ".txt", ".adoc", ".markdown")
_CONFIG_SUFFIXES = (".toml", ".cfg", ".ini")


def file_kind(path: str) -> str:
    """``manifest`` (a dependency manifest or lockfile), ``ci`` (CI, lint and repository
    configuration), ``changelog`` (changelog, history, authors), ``config`` (``.toml``,
    ``.cfg``, ``.ini`` outside ``src/``, ``lib/``, ``pkg/``: pyproject.toml, setup.cfg),
    ``docs`` (prose: ``.md``,
    ``.rst``, ``.txt``, ``.adoc``, or anything under ``docs/``/``doc/``) or ``code``, for a
    repository-relative POSIX path."""
    p = PurePosixPath(path)
    name = p.name.lower()
    low = path.lower()
    if name in _MANIFESTS or re.match(r"requirements[\w.-]*\.(txt|in)$", name):
        return "manifest"
    if name in _CI_NAMES or any(low.startswith(d) or f"/{d}" in low for d in _CI_DIRS) \
            or low.startswith(".github/"):
        return "ci"
    if _CHANGELOG.match(name):
        return "changelog"
    if name.endswith(_CONFIG_SUFFIXES) and not any(s in ("src", "lib", "pkg") for s in
                                                   (x.lower() for x in p.parts[:-1])):
        return "config"
    if name.endswith(_DOC_SUFFIXES) or any(s in ("docs", "doc") for s in
                                           (x.lower() for x in p.parts[:-1])):
        return "docs"
    return "code"


_BUMP = re.compile(
    r"\b(bump|bumps|bumped|upgrade|upgrades|upgraded|update|updates|updated|pin|unpin)\b.*"
    r"(\bfrom\b.*\bto\b|\bto\s+v?\d|\bv?\d+\.\d+|\bversion\b|\bdependenc|\bdeps\b)", re.I)
_DEPENDENCY_WORDS = re.compile(r"\b(dependabot|renovate|dependencies|dependency|deps)\b", re.I)
_LINT = re.compile(r"\b(lint|linter|linters|linting|golangci(-lint)?|gofmt|goimports|gofumpt|"
                   r"go vet|ruff|isort|flake8|pylint|prettier|eslint|rubocop|clippy|rustfmt|"
                   r"clang-format|reformat|reformatted|code style|pre-commit|format code|"
                   r"(run|apply|applied) black|moderniz\w*|mypy|pyright|type (ignore|hints?|"
                   r"annotations?)|typing (errors?|issues?|fixes))\b", re.I)
_TYPO = re.compile(r"\b(typos?|spelling|misspell\w*|grammar)\b", re.I)
_CI_WORDS = re.compile(r"\b(ci|github actions?|workflows?|travis|appveyor|circleci|codecov|"
                       r"pipelines?)\b", re.I)


# subjects that name no behaviour a search could find at the commit's HEAD (measured on the
# judged gin and click samples, experiments/golden-mining.md): a language-version support
# change or a version start, a removal (what it names is gone), a code move, and a change
# described only as modified / adjusted / tweaked
_VERSION_SUPPORT = re.compile(
    r"^(start|begin)\s+(version|v?\d)|\bsupport\s+(for\s+)?(python|py|go|golang|node(js)?|"
    r"ruby|java|jdk|php|rust)\s*v?\d", re.I)
_REMOVAL = re.compile(r"^(remove[sd]?|removing|delete[sd]?|deleting|drop(s|ped|ping)?)\b", re.I)
_CODE_MOVE = re.compile(r"^(move[sd]?|moving|relocate[sd]?|relocating)\b", re.I)
_VAGUE = re.compile(r"^(modif(y|ies|ied)|adjust(s|ed)?|tweak(s|ed)?|minor)\b", re.I)


def housekeeping_reason(subject: str, changed: Iterable[str]) -> str | None:
    """Why a commit is housekeeping that makes no retrieval query, or None.

    ``changed``: the repository-relative paths the commit touched (every file, indexed or
    not). In order (the last four read the cleaned subject's first words: ``version_support``
    "drop support for Python 3.7", "start version 8.0.1"; ``removal`` "remove ...", "delete
    ...", "drop ..." — what it names is gone at HEAD; ``code_move`` "move ..."; and
    ``vague_change`` "modify ...", "adjust ...", "tweak ...", "minor ..."): ``dependency_bump`` (only manifests/lockfiles changed, a ``deps`` scope,
    or a bump/upgrade subject that names a version or dependencies), ``ci`` (only CI and
    repository configuration changed, or a ``ci``/``build`` type, or a subject naming CI when
    no code changed), ``lint_or_format`` (a ``style`` type or a subject about linters,
    formatters, type checkers and annotations, "modernize" rewrites), ``typo`` (a subject about
    typos, spelling or grammar), ``docs_only`` (a ``docs`` type, or only prose changed: a
    badge, a "projects using X" list, a README edit), ``changelog`` (only changelogs and
    author lists changed).
    """
    kinds = {file_kind(p) for p in changed}
    ctype, scope = conventional_type(subject)
    rest = clean_subject(subject)
    # a Go-style area prefix is stripped from the query, but its word may be the reason
    # ("typo: fix comment", "gofmt: apply", "dependabot: bump x"): the keyword checks read
    # it; the checks anchored at the subject's start read the query alone
    words = f"{scope}: {rest}" if scope and ctype is None else rest
    if kinds and kinds <= {"manifest"} or scope in ("deps", "deps-dev", "dependencies") \
            or ctype == "deps" or (_BUMP.search(words) and ("manifest" in kinds
                                                             or _DEPENDENCY_WORDS.search(words))):
        return "dependency_bump"
    if kinds and kinds <= {"ci", "manifest", "config"} or ctype in ("ci", "build") \
            or (_CI_WORDS.search(words) and "code" not in kinds):
        return "ci"
    if ctype in ("style", "lint") or scope in ("types", "typing", "lint", "style") \
            or _LINT.search(words):
        return "lint_or_format"
    if _TYPO.search(words):
        return "typo"
    if ctype in ("doc", "docs") or kinds and kinds <= {"docs", "changelog", "ci"} \
            and "docs" in kinds:
        return "docs_only"
    if kinds and kinds <= {"changelog"}:
        return "changelog"
    for reason, pattern in (("version_support", _VERSION_SUPPORT), ("removal", _REMOVAL),
                            ("code_move", _CODE_MOVE), ("vague_change", _VAGUE)):
        if pattern.search(rest):
            return reason
    return None


# --------------------------------------------------------------------------- lines that are no answer

_HASH_COMMENT = frozenset({"python", "ruby", "shell"})
_IMPORT_LINE = re.compile(
    r"^\s*(import\b|from\s+[\w.]+\s+import\b|#\s*include\b|use\s+[\w:{}, *]+;|using\s+[\w.=\s]+;|"
    r"require(_relative)?\b|package\s+[\w.]+;?\s*$|extern\s+crate\b|@import\b|"
    r"(const|let|var)\s+[\w{}\s,]+=\s*require\()")
_GO_IMPORT_SPEC = re.compile(r'^\s*([\w.]+\s+)?"[^"]+"\s*$')


def non_code_lines(path: str, text: str) -> frozenset[int]:
    """The 1-based lines of a source file that hold no behaviour: comment lines (``//``,
    ``/* */`` blocks and their ``*`` lines; ``#`` in Python, Ruby and shell), Python
    docstrings (every line of the string, read with ``ast``) and import statements
    (``import``, ``from x import``, ``#include``, ``use x;``, ``using x;``, ``require``,
    Go's ``import ( ... )`` block). A commit that changed only such lines documents or
    tidies code; it does not make a query whose answer is that code. Files of other kinds
    (prose, configuration) have none."""
    from rag.corpus.chunk import split_lines
    from rag.corpus.languages import language_name

    lang = language_name(path)
    if lang is None:
        return frozenset()
    lines = [ln.rstrip("\r\n") for ln in split_lines(text)]
    out: set[int] = set()
    in_block = in_go_import = False
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if in_block:
            out.add(n)
            in_block = "*/" not in s
            continue
        if lang != "python" and s.startswith("/*"):
            out.add(n)
            in_block = "*/" not in s[2:]
            continue
        if in_go_import:
            out.add(n)
            in_go_import = s != ")"
            continue
        if lang == "go" and re.match(r"import\s*\($", s):
            out.add(n)
            in_go_import = True
            continue
        if (lang not in _HASH_COMMENT and s.startswith("//")) \
                or (lang in _HASH_COMMENT and s.startswith("#") and not s.startswith("#!")) \
                or _IMPORT_LINE.match(line):
            out.add(n)
    if lang == "python":
        out |= _python_docstring_lines(text)
    return frozenset(out)


def _python_docstring_lines(text: str) -> set[int]:
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            first = node.body[0]
            out.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return out
