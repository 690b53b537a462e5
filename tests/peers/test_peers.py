"""Peers through the Retriever contract (rag/peers/): ripgrep as semble benchmarks it, semble
0.7.0 in its own virtual environment, and their reproduction of semble's published local
figures (reference.csv) on the shared suite."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import write_tree
from conftest import ledger_is_empty
from rag.datasets.semble import default_root
from rag.peers import PeerUnavailable
from rag.peers.ripgrep_retriever import RipgrepRetriever, parse_counts
from rag.peers.semble_retriever import DEFAULT_PYTHON, WORKER, SembleRetriever

PROJECT = Path(__file__).resolve().parents[2]
SEMBLE_PY = PROJECT / DEFAULT_PYTHON
# the shared copy of semble's benchmark, found as dataset=semble finds it (beside the project,
# or beside the checkout a clone was made from): a fresh clone elsewhere runs the reproduction
SHARED = default_root() or PROJECT.parent / "shared" / "data" / "semble"
needs_rg = pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep (rg) not installed")
needs_semble = pytest.mark.skipif(not SEMBLE_PY.is_file(),
                                  reason=f"semble 0.7.0 not installed ({DEFAULT_PYTHON}: make peers)")

TREE = {
    "router.go": "// Router\nfunc NewRouter() {}\n// router again\nrouter := x\n",
    "tree.go": "// the radix tree behind the router\n",
    "sub/mux.go": "mux\nROUTER\nrouter\nRouter\n",
    "notes.txt": "nothing here\n",
    "z.go": "router\nrouter\nrouter\n",
}


def _q(text: str, qid: str = "q1") -> SimpleNamespace:
    return SimpleNamespace(id=qid, text=text, types=())


def test_parse_counts_strips_the_root_and_sorts_by_count(tmp_path):
    out = f"{tmp_path}/a.py:3\n{tmp_path}/b.py:5\n{tmp_path}/c:d.py:2\n{tmp_path}/x.py:oops\n"
    assert parse_counts(out, tmp_path) == [("b.py", 5), ("a.py", 3), ("c:d.py", 2)]


@needs_rg
def test_ripgrep_ranks_files_by_matching_lines_as_whole_file_chunks(tmp_path):
    root = write_tree(tmp_path / "repo", TREE)
    rg = RipgrepRetriever(top_k=2)
    rg.open(root)
    res = rg.retrieve(_q("router"), depth=10)
    # case-insensitive, literal, lines counted once each: router.go 4, sub/mux.go 3, z.go 3,
    # tree.go 1; equal counts keep path order (rg --sort path)
    assert [(h.path, h.score) for h in res.ranked] == [("router.go", 4.0), ("sub/mux.go", 3.0),
                                                        ("z.go", 3.0), ("tree.go", 1.0)]
    assert [(h.start_line, h.end_line) for h in res.ranked] == [(1, 4), (1, 4), (1, 3), (1, 1)]
    assert len(res.hits) == 2
    assert rg.retrieve(_q("absent words"), depth=10).reason == "no match"
    # a regex metacharacter is literal in the fixed mode
    assert rg.retrieve(_q("NewRouter()"), depth=10).ranked[0].path == "router.go"


def test_a_missing_peer_is_unavailable_with_the_reason(tmp_path, monkeypatch):
    with pytest.raises(PeerUnavailable, match="semble 0.7.0 is not installed"):
        SembleRetriever(tmp_path / "no-python")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PeerUnavailable, match="no rg on PATH"):
        RipgrepRetriever()


@pytest.mark.slow
def test_a_run_with_a_missing_peer_is_skipped_and_writes_no_row(tmp_path):
    from semble_dataset import make_dataset

    src = make_dataset(tmp_path / "semble")
    out = subprocess.run(
        [sys.executable, "-m", "rag.run", "dataset=semble", f"dataset.path={src}",
         "dataset.repo=chi", "retriever=semble", f"retriever.python={tmp_path / 'nope'}",
         f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}"],
        capture_output=True, text=True, cwd=PROJECT, timeout=300)
    assert out.returncode == 0, out.stderr[-1500:]
    assert "skipped: retriever=semble:" in out.stderr and "make peers" in out.stderr
    db = tmp_path / "out" / "mlflow.db"
    assert not db.exists() or ledger_is_empty(db)


def _worker_answer(root: Path, query: str, top_k: int, mode: str) -> list[tuple]:
    req = json.dumps({"id": "x", "query": query, "top_k": top_k, "mode": mode}) + "\n"
    out = subprocess.run([str(SEMBLE_PY), str(WORKER), str(root)], input=req,
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert json.loads(lines[0])["ready"], out.stderr
    return [(r["file_path"], r["start_line"], r["end_line"])
            for r in json.loads(lines[1])["results"]]


@needs_semble
def test_semble_adapter_returns_sembles_top_ten_first_then_deeper(tmp_path):
    from semble_dataset import SOURCES

    root = write_tree(tmp_path / "repo", {**SOURCES, **{f"extra{i}.go": f"package chi\n// router {i}\n"
                                                        for i in range(12)}})
    peer = SembleRetriever(SEMBLE_PY, mode="ranked", top_k=3)
    peer.open(root)
    try:
        res = peer.retrieve(_q("router"), depth=40)
        got = [(h.path, h.start_line, h.end_line) for h in res.ranked]
        assert got[:10] == _worker_answer(root, "router", 10, "ranked")
        assert len(got) > 10 and len(set(got)) == len(got) and len(res.hits) == 3
        assert peer.tags["retriever_semble_version"] == "0.7.0"
    finally:
        peer.close()
    assert peer.proc is None
    with pytest.raises(PeerUnavailable, match="did not index"):
        SembleRetriever(SEMBLE_PY).open(tmp_path / "missing-dir")


def _reference() -> dict[str, dict[str, str]]:
    with (SHARED / "reference.csv").open() as f:
        return {r["repo"]: r for r in csv.DictReader(f)}


@pytest.mark.integration
@needs_semble
@pytest.mark.skipif(not (SHARED / "repos.json").is_file(), reason="../shared/data/semble absent")
@pytest.mark.parametrize("mode, column", [("ranked", "semble070_bm25_ranked_local"),
                                          ("bm25", "semble070_bm25_local")])
@pytest.mark.slow
def test_semble_through_rag_reproduces_reference_csv(tmp_path, mode, column):
    """Every repository of the shared suite within ±0.005 of semble 0.7.0's own local run."""
    from rag.ledger.mlflow_store import Ledger

    out = subprocess.run(
        [sys.executable, "-m", "rag.run", "+suite=semble", "retriever=semble",
         f"retriever.mode={mode}", f"paths.output_dir={tmp_path / 'out'}"],
        capture_output=True, text=True, cwd=PROJECT, timeout=1500)
    assert out.returncode == 0, out.stderr[-2000:]
    ledger = Ledger(f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}")
    rows = [r for r in ledger.client.search_runs([ledger.experiment_id("rag-semble")])
            if "dataset_repo" in r.data.tags]
    ref = _reference()
    got = {r.data.tags["dataset_repo"]: r.data.metrics["semble_ndcg_at_10"] for r in rows}
    assert set(got) == set(ref)
    off = {repo: (v, float(ref[repo][column])) for repo, v in got.items()
           if abs(v - float(ref[repo][column])) > 0.005}
    assert not off, off
