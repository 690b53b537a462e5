"""``python -m rag.run``: the entry point of rag/app/run.py, run as ``__main__`` (so Hydra,
argparse and exit statuses behave as when that module is run itself)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("rag.app.run", run_name="__main__", alter_sys=True)
