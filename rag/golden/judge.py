"""``rag golden judge``: an optional LLM relevance judge for pools too large to read, kept
apart from people's labels, with its agreement with them measured.

Off by default: nothing is sent anywhere unless ``rag golden judge`` is run with ``--url``.
Any OpenAI-compatible chat-completions endpoint (``POST <url>/chat/completions``, the body
``{"model", "messages", "temperature": 0}``; the reply's ``choices[0].message.content`` and
``usage``) grades each (query, unit) pair 0-3 with the UMBRELA prompt (Upadhyay et al.,
"UMBRELA: UMbrela is the (Open-Source Reproduction of the) Bing RELevance Assessor", 2024,
arXiv:2406.06519, itself Thomas et al., "Large language models can accurately predict
searcher preferences", 2023), the passage being the unit's code. The key comes from the
environment variable ``--key-env`` names (default ``OPENAI_API_KEY``) and is never written
or printed.

Judgements go to ``<golden>/judged-<model>.yaml``, never into queries.yaml::

    # Machine relevance judgements (rag golden judge): NOT people's labels.
    judge: {model: M, endpoint: http://host:port/v1, prompt: umbrela-1, prompt_sha256: ...}
    usage: {requests: 12, prompt_tokens: 9000, completion_tokens: 60, cost: 0.0}
    judgements:
      - {query_id: q1, doc: src/a.py#f, grade: 2, source: "judge:M"}

``--calibrate`` grades the units people labelled in the golden set (``relevant:`` = relevant,
``not_relevant:`` = not) and reports Cohen's kappa (scikit-learn's ``cohen_kappa_score``,
Cohen 1960) with the judge's grades binarised at ``--threshold`` (default 2: "highly
relevant" and "perfectly relevant", as UMBRELA's TREC use reads them), and the confusion
matrix (people's verdict x the judge's grade 0-3). :func:`metric_effect` shows which metrics
of the pool's rankings change when the judge's verdicts fill the units nobody judged.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import http.client
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

PROMPT_VERSION = "umbrela-1"
DEFAULT_THRESHOLD = 2
DEFAULT_TIMEOUT_S = 60.0
MAX_PASSAGE_CHARS = 6000

SYSTEM_PROMPT = "You are a search quality rater evaluating the relevance of code to questions."
USER_PROMPT = """Given a query and a passage of code from a repository, you must provide a score on an integer scale of 0 to 3 with the following meanings:
0 = represent that the passage has nothing to do with the query,
1 = represents that the passage seems related to the query but does not answer it,
2 = represents that the passage has some answer for the query, but the answer may be a bit unclear, or hidden amongst extraneous information and
3 = represents that the passage is dedicated to the query and contains the exact answer.

Important Instruction: Assign category 1 if the passage is somewhat related to the topic but not completely, category 2 if passage presents something very important related to the entire topic but also has some extra information and category 3 if the passage only and entirely refers to the topic. If none of the above satisfies give it category 0.

Query: {query}
Passage ({where}):
{passage}

Split this problem into steps:
Consider the underlying intent of the search.
Measure how well the content matches a likely intent of the query (M).
Measure how trustworthy the passage is (T).
Consider the aspects above and the relative importance of each, and decide on a final score (O). Final score must be an integer value only.
Do not provide any code in result. Provide each score in the format of: ##final score: score without providing any reasoning."""

_SCORE = re.compile(r"final\s*score\s*[:=]\s*([0-3])\b", re.I)


class JudgeError(RuntimeError):
    """The endpoint cannot be used (refused, an HTTP error, a reply that is not chat JSON) or
    bad input; one line, exit 2."""


def prompt_sha256() -> str:
    """SHA-256 of the prompt text (system + user template): what the provenance records."""
    return hashlib.sha256((SYSTEM_PROMPT + "\n" + USER_PROMPT).encode()).hexdigest()


def parse_grade(text: str) -> int | None:
    """The grade of a judge's reply (``##final score: 2``); None when it holds none."""
    m = _SCORE.search(text or "")
    if m:
        return int(m.group(1))
    bare = (text or "").strip()
    return int(bare) if re.fullmatch(r"[0-3]", bare) else None


@dataclass
class Usage:
    """What the judge cost so far: requests, tokens (the replies' ``usage``) and money."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    unparsed: int = 0
    price_in: float = 0.0   # per 1,000 prompt tokens
    price_out: float = 0.0  # per 1,000 completion tokens

    @property
    def cost(self) -> float:
        return round(self.prompt_tokens / 1000 * self.price_in
                     + self.completion_tokens / 1000 * self.price_out, 6)

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "unparsed": self.unparsed,
                "cost": self.cost}


@dataclass
class ChatJudge:
    """A chat-completions endpoint used as a relevance judge.

    Args:
        url: the API base (``http://127.0.0.1:8000/v1``) or the full
            ``.../chat/completions`` URL.
        model: the model name sent.
        key: the bearer token (None: no Authorization header).
    """

    url: str
    model: str
    key: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    usage: Usage = field(default_factory=Usage)

    @property
    def endpoint(self) -> str:
        """The chat-completions URL requests go to (``/chat/completions`` appended to the
        path of ``url``; its query string kept)."""
        parts = urllib.parse.urlsplit(self.url)
        path = parts.path.rstrip("/")
        if not path.endswith("/chat/completions"):
            path += "/chat/completions"
        return urllib.parse.urlunsplit(parts._replace(path=path))

    @property
    def shown_endpoint(self) -> str:
        """:attr:`endpoint` as it may be printed or recorded: without a query string or
        user info (either can hold a credential)."""
        parts = urllib.parse.urlsplit(self.endpoint)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))

    def grade(self, query: str, where: str, passage: str) -> int | None:
        """The judge's 0-3 grade of ``passage`` (the unit's code, at ``where``) for
        ``query``; None when its reply holds no grade (counted in ``usage.unparsed``).

        Raises:
            JudgeError: the request failed or the reply is not chat-completions JSON.
        """
        body = {"model": self.model, "temperature": 0, "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": USER_PROMPT.format(
                query=query, where=where, passage=passage[:MAX_PASSAGE_CHARS])}]}
        where = self.shown_endpoint
        try:
            req = urllib.request.Request(self.endpoint, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"},
                                         method="POST")
        except ValueError as exc:
            raise JudgeError(f"--url {where}: {exc}") from None
        if self.key:
            req.add_header("Authorization", f"Bearer {self.key}")
        try:
            with _OPENER.open(req, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise JudgeError(f"{where}: HTTP {exc.code} {exc.reason}"
                             + (" (redirects are not followed: give the final URL)"
                                if 300 <= exc.code < 400 else "")) from None
        except (urllib.error.URLError, OSError) as exc:
            raise JudgeError(f"{where}: {getattr(exc, 'reason', exc)}") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise JudgeError(f"{where}: the reply is not JSON") from None
        except (http.client.HTTPException, ValueError) as exc:
            raise JudgeError(f"{where}: not an HTTP reply ({type(exc).__name__}: {exc})") from None
        try:
            text = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise JudgeError(f"{where}: the reply has no choices[0].message.content") from None
        self.usage.requests += 1
        use = data.get("usage") if isinstance(data, dict) else None
        use = use if isinstance(use, dict) else {}
        self.usage.prompt_tokens += _count(use.get("prompt_tokens"))
        self.usage.completion_tokens += _count(use.get("completion_tokens"))
        g = parse_grade(str(text))
        if g is None:
            self.usage.unparsed += 1
        return g


def _count(value: Any) -> int:
    """A token count from a reply's ``usage``: 0 when absent or not a non-negative integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: the request (and its key) goes to ``--url`` or nowhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        return None


# no proxy from the environment, no redirect: nothing is sent anywhere but --url
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


# ---------------------------------------------------------------------------- the file

def judged_file(golden_dir: Path, model: str) -> Path:
    """``<golden>/judged-<model>.yaml``: the model name as a file name; when it had to be
    changed to be one (``a/b``, ``a b``), 8 hex digits of its SHA-256 are added, so two
    models never share a file."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", model).strip("._") or "model"
    if safe != model:
        safe += "-" + hashlib.sha256(model.encode()).hexdigest()[:8]
    return Path(golden_dir) / f"judged-{safe}.yaml"


@dataclass
class Judged:
    """A judged file's content: its judge's provenance, the usage over every session, and
    ``(query id, doc id) -> (grade, source)``."""

    judge: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    grades: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)


def read_judged(path: Path) -> Judged:
    """A judged file (an empty :class:`Judged` when it does not exist).

    Raises:
        JudgeError: not UTF-8 YAML, not a judged file, or an entry without a query id, a
            doc id, a grade 0-3 or a ``judge:`` source (``path: entry N``).
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        return Judged()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise JudgeError(f"{path}: not valid UTF-8 YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("judgements"), list):
        raise JudgeError(f"{path}: not a judged file (needs a 'judgements:' list)")
    out = Judged(judge=data.get("judge") if isinstance(data.get("judge"), dict) else {},
                 usage=data.get("usage") if isinstance(data.get("usage"), dict) else {})
    for n, j in enumerate(data["judgements"], 1):
        ok = isinstance(j, dict) and isinstance(j.get("query_id"), str) \
            and isinstance(j.get("doc"), str) and isinstance(j.get("grade"), int) \
            and not isinstance(j.get("grade"), bool) and 0 <= j["grade"] <= 3 \
            and isinstance(j.get("source"), str) and j["source"].startswith("judge:")
        if not ok:
            raise JudgeError(f"{path}: entry {n} needs query_id, doc, a grade 0-3 and a "
                             "judge:<model> source")
        out.grades[(j["query_id"], j["doc"])] = (j["grade"], j["source"])
    return out


def load_judgements(path: Path) -> dict[tuple[str, str], int]:
    """``(query id, doc id) -> grade`` of a judged file; {} when it does not exist.

    Raises:
        JudgeError: as :func:`read_judged`.
    """
    return {k: g for k, (g, _) in read_judged(path).grades.items()}


def _provenance(judge: ChatJudge) -> dict[str, Any]:
    return {"model": judge.model, "endpoint": judge.shown_endpoint, "prompt": PROMPT_VERSION,
            "prompt_sha256": prompt_sha256()}


def check_same_judge(judged: Judged, judge: ChatJudge, path: Path) -> None:
    """Refuse to add grades of another model or prompt to a judged file (the same model
    served at another endpoint is the same judge).

    Raises:
        JudgeError: naming what differs.
    """
    if not judged.judge:
        return
    now = _provenance(judge)
    differ = [k for k in ("model", "prompt_sha256")  # the endpoint may move: same judge
              if judged.judge.get(k) not in (None, now[k])]
    if differ:
        raise JudgeError(f"{path} holds grades of another judge ({', '.join(differ)} differ: "
                         f"{', '.join(f'{k} {judged.judge.get(k)!r}' for k in differ)}); "
                         "move it aside or use that judge")


def write_judgements(path: Path, judge: ChatJudge, judged: Judged) -> None:
    """Write ``judged``'s grades with their own sources, the judge's provenance and the usage
    of every session so far (the file's earlier usage plus this session's), atomically (a
    temporary file, renamed)."""
    import yaml

    usage = dict(judge.usage.as_dict())
    for key in ("requests", "prompt_tokens", "completion_tokens", "unparsed"):
        usage[key] += _count(judged.usage.get(key))
    prior_cost = judged.usage.get("cost")
    if isinstance(prior_cost, (int, float)) and not isinstance(prior_cost, bool):
        usage["cost"] = round(usage["cost"] + float(prior_cost), 6)
    data = {"judge": _provenance(judge), "usage": usage,
            "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "judgements": [{"query_id": q, "doc": d, "grade": g, "source": src}
                           for (q, d), (g, src) in judged.grades.items()]}
    text = ("# Machine relevance judgements (rag golden judge): NOT people's labels; a run\n"
            "# reads them only when asked (rag/golden/judge.py).\n"
            + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _passage(corpus_root: Path, doc: str, lines, indexed: frozenset[str]) -> tuple[str, str]:
    """``(where, text)`` of a unit to send: only a file rag indexes under the corpus root
    (never a secret, an ignored file or one outside the root).

    Raises:
        rag.golden.review.ReviewError: the unit is not indexed, unreadable or gone."""
    from rag.golden.review import ReviewError, hit_code

    code = hit_code(corpus_root, doc, lines=lines, context=0, max_lines=200, indexed=indexed)
    if code.missing:
        raise ReviewError(code.note)
    return f"{code.path}:{code.start}-{code.end}", "\n".join(code.lines)


# ---------------------------------------------------------------------------- judging a pool

def judge_pool(pool_file: Path, golden_dir: Path, corpus_root: Path, judge: ChatJudge, *,
               limit: int | None = None, out=None) -> tuple[Path, int]:
    """Grade the pool's pairs that no person judged and the judge has not graded yet (a
    later run resumes), with each query's text as it is now in the golden files; the judged
    file is written after every 20 grades and whenever the run stops (an endpoint error,
    Ctrl-C: nothing graded is lost).

    Returns:
        (the judged file, how many pairs were graded now).

    Raises:
        JudgeError: the judged file holds another judge's grades, or the endpoint fails
            (after the grades so far are written).
    """
    from rag.golden.pooling import read_pool
    from rag.golden.review import GoldenEditor, ReviewError, _hit_lines, indexed_paths, pending_pairs

    out = out or sys.stderr
    header, records = read_pool(pool_file)
    editor = GoldenEditor(golden_dir, verify=False)
    path = judged_file(golden_dir, judge.model)
    judged = read_judged(path)
    check_same_judge(judged, judge, path)
    todo = [p for p in pending_pairs(records, editor, len(header.get("runs", [])))
            if (p.query_id, p.hit["doc"]) not in judged.grades]
    if limit is not None:
        todo = todo[:limit]
    indexed = indexed_paths(corpus_root)
    source = f"judge:{judge.model}"
    done = 0
    try:
        for i, p in enumerate(todo, 1):
            item, _ = editor.entry(p.query_id, p.origin)
            query = str(item.get("query") or p.query) if item is not None else p.query
            try:
                where, text = _passage(corpus_root, p.hit["doc"], _hit_lines(p.hit), indexed)
            except ReviewError as exc:
                print(f"warning: {p.query_id} {p.hit['doc']}: {exc}; not judged", file=out)
                continue
            g = judge.grade(query, where, text)
            if g is not None:
                judged.grades[(p.query_id, p.hit["doc"])] = (g, source)
                done += 1
            if i % 20 == 0:  # the file's usage stays what it was read as: no double count
                write_judgements(path, judge, judged)
                print(f"  judged {i}/{len(todo)} pairs", file=out)
    finally:
        if done or judge.usage.requests:
            write_judgements(path, judge, judged)
    return path, done


# ---------------------------------------------------------------------------- calibration

def calibrate(golden_dir: Path, corpus_root: Path, judge: ChatJudge, *,
              threshold: int = DEFAULT_THRESHOLD, limit: int | None = None) -> dict[str, Any]:
    """The judge's agreement with people on the golden set's own labels.

    Every ``relevant:`` label (people: relevant) and ``not_relevant:`` label (people: not)
    of queries.yaml is graded; a label whose unit cannot be read is left out.

    Returns:
        ``{"n", "kappa", "agreement", "threshold", "confusion": {"relevant": [c0..c3],
        "not_relevant": [c0..c3]}, "unparsed", "usage"}``: kappa is Cohen's (scikit-learn)
        between people's verdict and ``grade >= threshold``; None when either side has one
        class only (kappa is then undefined or says nothing).

    Raises:
        JudgeError: the golden set does not load (its problems, one line).
    """
    from sklearn.metrics import cohen_kappa_score

    from rag.eval.golden import GoldenError, load_golden
    from rag.golden.review import ReviewError, indexed_paths

    try:
        golden = load_golden(Path(golden_dir))
    except GoldenError as exc:
        raise JudgeError(f"{golden_dir}: the golden set does not load: "
                         + "; ".join(exc.problems[:3])) from None
    pairs = [(q.query, lab.doc_key, human) for q in golden.positives
             for labels, human in ((q.relevant, 1), (q.not_relevant, 0)) for lab in labels]
    if limit is not None:
        pairs = pairs[:limit]
    indexed = indexed_paths(corpus_root)
    confusion = {"relevant": [0, 0, 0, 0], "not_relevant": [0, 0, 0, 0]}
    people, machine = [], []
    for query, doc, human in pairs:
        try:
            where, text = _passage(corpus_root, doc, None, indexed)
        except ReviewError:
            continue
        g = judge.grade(query, where, text)
        if g is None:
            continue
        confusion["relevant" if human else "not_relevant"][g] += 1
        people.append(human)
        machine.append(int(g >= threshold))
    kappa = None
    if len(set(people)) > 1 and len(set(machine)) > 1:
        kappa = float(cohen_kappa_score(people, machine))
    agreement = (sum(a == b for a, b in zip(people, machine)) / len(people)) if people else None
    return {"n": len(people), "kappa": kappa, "agreement": agreement, "threshold": threshold,
            "confusion": confusion, "unparsed": judge.usage.unparsed,
            "usage": judge.usage.as_dict()}


# ---------------------------------------------------------------------------- metric effect

def metric_effect(records: Sequence[dict[str, Any]], editor, grades: dict[tuple[str, str], int],
                  *, threshold: int = DEFAULT_THRESHOLD, k: int = 10) -> list[dict[str, Any]]:
    """Per ranking of the pool: MRR, nDCG@k and judged@k over its units with people's
    labels alone, and with the judge's grades filling the units nobody judged (grade >=
    ``threshold``: relevant, gain 1; below: not relevant).

    Returns:
        One row per ranking: ``{"ranking", "metric", "people", "with_judge", "change"}``
        for each metric, means over the queries the ranking ranked.
    """
    from rag.eval.incomplete import ndcg, reciprocal_rank
    from rag.golden.review import _hit_lines

    by_run: dict[str, dict[str, list[tuple[int, str, Any]]]] = {}
    for r in records:
        for h in r["hits"]:
            for run, rank_ in (h.get("ranks") or {}).items():
                by_run.setdefault(run, {}).setdefault(r["query_id"], []).append(
                    (rank_, h["doc"], h))
    origins = {r["query_id"]: r["origin"] for r in records}
    out = []
    for run, queries in by_run.items():
        sums = {"mrr": [0.0, 0.0], f"ndcg_at_{k}": [0.0, 0.0], f"judged_at_{k}": [0.0, 0.0]}
        for qid, hits in queries.items():
            hits.sort(key=lambda t: t[0])
            people, both = [], []
            for _, doc, h in hits:
                v = editor.judged(qid, origins[qid], doc, _hit_lines(h))
                p = None if v is None else int(v == "relevant")
                g = grades.get((qid, doc))
                j = p if p is not None else (None if g is None else int(g >= threshold))
                people.append(p)
                both.append(j)
            rel, _ = editor.labels(qid, origins[qid])
            extra = sum(1 for p, j in zip(people, both) if p is None and j == 1)
            for col, lst, n_rel in ((0, people, len(rel)), (1, both, len(rel) + extra)):
                gains = [x or 0 for x in lst]
                sums["mrr"][col] += reciprocal_rank(gains)
                sums[f"ndcg_at_{k}"][col] += ndcg(gains, [1] * n_rel, k)
                sums[f"judged_at_{k}"][col] += sum(x is not None for x in lst[:k]) / k
        n = len(queries)
        for metric, (a, b) in sums.items():
            out.append({"ranking": run, "metric": metric, "people": round(a / n, 4),
                        "with_judge": round(b / n, 4), "change": round((b - a) / n, 4)})
    return out


# ---------------------------------------------------------------------------- CLI

def add_judge_parser(sub) -> argparse.ArgumentParser:
    """Register ``judge`` on the ``rag golden`` action subparsers."""
    p = sub.add_parser(
        "judge", help="an LLM relevance judge (optional, off by default): grade a pool's "
                      "unjudged pairs, or measure its agreement with people (--calibrate)",
        description=(
            "Grade pairs 0-3 with the UMBRELA prompt through any OpenAI-compatible "
            "chat-completions endpoint (--url; the key from the environment variable "
            "--key-env names, never printed). With --pool: the pairs nobody judged, into "
            "<golden>/judged-<model>.yaml (never queries.yaml), with provenance, token counts "
            "and cost, then the change each metric of the pool's rankings sees when those "
            "grades fill the unjudged units. With --calibrate: the golden set's own labels, "
            "and Cohen's kappa and the confusion matrix against people's verdicts. Nothing "
            "is sent anywhere but --url. Format: rag/golden/judge.py."))
    p.add_argument("--golden", required=True, metavar="DIR", help="the golden directory")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--pool", metavar="FILE", help="grade this pool's unjudged pairs")
    what.add_argument("--calibrate", action="store_true",
                      help="grade the golden set's own labels: agreement with people")
    p.add_argument("--url", required=True, metavar="URL",
                   help="the endpoint's API base (http://127.0.0.1:8000/v1) or its "
                        "/chat/completions URL")
    p.add_argument("--model", required=True, metavar="NAME", help="the model name sent")
    p.add_argument("--key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (default OPENAI_API_KEY; "
                        "unset: no Authorization header)")
    p.add_argument("--corpus-root", default=None, metavar="DIR",
                   help="where the units' files are (default: the pool's corpus_root)")
    p.add_argument("--max", type=int, default=None, metavar="N", help="grade at most N pairs")
    p.add_argument("--threshold", type=int, default=DEFAULT_THRESHOLD, choices=(1, 2, 3),
                   help=f"grades from this up count as relevant (default {DEFAULT_THRESHOLD})")
    p.add_argument("--price-in", type=float, default=0.0, metavar="X",
                   help="cost per 1,000 prompt tokens, for the cost line (default 0)")
    p.add_argument("--price-out", type=float, default=0.0, metavar="X",
                   help="cost per 1,000 completion tokens (default 0)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"seconds per request (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def judge_command(args: argparse.Namespace, *, stdout=None) -> int:
    """``rag golden judge``: exit 0, or 2 with one ``error:`` line."""
    from rag.golden.pooling import PoolError, read_pool
    from rag.golden.review import GoldenEditor, ReviewError

    stdout = stdout or sys.stdout
    if not args.timeout > 0:
        print(f"error: --timeout must be > 0, got {args.timeout:g}", file=sys.stderr)
        return 2
    judge = ChatJudge(url=args.url, model=args.model, key=os.environ.get(args.key_env) or None,
                      timeout_s=args.timeout,
                      usage=Usage(price_in=args.price_in, price_out=args.price_out))
    golden = Path(args.golden)
    try:
        if not (golden / "queries.yaml").is_file():
            raise JudgeError(f"{golden}: no queries.yaml there")
        header = read_pool(Path(args.pool))[0] if args.pool else {}
        root = Path(args.corpus_root) if args.corpus_root else (
            Path(header["corpus_root"]) if header.get("corpus_root") else None)
        if root is None or not root.is_dir():
            raise JudgeError("no corpus root: give --corpus-root DIR")
        if args.calibrate:
            got = calibrate(golden, root, judge, threshold=args.threshold, limit=args.max)
            if args.json:
                print(json.dumps(got, indent=2), file=stdout)
                return 0
            k = "n/a (one class only)" if got["kappa"] is None else f"{got['kappa']:.3f}"
            a = "n/a" if got["agreement"] is None else f"{got['agreement']:.3f}"
            print(f"judge {judge.model} on {got['n']} labelled units of {golden}: Cohen's kappa "
                  f"{k}, agreement {a} (relevant = grade >= {got['threshold']})", file=stdout)
            print("  people \\ judge   0    1    2    3", file=stdout)
            for row in ("relevant", "not_relevant"):
                print(f"  {row:<14}" + "".join(f"{c:>5}" for c in got["confusion"][row]),
                      file=stdout)
            _usage_line(judge, stdout)
            return 0
        path, done = judge_pool(Path(args.pool), golden, root, judge, limit=args.max)
        _, records = read_pool(Path(args.pool))
        effect = metric_effect(records, GoldenEditor(golden, verify=False),
                               load_judgements(path), threshold=args.threshold)
        if args.json:
            print(json.dumps({"file": str(path), "graded": done, "usage": judge.usage.as_dict(),
                              "effect": effect}, indent=2), file=stdout)
            return 0
        print(f"graded {done} pair(s) into {path} (source judge:{judge.model}; never mixed "
              "into queries.yaml)", file=stdout)
        _usage_line(judge, stdout)
        if effect:
            print("  ranking             metric         people  +judge  change", file=stdout)
            for e in effect:
                print(f"  {e['ranking'][:18]:<18}  {e['metric']:<13}  {e['people']:.3f}   "
                      f"{e['with_judge']:.3f}   {e['change']:+.3f}", file=stdout)
        return 0
    except (JudgeError, PoolError, ReviewError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _usage_line(judge: ChatJudge, out) -> None:
    u = judge.usage
    print(f"  {u.requests} request(s), {u.prompt_tokens} prompt + {u.completion_tokens} "
          f"completion tokens, cost {u.cost:g}" + (f", {u.unparsed} replies without a grade"
                                                  if u.unparsed else ""), file=out)
