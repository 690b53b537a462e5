"""Symbol chunks of the tree-sitter languages (rag/corpus/languages.py).

Each fixture under tests/fixtures/languages/ has its expected (symbol, kind, start, end) list
written by reading the file (line numbers in the comments); chunks come sorted by
(start_line, end_line). A class chunk is the class minus its methods and nested types, so its
start/end are its first and last remaining lines; ``<module>`` holds the non-blank lines no
symbol holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.corpus.chunk import (
    CHUNKER_VERSION,
    Chunk,
    chunk_code,
    chunk_document,
    chunk_python,
    chunk_windows,
    split_lines,
)
from rag.corpus.languages import (
    LANGUAGES,
    describe_languages,
    language_for,
    language_name,
    language_stats,
    outline,
)
from rag.corpus.walk import Document

FIXTURES = Path(__file__).parents[1] / "fixtures" / "languages"

M, F, C, ME = "module", "function", "class", "method"

EXPECTED: dict[str, list[tuple[str, str, int, int]]] = {
    "sample.scala": [
        ("<module>", M, 1, 3),                 # package and import
        ("Decoder", C, 5, 12),                 # Scaladoc, the trait, its abstract `def apply`
        ("Decoder.map", ME, 9, 11),            # the anonymous class stays in the method
        ("Decoder", C, 14, 20),                # the companion object
        ("Decoder.Result", C, 15, 15),         # a type alias
        ("Decoder.instance", ME, 17, 19),
        ("Json", C, 22, 25),
        ("Json.noSpaces", ME, 23, 24),         # with the comment above it
    ],
    "sample.sh": [
        ("<module>", M, 1, 14),                # shebang, set -e, the final call
        ("_bash-it-update", F, 4, 8),          # `function name()` with its comment
        ("helper_fn", F, 10, 12),              # `name ()`
    ],
    "sample.ts": [
        ("<module>", M, 1, 56),            # 1 import, 3 VERSION, 44/49 namespace braces, 51-56
        ("ZodString", C, 5, 14),           # doc comment 5 + export; minus 9-11 and 13
        ("ZodString.parse", ME, 9, 11),
        ("ZodString.create", ME, 13, 13),  # static field holding an arrow function
        ("Options", C, 16, 19),            # interface: its method signature stays in it
        ("Shape", C, 21, 23),              # type alias
        ("Color", C, 25, 27),
        ("parse", F, 29, 34),              # inner() stays inside
        ("make", F, 36, 38),               # export const make = (...) => {...}
        ("legacy", F, 40, 42),             # const legacy = function (...) {...}
        ("util.assert", F, 45, 45),        # export namespace util { ... }
        ("util.Box", C, 46, 48),
        ("util.Box.get", ME, 47, 47),
        # const helpers = { twice() {...} }: object-literal methods stay in <module>
    ],
    "sample.tsx": [
        ("<module>", M, 1, 1),
        ("Button", F, 3, 5),
        ("Card", F, 7, 7),
        ("Panel", C, 9, 13),
        ("Panel.render", ME, 10, 12),
    ],
    "sample.js": [
        ("<module>", M, 1, 32),            # 1, 2, 30 (not a function), 32
        ("Router", C, 4, 13),              # comment 4; minus 6-8 and 10-12
        ("Router.constructor", ME, 6, 8),
        ("Router.handle", ME, 10, 12),     # class field = arrow function
        ("createApp", F, 15, 17),
        ("wrap", F, 19, 19),
        ("app.use", ME, 21, 24),           # app.use = function, with its doc comment
        ("View.lookup", ME, 26, 28),       # View.prototype.lookup = function
    ],
    "sample.jsx": [
        ("<module>", M, 1, 1),
        ("App", F, 3, 5),
        ("Header", F, 7, 7),
    ],
    "sample.go": [
        ("<module>", M, 1, 16),            # 1, 2, 4, 6, 13 "type (", 16 ")"
        ("Router", C, 8, 11),
        ("Middleware", C, 14, 14),         # grouped type declaration: one symbol per spec
        ("Route", C, 15, 15),
        ("New", F, 18, 21),
        ("Router.Handle", ME, 23, 25),     # receiver *Router, pointer dropped
        ("Route.Path", ME, 27, 27),
    ],
    "sample.rs": [
        ("<module>", M, 1, 38),            # 1, 3, 34 "mod geometry {", 38
        ("Point", C, 5, 9),                # doc comment 5, attribute 6
        ("Point", C, 11, 15),              # impl Point
        ("Point.new", ME, 12, 14),
        ("Point", C, 17, 21),              # impl fmt::Display for Point
        ("Point.fmt", ME, 18, 20),
        ("Shape", C, 23, 28),              # trait; the signature at 24 stays
        ("Shape.name", ME, 25, 27),
        ("Kind", C, 30, 32),
        ("geometry.origin", F, 35, 37),
        ("main", F, 40, 43),               # helper() stays inside
    ],
    "Router.java": [
        ("<module>", M, 1, 3),
        ("Router", C, 5, 35),
        ("Router.Router", ME, 10, 12),     # constructor
        ("Router.handle", ME, 14, 16),
        ("Router.Route", C, 18, 22),
        ("Router.Route.path", ME, 19, 21),
        ("Router.Listener", C, 24, 26),    # interface method without body stays
        ("Router.Mode", C, 28, 34),
        ("Router.Mode.quick", ME, 31, 33),
    ],
    "sample.c": [
        ("<module>", M, 1, 17),            # 1, 3, 17 (a prototype)
        ("point", C, 5, 9),
        ("size2", C, 11, 13),              # typedef: named by the typedef
        ("color", C, 15, 15),
        ("add", F, 19, 22),
        ("name", F, 24, 26),               # static char *name(void)
    ],
    "shape.h": [                           # C++ in a .h: the C tree has errors, C++'s not
        ("<module>", M, 1, 8),             # 1, 2, 8
        ("geo.Shape", C, 3, 7),
        ("geo.Shape.~Shape", ME, 5, 5),    # the pure virtual at 6 stays in the class
    ],
    "sample.cpp": [
        ("<module>", M, 1, 29),            # 1, 3, 29
        ("shapes.Circle", C, 5, 18),
        ("shapes.Circle.Circle", ME, 8, 8),
        ("shapes.Circle.area", ME, 9, 9),
        ("shapes.Circle.Style", C, 12, 14),
        ("shapes.Circle.Style.width", ME, 13, 13),
        ("shapes.Circle.perimeter", ME, 20, 22),  # out of line: Circle::perimeter
        ("shapes.twice", F, 24, 27),              # template line 24 belongs to it
        ("main", F, 31, 31),
    ],
    "Router.cs": [
        ("<module>", M, 1, 29),            # 1, 3, 4, 29: the namespace is not in names
        ("Router", C, 5, 26),
        ("Router.Router", ME, 10, 10),
        ("Router.Handle", ME, 12, 15),
        ("Router.Route", C, 17, 20),
        ("Router.Route.Path", ME, 19, 19),
        ("Router.IListener", C, 22, 25),
        ("Mode", C, 28, 28),
    ],
    "router.ex": [
        ("Web.Router", C, 1, 25),            # defmodule: 1, the @moduledoc 2-4, alias 6, end 25
        ("Web.Router.call", ME, 8, 12),       # with its @doc and @spec above
        ("Web.Router.dispatch", ME, 14, 14),  # defp, one line
        ("Web.Router.halt", ME, 16, 16),      # named by the call left of `when`
        ("Web.Router.get", ME, 18, 20),       # defmacro
        ("Web.Router.String.Chars", C, 22, 24),  # defimpl: 22 and its end 24
        ("Web.Router.String.Chars.to_string", ME, 23, 23),
        ("<module>", M, 27, 27),              # the call after the module
    ],
    "picker.lua": [
        ("<module>", M, 1, 28),             # header, tables, return M: 1-5, 28
        ("Picker.new", ME, 7, 12),          # function Picker:new, its --- doc comment above
        ("M.setup", ME, 14, 16),            # function M.setup
        ("helper", F, 18, 20),              # local function helper
        ("M.run", ME, 22, 24),              # M.run = function
        ("other", F, 26, 26),               # local other = function
    ],
    "Encode.hs": [
        ("<module>", M, 1, 10),             # pragma, header, import, the Haddock of Value
        ("Value", C, 11, 14),               # data (its Haddock parses inside the imports)
        ("Parser", C, 16, 16),              # newtype
        ("Object", C, 18, 18),              # type synonym
        ("ToJSON", C, 20, 21),              # class: its Haddock, its head
        ("ToJSON.toEncoding", ME, 22, 24),  # a default method, with the signatures above it
        ("Bool", C, 26, 26),                # instance ToJSON Bool: named by its type
        ("Bool.toJSON", ME, 27, 28),        # two equations, one method
        ("encode", F, 30, 33),              # Haddock and signature lead the equation
        ("decode", F, 35, 37),              # signature and two equations, one function
    ],
    "array_list.zig": [
        ("<module>", M, 1, 35),             # the import, the error set, the test block
        ("ArrayList", F, 3, 14),            # pub fn with its /// doc comment; the struct it
                                            # returns stays inside it
        ("Allocator", C, 16, 23),           # const Allocator = struct {...}: 16, 17, 23
        ("Allocator.alloc", ME, 19, 22),
        ("Kind", C, 25, 25),                # const Kind = enum {...}
        ("helper", F, 29, 31),
    ],
    "router.rb": [
        ("<module>", M, 1, 28),            # 1, 3, 28
        ("Web", C, 5, 22),                 # module Web: 5, 6, 22
        ("Web.Router", C, 7, 21),
        ("Web.Router.initialize", ME, 10, 12),
        ("Web.Router.build", ME, 14, 16),  # def self.build
        ("Web.Router.Route", C, 18, 20),
        ("Web.Router.Route.path", ME, 19, 19),
        ("helper", F, 24, 26),
    ],
    "Controller.php": [
        ("<module>", M, 1, 33),            # 1, 2, 4, 6, 33
        ("Controller", C, 8, 19),
        ("Controller.__construct", ME, 13, 13),
        ("Controller.show", ME, 15, 18),
        ("Renderer", C, 21, 24),
        ("Greets", C, 26, 29),
        ("Greets.greet", ME, 28, 28),
        ("helper", F, 31, 31),
    ],
    "Router.kt": [
        ("<module>", M, 1, 5),             # 1, 3, 5
        ("Router", C, 7, 22),
        ("Router.handle", ME, 11, 13),
        ("Router.Route", C, 15, 17),
        ("Router.Route.depth", ME, 16, 16),
        ("Router.create", ME, 20, 20),     # companion object members are the class's
        ("Listener", C, 24, 26),
        ("String.slug", ME, 28, 28),       # extension function: receiver qualifies it
        ("main", F, 30, 32),
    ],
    "Router.swift": [
        ("<module>", M, 1, 3),
        ("Router", C, 5, 18),
        ("Router.init", ME, 9, 9),
        ("Router.handle", ME, 11, 13),
        ("Router.Route", C, 15, 17),
        ("Router.Route.depth", ME, 16, 16),
        ("Listener", C, 20, 22),
        ("Router", C, 24, 26),             # extension Router
        ("Router.onRoute", ME, 25, 25),
        ("main", F, 28, 30),
    ],
}


def _doc(path: str, text: str, category: str = "source") -> Document:
    return Document(path=path, category=category, text=text, size=len(text.encode()))


def _fixture(name: str) -> Document:
    return _doc(f"src/{name}", (FIXTURES / name).read_text(encoding="utf-8"))


def _rows(chunks: list[Chunk]) -> list[tuple[str | None, str, int, int]]:
    return [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks]


def _check_partition(doc: Document) -> None:
    """The outline gives every non-blank line to exactly one part, and each chunk is its
    part's lines (no fixture line is long enough to be cut); ids are unique."""
    lines = split_lines(doc.text)
    found = outline(doc.text, lines, language_for(doc.path), max_line_chars=4096)
    held = [n for part in found.parts for n in part.lines if lines[n - 1].strip()]
    assert sorted(held) == [n for n, line in enumerate(lines, 1) if line.strip()]
    texts = sorted((part.lines[0], "".join(lines[n - 1] for n in part.lines))
                   for part in found.parts
                   if "".join(lines[n - 1] for n in part.lines).strip())
    chunks = chunk_document(doc)
    assert [(c.start_line, c.text) for c in chunks] == texts
    assert len({c.id for c in chunks}) == len(chunks)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_symbols(name: str):
    doc = _fixture(name)
    chunks = chunk_document(doc)
    assert _rows(chunks) == EXPECTED[name]
    _check_partition(doc)


def test_every_language_has_a_fixture():
    names = {language_for(n).name for n in EXPECTED}
    assert names == {spec.name for spec in LANGUAGES.values()}
    for suffix in (".ts", ".mts", ".cts", ".tsx", ".js", ".mjs", ".cjs", ".jsx", ".go", ".rs",
                   ".java", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".cs",
                   ".rb", ".php", ".kt", ".kts", ".swift", ".scala", ".sc", ".sh", ".bash",
                   ".ex", ".exs", ".lua", ".hs", ".zig"):
        assert language_for(f"a/b{suffix.upper()}") is LANGUAGES[suffix]


def test_class_chunk_leaves_out_methods_and_module_holds_the_rest():
    doc = _fixture("sample.ts")
    lines = split_lines(doc.text)
    by_symbol = {c.symbol: c for c in chunk_document(doc)}
    assert by_symbol["ZodString"].text == "".join(lines[n - 1] for n in (5, 6, 7, 8, 12, 14))
    assert by_symbol["<module>"].text == "".join(
        lines[n - 1] for n in (1, 3, 44, 49, 51, 52, 53, 54, 55, 56))
    assert by_symbol["ZodString.parse"].text == "".join(lines[8:11])
    assert by_symbol["ZodString"].id == "src/sample.ts:5-14"


def test_symbols_sharing_a_line_stay_together():
    # one line: the class keeps its name line, so m() stays in it; `b` starts on the line
    # `a` holds, so it is part of `a`
    doc = _doc("one.ts", "class A { m() {} }\nconst a = () => 1, b = () => 2;\n")
    assert _rows(chunk_document(doc)) == [("A", C, 1, 1), ("a", F, 2, 2)]


def test_trailing_comment_of_code_is_not_a_leading_comment():
    text = "let x = 1; // note\nfunction f() {}\n\n// f2 doc\nfunction g() {}\n"
    assert _rows(chunk_document(_doc("c.js", text))) == \
        [("<module>", M, 1, 1), ("f", F, 2, 2), ("g", F, 4, 5)]


def test_unknown_suffix_and_unparsable_file_fall_back_to_windows():
    text = "(define (main args)\n  args)\n\n(main 1)\n"  # Scheme: no grammar here
    assert _rows(chunk_document(_doc("main.scm", text))) == [(None, "window", 1, 4)]
    # a .ts file that is not TypeScript: errors and no symbol
    junk = "}}} this is @@ not ((( code\n\nat all <<<\n"
    assert _rows(chunk_document(_doc("junk.ts", junk))) == [(None, "window", 1, 3)]
    assert chunk_code(_doc("junk.ts", junk)) == chunk_windows(_doc("junk.ts", junk))


def test_minified_code_falls_back_to_windows():
    # two functions start on a line longer than the line bound (4,096)
    body = "function a(){return 1}function b(){return '" + "x" * 5000 + "'}\n"
    chunks = chunk_document(_doc("dist/app.min.js", "/* v1 */\n" + body))
    assert {c.kind for c in chunks} == {"window"}
    # one long line in an ordinary function keeps its symbol (pieces of that line)
    text = "function big() {\n  return '" + "y" * 5000 + "';\n}\n"
    chunks = chunk_document(_doc("big.js", text))
    assert {(c.symbol, c.kind) for c in chunks} == {("big", F)}
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 1), (2, 2), (2, 2), (3, 3)]


def test_big_class_is_cut_between_members():
    lines = ["class Big {\n", '  a = "' + "x" * 20 + '";\n', "  b = [\n",
             '    "' + "y" * 20 + '",\n', "  ];\n", "}\n"]
    assert [len(line) for line in lines] == [12, 30, 8, 28, 5, 2]
    doc = _doc("big.ts", "".join(lines))
    # segments start where members start (lines 2 and 3): 12 | 30 | 8+28+5+2 = 43; within
    # 64 characters: 1-2 (42), then 3-6 (43). Cutting at line ends alone would give 1-3, 4-6.
    chunks = chunk_code(doc, max_chunk_chars=64, max_line_chars=32)
    assert _rows(chunks) == [("Big", C, 1, 2), ("Big", C, 3, 6)]


def test_module_code_is_cut_into_window_sized_parts():
    text = "".join(f"call({i});\n" for i in range(1, 13))  # 12 statements, no symbol
    chunks = chunk_code(_doc("calls.ts", text), window_lines=10, overlap=2)
    assert _rows(chunks) == [("<module>", M, 1, 10), ("<module>", M, 11, 12)]
    # one statement of 12 lines is cut the same way
    text = "call(\n" + "".join(f"  {i},\n" for i in range(2, 12)) + ");\n"
    chunks = chunk_code(_doc("one.ts", text), window_lines=10, overlap=2)
    assert _rows(chunks) == [("<module>", M, 1, 10), ("<module>", M, 11, 12)]


PY = """import os


class A:
    x = 1

    def m(self):
        return 1

    class B:
        def n(self):
            pass


def f():
    def g():
        pass
    return g


print(f())
"""


def test_python_stays_on_the_ast_chunker():
    doc = _doc("pkg/mod.py", PY)
    chunks = chunk_document(doc)
    assert _rows(chunks) == [
        ("<module>", M, 1, 21),   # 1 and 21
        ("A", C, 4, 5),           # 4, 5: blank lines that only separate methods are not A's
        ("A.m", ME, 7, 8),
        ("A.B", C, 10, 10),
        ("A.B.n", ME, 11, 12),
        ("f", F, 15, 18),
    ]
    assert chunks == chunk_python(doc)
    assert CHUNKER_VERSION == "10"


PY_OVERLOADS = """import typing as t


class Context:
    \"\"\"Doc.

    More.
    \"\"\"

    @t.overload
    def invoke(self, a: int) -> int: ...

    @t.overload
    def invoke(self, a: str) -> str: ...

    def invoke(self, a):
        return a

    def last(self):
        return 1


@overload
def f(a: int) -> int: ...
def f(a):
    return a


@overload
def g(a: int) -> int: ...
def h():
    pass
"""


def test_python_overload_stubs_are_one_chunk_with_their_implementation():
    chunks = chunk_python(_doc("ctx.py", PY_OVERLOADS))
    assert _rows(chunks) == [
        ("<module>", M, 1, 1),
        ("Context", C, 4, 8),        # the docstring's blank line is its own; 9 and 19 are not
        ("Context.invoke", ME, 10, 17),  # two stubs and the implementation: one chunk
        ("Context.last", ME, 19, 20),
        ("f", F, 23, 26),
        ("g", F, 29, 30),            # stubs with no implementation after them: still a symbol
        ("h", F, 31, 32),
    ]


def test_language_names():
    assert language_name("a/b.py") == "python"
    assert language_name("a/b.tsx") == "typescript"
    assert language_name("a/b.jsx") == "javascript"
    assert language_name("a/b.hpp") == "cpp"
    assert language_name("README.md") is None
    assert language_name("Makefile") is None


def test_language_stats_by_hand():
    ts = "const x = 1;\n\nfunction f() {\n\n  return 1;\n}\n\nclass A {\n  m() {}\n}\n"
    go = "}}} what\n\nnope\n"
    py = "import os\n\ndef g():\n    pass\n"
    chunks = [c for doc in (_doc("a.ts", ts), _doc("b.go", go), _doc("c.py", py),
                            _doc("d.md", "# T\ntext\n", "documentation"),
                            _doc("e.ts", "# Issue\nfunction x() {}\n", "issue"))
              for c in chunk_document(doc)]
    # a.ts: <module> (1), f (3, 5, 6), A (8, 10), A.m (9): 7 non-blank lines, 6 in symbols
    # b.go: no grammar match -> one window, 2 non-blank lines, none in a symbol
    # c.py: <module> (1), g (3, 4): 3 non-blank lines, 2 in symbols
    # b.go does not parse: a file with errors
    assert language_stats(chunks) == {
        "lang/go/chunks": 1, "lang/go/files_symbol": 0, "lang/go/files_windowed": 1,
        "lang/go/symbol_coverage": 0.0, "lang/go/files_with_errors": 1,
        "parse_errors/go": "b.go",
        "lang/python/chunks": 2, "lang/python/files_symbol": 1,
        "lang/python/files_windowed": 0, "lang/python/symbol_coverage": 0.6667,
        "lang/python/files_with_errors": 0,
        "lang/typescript/chunks": 4, "lang/typescript/files_symbol": 1,
        "lang/typescript/files_windowed": 0, "lang/typescript/symbol_coverage": 0.8571,
        "lang/typescript/files_with_errors": 0,
        "symbol_coverage": 0.6667,  # (6 + 0 + 2) / (7 + 2 + 3)
    }
    assert language_stats([]) == {"symbol_coverage": 0.0}


def test_language_stats_counts_each_line_once():
    # overlapping windows and long-line pieces: every non-blank line counted once
    text = "".join(f"line {i}\n" for i in range(1, 81)) + "z" * 5000 + "\n"
    chunks = chunk_windows(_doc("w.go", text))
    assert language_stats(chunks)["lang/go/files_windowed"] == 1
    assert language_stats(chunks)["lang/go/chunks"] == len(chunks)
    big = "function big() {\n  return '" + "y" * 5000 + "';\n}\n\nlet a = 1;\n"
    stats = language_stats(chunk_document(_doc("big.js", big)))
    assert stats["lang/javascript/symbol_coverage"] == 0.75  # 3 of lines 1, 2, 3, 5


# --------------------------------------------------------------------------- doc comments


def test_doc_comment_one_blank_line_above_belongs_to_the_declaration():
    # commander's style: a blank line between each /** ... */ and its method
    text = ("class Command {\n"            # 1
            "  /**\n"                      # 2
            "   * Parse argv.\n"           # 3
            "   */\n"                      # 4
            "\n"                           # 5
            "  parse(argv) {\n"            # 6
            "    return this;\n"           # 7
            "  }\n"                        # 8
            "\n"                           # 9
            "  // an ordinary comment\n"   # 10: stays in the class
            "\n"                           # 11
            "  run() {}\n"                 # 12
            "\n"                           # 13
            "  /** two blank lines */\n"   # 14: too far, stays in the class
            "\n"                           # 15
            "\n"                           # 16
            "  stop() {}\n"                # 17
            "}\n")                         # 18
    doc = _doc("lib/command.js", text)
    assert _rows(chunk_document(doc)) == [
        ("Command", C, 1, 18), ("Command.parse", ME, 2, 8), ("Command.run", ME, 12, 12),
        ("Command.stop", ME, 17, 17)]
    _check_partition(doc)


@pytest.mark.parametrize("path, text, first", [
    ("a.ts", "let x = 1;\n/** doc */\n\nfunction f() {}\n", 2),
    ("a.ts", "let x = 1;\n/** a */\n\n/** b */\n\nfunction f() {}\n", 4),  # one gap only
    ("a.ts", "let x = 1;\n/** doc */\n\n@dec\nclass A {}\n", 2),   # above a decorator
    ("a.ts", "let x = 1;\n// note\n\nfunction f() {}\n", 4),        # ordinary comment
    ("a.ts", "/** header */\n\nfunction f() {}\n", 3),                # file's first line
    ("a.ts", "let x = 1;\n/** @license MIT */\n\nfunction f() {}\n", 4),
    ("a.rs", "use x;\n/// doc\n/// more\n\nfn f() {}\n", 2),
    ("a.rs", "use x;\n//! the module\n\nfn f() {}\n", 4),           # inner doc: the module's
    ("a.rs", "use x;\n//// not a doc\n\nfn f() {}\n", 4),
    ("a.go", "package p\n// F does it.\n\nfunc F() {}\n", 4),       # go doc: adjacent only
    ("A.java", "package p;\n/** doc */\n\nclass A {}\n", 2),
    ("A.cs", "using X;\n/// <summary>doc</summary>\n\nclass A {}\n", 2),
    ("a.cpp", "int x;\n//! doxygen\n\nvoid f() {}\n", 2),
    ("a.rb", "require 'x'\n# Does it.\n\ndef f\nend\n", 2),
    ("a.rb", "# frozen_string_literal: true\n\ndef f\nend\n", 3),
    ("a.rb", "x = 1\n# rubocop:disable Foo\n\ndef f\nend\n", 4),
])
def test_doc_comment_rules_per_language(path: str, text: str, first: int):
    symbols = [c for c in chunk_document(_doc(path, text)) if c.kind != M]
    assert len(symbols) == 1 and symbols[0].start_line == first


# --------------------------------------------------------------------------- parse errors

BROKEN_TS = """import {x} from "y"

/**
 * The produce function.
 */
export interface IProduce {
\t/** curried */
\t<Curried>(
\t\trecipe: Curried,
\t\tinitialState?: Curried
\t): Curried

\t/** from the recipe */
\t<Recipe extends AnyFunc>(recipe: Recipe): InferCurriedFromRecipe<
\t\tRecipe,
\t\tfalse
\t>
}

/**
 * The type for `recipe function`
 */
export type Producer<T> = (draft: T) => T

// Fixes #507
export function never_used() {}
"""


def test_declarations_of_a_tree_with_errors_are_recovered():
    # immer's src/types/types-external.ts: interface call signatures the grammar cannot read
    doc = _doc("src/types/types-external.ts", BROKEN_TS)
    assert _rows(chunk_document(doc)) == [
        ("<module>", M, 1, 1),
        ("IProduce", C, 3, 18),       # still unparsable alone: one class from the text
        ("Producer", C, 20, 23),      # parsed again alone: a type alias with its doc
        ("never_used", F, 25, 26),
    ]
    _check_partition(doc)
    stats = language_stats(chunk_document(doc))
    assert stats["lang/typescript/files_with_errors"] == 1
    assert stats["parse_errors/typescript"] == "src/types/types-external.ts"


def test_files_with_errors_are_counted_and_named():
    ok = _doc("src/ok.ts", "export function f() {}\n")
    docs = [_doc(f"src/b{i}.ts", BROKEN_TS) for i in range(4)] + [ok]
    stats = language_stats([c for d in docs for c in chunk_document(d)])
    assert stats["lang/typescript/files_with_errors"] == 4
    assert stats["parse_errors/typescript"] == "src/b0.ts, src/b1.ts, src/b2.ts"
    line = describe_languages(stats)
    assert "typescript 17 chunks (5 files by symbol, 0 in windows, 4 with parse errors: " \
           "src/b0.ts, src/b1.ts, src/b2.ts, ...)" in line
    # no error: nothing said
    assert "parse errors" not in describe_languages(language_stats(chunk_document(ok)))
    # chunks of no code language (a README beside the code) are counted apart; none: unsaid
    readme = chunk_document(_doc("README.md", "# Shop\n\nA small shop.\n"))
    mixed = {**language_stats(chunk_document(ok)), "chunks": 1 + len(readme)}
    assert f"; other text (docs, config, data) {len(readme)} chunks; symbol coverage" in \
        describe_languages(mixed)
    assert "other text" not in describe_languages({**mixed, "chunks": 1})


def test_module_lines_between_symbols_do_not_make_errors():
    # <module> lines are placed back among symbols without their line numbers: a file that
    # parses must not be counted (a namespace's braces and a multi-line const between members)
    text = ("export namespace util {\n"
            "  export function a() {}\n"
            "\n"
            "  export const keys =\n"
            "    typeof Object.keys === 'function'\n"
            "      ? (o: any) => Object.keys(o)\n"
            "      : (o: any) => [];\n"
            "\n\n\n"
            "  export function b() {}\n"
            "}\n")
    go = "package p\n\ntype (\n\tA int\n\n\n\tB string\n)\n\nvar x = 1\n"
    go2 = "package p\n\ntype (\n\tA int\n\tB string\n)\n\nvar x = 1\n"
    chunks = [c for path, t in (("u.ts", text), ("g.go", go), ("h.go", go2))
              for c in chunk_document(_doc(path, t))]
    stats = language_stats(chunks)
    assert stats["lang/typescript/files_with_errors"] == 0
    assert stats["lang/go/files_with_errors"] == 0


# --------------------------------------------------------------------------- local classes


def test_classes_in_a_top_level_function_are_chunks():
    # immer's enableMapSet: classes declared in a plugin function
    text = ("export function enableMapSet() {\n"   # 1
            "  /** A draft Map. */\n"              # 2
            "  class DraftMap extends Map {\n"     # 3
            "    get(key) {\n"                     # 4
            "      return 1;\n"                    # 5
            "    }\n"                              # 6
            "  }\n"                                # 7
            "  function helper() {}\n"             # 8: a nested function stays
            "  return DraftMap;\n"                 # 9
            "}\n"                                  # 10
            "const f = () => { class L {} };\n")   # 11: arrow functions too
    doc = _doc("src/plugins/mapset.ts", text)
    assert _rows(chunk_document(doc)) == [
        ("enableMapSet", F, 1, 10),                 # 1, 8, 9, 10
        ("enableMapSet.DraftMap", C, 2, 7),         # 2, 3, 7
        ("enableMapSet.DraftMap.get", ME, 4, 6),
        ("f", F, 11, 11),                           # one line: L stays in f
    ]
    _check_partition(doc)
    # methods and Python keep theirs: a class in a method stays in the method
    text = "class A {\n  m() {\n    class B {}\n  }\n}\n"
    assert _rows(chunk_document(_doc("a.ts", text))) == [("A", C, 1, 5), ("A.m", ME, 2, 4)]
    py = "def f():\n    class A:\n        pass\n    return A\n"
    assert _rows(chunk_document(_doc("a.py", py))) == [("f", F, 1, 4)]


def test_caches_are_keyed_by_the_chunking_code_itself(compose, tmp_path):
    """chunker_code is the SHA-256 of the modules that decide what a chunk is, computed here
    by hand; the chunk store's key and an index's recorded settings carry it, so chunks made
    by other code under the same CHUNKER_VERSION are never reused."""
    import hashlib

    from rag.app.stages import index_settings
    from rag.corpus.chunk import chunker_code
    from rag.index.store import store_path

    src = Path(__file__).parents[2] / "rag" / "corpus"
    h = hashlib.sha256()
    for name in ("chunk.py", "languages.py", "walk.py", "secrets.py"):
        h.update(name.encode() + b"\0" + (src / name).read_bytes())
    assert chunker_code() == h.hexdigest()[:16]
    assert index_settings(compose([]))["chunker_code"] == chunker_code()
    a = store_path(tmp_path, tmp_path, {"x": 1})
    assert a == store_path(tmp_path, tmp_path, {"x": 1}) != store_path(tmp_path, tmp_path, {"x": 2})


def test_assigned_functions_are_symbols_only_when_the_target_is_a_name():
    """``app.use = function`` is ``app.use``; a computed member (``app[method]``,
    ``Foo.prototype[Symbol.iterator]``, Lua's ``M["f"]``) or a target that is not a name
    (``f().g``) stays in ``<module>`` instead of claiming its object's name."""
    js = ("function Foo() {}\n"
          "Foo.prototype[Symbol.iterator] = function* () {};\n"
          "app[method] = function (path) {};\n"
          "document.getElementById('x').onclick = function () {};\n"
          "prototype.x = function () {};\n"
          "app.use = function use(fn) { return fn; };\n")
    got = {(c.symbol, c.start_line) for c in chunk_document(
        Document(path="app.js", category="source", text=js, size=len(js)))}
    assert got == {("Foo", 1), ("<module>", 2), ("prototype.x", 5), ("app.use", 6)}
    lua = 'local M = {}\nM["f"] = function() end\nM.g = function() end\nreturn M\n'
    got = {(c.symbol, c.start_line) for c in chunk_document(
        Document(path="m.lua", category="source", text=lua, size=len(lua)))}
    assert got == {("<module>", 1), ("M.g", 3)}
