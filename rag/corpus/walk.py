"""Walk a corpus directory: the files git would list, never a secret, never generated noise.

What is indexed (every skip is counted by reason in :class:`WalkStats`, so a run can say what
it did not index and why; a file is counted under the first rule that skips it, in the order
below):

1. **Ignore rules.** Inside a git work tree (``git rev-parse --show-toplevel`` works from the
   corpus root) the files are those ``git ls-files -co --exclude-standard`` lists from the
   root: tracked files plus untracked files that ``.gitignore``, ``.git/info/exclude`` and
   ``core.excludesFile`` do not ignore (``gitignored``); nested repositories and submodules
   are listed by their own git. Outside git (or without a ``git`` binary, or when the root
   itself is ignored by the enclosing repository) every ``.gitignore`` under the root is
   applied with ``pathspec.GitIgnoreSpec`` (the deepest file with a matching pattern decides).
   Either way ``.ignore`` (``dotignore``) and ``.rgignore`` (``rgignore``) files are honoured
   as ripgrep does: per directory, gitignore syntax, the deepest file with a matching pattern
   decides within a kind, and the kinds rank ``.rgignore`` over ``.ignore`` over git's rules
   (so ``!log/`` in a ``.ignore`` re-includes a directory ``.gitignore`` hides). In a git
   work tree ``.ignore``/``.rgignore`` files above the root, up to the work tree's top, apply
   too. ``.git`` (directory or gitfile) is ``git_dir``. One difference from ripgrep: patterns
   are matched with pathspec, where a directory pattern also matches everything below it, so
   a directory that ``.ignore`` re-includes is re-included whole (ripgrep would still apply
   ``.gitignore`` file patterns such as ``*.tmp`` inside it).
2. **Default excludes** (:data:`DEFAULT_EXCLUDES`, gitignore patterns relative to the root,
   each with its reason in :data:`EXCLUDE_GROUPS`): lock files (``lock_file``), packaging
   metadata such as ``PKG-INFO`` and ``*.egg-info/`` (``package_metadata``), dependency trees
   such as ``node_modules/`` and virtualenvs (``dependency_dir``), build outputs and caches
   (``build_output``) and minified bundles (``minified``). ``build/`` and ``target/`` are
   skipped only when they are outputs (:func:`walk_corpus` says how that is judged). A
   skipped directory counts once. Replace the list with ``exclude=``; re-allow paths with
   ``include=``.
3. Symlinks and devices (``not_regular``), files over ``max_file_bytes`` (``too_large``),
   unreadable files (``unreadable``).
4. **Secrets** (``secret``, whatever ``exclude``/``include`` say, unless
   ``index_secrets=True``): see :func:`secret_kind`. Only paths and kinds are logged, never
   content.
4b. **Secret literals** in the files that are indexed (a GitHub, Slack, Stripe, Google, npm,
   PyPI, OpenAI, Anthropic or Hugging Face token, a JWT, a high-entropy literal assigned to
   ``*password``/``*secret``/``*token``/``*api_key``, ...: :mod:`rag.corpus.secrets`) are
   replaced by ``[REDACTED:<kind>]`` in the document's text, so the value is never chunked,
   embedded, stored or served while the rest of the file stays searchable; counted per kind
   (``secrets_redacted_<kind>``, ``files_redacted``), logged by path and kind. Off with
   ``index_secrets=True`` too.
5. A NUL byte in the first 8 KB (``binary``); minified or machine-generated one-line text
   judged by its average line length (``minified``, see :func:`looks_minified`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Iterator

import pathspec

from rag.corpus.secrets import REDACTION_KINDS, has_literal_values, redact_secrets
from rag.corpus.secrets import is_placeholder as _is_placeholder

logger = logging.getLogger(__name__)

BINARY_SNIFF_BYTES = 8192
GIT_TIMEOUT_S = 120

CATEGORIES = ("source", "test", "documentation", "example", "config", "other", "issue",
              "pull_request")

#: suffixes of source files (category ``source``)
SOURCE_SUFFIXES = {
    ".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".mjs", ".go", ".rs", ".java", ".kt", ".c",
    ".h", ".cc", ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".scala", ".sh", ".bash",
    ".html", ".htm", ".jinja", ".j2", ".css", ".scss", ".sql", ".lua", ".pl", ".r",
    # the other suffixes rag.corpus.languages chunks by symbol
    ".cjs", ".mts", ".cts", ".kts", ".cxx", ".c++", ".hh", ".hxx", ".h++", ".sc",
    # Elixir (by symbol since chunker 6)
    ".ex", ".exs",
    # in windows: Bats tests, Vue and Svelte components, Cython
    ".bats", ".vue", ".svelte", ".pyx", ".pxd",
    # Haskell and Zig (by symbol since chunker 7); in windows, the other code languages of
    # semble's own list (MinishLab/semble index/files.py, its languages less documentation,
    # config and data), so that corpus.content=code keeps them
    ".hs", ".zig", ".lhs", ".luau", ".dart", ".ml", ".mli", ".erl", ".hrl", ".clj", ".cljs",
    ".cljc", ".jl", ".nim", ".pm", ".ps1", ".psm1", ".groovy", ".gradle", ".m", ".mm", ".fs",
    ".fsi", ".fsx", ".vb", ".elm", ".purs", ".sol", ".sv", ".vhd", ".vhdl", ".tf", ".nix",
    ".cmake", ".vim", ".el", ".lisp", ".scm", ".rkt", ".tcl", ".cr", ".d", ".odin", ".gleam",
    ".hx", ".fnl", ".zsh", ".fish", ".awk", ".cu", ".glsl", ".hlsl", ".wgsl", ".graphql",
    ".gql", ".idr", ".agda", ".lean", ".mojo", ".move", ".cairo", ".res", ".resi", ".pas",
    ".f90", ".f95", ".f03", ".f08", ".ada", ".adb", ".ads", ".cob", ".cbl", ".asm", ".pyw",
    ".ino", ".astro", ".twig", ".erb", ".heex", ".eex", ".leex", ".hbs", ".liquid", ".pug",
    ".less", ".jsonnet", ".libsonnet", ".star", ".bzl", ".mk", ".tl", ".v", ".sml",
}
#: directories whose files are tests: Python/Java (src/test/)/Rust/Go tests/ and test/,
#: RSpec and Jasmine spec/, Jest __tests__/ and its module mocks __mocks__/ (test doubles that
#: only tests load)
_TEST_DIRS = {"tests", "test", "testing", "spec", "__tests__", "__mocks__"}
#: a .NET test project's directory: MyLib.Tests/, MyLib.UnitTests/, MyLib.Test/
_TEST_PROJECT = re.compile(r".\.(?:unit|integration)?tests?$")
#: test file names by convention: foo.test.ts / foo.spec.js / foo.test-d.ts (JS, TS), and
#: FooTest.php / FooTests.cs / FooTest.java / FooTests.swift (PHPUnit, xUnit, JUnit,
#: XCTest: a capital T after a lower-case letter or digit, so Contest.php stays source)
_TEST_NAME = re.compile(r"\.(?:test|spec|test-d)\.[cm]?[jt]sx?$"
                        r"|[a-z0-9]Tests?\.(?:php|cs|java|kt|swift)$")
_DOC_SUFFIXES = {".md", ".markdown", ".rst", ".txt", ".adoc"}
#: ``corpus.content`` -> which files a walk keeps: ``all`` (every text file the rules below
#: keep) or ``code`` (only files whose suffix is one of :data:`SOURCE_SUFFIXES`, tests and
#: examples included; documentation, config, data and suffix-less files are skipped as
#: ``not_code``): the scope of an index that, like semble's default (``ContentType.CODE``,
#: MinishLab/semble index/files.py), holds code only
CONTENT_SCOPES = ("all", "code")
_CONFIG_SUFFIXES = {".toml", ".ini", ".cfg", ".yaml", ".yml", ".json", ".lock", ".conf"}
_CONFIG_NAMES = {
    "setup.py", "conftest.py", "conf.py", "makefile", "dockerfile", ".editorconfig",
    ".gitignore", ".gitattributes", "manifest.in", "noxfile.py", "tox.ini",
}
_DOC_STEMS = {"readme", "changes", "changelog", "license", "contributing", "authors", "history"}

# --------------------------------------------------------------------------- default excludes

#: reason -> the built-in gitignore patterns skipped for that reason.
EXCLUDE_GROUPS: dict[str, tuple[str, ...]] = {
    "lock_file": (
        "*.lock",  # uv, poetry, Cargo, Gemfile, composer, yarn, Pipfile, pdm, flake, mix, ...
        "uv.lock", "poetry.lock", "Cargo.lock", "Gemfile.lock", "composer.lock", "yarn.lock",
        "Pipfile.lock", "pdm.lock", "package-lock.json", "npm-shrinkwrap.json",
        "pnpm-lock.yaml", "bun.lockb", "go.sum", "Package.resolved", "packages.lock.json",
        "gradle.lockfile", "conda-lock.yml",
    ),
    "package_metadata": ("PKG-INFO", "*.egg-info/", "*.dist-info/"),
    # ".venv/" also stands for any directory holding a pyvenv.cfg (a virtualenv by any name)
    "dependency_dir": ("node_modules/", "bower_components/", "jspm_packages/", ".venv/",
                       "site-packages/"),
    # "build/" and "target/" are guarded: skipped only when they look like outputs
    "build_output": (
        "build/", "target/", "dist/", "_build/", "__pycache__/", ".tox/", ".nox/", ".eggs/",
        ".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".hypothesis/", "htmlcov/",
        ".ipynb_checkpoints/", ".next/", ".nuxt/", ".svelte-kit/", ".parcel-cache/",
        ".gradle/",
    ),
    "minified": ("*.min.js", "*.min.mjs", "*.min.css", "*.bundle.js", "*.js.map",
                 "*.css.map"),
}
#: the default ``exclude=`` list of :func:`walk_corpus`, in :data:`EXCLUDE_GROUPS` order.
DEFAULT_EXCLUDES: tuple[str, ...] = tuple(p for ps in EXCLUDE_GROUPS.values() for p in ps)
_REASON_OF = {p: reason for reason, ps in EXCLUDE_GROUPS.items() for p in ps}
_GUARDED_DIRS = {"build/", "target/"}
# a child of build/ or target/ that only a build tool leaves there
_OUTPUT_MARKERS = {"CACHEDIR.TAG", ".rustc_info.json", "CMakeCache.txt", "CMakeFiles",
                   "build.ninja", ".ninja_log", "classes", "generated-sources", "maven-status",
                   "maven-archiver", "intermediates", "tmp"}
_OUTPUT_MARKER_PREFIXES = ("bdist.", "temp.", "lib.", "scripts-")

#: minified-text heuristic: a file of at least MINIFIED_MIN_BYTES whose average line length
#: (bytes / lines) exceeds MINIFIED_AVG_LINE_CODE for .js/.mjs/.cjs/.css, or
#: MINIFIED_AVG_LINE_ANY for any other non-documentation text file.
MINIFIED_MIN_BYTES = 1024
MINIFIED_AVG_LINE_CODE = 300
MINIFIED_AVG_LINE_ANY = 1000
_MINIFIABLE_SUFFIXES = {".js", ".mjs", ".cjs", ".css"}

#: the reasons :meth:`WalkStats.as_dict` always reports (``files_skipped_<reason>``).
SKIP_REASONS = ("git_dir", "gitignored", "dotignore", "rgignore", *EXCLUDE_GROUPS, "excluded",
                "not_regular", "too_large", "unreadable", "secret", "binary", "bad_filename",
                "not_code")


@dataclass(frozen=True)
class Document:
    """One file of the corpus.

    Attributes:
        path: POSIX path relative to the corpus root, e.g. ``src/flask/app.py``.
        category: one of :data:`CATEGORIES`.
        text: the file decoded as UTF-8 (bad bytes replaced by U+FFFD).
        size: size on disk in bytes.
        replaced_bytes: True when decoding had to replace invalid bytes.
    """

    path: str
    category: str
    text: str
    size: int
    replaced_bytes: bool = False


@dataclass
class WalkStats:
    """Counts of what the walk kept and skipped; ``skipped`` maps reason -> file count.

    ``secrets`` lists ``(path, kind)`` of every file skipped as a secret (never its content);
    ``redacted`` counts the secret literals replaced by a marker in the files that were
    indexed, per kind (:data:`rag.corpus.secrets.REDACTION_KINDS`), ``files_redacted`` the
    files (or other documents) that held one and ``redactions`` lists ``(path, kinds)`` of
    each (never a value); ``listing`` is ``"git"`` when git listed the files,
    ``"filesystem"`` otherwise.
    """

    files_indexed: int = 0
    bytes_indexed: int = 0
    skipped: Counter = field(default_factory=Counter)
    decoded_with_replacement: int = 0
    by_category: Counter = field(default_factory=Counter)
    secrets: list = field(default_factory=list)
    listing: str = ""
    redacted: Counter = field(default_factory=Counter)
    files_redacted: int = 0
    redactions: list = field(default_factory=list)

    def note_redacted(self, path: str, found: Counter) -> None:
        """Count the literals ``found`` (kind -> number) redacted in the document ``path``."""
        self.redacted.update(found)
        self.files_redacted += 1
        self.redactions.append((path, tuple(sorted(found))))

    def as_dict(self) -> dict:
        """Plain-dict form for logging (``skipped_<reason>`` keys)."""
        out = {
            "files_indexed": self.files_indexed,
            "bytes_indexed": self.bytes_indexed,
            "files_decoded_with_replacement": self.decoded_with_replacement,
            "walk_listing": self.listing,
        }
        for reason in SKIP_REASONS:
            out[f"files_skipped_{reason}"] = self.skipped.get(reason, 0)
        for reason in sorted(set(self.skipped) - set(SKIP_REASONS)):
            out[f"files_skipped_{reason}"] = self.skipped[reason]
        for cat in CATEGORIES:
            out[f"files_{cat}"] = self.by_category.get(cat, 0)
        out["files_redacted"] = self.files_redacted
        out["secrets_redacted"] = sum(self.redacted.values())
        for kind in REDACTION_KINDS:
            out[f"secrets_redacted_{kind}"] = self.redacted.get(kind, 0)
        return out


def categorize(path: str) -> str:
    """Category of a corpus-relative POSIX path (see :data:`CATEGORIES`).

    Order matters: example beats test (``examples/tutorial/tests/test_auth.py`` is example
    code), test beats source, and named config files beat their suffix.

    A test is a file under a directory :data:`_TEST_DIRS` names (``tests/``, ``test/``,
    ``testing/``, ``spec/``, ``__tests__/``, ``__mocks__/``; Java's ``src/test/`` and Rust's
    ``tests/`` among them) or a .NET test project (``MyLib.Tests/``); a ``test_*`` file; a
    source file ``*_test.*`` (Python, Go ``uuid_test.go``, C++ ``foo_test.cc``, Ruby minitest)
    or ``*_spec.rb`` (RSpec); a JS/TS ``*.test.*``, ``*.spec.*`` or ``*.test-d.*`` (``.ts``,
    ``.tsx``, ``.js``, ``.jsx``, ``.mjs``, ``.cjs``, ``.mts``, ``.cts``); a PHPUnit, xUnit,
    JUnit or XCTest class file ``FooTest.php``, ``FooTests.cs``, ``FooTest.java``,
    ``FooTests.swift``.
    """
    p = PurePosixPath(path)
    parts = [s.lower() for s in p.parts[:-1]]
    name = p.name.lower()
    suffix = p.suffix.lower()
    stem = name[:-len(suffix)] if suffix else name
    if any(s in ("examples", "example") for s in parts):
        return "example"
    if name in _CONFIG_NAMES or suffix in _CONFIG_SUFFIXES or name.startswith("requirements"):
        return "config"
    if any(s in _TEST_DIRS or _TEST_PROJECT.search(s) for s in parts) \
            or name.startswith("test_") or name.endswith("_test.py") \
            or (suffix in SOURCE_SUFFIXES and stem.endswith("_test")) \
            or name.endswith("_spec.rb") or _TEST_NAME.search(p.name):
        return "test"
    if suffix in _DOC_SUFFIXES or p.stem.lower() in _DOC_STEMS or any(s in ("docs", "doc") for s in parts):
        return "documentation"
    if suffix in SOURCE_SUFFIXES:
        return "source"
    return "other"


def _valid_patterns(lines: Iterable[str]) -> list[str]:
    """The lines git would use as patterns: no blank or comment line, and none git ignores as
    invalid (``!`` alone, a trailing backslash, a bad range such as ``[z-a]``)."""
    good = []
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        try:
            spec = pathspec.GitIgnoreSpec.from_lines([line])
            spec.match_file("probe")  # compiles the pattern's regex
        except Exception:  # noqa: BLE001 - pathspec raises several error types
            continue
        good.append(line)
    return good


def _gitignore_spec(lines: list[str]) -> pathspec.GitIgnoreSpec:
    """A spec from .gitignore lines, dropping any line git would ignore as invalid."""
    return pathspec.GitIgnoreSpec.from_lines(_valid_patterns(lines))


def _any_match(spec: pathspec.GitIgnoreSpec) -> re.Pattern | None:
    """One regex matching wherever some non-negated pattern of ``spec`` matches (a cheap
    pre-check before ``check_file``), or None when a pattern has no plain regex."""
    parts = []
    for pat in spec.patterns:
        if pat.include is None:
            continue
        regex = getattr(pat, "regex", None)
        if regex is None or not hasattr(regex, "pattern"):
            return None
        if pat.include:
            parts.append(re.sub(r"\(\?P<[A-Za-z_]+>", "(", regex.pattern))
    try:
        return re.compile("|".join(f"(?:{x})" for x in parts) or "(?!)")
    except re.error:
        return None


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head[:BINARY_SNIFF_BYTES]


# --------------------------------------------------------------------------- secrets

_PEM_BEGIN = re.compile(rb"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(rb"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
#: how far after a BEGIN line key material is looked for (lines, and bytes)
PEM_WINDOW_LINES = 100
_PEM_WINDOW_BYTES = 65536
# line breaks spelled out inside the text: \n escapes (also doubled: JSON inside JSON), HTML
# <br> and &#10;, SQL '||chr(10)||' and T-SQL '+CHAR(10)+' joins
_PEM_BREAKS = re.compile(
    rb"\\+[nr]|<br\s*/?>|&#(?:10|13|x0?[aAdD]);"
    rb"|(?i:(?:\|\||\+|&)\s*n?(?:chr|char)\s*\(\s*1[03]\s*\)\s*(?:\|\||\+|&)?)")
# what decorates a key's lines: comment and quote prefixes (# // /* * > ;; -- | % ! REM),
# string quotes and concatenation, HTML tags, and their closing counterparts
_PEM_HEAD = re.compile(
    rb"^(?:\s|[#*>;|%!'\"`(\[{,&]|//|/\*+|--|<!--|<[A-Za-z/!][^>]*>|\\"
    rb"|[+.](?=[\s'\"`])|(?i:rem|dnl)\s)+")
_PEM_TAIL = re.compile(
    rb"(?:\s|[,;|)\]}'\"`\\*&+.]|\*/|-->|<[A-Za-z/!][^>]*>)+$")
_PEM_HEADER = re.compile(rb"^[A-Za-z][A-Za-z0-9-]*:\s*\S")  # Proc-Type:, DEK-Info:, Version:
_PEM_LINE = re.compile(rb"^[A-Za-z0-9+/]+={0,3}$")
_PEM_TOKEN = re.compile(rb"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{16,}={0,3}")
_PEM_MIN_BASE64 = 40  # real keys carry hundreds; "MIIE...": a documentation stub, not a key
_PUTTY_KEY = re.compile(rb"^PuTTY-User-Key-File-[0-9]+: ", re.M)
_PUTTY_PRIVATE = re.compile(rb"^Private-Lines: [0-9]+", re.M)
_SSH_KEY_NAMES = {"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk",
                  "identity"}
_KEYSTORE_SUFFIXES = {".jks", ".keystore", ".p12", ".pfx", ".jceks", ".bks", ".ppk"}
_ENV_LINE = re.compile(
    r"^\s*(?:export\s+|\{\s*)?([\"']?)([A-Za-z_][A-Za-z0-9_.\-]*)\1\s*[=:]\s*(.*?)\s*,?\s*$")
_CRED_NAME = re.compile(
    r"KEY|SECRET|TOKEN|PASSW(?:OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE"
    r"|(?:^|[_.\-])(?:PASS|PWD|AUTH|DSN)(?:[_.\-]|$)")
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://([^/\s:@\"'<>]*):([^/\s@\"'<>]+)@")
# AWS: a secret access key is 40 characters of base64; an access key id AKIA/ASIA + 16
_AWS_SECRET = re.compile(
    r"(?i:aws_?secret_?(?:access_?)?key|secret_?access_?key)[\"']?\s*[=:]\s*[\"']?"
    r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")
_AWS_KEY_ID = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])")
_AWS_SECRET_LIKE = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_AWS_PAIR_CHARS = 1000  # an access key id and a secret this close are a pair
# npm: "//registry.example/:_authToken=..." in any file; bare _auth... in .npmrc/.yarnrc
_NPM_SCOPED = re.compile(r"//[^\s:=]*:_(?:authToken|auth|password)\s*=\s*[\"']?([^\s#;`\"']*)")
_NPM_BARE = re.compile(r"^\s*(?:_authToken|_auth|_password|npmAuthToken|npmAuthIdent)"
                       r"\s*[=:]\s*(.*?)\s*$", re.M)
# docker config.json: "auths": {"host": {"auth": "<base64 of user:password>"}}
_DOCKER_AUTH = re.compile(r"\"(auth|identitytoken)\"\s*:\s*\"([^\"]*)\"")
_CONFIG_SUFFIXES_FOR_URLS = {".ini", ".cfg", ".conf", ".toml", ".yaml", ".yml", ".json",
                             ".properties", ".tfvars", ".hcl"}
_CONFIG_NAMES_FOR_URLS = {"config", ".gitconfig", "gitconfig", ".npmrc", "npmrc", ".yarnrc",
                          ".pypirc", ".pgpass", "pgpass", "dockerfile", ".boto", ".s3cfg"}


def _decode(data: bytes) -> str:
    """``data`` as UTF-8 text without a byte-order mark (a BOM must not hide a first line)."""
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def _strip_value(raw: str) -> str:
    """An env/INI value without surrounding quotes or a trailing `` # comment``."""
    v = raw.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        return v[1:-1].strip()
    if v[:1] in "\"'":  # an opening quote without its closing one: keep what follows it
        return v[1:].strip()
    return re.split(r"\s+#", v, maxsplit=1)[0].strip()


def _url_has_password(text: str) -> bool:
    """A ``scheme://user:password@host`` URL whose password is not a placeholder (nor the
    user name again: ``postgres://postgres:postgres@localhost`` is a CI default)."""
    if "://" not in text:
        return False
    for m in _URL_PASSWORD.finditer(text):
        user, pw = m.group(1), m.group(2)
        if pw != user and not _is_placeholder(pw):
            return True
    return False


def has_private_key_block(data: bytes) -> bool:
    """True when ``data`` holds a private key: a ``-----BEGIN ... PRIVATE KEY-----`` marker
    (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP ... or plain PKCS#8) followed, within
    :data:`PEM_WINDOW_LINES` lines, by key material, or a PuTTY private key file.

    Key material is a run of lines that are base64 once their decoration is stripped —
    comment and quote prefixes (``#``, ``//``, `` * ``, ``>``, ``;;``, ``--``, ``|``, ``%``),
    string quotes, ``+``/``.``/``||`` concatenation, ``\\n`` escapes, HTML ``<br>``, SQL
    ``'||chr(10)||'`` joins — holding at least :data:`_PEM_MIN_BASE64` base64 characters, in
    a line of 24 or more; or, when the matching END marker comes within the window,
    base64 words of 16+ characters between the two markers adding up to as much. So a
    documentation stub (``MIIE...``) and code that merely names the markers are not keys."""
    if b"PuTTY-User-Key-File-" in data and _PUTTY_KEY.search(data) \
            and _PUTTY_PRIVATE.search(data):
        return True
    if b"PRIVATE KEY" not in data:
        return False
    for m in _PEM_BEGIN.finditer(data):
        window = _PEM_BREAKS.sub(b"\n", data[m.end():m.end() + _PEM_WINDOW_BYTES])
        lines = window.split(b"\n", PEM_WINDOW_LINES + 1)[:PEM_WINDOW_LINES + 1]
        run, between, ended = [], [], False
        for line in lines:
            end = _PEM_END.search(line)
            if end is not None:
                line, ended = line[:end.start()], True
            between.append(line)
            core = _PEM_TAIL.sub(b"", _PEM_HEAD.sub(b"", line))
            if _PEM_LINE.match(core):
                run.append(core)
            elif core and not (_PEM_HEADER.match(core) and not run):
                if _is_key_material(run):
                    return True
                run = []
            if ended:
                break
        if _is_key_material(run):
            return True
        if ended:
            tokens = _PEM_TOKEN.findall(b"\n".join(between))
            if _is_key_material(tokens):
                return True
    return False


def _is_key_material(parts: list[bytes]) -> bool:
    """At least :data:`_PEM_MIN_BASE64` base64 characters, one line (or word) of 24 or more:
    a key's lines are 64 characters long; code lines that are one bare word are short."""
    return (sum(len(p.rstrip(b"=")) for p in parts) >= _PEM_MIN_BASE64
            and any(len(p) >= 24 for p in parts))


def _env_has_credentials(text: str) -> bool:
    """A variable named like a credential (KEY, SECRET, TOKEN, PASSWORD, ...) with a value that
    is not a placeholder, or any value that is a URL with a password in it."""
    for line in text.lstrip("\ufeff").splitlines():
        m = _ENV_LINE.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        name, value = m.group(2).upper(), _strip_value(m.group(3))
        if "://" in value:  # a URL: secret when it carries a password
            if _url_has_password(value):
                return True
        elif _CRED_NAME.search(name) and not _is_placeholder(value):
            return True
    return False


def _ini_value_set(text: str, keys: tuple[str, ...]) -> bool:
    """An INI-style ``key = value`` line for one of ``keys`` whose value is not a placeholder."""
    for line in text.lstrip("\ufeff").splitlines():
        m = _ENV_LINE.match(line)
        if m and m.group(2).lower() in keys and not _is_placeholder(_strip_value(m.group(3))):
            return True
    return False


def _pgpass_has_password(text: str) -> bool:
    """A ``host:port:database:user:password`` line (``\\:`` escapes a colon) with a password."""
    for line in text.lstrip("\ufeff").splitlines():
        if line.lstrip().startswith("#"):
            continue
        fields = re.split(r"(?<!\\):", line.strip())
        if len(fields) == 5 and not _is_placeholder(fields[4].strip()):
            return True
    return False


def _aws_secret(text: str) -> bool:
    """An AWS secret access key: assigned to ``aws_secret_access_key`` (any spelling:
    ``AWS_SECRET_ACCESS_KEY=``, ``"SecretAccessKey": ...``), or an ``AKIA``/``ASIA`` access key
    id with a 40-character secret-like word near it. AWS's documentation keys
    (``...EXAMPLE...``) are placeholders."""
    if "ecret" not in text and "ECRET" not in text and "AKIA" not in text and "ASIA" not in text:
        return False
    for m in _AWS_SECRET.finditer(text):
        if _secret_like(m.group(1)):
            return True
    for m in _AWS_KEY_ID.finditer(text):
        if "EXAMPLE" in m.group(0):
            continue
        near = text[max(0, m.start() - _AWS_PAIR_CHARS):m.end() + _AWS_PAIR_CHARS]
        if any(_secret_like(s) for s in _AWS_SECRET_LIKE.findall(near)):
            return True
    return False


def _secret_like(value: str) -> bool:
    """A random-looking 40-character AWS secret: not a placeholder, not hex (a git SHA-1), with
    lower and upper case letters and a digit, ``+`` or ``/``."""
    return (not _is_placeholder(value) and "example" not in value.lower()
            and not re.fullmatch(r"[0-9a-fA-F]+", value)
            and re.search(r"[a-z]", value) is not None and re.search(r"[A-Z]", value) is not None
            and re.search(r"[0-9+/]", value) is not None)


def _npm_token(text: str, npmrc: bool) -> bool:
    """An npm registry credential: ``//host/:_authToken=...`` (``_auth``, ``_password``) in any
    file, or a bare ``_authToken``/``_auth``/``_password``/``npmAuthToken`` in an ``.npmrc`` or
    ``.yarnrc``, with a value that is not a placeholder (``${NPM_TOKEN}``)."""
    values = [m.group(1) for m in _NPM_SCOPED.finditer(text)] if ":_" in text else []
    if npmrc:
        values += [m.group(1) for m in _NPM_BARE.finditer(text)]
    return any(not _is_placeholder(_strip_value(v)) for v in values)


def _docker_auth(text: str) -> bool:
    """A docker ``config.json``-style ``"auths"`` object with an ``"auth"`` that decodes to
    ``user:password`` (password not a placeholder) or a non-empty ``"identitytoken"``."""
    if "\"auths\"" not in text:
        return False
    import base64
    import binascii

    for m in _DOCKER_AUTH.finditer(text):
        kind, value = m.group(1), m.group(2).strip()
        if kind == "identitytoken":
            if not _is_placeholder(value):
                return True
            continue
        try:
            raw = base64.b64decode(value, validate=True).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            continue
        user, colon, pw = raw.partition(":")
        if colon and pw != user and not _is_placeholder(pw):
            return True
    return False


def _is_env_name(name: str) -> bool:
    """``.env``, ``.envrc``, ``.env.local``, ``.env-local``, ``.env_prod``, ``prod.env``,
    ``env.json`` / ``env.yaml`` / ``env.yml`` / ``env.toml`` (lower-cased names)."""
    return (name in (".env", ".envrc", "env.json", "env.yaml", "env.yml", "env.toml")
            or name.startswith((".env.", ".env-", ".env_")) or name.endswith(".env"))


def _is_config_name(name: str, suffix: str) -> bool:
    """Config-like files, where a URL with a password is a secret (lower-cased name)."""
    return (suffix in _CONFIG_SUFFIXES_FOR_URLS or name in _CONFIG_NAMES_FOR_URLS
            or name.startswith("requirements") or name.endswith(".npmrc")
            or _is_env_name(name))


def secret_name_rule(path: str) -> str | None:
    """The rule of :func:`secret_kind` that a file's *name* alone brings into play, or None:
    ``keystore``, ``ssh_key``, ``netrc``, ``git_credentials`` (a secret whatever the content),
    ``env``, ``pypirc``, ``aws``, ``pgpass``, ``npmrc`` (the content is checked for that kind of
    credential) or ``config`` (checked for a URL with a password). Whatever the name, the
    content checks of :func:`content_secret_kind` apply too. Code that writes files under
    names of its choosing (BEIR conversion) keeps this None for names that are not paths."""
    p = PurePosixPath(path)
    name, suffix = p.name.lower(), p.suffix.lower()
    if suffix in _KEYSTORE_SUFFIXES:
        return "keystore"
    if p.name in _SSH_KEY_NAMES:
        return "ssh_key"
    if name in (".netrc", "_netrc"):
        return "netrc"
    if name == ".git-credentials":
        return "git_credentials"
    if _is_env_name(name):
        return "env"
    if name == ".pypirc":
        return "pypirc"
    if name == "credentials" or ".aws" in p.parts[:-1]:
        return "aws"
    if name in (".pgpass", "pgpass", "pgpass.conf") or name.endswith(".pgpass"):
        return "pgpass"
    if name in (".npmrc", "npmrc", ".yarnrc", ".yarnrc.yml") or name.endswith(".npmrc"):
        return "npmrc"
    if _is_config_name(name, suffix):
        return "config"
    return None


def content_secret_kind(data: bytes | str) -> str | None:
    """The kind of secret a text holds whatever its file's name, or None: ``private_key``
    (:func:`has_private_key_block`), ``aws_credentials`` (an AWS secret access key, see
    :func:`_aws_secret`), ``npm_token`` (``//registry/:_authToken=...``), ``docker_auth``
    (a docker ``config.json`` ``"auths"`` entry with a password). Used for files and for
    documents that are not files (GitHub issues, BEIR documents)."""
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogatepass")
    if has_private_key_block(data):
        return "private_key"
    if _is_binary(data):
        return None
    text = _decode(data)
    if _aws_secret(text):
        return "aws_credentials"
    if _npm_token(text, npmrc=False):
        return "npm_token"
    if _docker_auth(text):
        return "docker_auth"
    return None


def secret_kind(path: str, data: bytes) -> str | None:
    """The kind of secret a file holds, or None. ``path`` is corpus-relative (POSIX).

    By name, whatever the content:

    * ``keystore``: ``*.jks``, ``*.keystore``, ``*.p12``, ``*.pfx``, ``*.jceks``, ``*.bks``,
      ``*.ppk``;
    * ``ssh_key``: ``id_rsa``, ``id_dsa``, ``id_ecdsa``, ``id_ed25519`` (and ``_sk``),
      ``identity`` (``id_rsa.pub`` is a public key and is kept);
    * ``netrc`` (``.netrc``, ``_netrc``) and ``git_credentials`` (``.git-credentials``).

    By content, in any text file (:func:`content_secret_kind`): ``private_key``,
    ``aws_credentials`` (an AWS secret access key), ``npm_token``, ``docker_auth``.

    By content, in files of some names (:func:`secret_name_rule`):

    * ``env_credentials``: ``.env``, ``.env.*``, ``.env-*``, ``.env_*``, ``*.env``, ``.envrc``,
      ``env.json``/``env.yaml`` with a variable named like a credential (``*KEY*``,
      ``*SECRET*``, ``*TOKEN*``, ``*PASSWORD*``, ``*PASSWD*``, ``*CREDENTIAL*``, ``*PRIVATE*``,
      ``*PASSPHRASE*``, or a ``PASS``/``PWD``/``AUTH``/``DSN`` word) whose value is not empty
      or a placeholder (:func:`_is_placeholder`), or a URL with a password. So
      ``.env.example`` with ``API_KEY=`` is kept, with ``API_KEY=abc`` it is skipped — the
      same rule for every name;
    * ``pypirc_password``: ``.pypirc`` with a ``password`` value;
    * ``aws_credentials``: a file named ``credentials`` (or any file under ``.aws/``) with an
      ``aws_secret_access_key``/``aws_session_token``/``aws_access_key_id`` value;
    * ``pgpass``: ``.pgpass`` with a ``host:port:db:user:password`` line;
    * ``npm_token``: ``.npmrc``/``.yarnrc`` with an ``_authToken``/``_auth``/``_password``;
    * ``url_password``: a config-like file (``*.ini``, ``*.cfg``, ``*.conf``, ``*.toml``,
      ``*.yaml``, ``*.json``, ``*.properties``, ``config``, ``.gitconfig``, ``requirements*``,
      ``Dockerfile``, ...) holding ``scheme://user:password@host`` whose password is not a
      placeholder nor the user name again.

    A UTF-8 byte-order mark is ignored.
    """
    rule = secret_name_rule(path)
    if rule in ("keystore", "ssh_key", "netrc", "git_credentials"):
        return rule
    if has_private_key_block(data):
        return "private_key"
    if _is_binary(data):
        return None
    text = _decode(data)
    if rule == "env":
        if _env_has_credentials(text):
            return "env_credentials"
    elif rule == "pypirc":
        if _ini_value_set(text, ("password",)):
            return "pypirc_password"
    elif rule == "aws":
        if _ini_value_set(text,
                          ("aws_secret_access_key", "aws_session_token", "aws_access_key_id")):
            return "aws_credentials"
    elif rule == "pgpass":
        if _pgpass_has_password(text):
            return "pgpass"
    if _aws_secret(text):
        return "aws_credentials"
    if _npm_token(text, npmrc=rule == "npmrc"):
        return "npm_token"
    if _docker_auth(text):
        return "docker_auth"
    if rule is not None and rule != "env" and _url_has_password(text):
        return "url_password"
    return None


def redact_document_text(path: str, text: str, stats: WalkStats | None = None) -> str:
    """``text`` of the document ``path`` with its secret literals replaced by
    ``[REDACTED:<kind>]`` (:func:`rag.corpus.secrets.redact_secrets`), counted in ``stats``
    and logged by path and kinds (never a value). The one place text enters the index."""
    text, found = redact_secrets(text, literal_values=has_literal_values(path))
    if found:
        if stats is not None:
            stats.note_redacted(path, found)
        logger.info("secret literal(s) redacted (%s): %s",
                    ", ".join(f"{k} x{n}" for k, n in sorted(found.items())), path)
    return text


def describe_redactions(stats: dict) -> str | None:
    """One line for ``rag run`` and ``rag index`` output from flat walk stats
    (:meth:`WalkStats.as_dict`): how many secret literals were replaced by a marker, in how
    many files, per kind — ``secret literals redacted: 3 in 2 file(s) (github_token 2,
    password 1)`` — or None when there were none."""
    n = int(stats.get("secrets_redacted") or 0)
    if not n:
        return None
    kinds = ", ".join(f"{k} {stats[f'secrets_redacted_{k}']}" for k in REDACTION_KINDS
                      if stats.get(f"secrets_redacted_{k}"))
    return (f"secret literals redacted: {n} in {stats.get('files_redacted', 0)} file(s) "
            f"({kinds}); each replaced by [REDACTED:<kind>], the rest of the file indexed")


def drop_secret_documents(docs: list[Document], stats: WalkStats | None = None,
                          index_secrets: bool = False) -> list[Document]:
    """``docs`` that are not files of the corpus (GitHub issues and pull requests) without
    those whose text holds a secret (:func:`content_secret_kind`: key blocks, AWS, npm and
    docker credentials), each counted as ``secret`` in ``stats`` like a file the walk skips
    (path and kind logged, never the content), and with the secret literals of the others
    redacted as a file's are (:func:`redact_document_text`). ``index_secrets=True`` keeps
    them all as they are."""
    if index_secrets:
        return list(docs)
    kept, dropped = [], []
    for d in docs:
        kind = content_secret_kind(d.text)
        if kind is None:
            text = redact_document_text(d.path, d.text, stats)
            kept.append(d if text is d.text else replace(d, text=text))
            continue
        dropped.append((d.path, kind))
        if stats is not None:
            stats.skipped["secret"] += 1
            stats.secrets.append((d.path, kind))
    if dropped:
        shown = ", ".join(f"{p} ({k})" for p, k in dropped[:10])
        more = f" and {len(dropped) - 10} more" if len(dropped) > 10 else ""
        logger.warning("%d extra document(s) look like secrets and were not indexed: %s%s",
                       len(dropped), shown, more)
    return kept


def looks_minified(path: str, data: bytes) -> bool:
    """Minified or machine-generated one-line text: at least :data:`MINIFIED_MIN_BYTES`, and
    an average line length over :data:`MINIFIED_AVG_LINE_CODE` characters for ``.js``,
    ``.mjs``, ``.cjs``, ``.css``, or over :data:`MINIFIED_AVG_LINE_ANY` for any other file
    that is not documentation (``.md``, ``.rst``, ``.txt``, ... may hold one paragraph per
    line). Measured over this project's virtualenv (37,038 text files): hand-written files
    average 36 characters a line (99th percentile 123); minified bundles average thousands."""
    if len(data) < MINIFIED_MIN_BYTES:
        return False
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in _DOC_SUFFIXES:
        return False
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    avg = len(data) / lines
    return avg > (MINIFIED_AVG_LINE_CODE if suffix in _MINIFIABLE_SUFFIXES
                  else MINIFIED_AVG_LINE_ANY)


# --------------------------------------------------------------------------- git listing

_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
                 "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE",
                 "GIT_PREFIX")


def _git(args: list[str], cwd: Path) -> bytes | None:
    """stdout of ``git ARGS`` run in ``cwd``, or None when git is missing or fails. The
    variables that would point git at another repository are dropped, so the corpus
    directory alone decides which repository is asked."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    env["GIT_OPTIONAL_LOCKS"] = "0"
    try:
        p = subprocess.run(["git", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def _split_z(out: bytes) -> list[str]:
    return [os.fsdecode(e) for e in out.split(b"\0") if e]


@dataclass
class _GitView:
    """What git lists under the corpus root (paths relative to the root)."""

    top: Path
    listed: set = field(default_factory=set)        # files: tracked + untracked, not ignored
    tracked_dirs: set = field(default_factory=set)  # directories holding a tracked file
    ignored_dirs: set = field(default_factory=set)  # directories git ignores as a whole
    fallback: list = field(default_factory=list)    # nested repos git could not list
    raw: list = field(default_factory=list)         # the listings, for listing_key()
    root_ignored: bool = False

    def fallback_dir(self, rel: str) -> str | None:
        for f in self.fallback:
            if rel == f or rel.startswith(f + "/"):
                return f
        return None


def _list_into(view: _GitView, directory: Path, prefix: str) -> bool:
    tracked = _git(["ls-files", "-z", "-c"], directory)
    untracked = _git(["ls-files", "-z", "-o", "--exclude-standard"], directory)
    ignored = _git(["ls-files", "-z", "-o", "-i", "--exclude-standard", "--directory"],
                   directory)
    if tracked is None or untracked is None or ignored is None:
        return False
    view.raw += [prefix.encode("utf-8", "surrogateescape"), tracked, untracked, ignored]
    nested = []
    for e in _split_z(tracked):
        full = directory / e
        if full.is_dir() and not full.is_symlink():  # a submodule (gitlink)
            nested.append(e.rstrip("/"))
            continue
        view.listed.add(prefix + e)
        parts = (prefix + e).split("/")
        for i in range(len(parts)):
            view.tracked_dirs.add("/".join(parts[:i]))
    for e in _split_z(untracked):
        if e.endswith("/"):  # an untracked nested repository
            nested.append(e.rstrip("/"))
        else:
            view.listed.add(prefix + e)
    for e in _split_z(ignored):
        if e == "./":
            if not prefix:
                view.root_ignored = True
        elif e.endswith("/"):
            view.ignored_dirs.add(prefix + e.rstrip("/"))
    for sub in nested:
        if not (directory / sub / ".git").exists():
            continue  # an uninitialised submodule: nothing on disk to list
        if not _list_into(view, directory / sub, f"{prefix}{sub}/"):
            view.fallback.append(prefix + sub)
    return True


def _git_view(root: Path) -> _GitView | None:
    top = _git(["rev-parse", "--show-toplevel"], root)
    if not top or not top.strip():
        return None
    view = _GitView(top=Path(os.fsdecode(top.rstrip(b"\r\n"))))
    if not _list_into(view, root, "") or view.root_ignored:
        return None
    return view


def listing_key(root: Path) -> str:
    """A digest of what git lists under ``root`` (tracked, untracked and ignored paths, nested
    repositories included) plus the ``.ignore``/``.rgignore`` files between the work tree's
    top and ``root``; ``""`` outside git. A stat fingerprint of the corpus that skips ``.git``
    misses changes to ``.git/info/exclude``, ``core.excludesFile`` or what is tracked; mixing
    this key into it catches them."""
    root = Path(root)
    view = _git_view(root) if root.is_dir() else None
    if view is None:
        return ""
    h = hashlib.sha256()
    for part in view.raw:
        h.update(hashlib.sha256(part).digest())
    for d in _ancestors_below(view.top, root):
        for name in (".ignore", ".rgignore"):
            try:
                h.update(name.encode() + (d / name).read_bytes())
            except OSError:
                pass
    return h.hexdigest()


def _ancestors_below(top: Path, root: Path) -> list[Path]:
    """The directories from ``top`` down to ``root``'s parent (empty when root is top)."""
    try:
        rel = root.resolve().relative_to(top.resolve())
    except ValueError:
        return []
    out, cur = [], top
    for part in rel.parts[:-1] if rel.parts else []:
        out.append(cur)
        cur = cur / part
    if rel.parts:
        out.append(cur)
    return out


# --------------------------------------------------------------------------- the walk


def _decide(specs: dict, path: str, is_dir: bool, floor: str | None = None) -> bool | None:
    """Deepest spec with a matching pattern decides (True: ignore, False: whitelisted).
    ``specs`` maps a directory (anchor-relative, "" for the anchor) to its spec; with
    ``floor``, specs above that directory are not consulted."""
    parts = path.split("/")
    for i in range(len(parts) - 1, -1, -1):
        base = "/".join(parts[:i])
        spec = specs.get(base)
        if spec is not None:
            sub = "/".join(parts[i:])
            verdict = spec.check_file(sub + "/" if is_dir else sub).include
            if verdict is not None:
                return bool(verdict)
        if floor is not None and base == floor:
            break
    return None


def _read_spec(path: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return _gitignore_spec(lines)


def _looks_like_output(abs_dir: Path, rel: str, view: _GitView | None, root: Path) -> bool:
    """Whether a ``build/`` or ``target/`` directory is a build output rather than source.

    In a git work tree: when git tracks nothing under it (projects commit sources, not
    outputs; Kubernetes' ``build/`` scripts and a Java package named ``target`` are tracked).
    Outside git: when it holds something only a build tool leaves there (:data:`_OUTPUT_MARKERS`,
    ``bdist.*``/``temp.*``/``lib.*`` from setuptools, or a ``lib/`` whose entries repeat a
    package of the root or ``src/``: setuptools' copy of the sources)."""
    if view is not None and view.fallback_dir(rel) is None:
        return rel not in view.tracked_dirs
    try:
        children = os.listdir(abs_dir)
    except OSError:
        return False
    for c in children:
        if c in _OUTPUT_MARKERS or c.startswith(_OUTPUT_MARKER_PREFIXES):
            return True
    if "lib" in children:
        try:
            built = set(os.listdir(abs_dir / "lib"))
        except OSError:
            built = set()
        sources = set()
        for d in (root, root / "src"):
            try:
                sources |= set(os.listdir(d))
            except OSError:
                pass
        if built & (sources - {"lib", "build", "target"}):
            return True
    return False


def walk_corpus(root: Path, *, max_file_bytes: int = 1_000_000,
                stats: WalkStats | None = None, exclude: Iterable[str] | None = None,
                include: Iterable[str] | None = (), index_secrets: bool = False,
                use_git: bool = True, content: str = "all") -> Iterator[Document]:
    """Yield the corpus's text files in a deterministic order (top-down: each directory's files
    sorted by name, then its subdirectories sorted by name).

    Rules and skip reasons are in the module docstring. A file is counted under the first
    rule that skips it: ``bad_filename`` (a name that is not valid UTF-8), ``git_dir``,
    ignore files (``rgignore``, ``dotignore``, ``gitignored``), ``exclude`` (the reason of
    the pattern: ``lock_file``, ``package_metadata``, ``dependency_dir``, ``build_output``,
    ``minified``; ``excluded`` for a pattern not in :data:`DEFAULT_EXCLUDES`),
    ``not_code`` (``content="code"``: a suffix not in :data:`SOURCE_SUFFIXES`),
    ``not_regular``, ``too_large``, ``unreadable``, ``secret``, ``binary``, ``minified`` (the
    average-line-length heuristic). A skipped directory counts once.

    ``build/`` and ``target/`` (when in ``exclude``) are skipped only when they are build
    outputs: in a git work tree when git tracks nothing under them, outside git when they hold
    a build tool's traces (see :func:`_looks_like_output`); ``.venv/`` (when in ``exclude``)
    also skips any directory holding a ``pyvenv.cfg``.

    Args:
        root: corpus directory.
        max_file_bytes: size cap in bytes.
        stats: filled in place if given.
        exclude: gitignore patterns (relative to ``root``) not to index; None means
            :data:`DEFAULT_EXCLUDES`, ``[]`` excludes nothing. A built-in pattern keeps its
            reason; any other counts as ``excluded``.
        include: gitignore patterns re-allowed: a path they match is exempt from ``exclude``,
            the ``build/``/``target/``/virtualenv rules and the minified heuristic (to reach a
            path inside an excluded directory, include the directory too). They do not
            override ignore files (use ``!pattern`` in a ``.ignore`` for that) or secrets.
        index_secrets: index files that :func:`secret_kind` classifies as secrets, and the
            secret literals of the others unredacted (off by default; turn on only for a
            corpus that never leaves your machine).
        use_git: list files with git when the root is in a work tree (False: the
            ``.gitignore`` walk everywhere).
        content: :data:`CONTENT_SCOPES`: ``all``, or ``code`` (source files only, by suffix;
            an ``include`` pattern does not bring back another file).

    Raises:
        FileNotFoundError: ``root`` is not a directory.
        ValueError: ``content`` is not one of :data:`CONTENT_SCOPES`.
    """
    root = Path(root)
    if content not in CONTENT_SCOPES:
        raise ValueError(f"corpus.content must be one of {list(CONTENT_SCOPES)}, got "
                         f"{content!r}")
    if not root.is_dir():
        raise FileNotFoundError(f"corpus directory does not exist: {root}")
    code_only = content == "code"
    stats = stats if stats is not None else WalkStats()
    view = _git_view(root) if use_git else None
    stats.listing = "git" if view is not None else "filesystem"

    # every ignore-file path is anchor-relative: the work tree's top in git mode, else the root
    anchor_prefix = ""
    if view is not None:
        try:
            rel_root = root.resolve().relative_to(view.top.resolve()).as_posix()
            anchor_prefix = "" if rel_root == "." else rel_root + "/"
        except ValueError:
            anchor_prefix = ""
    kinds = {".gitignore": {}, ".ignore": {}, ".rgignore": {}}
    if view is not None and anchor_prefix:
        for d in _ancestors_below(view.top, root):
            base = d.resolve().relative_to(view.top.resolve()).as_posix()
            base = "" if base == "." else base
            for name in (".ignore", ".rgignore"):
                if (d / name).is_file():
                    spec = _read_spec(d / name)
                    if spec is not None:
                        kinds[name][base] = spec

    if isinstance(exclude, str):
        exclude = [exclude]
    if isinstance(include, str):
        include = [include]
    ex_patterns = _valid_patterns(DEFAULT_EXCLUDES if exclude is None else exclude)
    ex_spec = pathspec.GitIgnoreSpec.from_lines(ex_patterns) if ex_patterns else None
    ex_quick = _any_match(ex_spec) if ex_spec is not None else None
    inc_patterns = _valid_patterns(include or ())
    inc_spec = pathspec.GitIgnoreSpec.from_lines(inc_patterns) if inc_patterns else None
    venv_rule = ".venv/" in ex_patterns

    def included(rel: str, is_dir: bool) -> bool:
        return inc_spec is not None and bool(
            inc_spec.check_file(rel + "/" if is_dir else rel).include)

    def ignore_reason(rel: str, is_dir: bool) -> str | None:
        a = anchor_prefix + rel
        for name, reason in ((".rgignore", "rgignore"), (".ignore", "dotignore")):
            verdict = _decide(kinds[name], a, is_dir)
            if verdict is not None:
                return reason if verdict else None
        if view is None:
            ignored = bool(_decide(kinds[".gitignore"], a, is_dir))
        elif (f := view.fallback_dir(rel)) is not None:
            ignored = bool(_decide(kinds[".gitignore"], a, is_dir, floor=anchor_prefix + f))
        elif is_dir:
            ignored = rel in view.ignored_dirs
        else:
            ignored = rel not in view.listed
        return "gitignored" if ignored else None

    def exclude_reason(rel: str, is_dir: bool, full: Path) -> str | None:
        probe = rel + "/" if is_dir else rel
        if ex_spec is not None and (ex_quick is None or ex_quick.search(probe)):
            res = ex_spec.check_file(probe)
            if res.include:
                pattern = ex_patterns[res.index]
                # a file is reached only through a directory already judged: a directory
                # pattern's match on a file below it was decided there
                if is_dir or not pattern.endswith("/"):
                    if not (is_dir and pattern in _GUARDED_DIRS
                            and not _looks_like_output(full, rel, view, root)) \
                            and not included(rel, is_dir):
                        return _REASON_OF.get(pattern, "excluded")
        if is_dir and venv_rule and (full / "pyvenv.cfg").is_file() and not included(rel, True):
            return "dependency_dir"
        return None

    secrets_here: list[tuple[str, str]] = []
    redacted_before = len(stats.redactions)
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        base = (anchor_prefix + rel_dir).rstrip("/")
        for name in kinds:
            if name in filenames:
                spec = _read_spec(Path(dirpath) / name)
                if spec is not None:
                    kinds[name][base] = spec
        kept_dirs = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            full = Path(dirpath) / d
            if d == ".git":
                stats.skipped["git_dir"] += 1
                continue
            reason = ignore_reason(rel, True) or exclude_reason(rel, True, full)
            if reason is None and os.path.islink(full):
                reason = "not_regular"
            if reason is not None:
                stats.skipped[reason] += 1
            else:
                kept_dirs.append(d)
        dirnames[:] = kept_dirs
        for f in sorted(filenames):
            rel = f"{rel_dir}/{f}" if rel_dir else f
            full = Path(dirpath) / f
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:  # a name that is not valid UTF-8 (surrogate-escaped)
                stats.skipped["bad_filename"] += 1
                continue
            if f == ".git":  # a gitfile (submodule or worktree pointer)
                stats.skipped["git_dir"] += 1
                continue
            reason = ignore_reason(rel, False) or exclude_reason(rel, False, full)
            if reason is None and code_only and PurePosixPath(f).suffix.lower() \
                    not in SOURCE_SUFFIXES:
                reason = "not_code"
            if reason is not None:
                stats.skipped[reason] += 1
                continue
            if full.is_symlink() or not full.is_file():
                stats.skipped["not_regular"] += 1
                continue
            try:
                size = full.stat().st_size
                if size > max_file_bytes:
                    stats.skipped["too_large"] += 1
                    continue
                data = full.read_bytes()
            except OSError:
                stats.skipped["unreadable"] += 1
                continue
            if not index_secrets:
                kind = secret_kind(rel, data)
                if kind is not None:
                    stats.skipped["secret"] += 1
                    stats.secrets.append((rel, kind))
                    secrets_here.append((rel, kind))
                    logger.info("not indexed (secret: %s): %s", kind, rel)
                    continue
            if _is_binary(data):
                stats.skipped["binary"] += 1
                continue
            if not included(rel, False) and looks_minified(rel, data):
                stats.skipped["minified"] += 1
                continue
            try:
                text = data.decode("utf-8")
                replaced = False
            except UnicodeDecodeError:
                text = data.decode("utf-8", errors="replace")
                replaced = True
                stats.decoded_with_replacement += 1
            if not index_secrets:
                text = redact_document_text(rel, text, stats)
            category = categorize(rel)
            stats.files_indexed += 1
            stats.bytes_indexed += size
            stats.by_category[category] += 1
            yield Document(path=rel, category=category, text=text, size=size,
                           replaced_bytes=replaced)
    if secrets_here:
        shown = ", ".join(f"{p} ({k})" for p, k in secrets_here[:10])
        more = f" and {len(secrets_here) - 10} more" if len(secrets_here) > 10 else ""
        logger.warning("%d file(s) under %s look like secrets and were not indexed: %s%s",
                       len(secrets_here), root, shown, more)
    if stats.redactions[redacted_before:]:
        here = stats.redactions[redacted_before:]
        shown = ", ".join(f"{p} ({', '.join(k)})" for p, k in here[:10])
        more = f" and {len(here) - 10} more" if len(here) > 10 else ""
        logger.warning("%d file(s) under %s hold secret literals, indexed with each replaced "
                       "by [REDACTED:<kind>]: %s%s", len(here), root, shown, more)


def walk_settings(corpus: Any) -> dict[str, Any]:
    """:func:`walk_corpus` keyword arguments from a corpus config node (``corpus.*`` of
    rag/app/config.py: ``max_file_bytes``, ``exclude`` (+ ``exclude_extra``), ``include``,
    ``index_secrets``, ``content``), as plain JSON-able values — the one place a config
    becomes walk rules, so every caller (index build, golden export, dataset checks) walks
    alike."""
    base = DEFAULT_EXCLUDES if corpus.exclude is None else [str(p) for p in corpus.exclude]
    return {"max_file_bytes": int(corpus.max_file_bytes),
            "exclude": [*base, *(str(p) for p in corpus.get("exclude_extra") or ())],
            "include": [str(p) for p in corpus.get("include") or ()],
            "index_secrets": bool(corpus.get("index_secrets", False)),
            "content": str(getattr(content := corpus.get("content") or "all", "value",
                                   content))}
