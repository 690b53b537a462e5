"""Each registered ranking feature on hand-built chunks, with values computed by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from rag.search.ranking.chunk_facts import (ChunkFacts, binding_pattern, definition_pattern,
                                            stem_forms, symbol_components)
from rag.search.ranking.feature import RankingContext
from rag.search.ranking.features import FEATURE_NAMES, FEATURES, register
from rag.search.ranking.options import DEFAULT_PRIORS
from rag.search.ranking.query_shape import query_shape


def chunk(path, symbol=None, kind="function", start=1, end=10, category="code", text=""):
    return SimpleNamespace(path=path, symbol=symbol, kind=kind, start_line=start,
                           end_line=end, category=category, text=text)


CHUNKS = [
    chunk("command.go", "Command", kind="class", text="type Command struct {"),        # 0
    chunk("command.go", "Command.ExecuteC", kind="method"),                           # 1
    chunk("doc/usage.md", "Usage", kind="section", category="documentation",
          text="call ExecuteC to run"),                                                # 2
    chunk("internal/radix/tree.go", "node.insert", kind="method"),                    # 3
    chunk("lib/router.ex", None, kind="window", text="defmodule Phoenix.Router do"),   # 4
    chunk("command_test.go", "TestExecuteC", category="test"),                        # 5
    chunk("pkg/__init__.py", "<module>", kind="module"),                               # 6
    chunk("types/index.d.ts", "Handler", kind="class", text="interface Handler {"),   # 7
]


def ctx(query, base, *, scan=True, chunks=CHUNKS, priors=DEFAULT_PRIORS):
    return RankingContext(shape=query_shape(query), chunks=chunks,
                          facts=ChunkFacts.of(chunks), base=base, priors=priors, scan=scan)


def test_registry_names_every_feature_once():
    assert FEATURE_NAMES == ("definition", "embedded_identifier", "path_match",
                             "file_coherence", "file_semantic", "category_prior",
                             "chunk_length")
    assert all(FEATURES[n].name == n and FEATURES[n].combine in ("add", "scale")
               for n in FEATURE_NAMES)
    with pytest.raises(ValueError, match="registered twice"):
        register(FEATURES["definition"])


def test_chunk_facts_name_stem_and_definition():
    f = ChunkFacts.of(CHUNKS)
    assert f.stems[:2] == ["command", "command"] and f.stems[3] == "tree"
    # the last component of a qualified symbol; modules, sections and windows define nothing
    assert f.defined == ["Command", "ExecuteC", None, "insert", None, "TestExecuteC", None,
                         "Handler"]
    assert f.by_defined["ExecuteC"] == [1] and f.by_stem["command"] == [0, 1]
    assert stem_forms("routers") == {"routers", "router"}
    assert stem_forms("radix_tree") == {"radix_tree", "radixtree"}
    # a window is a definition when a keyword introduces the name in its text
    assert f.defines(4, CHUNKS[4], frozenset({"Router"}))
    assert not f.defines(2, CHUNKS[2], frozenset({"ExecuteC"}))   # a mention, not a definition
    assert definition_pattern("Router").search("  class Router(Base):")
    assert not definition_pattern("Router").search("class RouterBase:")


@pytest.mark.parametrize("name, text, defines", [
    # Lua: a method, a module function, a local function, a function assigned to a field
    ("new", "function Picker:new(opts)", True),
    ("setup", "function M.setup(opts)", True),
    ("helper", "local function helper(x)", True),
    ("run", "M.run = function(a, b)", True),
    ("run", "x = run(1)", False),
    # Zig: types bound to constants, a function; an import is not a type
    ("Allocator", "pub const Allocator = struct {", True),
    ("Kind", "pub const Kind = enum { a, b };", True),
    ("Err", "const Err = error{ OutOfMemory };", True),
    ("std", 'const std = @import("std");', False),
    ("append", "    pub fn append(self: *Self, item: T) !void {", True),
    # Haskell: data, newtype, class, a signature (top level or in a class body)
    ("Value", "data Value = Object Object", True),
    ("Parser", "newtype Parser a = Parser { runParser :: String }", True),
    ("ToJSON", "class ToJSON a where", True),
    ("encode", "encode :: ToJSON a => a -> ByteString", True),
    ("toJSON", "    toJSON :: a -> Value", True),
    ("encode", "  x = encode :: Int", False),
    # a C++ qualified call is not a signature
    ("bar", "Foo::bar()", False),
    # prose and values that look like the Haskell or Zig forms are not definitions
    ("model", "# load the data model first", False),
    ("race", "// avoid a data race", False),
    ("message", "    const message = error.message;", False),
    ("err", "    const err = error.OutOfMemory;", False),
    ("Value", "  data Value = Object", False),
    # a module-level binding at a line's first column defines the name; a local, a field,
    # a comparison, an arrow and an import do not
    ("EXCLUDE", 'EXCLUDE: typing.Final = "exclude"', True),
    ("missing", "missing = _Missing()", True),
    ("VERSION", 'export const VERSION = "1.0";', True),
    ("MAX", "pub const MAX: usize = 8;", True),
    ("EXCLUDE", '    EXCLUDE = "exclude"', False),
    ("x", "x == 3", False),
    ("x", "x => 1", False),
    ("path", 'const path = require("path");', False),
    ("std", 'const std = @import("std");', False),
    # Go's const / var blocks, Rust, Kotlin, Lua, C
    ("DebugMode", 'const (\n\t// DebugMode is debug.\n\tDebugMode = "debug"\n)', True),
    ("Mode", "var (\n\tx int\n\tMode Mode = 3\n)", True),
    ("y", "func f() {\n\ty = 3\n}", False),
    ("MAGIC", 'pub const MAGIC: [u8; 4] = *b"abcd";', True),
    ("X", "static mut X: u32 = 0;", True),
    ("VERSION", 'private const val VERSION = "1"', True),
    ("Picker", "local Picker = {}", True),
    ("MAX", "#define MAX 10", True),
    # a keyword ending a comment line does not define the name that starts the next line
    ("load", "# Check load is a distinct object\n        load['foo'] = 'baz'", False),
    ("Router", "see the class\nRouter(app)", False),
])
def test_definitions_in_languages_rag_windows(name, text, defines):
    found = definition_pattern(name).search(text) or binding_pattern(name).search(text)
    assert bool(found) is defines


def test_a_binding_defines_a_name_in_code_only():
    """``Note: set FOO=1`` in a Markdown section or ``url: x?a=1`` in YAML is not a binding;
    the same text in a source chunk is."""
    chunks = [chunk("docs/setup.md", "Setup", kind="section", category="documentation",
                    text="Note: set FOO=1 first"),
              chunk("conf/app.yaml", None, kind="window", category="config",
                    text="url: https://x.org/?a=1"),
              chunk("src/mode.py", "<module>", kind="module", category="source",
                    text='Note: str = "x"\nurl = "https://x.org"\n')]
    f = ChunkFacts.of(chunks)
    assert not f.defines(0, chunks[0], frozenset({"Note"}))
    assert not f.defines(1, chunks[1], frozenset({"url"}))
    assert f.defines(2, chunks[2], frozenset({"Note"}))
    assert f.defines(2, chunks[2], frozenset({"url"}))


def test_definition_finds_the_definition_outside_the_candidates():
    feat = FEATURES["definition"]
    # ExecuteC: chunk 1 defines it (stem 'command' != 'executec': value 1); with scan it is
    # added though the first stage returned only the docs and the test
    assert feat.compute(ctx("ExecuteC", {2: 1.0, 5: 0.5})) == {1: 1.0}
    assert feat.compute(ctx("ExecuteC", {2: 1.0, 5: 0.5}, scan=False)) == {}
    # Command: defined in command.go, whose stem is the name (+0.5), by a symbol that is the
    # whole query (+0.5): 2.0
    assert feat.compute(ctx("Command", {})) == {0: 2.0}
    # a window (no symbol) defining Phoenix.Router in router.ex: 1 + the stem bonus
    assert feat.compute(ctx("Phoenix.Router", {4: 1.0})) == {4: 1.5}
    # Engine: the type named Engine (whole symbol, 1.5) before a method Engine of another
    # type (its last component only, 1.0); neither file's stem is 'engine'
    engines = [chunk("binding/validator.go", "defaultValidator.Engine", kind="method"),
               chunk("gin.go", "Engine", kind="class")]
    assert feat.compute(ctx("Engine", {0: 1.0, 1: 0.9}, chunks=engines)) == {0: 1.0, 1: 1.5}
    # a qualified query: the symbol with all of its components, whatever the separator
    pops = [chunk("ctx.py", "AppContext.pop", kind="method"),
            chunk("ctx.py", "RequestContext.pop", kind="method")]
    assert feat.compute(ctx("AppContext::pop", {0: 1.0, 1: 1.0}, chunks=pops)) == {0: 1.5,
                                                                                 1: 1.0}
    assert feat.compute(ctx("how is a command executed", {0: 1.0})) == {}


def test_symbol_components_whatever_the_separator():
    assert symbol_components("Sinatra::Base") == symbol_components("Sinatra.Base") \
        == ("Sinatra", "Base")
    assert symbol_components("App\\Http->handle") == ("App", "Http", "handle")
    assert symbol_components("url_for") == ("url_for",)


def test_embedded_identifier_in_prose():
    feat = FEATURES["embedded_identifier"]
    assert feat.compute(ctx("where does ExecuteC parse flags", {2: 1.0})) == {1: 1.0}
    assert feat.compute(ctx("where does execution parse flags", {2: 1.0})) == {}
    assert feat.compute(ctx("ExecuteC", {2: 1.0})) == {}   # an identifier query: definition's


def test_path_match_share_of_keywords_with_morphology():
    feat = FEATURES["path_match"]
    # keywords {radix, tree, path, matching}: tree.go's parts {tree, radix} match 2 of 4
    assert feat.compute(ctx("radix tree path matching", {3: 1.0, 0: 1.0})) == {3: 0.5}
    # 'commands' ~ 'command' (shared prefix >= 3 letters), 1 of {commands, run}
    got = feat.compute(ctx("commands run", {0: 1.0, 3: 1.0}))
    assert got == {0: 0.5}
    assert feat.compute(ctx("Command", {0: 1.0})) == {}


def test_file_coherence_sums_a_files_first_stage_mass():
    feat = FEATURES["file_coherence"]
    # command.go: 0.6 + 0.3 = 0.9 (best chunk 0, value 1); tree.go 0.45 / 0.9; usage.md 0.2 / 0.9
    got = feat.compute(ctx("x y z", {0: 0.6, 1: 0.3, 3: 0.45, 2: 0.2}))
    assert got == {0: 1.0, 3: pytest.approx(0.5), 2: pytest.approx(0.2 / 0.9)}


def test_file_semantic_is_the_cosine_with_each_files_centroid():
    import numpy as np

    feat = FEATURES["file_semantic"]
    # a.py: two orthogonal unit chunks (centroid (0.5, 0.5), norm 1/sqrt(2)); b.py: one chunk
    # at (0.6, 0.8); c.py: one chunk (1, 0), never a candidate
    chunks = [chunk("a.py"), chunk("a.py"), chunk("b.py"), chunk("c.py")]
    matrix = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [1.0, 0.0]], dtype=np.float32)
    index = SimpleNamespace(chunks=chunks, dense=SimpleNamespace(matrix=matrix))
    q = np.array([0.0, 1.0])
    dense = matrix @ q  # every chunk's cosine: 0, 1, 0.8, 0

    def run(query, base, channels=None):
        return feat.compute(RankingContext(
            shape=query_shape(query), chunks=chunks, facts=ChunkFacts.of(chunks), base=base,
            channels={"dense": dense} if channels is None else channels, index=index))

    # a.py: mean cosine 0.5 / norm 0.7071 = 0.7071 (its centroid's cosine with q); b.py: 0.8.
    # Min-max over the two candidate files: a.py 0, b.py 1; every candidate chunk of a file
    # gets its file's value, chunk 1 (a.py, not a candidate) nothing
    assert run("how are tokens parsed", {0: 1.0, 2: 0.5}) == {0: 0.0, 2: 1.0}
    # with c.py a candidate too (cosine 0): a.py (0.7071 - 0) / 0.8 between
    got = run("how are tokens parsed", {0: 1.0, 1: 0.2, 2: 0.5, 3: 0.1})
    assert got == pytest.approx({0: 0.5 ** 0.5 / 0.8, 1: 0.5 ** 0.5 / 0.8, 2: 1.0, 3: 0.0})
    # under an ANN (-inf: chunks it did not score) a file with an unscored chunk has no
    # centroid cosine: a.py is left out, b.py and c.py remain (c.py 0, b.py 1)
    ann = dense.copy()
    ann[1] = -np.inf
    got = run("how are tokens parsed", {0: 1.0, 2: 0.5, 3: 0.1}, channels={"dense": ann})
    assert got == {2: 1.0, 3: 0.0}
    # nothing for an identifier query, without the dense channel, or with one file
    assert run("parseTokens", {0: 1.0, 2: 0.5}) == {}
    assert run("how are tokens parsed", {0: 1.0, 2: 0.5}, channels={}) == {}
    assert run("how are tokens parsed", {0: 1.0, 1: 0.5}) == {}


def test_category_prior_multiplies_category_and_path_marks():
    feat = FEATURES["category_prior"]
    base = {0: 1.0, 2: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}
    got = feat.compute(ctx("x", base, priors={**DEFAULT_PRIORS, "documentation": 0.3}))
    # code at command.go: 1 (left out); docs 0.3 (as set); test 0.3; __init__.py re-export
    # 0.5; a .d.ts declaration 0.7
    assert got == {2: 0.3, 5: 0.3, 6: 0.5, 7: 0.7}
    # by default documentation has no prior (options.py): the docs chunk is left out
    assert feat.compute(ctx("x", base)) == {5: 0.3, 6: 0.5, 7: 0.7}
    assert feat.compute(ctx("x", {5: 1.0}, priors={"test": 0.5, "compat": 0.1})) == {5: 0.5}


def test_chunk_length_is_log_scaled_and_capped():
    feat = FEATURES["chunk_length"]
    chunks = [chunk("a.py", start=1, end=1), chunk("a.py", start=1, end=10),
              chunk("a.py", start=1, end=900)]
    got = feat.compute(ctx("x", {0: 1.0, 1: 1.0, 2: 1.0}, chunks=chunks))
    assert got == {0: 0.0, 1: pytest.approx(math.log(10) / math.log(201)), 2: 1.0}
