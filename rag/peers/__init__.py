"""Peers: other retrieval systems evaluated through rag's Retriever contract (rag/eval/retriever.py)
on any corpus, so they sit in the same ledger, suites and significance tests as rag's own
configurations. Each adapter is one module registered in :data:`rag.eval.retriever.RETRIEVERS`:

* :mod:`rag.peers.semble_retriever` — PyPI ``semble`` 0.7.0 in its model-free modes, run by
  ``semble_worker.py`` in a virtual environment of its own (``make peers``);
* :mod:`rag.peers.ripgrep_retriever` — ``rg --count`` as semble's benchmark runs it.

A peer that is not installed raises :class:`PeerUnavailable`: its rows are skipped with that
reason (no ledger row), never scored as empty answers.
"""


class PeerUnavailable(RuntimeError):
    """A peer's program is not installed here; the message says what to install."""
