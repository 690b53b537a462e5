"""Long lines and oversized chunks are split into bounded chunks with exact line numbers.

Every chunker path (Python symbols, Markdown/reST sections, line windows) goes through
``bound_chunk``; the expected lengths and line numbers below are worked out by hand in the
comments. Ordinary input (no line over ``MAX_LINE_CHARS``, no chunk over ``MAX_CHUNK_CHARS``)
must give exactly the chunks it gave before the bounds existed.
"""

from __future__ import annotations

import pytest

from rag.corpus.chunk import (
    MAX_CHUNK_CHARS,
    MAX_LINE_CHARS,
    bound_chunk,
    chunk_document,
    chunk_python,
    chunk_sections,
    chunk_windows,
    split_long_line,
)
from rag.corpus.walk import Document
from rag.index.tokenize import tokenize


def _doc(path: str, text: str, category: str = "source") -> Document:
    return Document(path=path, category=category, text=text, size=len(text.encode()))


def _spans(chunks) -> list[tuple[int, int]]:
    return [(c.start_line, c.end_line) for c in chunks]


def _check_invariants(chunks, text: str) -> None:
    """Bounded, unique ids, every piece of one line inside that line."""
    assert all(len(c.text) <= MAX_CHUNK_CHARS for c in chunks)
    assert len({c.id for c in chunks}) == len(chunks)
    lines = text.splitlines(keepends=True)
    for c in chunks:
        if "@" in c.id:  # a piece of a long line: its text sits at OFFSET in that line
            assert c.start_line == c.end_line and len(c.text) <= MAX_LINE_CHARS
            offset = int(c.id.rsplit("@", 1)[1])
            assert lines[c.start_line - 1][offset:offset + len(c.text)] == c.text


def test_bounds_are_what_the_docs_say():
    assert (MAX_LINE_CHARS, MAX_CHUNK_CHARS) == (4096, 32768)


# --------------------------------------------------------------------------- split_long_line


def test_split_at_whitespace_by_hand():
    # body "alpha beta gamma delta epsilon" (30 chars) + "\n"; max 16 -> 15 for the body.
    # window [7, 15): last space at 10 -> cut 11; window [18, 26): last space at 22 -> cut 23;
    # the remaining 7 characters and the terminator make the last piece
    assert split_long_line("alpha beta gamma delta epsilon\n", 16) == \
        ["alpha beta ", "gamma delta ", "epsilon\n"]


def test_split_at_separator_then_hard_cut_by_hand():
    # 37 chars, no whitespace, no terminator (limit 16): window [8, 16) holds ',' at 9 ->
    # cut 10; window [18, 26) holds ';' at 20 -> cut 21; the last 16 characters fit
    line = "aaaa(bbbb,cccccccccc;dddddddddddddddd"
    assert split_long_line(line, 16) == ["aaaa(bbbb,", "cccccccccc;", "d" * 16]
    # nothing to cut at: exactly max characters (no terminator here)
    assert split_long_line("x" * 40, 16) == ["x" * 16, "x" * 16, "x" * 8]
    # '.', '/' and '-' join identifiers in the tokenizer: the cut goes after the '(' instead
    # (window [8, 16) of "aaaa.bbbb(cccc.dddd.eeee": '(' at 9 -> cut 10)
    assert split_long_line("aaaa.bbbb(cccc.dddd.eeee", 16)[0] == "aaaa.bbbb("


def test_split_keeps_a_crlf_whole_in_the_last_piece():
    # 20 x's + CRLF, max 16: the body gets 14 per piece, so the terminator fits the last one
    assert split_long_line("x" * 20 + "\r\n", 16) == ["x" * 14, "x" * 6 + "\r\n"]
    assert split_long_line("short\n", 16) == ["short\n"]
    with pytest.raises(ValueError):
        split_long_line("x" * 40, 8)


def test_split_never_cuts_an_identifier_when_it_can_avoid_it():
    line = "".join(f"function handleItem{i}(a,b){{return a.value+b}};" for i in range(400)) + "\n"
    pieces = split_long_line(line, 256)
    assert "".join(pieces) == line and all(len(p) <= 256 for p in pieces)
    # BM25 sees the same tokens whether the line is whole or cut
    assert [t for p in pieces for t in tokenize(p)] == tokenize(line)


# --------------------------------------------------------------------------- one 1 MB line


def test_one_megabyte_line_gives_bounded_pieces_of_line_1():
    # 125,000 x "abcdefg " = 1,000,000 characters, then "\n". Body limit 4095: spaces sit at
    # 8k + 7, the last one before 4095 is 4087 -> every cut after 4088 characters (511 units).
    # 244 pieces of 4088 = 997,472; the remaining 2,528 + "\n" = 2,529 is the last piece.
    text = "abcdefg " * 125_000 + "\n"
    chunks = chunk_document(_doc("data/blob.txt", text))
    assert [len(c.text) for c in chunks] == [4088] * 244 + [2529]
    assert _spans(chunks) == [(1, 1)] * 245
    assert chunks[0].id == "data/blob.txt:1-1@0"
    assert chunks[1].id == "data/blob.txt:1-1@4088"
    assert chunks[-1].id == f"data/blob.txt:1-1@{244 * 4088}"
    assert "".join(c.text for c in chunks) == text
    assert {c.kind for c in chunks} == {"window"} and {c.symbol for c in chunks} == {None}
    _check_invariants(chunks, text)


@pytest.mark.parametrize("path", ["blob.py", "blob.md", "blob.rst", "blob.js"])
def test_one_long_line_is_bounded_on_every_chunker_path(path: str):
    # not valid Python, no heading: every path ends in windows, with the same pieces
    text = "abcdefg " * 10_000 + "\n"   # 80,000 chars: 19 pieces of 4088 + 2,329 + "\n"
    chunks = chunk_document(_doc(path, text))
    assert [len(c.text) for c in chunks] == [4088] * 19 + [2329]
    assert _spans(chunks) == [(1, 1)] * 20


# --------------------------------------------------------------------------- huge lines mixed in


def test_a_few_huge_lines_mixed_with_normal_ones():
    # lines 1-70 normal, line 71 huge (9,000 x's: no place to cut -> 4095 + 4095 + 810 + "\n"),
    # lines 72-75 normal, line 76 huge (5,000 chars -> 4095 + 905 + "\n"), line 77 normal.
    # Windows of 60 / overlap 10 over the stretches 1-70 (1-60, 51-70), 72-75, 77-77.
    normal = [f"line {i} of the file\n" for i in range(1, 78)]
    lines = list(normal)
    lines[70] = "x" * 9000 + "\n"
    lines[75] = "y" * 5000 + "\n"
    text = "".join(lines)
    chunks = chunk_windows(_doc("mixed.txt", text), window_lines=60, overlap=10)
    assert _spans(chunks) == [(1, 60), (51, 70), (71, 71), (71, 71), (71, 71), (72, 75),
                              (76, 76), (76, 76), (77, 77)]
    assert [len(c.text) for c in chunks if c.start_line == 71] == [4095, 4095, 811]
    assert [c.id for c in chunks if c.start_line == 76] == ["mixed.txt:76-76@0",
                                                            "mixed.txt:76-76@4095"]
    assert chunks[0].text == "".join(normal[:60])
    assert chunks[5].text == "".join(normal[71:75])
    _check_invariants(chunks, text)


def test_without_long_lines_windows_are_unchanged():
    # the same file with ordinary lines only: windows exactly as before (1-60, 51-77)
    text = "".join(f"line {i} of the file\n" for i in range(1, 78))
    chunks = chunk_windows(_doc("plain.txt", text), window_lines=60, overlap=10)
    assert _spans(chunks) == [(1, 60), (51, 77)]
    assert [c.id for c in chunks] == ["plain.txt:1-60", "plain.txt:51-77"]


def test_line_exactly_at_the_bound_is_not_split():
    at = "z" * (MAX_LINE_CHARS - 1) + "\n"
    over = "z" * MAX_LINE_CHARS + "\n"
    assert _spans(chunk_windows(_doc("a.txt", "a\n" + at + "b\n"))) == [(1, 3)]
    # one character more: line 2 becomes pieces (4095 + 1 + "\n"), lines 1 and 3 windows
    chunks = chunk_windows(_doc("a.txt", "a\n" + over + "b\n"))
    assert _spans(chunks) == [(1, 1), (2, 2), (2, 2), (3, 3)]
    assert [len(c.text) for c in chunks] == [2, 4095, 2, 2]


# --------------------------------------------------------------------------- minified JS


def test_minified_js_bundle():
    # a license comment (line 1), the bundle on one line (line 2), a source-map comment (line 3)
    body = "".join(f"function renderNode{i}(a,b){{var c=a.renderNode{i}(b);return c?c.value:null}};"
                   for i in range(3000))
    text = "/*! lib v1.0 | MIT */\n" + body + "\n//# sourceMappingURL=lib.min.js.map\n"
    chunks = chunk_document(_doc("dist/lib.min.js", text))
    assert chunks[0].text == "/*! lib v1.0 | MIT */\n" and _spans(chunks[:1]) == [(1, 1)]
    assert chunks[-1].text == "//# sourceMappingURL=lib.min.js.map\n"
    assert _spans(chunks[-1:]) == [(3, 3)]
    pieces = chunks[1:-1]
    # every cut lies in the second half of its 4,096-character window
    assert len(body) > 200_000
    assert -(-len(body) // 4096) <= len(pieces) <= -(-len(body) // 2048)
    assert all(c.start_line == c.end_line == 2 for c in pieces)
    assert "".join(c.text for c in pieces) == body + "\n"
    # every cut falls after a space or separator, so no identifier is split and BM25 sees the
    # same tokens
    assert all(c.text[-1] in " {}();,:?+=" for c in pieces[:-1])
    assert [t for c in pieces for t in tokenize(c.text)] == tokenize(body)
    _check_invariants(chunks, text)


# --------------------------------------------------------------------------- Markdown


def test_markdown_giant_paragraph_stays_in_its_section():
    # line 1 heading, 2 blank, 3 "short", 4 blank, 5 the paragraph (200,000 chars + "\n"),
    # 6 blank, 7 "## Usage", 8 blank, 9 "text". 25,000 x "lorem ip": spaces at 8k + 5. The
    # first window [2047, 4095) ends at the space at 4093 -> piece of 4094; every later piece
    # starts just after a space and ends at one, 4088 characters (511 units): 47 of them
    # (192,136), leaving 200,000 - 4,094 - 192,136 = 3,770 + "\n" = 3,771 for the 49th
    para = "lorem ip" * 25_000 + "\n"
    text = "# Intro\n\nshort\n\n" + para + "\n## Usage\n\ntext\n"
    chunks = chunk_sections(_doc("docs/guide.md", text, "documentation"), rst=False)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == \
        [("Intro", 1, 4)] + [("Intro", 5, 5)] * 49 + [("Usage", 7, 9)]
    assert [len(c.text) for c in chunks[1:-1]] == [4094] + [4088] * 47 + [3771]
    assert chunks[0].text == "# Intro\n\nshort\n\n"
    assert all(c.kind == "section" for c in chunks)
    _check_invariants(chunks, text)


def test_rst_section_with_a_long_line():
    # "Title" / "=====" / "" / 6,000 chars (no cut point: 4095 + 1905 + "\n") / "tail"
    text = "Title\n=====\n\n" + "w" * 6000 + "\ntail\n"
    chunks = chunk_sections(_doc("docs/index.rst", text, "documentation"), rst=True)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == \
        [("Title", 1, 3), ("Title", 4, 4), ("Title", 4, 4), ("Title", 5, 5)]
    assert [len(c.text) for c in chunks] == [13, 4095, 1906, 5]


# --------------------------------------------------------------------------- Python


PY_LONG = (
    "import os\n"                      # 1
    "\n"                               # 2
    "def f():\n"                       # 3
    "    x = 1\n"                      # 4
    "    DATA = '" + "ab " * 3000 + "'\n"  # 5: 12 + 9,000 + 2 = 9,014 chars
    "    return x\n"                   # 6
    "\n"                               # 7
    "\n"                               # 8
    "class A:\n"                       # 9
    "    def m(self):\n"               # 10
    "        return 1\n"               # 11
)


def test_python_long_line_inside_a_function():
    chunks = chunk_python(_doc("pkg/data.py", PY_LONG))
    # f: lines 3-4, then line 5 in pieces (cuts after spaces: "    DATA = '" is 12 chars,
    # then "ab " units: the last space before 4095 is at 4094 -> 4095, 4095 (to 8190), then
    # 824 chars incl. "'\n"), then line 6; A: line 9; A.m: 10-11; <module>: line 1
    assert [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks] == [
        ("<module>", "module", 1, 1),
        ("f", "function", 3, 4),
        ("f", "function", 5, 5), ("f", "function", 5, 5), ("f", "function", 5, 5),
        ("f", "function", 6, 6),
        ("A", "class", 9, 9),
        ("A.m", "method", 10, 11),
    ]
    assert [len(c.text) for c in chunks if c.start_line == 5] == [4095, 4095, 824]
    _check_invariants(chunks, PY_LONG)


def test_python_oversized_function_split_at_line_ends():
    # "def big():\n" (11 chars) and 2,000 body lines of 32 chars = 64,011 chars.
    # Greedy packing into <= 32,768: 11 + 1023 x 32 = 32,747 (lines 1-1024); the other 977
    # lines (31,264 chars) fit in one chunk: lines 1025-2001
    body = "".join(f"    v{i:05d} = {10**17 + i}\n" for i in range(2000))
    assert all(len(line) == 32 for line in body.splitlines(keepends=True))
    text = "def big():\n" + body
    chunks = chunk_python(_doc("gen.py", text))
    assert [(c.symbol, c.start_line, c.end_line, len(c.text)) for c in chunks] == \
        [("big", 1, 1024, 32747), ("big", 1025, 2001, 31264)]
    assert [c.id for c in chunks] == ["gen.py:1-1024", "gen.py:1025-2001"]
    assert "".join(c.text for c in chunks) == text


def test_python_ordinary_file_unchanged():
    text = "import os\n\n\ndef f():\n    return 1\n\n\nclass A:\n    x = 1\n\n    def m(self):\n" \
           "        return 2\n"
    chunks = chunk_python(_doc("m.py", text))
    assert [(c.id, c.symbol) for c in chunks] == [
        ("m.py:1-1", "<module>"), ("m.py:4-5", "f"), ("m.py:8-9", "A"), ("m.py:11-12", "A.m")]


# --------------------------------------------------------------------------- bound_chunk


def test_bound_chunk_small_bounds_by_hand():
    doc = _doc("t.txt", "")
    numbered = [(1, "aaaa\n"), (2, "bb " * 10 + "\n"), (4, "cccccc\n"), (5, "dd\n")]
    # max_line 16, max_chunk 20: line 2 (31 chars) is long: body 30, limit 15, spaces at
    # 3k + 2; window [7, 15) ends at the space at 14 -> cut 15; the other 15 + "\n" fit the
    # last piece. Lines 4 and 5 (7 + 3 = 10 <= 20) pack together, numbered 4-5
    out = bound_chunk(doc, numbered, symbol="s", kind="window", max_chunk_chars=20,
                      max_line_chars=16)
    assert [(c.id, c.text) for c in out] == [
        ("t.txt:1-1", "aaaa\n"), ("t.txt:2-2@0", "bb bb bb bb bb "),
        ("t.txt:2-2@15", "bb bb bb bb bb \n"), ("t.txt:4-5", "cccccc\ndd\n")]
    assert bound_chunk(doc, [], symbol=None, kind="window") == []
    assert bound_chunk(doc, [(1, "  \n")], symbol=None, kind="window") == []
    with pytest.raises(ValueError):
        bound_chunk(doc, numbered, symbol=None, kind="window", max_chunk_chars=10,
                    max_line_chars=16)


def test_blank_pieces_are_not_chunks():
    # line 2 is 10,000 spaces: every piece is blank, so only lines 1 and 3 give chunks
    chunks = chunk_windows(_doc("s.txt", "a\n" + " " * 10_000 + "\nb\n"))
    assert [(c.id, c.text) for c in chunks] == [("s.txt:1-1", "a\n"), ("s.txt:3-3", "b\n")]


def test_overlapping_windows_split_by_size_repeat_no_chunk():
    # 8 lines of 10 chars, windows of 4 with overlap 2, chunks of at most 20 chars: each window
    # (40 chars) packs into two 2-line chunks; windows 1-4, 3-6, 5-8 give (1,2) (3,4) | (3,4)
    # (5,6) | (5,6) (7,8), and a chunk an earlier window made is not made again
    text = "".join(f"line {i:04d}\n" for i in range(1, 9))
    assert all(len(line) == 10 for line in text.splitlines(keepends=True))
    chunks = chunk_windows(_doc("w.txt", text), window_lines=4, overlap=2, max_chunk_chars=20,
                           max_line_chars=16)
    assert [c.id for c in chunks] == ["w.txt:1-2", "w.txt:3-4", "w.txt:5-6", "w.txt:7-8"]


@pytest.mark.parametrize("rst", [False, True])
def test_a_title_too_long_for_a_chunk_is_text(rst: bool):
    # line 1 would be a 10,000-char title, repeated in the header of each of its pieces; it is
    # text instead (symbol None, pieces of line 1) and the real title (lines 2-3 or 2-4) follows
    long_title = "word " * 2000
    if rst:
        text = long_title + "\nReal\n====\ntext\n"
        expected_real = ("Real", 2, 4)
    else:
        text = "# " + long_title + "\n## Real\ntext\n"
        expected_real = ("Real", 2, 3)
    chunks = chunk_sections(_doc("doc.rst" if rst else "doc.md", text, "documentation"), rst=rst)
    assert all(c.symbol is None and c.start_line == c.end_line == 1 for c in chunks[:-1])
    assert len(chunks) >= 3
    assert (chunks[-1].symbol, chunks[-1].start_line, chunks[-1].end_line) == expected_real
    assert all(len(c.indexed_text) <= MAX_CHUNK_CHARS for c in chunks)
