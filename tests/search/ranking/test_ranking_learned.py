"""rag/search/ranking/learned.py: the candidate rows by hand, LambdaMART training, the model
file's round trip and its errors; the stage under ``combiner=lambdamart``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from rag.search.ranking import RankingOptions, RankingStage
from rag.search.ranking.features import FEATURE_NAMES
from rag.search.ranking.learned import (COLUMNS, MODEL_FORMAT, candidate_matrix, model_at,
                                        train)

from test_ranking_features import CHUNKS

col = {c: j for j, c in enumerate(COLUMNS)}


def test_candidate_rows_by_hand():
    cands = [{"first_stage": 0.5, "bm25": 4.0, "dense": 0.7, "rank:definition": 1.0},
             {"first_stage": 0.25, "bm25": None, "dense": 0.2, "rank:category_prior": 0.3},
             {"first_stage": None, "bm25": 2.0, "dense": None}]
    x = candidate_matrix(cands, identifier=True)
    assert x.shape == (3, len(COLUMNS))
    # first stage over the query's largest (0.5); a chunk a feature added has 0
    assert list(x[:, col["first_stage"]]) == [1.0, 0.5, 0.0]
    # 1 / first-stage rank; not ranked: 0
    assert list(x[:, col["first_stage_rrank"]]) == [1.0, 0.5, 0.0]
    # BM25 over the largest (4); no match: 0
    assert list(x[:, col["bm25"]]) == [1.0, 0.0, 0.5]
    assert list(x[:, col["dense"]]) == [0.7, 0.2, 0.0]
    assert list(x[:, col["identifier_query"]]) == [1.0, 1.0, 1.0]
    # an add feature that did not score a chunk: 0; a scale one: 1 (no change)
    assert list(x[:, col["rank:definition"]]) == [1.0, 0.0, 0.0]
    assert list(x[:, col["rank:category_prior"]]) == [1.0, 0.3, 1.0]
    assert candidate_matrix([], identifier=False).shape == (0, len(COLUMNS))
    assert set(COLUMNS[5:]) == {f"rank:{n}" for n in FEATURE_NAMES}


def synthetic_groups(n_queries=60, n_cands=12, seed=0):
    """Queries whose relevant candidate is the one with rank:definition = 1 (the first stage
    puts it anywhere): a model must learn to read that column."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(n_queries):
        x = np.zeros((n_cands, len(COLUMNS)))
        x[:, col["first_stage"]] = rng.random(n_cands)
        x[:, col["dense"]] = rng.random(n_cands)
        x[:, col["rank:category_prior"]] = 1.0
        good = int(rng.integers(n_cands))
        x[good, col["rank:definition"]] = 1.0
        y = np.zeros(n_cands)
        y[good] = 1.0
        groups.append((x, y))
    return groups


def test_lambdamart_learns_the_informative_column_and_round_trips(tmp_path):
    model = train(synthetic_groups(), provenance={"held_out": "x"}, rounds=30)
    test = synthetic_groups(n_queries=20, seed=1)
    top1 = np.mean([np.argmax(model.predict(x)) == np.argmax(y) for x, y in test])
    assert top1 == 1.0  # by chance: 1/12
    path = model.save(tmp_path / "m.json")
    doc = json.loads(path.read_text())
    assert doc["format"] == MODEL_FORMAT and doc["columns"] == list(COLUMNS)
    assert doc["provenance"]["held_out"] == "x" and doc["provenance"]["queries_trained"] == 60
    again = model_at(path)
    x = test[0][0]
    np.testing.assert_array_equal(again.predict(x), model.predict(x))


def test_queries_without_both_labels_are_left_out_and_nothing_to_learn_is_an_error():
    x = np.zeros((3, len(COLUMNS)))
    with pytest.raises(ValueError, match="both a relevant and a non-relevant"):
        train([(x, np.zeros(3)), (x, np.ones(3))], rounds=2)
    model = train([*synthetic_groups(n_queries=10), (x, np.zeros(3))], rounds=2)
    assert model.provenance["queries_trained"] == 10


def test_bad_model_files_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"no such file.*rag ranking train"):
        model_at(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json: cannot read a model file"):
        model_at(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something/1"}))
    with pytest.raises(ValueError, match=f"other.json: not a {MODEL_FORMAT} model file"):
        model_at(other)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": MODEL_FORMAT, "columns": ["first_stage", "rank:gone"]}))
    with pytest.raises(ValueError, match="trained on columns.*rank:gone.*retrain it"):
        model_at(old)
    with pytest.raises(ValueError, match="needs ranking.model"):
        RankingStage(RankingOptions(combiner="lambdamart"))
    # the options refuse a bad model file before any run starts (the schema's validate)
    with pytest.raises(ValueError, match=r"missing\.json: no such file"):
        RankingOptions(combiner="lambdamart", model=str(tmp_path / "missing.json")).check()
    with pytest.raises(ValueError, match="not a .* model file"):
        RankingOptions(combiner="lambdamart", model=str(other)).check()


def test_a_model_reads_only_the_columns_it_was_trained_on(tmp_path):
    """A model trained before a feature was registered keeps working: it names its columns,
    and the stage builds its rows from those alone."""
    from rag.search.ranking.learned import COLUMNS, candidate_matrix

    groups = synthetic_groups()
    keep = [i for i, c in enumerate(COLUMNS) if c != "rank:chunk_length"]
    old_cols = [COLUMNS[i] for i in keep]
    model = train([(x[:, keep], y) for x, y in groups], rounds=30, columns=old_cols)
    path = model.save(tmp_path / "old.json")
    loaded = model_at(path)
    assert loaded.columns == tuple(old_cols)
    cands = [{"first_stage": 1.0, "rank:definition": 1.0, "rank:chunk_length": 0.7},
             {"first_stage": 0.5}]
    full = candidate_matrix(cands, identifier=True)
    part = candidate_matrix(cands, identifier=True, columns=old_cols)
    assert part.shape == (2, len(old_cols)) and (part == full[:, keep]).all()
    with pytest.raises(ValueError, match="unknown ranking model columns"):
        candidate_matrix(cands, identifier=True, columns=["rank:gone"])
    stage = RankingStage(RankingOptions(combiner="lambdamart", model=str(path),
                                        file_saturation=1.0))
    order, _ = stage.rank("ExecuteC", [(2, 1.0), (3, 0.9), (5, 0.5)],
                          SimpleNamespace(chunks=CHUNKS))
    assert order[0][0] == 1
    # a file whose booster reads another number of columns than it names is refused
    doc = json.loads(path.read_text())
    for cols in (old_cols[:-1], old_cols[::-1]):  # fewer columns, or the same reordered
        doc["columns"] = cols
        path.write_text(json.dumps(doc))
        with pytest.raises(ValueError, match="booster reads the columns"):
            model_at(path)


def test_the_stage_ranks_by_the_model(tmp_path):
    """A model that learned "definition wins" puts the chunk the definition feature found
    first, whatever the first stage said."""
    path = train(synthetic_groups(), rounds=30).save(tmp_path / "m.json")
    stage = RankingStage(RankingOptions(combiner="lambdamart", model=str(path),
                                        file_saturation=1.0))
    index = SimpleNamespace(chunks=CHUNKS)
    order, values = stage.rank("ExecuteC", [(2, 1.0), (3, 0.9), (5, 0.5)], index)
    assert order[0][0] == 1  # command.go's ExecuteC, added by the definition feature
    assert set(values["ranking"]) == {i for i, _ in order}
    # the model's scores are logged, saturation's input
    assert values["ranking"][1] == max(values["ranking"].values())


def test_a_model_is_refused_under_another_fusion_than_it_was_trained_on(tmp_path):
    """The first_stage column reads the fused score, whose scale is the fusion's: a model
    trained on RRF's scores is refused by a pipeline fusing with wsum, and accepted under
    RRF; a model file without provenance.fusion was trained under RRF."""
    from rag.search.pipeline import SearchOptions, SearchPipeline

    index = SimpleNamespace(chunks=CHUNKS)
    old = train(synthetic_groups(), rounds=10).save(tmp_path / "old.json")
    assert model_at(old).fusion == "rrf"  # no provenance.fusion: before it was recorded
    ranking = RankingOptions(combiner="lambdamart", model=str(old))
    with pytest.raises(ValueError, match="trained on first-stage scores of fusion 'rrf', "
                                         "this search fuses with 'wsum': pass fusion=rrf"):
        SearchPipeline(index, SearchOptions(mode="hybrid", fusion_method="wsum", ranking=ranking))
    SearchPipeline(index, SearchOptions(mode="hybrid", fusion_method="rrf", ranking=ranking))
    # a single-channel route fuses nothing: any model is taken
    SearchPipeline(index, SearchOptions(mode="bm25", fusion_method="wsum", ranking=ranking))
    new = train(synthetic_groups(), rounds=10, provenance={"fusion": "wsum"}).save(
        tmp_path / "new.json")
    SearchPipeline(index, SearchOptions(mode="hybrid", fusion_method="wsum",
                                        ranking=RankingOptions(combiner="lambdamart",
                                                               model=str(new))))
