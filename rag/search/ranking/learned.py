"""The ranking stage's learned combiner: LambdaMART (LightGBM ``lambdarank``) over the features
and the channel scores, in place of the hand-weighted sum (``ranking.combiner=lambdamart``).

Each candidate of a query is one row of :data:`COLUMNS`, normalised per query so that a model
trained on some repositories reads another's scores on the same scale:

* ``first_stage``: the first stage's score (RRF, or the one channel's) / the query's largest;
  0 for a chunk a feature added;
* ``first_stage_rrank``: 1 / the chunk's 1-based rank in the first stage (0: not ranked);
* ``bm25``: BM25 / the query's largest BM25 over its candidates (0: no match);
* ``dense``: the dense cosine (0: not scored);
* ``identifier_query``: 1 for an identifier-shaped query (rag/search/ranking/query_shape.py);
* ``rank:<feature>`` for every registered feature (rag/search/ranking/features/): its value,
  0 where an ``add`` feature did not score the chunk, 1 where a ``scale`` one did not.

:func:`candidate_matrix` builds the rows from per-candidate score mappings shaped like
``Hit.scores``, both when training (from the hits of a run) and inside the stage, so training
and serving read the same numbers. The model file (:class:`LearnedModel`) is JSON: the format,
the columns, the LightGBM booster as text and the training provenance (which repositories and
queries it saw; rag/app/commands/ranking.py writes it, leave-one-repository-out).

LambdaMART: Burges, "From RankNet to LambdaRank to LambdaMART: An Overview", MSR-TR-2010-82;
LightGBM's ``lambdarank`` objective (https://lightgbm.readthedocs.io/en/v4.6.0/Parameters.html).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rag.search.ranking.features import FEATURE_NAMES, FEATURES

#: the model file's format tag (bumped when a column's meaning changes; a new column does not
#: bump it: a model names the columns it reads)
MODEL_FORMAT = "rag-ranking-lambdamart/1"
#: LightGBM's settings (deterministic on a fixed thread count; small trees for ~50k rows)
PARAMS = {"objective": "lambdarank", "metric": "ndcg", "eval_at": [10], "learning_rate": 0.05,
          "num_leaves": 15, "min_data_in_leaf": 20, "feature_fraction": 0.9,
          "lambdarank_truncation_level": 20, "deterministic": True, "force_row_wise": True,
          "num_threads": 2, "seed": 0, "verbose": -1}
#: boosting rounds
ROUNDS = 200


def columns() -> tuple[str, ...]:
    """The model's input columns, in order (module docstring)."""
    return ("first_stage", "first_stage_rrank", "bm25", "dense", "identifier_query",
            *(f"rank:{n}" for n in FEATURE_NAMES))


COLUMNS = columns()


def candidate_matrix(cands: Sequence[Mapping[str, float | None]], *, identifier: bool,
                     columns: Sequence[str] = COLUMNS) -> np.ndarray:
    """The rows of one query's candidates.

    Args:
        cands: per candidate, its scores: ``first_stage`` (None: added by a feature), ``bm25``,
            ``dense`` and ``rank:<feature>`` (None or missing: not scored), as ``Hit.scores``.
        identifier: the query is identifier-shaped.
        columns: the columns wanted, in order, each one of :data:`COLUMNS` (a model's own
            columns: a model trained before a feature was registered reads without it).

    Returns:
        float64 array of shape (len(cands), len(columns)).

    Raises:
        ValueError: a column rag does not compute.
    """
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise ValueError(f"unknown ranking model columns {unknown}; rag computes {list(COLUMNS)}")
    n = len(cands)
    x = np.zeros((n, len(COLUMNS)), dtype=np.float64)
    if not n:
        return x[:, [COLUMNS.index(c) for c in columns]]
    first = [c.get("first_stage") for c in cands]
    known = [f for f in first if f is not None]
    top = max(known, default=0.0)
    order = sorted((i for i in range(n) if first[i] is not None), key=lambda i: (-first[i], i))
    for r, i in enumerate(order, 1):
        x[i, 1] = 1.0 / r
    bm25 = [c.get("bm25") or 0.0 for c in cands]
    top_bm25 = max(bm25)
    for i, c in enumerate(cands):
        if first[i] is not None and top > 0:
            x[i, 0] = first[i] / top
        x[i, 2] = bm25[i] / top_bm25 if top_bm25 > 0 else 0.0
        x[i, 3] = c.get("dense") or 0.0
        x[i, 4] = 1.0 if identifier else 0.0
        for j, name in enumerate(FEATURE_NAMES, 5):
            v = c.get(f"rank:{name}")
            x[i, j] = (1.0 if FEATURES[name].combine == "scale" else 0.0) if v is None else v
    if tuple(columns) == COLUMNS:
        return x
    return x[:, [COLUMNS.index(c) for c in columns]]


#: the fusion of a model file without ``provenance.fusion``: every model before 2026-12-06,
#: when RRF was the only fusion (the models shipped before then were trained under it)
FUSION_BEFORE_RECORDED = "rrf"


@dataclass
class LearnedModel:
    """A trained combiner.

    Attributes:
        booster: the ``lightgbm.Booster``.
        columns: the columns it was trained on, in order (each one of :data:`COLUMNS`; a
            model trained before a feature was registered reads without it).
        provenance: how it was trained (repositories, queries per repository, the fold's
            held-out repository, settings).
    """

    booster: Any
    columns: tuple[str, ...] = COLUMNS
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def fusion(self) -> str:
        """The fusion method whose scores it was trained on (its ``first_stage`` column reads
        them): ``provenance["fusion"]``; a model trained before rag recorded it was trained
        under RRF, then the only fusion (:data:`FUSION_BEFORE_RECORDED`)."""
        return str(self.provenance.get("fusion", FUSION_BEFORE_RECORDED))

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Scores of the rows ``x`` (shape (n, len(columns))), higher is better."""
        if not len(x):
            return np.zeros(0)
        return np.asarray(self.booster.predict(x, num_threads=1), dtype=np.float64)

    def save(self, path: Path) -> Path:
        """Write the model file (JSON: format, columns, provenance, booster text)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"format": MODEL_FORMAT, "columns": list(self.columns),
                                    "provenance": self.provenance,
                                    "booster": self.booster.model_to_string()}, indent=1) + "\n")
        return path


def train(groups: Sequence[tuple[np.ndarray, np.ndarray]], *,
          provenance: dict[str, Any] | None = None, rounds: int = ROUNDS,
          columns: Sequence[str] = COLUMNS) -> LearnedModel:
    """Train LambdaMART on query groups.

    Args:
        groups: per query, (its rows from :func:`candidate_matrix` over ``columns``, its 0/1
            labels); a query without a relevant candidate teaches nothing and is left out.
        provenance: recorded in the model file.
        columns: the rows' columns (default: every column rag computes).

    Raises:
        ValueError: no query has both a relevant and a non-relevant candidate.
    """
    import lightgbm as lgb

    kept = [(x, y) for x, y in groups if len(y) > 1 and 0 < y.sum() < len(y)]
    if not kept:
        raise ValueError("no query has both a relevant and a non-relevant candidate")
    x = np.vstack([g for g, _ in kept])
    y = np.concatenate([lab for _, lab in kept]).astype(np.float64)
    data = lgb.Dataset(x, label=y, group=[len(lab) for _, lab in kept],
                       feature_name=[c.replace(":", "_") for c in columns],
                       free_raw_data=True)
    booster = lgb.train(PARAMS, data, num_boost_round=rounds)
    prov = {**(provenance or {}), "queries_trained": len(kept), "rows": int(len(y)),
            "rounds": rounds, "params": PARAMS}
    return LearnedModel(booster=booster, columns=tuple(columns), provenance=prov)


@lru_cache(maxsize=64)
def load_model(path: str, mtime_ns: int) -> LearnedModel:
    """The model file at ``path`` (``mtime_ns`` keys the cache: a rewritten file is re-read).

    Raises:
        ValueError: not a model file of :data:`MODEL_FORMAT`, or trained on a column this rag
            does not compute (naming the file).
    """
    import lightgbm as lgb

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"ranking.model {path}: cannot read a model file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT:
        raise ValueError(f"ranking.model {path}: not a {MODEL_FORMAT} model file")
    cols = doc.get("columns")
    if (not isinstance(cols, list) or not cols
            or any(not isinstance(c, str) or c not in COLUMNS for c in cols)):
        raise ValueError(f"ranking.model {path}: trained on columns {cols}, this rag computes "
                         f"{list(COLUMNS)}: retrain it (rag ranking train)")
    booster = lgb.Booster(model_str=doc["booster"])
    if booster.feature_name() != [c.replace(":", "_") for c in cols]:
        raise ValueError(f"ranking.model {path}: its booster reads the columns "
                         f"{booster.feature_name()}, the file names {cols}")
    return LearnedModel(booster=booster, columns=tuple(cols),
                        provenance=doc.get("provenance", {}))


def model_at(path: str | Path) -> LearnedModel:
    """:func:`load_model` of ``path``, cached while the file is unchanged.

    Raises:
        ValueError: no such file, or see :func:`load_model`.
    """
    p = Path(path)
    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        raise ValueError(f"ranking.model {p}: no such file (train one with rag ranking train)"
                         ) from None
    return load_model(str(p), mtime)
