"""How a metric computed on one tag's queries is named in the ledger.

A golden set's tags (``prose``, ``symbol``, ``config``, ...) slice the positives; every
ranking metric is also logged per tag as ``tag.<tag>.<metric>`` (``tag.prose.recall_at_8``,
``tag.config.mrr``). The ``tag.`` prefix keeps per-tag metrics together and after the
headline metrics, and never reads like a config key (the old ``config/mrr`` did).
A tag may hold ``.`` (rag.eval.golden's ``_TAG``) but a metric name never does, so a name
splits at its last ``.``.
"""

from __future__ import annotations

TAG_PREFIX = "tag."


def tag_metric(tag: str, metric: str) -> str:
    """The ledger name of ``metric`` (``mrr``, ``recall_at_8``, ``n_queries``) on ``tag``'s
    queries: ``tag_metric("prose", "mrr") == "tag.prose.mrr"``."""
    return f"{TAG_PREFIX}{tag}.{metric}"


def split_tag_metric(name: str) -> tuple[str, str] | None:
    """``(tag, metric)`` for a per-tag metric name, ``None`` for any other name:
    ``split_tag_metric("tag.prose.mrr") == ("prose", "mrr")``."""
    if not name.startswith(TAG_PREFIX):
        return None
    tag, sep, metric = name[len(TAG_PREFIX):].rpartition(".")
    if not sep or not tag or not metric:
        return None
    return tag, metric
