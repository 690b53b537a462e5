"""The cross-encoder reranker's training settings (``rerank.train``): a dataclass of its own,
light to import, so that :mod:`rag.app.config`'s schema (the application layer) takes it from the
search layer instead of the search layer reading the application's config module."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RerankTrainConfig:
    """How ``rag reranker train`` fine-tunes the default cross-encoder (rag/search/rerank_training.py).

    ``source`` is the training corpus: ``stdlib`` (the Python standard library that ships with
    the interpreter, disjoint from every evaluation corpus) or a directory of Python files.
    ``pairs`` counts training pairs: per positive (docstring summary, own code) one BM25 hard
    negative drawn from the ``negative_depth`` best and ``random_negatives`` random ones;
    ``held_out`` counts held-out pairs made the same way from other files (AUC on the card).
    ``lr`` is AdamW's peak learning rate, ``max_length`` the tokens per (query, code) pair,
    ``seed`` seeds the file split, the sampling and torch.
    """

    source: str = "stdlib"
    pairs: int = 2000
    held_out: int = 400
    epochs: int = 1
    batch_size: int = 16
    lr: float = 1e-4
    max_length: int = 128
    seed: int = 0
    negative_depth: int = 20
    random_negatives: int = 1
