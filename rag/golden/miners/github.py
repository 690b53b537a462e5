"""``rag golden mine --from github``: an issue's or merged PR's title (``--with-body``: and
body) from a ``gh`` JSON export as the query, the files the PR changed as the labels; see
rag/golden/mining.py's docstring."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Callable

from rag.golden.mining import MineResult, MiningError, is_generic, run_git, safe_id, walk_documents

#: ``rag golden mine --from github``
SOURCE = "github"
#: the tag its candidates carry
TAG = "mined_github"
#: what ``examined`` counts
NOUN = "issues and PRs"
#: every skip reason (each counted, 0 too)
SKIPS = ("not_merged", "issue_without_pr", "generic_title", "no_indexable_file",
         "too_large", "over_max")

_CLOSES = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b\s*:?\s+"
    r"(?:(?:https?://[^\s/]+/)?([\w.\-]+/[\w.\-]+)(?:/issues/|#)|#)(\d+)", re.I)


def _repo_of(url: str) -> str | None:
    m = re.search(r"https?://[^/]+/([^/]+/[^/]+)/(?:issues|pull)/\d+", url or "")
    return m.group(1).lower() if m else None


def mine_github(root: Path, exports: list[Path], *, max_candidates: int | None = 200,
                with_body: bool = False, max_files: int = 20, min_words: int = 3,
                max_file_bytes: int = 1_000_000, exclude: list[str] | None = None,
                include: list[str] | None = None,
                known: Callable[[str], str | None] | None = None) -> MineResult:
    """Candidates from gh JSON exports of issues and pull requests (module docstring).
    ``known``: a record whose source (``mined:github <url>``) an earlier review decided is
    skipped under the reason it returns, before ``max_candidates`` counts
    (rag/golden/miners/__init__.py).

    Raises:
        MiningError: an export is missing, not a JSON list, a record lacks number/title/url,
            or no pull request in the exports has ``files``.
    """
    root = Path(root)
    if not root.is_dir():
        raise MiningError(f"--path {root}: not a directory")
    if not exports:
        raise MiningError("--from github needs at least one --export FILE (a gh JSON export)")
    records: list[dict] = []
    for path in exports:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise MiningError(f"--export {path}: file not found") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise MiningError(f"--export {path}: not a JSON export: {exc}") from None
        if not isinstance(data, list):
            raise MiningError(f"--export {path}: expected a JSON list of issues or pull requests")
        for i, rec in enumerate(data):
            if not isinstance(rec, dict) or not all(rec.get(k) for k in ("number", "title", "url")):
                raise MiningError(f"--export {path}: record {i} lacks number, title or url")
            records.append(rec)
    prs = [r for r in records if "/pull/" in str(r["url"]) or "files" in r]
    issues = {}
    for r in records:
        if r not in prs:
            issues[(_repo_of(str(r["url"])), int(r["number"]))] = r
    if prs and not any("files" in r for r in prs):
        raise MiningError("no pull request in the exports has 'files': export them with "
                          "gh pr list --json number,title,body,url,files,"
                          "closingIssuesReferences,mergedAt")
    prefix = ""
    try:
        prefix = run_git(root, "rev-parse", "--show-prefix").strip()
    except MiningError:
        pass
    docs = walk_documents(root, max_file_bytes=max_file_bytes, exclude=exclude, include=include)
    skipped: Counter = Counter({r: 0 for r in SKIPS})
    examined = len(records)

    def indexed_files(pr: dict) -> list[str]:
        out = []
        for f in pr.get("files") or []:
            p = f.get("path") if isinstance(f, dict) else str(f)
            if p and p.startswith(prefix) and p[len(prefix):] in docs:
                if p[len(prefix):] not in out:
                    out.append(p[len(prefix):])
        return out

    def merged(pr: dict) -> bool:
        if "mergedAt" in pr:
            return bool(pr["mergedAt"])
        if "state" in pr:
            return str(pr["state"]).upper() == "MERGED"
        return True

    linked: dict[tuple, list[dict]] = {}  # issue key -> its merged PRs
    alone: list[dict] = []
    for pr in sorted(prs, key=lambda r: int(r["number"])):
        if not merged(pr):
            skipped["not_merged"] += 1
            continue
        repo = _repo_of(str(pr["url"]))
        keys = []
        for ref in pr.get("closingIssuesReferences") or []:
            if isinstance(ref, dict) and ref.get("number"):
                r_repo = _repo_of(str(ref.get("url", ""))) or repo
                keys.append((r_repo, int(ref["number"])))
        for m in _CLOSES.finditer(str(pr.get("body") or "")):
            keys.append(((m.group(1) or repo or "").lower() or None, int(m.group(2))))
        keys = [k for k in dict.fromkeys(keys) if k in issues]
        for k in keys:
            linked.setdefault(k, []).append(pr)
        if not keys:
            alone.append(pr)
    skipped["issue_without_pr"] += sum(1 for k in issues if k not in linked)

    def text_of(rec: dict) -> str:
        title = str(rec["title"]).strip()
        body = str(rec.get("body") or "").strip()
        return f"{title}\n\n{body}" if with_body and body else title

    items = []  # (number, kind, record, prs)
    for k, prs_of in linked.items():
        items.append((int(issues[k]["number"]), "issue", issues[k], prs_of))
    for pr in alone:
        items.append((int(pr["number"]), "pr", pr, [pr]))
    items.sort(key=lambda t: -t[0])  # newest first
    out = []
    for number, kind, rec, prs_of in items:
        if is_generic(str(rec["title"]), min_words):
            skipped["generic_title"] += 1
            continue
        files: list[str] = []
        for pr in prs_of:
            files += [p for p in indexed_files(pr) if p not in files]
        if not files:
            skipped["no_indexable_file"] += 1
            continue
        if len(files) > max_files:
            skipped["too_large"] += 1
            continue
        if known is not None and (reason := known(f"mined:github {rec['url']}")):
            skipped[reason] += 1
            continue
        out.append((number, kind, rec, prs_of, files))
    if max_candidates is not None and len(out) > max_candidates:
        skipped["over_max"] += len(out) - max_candidates
        out = out[:max_candidates]
    seen_ids: set[str] = set()
    candidates = []
    for number, kind, rec, prs_of, files in out:
        nums = ", ".join(f"#{p['number']}" for p in prs_of)
        candidates.append({
            "id": safe_id(f"gh-{kind}", str(number), seen_ids),
            "query": text_of(rec),
            "source": f"mined:github {rec['url']}",
            "tags": [TAG],
            "relevant": [{"path": p} for p in files],
            "note": (f"issue #{number}, files changed by {nums}" if kind == "issue"
                     else f"pull request #{number} (no linked issue in the export), its files"),
            "url": str(rec["url"]),
            "prs": [int(p["number"]) for p in prs_of],
        })
    return MineResult("github", candidates, skipped, examined)


def from_args(args, *, root: Path, max_candidates: int | None, walk: dict,
              known: Callable[[str], str | None] | None = None) -> MineResult:
    """Run this miner with ``rag golden mine``'s parsed options (``walk``: the walker's
    ``max_file_bytes`` / ``exclude`` / ``include``; ``known``: see :func:`mine_github`)."""
    return mine_github(root, [Path(e) for e in args.export], max_candidates=max_candidates,
                       known=known,
                       with_body=args.with_body, max_files=args.max_files,
                       min_words=args.min_words, **walk)
