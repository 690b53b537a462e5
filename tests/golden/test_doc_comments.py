"""``rag golden mine --from docstrings`` beyond Python: each language's doc comments read by
rag/golden/miners/docstrings.py's doc_comment, and the miner over a small multi-language
corpus. Expected summaries are read off the inputs by hand."""

from __future__ import annotations

import pytest

from rag.golden.miners.docstrings import DOC_SYNTAX, doc_comment, docstring_summary, mine_docstrings


@pytest.mark.parametrize("language, text, doc, n", [
    ("go", "// FullPath returns a matched route full path.\n//\n//\tc.FullPath()\n"
           "func (c *Context) FullPath() string {\n", "FullPath returns a matched route full "
     "path.\n\n\tc.FullPath()", 3),
    ("go", "//go:generate stringer\nfunc F() {}\n", None, None),  # a directive only
    # LuaDoc: --- then -- lines, the @param tag ends it
    ("lua", "--- Create a new picker.\n-- Reads opts.\n-- @param opts table\nfunction M.new(opts)\n",
     "Create a new picker.\nReads opts.", 3),
    # Haddock: -- | then -- lines; the type signature below is not documentation
    ("haskell", "-- | Encode a value\n--   as JSON.\nencode :: a -> ByteString\nencode = go\n",
     "Encode a value\n  as JSON.", 2),
    ("java", "/**\n * Returns the {@link Foo} for a name.\n *\n * @param name the name\n */\n"
             "@Override\npublic Foo get(String name) {\n", "Returns the Foo for a name.", 6),
    ("kotlin", "/** Copies all properties of this query into [other]. */\nfun copy() {}\n",
     "Copies all properties of this query into other.", 1),
    ("csharp", "/// <summary>\n/// Parses the <see cref=\"Header\"/> from a line.\n"
               "/// </summary>\n/// <param name=\"x\">x</param>\npublic Header Parse(string x)\n",
     "Parses the Header from a line.", 4),
    ("rust", "/// Reads a `Config` from [the disk](https://x.test).\n///\n/// # Examples\n"
             "/// ```\n/// x\n/// ```\n#[inline]\npub fn read() {}\n",
     "Reads a Config from the disk.", 7),
    ("rust", "//! The crate.\npub fn f() {}\n", None, None),  # documents the module
    ("typescript", "/** Parse the input into a `ZodType`. */\nexport function parse() {}\n",
     "Parse the input into a ZodType.", 1),
    ("javascript", "// an ordinary comment\nfunction f() {}\n", None, None),
    ("php", "/**\n * Send the response.\n * @return void\n */\nfunction send() {}\n",
     "Send the response.", 4),
    ("ruby", "# Renders the template with locals.\n# @param x\ndef render(x)\n",
     "Renders the template with locals.", 2),
    ("cpp", "/// Erase all elements from the store.\nvoid clear();\n",
     "Erase all elements from the store.", 1),
    ("shell", "# shellcheck disable=SC2034\n# Show how to use this installer\nfunction usage() {\n",
     "Show how to use this installer", 2),
    ("swift", "/// AFError is the error type returned by Alamofire.\npublic enum AFError {\n",
     "AFError is the error type returned by Alamofire.", 1),
])
def test_doc_comment(language, text, doc, n):
    got = doc_comment(text, language)
    assert got == (None if doc is None else (doc, n))


def test_every_language_with_symbols_has_a_doc_comment_reader():
    from rag.corpus.languages import LANGUAGES

    assert {spec.name for spec in LANGUAGES.values()} <= set(DOC_SYNTAX)


def test_mine_docstrings_reads_go_typescript_and_names_what_it_cannot(tmp_path):
    (tmp_path / "router.go").write_text(
        "package gin\n\n// Handle registers a new request handle with the given path.\n"
        "func Handle(path string) {\n}\n\n// ok\nfunc Small() {}\n\nfunc Bare() {}\n")
    (tmp_path / "parse.ts").write_text(
        "/**\n * Parse the header line into a name and a value.\n * @param line the line\n */\n"
        "export function parseHeader(line: string) {\n  return line;\n}\n")
    (tmp_path / "lib.nim").write_text("## Run it all, every time.\nproc run(): int = 1\n")
    res = mine_docstrings(tmp_path, max_candidates=None)
    got = sorted((c["query"], c["relevant"][0]["symbol"], c["kind"]) for c in res.candidates)
    assert got == [
        ("Handle registers a new request handle with the given path.", "Handle", "function"),
        ("Parse the header line into a name and a value.", "parseHeader", "function"),
    ]
    # "ok" is one word; Bare has no comment and is not examined
    assert res.examined == 3 and res.skipped["short_summary"] == 1
    go = next(c for c in res.candidates if c["relevant"][0]["path"] == "router.go")
    # tokens of the query: handle, registers, new, request, given, path (stopwords out);
    # without its comment the chunk is "func Handle(path string) {}": handle, path -> 2/6
    assert go["leakage"] == 1.0 and go["leakage_masked"] == round(2 / 6, 3)
    assert "doc comment summary" in go["note"]
    assert res.warnings == ["no docstrings read from 1 .nim file(s): no doc-comment reader for "
                            "that language (rag/golden/miners/docstrings.py)"]


def test_summary_of_a_go_comment_is_its_first_sentence():
    assert docstring_summary("Handle registers a handle. It panics.\n\nMore.") == \
        "Handle registers a handle."


def test_elixir_docs_are_module_attributes():
    from rag.golden.miners.docstrings import doc_comment

    heredoc = ('  @doc """\n  Puts the status of the connection.\n\n    iex> put(conn)\n  """\n'
               '  @spec put(t) :: t\n  def put(conn), do: conn\n')
    # dedented heredoc; its 5 lines are the doc's
    assert doc_comment(heredoc, "elixir") == (
        "Puts the status of the connection.\n\n  iex> put(conn)", 5)
    assert doc_comment('  @doc "Runs it."\n  def run, do: 1\n', "elixir") == ("Runs it.", 1)
    assert doc_comment("  @doc false\n  def hidden, do: 1\n", "elixir") is None
    assert doc_comment("  def bare, do: 1\n", "elixir") is None
    module = 'defmodule Plug.Conn do\n  @moduledoc ~S"""\n  The connection.\n  """\n'
    assert doc_comment(module, "elixir") == ("The connection.", 4)
    assert doc_comment('  @impl true\n  @doc "Calls."\n  def call(c), do: c\n', "elixir") == \
        ("Calls.", 2)


def test_mine_docstrings_reads_elixir(tmp_path):
    (tmp_path / "lib.ex").write_text(
        'defmodule Lib do\n  @doc """\n  Runs the job and returns its result.\n  """\n'
        "  def run(job), do: job\nend\n")
    res = mine_docstrings(tmp_path, max_candidates=None)
    assert [(c["query"], c["relevant"][0]["symbol"]) for c in res.candidates] == [
        ("Runs the job and returns its result.", "Lib.run")]
    assert res.warnings == []
