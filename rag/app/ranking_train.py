"""``rag ranking train``: the learned combiner (rag/search/ranking/learned.py) trained
leave-one-repository-out on a semble dataset folder.

For every repository of the folder the configured pipeline (the composed config with
``dataset=semble dataset.repo=R``, every ranking feature on, the hand-weighted combiner)
ranks each golden query's candidates; each candidate becomes one row of
:func:`rag.search.ranking.learned.candidate_matrix`, labelled 1 when it covers one of the
query's targets (semble's rule, :func:`rag.eval.chunk_metrics.chunk_matches`). Then one model
per repository R is trained on the queries of every *other* repository
(``<out>/loro/<R>.json``: what ``ranking.model=models/ranking/lambdamart/loro/${dataset.repo}.json``
reads, so no repository is scored by a model that saw its queries), and one on all of them
(``<out>/all.json``, for corpora outside the folder). ``<out>/training_log.json`` records each
fold's held-out repository, its training repositories and their query counts.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

#: where the models go, from the project root (conf/ranking/lambdamart.yaml reads it)
DEFAULT_OUT = "models/ranking/lambdamart"
#: candidates ranked per query for training (distinct paths; every candidate the stage scores)
TRAIN_DEPTH = 1000


@dataclass
class RepoRows:
    """One repository's training groups: per query, (its candidate rows, 0/1 labels)."""

    repo: str
    queries: list[str]
    groups: list[tuple[np.ndarray, np.ndarray]]


def collect_repo(repo: str, overrides: Sequence[str], stages: Any) -> RepoRows:
    """The training groups of one repository of the semble folder.

    Raises:
        RunError / ValueError: the composed config or the repository's labels are bad.
    """
    from rag.app.run import prepare, run_inputs
    from rag.app.search_cli import compose_config
    from rag.eval.chunk_metrics import chunk_matches, targets_of
    from rag.search.ranking.learned import candidate_matrix
    from rag.search.ranking.query_shape import query_shape

    cfg = compose_config(["dataset=semble", f"dataset.repo={repo}", "tracking.enabled=false",
                          "ranking.combiner=weighted", "ranking.model=null", *overrides])
    root, golden_dir, dataset_tags = run_inputs(cfg)
    prepared = prepare(cfg, root=root, golden_dir=golden_dir, dataset_tags=dataset_tags,
                       stages=stages, calibration=None)
    golden = prepared.golden
    queries, groups = [], []
    for q in golden.positives:
        hits = prepared.pipeline.search(q.query, depth=TRAIN_DEPTH).ranked
        targets = targets_of(q, golden.subtree)
        y = np.array([any(chunk_matches(h.path, int(h.start_line or 0), int(h.end_line or 0), t)
                          for t in targets) for h in hits], dtype=np.float64)
        x = candidate_matrix([h.scores for h in hits],
                             identifier=query_shape(q.query).identifier)
        queries.append(q.id)
        groups.append((x, y))
    return RepoRows(repo=repo, queries=queries, groups=groups)


def train_loro(rows: Sequence[RepoRows], out: Path, *, overrides: Sequence[str],
               rounds: int | None = None) -> dict[str, Any]:
    """Train one model per held-out repository and one on all; write them and the log.

    Returns:
        the training log (also written to ``out/training_log.json``): ``folds``, one per
        repository (``held_out``, ``train_repos``, ``train_queries`` per repository), and
        ``all``.

    Raises:
        ValueError: fewer than 2 repositories, or a fold with nothing to learn from.
    """
    from rag.search.ranking.learned import COLUMNS, MODEL_FORMAT, ROUNDS, train

    if len(rows) < 2:
        raise ValueError("leave-one-repository-out needs at least 2 repositories")
    from rag.app.search_cli import compose_config

    rounds = ROUNDS if rounds is None else rounds
    # the first_stage column reads the fused scores: the model is only valid under this fusion
    fusion = str(compose_config(["dataset=semble", *overrides]).fusion.method)
    log: dict[str, Any] = {"format": MODEL_FORMAT, "columns": list(COLUMNS),
                           "overrides": list(overrides), "fusion": fusion, "rounds": rounds,
                           "folds": []}
    for held in [*rows, None]:
        train_on = [r for r in rows if r is not held]
        prov = {"held_out": None if held is None else held.repo,
                "train_repos": [r.repo for r in train_on],
                "train_queries": {r.repo: r.queries for r in train_on},
                "overrides": list(overrides), "fusion": fusion}
        model = train([g for r in train_on for g in r.groups], provenance=prov, rounds=rounds)
        path = out / ("all.json" if held is None else f"loro/{held.repo}.json")
        model.save(path)
        entry = {"model": str(path.relative_to(out)), "held_out": prov["held_out"],
                 "train_repos": prov["train_repos"],
                 "train_queries": {r.repo: len(r.queries) for r in train_on},
                 "queries_trained": model.provenance["queries_trained"]}
        if held is None:
            log["all"] = entry
        else:
            log["folds"].append(entry)
        print(f"  {entry['model']}: {entry['queries_trained']} queries from "
              f"{len(train_on)} repositories", file=sys.stderr, flush=True)
    (out / "training_log.json").write_text(json.dumps(log, indent=1) + "\n")
    return log


def run_training(*, dataset_path: str | None, repos: Sequence[str] | None, out: Path,
                 overrides: Sequence[str], rounds: int | None = None) -> dict[str, Any]:
    """Collect every repository's rows and train (module docstring).

    Raises:
        ValueError: an unknown repository name, or see :func:`train_loro`.
    """
    from rag.app.stages import StageCache
    from rag.datasets.semble import default_root, repo_names

    root = Path(dataset_path) if dataset_path else default_root()
    if root is None:
        raise ValueError("no semble dataset folder: pass --dataset DIR")
    names = list(repo_names(root))
    unknown = [r for r in (repos or ()) if r not in names]
    if unknown:
        raise ValueError(f"unknown repositories {unknown}; {root} holds {names}")
    extra = [*(["dataset.path=" + str(root)] if dataset_path else []), *overrides]
    stages, rows = StageCache(), []
    for i, repo in enumerate(repos or names, 1):
        t = time.perf_counter()
        r = collect_repo(repo, extra, stages)
        print(f"[{i}/{len(repos or names)}] {repo}: {len(r.queries)} queries, "
              f"{sum(len(y) for _, y in r.groups)} candidates ({time.perf_counter() - t:.1f} s)",
              file=sys.stderr, flush=True)
        rows.append(r)
    return train_loro(rows, out, overrides=extra, rounds=rounds)
