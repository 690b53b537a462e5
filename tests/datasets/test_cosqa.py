"""CoSQA converter (rag/datasets/cosqa.py) on a tiny synthetic sample in CoSQA's format, and
(integration) the real dev-500 data in ../shared/data/cosqa when it is there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag.app.stages import StageCache
import yaml

from conftest import PROJECT, run_overrides

# index -> function source, as in code_idx_map.txt (source -> index); no trailing newline
FUNCTIONS = {
    0: 'def parse_json(text):\n    """Parse a JSON document."""\n    return json.loads(text)',
    1: "def read_csv_rows(path):\n    with open(path) as fh:\n        return list(csv.reader(fh))",
    2: "def http_get(url):\n    return requests.get(url).text",
    3: "def download(url, dest):\n    data = http_get(url)\n    write(dest, data)",
    4: "def alpha():\n    return beta",
    5: "def gamma():\n    return beta",
}
# id, query, relevant index
QUERIES = [
    ("cosqa-train-1", "python parse json", 0),      # only f0000 matches: rank 1
    ("cosqa-train-2", "download a url", 2),          # f0003 has both terms, f0002 one: rank 2
    ("cosqa-train-3", "zebra crossing", 1),          # no term in the corpus: not ranked, 0
    ("cosqa-train-4", "beta", 4),                    # f0004 and f0005 tie exactly
]


def _write_sample(src: Path) -> Path:
    src.mkdir(parents=True)
    (src / "code_idx_map.txt").write_text(json.dumps({c: i for i, c in FUNCTIONS.items()}),
                                          encoding="utf-8")
    dev = [{"idx": qid, "doc": q, "code": FUNCTIONS[i], "code_tokens": "", "docstring_tokens": "",
            "label": "1", "retrieval_idx": str(i)} for qid, q, i in QUERIES]
    (src / "cosqa-retrieval-dev-500.json").write_text(json.dumps(dev), encoding="utf-8")
    return src


def test_convert_writes_one_raw_file_per_function_and_golden_set(tmp_path):
    from rag.datasets.cosqa import main
    from rag.eval.golden import load_golden

    src = _write_sample(tmp_path / "cosqa")
    out = tmp_path / "out"
    assert main(["--src", str(src), "--out", str(out)]) == 0
    files = sorted(p.name for p in (out / "corpus" / "functions").iterdir())
    assert files == [f"f{i:04d}.py" for i in range(6)]
    for i, code in FUNCTIONS.items():
        assert (out / "corpus" / "functions" / f"f{i:04d}.py").read_bytes() == code.encode()
    q = yaml.safe_load((out / "golden" / "queries.yaml").read_text(encoding="utf-8"))
    assert q["corpus"] == "cosqa-dev-500"
    assert [(x["id"], x["query"], x["relevant"]) for x in q["queries"]] == [
        (qid, text, [{"path": f"functions/f{i:04d}.py"}]) for qid, text, i in QUERIES]
    neg = yaml.safe_load((out / "golden" / "negatives.yaml").read_text(encoding="utf-8"))
    assert neg == {"corpus": "cosqa-dev-500", "negatives": []}
    paths = {f"functions/f{i:04d}.py" for i in FUNCTIONS}
    g = load_golden(out / "golden", corpus_paths=paths)
    assert len(g.positives) == 4 and g.negatives == [] and g.corpus == "cosqa-dev-500"
    # re-running is idempotent and removes files that are no longer in the dataset
    (out / "corpus" / "functions" / "f9999.py").write_text("def stale(): pass", encoding="utf-8")
    assert main(["--src", str(src), "--out", str(out)]) == 0
    assert not (out / "corpus" / "functions" / "f9999.py").exists()


def test_convert_reports_missing_files(tmp_path, capsys):
    from rag.datasets.cosqa import main

    (tmp_path / "empty").mkdir()
    assert main(["--src", str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 2
    assert "code_idx_map.txt: not found" in capsys.readouterr().err


def _run_sample(tmp_path, compose, embedder, monkeypatch, *extra: str):
    """Convert the sample and evaluate it in-process with BM25: (rag.app.run, cfg, metrics, out)."""
    import rag.app.run as run_mod
    from rag.datasets.cosqa import convert

    out = tmp_path / "out"
    convert(_write_sample(tmp_path / "cosqa"), out)
    stages = StageCache(embedder=embedder)
    cfg = compose(run_overrides(tmp_path, out / "corpus", out / "golden",
                                "corpus.name=cosqa-dev-500", "index.header=none",
                                "search.mode=bm25", "eval.depth=6", "eval.recall_ks=[1,2,5]",
                                "eval.ndcg_k=5", "tracking.enabled=false", *extra))
    return run_mod, cfg, run_mod.run_job(cfg, stages=stages), out


def test_converted_sample_evaluates_in_process(tmp_path, compose, embedder, monkeypatch):
    from rag.eval.evaluate import evaluate
    from rag.eval.metrics import evaluate_run, mean_metrics

    run_mod, cfg, metrics, out = _run_sample(tmp_path, compose, embedder, monkeypatch)
    # one chunk per function file, holding its whole text
    assert metrics["index/files_indexed"] == 6 and metrics["index/chunks"] == 6
    assert metrics["n_positives"] == 4 and metrics["n_negatives"] == 0
    assert "abstain_rate" not in metrics  # no negatives: not measured, not 0
    # ranks 1, 2, not ranked, and the tie: f0004 wins it by doc id (rank 1)
    assert metrics["mrr"] == pytest.approx((1 + 1 / 2 + 0 + 1) / 4)
    assert metrics["recall_at_1"] == pytest.approx(2 / 4)

    # the same run scored with eval.ties=pessimistic: the tie costs f0004 rank 2
    index = StageCache(embedder=embedder).index(cfg, out / "corpus", embedder)
    from rag.eval.golden import load_golden
    from rag.search.pipeline import SearchOptions, SearchPipeline

    golden = load_golden(out / "golden", corpus_paths=index.paths)
    res = evaluate(SearchPipeline(index, SearchOptions.from_config(cfg)), golden,
                   recall_ks=[1, 2, 5], ndcg_k=5, depth=6, progress=False)
    assert res.run["cosqa-train-4"]["functions/f0004.py"] == \
        res.run["cosqa-train-4"]["functions/f0005.py"]
    qrels = {q.id: q.qrels for q in golden.positives}
    pe = mean_metrics(evaluate_run(res.run, qrels, recall_ks=[1, 2, 5], ties="pessimistic"))
    assert pe["mrr"] == pytest.approx((1 + 1 / 2 + 0 + 1 / 2) / 4)
    assert pe["recall_at_1"] == pytest.approx(1 / 4)


def test_run_job_passes_eval_ties_to_the_evaluator(tmp_path, compose, embedder, monkeypatch):
    _, _, metrics, _ = _run_sample(tmp_path, compose, embedder, monkeypatch, "eval.ties=pessimistic")
    assert metrics["mrr"] == pytest.approx((1 + 1 / 2 + 0 + 1 / 2) / 4)


def _shared_data():
    """../shared/data, found as dataset=semble finds its copy (beside the project, or beside
    the checkout a clone was made from)."""
    from rag.datasets.semble import default_root

    root = default_root()
    return root.parent if root is not None else PROJECT.parent / "shared" / "data"


COSQA = _shared_data() / "cosqa"


@pytest.mark.integration
@pytest.mark.skipif(not (COSQA / "code_idx_map.txt").is_file(),
                    reason=f"CoSQA data not supplied in {COSQA}")
@pytest.mark.slow
def test_real_cosqa_dev_converts_to_6267_functions_and_500_queries(tmp_path):
    from rag.corpus.walk import walk_corpus
    from rag.datasets.cosqa import convert
    from rag.eval.golden import load_golden

    counts = convert(COSQA, tmp_path / "out")
    assert counts == {"functions": 6267, "queries": 500}
    docs = list(walk_corpus(tmp_path / "out" / "corpus"))
    assert len(docs) == 6267
    code = json.loads((COSQA / "code_idx_map.txt").read_text(encoding="utf-8"))
    by_path = {d.path: d.text for d in docs}
    assert all(by_path[f"functions/f{int(i):04d}.py"] == c for c, i in code.items())
    g = load_golden(tmp_path / "out" / "golden", corpus_paths=set(by_path))
    assert len(g.positives) == 500 and not g.negatives


# --------------------------------------------------------------------------- bm25.tokenizer


def test_identifiers_tokenizer_keeps_every_identifier_whole_and_split():
    from rag.index.tokenize import get_tokenizer, tokenize, tokenize_identifiers

    text = "def is_iterable(obj): return os.path.join(a, HTTPServer2, __init__, _)"
    assert tokenize_identifiers(text) == [
        "def", "is_iterable", "is", "iterable", "obj", "return", "os", "path", "join", "a",
        "httpserver2", "http", "server", "2", "init"]
    # the default keeps dotted compounds whole and drops stopwords / one-letter tokens
    assert "os.path.join" in tokenize(text) and "a" not in tokenize(text)
    assert get_tokenizer("code") is tokenize
    with pytest.raises(ValueError, match="bm25.tokenizer"):
        get_tokenizer("whitespace")


def test_bm25_channel_tokenizes_queries_like_the_corpus():
    from rag.index.bm25 import build_bm25

    texts = ["def is_a(x): return x", "def to_b(y): return y", "def c(z): return z"]
    code = build_bm25(texts)
    ident = build_bm25(texts, tokenizer="identifiers")
    assert code.tokenizer == "code" and ident.tokenizer == "identifiers"
    # "x" is one letter: dropped by the code tokenizer, a term for identifiers
    assert not code.score("x").any()
    assert ident.search("x", 3)[0][0] == 0
