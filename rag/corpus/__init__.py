"""Corpus: fetch a pinned sdist or take a directory, walk it, categorise and chunk its files."""
