"""rag: an evaluation harness and experiment tracker for retrieval over code repositories."""

__version__ = "0.1.0"
