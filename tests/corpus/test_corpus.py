"""Corpus walking (rag/corpus/walk.py) and chunking (rag/corpus/chunk.py)."""

from __future__ import annotations

import hashlib
import os
import textwrap
from pathlib import Path

import pytest

from rag.corpus.chunk import (
    chunk_document,
    chunk_documents,
    chunk_python,
    chunk_sections,
    chunk_windows,
)
from rag.corpus.walk import Document, WalkStats, categorize, walk_corpus

MAX_BYTES = 1000

ROOT_GITIGNORE = "*.log\n!keep.log\nbuild/\nsecret.txt\n"
NESTED_GITIGNORE = "generated.py\n*.tmp\n!important.tmp\ncache/\n"

# relative path -> content; everything the walk should index is in KEPT
KEPT: dict[str, bytes] = {
    ".gitignore": ROOT_GITIGNORE.encode(),
    "README.md": b"# Demo\n\nA demo repo.\n",
    "generated.py": b"X = 1\n",  # only src/pkg/.gitignore names generated.py
    "keep.log": b"kept by !keep.log\n",
    "latin.txt": b"caf\xe9 au lait\n",  # invalid UTF-8
    "exact.txt": b"e" * (MAX_BYTES - 1) + b"\n",  # exactly max_file_bytes: kept
    "pyproject.toml": b"[project]\nname = 'demo'\n",
    "setup.py": b"from setuptools import setup\nsetup()\n",
    "docs/index.rst": b"Index\n=====\n\nHello.\n",
    "examples/tutorial/tests/test_auth.py": b"def test_login():\n    pass\n",
    "src/pkg/.gitignore": NESTED_GITIGNORE.encode(),
    "src/pkg/__init__.py": b"",
    "src/pkg/app.py": b"def run():\n    return 1\n",
    "src/pkg/important.tmp": b"re-included\n",
    "src/pkg/keep.log": b"root !keep.log applies at any depth\n",
    "tests/test_app.py": b"def test_run():\n    assert True\n",
}
SKIPPED: dict[str, bytes] = {
    ".git/HEAD": b"ref: refs/heads/main\n",
    ".git/config": b"[core]\n",
    "debug.log": b"noise\n",
    "secret.txt": b"hunter2\n",
    "build/out.py": b"def built():\n    pass\n",
    "big.txt": b"b" * MAX_BYTES + b"\n",  # max_file_bytes + 1
    "src/pkg/generated.py": b"def gen():\n    pass\n",
    "src/pkg/scratch.tmp": b"tmp\n",
    "src/pkg/cache/x.py": b"x = 1\n",
    "src/pkg/sub/build/y.py": b"y = 1\n",
    "src/pkg/debug.log": b"noise\n",
    "src/pkg/logo.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
}


def _write(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    _write(root, {**KEPT, **SKIPPED})
    os.symlink(root / "src/pkg/app.py", root / "link.py")
    return root


def test_walk_keeps_exactly_the_expected_files(repo: Path):
    stats = WalkStats()
    docs = list(walk_corpus(repo, max_file_bytes=MAX_BYTES, stats=stats))
    assert sorted(d.path for d in docs) == sorted(KEPT)
    by_path = {d.path: d for d in docs}
    for rel, data in KEPT.items():
        assert by_path[rel].size == len(data)
    assert len(docs) == len(by_path)  # no duplicates


def test_walk_stats_by_reason(repo: Path):
    stats = WalkStats()
    list(walk_corpus(repo, max_file_bytes=MAX_BYTES, stats=stats))
    assert stats.skipped == {
        "git_dir": 1,          # .git (a directory, counted once)
        # debug.log, secret.txt, build/ (dir), src/pkg/generated.py, src/pkg/scratch.tmp,
        # src/pkg/cache/ (dir), src/pkg/sub/build/ (dir), src/pkg/debug.log
        "gitignored": 8,
        "binary": 1,           # src/pkg/logo.png
        "too_large": 1,        # big.txt
        "not_regular": 1,      # link.py (symlink)
    }
    assert stats.files_indexed == 16
    assert stats.bytes_indexed == sum(len(v) for v in KEPT.values())
    assert stats.decoded_with_replacement == 1
    assert stats.by_category == {
        "config": 4,          # .gitignore, pyproject.toml, setup.py, src/pkg/.gitignore
        "documentation": 4,   # README.md, latin.txt, exact.txt, docs/index.rst
        "source": 3,          # generated.py, src/pkg/__init__.py, src/pkg/app.py
        "other": 3,           # keep.log, src/pkg/important.tmp, src/pkg/keep.log
        "example": 1,         # examples/tutorial/tests/test_auth.py
        "test": 1,            # tests/test_app.py
    }
    d = stats.as_dict()
    assert d["files_indexed"] == 16
    assert d["files_skipped_gitignored"] == 8
    assert d["files_skipped_unreadable"] == 0
    assert d["files_decoded_with_replacement"] == 1
    assert d["files_example"] == 1


def test_walk_decodes_invalid_utf8_with_replacement(repo: Path):
    docs = {d.path: d for d in walk_corpus(repo, max_file_bytes=MAX_BYTES)}
    assert docs["latin.txt"].text == "caf\ufffd au lait\n"
    assert docs["latin.txt"].replaced_bytes is True
    assert docs["README.md"].replaced_bytes is False
    assert docs["src/pkg/app.py"].category == "source"
    assert docs["src/pkg/app.py"].text == "def run():\n    return 1\n"


def test_walk_missing_root_raises(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        list(walk_corpus(tmp_path / "nope"))


def test_walk_order_is_top_down_files_then_subdirectories(repo: Path):
    paths = [d.path for d in walk_corpus(repo, max_file_bytes=MAX_BYTES)]
    # the documented order: a directory's own files (sorted), then each subdirectory (sorted)
    def key(p: str):
        parts = p.split("/")
        return [(0, x) if i == len(parts) - 1 else (1, x) for i, x in enumerate(parts)]
    assert paths == sorted(paths, key=key)
    assert paths == [d.path for d in walk_corpus(repo, max_file_bytes=MAX_BYTES)]


def test_nested_gitignore_negation_overrides_parent(tmp_path: Path):
    root = tmp_path / "r"
    _write(root, {".gitignore": b"*.log\n", "pkg/.gitignore": b"!special.log\n",
                  "pkg/special.log": b"x\n", "pkg/other.log": b"y\n"})
    paths = {d.path for d in walk_corpus(root)}
    # git: pkg/special.log is re-included by pkg/.gitignore; pkg/other.log stays ignored
    assert "pkg/special.log" in paths
    assert "pkg/other.log" not in paths


@pytest.mark.parametrize("path, category", [
    ("src/flask/app.py", "source"),
    ("src/flask/templates/index.html", "source"),
    ("tests/test_basic.py", "test"),
    ("Tests/helpers.py", "test"),            # directory names are case-insensitive
    ("src/flask/app_test.py", "test"),
    ("test_top.py", "test"),
    ("tests/data/README.md", "test"),        # test beats documentation
    ("examples/tutorial/tests/test_auth.py", "example"),   # example beats test
    ("examples/tutorial/pyproject.toml", "example"),        # example beats config
    ("docs/conf.py", "config"),              # named config file beats docs/
    ("tests/conftest.py", "config"),
    ("pyproject.toml", "config"),
    ("uv.lock", "config"),
    ("Makefile", "config"),
    ("requirements-dev.txt", "config"),
    (".gitignore", "config"),
    ("docs/index.rst", "documentation"),
    ("CHANGES.rst", "documentation"),
    ("LICENSE", "documentation"),
    ("docs/_static/logo.png", "documentation"),
    ("README.md", "documentation"),
    ("src/flask/py.typed", "other"),
    ("keep.log", "other"),
    # other languages' test conventions
    ("uuid_test.go", "test"),                           # Go
    ("src/arrow/memory_pool_test.cc", "test"),          # *_test.<source suffix>
    ("src/immer.test.ts", "test"),                      # JS/TS *.test.*, *.spec.*
    ("src/App.test.tsx", "test"),
    ("lib/a.test.js", "test"),
    ("lib/a.spec.jsx", "test"),
    ("lib/a.spec.mjs", "test"),
    ("lib/a.test.cjs", "test"),
    ("src/a.spec.mts", "test"),
    ("src/index.test-d.ts", "test"),                    # tsd type tests
    ("src/__tests__/produce.ts", "test"),               # Jest directories
    ("src/__mocks__/fs.js", "test"),
    ("spec/models/user_spec.rb", "test"),               # RSpec directory and name
    ("lib/user_spec.rb", "test"),
    ("lib/user_test.rb", "test"),                       # minitest
    ("src/test/java/org/x/RouterTest.java", "test"),    # Java src/test/
    ("src/main/java/org/x/RouterTest.java", "test"),    # JUnit class name
    ("src/main/java/org/x/Router.java", "source"),
    ("tests/it.rs", "test"),                            # Rust integration tests
    ("src/ControllerTest.php", "test"),                 # PHPUnit
    ("src/Contest.php", "source"),                      # not a test: no capital T
    ("MyLib.Tests/RouterTests.cs", "test"),             # .NET test project
    ("MyLib.UnitTests/Helpers.cs", "test"),
    ("MyLib/Router.cs", "source"),
    ("Tests/RouterTests.swift", "test"),
    ("src/types/types-external.ts", "source"),
    ("src/latest.ts", "source"),                        # "test" inside a word
    ("src/spec.ts", "source"),                          # a file named spec is source
    ("lib/contest_results.go", "source"),
    ("index.cjs", "source"),                            # every suffix chunked by symbol
    ("typings/esm.d.mts", "source"),
    ("index.d.cts", "source"),
    ("build.gradle.kts", "source"),
    ("examples/app.test.ts", "example"),                # example still beats test
    ("package.json", "config"),                         # config still beats test
])
def test_categorize(path: str, category: str):
    assert categorize(path) == category


# --------------------------------------------------------------------------- Python chunking

PY = textwrap.dedent('''\
    """Module docstring."""
    import os

    CONST = 1


    def top(a, b):
        return a + b


    @decorator
    @other(arg=1)
    def decorated():
        pass


    class Outer(Base):
        """Outer doc."""

        attr = 3

        def meth(self):
            return 1

        @property
        def prop(self):
            return 2

        class Inner:
            x = 1

            def meth(self):
                def helper():
                    return 0
                return helper()


    async def fetch(url):
        await something(url)


    if __name__ == "__main__":
        top(1, 2)
    ''')
PY_LINES = PY.splitlines(keepends=True)


def _doc(path: str, text: str, category: str = "source") -> Document:
    return Document(path=path, category=category, text=text, size=len(text.encode()))


def _lines(*numbers: int) -> str:
    return "".join(PY_LINES[n - 1] for n in numbers)


def test_python_chunks_symbols_and_line_ranges():
    assert len(PY_LINES) == 43
    chunks = chunk_python(_doc("pkg/mod.py", PY))
    got = [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks]
    assert got == [
        ("<module>", "module", 1, 43),           # lines 1, 2, 4, 42, 43
        ("top", "function", 7, 8),
        ("decorated", "function", 11, 14),        # starts at the first decorator
        ("Outer", "class", 17, 20),               # 17-20 (methods and the blank lines
                                                  # that only separate them removed)
        ("Outer.meth", "method", 22, 23),
        ("Outer.prop", "method", 25, 27),         # decorator line 25
        ("Outer.Inner", "class", 29, 30),
        ("Outer.Inner.meth", "method", 32, 35),   # nested helper stays inside
        ("fetch", "function", 38, 39),            # async def
    ]


def test_python_chunk_texts():
    by_sym = {c.symbol: c for c in chunk_python(_doc("pkg/mod.py", PY))}
    assert by_sym["<module>"].text == _lines(1, 2, 4, 42, 43)
    assert by_sym["<module>"].text == ('"""Module docstring."""\nimport os\nCONST = 1\n'
                                       'if __name__ == "__main__":\n    top(1, 2)\n')
    assert by_sym["Outer"].text == _lines(17, 18, 19, 20)
    assert by_sym["Outer.Inner"].text == "    class Inner:\n        x = 1\n"
    assert by_sym["decorated"].text == _lines(11, 12, 13, 14)
    assert by_sym["decorated"].text.startswith("@decorator\n@other(arg=1)\ndef decorated")
    assert "def helper" in by_sym["Outer.Inner.meth"].text
    assert by_sym["fetch"].text == "async def fetch(url):\n    await something(url)\n"
    assert all(c.category == "source" for c in by_sym.values())


def test_python_without_module_level_code_has_no_module_chunk():
    chunks = chunk_python(_doc("a.py", "def f():\n    pass\n\n\ndef g():\n    pass\n"))
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == [("f", 1, 2), ("g", 5, 6)]


def test_python_syntax_error_falls_back_to_windows():
    text = "def broken(:\n    pass\n# more\n"
    chunks = chunk_python(_doc("bad.py", text))
    assert [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks] == \
        [(None, "window", 1, 3)]
    assert chunks[0].text == text


# --------------------------------------------------------------------------- Markdown / reST

MD = textwrap.dedent('''\
    Intro text before heading.

    # Title
    Some text.

    ```python
    # not a heading
    x = 1
    ```

    ## Section Two ##
    More.
    ~~~
    # also not a heading
    ~~~
    ### Third
    #hashtag is not a heading
    end
    ''')


def test_markdown_sections():
    chunks = chunk_sections(_doc("docs/guide.md", MD, "documentation"), rst=False)
    assert [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks] == [
        (None, "section", 1, 2),
        ("Title", "section", 3, 10),           # the fenced '# not a heading' stays inside
        ("Section Two", "section", 11, 15),    # closing #'s stripped
        ("Third", "section", 16, 18),
    ]
    lines = MD.splitlines(keepends=True)
    assert chunks[1].text == "".join(lines[2:10])
    assert chunks[3].text == "### Third\n#hashtag is not a heading\nend\n"
    assert all(c.category == "documentation" for c in chunks)


def test_a_preamble_of_link_targets_opens_the_first_section():
    # MyST's "(options)=" and reST's ".. _opts:" name the section below them: no chunk of their own
    md = "(options)=\n<!-- generated -->\n\n# Options\n\nText.\n\n## More\nx\n"
    chunks = chunk_sections(_doc("docs/options.md", md, "documentation"), rst=False)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == [("Options", 1, 7),
                                                                       ("More", 8, 9)]
    assert chunks[0].text.startswith("(options)=\n")
    rst = ".. _opts:\n\nOptions\n=======\n\nText.\n"
    chunks = chunk_sections(_doc("docs/options.rst", rst, "documentation"), rst=True)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == [("Options", 1, 6)]
    # a preamble with words of its own stays a chunk; so does one of blank lines only (as
    # before) and a parenthesis that is prose, not a target
    for text, want in (("(x)=\nIntro words.\n# T\ny\n", [(None, 1), ("T", 3)]),
                       ("\n\n# T\ny\n", [("T", 3)]),  # blank lines make no chunk at all
                       ("(see the notes below)=\n# T\ny\n", [(None, 1), ("T", 2)])):
        chunks = chunk_sections(_doc("a.md", text), rst=False)
        assert [(c.symbol, c.start_line) for c in chunks] == want, text


def test_markdown_fence_closes_only_with_same_character():
    text = "# Real\n~~~\n```\n# inside the tilde fence\n~~~\nafter\n"
    chunks = chunk_sections(_doc("a.md", text), rst=False)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == [("Real", 1, 6)]


def test_markdown_without_headings_falls_back_to_windows():
    chunks = chunk_sections(_doc("a.md", "just\ntext\n"), rst=False)
    assert [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks] == \
        [(None, "window", 1, 2)]


RST = textwrap.dedent('''\
    ==========
    Main Title
    ==========

    Intro para.

    Section A
    ---------

    Text a.

    Sub A.1
    ~~~~~~~
    text

    Short
    ---
    not a title: the adornment is shorter than the text
    ''')


def test_rst_sections_underlined_and_overlined():
    chunks = chunk_sections(_doc("docs/index.rst", RST, "documentation"), rst=True)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("Main Title", 1, 6),     # starts at the overline
        ("Section A", 7, 11),
        ("Sub A.1", 12, 18),      # 'Short' / '---' is not a title
    ]
    assert chunks[0].text.startswith("==========\nMain Title\n==========\n")


def test_chunk_document_dispatch():
    assert [c.kind for c in chunk_document(_doc("x.py", "def f():\n    pass\n"))] == ["function"]
    assert [c.symbol for c in chunk_document(_doc("x.markdown", "# A\nb\n"))] == ["A"]
    assert [c.symbol for c in chunk_document(_doc("x.rst", "Abc\n===\nb\n"))] == ["Abc"]
    assert [c.kind for c in chunk_document(_doc("x.txt", "a\n"))] == ["window"]
    assert [c.kind for c in chunk_document(_doc("x.pyi", "def f() -> int: ...\n"))] == \
        ["function"]


# --------------------------------------------------------------------------- windows


def _numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


def test_windows_with_overlap_exact_ranges():
    # window 60, overlap 10 -> step 50: 1-60, 51-110, 101-130 (last window ends the file)
    chunks = chunk_windows(_doc("big.txt", _numbered(130)), window_lines=60, overlap=10)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 60), (51, 110), (101, 130)]
    assert chunks[1].text.splitlines()[0] == "line 51"
    assert chunks[1].text.splitlines()[-1] == "line 110"
    assert all(c.symbol is None and c.kind == "window" for c in chunks)


def test_windows_edge_sizes():
    # 110 lines: 1-60, 51-110 and no tail window
    assert [(c.start_line, c.end_line) for c in
            chunk_windows(_doc("a.txt", _numbered(110)), window_lines=60, overlap=10)] == \
        [(1, 60), (51, 110)]
    assert [(c.start_line, c.end_line) for c in
            chunk_windows(_doc("a.txt", _numbered(60)))] == [(1, 60)]
    # no overlap, window 4 on 10 lines: 1-4, 5-8, 9-10
    assert [(c.start_line, c.end_line) for c in
            chunk_windows(_doc("a.txt", _numbered(10)), window_lines=4, overlap=0)] == \
        [(1, 4), (5, 8), (9, 10)]
    assert chunk_windows(_doc("a.txt", "")) == []
    assert chunk_windows(_doc("a.txt", "\n\n  \n")) == []
    # chunk_document passes the window settings through
    assert [(c.start_line, c.end_line) for c in
            chunk_document(_doc("a.txt", _numbered(10)), window_lines=6, overlap=2)] == \
        [(1, 6), (5, 10)]


@pytest.mark.parametrize("window, overlap", [(10, 10), (10, 11), (10, -1)])
def test_windows_reject_bad_overlap(window: int, overlap: int):
    with pytest.raises(ValueError):
        chunk_windows(_doc("a.txt", "x\n"), window_lines=window, overlap=overlap)


# --------------------------------------------------------------------------- ids and hashes


def test_ids_unique_and_hash_is_sha256_of_indexed_text(repo: Path):
    docs = list(walk_corpus(repo, max_file_bytes=MAX_BYTES))
    docs += [_doc("pkg/mod.py", PY), _doc("docs/guide.md", MD, "documentation"),
             _doc("docs/index2.rst", RST, "documentation"), _doc("big.txt", _numbered(130))]
    chunks = list(chunk_documents(docs))
    assert len(chunks) > 20
    ids = [c.id for c in chunks]
    assert len(ids) == len(set(ids))
    for c in chunks:
        assert c.id == f"{c.path}:{c.start_line}-{c.end_line}"
        expected_header = f"{c.path}: {c.symbol}\n" if c.symbol else f"{c.path}\n"
        assert c.indexed_text == expected_header + c.text
        assert c.content_hash == hashlib.sha256(c.indexed_text.encode("utf-8")).hexdigest()
        assert 1 <= c.start_line <= c.end_line


def test_content_hash_depends_on_path_and_symbol():
    a = chunk_python(_doc("a.py", "def f():\n    pass\n"))[0]
    b = chunk_python(_doc("b.py", "def f():\n    pass\n"))[0]
    assert a.text == b.text
    assert a.content_hash != b.content_hash
    # a.py: f\n + body
    assert a.content_hash == hashlib.sha256(b"a.py: f\ndef f():\n    pass\n").hexdigest()
