"""The BM25 channel: Okapi BM25 over the code-aware tokens, with two interchangeable backends
and two IDF variants.

* ``bm25s`` (default): sparse-matrix BM25 (https://github.com/xhluca/bm25s).
* ``rank_bm25``: ``BM25Okapi`` from rank-bm25, the reference implementation
  (https://github.com/dorianbrown/rank_bm25).

Scoring follows Robertson et al., "Okapi at TREC-3" (1994):
``score(q, d) = sum_t idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))``
with N the number of chunks and n_t the number of chunks holding t, and ``bm25.idf``
(:data:`IDF_VARIANTS`) one of:

* ``okapi``: ``idf(t) = max(0, ln((N - n_t + 0.5) / (n_t + 0.5)))`` (bm25s ``robertson``,
  which clamps the log's argument at 1; ``BM25Okapi`` with ``epsilon=0``). A term in at least
  half of the chunks contributes nothing, so a query made only of such terms has no lexical
  hit (``Command`` in cobra, ``Json`` in circe): :meth:`BM25Channel.empty_reason` says
  ``all terms too common``. In a 1-chunk corpus nothing scores; in a 2-chunk one a term in one
  chunk has idf 0; from 3 chunks on it scores (ln(2.5/1.5) = 0.51).
* ``lucene`` (the default, conf/bm25/default.yaml): ``idf(t) = ln(1 + (N - n_t + 0.5) /
  (n_t + 0.5))``, always > 0 (bm25s ``lucene``; a ``BM25Okapi`` subclass for the reference),
  as Lucene and semble's BM25 score (Kamphuis et al., "Which BM25 do you mean?", ECIR 2020).

Both backends give the same scores under either variant (bm25s leaves out the constant
``k1 + 1``; the channel puts it back), checked by hand in tests/search/test_search_stages.py
and by the benchmark (rag/bench/bm25.py). ``bm25.path_field`` appends each chunk's
:func:`path_field` (its file stem twice and last directories) to its BM25 text. Measured on
semble's 18 repositories with the ranking stage after BM25 (``+suite=semble +sweep=bm25_idf``,
macro semble NDCG@10, experiments/ranking.md): okapi 0.736, lucene 0.753, lucene with the path
field 0.750.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from rag.index.tokenize import get_tokenizer


class BM25Scorer(Protocol):
    """Scores every chunk for one tokenized query; returns float array of shape (n_chunks,)."""

    def scores(self, query_tokens: list[str]) -> np.ndarray: ...

    def doc_freq(self, token: str) -> int:
        """Number of chunks that hold ``token`` (0 when it is not in the corpus)."""
        ...

    def term_doc_freqs(self) -> dict[str, int]:
        """Every indexed token -> the number of chunks that hold it (each > 0)."""
        ...


class Bm25sScorer:
    """bm25s backend (method ``robertson``): bm25s builds the eager score matrix, this class
    keeps its CSC arrays and scores a query from them.

    The matrix holds one precomputed BM25 term score per (chunk, token) pair (columns =
    tokens). A query's score is the sum of its tokens' columns, accumulated token by token in
    float32 with ``np.add.at`` — bm25s's own ``BM25._compute_relevance_from_scores``, so the
    scores are bm25s's to the bit — and scoring needs neither bm25s nor scipy, so a saved
    matrix (:meth:`save` / :meth:`load`, the published build's ``bm25.npz``) answers a cold
    ``rag search`` without tokenizing the corpus again.

    bm25s leaves the constant ``(k1 + 1)`` out of the term-frequency numerator; it is put back
    here so both backends report the same Okapi score (rank_bm25 keeps it), not just the same
    ranking.

    Args:
        data, indices, indptr: the CSC arrays (float32 scores, int chunk ids, int offsets of
            shape (n_tokens + 1,)).
        vocab: token -> column.
        n_docs: number of chunks.
        scale: ``k1 + 1``.
    """

    #: the files :meth:`save` writes in a build directory
    FILES = ("bm25.npz", "bm25_vocab.json")

    def __init__(self, *, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                 vocab: dict[str, int], n_docs: int, scale: float) -> None:
        _check_csc(data, indices, indptr, n_tokens=len(vocab), n_docs=n_docs, scale=scale)
        self._data = np.asarray(data, dtype=np.float32)
        self._indices = indices
        self._indptr = indptr
        self._vocab = vocab
        self._n = int(n_docs)
        self._scale = float(scale)

    @classmethod
    def build(cls, corpus_tokens: Sequence[list[str]], *, k1: float, b: float,
              idf: str = "okapi") -> "Bm25sScorer":
        """Index ``corpus_tokens`` (one token list per chunk) with bm25s (method ``robertson``
        for ``idf="okapi"``, ``lucene`` for ``idf="lucene"``: :data:`IDF_VARIANTS`)."""
        import logging

        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every build at DEBUG
        model = bm25s.BM25(method=IDF_VARIANTS[idf], k1=k1, b=b)
        model.index([list(t) for t in corpus_tokens], show_progress=False)
        if getattr(model, "nonoccurrence_array", None) is not None:  # bm25l/bm25+ only
            raise AssertionError(f"{IDF_VARIANTS[idf]} BM25 has no non-occurrence scores")
        sc = model.scores
        n_cols = len(sc["indptr"]) - 1  # bm25s adds "" to its vocabulary with no column
        return cls(data=sc["data"], indices=sc["indices"], indptr=sc["indptr"],
                   vocab={t: i for t, i in model.vocab_dict.items() if i < n_cols},
                   n_docs=len(corpus_tokens), scale=k1 + 1.0)

    def save(self, build: Path) -> list[str]:
        """Write the matrix to ``build``/:data:`FILES` (numpy arrays, and the vocabulary as a
        JSON list in column order); returns the file names."""
        tokens = [""] * len(self._vocab)
        for t, i in self._vocab.items():
            tokens[i] = t
        np.savez(build / self.FILES[0], data=self._data, indices=self._indices,
                 indptr=self._indptr, n_docs=np.int64(self._n), scale=np.float64(self._scale))
        (build / self.FILES[1]).write_text(json.dumps(tokens, ensure_ascii=False))
        return list(self.FILES)

    @classmethod
    def load(cls, build: Path) -> "Bm25sScorer":
        """The matrix :meth:`save` wrote in ``build``.

        Raises:
            OSError: a file is missing or unreadable; ValueError: the files are not such a
            matrix (not an npz, missing arrays, shapes that disagree)."""
        tokens = json.loads((build / cls.FILES[1]).read_text())
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ValueError(f"{cls.FILES[1]} is not a list of tokens")
        try:
            with np.load(build / cls.FILES[0], allow_pickle=False) as z:
                arrays = {k: z[k] for k in ("data", "indices", "indptr", "n_docs", "scale")}
        except KeyError as exc:
            raise ValueError(f"{cls.FILES[0]} lacks the array {exc}") from None
        except Exception as exc:  # noqa: BLE001 - zipfile/pickle errors of a damaged file
            if isinstance(exc, OSError):
                raise
            raise ValueError(f"{cls.FILES[0]} is not a saved BM25 matrix ({exc})") from None
        n_docs, scale = arrays["n_docs"], arrays["scale"]
        if n_docs.shape != () or n_docs.dtype.kind not in "iu" or scale.shape != () \
                or scale.dtype.kind != "f":
            raise ValueError(f"{cls.FILES[0]}: n_docs and scale are not one integer and one float")
        vocab = {t: i for i, t in enumerate(tokens)}
        if len(vocab) != len(tokens):
            raise ValueError(f"{cls.FILES[1]} repeats a token")
        return cls(data=arrays["data"], indices=arrays["indices"], indptr=arrays["indptr"],
                   vocab=vocab, n_docs=int(n_docs), scale=float(scale))

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 score of every chunk, shape (n_chunks,), float32; tokens not in the vocabulary
        score 0 (a repeated query token counts each time, as in bm25s)."""
        scores = np.zeros(self._n, dtype=np.float32)
        ids = [self._vocab[t] for t in query_tokens if t in self._vocab]
        for tid in ids:
            start, end = self._indptr[tid], self._indptr[tid + 1]
            np.add.at(scores, self._indices[start:end], self._data[start:end])
        return scores * np.float32(self._scale)

    def doc_freq(self, token: str) -> int:
        """Number of chunks that hold ``token``: the entries of its column in the score matrix
        (bm25s keeps an entry for every (chunk, token) pair, zero-IDF ones included)."""
        tid = self._vocab.get(token)
        if tid is None:
            return 0
        return int(self._indptr[tid + 1] - self._indptr[tid])

    def term_doc_freqs(self) -> dict[str, int]:
        """Every token -> its :meth:`doc_freq` (the column lengths of the score matrix)."""
        counts = np.diff(np.asarray(self._indptr))
        return {t: int(counts[i]) for t, i in self._vocab.items() if counts[i] > 0}


def _check_csc(data: Any, indices: Any, indptr: Any, *, n_tokens: int, n_docs: Any,
               scale: Any) -> None:
    """Refuse arrays that are not a BM25 score matrix of ``n_tokens`` columns over ``n_docs``
    chunks: 1-D arrays of the right kinds (float scores, integer ids and offsets), offsets from
    0 to ``len(data)`` that never decrease, chunk ids in ``[0, n_docs)``, finite scores and a
    finite positive ``scale`` — so a damaged saved matrix is rebuilt, never scored.

    Raises:
        ValueError: naming the first problem.
    """
    arrays = {"data": data, "indices": indices, "indptr": indptr}
    for name, a in arrays.items():
        if not isinstance(a, np.ndarray) or a.ndim != 1:
            raise ValueError(f"BM25 matrix: {name} is not a 1-D array")
    if data.dtype.kind != "f" or indices.dtype.kind not in "iu" or indptr.dtype.kind not in "iu":
        raise ValueError(f"BM25 matrix: wrong array types (data {data.dtype}, indices "
                         f"{indices.dtype}, indptr {indptr.dtype})")
    if not isinstance(n_docs, (int, np.integer)) or isinstance(n_docs, bool) or n_docs < 0:
        raise ValueError(f"BM25 matrix: chunk count {n_docs!r} is not a count")
    if not isinstance(scale, (float, int, np.floating, np.integer)) or not np.isfinite(scale) \
            or scale <= 0:
        raise ValueError(f"BM25 matrix: scale {scale!r} is not a positive number")
    if len(indptr) != n_tokens + 1 or len(data) != len(indices):
        raise ValueError(f"BM25 matrix does not match its vocabulary: {len(indptr)} offsets "
                         f"for {n_tokens} tokens, {len(data)} scores for {len(indices)} "
                         "chunk ids")
    if indptr[0] != 0 or indptr[-1] != len(data) or bool(np.any(np.diff(indptr) < 0)):
        raise ValueError("BM25 matrix: its offsets do not run from 0 to the number of scores")
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= n_docs):
        raise ValueError(f"BM25 matrix names a chunk outside 0..{n_docs - 1}")
    if not bool(np.all(np.isfinite(data))):
        raise ValueError("BM25 matrix holds a score that is not finite")


class RankBM25Scorer:
    """rank-bm25 ``BM25Okapi`` backend (the reference).

    ``epsilon=0``: a term in more than half of the chunks has a negative Robertson IDF; both
    backends floor it at 0 (bm25s clamps the IDF's argument at 1; BM25Okapi's default would
    instead substitute 0.25 x the mean IDF, which ranks differently).
    """

    def __init__(self, corpus_tokens: Sequence[list[str]], *, k1: float, b: float,
                 idf: str = "okapi") -> None:
        import math

        from rank_bm25 import BM25Okapi

        class LuceneIdf(BM25Okapi):
            """BM25Okapi with Lucene's IDF ``ln(1 + (N - n + 0.5) / (n + 0.5))``."""

            def _calc_idf(self, nd):  # noqa: ANN001 - rank_bm25's hook
                for word, freq in nd.items():
                    self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))

        if idf not in IDF_VARIANTS:
            raise ValueError(f"bm25.idf must be one of {sorted(IDF_VARIANTS)}, got {idf!r}")
        model_cls = LuceneIdf if idf == "lucene" else BM25Okapi
        self._n = len(corpus_tokens)
        self._model = model_cls([list(t) for t in corpus_tokens], k1=k1, b=b, epsilon=0.0)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 score of every chunk, shape (n_chunks,), float64."""
        if not query_tokens:
            return np.zeros(self._n, dtype=np.float64)
        return np.asarray(self._model.get_scores(query_tokens), dtype=np.float64)

    def doc_freq(self, token: str) -> int:
        """Number of chunks that hold ``token`` (a scan of BM25Okapi's per-chunk counts)."""
        if token not in self._model.idf:
            return 0
        return sum(1 for freqs in self._model.doc_freqs if token in freqs)

    def term_doc_freqs(self) -> dict[str, int]:
        """Every token -> the number of chunks that hold it (one pass over the chunks)."""
        from collections import Counter

        counts: Counter[str] = Counter()
        for freqs in self._model.doc_freqs:
            counts.update(freqs.keys())
        return dict(counts)


#: ``bm25.idf`` -> the bm25s method: ``okapi`` (Robertson's, floored at 0: rank_bm25 parity)
#: or ``lucene`` (``ln(1 + (N - n_t + 0.5) / (n_t + 0.5))``, never 0: a term in most chunks
#: still scores, Kamphuis et al., ECIR 2020, https://doi.org/10.1007/978-3-030-45442-5_4)
IDF_VARIANTS = {"okapi": "robertson", "lucene": "lucene"}
#: directories of a chunk's path that :func:`path_field` keeps (the last ones)
PATH_FIELD_DIRS = 3


def path_field(path: str) -> str:
    """The path field appended to a chunk's BM25 text under ``bm25.path_field``: the file stem
    twice and its last :data:`PATH_FIELD_DIRS` directories (``src/gin/tree.go`` -> ``tree tree
    src gin``), so a query word in a file's name outweighs one in its body (semble's
    ``enrich_for_bm25``, MinishLab/semble index/sparse.py: a header scheme in place of BM25F)."""
    from pathlib import PurePosixPath

    p = PurePosixPath(path)
    dirs = [d for d in p.parent.parts if d not in (".", "/")][-PATH_FIELD_DIRS:]
    return " ".join([p.stem, p.stem, *dirs])


def build_bm25(texts: Sequence[str], *, backend: str = "bm25s", k1: float = 1.5,
               b: float = 0.75, tokenizer: str = "code", idf: str = "okapi",
               paths: Sequence[str] | None = None) -> "BM25Channel":
    """Tokenize ``texts`` (one per chunk) with ``tokenizer`` (rag/index/tokenize.py
    ``TOKENIZERS``; queries are tokenized the same way) and build the channel.

    Args:
        idf: :data:`IDF_VARIANTS`.
        paths: each chunk's path, to append its :func:`path_field` (None: no path field).

    Raises:
        ValueError: unknown ``backend``, ``tokenizer`` or ``idf``, or ``paths`` of another
            length than ``texts``.
    """
    tokenize = get_tokenizer(tokenizer)
    if idf not in IDF_VARIANTS:
        raise ValueError(f"bm25.idf must be one of {sorted(IDF_VARIANTS)}, got {idf!r}")
    if paths is not None:
        if len(paths) != len(texts):
            raise ValueError(f"{len(paths)} paths for {len(texts)} chunk texts")
        texts = [f"{t} {path_field(p)}" for t, p in zip(texts, paths)]
    corpus_tokens = [tokenize(t) for t in texts]
    if backend == "bm25s":
        scorer: BM25Scorer = Bm25sScorer.build(corpus_tokens, k1=k1, b=b, idf=idf)
    elif backend == "rank_bm25":
        scorer = RankBM25Scorer(corpus_tokens, k1=k1, b=b, idf=idf)
    else:
        raise ValueError(f"unknown bm25.backend {backend!r}; expected 'bm25s' or 'rank_bm25'")
    return BM25Channel(scorer, backend=backend, n_chunks=len(texts), tokenizer=tokenizer,
                       k1=k1, b=b, idf=idf, path_field=paths is not None)


def load_bm25(build: Path, info: Any, *, n_chunks: int, backend: str, k1: float, b: float,
              tokenizer: str, idf: str = "okapi",
              path_field: bool = False) -> "BM25Channel | None":
    """The channel a build saved (its manifest's ``bm25`` entry ``info``, from
    :meth:`BM25Channel.save`), or None when the build saved none or saved it under other
    settings (``backend``, ``k1``, ``b``, ``tokenizer``, ``idf``, ``path_field``; an entry
    saved before ``idf`` and ``path_field`` existed was ``okapi`` without a path field): then
    the caller rebuilds it from the chunks, as for a k1 sweep over one build).

    Raises:
        OSError, ValueError: the saved files are missing, damaged or hold another number of
            chunks than ``n_chunks``.
    """
    if not isinstance(info, dict) or backend != "bm25s" or info.get("backend") != "bm25s":
        return None
    if (info.get("k1"), info.get("b"), info.get("tokenizer"), info.get("idf", "okapi"),
            bool(info.get("path_field", False))) != (float(k1), float(b), tokenizer, idf,
                                                     bool(path_field)):
        return None
    scorer = Bm25sScorer.load(build)
    if scorer._n != n_chunks:
        raise ValueError(f"the saved BM25 matrix has {scorer._n} chunks, the build {n_chunks}")
    if scorer._scale != float(k1) + 1.0:
        raise ValueError(f"the saved BM25 matrix's scale {scorer._scale} is not k1 + 1 = "
                         f"{float(k1) + 1.0}")
    return BM25Channel(scorer, backend=backend, n_chunks=n_chunks, tokenizer=tokenizer, k1=k1, b=b,
                       idf=idf, path_field=path_field)


class BM25Channel:
    """Ranks chunks for a query by BM25; chunks with score 0 are not lexical hits (a
    :class:`rag.search.channels.Channel` named ``bm25``)."""

    name = "bm25"
    no_match = 0.0

    def __init__(self, scorer: BM25Scorer, *, backend: str, n_chunks: int,
                 tokenizer: str = "code", k1: float | None = None, b: float | None = None,
                 idf: str = "okapi", path_field: bool = False) -> None:
        self.idf, self.path_field = idf, path_field
        self.scorer = scorer
        self.backend = backend
        self.n_chunks = n_chunks
        self.tokenizer = tokenizer
        self.k1, self.b = k1, b
        self._tokenize = get_tokenizer(tokenizer)

    def save(self, build: Path) -> dict[str, Any] | None:
        """Write the scorer into the build directory ``build`` when its backend can be saved
        (bm25s: :meth:`Bm25sScorer.save`) and return the manifest entry that
        :func:`load_bm25` reads back; None otherwise (rank_bm25, the reference, is rebuilt)."""
        if not isinstance(self.scorer, Bm25sScorer) or self.k1 is None or self.b is None:
            return None
        files = self.scorer.save(build)
        return {"backend": self.backend, "k1": float(self.k1), "b": float(self.b),
                "tokenizer": self.tokenizer, "idf": self.idf, "path_field": self.path_field,
                "files": files}

    def tokens(self, text: str) -> list[str]:
        """``text`` as this channel's tokenizer (``bm25.tokenizer``) splits it."""
        return self._tokenize(text)

    def score(self, query: str, *, timings: dict[str, float] | None = None) -> np.ndarray:
        """BM25 score of every chunk for ``query``, shape (n_chunks,)."""
        return self.scorer.scores(self._tokenize(query))

    def search(self, query: str, depth: int) -> list[tuple[int, float]]:
        """Top ``depth`` (chunk index, score) pairs, best first, ties by chunk index.

        Only chunks with a positive score are returned: an all-zero score vector (no query
        token occurs in the corpus) means "no lexical hit" and gives an empty list, never an
        arbitrary order.
        """
        scores = self.scorer.scores(self._tokenize(query))
        return top_positive(scores, depth)

    def empty_reason(self, query: str, allowed: np.ndarray | None = None) -> str:
        """Why ``query`` has no lexical hit (call it when the hit list is empty).

        Args:
            query: the query text (never part of the answer).
            allowed: the boolean chunk mask of a type filter, if one was applied.

        Returns:
            ``"no lexical match: ..."`` when no query term occurs in the corpus (or the query
            has no term at all, e.g. only stopwords), ``"all terms too common: ..."`` when every
            query term that occurs is in at least half of the chunks (IDF 0, see the module
            docstring), or ``"no lexical match in the selected types: ..."`` when a term that
            would score occurs only in chunks the filter left out.
        """
        tokens = set(self._tokenize(query))
        if not tokens:
            return ("no lexical match: the query has no searchable term (only stopwords, "
                    "punctuation or one-letter words)")
        freqs = [n for n in (self.scorer.doc_freq(t) for t in tokens) if n > 0]
        if not freqs:
            return "no lexical match: no query term occurs in the corpus"
        if self.idf == "okapi" and all(n >= self.n_chunks / 2 for n in freqs):
            return (f"all terms too common: every query term found occurs in at least half "
                    f"of the {self.n_chunks} chunks, where BM25's IDF is 0")
        if allowed is not None and not bool(np.all(allowed)):
            return ("no lexical match in the selected types: the query terms that would score "
                    "occur only in chunks of other types")
        return "no lexical match: no chunk scores above 0"


def top_positive(scores: np.ndarray, depth: int) -> list[tuple[int, float]]:
    """Indices of the ``depth`` largest strictly positive scores, ordered by (-score, index)."""
    pos = np.flatnonzero(scores > 0)
    if pos.size == 0:
        return []
    order = np.lexsort((pos, -scores[pos].astype(np.float64)))
    chosen = pos[order[:depth]]
    return [(int(i), float(scores[i])) for i in chosen]
