"""Datasets in (issue 12): ``dataset=beir`` and ``dataset=trec`` convert a BEIR folder or TREC
topics + qrels into the cache and evaluate them; ``rag golden export`` then ``dataset=...``
gives back the original row's ranking metrics exactly."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from conftest import ledger_is_empty, write_tree
from rag.app.cli import main as rag_cli
from rag.datasets.beir import mapped_path, original_doc_id, prepare_beir
from rag.datasets.common import DatasetError
from rag.datasets.trec import corpus_checker, prepare_trec, read_topics
from rag.eval.golden import Label, load_golden


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _beir(root: Path, *, corpus: list[dict], queries: list[dict], qrels: list[str],
          split: str = "test", negatives: list[dict] | None = None) -> Path:
    files = {"corpus.jsonl": _jsonl(corpus), "queries.jsonl": _jsonl(queries),
             f"qrels/{split}.tsv": "query-id\tcorpus-id\tscore\n" + "".join(q + "\n" for q in qrels)}
    if negatives is not None:
        files["negatives.jsonl"] = _jsonl(negatives)
    return write_tree(root, files)


# non-path ids, a title, a query without qrels, a graded and a non-relevant judgement
TINY_CORPUS = [
    {"_id": "doc1", "title": "Flask", "text": "A micro web framework."},
    {"_id": "../up", "title": "", "text": "outside the folder?"},
    {"_id": "d 3", "text": "line one\nline two\n"},
]
TINY_QUERIES = [{"_id": "q1", "text": "what is flask"}, {"_id": "q2", "text": " the parent "},
                {"_id": "q3", "text": "never judged"}]
TINY_QRELS = ["q1\tdoc1\t2", "q1\td 3\t0", "q2\t../up\t1", "q2\td 3\t1"]


def test_beir_fixture_is_converted_into_files_and_a_golden_set(tmp_path, capsys):
    src = _beir(tmp_path / "tiny", corpus=TINY_CORPUS, queries=TINY_QUERIES, qrels=TINY_QRELS)
    cache = tmp_path / "cache" / "datasets"
    p = prepare_beir(src, split="test", name="tiny", cache_root=cache)
    assert not p.reused and p.directory.parent == cache
    assert re.fullmatch(r"tiny-beir-[0-9a-f]{16}", p.directory.name)
    assert p.directory.name.endswith(p.fingerprint[:16])
    up = mapped_path("../up")
    assert up.startswith("_ids/") and ".." not in up and up.count("/") == 1
    files = {str(f.relative_to(p.corpus_root)): f.read_bytes()
             for f in p.corpus_root.rglob("*") if f.is_file()}
    # not a file tree: every id is mapped; a title goes before the text, joined by one space
    assert files == {"_ids/doc1": b"Flask A micro web framework.", up: b"outside the folder?",
                     "_ids/d_203": b"line one\nline two\n"}
    assert sorted(f.name for f in p.directory.iterdir()) == ["corpus", "golden", "manifest.json"]
    golden = load_golden(p.golden_dir, corpus_paths=set(files))
    assert golden.corpus == "tiny"
    assert [(q.id, q.query, q.relevant) for q in golden.positives] == [
        ("q1", "what is flask", (Label(path="_ids/doc1", grade=2),)),
        ("q2", "the parent", (Label(path=up), Label(path="_ids/d_203")))]
    assert golden.negatives == []  # no negatives.jsonl: abstention rates n/a, not 0
    m = p.manifest
    assert m["ids"] == {"_ids/doc1": "doc1", up: "../up", "_ids/d_203": "d 3"}
    assert m["counts"] == {"queries": 3, "positives": 2, "unjudged": 1, "labels": 3,
                           "non_relevant": 1, "negatives": 0, "documents": 3, "files": 3,
                           "qrels_queries_not_in_topics": 0,
                           "mapped": 3, "symbol_documents": 0}
    assert original_doc_id("_ids/d_203", m) == "d 3" and original_doc_id(up, m) == "../up"
    assert "1 of 3 queries in queries.jsonl have no relevant judgement in qrels/test.tsv: " \
           "not evaluated" in p.summary()
    assert p.tags["dataset_format"] == "beir" and p.tags["dataset_path"] == str(src)
    assert p.tags["dataset_fingerprint"] == p.fingerprint
    # unchanged: reused; a changed file: a new folder, the old one kept
    again = prepare_beir(src, split="test", name="tiny", cache_root=cache)
    assert again.reused and again.directory == p.directory
    (src / "queries.jsonl").write_text(_jsonl(TINY_QUERIES[:2]))
    changed = prepare_beir(src, split="test", name="tiny", cache_root=cache)
    assert not changed.reused and changed.directory != p.directory and p.directory.is_dir()
    assert changed.manifest["counts"]["unjudged"] == 0
    assert not [f for f in cache.iterdir() if f.name.startswith(".")]  # no temp folder left


def test_beir_file_tree_ids_are_paths(tmp_path):
    corpus = [{"_id": "src/app.py", "text": "def run():\n    return 1\n"},
              {"_id": "PKG-INFO", "text": "Name: app\n"},
              {"_id": "src", "text": "a file named like a folder"},
              {"_id": "src/app.py#run", "text": "def run():\n    return 1\n"},
              {"_id": "src/app.py#nope", "text": "not a symbol"},
              {"_id": "/etc/x", "text": "absolute"}]
    src = _beir(tmp_path / "tree", corpus=corpus, queries=[{"_id": "q", "text": "run"}],
                qrels=["q\tsrc/app.py#run\t1", "q\tPKG-INFO\t1", "q\tsrc/app.py#nope\t1"])
    p = prepare_beir(src, split="test", name="tree", cache_root=tmp_path / "c")
    files = sorted(str(f.relative_to(p.corpus_root)) for f in p.corpus_root.rglob("*") if f.is_file())
    assert files == sorted(["src/app.py", "PKG-INFO", mapped_path("src"),
                            mapped_path("src/app.py#nope"), mapped_path("/etc/x")])
    golden = load_golden(p.golden_dir)
    assert golden.positives[0].relevant == (
        Label(path="src/app.py", symbol="run"), Label(path="PKG-INFO"),
        Label(path=mapped_path("src/app.py#nope")))
    assert p.manifest["symbol_documents"] == {"src/app.py#run": ["src/app.py", "run"]}
    assert original_doc_id("src/app.py#run", p.manifest) == "src/app.py#run"


@pytest.mark.parametrize("change, message", [
    (lambda d: (d / "corpus.jsonl").unlink(), r"corpus\.jsonl: not found"),
    (lambda d: (d / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{"_id": "b", \n'),
     r"corpus\.jsonl:2: not a JSON object"),
    (lambda d: (d / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n'),
     r"corpus\.jsonl:2: doc id 'a' repeats line 1"),
    (lambda d: (d / "queries.jsonl").write_text('{"_id": "q1"}\n'),
     r"queries\.jsonl:1: query 'q1' needs a non-empty 'text'"),
    (lambda d: (d / "qrels" / "test.tsv").write_text("q1\tzz\t1\n"),
     r"test\.tsv:1: document 'zz' is not in .*corpus\.jsonl"),
    (lambda d: (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t0\n"),
     r"test\.tsv: no relevant judgement .* an empty split"),
    (lambda d: (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1 a 1\n"),
     r"test\.tsv:2: expected query-id<TAB>corpus-id<TAB>score"),
    (lambda d: (d / "qrels" / "test.tsv").rename(d / "qrels" / "dev.tsv"),
     r"test\.tsv: not found \(splits in .*: dev; pass dataset\.split=NAME\)"),
])
def test_beir_errors_name_the_file_and_line(tmp_path, change, message):
    src = _beir(tmp_path / "bad", corpus=[{"_id": "a", "text": "x"}],
                queries=[{"_id": "q1", "text": "x"}], qrels=["q1\ta\t1"])
    change(src)
    with pytest.raises(DatasetError, match=message):
        prepare_beir(src, split="test", name="bad", cache_root=tmp_path / "c")
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def test_trec_topics_formats(tmp_path):
    tsv = write_tree(tmp_path, {"t.tsv": "1\thow  do I\tdeploy\n\n2\tx\n"}) / "t.tsv"
    assert [(t.id, t.text, t.where) for t in read_topics(tsv)] == [
        ("1", "how do I deploy", f"{tsv}:1"), ("2", "x", f"{tsv}:3")]
    sgml = write_tree(tmp_path, {"t.sgml": textwrap.dedent("""\
        <top>
        <num> Number: 301
        <title> International Organized
        Crime
        <desc> Description:
        Identify organizations.
        </top>

        <top>
        <num> Number: 302 </num>
        <title> Topic: Poliomyelitis </title>
        </top>
        <topic number="7" type="x"><query>covid origin</query><question>where?</question></topic>
        """)}) / "t.sgml"
    assert [(t.id, t.text, t.where) for t in read_topics(sgml)] == [
        ("301", "International Organized Crime", f"{sgml}:1"),
        ("302", "Poliomyelitis", f"{sgml}:9"), ("7", "covid origin", f"{sgml}:13")]
    bad = write_tree(tmp_path, {"b.tsv": "1\tok\n2 no tab\n"}) / "b.tsv"
    with pytest.raises(DatasetError, match=r"b\.tsv:2: expected qid<TAB>query text"):
        read_topics(bad)


def test_trec_errors_name_the_file_and_line(tmp_path, fixture_repo):
    topics = write_tree(tmp_path, {"t.tsv": "q1\tvoucher\n"}) / "t.tsv"
    check = corpus_checker(lambda: fixture_repo)

    def run(qrels: str):
        f = write_tree(tmp_path, {"q.txt": qrels}) / "q.txt"
        return prepare_trec(topics, f, negatives=None, name="t", cache_root=tmp_path / "c",
                            check=check)

    for qrels, message in [
        ("q1 0 src/shop/nope.py 1\n", r"q\.txt:1: document 'src/shop/nope.py' is not in the corpus"),
        ("q1 0 src/shop/cart.py#Cart.nope 1\n", r"q\.txt:1: .* has no symbol 'Cart\.nope'"),
        ("q1 0 src/shop/cart.py one\n", r"q\.txt:1: relevance 'one' is not an integer"),
        ("q1 src/shop/cart.py 1\n", r"q\.txt:1: expected 'qid iteration docno relevance'"),
        ("q1 0 src/shop/cart.py 0\n", r"q\.txt: no relevant judgement .* an empty split"),
    ]:
        with pytest.raises(DatasetError, match=message):
            run(qrels)
    with pytest.raises(DatasetError, match=r"nowhere\.txt: not found"):
        prepare_trec(topics, tmp_path / "nowhere.txt", negatives=None, name="t",
                     cache_root=tmp_path / "c")
    ok = run("q1 0 src/shop/cart.py#apply_discount_code 2\nq1 0 docs/guide.md#Deploying%20the%20shop 1\n")
    assert load_golden(ok.golden_dir).positives[0].relevant == (
        Label(path="src/shop/cart.py", symbol="apply_discount_code", grade=2),
        Label(path="docs/guide.md", symbol="Deploying the shop"))


# graded labels over files, Python symbols and a Markdown section with spaces, so that the
# ranking metrics are not all 1 and every kind of label goes through both formats
ROUND_TRIP_QUERIES = textwrap.dedent('''\
    corpus: shop
    queries:
      - id: refund-money
        query: give the customer their money back
        tags: [prose]
        relevant:
          - path: docs/guide.md
            symbol: Refunds
            grade: 2
          - path: src/shop/payments.py
            symbol: refund_order
      - id: cart-total
        query: sum of price times quantity
        relevant:
          - path: src/shop/cart.py
            symbol: Cart.total_price
            grade: 3
          - path: tests/test_cart.py
          - path: pyproject.toml
      - id: sym-auth-callback
        query: handleAuthCallback
        relevant:
          - path: src/shop/payments.py
            symbol: handleAuthCallback
      - id: deploy
        query: deploy behind a reverse proxy
        relevant:
          - path: docs/guide.md
            symbol: Deploying the shop
      - id: add-item-test
        query: add an item to the cart
        relevant:
          - path: tests/test_cart.py
      - id: no-match
        query: xylophone quartz
        relevant:
          - path: .gitignore
    ''')
NEGATIVES = "corpus: shop\nnegatives:\n  - id: neg-football\n    query: who won the football world cup\n"
RANKING = re.compile(r"^(mrr|(recall|hit|ndcg)_at_\d+|n_positives|n_negatives)$")


class NoModel:
    """A BM25-only run reads no embedding: this stands in for the model."""

    model_id = "no-model"

    def count_tokens(self, texts):
        return [len(t.split()) for t in texts]


def _run(compose, tmp_path: Path, *overrides: str) -> dict[str, float]:
    from rag.app.run import run_job
    from rag.app.stages import StageCache

    cfg = compose([f"paths.cache_dir={tmp_path / 'cache'}", "search.mode=bm25",
                   f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                   f"tracking.artifact_root={tmp_path / 'mlartifacts'}",
                   f"tracking.report_path={tmp_path / 'ledger.md'}", *overrides])
    return run_job(cfg, stages=StageCache(embedder=NoModel()))


def _tags(tmp_path: Path, experiment: str) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                              order_by=["attributes.start_time DESC"])
    return runs[0].data.tags


@pytest.mark.slow
def test_round_trip_beir_and_trec_give_the_same_ranking_metrics(tmp_path, fixture_repo,
                                                                 compose, capsys):
    golden = write_tree(tmp_path / "golden", {"queries.yaml": ROUND_TRIP_QUERIES,
                                              "negatives.yaml": NEGATIVES})
    original = _run(compose, tmp_path, "corpus.name=shop", f"corpus.path={fixture_repo}",
                    f"eval.golden_dir={golden}")
    ranking = {k: v for k, v in original.items() if RANKING.match(k)}
    assert 0 < ranking["mrr"] < 1 and ranking["ndcg_at_10"] < 1 and ranking["n_negatives"] == 1

    beir = tmp_path / "shop-beir"
    assert rag_cli(["golden", "export", "--format", "beir", "--golden", str(golden),
                    "--out", str(beir), "--corpus", str(fixture_repo)]) == 0
    got = _run(compose, tmp_path, "dataset=beir", f"dataset.path={beir}")
    assert {k: v for k, v in got.items() if RANKING.match(k)} == ranking
    assert got["index/files_indexed"] == original["index/files_indexed"]
    assert got["index/chunks"] == original["index/chunks"]
    tags = _tags(tmp_path, "rag-shop-beir")  # corpus.name: the dataset's name
    assert tags["dataset_format"] == "beir" and tags["dataset_path"] == str(beir)
    assert tags["dataset_fingerprint"] and tags["corpus_root"] == tags["dataset_dir"] + "/corpus"
    # every file at its own path; the export's path#symbol documents are symbol labels again
    manifest = json.loads((Path(tags["dataset_dir"]) / "manifest.json").read_text())
    assert manifest["counts"]["mapped"] == 0 and manifest["counts"]["symbol_documents"] == 5
    assert "dataset beir 'shop-beir': 6 queries evaluated, 1 negatives" in capsys.readouterr().err

    trec = tmp_path / "shop-trec"
    assert rag_cli(["golden", "export", "--format", "trec", "--golden", str(golden),
                    "--out", str(trec)]) == 0
    got = _run(compose, tmp_path, "dataset=trec", f"dataset.topics={trec / 'topics.tsv'}",
               f"dataset.qrels={trec / 'qrels.txt'}", "corpus.name=shop",
               f"corpus.path={fixture_repo}")
    assert {k: v for k, v in got.items() if RANKING.match(k)} == ranking
    tags = _tags(tmp_path, "rag-shop")
    assert tags["dataset_format"] == "trec" and tags["dataset_qrels"] == str(trec / "qrels.txt")
    assert tags["dataset_negatives"] == str(trec / "negatives.tsv")


@pytest.mark.slow
def test_dataset_config_is_checked_and_errors_are_one_line(tmp_path, compose, fixture_repo):
    from rag.app.config import validate
    from rag.core.errors import RunError

    assert str(compose([]).dataset.format.value) == "none" and compose([]).dataset.name is None
    assert compose(["dataset=beir", f"dataset.path={tmp_path / 'my-set'}"]).corpus.name == "my-set"
    for overrides, message in [
        (["dataset=beir"], "dataset=beir needs dataset.path=DIR"),
        (["dataset=trec", "dataset.topics=t"], "dataset=trec needs dataset.qrels=FILE"),
        (["dataset.path=x"], "dataset.path is not read without a dataset= group (beir, trec, semble)"),
        (["dataset=beir", "dataset.path=x", "corpus.path=y"], "brings its own corpus"),
        (["dataset=beir", "dataset.path=x", "dataset.split=../x"], "dataset.split must be"),
        (["dataset=beir", "dataset.path=x", "dataset.name=a/b"], "dataset.name='a/b'"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            validate(compose(overrides))
    src = _beir(tmp_path / "bad", corpus=[{"_id": "a", "text": "x"}],
                queries=[{"_id": "q1", "text": "x"}], qrels=["q1\tb\t1"])
    with pytest.raises(RunError, match=r"test\.tsv:2: document 'b' is not in"):
        _run(compose, tmp_path, "dataset=beir", f"dataset.path={src}")
    assert not (tmp_path / "mlflow.db").exists() or ledger_is_empty(tmp_path / "mlflow.db")


def test_an_interrupted_conversion_leaves_the_last_good_copy(tmp_path):
    from rag.datasets.common import materialise

    def good(tmp):
        (tmp / "golden").mkdir()
        return {"counts": {}}

    def crash(tmp):
        (tmp / "corpus").mkdir()
        (tmp / "corpus" / "half.txt").write_text("half")
        raise KeyboardInterrupt

    folder, _, reused = materialise(tmp_path, fmt="beir", name="x", fp="a" * 64, write=good)
    assert not reused and (folder / "manifest.json").is_file()
    with pytest.raises(KeyboardInterrupt):
        materialise(tmp_path, fmt="beir", name="x", fp="b" * 64, write=crash)
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # no partial folder
    assert materialise(tmp_path, fmt="beir", name="x", fp="a" * 64, write=crash)[2] is True


def test_judgements_of_queries_outside_the_topics_are_counted_not_fatal(tmp_path, fixture_repo):
    """qrels files commonly judge more topics than one split holds: counted and noted."""
    topics = write_tree(tmp_path, {"t.tsv": "q1\tvoucher\n"}) / "t.tsv"
    qrels = write_tree(tmp_path, {"q.txt": "q1 0 src/shop/cart.py 1\nq9 0 src/shop/cart.py 1\n"
                                           "q9 0 docs/guide.md 1\n"}) / "q.txt"
    p = prepare_trec(topics, qrels, negatives=None, name="t", cache_root=tmp_path / "c",
                     check=corpus_checker(lambda: fixture_repo))
    counts = p.manifest["counts"]
    assert counts["positives"] == 1 and counts["qrels_queries_not_in_topics"] == 1
    assert any("1 query id(s) judged in" in n and "q.txt:2" in n for n in p.manifest["notes"])
