"""The ranking stage's settings (the ``ranking`` config group); the one place their defaults
live: the schema (rag/app/config.py ``RankingConfig``) and conf/ranking/ read them here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rag.core.paths import expand_path

#: feature -> weight (rag/search/ranking/stage.py: ``add`` features in units of the best
#: first-stage score, ``scale`` ones as an exponent); semble's values (MinishLab/semble
#: ranking/boosting.py: definition x3, embedded identifiers half of it, stem x1, file coherence
#: 0.2), not tuned on the benchmark
DEFAULT_WEIGHTS = {"definition": 3.0, "embedded_identifier": 1.5, "path_match": 1.0,
                   "file_coherence": 0.2, "file_semantic": 0.0, "category_prior": 1.0,
                   "chunk_length": 0.0}
#: category or path mark -> factor (semble's ranking/penalties.py: tests, examples and compat
#: 0.3, re-exports 0.5, .d.ts 0.7). Documentation and config are 1 (no prior): semble's labels
#: never name them (its index leaves them out), but rag's own sets do (Flask, zod and
#: itsdangerous docs queries lose 0.03-0.62 Recall@8 at 0.3); conf/ranking/code_only.yaml
#: adds them back (experiments/ranking.md)
DEFAULT_PRIORS = {"test": 0.3, "example": 0.3, "documentation": 1.0, "config": 1.0,
                  "reexport": 0.5, "compat": 0.3, "declaration": 0.7}
#: how the features' values become one score (rag/search/ranking/stage.py)
COMBINERS = ("weighted", "lambdamart")
#: the factor of each further chunk of a file already selected (semble's file saturation,
#: 0.5 there): off, since several chunks of one file are each a relevant unit of rag's own
#: sets (0.5 costs Flask 0.11 Recall@8); conf/ranking/code_only.yaml and
#: conf/dataset/semble.yaml (a file-labelled task) set semble's 0.5 (experiments/ranking.md)
DEFAULT_FILE_SATURATION = 1.0


@dataclass(frozen=True)
class RankingOptions:
    """Attributes:
        enabled: run the stage (after fusion, before a reranker).
        features: the features that run (rag/search/ranking/features/ ``FEATURE_NAMES``);
            one left out is neither computed nor logged.
        weights: feature -> weight (missing: :data:`DEFAULT_WEIGHTS`' value).
        priors: ``category_prior``'s factors.
        file_saturation: in (0, 1]: the n-th extra chunk of one file in the ranking is scored
            ``x file_saturation ** n`` (1: off).
        scan: let features add chunks the first stage did not return.
        combiner: :data:`COMBINERS`: ``weighted`` (the hand-weighted formula of stage.py) or
            ``lambdamart`` (the model file ``model``, rag/search/ranking/learned.py).
        model: the learned combiner's model file (``combiner=lambdamart`` only; in the config
            a relative path is taken from the project root).
    """

    enabled: bool = True
    features: tuple[str, ...] = tuple(DEFAULT_WEIGHTS)
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    priors: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PRIORS))
    file_saturation: float = DEFAULT_FILE_SATURATION
    scan: bool = True
    combiner: str = "weighted"
    model: str | None = None

    @classmethod
    def from_config(cls, node: Any) -> "RankingOptions":
        """From the composed ``ranking`` group (None or missing: the defaults).

        Raises:
            ValueError: an unknown feature, a weight of an unknown feature, a non-finite
                weight or prior, ``file_saturation`` outside (0, 1], or under ``lambdamart``
                a model file that is missing or not a model of this rag.
        """
        if node is None:
            return cls()
        opts = cls(enabled=bool(node.enabled), features=tuple(str(f) for f in node.features),
                   weights={**DEFAULT_WEIGHTS, **{str(k): float(v) for k, v in node.weights.items()}},
                   priors={str(k): float(v) for k, v in node.priors.items()},
                   file_saturation=float(node.file_saturation), scan=bool(node.scan),
                   combiner=str(node.get("combiner", "weighted")),
                   model=None if node.get("model") is None else str(expand_path(node.model)))
        opts.check()
        return opts

    def check(self) -> None:
        """Raises ValueError naming the first bad setting (see :meth:`from_config`)."""
        import math

        from rag.search.ranking.features import FEATURE_NAMES

        for f in (*self.features, *self.weights):
            if f not in FEATURE_NAMES:
                raise ValueError(f"ranking: unknown feature {f!r}; registered: "
                                 f"{list(FEATURE_NAMES)}")
        for what, table in (("weights", self.weights), ("priors", self.priors)):
            for k, v in table.items():
                if not math.isfinite(v) or (what == "priors" and v <= 0):
                    raise ValueError(f"ranking.{what}.{k} must be a finite number"
                                     + (" > 0" if what == "priors" else "") + f", got {v}")
        if self.combiner not in COMBINERS:
            raise ValueError(f"ranking.combiner must be one of {list(COMBINERS)}, got "
                             f"{self.combiner!r}")
        if self.combiner == "lambdamart" and not self.model:
            raise ValueError("ranking.combiner=lambdamart needs ranking.model=FILE (a model "
                             "file of rag ranking train)")
        if self.combiner == "lambdamart":
            from rag.search.ranking.learned import model_at

            model_at(self.model)  # a missing or unreadable file fails here, named, not mid-run
        if not 0 < self.file_saturation <= 1:
            raise ValueError(f"ranking.file_saturation must be in (0, 1], got "
                             f"{self.file_saturation}")


def ablation_sweep(features: tuple[str, ...] | None = None) -> list[tuple[str, ...]]:
    """The feature sets of the ranking ablation (conf/sweep/ranking.yaml), in order: every
    feature (the baseline), each one removed, each one alone, none (file saturation only).

    Args:
        features: the features to ablate (default: every registered one with a non-zero
            default weight, in registry order; a weight-0 feature changes no ranking).

    Returns:
        distinct feature tuples, baseline first.
    """
    from rag.search.ranking.features import FEATURE_NAMES

    if features is None:
        features = tuple(f for f in FEATURE_NAMES if DEFAULT_WEIGHTS.get(f, 0.0))
    sets = [features, *(tuple(g for g in features if g != f) for f in features),
            *((f,) for f in features), ()]
    out: list[tuple[str, ...]] = []
    for s in sets:
        if s not in out:
            out.append(s)
    return out
