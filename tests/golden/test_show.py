"""rag golden show (rag/golden/show.py): a file's chunks and the labels naming them; the
chunk lines below are read off the fixture by hand."""

from __future__ import annotations

import argparse
import json

from conftest import FIXTURE_FILES, write_tree
from rag.golden.show import add_show_parser, file_chunks, show_command


def _args(*argv):
    ap = argparse.ArgumentParser()
    add_show_parser(ap.add_subparsers(dest="action"))
    return ap.parse_args(["show", *argv])


def test_show_lists_chunks_and_their_labels(tmp_path, capsys):
    repo = write_tree(tmp_path / "repo", FIXTURE_FILES)
    got = file_chunks(repo, "src/shop/cart.py")
    assert got["category"] == "source" and got["language"] == "python"
    by = {c["symbol"]: c for c in got["chunks"]}
    assert (by["Cart.total_price"]["start_line"], by["Cart.total_price"]["end_line"]) == (14, 16)
    assert by["Cart.total_price"]["label"] == {"path": "src/shop/cart.py", "symbol": "Cart.total_price"}
    assert by["<module>"]["label"] is None
    assert show_command(_args("src/shop/cart.py", "--path", str(repo))) == 0
    out = capsys.readouterr().out
    assert out.startswith("src/shop/cart.py  (source, python, ")
    assert "  14-16  method    symbol: Cart.total_price\n" in out
    assert "module code: the lines no symbol holds" in out
    assert show_command(_args(str(repo / "src/shop/cart.py"), "--path", str(repo), "--json")) == 0
    assert json.loads(capsys.readouterr().out)["path"] == "src/shop/cart.py"


def test_module_code_between_symbols_is_shown_as_its_own_runs(tmp_path, capsys):
    # Go: the package clause and import (1-3, across the blank line 2) and a var after the
    # type (10) are module code; the type with its doc comment (5-8) is a symbol between
    # them; blank lines 4 and 9 end no run
    repo = write_tree(tmp_path / "repo", {"render/pdf.go": (
        'package render\n\nimport "net/http"\n\n// PDF renders.\ntype PDF struct {\n'
        '\tData []byte\n}\n\nvar pdfType = []string{"application/pdf"}\n')})
    got = {c["kind"]: c for c in file_chunks(repo, "render/pdf.go")["chunks"]}
    assert (got["class"]["start_line"], got["class"]["end_line"]) == (5, 8)
    assert (got["module"]["start_line"], got["module"]["end_line"]) == (1, 10)
    assert got["module"]["runs"] == [[1, 3], [10, 10]]
    assert show_command(_args("render/pdf.go", "--path", str(repo))) == 0
    out = capsys.readouterr().out
    assert "  1-3, 10  module    (module code" in out and "  5-8      class     symbol: PDF" in out
    # a long list of runs is cut in the table (the JSON keeps them all)
    write_tree(repo, {"consts.py": "A = 1\ndef f():\n    pass\nB = 2\ndef g():\n    pass\n"
                                   "C = 3\ndef h():\n    pass\nD = 4\n"})
    assert show_command(_args("consts.py", "--path", str(repo))) == 0
    assert "  1, 4, 7, … (+1)  module" in capsys.readouterr().out
    assert [c.get("runs") for c in file_chunks(repo, "consts.py")["chunks"]][0] == [
        [1, 1], [4, 4], [7, 7], [10, 10]]
    from rag.golden.show import _runs_outside

    assert _runs_outside(1, 20, [(2, 2), (4, 4), (6, 6), (8, 8)]) == [
        [1, 1], [3, 3], [5, 5], [7, 7], [9, 20]]
    assert _runs_outside(1, 6, [(3, 4)], blank={2, 5}) == [[1, 1], [6, 6]]


def test_show_errors(tmp_path, capsys):
    repo = write_tree(tmp_path / "repo", {"a.bin": "x\0y"})
    assert show_command(_args("nope.py", "--path", str(repo))) == 2
    assert "no such file" in capsys.readouterr().err
    assert show_command(_args("a.bin", "--path", str(repo))) == 2
    assert "a binary file" in capsys.readouterr().err
    assert show_command(_args(str(tmp_path / "elsewhere.py"), "--path", str(repo))) == 2
    assert "not under the corpus directory" in capsys.readouterr().err


def test_show_warns_on_a_file_rag_does_not_index(tmp_path, capsys):
    repo = write_tree(tmp_path / "repo", {**FIXTURE_FILES, ".gitignore": "build/\n*.log\n.env\n",
                                          ".env": "TOKEN=x\n"})
    assert show_command(_args(".env", "--path", str(repo))) == 0
    assert "warning: rag does not index .env" in capsys.readouterr().err
    assert show_command(_args("src", "--path", str(repo))) == 2
    assert "is a directory" in capsys.readouterr().err
    assert show_command(_args("src/shop/cart.py", "--path", str(repo))) == 0
    assert "warning" not in capsys.readouterr().err
