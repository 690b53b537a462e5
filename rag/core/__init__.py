"""The bottom layer (DESIGN.md §8): what every other package may use and which imports nothing
else of rag — paths (:mod:`rag.core.paths`) and the retriever contract's types
(:mod:`rag.core.contract`). Run-file I/O and one git helper are to move here next
(docs/architecture.md)."""
