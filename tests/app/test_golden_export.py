"""TREC/BEIR out: ``rag golden export`` on the fixture golden set, and every ledger row's
``qrels.txt`` + ``run.trec`` re-scored with trec_eval (pytrec_eval) reproducing the row."""

from __future__ import annotations

import json
import textwrap

import pytest

from rag.app.stages import StageCache

from conftest import FIXTURE_FILES, FIXTURE_NEGATIVES, run_overrides, write_tree
from rag.app.cli import main

TREC_TOPICS = [
    "sym-auth-callback\thandleAuthCallback",
    "prose-voucher\thow do customers use a voucher to pay less",
    "prose-deploy\thow should I deploy the shop in production",
]
TREC_QRELS = [
    "sym-auth-callback 0 src/shop/payments.py#handleAuthCallback 1",
    "prose-voucher 0 src/shop/cart.py#apply_discount_code 1",
    "prose-deploy 0 docs/guide.md 1",
]
BEIR_QUERIES = [
    {"_id": "sym-auth-callback", "text": "handleAuthCallback"},
    {"_id": "prose-voucher", "text": "how do customers use a voucher to pay less"},
    {"_id": "prose-deploy", "text": "how should I deploy the shop in production"},
]
BEIR_QRELS = [
    "query-id\tcorpus-id\tscore",
    "sym-auth-callback\tsrc/shop/payments.py#handleAuthCallback\t1",
    "prose-voucher\tsrc/shop/cart.py#apply_discount_code\t1",
    "prose-deploy\tdocs/guide.md\t1",
]
# every file rag indexes in the fixture repo (build/ and *.log are gitignored), in walk order,
# then one document per symbol label
CORPUS_IDS = [".gitignore", "pyproject.toml", "docs/guide.md", "src/shop/__init__.py",
              "src/shop/cart.py", "src/shop/payments.py", "tests/test_cart.py",
              "src/shop/payments.py#handleAuthCallback", "src/shop/cart.py#apply_discount_code"]
SYMBOL_TEXTS = {
    "src/shop/payments.py#handleAuthCallback": textwrap.dedent('''\
        def handleAuthCallback(request):
            """Verify the provider's signed callback after the card was authorised."""
            return verify_signature(request.body, request.headers["X-Signature"])
        '''),
    "src/shop/cart.py#apply_discount_code": textwrap.dedent('''\
        def apply_discount_code(cart, code):
            """Reduce the total when a valid voucher code is entered."""
            return cart.total_price() * decimal.Decimal("0.9")
        '''),
}


def _lines(path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n")
    return text.splitlines()


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in _lines(path)]


def test_export_trec(tmp_path, fixture_golden, capsys):
    out = tmp_path / "trec"
    assert main(["golden", "export", "--format", "trec", "--golden", str(fixture_golden),
                 "--out", str(out)]) == 0
    assert "wrote 3 queries and 1 negatives as trec" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["negatives.tsv", "qrels.txt", "topics.tsv"]
    assert _lines(out / "topics.tsv") == TREC_TOPICS
    assert _lines(out / "qrels.txt") == TREC_QRELS
    assert _lines(out / "negatives.tsv") == ["neg-football\twho won the football world cup in 1998"]


def test_export_beir_with_corpus(tmp_path, fixture_repo, fixture_golden):
    out = tmp_path / "beir"
    assert main(["golden", "export", "--format", "beir", "--golden", str(fixture_golden),
                 "--out", str(out), "--corpus", str(fixture_repo)]) == 0
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "corpus.jsonl", "negatives.jsonl", "qrels/test.tsv", "queries.jsonl"]
    assert _jsonl(out / "queries.jsonl") == BEIR_QUERIES
    assert _lines(out / "qrels" / "test.tsv") == BEIR_QRELS
    assert _jsonl(out / "negatives.jsonl") == [
        {"_id": "neg-football", "text": "who won the football world cup in 1998"}]
    corpus = _jsonl(out / "corpus.jsonl")
    assert [d["_id"] for d in corpus] == CORPUS_IDS
    for d in corpus:
        assert set(d) == {"_id", "title", "text"} and d["title"] == ""
        assert d["text"] == SYMBOL_TEXTS.get(d["_id"]) or d["text"] == FIXTURE_FILES[d["_id"]]
    # every qrels corpus-id names a corpus document
    ids = {d["_id"] for d in corpus}
    assert all(line.split("\t")[1] in ids for line in BEIR_QRELS[1:])


def test_export_without_corpus_and_other_split(tmp_path, fixture_golden):
    out = tmp_path / "beir"
    assert main(["golden", "export", "--format", "beir", "--golden", str(fixture_golden),
                 "--out", str(out), "--split", "dev"]) == 0
    assert not (out / "corpus.jsonl").exists()
    assert _lines(out / "qrels" / "dev.tsv") == BEIR_QRELS


def test_export_grades_section_symbols_and_multiline_queries(tmp_path, fixture_repo):
    golden = write_tree(tmp_path / "g", {
        "queries.yaml": textwrap.dedent('''\
            corpus: shop
            queries:
              - id: deploy
                query: |
                  how do I deploy
                  	behind nginx
                relevant:
                  - path: docs/guide.md
                    symbol: Deploying the shop
                    grade: 2
                  - path: pyproject.toml
            '''),
        "negatives.yaml": "corpus: shop\nnegatives: []\n"})
    trec, beir = tmp_path / "trec", tmp_path / "beir"
    assert main(["golden", "export", "--format", "trec", "--golden", str(golden),
                 "--out", str(trec)]) == 0
    # spaces in a docno are percent-encoded (reversibly), as in run.trec; the query is one TSV line
    assert _lines(trec / "qrels.txt") == ["deploy 0 docs/guide.md#Deploying%20the%20shop 2",
                                          "deploy 0 pyproject.toml 1"]
    assert _lines(trec / "topics.tsv") == ["deploy\thow do I deploy behind nginx"]
    assert _lines(trec / "negatives.tsv") == []
    assert main(["golden", "export", "--format", "beir", "--golden", str(golden),
                 "--out", str(beir), "--corpus", str(fixture_repo)]) == 0
    assert _lines(beir / "qrels" / "test.tsv") == [
        "query-id\tcorpus-id\tscore", "deploy\tdocs/guide.md#Deploying the shop\t2",
        "deploy\tpyproject.toml\t1"]
    assert _jsonl(beir / "queries.jsonl") == [{"_id": "deploy",
                                               "text": "how do I deploy\n\tbehind nginx"}]
    section = [d for d in _jsonl(beir / "corpus.jsonl") if "#" in d["_id"]]
    assert section == [{"_id": "docs/guide.md#Deploying the shop", "title": "",
                        "text": "## Deploying the shop\n\nRun the shop behind a reverse proxy "
                                "such as nginx and set the SHOP_SECRET variable.\n\n"}]


def test_export_bad_input_one_error_line(tmp_path, fixture_repo, fixture_golden, capsys):
    bad_label = write_tree(tmp_path / "bad", {
        "queries.yaml": "queries:\n  - id: q\n    query: x\n    relevant:\n"
                        "      - path: src/shop/nope.py\n      - path: src/shop/cart.py\n"
                        "        symbol: Cart.nope\n",
        "negatives.yaml": "negatives: []\n"})
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    base = ["golden", "export", "--golden", str(fixture_golden), "--out", str(tmp_path / "o")]
    cases = [
        (["golden", "export", "--format", "trec", "--golden", str(tmp_path / "missing"),
          "--out", str(tmp_path / "o")], "golden directory not found"),
        (["golden", "export", "--format", "beir", "--golden", str(bad_label), "--out",
          str(tmp_path / "o"), "--corpus", str(fixture_repo)],
         "2 problem(s) in the golden set: "),
        (["golden", "export", "--format", "beir", "--golden", str(bad_label), "--out",
          str(tmp_path / "o"), "--corpus", str(fixture_repo)],
         "label symbol 'Cart.nope' is not defined in 'src/shop/cart.py'"),
        (["golden", "export", "--format", "beir", "--golden", str(bad_label), "--out",
          str(tmp_path / "o"), "--corpus", str(fixture_repo)],
         "label path 'src/shop/nope.py' is not in the corpus"),
        ([*base, "--format", "trec", "--corpus", str(fixture_repo)],
         "--corpus is only used with --format beir"),
        ([*base, "--format", "beir", "--corpus", str(tmp_path / "nowhere")], "not a directory"),
        ([*base[:-1], str(a_file), "--format", "trec"], "exists and is not a directory"),
        ([*base, "--format", "beir", "--split", "../x"], "--split must be a plain file name"),
        ([*base, "--format", "beir", "--corpus", str(fixture_repo), "--max-file-bytes", "0"],
         "--max-file-bytes must be > 0"),
    ]
    for argv, why in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and why in err, (argv, err)
    assert not (tmp_path / "o").exists()  # nothing written on bad input


# graded labels over several files and symbols, so that the row's metrics are not all 1
ROW_QUERIES = textwrap.dedent('''\
    corpus: shop
    queries:
      - id: refund-money
        query: give the customer their money back
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
          - path: .gitignore
      - id: sym-auth-callback
        query: handleAuthCallback
        relevant:
          - path: src/shop/payments.py
            symbol: handleAuthCallback
      - id: add-item-test
        query: add an item to the cart
        relevant:
          - path: tests/test_cart.py
      - id: no-match
        query: xylophone quartz
        relevant:
          - path: .gitignore
    ''')
ROW_QRELS = [
    "refund-money 0 docs/guide.md#Refunds 2",
    "refund-money 0 src/shop/payments.py#refund_order 1",
    "cart-total 0 src/shop/cart.py#Cart.total_price 3",
    "cart-total 0 tests/test_cart.py 1",
    "cart-total 0 pyproject.toml 1",
    "cart-total 0 .gitignore 1",
    "sym-auth-callback 0 src/shop/payments.py#handleAuthCallback 1",
    "add-item-test 0 tests/test_cart.py 1",
    "no-match 0 .gitignore 1",
]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hybrid", "bm25"])
def test_row_qrels_and_run_rescored_by_trec_eval(tmp_path, fixture_repo, compose, embedder,
                                                  monkeypatch, mode):
    """A row's qrels.txt + run.trec, scored by trec_eval, give the row's MRR, Recall@8
    and nDCG@10 (the run's rank column fixes the order: trec_eval breaks ties by docno)."""
    import pytrec_eval
    from mlflow.tracking import MlflowClient

    import rag.app.run as run_mod

    golden = write_tree(tmp_path / "golden", {"queries.yaml": ROW_QUERIES,
                                              "negatives.yaml": FIXTURE_NEGATIVES})
    stages = StageCache(embedder=embedder)
    metrics = run_mod.run_job(compose(run_overrides(tmp_path, fixture_repo, golden,
                                                    f"search.mode={mode}")), stages=stages)
    # the case is not trivial: some relevant documents rank low or are missed
    assert metrics["ndcg_at_10"] < 1 and metrics["recall_at_1"] < 1
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    row = client.search_runs([client.get_experiment_by_name("rag-shop").experiment_id])[0]
    names = {a.path for a in client.list_artifacts(row.info.run_id)}
    assert {"qrels.txt", "run.trec.txt"} <= names
    from pathlib import Path

    qrels_file = Path(client.download_artifacts(row.info.run_id, "qrels.txt", str(tmp_path)))
    run_file = Path(client.download_artifacts(row.info.run_id, "run.trec.txt", str(tmp_path)))
    assert _lines(qrels_file) == ROW_QRELS
    qrels: dict[str, dict[str, int]] = {}
    for line in _lines(qrels_file):
        qid, _, doc, rel = line.split()
        qrels.setdefault(qid, {})[doc] = int(rel)
    run: dict[str, dict[str, float]] = {}
    for line in _lines(run_file):
        qid, _, doc, rank, _score, _tag = line.split()
        run.setdefault(qid, {})[doc] = -float(rank)  # the rank column as the order
    if mode == "hybrid":
        assert "neg-football" in run  # a negative's ranking is in the run, not in the qrels
    else:  # no lexical match: no line in the run; trec_eval leaves it out, the row counts 0
        assert "no-match" not in run
    got = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "recall.8", "ndcg_cut.10"}) \
        .evaluate(run)
    assert set(got) == set(qrels) & set(run)  # trec_eval: queries with qrels and a run only
    n = metrics["n_positives"]
    for ours, theirs in (("mrr", "recip_rank"), ("recall_at_8", "recall_8"),
                         ("ndcg_at_10", "ndcg_cut_10")):
        value = sum(q[theirs] for q in got.values()) / n
        assert value == pytest.approx(metrics[ours], abs=1e-9), ours
        assert value == pytest.approx(row.data.metrics[ours], abs=1e-9), ours
