"""Cross-encoder reranking: pair mining, AUC, sigmoid, a tiny training run, loading the trained
model from a local path, the rerank-score gate, and the runner end to end."""

from __future__ import annotations

import hashlib
import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rag.app.stages import StageCache

from conftest import run_overrides, write_tree
from rag.search import rerank_training as rt
from rag.search.rerank import sigmoid

TRAIN_SOURCE = {
    "shapes/area.py": textwrap.dedent('''\
        def circle_area(radius):
            """Compute the area of a circle from its radius.

            More text that is not part of the summary.
            """
            import math
            return math.pi * radius ** 2


        def square_area(side):
            """Compute the area of a square from its side."""
            result = side * side
            return result


        def undocumented(x):
            y = x + 1
            return y


        def trivial():
            """Documented but with a one-line body only."""
            return 1
        '''),
    "text/words.py": textwrap.dedent('''\
        def count_words(text):
            """Count the words separated by whitespace in a string."""
            parts = text.split()
            return len(parts)


        def reverse_words(text):
            """Reverse the order of words in a sentence."""
            parts = text.split()
            return " ".join(reversed(parts))
        '''),
    "net/urls.py": textwrap.dedent('''\
        def join_url(base, path):
            """Join a base URL and a relative path with one slash."""
            base = base.rstrip("/")
            return base + "/" + path.lstrip("/")


        def split_query(url):
            """Split the query string off a URL and return both parts."""
            head, _, query = url.partition("?")
            return head, query
        '''),
    "files/paths.py": textwrap.dedent('''\
        def file_suffix(name):
            """Return the extension of a file name including the dot."""
            dot = name.rfind(".")
            return name[dot:] if dot > 0 else ""


        def strip_suffix(name):
            """Remove the extension from a file name if it has one."""
            dot = name.rfind(".")
            return name[:dot] if dot > 0 else name
        '''),
    "tests/test_skip.py": textwrap.dedent('''\
        def test_something_long():
            """Tests directories are never mined for pairs."""
            value = 1
            assert value == 1
        '''),
}


def test_mining_takes_docstring_summary_and_body_without_docstring(tmp_path):
    root = write_tree(tmp_path / "src", TRAIN_SOURCE)
    examples, info = rt.mine_examples(root)
    by_query = {e.query: e for e in examples}
    # undocumented, one-line bodies and tests/ are skipped; 8 functions remain
    assert len(examples) == 8
    assert "Tests directories are never mined for pairs." not in by_query
    e = by_query["Compute the area of a circle from its radius."]
    assert e.file == "shapes/area.py" and e.line == 1
    assert e.code == "def circle_area(radius):\n    import math\n    return math.pi * radius ** 2"
    # the fingerprint is the sha256 over (relative path, content sha256) of every file read
    h = hashlib.sha256()
    for rel in sorted(k for k in TRAIN_SOURCE if not k.startswith("tests/")):
        data = (root / rel).read_bytes()
        h.update(f"{rel}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    assert info == {"files": 4, "fingerprint": "sha256:" + h.hexdigest()[:16]}


def test_split_keeps_whole_files_apart_and_negatives_are_bm25_best_other_code(tmp_path):
    root = write_tree(tmp_path / "src", TRAIN_SOURCE)
    examples, _ = rt.mine_examples(root)
    train, held = rt.split_by_file(examples, 2, seed=0)
    assert len(train) + len(held) == len(examples) and len(held) >= 2
    assert not {e.file for e in train} & {e.file for e in held}
    assert rt.split_by_file(examples, 2, seed=0) == (train, held)
    area = [e for e in examples if e.file == "shapes/area.py"]
    pairs = rt.mine_pairs(area, area[:1], depth=1)
    # "area of a circle ... radius": the other function about area is the BM25-best other code
    assert pairs == [rt.Pair(area[0].query, area[0].code, 1.0, "positive"),
                     rt.Pair(area[0].query, area[1].code, 0.0, "hard")]
    # deeper: a hard negative from the top 3 other codes and 2 random ones, never the positive
    everything = rt.mine_pairs(examples, examples, depth=3, random_negatives=2, seed=1)
    assert len(everything) == 4 * len(examples)
    for i in range(0, len(everything), 4):
        pos, *negs = everything[i:i + 4]
        assert [p.kind for p in everything[i:i + 4]] == ["positive", "hard", "random", "random"]
        assert pos.label == 1.0 and all(n.label == 0.0 and n.code != pos.code for n in negs)
        assert all(n.query == pos.query for n in negs)


def test_auc_by_hand():
    # positives {0.9, 0.3}, negatives {0.8, 0.1}: 3 of the 4 (pos, neg) pairs are ordered right
    assert rt.auc([0.9, 0.8, 0.3, 0.1], [1, 0, 1, 0]) == pytest.approx(0.75)
    # a tie counts half: positives {0.5}, negatives {0.5, 0.2} -> (0.5 + 1) / 2
    assert rt.auc([0.5, 0.5, 0.2], [1, 0, 0]) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        rt.auc([0.1, 0.2], [1, 1])


def test_sigmoid_values_and_no_overflow():
    out = sigmoid(np.array([0.0, 2.0, -2.0, 800.0, -800.0]))
    assert out[0] == 0.5
    assert out[1] == pytest.approx(1 / (1 + math.exp(-2)))
    assert out[2] == pytest.approx(1 - out[1])
    assert out[3] == 1.0 and out[4] == pytest.approx(0.0, abs=1e-300)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A cross-encoder trained for 2 steps on the toy corpus (well under a minute)."""
    tmp = tmp_path_factory.mktemp("ce")
    root = write_tree(tmp / "src", TRAIN_SOURCE)
    settings = rt.TrainSettings(source=str(root), pairs=9, held_out=6, epochs=1, batch_size=4,
                                max_length=64, seed=0, random_negatives=1)
    out = tmp / "model"
    card = rt.train_reranker(settings, out, log=lambda m: None, progress=False)
    return out, card, settings


def test_tiny_training_run_writes_model_and_card(tiny_model):
    out, card, settings = tiny_model
    assert rt.read_card(out) == card
    assert (out / "README.md").read_text().startswith("# Reranker")
    # 9 pairs = 3 positives x (own code, one hard, one random); 6 held out = 2 x 3
    assert card["pairs"] == {"train_positive": 3, "train_hard": 3, "train_random": 3,
                             "held_out_positive": 2, "held_out_hard": 2, "held_out_random": 2}
    assert card["epochs"] == 1 and len(card["loss"]["per_epoch"]) == 1
    assert card["training_corpus"]["files"] == 4
    assert card["training_corpus"]["fingerprint"] == rt.mine_examples(Path(settings.source))[1]["fingerprint"]
    for k in ("before", "after"):
        assert set(card["held_out_auc"][k]) == {"all", "hard_only"}
        assert all(0.0 <= v <= 1.0 for v in card["held_out_auc"][k].values())
    assert card["wall_time_s"]["total"] >= card["wall_time_s"]["training"] > 0
    # no temporary directory is left next to the model
    assert sorted(p.name for p in out.parent.iterdir()) == ["model", "src"]


def test_crossencoder_loads_from_local_path_and_scores_are_sigmoid_of_logits(tiny_model):
    from types import SimpleNamespace

    from sentence_transformers import CrossEncoder

    from rag.search.rerank import CrossEncoderReranker, RerankerError

    out, _, _ = tiny_model
    rr = CrossEncoderReranker(str(out), batch_size=2, max_length=64)
    assert rr.kind == "cross_encoder" and rr.score_unit.startswith("probability")
    chunks = [SimpleNamespace(indexed_text=t) for t in
              ("def circle_area(radius):\n    return 3.14 * radius ** 2", "def join_url(a, b): ...")]
    logits = rr.logits("area of a circle", [c.indexed_text for c in chunks])
    probs = rr.score("area of a circle", chunks)
    assert probs == pytest.approx(list(1 / (1 + np.exp(-logits))))
    # the same weights loaded directly by sentence-transformers give the same logits
    direct = CrossEncoder(str(out), max_length=64).predict(
        [("area of a circle", c.indexed_text) for c in chunks], activation_fn=None)
    assert list(direct) == pytest.approx(list(probs), abs=1e-5)  # its default activation: sigmoid
    with pytest.raises(RerankerError, match="cannot load"):
        CrossEncoderReranker(str(out.parent / "missing"))


class _FixedReranker:
    """Scores chunks by a fixed table (test double for the pipeline)."""

    kind = "fixed"
    score_unit = "test"
    model_id = "fixed"

    def __init__(self, table):
        self.table = table

    def score(self, query, chunks):
        return [self.table.get(c.path, 0.0) for c in chunks]


def test_rerank_candidates_and_gate_on_the_rerank_score(fixture_repo, embedder, tmp_path):
    from rag.index.build import build_index
    from rag.search.pipeline import SearchOptions, SearchPipeline

    index = build_index(fixture_repo, embedder=embedder, cache_dir=tmp_path / "c", progress=False)
    q = "send money back for a cancelled order"
    base = SearchOptions(mode="dense", top_k=2, candidates=8, min_dense=0.0, weak_dense=0.0,
                         rerank_candidates=3)
    plain = SearchPipeline(index, base).search(q)
    table = {"docs/guide.md": 0.9, "src/shop/payments.py": 0.2}
    res = SearchPipeline(index, base, reranker=_FixedReranker(table)).search(q)
    # the pool is the first stage's top 3 chunks, before reranking
    first3 = [(h.path, h.symbol, h.start_line, h.end_line, h.chunk_id)
              for h in SearchPipeline(index, base).search(q, depth=10).ranked[:3]]
    assert res.candidates == first3 == plain.candidates
    pool_best = max(table.get(p, 0.0) for p, *_ in first3)
    assert res.top_rerank == pool_best
    assert res.hits[0].scores["rerank"] == pool_best
    # gated on the rerank score: below min_score -> dropped, below weak_score -> weak note
    drop = SearchOptions(**{**base.__dict__, "rerank_min": pool_best + 0.01})
    out = SearchPipeline(index, drop, reranker=_FixedReranker(table)).search(q)
    assert out.hits == [] and out.dropped == 2
    weak = SearchOptions(**{**base.__dict__, "rerank_weak": pool_best + 0.01})
    out = SearchPipeline(index, weak, reranker=_FixedReranker(table)).search(q)
    assert len(out.hits) == 2 and out.weak_match
    ok = SearchOptions(**{**base.__dict__, "rerank_min": pool_best - 0.01,
                          "rerank_weak": pool_best - 0.01})
    out = SearchPipeline(index, ok, reranker=_FixedReranker(table)).search(q)
    assert len(out.hits) == 2 and not out.weak_match


@pytest.mark.slow
def test_runner_with_trained_cross_encoder_logs_gates_and_pool_recall(
        tmp_path, fixture_repo, fixture_golden, compose, embedder, tiny_model, monkeypatch):
    import pandas as pd
    from mlflow.tracking import MlflowClient

    import rag.app.run as run_mod

    out, _, _ = tiny_model
    stages = StageCache(embedder=embedder)
    cfg = compose(run_overrides(tmp_path, fixture_repo, fixture_golden, "rerank=cross_encoder",
                                f"rerank.model={out}", "rerank.max_length=64",
                                "rerank.candidates=8", "rerank.gate_thresholds=[0.3,0.7]"))
    metrics = run_mod.run_job(cfg, stages=stages)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.search_runs([client.get_experiment_by_name("rag-shop").experiment_id])[0]
    assert run.data.params["rerank.kind"] == "cross_encoder"
    assert run.data.tags["rerank_score_unit"].startswith("probability")
    assert run.data.tags["rerank_model_id"].startswith(str(out))
    table = pd.read_csv(client.download_artifacts(run.info.run_id, "per_query.csv", str(tmp_path)))
    pos, neg = table[table.kind == "positive"], table[table.kind == "negative"]
    # every query was reranked; scores are probabilities
    assert table.top_rerank.between(0, 1).all()
    for t in (0.3, 0.7):
        assert metrics[f"rerank_gate/{t:g}/abstain_rate"] == pytest.approx((neg.top_rerank < t).mean())
        assert metrics[f"rerank_gate/{t:g}/false_weak_rate"] == pytest.approx((pos.top_rerank < t).mean())
    assert metrics["candidate_pool_recall"] == pytest.approx(pos.candidate_hit.mean())
    assert metrics["latency_rerank_p50_ms"] > 0
    report = (tmp_path / "ledger.md").read_text()
    assert "| cross_encoder |" in report


def test_reranker_train_cli_help_and_bad_source(tmp_path, capsys):
    from rag.app.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["reranker", "train", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for opt in ("--source", "--pairs", "--held-out", "--epochs", "--max-length", "--out",
                "--force", "hard negative", "held-out AUC"):
        assert opt in text, opt
    code = main(["reranker", "train", "--source", str(tmp_path / "nope"),
                 f"paths.cache_dir={tmp_path / 'cache'}"])
    assert code == 2
    assert "is not a directory" in capsys.readouterr().err
    empty = write_tree(tmp_path / "few", {"a.py": TRAIN_SOURCE["text/words.py"]})
    code = main(["reranker", "train", "--source", str(empty), "--pairs", "30", "--held-out", "6",
                 f"paths.cache_dir={tmp_path / 'cache'}"])
    assert code == 2
    assert "need 10 for training" in capsys.readouterr().err
    assert not (tmp_path / "cache" / "rerankers").exists() or not any(
        (tmp_path / "cache" / "rerankers").iterdir())


def test_missing_default_model_is_named_when_training_is_not_allowed(compose, embedder, tmp_path):
    from rag.search.rerank import RerankerError, build_reranker

    cfg = compose([f"paths.cache_dir={tmp_path}", "rerank=cross_encoder"])
    with pytest.raises(RerankerError, match="rag reranker train"):
        build_reranker(cfg, embedder, tmp_path, train_if_missing=False)
    assert json.loads(json.dumps(list(cfg.rerank.gate_thresholds))) == [0.05, 0.5]


def test_a_trained_default_model_is_reused_not_retrained(compose, embedder, tmp_path, tiny_model,
                                                         monkeypatch):
    import shutil

    from rag.search.rerank import CrossEncoderReranker, build_reranker

    out, card, _ = tiny_model
    cfg = compose([f"paths.cache_dir={tmp_path}", "rerank=cross_encoder"])
    target = rt.default_model_dir(tmp_path, cfg.rerank.train)
    shutil.copytree(out, target)

    def no_training(*a, **k):
        raise AssertionError("retrained although a model with a card exists")

    monkeypatch.setattr(rt, "train_reranker", no_training)
    rr = build_reranker(cfg, embedder, tmp_path)
    assert isinstance(rr, CrossEncoderReranker)
    assert rr.model_id == f"{target.name}@{card['model_fingerprint']}"
    # other training settings name another directory (that model would be trained anew)
    from omegaconf import OmegaConf

    other = rt.TrainSettings.from_config(OmegaConf.merge(cfg.rerank.train, {"pairs": 10}))
    assert rt.default_model_dir(tmp_path, other) != target
