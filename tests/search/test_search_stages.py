"""The search stages one by one: tokenizer, router, RRF fusion, abstention bands, BM25."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rag.index.bm25 import build_bm25, top_positive
from rag.index.tokenize import STOPWORDS, tokenize
from rag.search.abstain import Band, band
from rag.search.fusion import rrf
from rag.search.route import looks_like_symbol, route

# --------------------------------------------------------------------------- tokenizer


@pytest.mark.parametrize("text, tokens", [
    ("handleAuthCallback", ["handleauthcallback", "handle", "auth", "callback"]),
    # snake_case: the whole, then the words ('for' is a stopword)
    ("url_for", ["url_for", "url"]),
    ("SECRET_KEY", ["secret_key", "secret", "key"]),
    # dotted: whole, each component, then the words of make_response
    ("flask.app.make_response",
     ["flask.app.make_response", "flask", "app", "make_response", "make", "response"]),
    # path
    ("src/flask/json/provider.py",
     ["src/flask/json/provider.py", "src", "flask", "json", "provider", "py"]),
    # kebab-case
    ("max-age", ["max-age", "max", "age"]),
    # acronym inside camelCase
    ("getHTTPResponse", ["gethttpresponse", "get", "http", "response"]),
    # a plain word is not repeated
    ("JSON", ["json"]),
    ("Blueprint", ["blueprint"]),
    # stopwords and 1-character tokens removed
    ("how do I use the session", ["use", "session"]),
    ("a x yz", ["yz"]),
    ("the and of", []),
    ("", []),
    # leading underscores stripped
    ("_private", ["private"]),
    # duplicates across the text are kept (term frequency)
    ("auth auth", ["auth", "auth"]),
    # a token may start with digits when a letter follows (4xx, 2fa); a number alone is none
    ("4xx and 5xx errors", ["4xx", "xx", "5xx", "xx", "errors"]),
    ("2fa x509 2024-01-01 v1.2", ["2fa", "fa", "x509", "509", "v1"]),
])
def test_tokenize(text: str, tokens: list[str]):
    assert tokenize(text) == tokens


def test_tokenize_camel_case_contains_all_parts():
    toks = set(tokenize("def handleAuthCallback(request): pass"))
    assert {"handleauthcallback", "handle", "auth", "callback", "request", "def", "pass"} <= toks


def test_stopwords_never_emitted():
    text = " ".join(sorted(STOPWORDS))
    assert tokenize(text) == []
    # but an identifier that merely contains a stopword part is kept
    assert tokenize("is_valid") == ["is_valid", "valid"]


# --------------------------------------------------------------------------- router


@pytest.mark.parametrize("query", [
    "url_for", "handleAuthCallback", "flask.app", "flask/json", "max-age", "SECRET_KEY", "JSON",
    "  url_for  ", "Flask.make_response",
])
def test_looks_like_symbol_true(query: str):
    assert looks_like_symbol(query) is True


@pytest.mark.parametrize("query", [
    "Blueprint", "how do I x", "make_response please", "", "   ", "session", "A",
    "what is url_for?",
])
def test_looks_like_symbol_false(query: str):
    assert looks_like_symbol(query) is False


def test_route():
    assert route("url_for", mode="auto", prose_mode="dense") == "bm25"
    assert route("how are sessions signed", mode="auto", prose_mode="dense") == "dense"
    assert route("how are sessions signed", mode="auto", prose_mode="hybrid") == "hybrid"
    # a fixed mode ignores the query's shape
    for mode in ("bm25", "dense", "hybrid"):
        assert route("url_for", mode=mode, prose_mode="dense") == mode
        assert route("how are sessions signed", mode=mode, prose_mode="dense") == mode
    with pytest.raises(ValueError):
        route("url_for", mode="sparse", prose_mode="dense")


# --------------------------------------------------------------------------- fusion


def test_rrf_hand_computed():
    fused = rrf({"A": [1, 2, 3], "B": [4, 5, 1]})
    # 1: rank 1 in A, rank 3 in B -> 1/61 + 1/63; 4: 1/61; 2 and 5: 1/62 (tie -> 2 first); 3: 1/63
    expected = [(1, 1 / 61 + 1 / 63), (4, 1 / 61), (2, 1 / 62), (5, 1 / 62), (3, 1 / 63)]
    assert [i for i, _ in fused] == [i for i, _ in expected]
    for (_, got), (_, want) in zip(fused, expected):
        assert got == pytest.approx(want, abs=1e-15)


def test_rrf_k_and_ties():
    # k = 0: 1/(0+1) = 1 and 1/(0+2) = 0.5; 'b' gets 1/2 + 1/1 = 1.5
    assert rrf({"A": ["a", "b"], "B": ["b"]}, k=0) == [("b", 1.5), ("a", 1.0)]
    # equal scores are ordered by the item
    assert [i for i, _ in rrf({"A": ["zeta"], "B": ["alpha"]})] == ["alpha", "zeta"]
    # k = 10: x at 1 and 2 -> 1/11 + 1/12
    assert rrf({"A": ["x"], "B": ["y", "x"]}, k=10)[0] == ("x", pytest.approx(1 / 11 + 1 / 12))
    assert rrf({}) == []
    assert rrf({"A": [], "B": []}) == []
    with pytest.raises(ValueError):
        rrf({"A": [1]}, k=-1)


# --------------------------------------------------------------------------- abstention


@pytest.mark.parametrize("top, expected", [
    (None, Band(drop=False, weak_match=False)),
    (0.0, Band(drop=True, weak_match=False)),
    (0.4499, Band(drop=True, weak_match=False)),
    (0.45, Band(drop=False, weak_match=True)),     # min_dense is inclusive
    (0.50, Band(drop=False, weak_match=True)),
    (0.5499, Band(drop=False, weak_match=True)),
    (0.55, Band(drop=False, weak_match=False)),    # weak_dense is normal
    (0.95, Band(drop=False, weak_match=False)),
])
def test_band(top, expected):
    assert band(top, min_dense=0.45, weak_dense=0.55) == expected


def test_band_with_disabled_floor():
    # min_dense = weak_dense = 0 never drops or flags a non-negative cosine
    assert band(0.0, min_dense=0.0, weak_dense=0.0) == Band(False, False)
    assert band(-0.1, min_dense=0.0, weak_dense=0.0) == Band(True, False)


# --------------------------------------------------------------------------- BM25

SMALL = ["alpha beta gamma", "alpha delta", "alpha epsilon zeta zeta", "omega theta",
         "alpha kappa"]
# N = 5 docs, lengths 3, 2, 4, 2, 2 -> avgdl = 13/5 = 2.6; k1 = 1.5, b = 0.75
# 'zeta': n = 1 -> idf = ln((5 - 1 + 0.5) / (1 + 0.5)) = ln 3 = 1.0986123
#   doc 2: tf = 2, |d| = 4: norm = 1 - b + b*4/2.6 = 0.25 + 1.1538462 = 1.4038462
#   score = ln3 * 2 * 2.5 / (2 + 1.5 * 1.4038462) = 1.0986123 * 5 / 4.1057692 = 1.3378885
ZETA_DOC2 = math.log(3) * 2 * 2.5 / (2 + 1.5 * (0.25 + 0.75 * 4 / 2.6))
# 'delta': n = 1 -> idf ln 3; doc 1: tf = 1, |d| = 2: norm = 0.25 + 0.75*2/2.6 = 0.8269231
#   score = ln3 * 2.5 / (1 + 1.5 * 0.8269231) = 1.0986123 * 2.5 / 2.2403846 = 1.2259193
DELTA_DOC1 = math.log(3) * 1 * 2.5 / (1 + 1.5 * (0.25 + 0.75 * 2 / 2.6))


def test_hand_constants():
    assert ZETA_DOC2 == pytest.approx(1.3378885, abs=1e-6)
    assert DELTA_DOC1 == pytest.approx(1.2259193, abs=1e-6)


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_both_backends_match_okapi_by_hand(backend: str):
    # bm25s leaves out (k1 + 1); the channel puts it back, so both give the documented score
    ch = build_bm25(SMALL, backend=backend)
    assert ch.backend == backend and ch.n_chunks == 5
    hits = ch.search("zeta", 10)
    assert [i for i, _ in hits] == [2]
    assert hits[0][1] == pytest.approx(ZETA_DOC2, rel=1e-6)
    # two terms in two docs: doc 2 (zeta) before doc 1 (delta)
    hits = ch.search("delta zeta", 10)
    assert [i for i, _ in hits] == [2, 1]
    assert hits[1][1] == pytest.approx(DELTA_DOC1, rel=1e-6)
    if backend == "rank_bm25":
        # query term frequency counts in BM25Okapi: 'zeta zeta' scores twice 'zeta'
        assert ch.search("zeta zeta", 10)[0][1] == pytest.approx(2 * ZETA_DOC2, rel=1e-9)


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_common_term_idf_floored_at_zero(backend: str):
    # 'alpha' is in 4 of 5 docs: ln((5 - 4 + 0.5) / (4 + 0.5)) = ln(1/3) < 0 -> idf 0, so it
    # contributes nothing and alone gives no lexical hit
    ch = build_bm25(SMALL, backend=backend)
    assert ch.search("alpha", 10) == []
    hits = ch.search("alpha zeta", 10)
    assert [i for i, _ in hits] == [2]
    assert hits[0][1] == pytest.approx(ZETA_DOC2, rel=1e-6)


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_no_known_token_gives_no_hit(backend: str):
    ch = build_bm25(SMALL, backend=backend)
    assert ch.search("unknownword", 10) == []
    assert ch.search("the and of", 10) == []   # only stopwords -> no token at all
    assert ch.search("zeta", 0) == []
    assert [i for i, _ in ch.search("zeta unknownword", 10)] == [2]


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        build_bm25(SMALL, backend="lucene")


def test_top_positive():
    scores = np.array([0.0, 2.0, 2.0, -1.0, 3.0, 0.5])
    # positives 1, 2, 4, 5 ordered by (-score, index)
    assert top_positive(scores, 10) == [(4, 3.0), (1, 2.0), (2, 2.0), (5, 0.5)]
    assert top_positive(scores, 2) == [(4, 3.0), (1, 2.0)]
    assert top_positive(np.zeros(4), 3) == []


def _synthetic(seed: int = 7, n_docs: int = 40, n_vocab: int = 90):
    rng = np.random.default_rng(seed)
    letters = "bcdfghjklmnprstvz"
    vowels = "aeiou"
    vocab: list[str] = []
    while len(vocab) < n_vocab:
        w = "".join(rng.choice(list(letters)) + rng.choice(list(vowels)) for _ in range(3))
        if w not in vocab:
            vocab.append(w)
    weights = 1.0 / np.arange(1, n_vocab + 1) ** 0.8   # Zipf-like: some frequent words
    weights /= weights.sum()
    docs = []
    for _ in range(n_docs):
        length = int(rng.integers(4, 40))
        docs.append(" ".join(rng.choice(vocab, size=length, p=weights)))
    tokenized = [tokenize(d) for d in docs]
    df = {w: sum(1 for t in tokenized if w in t) for w in vocab}
    usable = [i for i, w in enumerate(vocab) if df[w] > 0]
    qp = weights[usable] ** 0.5   # flatter than the corpus, so rare and common words both occur
    qp /= qp.sum()
    queries = []
    for _ in range(20):
        n = int(rng.integers(1, 5))
        words = [vocab[i] for i in rng.choice(usable, size=n, replace=True, p=qp)]
        if rng.random() < 0.2:
            words.append("qqqunknown")
        queries.append(" ".join(words))
    return vocab, docs, df, queries


def test_synthetic_corpus_is_what_the_parity_test_needs():
    vocab, docs, df, queries = _synthetic()
    assert all(tokenize(w) == [w] for w in vocab)
    assert len(docs) == 40 and len(queries) == 20
    # frequent words (idf floored at 0) exist and appear in some queries
    assert sum(1 for q in queries if any(df.get(w, 0) > 20 for w in q.split())) >= 3
    assert any("qqqunknown" in q for q in queries)


def test_backends_agree_on_top10_order():
    _, docs, df, queries = _synthetic()
    a = build_bm25(docs, backend="bm25s")
    b = build_bm25(docs, backend="rank_bm25")
    n_full = 0
    for q in queries:
        ha, hb = a.search(q, 10), b.search(q, 10)
        assert [i for i, _ in ha] == [i for i, _ in hb], q
        n_full += len(ha) == 10
        assert [s for _, s in ha] == pytest.approx([s for _, s in hb], rel=1e-4), q
    assert n_full >= 10   # most queries really fill the top 10
    # a query made only of words in more than half of the docs has no lexical hit
    common = " ".join(w for w, n in df.items() if n > 20)
    assert common and a.search(common, 10) == [] and b.search(common, 10) == []


# --------------------------------------------------------------------------- BM25: empty results


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_doc_freq_counts_chunks_by_hand(backend: str):
    ch = build_bm25(SMALL, backend=backend)
    # alpha in docs 0, 1, 2, 4; zeta twice in doc 2 only (a chunk counts once)
    assert [ch.scorer.doc_freq(t) for t in ("alpha", "zeta", "omega", "nothing")] == [4, 1, 1, 0]


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_empty_reason_names_the_cause(backend: str):
    ch = build_bm25(SMALL, backend=backend)
    assert ch.empty_reason("unknownword") == \
        "no lexical match: no query term occurs in the corpus"
    assert ch.empty_reason("the and of").startswith("no lexical match: the query has no "
                                                     "searchable term")
    # 'alpha' is in 4 of 5 chunks: IDF 0
    assert ch.empty_reason("alpha") == ("all terms too common: every query term found occurs "
                                        "in at least half of the 5 chunks, where BM25's IDF is 0")
    # a term that occurs nowhere does not turn a too-common one into "no match"
    assert ch.empty_reason("alpha unknownword").startswith("all terms too common")
    # 'zeta' would score; only a filter that leaves doc 2 out explains an empty result
    mask = np.array([True, True, False, True, True])
    assert ch.empty_reason("zeta", mask).startswith("no lexical match in the selected types")


# 1, 2 and 3 one-line chunks; the identifier is in the first only. Its four tokens
# (handleauthcallback, handle, auth, callback) have n = 1:
#   N = 1: idf = ln(0.5 / 1.5) < 0 -> 0;  N = 2: idf = ln(1.5 / 1.5) = 0;
#   N = 3: idf = ln(2.5 / 1.5) = 0.5108256, chunk 0 has 5 tokens (+ 'registers'), the others 3
#   and 3 -> avgdl = 11/3; per term 0.5108256 * 2.5 / (1 + 1.5 * (0.25 + 0.75 * 5 / (11/3)))
#   = 1.2770640 / 2.9090909 = 0.4389908, and four terms: 1.7559631
TINY = ["handleAuthCallback registers", "something else entirely", "another plain document"]
TINY_SCORE = 4 * math.log(2.5 / 1.5) * 2.5 / (1 + 1.5 * (0.25 + 0.75 * 5 / (11 / 3)))


def test_tiny_constant():
    assert TINY_SCORE == pytest.approx(1.7559631, abs=1e-6)


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
@pytest.mark.parametrize("n_chunks", [1, 2, 3])
def test_tiny_corpora_identifier_in_one_chunk(backend: str, n_chunks: int):
    ch = build_bm25(TINY[:n_chunks], backend=backend)
    hits = ch.search("handleAuthCallback", 10)
    if n_chunks < 3:
        assert hits == []
        assert ch.empty_reason("handleAuthCallback") == (
            "all terms too common: every query term found occurs in at least half of the "
            f"{n_chunks} chunks, where BM25's IDF is 0")
    else:
        assert [i for i, _ in hits] == [0]
        assert hits[0][1] == pytest.approx(TINY_SCORE, rel=1e-6)
    assert ch.search("missingword", 10) == []
    assert ch.empty_reason("missingword") == "no lexical match: no query term occurs in the corpus"


def _tiny_index(tmp_path, files: dict[str, str]):
    from rag.index.build import build_index

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return build_index(tmp_path, embedder=None, cache_dir=None, progress=False)


@pytest.mark.parametrize("n_files", [1, 2, 3])
def test_pipeline_empty_lexical_result_has_a_reason(tmp_path, n_files: int):
    from rag.search.pipeline import SearchOptions, SearchPipeline

    files = {"alpha.txt": "def handleAuthCallback(): registers\n",
             "beta.txt": "something else entirely\n",
             "gamma.txt": "another plain document\n"}
    index = _tiny_index(tmp_path, dict(list(files.items())[:n_files]))
    assert len(index.chunks) == n_files   # one window per file
    pipe = SearchPipeline(index, SearchOptions(mode="bm25"))
    res = pipe.search("handleAuthCallback")
    if n_files < 3:
        assert res.hits == [] and res.reason == (
            "all terms too common: every query term found occurs in at least half of the "
            f"{n_files} chunks, where BM25's IDF is 0")
    else:
        assert [h.path for h in res.hits] == ["alpha.txt"] and res.reason is None
    res = pipe.search("zzzabsent")
    assert res.hits == [] and res.reason == "no lexical match: no query term occurs in the corpus"
    res = pipe.search("what is the")   # stopwords only
    assert res.hits == [] and res.reason.startswith("no lexical match: the query has no")


def test_pipeline_reason_under_a_type_filter(tmp_path):
    from rag.search.pipeline import SearchOptions, SearchPipeline

    # 4 chunks; the identifier is only in the documentation file (n = 1: it would score)
    index = _tiny_index(tmp_path, {"a.py": "x = 1\n", "b.py": "y = 2\n", "c.py": "z = 3\n",
                                   "notes.txt": "handleAuthCallback is documented here\n"})
    res = SearchPipeline(index, SearchOptions(mode="bm25", types=("source",))).search(
        "handleAuthCallback")
    assert res.hits == [] and res.reason.startswith("no lexical match in the selected types")
    res = SearchPipeline(index, SearchOptions(mode="bm25")).search("handleAuthCallback")
    assert [h.path for h in res.hits] == ["notes.txt"] and res.reason is None


# --------------------------------------------------------------------------- BM25 IDF variants

# Lucene's IDF ln(1 + (N - n + 0.5) / (n + 0.5)) is never 0: 'alpha' (n = 4 of 5) gets
# ln(1 + 1.5 / 4.5) = ln(4/3), so it scores where Okapi's floor gives nothing
ALPHA_IDF = math.log(1 + (5 - 4 + 0.5) / (4 + 0.5))


def _okapi_tf(tf: int, length: int) -> float:
    return tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * length / 2.6))


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_lucene_idf_by_hand_on_both_backends(backend: str):
    ch = build_bm25(SMALL, backend=backend, idf="lucene")
    assert ch.idf == "lucene" and ch.path_field is False
    hits = ch.search("alpha", 10)
    # docs 1 and 4 (length 2) tie, then doc 0 (length 3), then doc 2 (length 4)
    assert [i for i, _ in hits] == [1, 4, 0, 2]
    assert [s for _, s in hits] == pytest.approx(
        [ALPHA_IDF * _okapi_tf(1, L) for L in (2, 2, 3, 4)], rel=1e-6)
    zeta = ch.search("zeta", 10)
    assert zeta[0][0] == 2
    assert zeta[0][1] == pytest.approx(math.log(1 + 4.5 / 1.5) * _okapi_tf(2, 4), rel=1e-6)
    with pytest.raises(ValueError, match="bm25.idf must be one of"):
        build_bm25(SMALL, backend=backend, idf="bm25+")


def test_path_field_weighs_the_file_stem_twice_and_keeps_the_last_directories():
    from rag.index.bm25 import path_field

    assert path_field("src/gin/tree.go") == "tree tree src gin"
    assert path_field("a/b/c/d/e/tree.go") == "tree tree c d e"
    assert path_field("setup.py") == "setup setup"
    docs = ["func insert(n)", "func insert(n)", "func other()"]
    ch = build_bm25(docs, idf="lucene", paths=["tree.go", "node.go", "misc.go"])
    assert ch.path_field is True
    # 'tree' is only in doc 0's path field: the stem, twice
    assert [i for i, _ in ch.search("tree insert", 10)][:1] == [0]
    with pytest.raises(ValueError, match="2 paths for 3 chunk texts"):
        build_bm25(docs, paths=["a.go", "b.go"])


# --------------------------------------------------------------------------- weighted RRF


def test_weighted_rrf_by_hand_and_equal_weights_are_plain_rrf():
    runs = {"dense": ["a", "b", "c"], "bm25": ["c", "a"]}
    assert rrf(runs, k=60, weights={"dense": 2.0, "bm25": 2.0}) == [
        (x, pytest.approx(2 * s)) for x, s in rrf(runs, k=60)]
    got = rrf(runs, k=0, weights={"bm25": 0.5})
    # a: 1/1 + 0.5/2 = 1.25; c: 1/3 + 0.5/1 = 0.8333; b: 1/2
    assert got == [("a", pytest.approx(1.25)), ("c", pytest.approx(1 / 3 + 0.5)),
                   ("b", pytest.approx(0.5))]
    assert rrf(runs, k=0, weights={"bm25": 0.0}) == [("a", 1.0), ("b", 0.5),
                                                     ("c", pytest.approx(1 / 3))]
    with pytest.raises(ValueError, match="weights must be >= 0"):
        rrf(runs, weights={"dense": -1.0})
