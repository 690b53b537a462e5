"""The ranking stage (after fusion, before a reranker): registered code-aware features
(rag/search/ranking/features/, one file each) re-score the first stage's candidates
(:class:`RankingStage`, formula in stage.py), configured by the ``ranking`` group
(:class:`RankingOptions`)."""

from rag.search.ranking.options import RankingOptions
from rag.search.ranking.stage import SCORE_PREFIX, RankingStage

__all__ = ["RankingOptions", "RankingStage", "SCORE_PREFIX"]
