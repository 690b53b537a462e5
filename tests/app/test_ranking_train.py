"""rag/app/ranking_train.py: leave-one-repository-out training never trains a fold on its
held-out repository's queries, and writes what the stage loads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rag.app.ranking_train import RepoRows, train_loro
from rag.search.ranking.learned import model_at

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search" / "ranking"))
from test_ranking_learned import synthetic_groups  # noqa: E402


def repos():
    return [RepoRows(repo=name, queries=[f"{name}-q{i}" for i in range(n)],
                     groups=synthetic_groups(n_queries=n, seed=s))
            for s, (name, n) in enumerate([("cobra", 12), ("axum", 10), ("flask", 8)])]


def test_each_fold_leaves_its_repository_out(tmp_path):
    log = train_loro(repos(), tmp_path, overrides=["search.mode=hybrid"], rounds=5)
    written = json.loads((tmp_path / "training_log.json").read_text())
    assert written == log
    assert [f["held_out"] for f in log["folds"]] == ["cobra", "axum", "flask"]
    for fold in log["folds"]:
        others = [r for r in ("cobra", "axum", "flask") if r != fold["held_out"]]
        assert fold["train_repos"] == others
        assert fold["held_out"] not in fold["train_queries"]
        model = model_at(tmp_path / fold["model"])
        prov = model.provenance
        assert prov["held_out"] == fold["held_out"]
        # the model file names every training query: none is the held-out repository's
        assert not any(q.startswith(fold["held_out"] + "-")
                       for qs in prov["train_queries"].values() for q in qs)
        assert fold["queries_trained"] == sum(len(r.queries) for r in repos()
                                              if r.repo != fold["held_out"])
    assert log["all"]["held_out"] is None and log["all"]["queries_trained"] == 30
    assert (tmp_path / "all.json").is_file() and log["overrides"] == ["search.mode=hybrid"]
    # the fusion whose scores the first_stage column read is recorded, in the log and each model
    from rag.search.fusion import DEFAULT_METHOD

    assert log["fusion"] == DEFAULT_METHOD == model_at(tmp_path / "all.json").fusion


def test_one_repository_is_refused(tmp_path):
    with pytest.raises(ValueError, match="at least 2 repositories"):
        train_loro(repos()[:1], tmp_path, overrides=[], rounds=2)
