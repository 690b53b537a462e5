"""GitHub issues and pull requests as documents, from the JSON that the gh CLI writes.

``gh issue list --json number,title,body,url,labels,state,createdAt > issues.json`` and
``gh pr list --json number,title,body,url,labels,state,createdAt > prs.json``; each record
becomes one document of category ``issue`` or ``pull_request`` (by its URL: ``/pull/`` is a
pull request) whose path is its canonical URL, so a hit links straight to it: its ``url``
(rag/core/trace_links.py ``hit_url``) is that URL as the export gave it, never a commit-pinned
template. A URL must be an ``https://`` or ``http://`` address without a user name or password.
"""

from __future__ import annotations

import json
from pathlib import Path

from rag.corpus.walk import Document


class GitHubExportError(ValueError):
    """The export file is missing, not JSON, or a record lacks a required field."""


REQUIRED = ("number", "title", "url")


def _url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a document's canonical link, or None (credentials never echoed)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "is not a URL"
    if "@" in parts.netloc:
        return "holds a user name or password"
    if parts.scheme not in ("https", "http") or not parts.netloc or any(c.isspace() for c in url):
        return f"{url!r} is not an http(s) URL"
    return None


def load_github_export(path: Path) -> list[Document]:
    """Documents from one gh JSON export (a list of records).

    Raises:
        GitHubExportError: naming the file and the record index of every problem.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GitHubExportError(f"{path}: file not found") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise GitHubExportError(f"{path}: not a JSON export: {exc}") from None
    if not isinstance(data, list):
        raise GitHubExportError(f"{path}: expected a JSON list of issues or pull requests")
    problems, docs = [], []
    for i, rec in enumerate(data):
        missing = [k for k in REQUIRED if not isinstance(rec, dict) or not rec.get(k)]
        if missing:
            problems.append(f"{path}: record {i}: missing {missing}")
            continue
        url = str(rec["url"]).strip()
        problem = _url_problem(url)
        if problem:
            problems.append(f"{path}: record {i}: url {problem}")
            continue
        category = "pull_request" if "/pull/" in url else "issue"
        labels = ", ".join(lab.get("name", "") if isinstance(lab, dict) else str(lab)
                           for lab in rec.get("labels") or [])
        meta = " · ".join(x for x in (f"state: {rec.get('state', '?')}",
                                       f"labels: {labels}" if labels else "",
                                       f"created: {rec.get('createdAt', '?')}") if x)
        text = f"# {rec['title']} (#{rec['number']})\n\n{meta}\n\n{rec.get('body') or ''}\n"
        docs.append(Document(path=url, category=category, text=text, size=len(text.encode())))
    if problems:
        raise GitHubExportError("\n".join(problems))
    return docs
