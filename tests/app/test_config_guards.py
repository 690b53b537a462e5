"""Hostile or careless configs (issue 27, item 8): a YAML alias bomb in a user's config group
is refused before Hydra reads it (it would hang), and unquoted ``a=b`` / ``a,b`` overrides get
a message that names the override and says how to write it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rag.app.config import (MAX_CONFIG_NODES, check_config_file, check_override_values,
                            config_dirs)


def _bomb(levels: int = 9, width: int = 9) -> str:
    """The "billion laughs" in YAML: each anchor a list of ``width`` aliases of the one
    before; ``width ** levels`` strings once expanded."""
    lines = ["a: &a [" + ",".join(['"lol"'] * width) + "]"]
    prev = "a"
    for name in "bcdefghijklmnop"[:levels - 1]:
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * width) + "]")
        prev = name
    return "\n".join(lines) + "\nname: bomb\n"


def test_an_alias_bomb_is_refused_with_its_expanded_size(tmp_path):
    f = tmp_path / "bomb.yaml"
    f.write_text(_bomb())
    # expanded nodes: the mapping, 10 keys, and per level l (1..9) one list of 9 of level l-1
    lists = [1 + 9]  # level 1: a list of 9 strings
    for _ in range(8):
        lists.append(1 + 9 * lists[-1])
    expected = 1 + 10 + sum(lists) + 1  # the mapping, its 10 keys, the 9 lists, "bomb"
    with pytest.raises(ValueError) as err:
        check_config_file(f)
    assert str(err.value) == (f"{f}: its YAML aliases expand to {expected:,} nodes, more than a "
                              f"config may hold ({MAX_CONFIG_NODES:,}): an alias bomb? refusing "
                              "to load it")


def test_ordinary_anchors_and_large_files(tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text("base: &b {top_k: 8}\nother: *b\nglob: '**/*.py'\n")
    check_config_file(ok)  # a few aliases: fine
    big = tmp_path / "big.yaml"
    big.write_text("x: 1\n" * 10)
    with pytest.raises(ValueError, match=r"big.yaml: 50 bytes, more than a config file may hold "
                                         r"\(40\); refusing to load it"):
        check_config_file(big, max_bytes=40)


def test_a_bomb_in_a_searchpath_group_stops_the_run_in_one_line(tmp_path):
    (tmp_path / "conf" / "corpus").mkdir(parents=True)
    (tmp_path / "conf" / "corpus" / "bomb.yaml").write_text(_bomb())
    proc = subprocess.run(
        [sys.executable, "-m", "rag.run", "corpus=bomb",
         f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "tracking.enabled=false"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        f"error: {tmp_path / 'conf' / 'corpus' / 'bomb.yaml'}: its YAML aliases expand to ")


def test_config_dirs_reads_the_flags_and_the_searchpath(tmp_path):
    from rag.app.config import project_root

    dirs = config_dirs(["-cd", str(tmp_path / "a"), f"--config-path={tmp_path / 'b'}",
                        f"hydra.searchpath=[file://{tmp_path / 'c'},pkg://x.conf]"])
    assert dirs == [project_root() / "conf", tmp_path / "a", tmp_path / "b", tmp_path / "c"]


@pytest.mark.parametrize("arg, message", [
    ("tracking.run_name=a=b",
     "tracking.run_name=a=b: does not parse as an override (mismatched input '=' expecting "
     "<EOF>): its value holds '=', which Hydra's grammar reads as syntax; quote the value: "
     "\"tracking.run_name='a=b'\""),
    ("tracking.run_name=a,b",
     "tracking.run_name=a,b: an unquoted ',' makes a sweep over 2 values, and this is a single "
     "run; a string with a comma is quoted: \"tracking.run_name='a,b'\"; one job per value is a "
     "multirun: add -m (python -m rag.run -m tracking.run_name=a,b)"),
    ("corpus.exclude=a,b",
     "corpus.exclude=a,b: an unquoted ',' makes a sweep over 2 values, and this is a single "
     "run; a list is written corpus.exclude=[a,b]; one job per value is a multirun: add -m "
     "(python -m rag.run -m corpus.exclude=a,b)"),
    ("search.mode=dense,bm25",
     "search.mode=dense,bm25: an unquoted ',' makes a sweep over 2 values, and this is a single "
     "run; one job per value is a multirun: add -m (python -m rag.run -m "
     "search.mode=dense,bm25)"),
])
def test_unquoted_overrides_say_how_to_write_them(arg, message):
    with pytest.raises(ValueError) as err:
        check_override_values([arg])
    assert str(err.value) == message


def test_a_comma_in_a_multirun_is_a_sweep_and_a_list_key_says_how_to_write_a_list():
    check_override_values(["-m", "search.mode=dense,bm25"])
    check_override_values(["+sweep=routing", "search.top_k=3,5"])
    with pytest.raises(ValueError, match=r"a list is written corpus.exclude=\[a,b\]"):
        check_override_values(["-m", "corpus.exclude=a,b"])


def test_null_for_a_key_that_cannot_be_null_names_the_key_and_its_default():
    """``corpus.content=null`` used to be Hydra's "Error merging override ... is not
    Optional"; a key that may be null (``dataset.repo``) still takes it."""
    for arg, default in (("corpus.content=null", "'all'"), ("search.top_k=null", "8")):
        with pytest.raises(ValueError) as err:
            check_override_values([arg])
        key = arg.split("=")[0]
        assert str(err.value) == (f"{key}=null: {key} cannot be null; give a value (the "
                                  f"schema's default is {default}; a config group may set "
                                  "another)")
    check_override_values(["dataset.repo=null", "ranking.model=null"])
    # a config group: Hydra's own message was a traceback ("must be a string or a list")
    with pytest.raises(ValueError, match=r"^dataset=null: a config group takes one of its "
                                         r"options \(conf/dataset/: beir, semble, trec\)"):
        check_override_values(["dataset=null"])


def test_rag_search_refuses_a_bomb_in_a_searchpath_group_too(tmp_path):
    from rag.app.search_cli import compose_config

    (tmp_path / "conf" / "corpus").mkdir(parents=True)
    (tmp_path / "conf" / "corpus" / "bomb.yaml").write_text(_bomb())
    with pytest.raises(ValueError, match="bomb.yaml: its YAML aliases expand to"):
        compose_config(["corpus=bomb", f"hydra.searchpath=[file://{tmp_path / 'conf'}]"])


def test_a_removed_key_says_what_replaced_it():
    from rag.app.config import REMOVED_KEYS, check_override_keys

    with pytest.raises(ValueError, match=r"^config key 'dataset.content' was removed: use "
                                         r"corpus.content"):
        check_override_keys(["dataset=semble", "dataset.content=all"])
    assert set(REMOVED_KEYS) == {"dataset.content"}
