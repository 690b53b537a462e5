"""Converters from external retrieval datasets to a rag corpus directory and golden set."""
