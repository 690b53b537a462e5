"""Index: the BM25 channel, the dense channel and its embedding cache."""
