"""``python -m rag.gate``: the entry point of rag/app/gate.py, run as ``__main__`` (so Hydra,
argparse and exit statuses behave as when that module is run itself)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("rag.app.gate", run_name="__main__", alter_sys=True)
