"""The application layer (DESIGN.md §8): what reads the whole composed config and drives the
layers below — the sweep callback, the sweep prebuild and the Ray launcher so far; the runner,
the schema and the commands are to move here (docs/architecture.md)."""
