"""rag/search/ranking/query_shape.py: which queries are identifier-shaped, and what prose gives."""

from __future__ import annotations

import pytest

from rag.search.ranking.query_shape import identifier_parts, query_shape


@pytest.mark.parametrize("query, names", [
    ("ExecuteC", {"ExecuteC"}),
    ("Command", {"Command"}),            # a capitalised word counts (unlike the router)
    ("url_for", {"url_for"}),
    ("_private", {"_private"}),
    ("Sinatra::Base", {"Base", "Sinatra::Base"}),
    ("flask.app.Flask", {"Flask", "flask.app.Flask"}),
    ("  Json  ", {"Json"}),
])
def test_identifier_queries_and_their_names(query, names):
    s = query_shape(query)
    assert s.identifier and s.names == frozenset(names)
    assert s.embedded == frozenset() and s.keywords == frozenset()


@pytest.mark.parametrize("query", ["how does routing work", "radix tree path matching",
                                   "route", "HTTP server"])
def test_prose_is_not_an_identifier(query):
    assert not query_shape(query).identifier


def test_prose_keywords_and_embedded_identifiers():
    s = query_shape("Where is the HandlerStack built for url_for and JSON?")
    # stopwords and words of < 3 letters dropped, lower-cased; acronyms are not identifiers
    assert s.keywords == {"handlerstack", "built", "url_for", "json"}
    assert s.embedded == {"HandlerStack", "url_for"}
    assert s.names == frozenset()


def test_one_lower_case_word_is_prose_that_may_name_a_definition():
    s = query_shape("distill")
    assert not s.identifier and s.names == frozenset()
    assert s.embedded == {"distill"} and s.keywords == {"distill"}
    # a stopword, a word of < 3 letters or two words are not
    assert query_shape("where").embedded == frozenset()
    assert query_shape("io").embedded == frozenset()
    assert query_shape("route matching").embedded == frozenset()


@pytest.mark.parametrize("token, parts", [
    ("HandlerStack", ("handlerstack", "handler", "stack")),
    ("radix_tree", ("radix_tree", "radix", "tree")),
    ("HTTPServer", ("httpserver", "http", "server")),
    ("simple", ("simple",)),
])
def test_identifier_parts(token, parts):
    assert identifier_parts(token) == parts
