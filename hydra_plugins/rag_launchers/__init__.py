"""Hydra plugins of the ``rag`` project (Hydra instantiates launchers only from the
``hydra_plugins`` namespace package); their logic lives in :mod:`rag`."""
