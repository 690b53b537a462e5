"""The bottom layer (DESIGN.md §8): what every other package may use and which imports nothing
else of rag — paths (:mod:`rag.core.paths`). The contract types and run-file I/O are to move
here next (docs/architecture.md)."""
