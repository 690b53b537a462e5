"""``python -m rag.report``: the entry point of rag/app/report.py, run as ``__main__`` (so Hydra,
argparse and exit statuses behave as when that module is run itself)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("rag.app.report", run_name="__main__", alter_sys=True)
