"""rag on a repository of semble's benchmark (../shared/data/semble, cobra): the exact lookups
a new user types first. Skipped where the shared copy of the benchmark is absent. Select with
``pytest -m integration``."""

from __future__ import annotations

import json
import tarfile

import pytest

from rag.datasets.semble import default_root

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cobra(tmp_path_factory):
    root = default_root()
    snapshot = root / "snapshots" / "cobra.tar.gz" if root else None
    if snapshot is None or not snapshot.is_file():
        pytest.skip("semble's benchmark (../shared/data/semble/snapshots/cobra.tar.gz) is absent")
    into = tmp_path_factory.mktemp("cobra")
    with tarfile.open(snapshot) as tar:
        tar.extractall(into, filter="data")
    (repo,) = [p for p in into.iterdir() if p.is_dir()]
    return repo


def _search(query, repo, capsys, *extra):
    from rag.app.cli import main

    assert main(["search", query, "-r", str(repo), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_identifier_lookup_ranks_its_definition_first(cobra, capsys):
    out = _search("ExecuteC", cobra, capsys)
    top = out["hits"][0]
    assert (top["path"], top["symbol"]) == ("command.go", "Command.ExecuteC")
    assert top["scores"]["rank:definition"] == 1.0


def test_a_term_in_most_chunks_still_returns_chunks(cobra, capsys):
    # 'command' is in most of cobra's chunks (Okapi's IDF is 0 there): Lucene's IDF, the
    # fallback and the definition feature answer it, with the type's definition first
    for mode in ([], ["--mode", "bm25"], ["--mode", "auto"]):
        out = _search("Command", cobra, capsys, *mode)
        assert out["hits"], mode
        assert (out["hits"][0]["path"], out["hits"][0]["symbol"]) == ("command.go", "Command")
