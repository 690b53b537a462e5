"""The ``rag`` subcommands are the modules of rag/app/commands/ (one file each, registered by
listing the folder), in their declared order."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import rag.app.commands as package
from rag.app.cli import build_parser
from rag.app.commands import commands


def test_every_module_of_the_folder_is_a_subcommand_in_its_order():
    files = sorted(i.name for i in pkgutil.iter_modules(package.__path__))
    assert sorted(Path(m.__file__).stem for m in commands()) == files
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices) == [m.NAME for m in commands()]
    assert [m.ORDER for m in commands()] == sorted(m.ORDER for m in commands())
    # the shipped order of `rag --help` (docs/cli.md)
    assert list(sub.choices) == ["run", "report", "diff", "search", "index", "serve",
                                 "completion", "reranker", "ranking", "golden", "gate", "ledger"]


def test_each_subcommand_dispatches_to_its_module():
    parser = build_parser()
    for m in commands():
        argv = {"diff": ["diff", "a", "b"], "search": ["search", "q"],
                "completion": ["completion", "bash"], "gate": ["gate", "a", "b"]}.get(m.NAME, [m.NAME])
        if m.NAME in ("reranker", "ranking", "golden", "ledger"):
            continue  # they need an action; their parsers are tested with them
        args, _ = parser.parse_known_args(argv)
        assert args.func is m.run, m.NAME


def test_a_usage_error_shows_the_usage_of_the_command_as_typed(capsys):
    import pytest

    from rag.app.cli import main

    for argv, usage in ((["search", "foo", "--frobnicate"], "usage: rag search "),
                        (["golden", "review", "--pool", "p", "--golden", "g", "--frobnicate"],
                         "usage: rag golden review "),
                        (["index", "--frobnicate"], "usage: rag index ")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(usage), err
        assert err.rstrip().endswith("unrecognized arguments: --frobnicate")


def test_rag_diff_refuses_a_negative_top_before_reading_the_ledger(capsys, tmp_path):
    import pytest

    from rag.app.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["diff", "a", "b", "--top", "-1", "--tracking-uri", f"sqlite:///{tmp_path}/x.db"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith("argument --top: must be >= 0, got -1")
    assert not (tmp_path / "x.db").exists()
