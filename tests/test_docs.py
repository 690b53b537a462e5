"""The documentation site: it builds with warnings as errors, and its configuration reference
(generated from the schema by docs/_hooks/generate.py) names every key of the schema."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None,
                    reason="mkdocs not installed (make test installs it)")
@pytest.mark.slow
def test_the_site_builds_strict_and_documents_every_config_key(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    import os

    out = subprocess.run([str(mkdocs), "build", "--strict", "-d", str(tmp_path / "site")],
                         capture_output=True, text=True, cwd=PROJECT, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "WARNING" not in out.stderr, out.stderr[-3000:]
    page = (tmp_path / "site" / "reference" / "configuration" / "index.html").read_text()
    from rag.app.config import schema_keys

    keys = schema_keys()
    leaves = {k for k in keys if not any(o.startswith(k + ".") for o in keys)}
    missing = sorted(k for k in leaves if f"<code>{k}</code>" not in page)
    assert not missing, missing
    assert (tmp_path / "site" / "experiments" / "semble" / "index.html").is_file()


def test_the_readme_is_a_front_door():
    readme = (PROJECT / "README.md").read_text().splitlines()
    assert len(readme) < 200
    commands = [ln.split("#")[0].strip() for ln in readme[3:5]]
    assert commands == ["make run", "make test"]
