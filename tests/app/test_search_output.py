"""``rag search``'s table and its rebuild warning (rag/app/search_cli.py)."""

from __future__ import annotations

from types import SimpleNamespace

from rag.app.search_cli import _overrides_of_build, _print_result


def _hit(path, start, end, symbol, bm25):
    return SimpleNamespace(path=path, start_line=start, end_line=end, symbol=symbol,
                           category="source", scores={"bm25": bm25, "rank:path_match": None})


def test_a_long_path_keeps_its_file_name_and_lines(capsys):
    long = "src/main/java/com/google/gson/internal/bind/" + "x/" * 20 + "EnumTypeAdapter.java"
    hits = [_hit(long, 64, 111, "EnumTypeAdapter.EnumTypeAdapter", 15.7),
            _hit("a.py", 1, 2, None, 1.0)]
    res = SimpleNamespace(route="hybrid", dropped=0, weak_match=False, timings_ms={"total": 1.0},
                          hits=hits, reason=None)
    _print_result(res, {"hits": [{}, {"url": "https://example.invalid/a"}]}, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    # the path column is 72 wide: the first 47 + 2 characters give way to "…"
    loc = f"{long}:64-111"
    assert lines[2].startswith(f" 1  …{loc[len(loc) - 71:]} EnumTypeAdapter.EnumTypeAdapter ")
    assert lines[1].split()[:3] == ["#", "path:lines", "symbol"]
    # a score column never printed for any hit is left out; the URL follows its hit
    assert "rank:path_match" not in lines[1] and lines[3].startswith(" 2  a.py:1-2 ")
    assert lines[4] == "    https://example.invalid/a"


def test_the_rebuild_warning_says_which_overrides_give_the_published_build():
    manifest = {"settings": {"corpus": {"content": "code", "exclude": ["a", "b"]},
                             "chunker_version": "8"}}
    assert _overrides_of_build(manifest, ["corpus.content"]) == ["corpus.content=code"]
    # a list or a setting that is no config key: no override list would give that build
    assert _overrides_of_build(manifest, ["corpus.content", "corpus.exclude"]) == []
    assert _overrides_of_build(manifest, ["chunker_version"]) == []
    assert _overrides_of_build({}, ["corpus.content"]) == []
