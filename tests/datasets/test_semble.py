"""semble's benchmark inside rag: the dataset reader (rag/datasets/semble.py), semble's
NDCG@k on the chunks as returned (rag/eval/chunk_metrics.py), the chunk-level run files, the
repository suite's tables (rag/ledger/suite_tables.py) and bad input."""

from __future__ import annotations

import json
import math
import random
import re
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from semble_dataset import ANNOTATIONS, SOURCES, _tarball, make_dataset

from rag.datasets.common import DatasetError
from rag.datasets.semble import check_members, prepare_semble, read_repos, repo_names
from rag.eval.chunk_metrics import (Target, chunk_metrics, ndcg_at_k, path_matches,
                                    semble_ndcg, targets_of)

L2, L3, L4 = math.log2(2), math.log2(3), math.log2(4)


# --- the metric, by hand ------------------------------------------------------------------

def test_path_rule_is_a_suffix_at_a_slash_either_way():
    assert path_matches("lib/router/index.js", "router/index.js")
    assert path_matches("index.js", "lib/index.js")  # semble's looseness, kept
    assert path_matches("a\\b.py", "a/b.py")
    assert not path_matches("ab.py", "b.py") and not path_matches("lib/a.py", "lib/b.py")


def test_ndcg_by_hand_spans_missing_targets_and_one_chunk_for_two_targets():
    chunks = [("a.py", 1, 10), ("b.py", 1, 5), ("a.py", 11, 20)]
    # the span 12-15 of src/a.py is found by the third chunk (the first is a.py but 1-10)
    targets = [Target("src/a.py", ((12, 15),)), Target("b.py")]
    assert semble_ndcg(chunks, targets, 10) == pytest.approx((1 / L3 + 1 / L4) / (1 / L2 + 1 / L3))
    # a target nothing can match still counts in the ideal
    assert semble_ndcg(chunks, [Target("b.py"), Target("gone.py")], 10) == pytest.approx(
        (1 / L3) / (1 / L2 + 1 / L3))
    # two targets found by the same (first) chunk gain once: DCG 1, IDCG 1 + 1/log2(3)
    assert semble_ndcg(chunks, [Target("a.py", ((1, 2),)), Target("a.py", ((9, 9),))], 10) == \
        pytest.approx(1 / (1 + 1 / L3))
    # only the first k chunks are read
    assert semble_ndcg(chunks, [Target("a.py", ((12, 12),))], 2) == 0.0
    assert ndcg_at_k([], 0, 10) == 0.0 and ndcg_at_k([11], 3, 10) == 0.0


def _semble_reference(results, targets, k):
    """semble's benchmarks/metrics.py + data.py, transcribed for this test: the rank of the
    first result covering each target, then NDCG over min(k, n) ideal ones."""
    def matches(fp, target):
        nf, nt = fp.replace("\\", "/"), target[0].replace("\\", "/")
        return nf == nt or nf.endswith(f"/{nt}") or nt.endswith(f"/{nf}")

    ranks = []
    for t in targets:
        for i, (fp, s, e) in enumerate(results[:k], 1):
            if matches(fp, t) and (t[1] is None or not (e < t[1] or s > t[2])):
                ranks.append(i)
                break
    rel = [0] * k
    for r in ranks:
        rel[r - 1] = 1
    dcg = sum(x / math.log2(i + 2) for i, x in enumerate(rel))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(targets))))
    return dcg / ideal if ideal else 0.0


def test_ndcg_equals_sembles_formula_on_random_inputs():
    rng = random.Random(7)
    files = ["a.py", "pkg/a.py", "pkg/b.go", "c/d/e.rs", "e.rs", "x.md"]
    for _ in range(500):
        results = [(rng.choice(files), s := rng.randint(1, 90), s + rng.randint(0, 30))
                   for _ in range(rng.randint(0, 14))]
        targets = []
        for _ in range(rng.randint(1, 5)):
            p = rng.choice(files + ["lib/pkg/a.py", "missing.py"])
            if rng.random() < 0.5:
                s = rng.randint(1, 100)
                targets.append((p, s, s + rng.randint(0, 20)))
            else:
                targets.append((p, None, None))
        mine = [Target(p, None if s is None else ((s, e),)) for p, s, e in targets]
        for k in (5, 10):
            assert semble_ndcg(results, mine, k) == pytest.approx(
                _semble_reference(results, targets, k), abs=1e-12)


def test_targets_of_a_golden_query_cover_files_spans_symbols_and_unresolved():
    from rag.eval.golden import Label

    q = SimpleNamespace(relevant=(Label("a.py"), Label("b.py", lines=(3, 4), spans=((3, 4),)),
                                  Label("c.py", symbol="f", spans=((1, 2), (8, 9)))),
                        unresolved=(Label("lib/gone.py"),))
    assert targets_of(q) == [Target("a.py"), Target("b.py", ((3, 4),)),
                             Target("c.py", ((1, 2), (8, 9))), Target("lib/gone.py")]
    # a corpus that is a subtree of the labels' repository: relevant paths as annotated,
    # so the suffix rule is not looser than semble's (request.rb would match auth/request.rb)
    sub = SimpleNamespace(relevant=(Label("request.rb"),), unresolved=(Label("lib/rack.rb"),))
    assert targets_of(sub, "lib/rack") == [Target("lib/rack/request.rb"), Target("lib/rack.rb")]
    chunks = [("auth/abstract/request.rb", 1, 5), ("request.rb", 1, 9)]
    assert semble_ndcg(chunks, targets_of(sub, "lib/rack"), 10) == pytest.approx(
        (1 / L3) / (1 + 1 / L3))
    assert semble_ndcg(chunks, targets_of(sub), 10) == pytest.approx(1 / (1 + 1 / L3))
    hits = [SimpleNamespace(path="c.py", start_line=5, end_line=8),
            SimpleNamespace(path="a.py", start_line=1, end_line=3)]
    got = chunk_metrics(hits, q)
    assert got["semble_ndcg_at_10"] == pytest.approx((1 + 1 / L3) / (1 + 1 / L3 + 1 / L4 + 1 / math.log2(5)))


# --- a semble dataset in a temporary directory --------------------------------------------

def test_conversion_strips_the_root_keeps_spans_and_unresolved_targets(tmp_path):
    import yaml

    src = make_dataset(tmp_path / "semble")
    prep = prepare_semble(src, repo="chi", name="semble", cache_root=tmp_path / "cache")
    assert (prep.corpus_root / "tree.go").is_file() and not prep.reused
    golden = yaml.safe_load((prep.golden_dir / "queries.yaml").read_text())
    assert golden["corpus"] == "semble-chi" and golden["unindexed"] == "keep"
    assert golden["subtree"] == "src"
    q = {e["id"]: e for e in golden["queries"]}
    assert list(q) == ["chi-001", "chi-002", "chi-003"]
    assert q["chi-001"]["relevant"] == [{"path": "tree.go"}] and q["chi-001"]["tags"] == ["semantic"]
    # category inferred as semble does (one word: symbol); a span becomes lines
    assert q["chi-002"]["tags"] == ["symbol"]
    assert q["chi-002"]["relevant"] == [{"path": "router.go", "lines": [4, 6]}, {"path": "README.md"}]
    # outside benchmark_root, and inside it but not in the snapshot: kept, as annotated
    assert q["chi-002"]["unresolved"] == [{"path": "docs/guide.md"}]
    assert q["chi-003"]["unresolved"] == [{"path": "src/gone.go"}]
    assert prep.manifest["counts"]["labels_unresolved"] == 2 and prep.manifest["counts"]["labels"] == 6
    assert prep.tags["dataset_repo"] == "chi" and prep.tags["dataset_language"] == "go"
    again = prepare_semble(src, repo="chi", name="semble", cache_root=tmp_path / "cache")
    assert again.reused and again.directory == prep.directory
    (src / "annotations" / "chi.json").write_text(json.dumps(ANNOTATIONS[:2]))
    changed = prepare_semble(src, repo="chi", name="semble", cache_root=tmp_path / "cache")
    assert not changed.reused and changed.directory != prep.directory


def test_a_checkout_directory_works_as_a_snapshot(tmp_path):
    src = make_dataset(tmp_path / "semble")
    (src / "snapshots" / "chi.tar.gz").unlink()
    for name, text in SOURCES.items():  # a whole checkout: benchmark_root inside it
        p = src / "snapshots" / "chi" / "src" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    prep = prepare_semble(src, repo="chi", name="semble", cache_root=tmp_path / "cache")
    assert sorted(p.name for p in prep.corpus_root.rglob("*.go")) == ["logger.go", "router.go", "tree.go"]


def _member(name: str, *, kind=tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize("member, message", [
    (_member("/etc/evil"), "member '/etc/evil' has an absolute path"),
    (_member("chi/../../evil"), "member 'chi/../../evil' has a '..' part"),
    (_member("chi/link", kind=tarfile.SYMTYPE, link="../../etc/passwd"), "links to '../../etc/passwd'"),
    (_member("chi/abs", kind=tarfile.SYMTYPE, link="/etc/passwd"), "links to '/etc/passwd'"),
    (_member("chi/hard", kind=tarfile.LNKTYPE, link="other/x"), "links to 'other/x'"),
    (_member("chi/dev", kind=tarfile.CHRTYPE), "is a device or FIFO"),
])
def test_a_hostile_tarball_is_refused_naming_the_member_and_writes_nothing(tmp_path, member,
                                                                           message):
    src = make_dataset(tmp_path / "semble")
    _tarball(src / "snapshots" / "chi.tar.gz", "chi", SOURCES, extra=[member])
    cache = tmp_path / "cache"
    with pytest.raises(DatasetError, match=r"chi\.tar\.gz: .*" + re.escape(message)):
        prepare_semble(src, repo="chi", name="semble", cache_root=cache)
    assert not (tmp_path / "etc").exists() and not (tmp_path / "evil").exists()
    assert not any(cache.rglob("*.go")) if cache.exists() else True


def test_bad_input_is_one_error_naming_the_file_and_entry(tmp_path):
    src = make_dataset(tmp_path / "semble")
    cache = tmp_path / "cache"
    with pytest.raises(DatasetError, match=r"repos\.json: no repository named 'gorilla'.*known: chi"):
        prepare_semble(src, repo="gorilla", name="semble", cache_root=cache)
    (src / "annotations" / "chi.json").write_text('[{"query": "x", "relevant": ["a"]},\n oops]')
    with pytest.raises(DatasetError, match=r"annotations/chi\.json:2: not JSON"):
        prepare_semble(src, repo="chi", name="semble", cache_root=cache)
    (src / "annotations" / "chi.json").write_text(json.dumps([{"query": "x", "relevant": []}]))
    with pytest.raises(DatasetError, match=r"chi\.json: entry 1: query 'x' has no relevant"):
        prepare_semble(src, repo="chi", name="semble", cache_root=cache)
    (src / "annotations" / "chi.json").write_text(json.dumps(
        [{"query": "x", "relevant": [{"path": "a", "start_line": 9, "end_line": 2}]}]))
    with pytest.raises(DatasetError, match=r"entry 1 relevant\[0\]: a span needs"):
        prepare_semble(src, repo="chi", name="semble", cache_root=cache)
    (src / "snapshots" / "chi.tar.gz").unlink()
    with pytest.raises(DatasetError, match=r"snapshots/chi\.tar\.gz: not found"):
        prepare_semble(src, repo="chi", name="semble", cache_root=cache)
    (src / "repos.json").write_text('[{"name": "../x", "language": "go"}]')
    with pytest.raises(DatasetError, match=r"repos\.json: entry 1: 'name' must match"):
        read_repos(src)
    (src / "repos.json").write_text("{")
    with pytest.raises(DatasetError, match=r"repos\.json:1: not JSON"):
        repo_names(src)


def test_check_members_accepts_links_inside_the_tree(tmp_path):
    path = _tarball(tmp_path / "ok.tar.gz", "chi", {"a.go": "x"},
                    extra=[_member("chi/b.go", kind=tarfile.SYMTYPE, link="a.go")])
    with tarfile.open(path) as tar:
        assert check_members(tar, path) == "chi"


# --- end to end: rows, run files, the suite -----------------------------------------------

def _score_outside_rag(jsonl: str, annotations: list[dict], k: int = 10) -> float:
    """semble's rule applied to a row's run.chunks.jsonl and the annotations themselves."""
    by_query = {json.loads(line)["query"]: json.loads(line)["hits"]
                for line in jsonl.splitlines() if line}
    values = []
    for a in annotations:
        targets = [(t, None, None) if isinstance(t, str) else (t["path"], t["start_line"], t["end_line"])
                   for t in a["relevant"] + a["secondary"]]
        hits = by_query[a["query"]]
        values.append(_semble_reference([(h["path"], h["start_line"], h["end_line"]) for h in hits],
                                        targets, k))
    return sum(values) / len(values)


@pytest.mark.slow
def test_a_semble_row_logs_the_metric_and_its_chunk_run_rescores_to_it(tmp_path, compose):
    from rag.ledger.mlflow_store import Ledger
    from test_datasets import _run

    src = make_dataset(tmp_path / "semble")
    metrics = _run(compose, tmp_path, "dataset=semble", f"dataset.path={src}", "dataset.repo=chi")
    assert metrics["n_positives"] == 3 and "abstain_rate" not in metrics
    ledger = Ledger(f"sqlite:///{tmp_path / 'mlflow.db'}")
    row = ledger.client.search_runs([ledger.experiment_id("rag-semble")])[0]
    assert row.data.tags["corpus"] == "semble-chi" and row.data.tags["dataset_repo"] == "chi"
    jsonl = ledger.download_text(row.info.run_id, "run.chunks.jsonl")
    assert metrics["semble_ndcg_at_10"] == pytest.approx(_score_outside_rag(jsonl, ANNOTATIONS))
    assert metrics["semble_ndcg_at_5"] == pytest.approx(_score_outside_rag(jsonl, ANNOTATIONS, 5))
    assert 0 < metrics["semble_ndcg_at_10"] < 1
    trec = ledger.download_text(row.info.run_id, "run.chunks.trec.txt").splitlines()
    first = [ln.split() for ln in trec if ln.startswith("chi-001 ")]
    assert [int(f[3]) for f in first] == list(range(1, len(first) + 1))
    assert all("#L" in f[2] for f in first)
    # rag's own nDCG counts the unresolved targets as relevant too (chi-002: 1 of 3 missing)
    assert metrics["tag.symbol.recall_at_40"] <= 2 / 3 + 1e-9


def test_a_semble_corpus_is_indexed_as_code_unless_the_command_line_says_all(tmp_path, compose):
    """semble's task is set by its config group (conf/dataset/semble.yaml): a code-only index
    (the run's walk skips the snapshot's README.md) and file saturation 0.5; either key given
    on the command line wins (``corpus.content=all`` keeps README.md); without the group the
    defaults are every text file and no saturation."""
    from rag.app.run import run_inputs
    from rag.corpus.walk import walk_corpus, walk_settings
    from rag.search.ranking.options import DEFAULT_FILE_SATURATION, RankingOptions

    src = make_dataset(tmp_path / "semble")
    base = [f"paths.cache_dir={tmp_path / 'cache'}", "dataset=semble", f"dataset.path={src}",
            "dataset.repo=chi"]
    code = ["middleware/logger.go", "router.go", "tree.go"]
    for extra, content, saturation in (([], "code", 0.5),
                                       (["corpus.content=all"], "all", 0.5),
                                       (["ranking.file_saturation=1.0"], "code", 1.0)):
        cfg = compose([*base, *extra])
        root, _, _ = run_inputs(cfg)
        assert walk_settings(cfg.corpus)["content"] == content
        assert RankingOptions.from_config(cfg.ranking).file_saturation == saturation
        paths = sorted(d.path for d in walk_corpus(root, **walk_settings(cfg.corpus)))
        assert paths == (code if content == "code" else sorted([*code, "README.md"]))
    # the suite selects the same group: the same task
    suite = compose(["+suite=semble", f"dataset.path={src}", "dataset.repo=chi"])
    assert walk_settings(suite.corpus)["content"] == "code"
    assert RankingOptions.from_config(suite.ranking).file_saturation == 0.5
    plain = compose([])
    assert walk_settings(plain.corpus)["content"] == "all"
    assert RankingOptions.from_config(plain.ranking).file_saturation == DEFAULT_FILE_SATURATION == 1.0


@pytest.mark.slow
def test_semble_suite_on_another_directory_logs_a_parent_with_tables(tmp_path):
    import subprocess
    import sys

    from rag.ledger.mlflow_store import Ledger

    src = make_dataset(tmp_path / "held-out", repos=("chi", "mux"))
    out = subprocess.run(
        [sys.executable, "-m", "rag.run", "+suite=semble", f"dataset.path={src}",
         "search.mode=bm25", f"paths.output_dir={tmp_path / 'out'}",
         f"paths.cache_dir={tmp_path / 'cache'}", "hydra/launcher=basic"],
        capture_output=True, text=True, cwd=Path(__file__).parents[2], timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "suite semble: semble_ndcg_at_10, macro over repositories" in out.stdout
    ledger = Ledger(f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}")
    runs = ledger.client.search_runs([ledger.experiment_id("rag-held-out")])
    parents = [r for r in runs if r.data.tags.get("rag.sweep_parent")]
    rows = [r for r in runs if not r.data.tags.get("rag.sweep_parent")]
    assert len(parents) == 1 and sorted(r.data.tags["dataset_repo"] for r in rows) == ["chi", "mux"]
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in rows)
    tables = json.loads(ledger.download_text(parents[0].info.run_id, "suite_tables.json"))
    (cfg,) = tables["configs"]
    values = [r.data.metrics["semble_ndcg_at_10"] for r in rows]
    assert cfg["macro"]["semble_ndcg_at_10"] == pytest.approx(sum(values) / 2)
    assert set(cfg["categories"]) == {"semantic", "symbol", "architecture"}
    assert cfg["languages"]["go"]["repos"] == 2
    report = (tmp_path / "out" / "reports" / "ledger.md").read_text()
    assert "| category | repos | queries |" in report and "| chi | go | 3 |" in report


def test_suite_tables_macro_micro_and_significance_by_hand():
    from rag.ledger.suite_tables import suite_tables

    def row(repo, job, value, n, run):
        return SimpleNamespace(run_id=run, experiment="rag-semble", tags={
            "dataset_repo": repo, "dataset_language": "go" if repo != "r3" else "rust",
            "sweep_job": f"dataset.repo={repo} {job}"},
            metrics={"semble_ndcg_at_10": value, "n_positives": n,
                     "tag.symbol.n_queries": 1, "tag.symbol.semble_ndcg_at_10": value})

    rows = [row("r1", "system=a", 0.2, 2, "1"), row("r2", "system=a", 0.4, 6, "2"),
            row("r3", "system=a", 0.9, 2, "3"),
            row("r1", "system=b", 0.3, 2, "4"), row("r2", "system=b", 0.5, 6, "5"),
            row("r3", "system=b", 1.0, 2, "6")]
    t = suite_tables(rows, baseline="system=a")
    a, b = t["configs"]
    assert a["macro"]["semble_ndcg_at_10"] == pytest.approx(0.5)
    assert a["micro"]["semble_ndcg_at_10"] == pytest.approx((0.4 + 2.4 + 1.8) / 10)
    assert a["languages"]["go"]["semble_ndcg_at_10"] == pytest.approx(0.3)
    s = b["significance"]["repos"]
    assert s["delta"] == pytest.approx(0.1) and s["n"] == 3
    # three equal positive differences: 2 of the 8 sign patterns are as extreme (p ~ 0.25)
    assert s["p"] == pytest.approx(0.25, abs=0.02)
    partial = suite_tables(rows[:5], baseline="system=a")
    assert partial["configs"][1]["macro"]["semble_ndcg_at_10"] is None
    assert partial["configs"][1]["repos_with_rows"] == "2/3"


def test_a_suite_over_a_bad_folder_is_one_line_exit_2_and_no_parent(tmp_path):
    import subprocess
    import sys

    src = make_dataset(tmp_path / "bad", repos=("chi", "mux"))
    (src / "annotations" / "mux.json").write_text('[{"query": "x", "relevant": ["a"]},\n oops]')
    out = subprocess.run(
        [sys.executable, "-m", "rag.run", "+suite=semble", f"dataset.path={src}",
         "search.mode=bm25", f"paths.output_dir={tmp_path / 'out'}",
         f"paths.cache_dir={tmp_path / 'cache'}"],
        capture_output=True, text=True, cwd=Path(__file__).parents[2], timeout=600)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: {src}/annotations/mux.json:2: not JSON")
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "out" / "mlflow.db").exists()


def test_reference_figures_sit_beside_the_measured_ones(tmp_path):
    from rag.ledger.suite_tables import reference_figures, render_suite_tables, suite_tables

    (tmp_path / "reference.csv").write_text(
        "repo,language,queries,published_x,semble_local,published_auto\n"
        "r1,go,20,0.5,0.25,0.9\nr2,go,30,0.7,1.0,\n", encoding="utf-8")

    def row(repo, job, value, run):
        return SimpleNamespace(run_id=run, experiment="rag-semble", tags={
            "dataset_repo": repo, "dataset_language": "go", "dataset_path": str(tmp_path),
            "sweep_job": f"dataset.repo={repo} {job}"},
            metrics={"semble_ndcg_at_10": value, "n_positives": 2})

    rows = [row("r1", "system=a", 0.2, "1"), row("r2", "system=a", 0.4, "2")]
    ref = reference_figures(rows)
    # queries (20, 30) are numbers but not in [0, 1]: not a figure
    # an empty cell is no figure for that repository, not the end of the column
    assert ref == {"published_x": {"r1": 0.5, "r2": 0.7}, "semble_local": {"r1": 0.25, "r2": 1.0},
                   "published_auto": {"r1": 0.9}}
    lines = render_suite_tables(suite_tables(rows, reference=ref))
    assert "| r1 | go | 0.200 | 0.500 | 0.250 | 0.900 |" in lines
    assert "| r2 | go | 0.400 | 0.700 | 1.000 | — |" in lines
    # a mean over part of the repositories would mislead: none
    assert "| **macro** | | 0.300 | 0.600 | 0.625 | — |" in lines
    # ... but beside it, each column over the repositories that one has: r1 alone is too few
    assert not any(line.startswith("| **macro, the") for line in lines)
    rows.append(row("r3", "system=a", 0.9, "3"))
    ref = {"published_x": {"r1": 0.5, "r2": 0.7, "r3": 0.3}, "published_auto": {"r1": 0.9, "r3": 0.5}}
    lines = render_suite_tables(suite_tables(rows, reference=ref))
    assert "| **macro** | | 0.500 | 0.500 | — |" in lines
    # (0.2 + 0.9) / 2, (0.5 + 0.3) / 2, (0.9 + 0.5) / 2
    assert ("| **macro, the 2 with published_auto** (without r2) | | 0.550 | 0.400 | 0.700 |"
            in lines)
    assert reference_figures([SimpleNamespace(tags={"dataset_path": str(tmp_path / "no")})]) == {}


def test_an_unknown_repository_is_refused_when_the_config_is_validated(tmp_path, compose):
    from rag.app.config import validate_dataset

    src = make_dataset(tmp_path / "semble")
    validate_dataset(compose(["dataset=semble", f"dataset.path={src}", "dataset.repo=chi"]))
    with pytest.raises(ValueError, match=r"repos.json: no repository named 'chii' "
                                         r"\(dataset.repo\); known: chi"):
        validate_dataset(compose(["dataset=semble", f"dataset.path={src}", "dataset.repo=chii"]))


def test_the_hint_to_search_a_dataset_corpus_names_what_its_group_sets(compose):
    from rag.app.run import dataset_search_overrides

    # conf/dataset/semble.yaml sets these beyond dataset.*; the run's own values are named
    assert dataset_search_overrides(compose(["dataset=semble"])) == [
        "corpus.content=code", "ranking.file_saturation=0.5"]
    assert dataset_search_overrides(compose(["dataset=semble", "ranking.file_saturation=1.0"])) \
        == ["corpus.content=code", "ranking.file_saturation=1.0"]
    # a group in its own package sets dataset.* only; no dataset: nothing
    assert dataset_search_overrides(compose(["dataset=beir"])) == []
    assert dataset_search_overrides(compose([])) == []
