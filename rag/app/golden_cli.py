"""``rag golden``: work on golden sets. ``rag golden init`` scaffolds one for a corpus,
``rag golden check`` finds labels that no longer resolve (label rot) without loading a model,
``rag golden stats`` counts a set and sizes it from a pilot row, ``rag golden power`` sizes a
golden set from a pilot row, ``rag golden expected`` writes a row's expected scores,
``rag golden export`` converts a golden set to TREC or BEIR files."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Sequence

from rag.eval.significance import ALPHA, POWER, minimum_detectable_effect, required_queries

POWER_METRICS = ("mrr", "recall_at_8")
EXPORT_FORMATS = ("trec", "beir")


def add_parser(sub) -> None:
    """Register ``golden`` (with its ``power`` action) on the ``rag`` subparsers."""
    p = sub.add_parser("golden", help="golden sets: init, check, stats, power, expected scores, "
                                      "export to TREC/BEIR",
                       description="Golden-set tools.")
    acts = p.add_subparsers(dest="action", required=True)
    add_tool_parsers(acts)
    pw = acts.add_parser(
        "power",
        help="how many positives a golden set needs to detect an effect, from a pilot row",
        description=(
            "From the per-query values of a pilot ledger row, the number of positives a paired "
            "test (two-sided, alpha 0.05, power 0.8) needs to detect a difference of --effect "
            "between two systems, per metric, and the smallest effect the pilot's own size "
            "can detect. The spread of the per-query differences between two systems is not "
            "known from one row; it is taken as sd * sqrt(2 (1 - rho)) with rho = --correlation "
            "(the correlation between two systems' per-query values; 0.5 by default, higher "
            "for two similar configurations, which need fewer queries)."),
        epilog="Formula: n = smallest n with (t_{1-a/2,n-1} + t_{power,n-1}) sd_d / sqrt(n) <= "
               "effect (Cohen 1988).")
    pw.add_argument("--run", required=True, metavar="RUN_ID",
                    help="the pilot ledger row (a run id or unique prefix)")
    pw.add_argument("--effect", type=float, default=0.05,
                    help="the difference to detect, in metric units (default 0.05)")
    pw.add_argument("--correlation", type=float, default=0.5,
                    help="assumed correlation of two systems' per-query values (default 0.5)")
    pw.add_argument("--metric", action="append", default=None,
                    help=f"metric column of per_query.csv (repeatable; default {', '.join(POWER_METRICS)})")
    from rag.app.config import add_tracking_uri_argument

    add_tracking_uri_argument(pw)
    pw.add_argument("--json", action="store_true", help="print JSON")
    ex = acts.add_parser(
        "expected",
        help="write a golden set's expected.yaml from a ledger row (Anserini-style regression)",
        description=("Write the ranking and returned metrics of one ledger row, with a "
                     "tolerance, as expected.yaml beside the golden set it was measured on, "
                     "the row's per-query values pinned beside it (expected_per_query.csv, "
                     "with its SHA-256 in expected.yaml: what lets `rag gate` run its paired "
                     "test against the expectation) and the row's calibration.json (apply it "
                     "elsewhere with abstain.calibration=PATH). "
                     "The Flask integration test checks the default row against "
                     "golden/flask/expected.yaml."))
    ex.add_argument("--run", required=True, metavar="RUN_ID", help="the ledger row (id or unique prefix)")
    ex.add_argument("--out", default=None,
                    help="output file (default: expected.yaml in the row's golden directory)")
    ex.add_argument("--tolerance", type=float, default=None,
                    help="absolute tolerance per metric (default 0.005)")
    add_tracking_uri_argument(ex)
    xp = acts.add_parser(
        "export",
        help="convert a golden set to TREC (topics + qrels) or BEIR (queries, qrels, corpus)",
        description=(
            "Write a golden set in a standard format, with the doc ids rag's run files use "
            "(path, or path#symbol for a symbol label). "
            "trec: topics.tsv (qid<TAB>text), qrels.txt (qid 0 docno relevance; spaces in a "
            "docno are percent-encoded, as in run.trec). "
            "beir: queries.jsonl ({_id, text}), qrels/<split>.tsv (query-id, corpus-id, score, "
            "with a header line) and, with --corpus, corpus.jsonl. "
            "Negatives have no relevant document, which neither format can express: they go "
            "to negatives.tsv (trec) or negatives.jsonl (beir), in the topics' format. "
            "Files of the same name in OUT are overwritten."))
    xp.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="trec or beir")
    xp.add_argument("--golden", required=True, metavar="DIR",
                    help="the golden directory (queries.yaml, negatives.yaml)")
    xp.add_argument("--out", required=True, metavar="OUT", help="output directory (created)")
    xp.add_argument("--corpus", default=None, metavar="DIR",
                    help="beir only: the corpus root; writes corpus.jsonl with every file rag "
                         "would index there (.gitignore, binary and size rules) plus one "
                         "document per symbol label, and checks every label against it")
    xp.add_argument("--max-file-bytes", type=int, default=1_000_000,
                    help="beir --corpus: skip files over this size, as corpus.max_file_bytes "
                         "(default 1000000)")
    xp.add_argument("--split", default="test",
                    help="beir: the qrels split name, qrels/<split>.tsv (default test)")


def power_table(per_query, *, effect: float, correlation: float,
                metrics: list[str]) -> list[dict[str, float | int | str]]:
    """Per metric: pilot n, per-query sd, the assumed sd of differences, the MDE at the pilot's
    size and the positives needed for ``effect`` (both None when the pilot has no variance:
    fewer than 2 positives, or every value equal).

    Args:
        per_query: the positives of a per_query.csv (a pandas DataFrame).

    Raises:
        ValueError: a metric is not a column, ``effect`` <= 0 or ``correlation`` outside [-1, 1).
    """
    import numpy as np

    if not -1.0 <= correlation < 1.0:
        raise ValueError(f"--correlation must be in [-1, 1), got {correlation}")
    if not (effect > 0 and effect != float("inf")):  # also refuses NaN
        raise ValueError(f"--effect must be a finite number > 0, got {effect}")
    rows = []
    for m in metrics:
        if m not in per_query.columns:
            raise ValueError(f"metric {m!r} is not a column of the row's per_query.csv "
                             f"(columns: {', '.join(c for c in per_query.columns if c.startswith(('mrr', 'recall', 'ndcg', 'hit')))})")
        v = per_query[m].astype(float).to_numpy()
        sd = float(np.std(v, ddof=1)) if v.size >= 2 else 0.0
        sd_d = sd * float(np.sqrt(2 * (1 - correlation)))
        sized = sd_d > 0  # without variance in the pilot no study can be sized from it
        rows.append({"metric": m, "pilot_positives": int(v.size),
                     "mean": float(v.mean()) if v.size else None, "sd": sd, "sd_difference": sd_d,
                     "mde_at_pilot_size": (minimum_detectable_effect(sd_d, int(v.size))
                                           if sized else None),
                     "effect": effect,
                     "positives_needed": required_queries(sd_d, effect) if sized else None})
    return rows


def expected_command(args: argparse.Namespace) -> int:
    """``rag golden expected``: write expected.yaml, its pinned per-query table (what lets
    ``rag gate`` run a paired test against it) and calibration.json from one row
    (:func:`rag.eval.expected.write_expected_from_row`)."""
    from pathlib import Path

    from rag.app.config import default_tracking_uri
    from rag.eval.expected import DEFAULT_TOLERANCE, ExpectedError, write_expected_from_row
    from rag.ledger.mlflow_store import Ledger, LedgerError

    try:
        tol = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
        if not (tol >= 0 and tol != float("inf")):
            raise ValueError(f"--tolerance must be a finite number >= 0, got {tol}")
        ledger = Ledger(default_tracking_uri(args.tracking_uri), create=False)
        files = write_expected_from_row(ledger, args.run,
                                        out=Path(args.out) if args.out else None, tolerance=tol)
    except (LookupError, ValueError, OSError, ExpectedError, LedgerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def _one_line(text: str) -> str:
    """Whitespace runs (tabs, newlines) as one space: a query on one TSV line."""
    return " ".join(text.split())


def _jsonl(rows) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def corpus_documents(golden, root, *, max_file_bytes: int = 1_000_000) -> list[dict[str, str]]:
    """BEIR corpus documents for ``golden`` over the corpus at ``root``.

    Every file rag would index under ``root`` (:func:`rag.corpus.walk.walk_corpus`: .gitignore,
    binary and size rules), in walk order, as ``{"_id": path, "title": "", "text": file
    text}``; then, for each symbol label (in order of first appearance), one document
    ``{"_id": "path#symbol", ...}`` whose text is that symbol's chunks as rag's chunker cuts
    them, and for each span label one document ``{"_id": "path#L<start>-<end>", ...}`` holding
    those lines, so that every corpus-id of the qrels names a document. A file's document also
    holds its symbols' text, but only the symbol's document is relevant to a symbol label,
    just as rag judges a hit on another chunk of that file.

    Raises:
        GoldenError: a label names a path that is not indexed, a symbol that is not a
            chunk of its path, or lines past the end of its file.
        FileNotFoundError: ``root`` is not a directory.
    """
    from rag.corpus.chunk import chunk_document
    from rag.corpus.walk import walk_corpus
    from rag.eval.golden import GoldenError, load_golden

    docs = {d.path: d for d in walk_corpus(root, max_file_bytes=max_file_bytes)}
    labelled = {lab.path for q in golden.positives for lab in q.relevant}
    chunks = {p: chunk_document(docs[p]) for p in sorted(labelled) if p in docs}
    symbols = {(c.path, c.symbol) for cs in chunks.values() for c in cs if c.symbol}
    load_golden(golden.directory, corpus_paths=set(docs), corpus_symbols=symbols)  # checks labels
    past_end = [f"query {q.id!r}: {lab.doc_key} ends after the last line of {lab.path!r} "
                f"({len(docs[lab.path].text.splitlines())})"
                for q in golden.positives for lab in q.relevant
                if lab.lines and lab.lines[1] > len(docs[lab.path].text.splitlines())]
    if past_end:
        raise GoldenError(past_end)
    out = [{"_id": d.path, "title": "", "text": d.text} for d in docs.values()]
    seen: set[str] = set()
    for q in golden.positives:
        for lab in q.relevant:
            if lab.unit == "file" or lab.doc_key in seen:
                continue
            seen.add(lab.doc_key)
            if lab.symbol:
                text = "".join(c.text for c in chunks[lab.path] if c.symbol == lab.symbol)
            else:  # a span label: its own lines, as the qrels name them (path#L<a>-<b>)
                a, b = lab.lines
                text = "".join(docs[lab.path].text.splitlines(keepends=True)[a - 1:b])
            out.append({"_id": lab.doc_key, "title": "", "text": text})
    return out


def export_golden(golden, out, *, fmt: str, corpus=None, max_file_bytes: int = 1_000_000,
                  split: str = "test") -> list:
    """Write ``golden`` under ``out`` as ``fmt`` (``trec`` or ``beir``); returns the paths
    written. See ``rag golden export --help`` for the layout."""
    from pathlib import Path

    from rag.eval.golden import trec_qrels_lines

    out = Path(out)
    files: dict[str, str] = {}
    if fmt == "trec":
        files["topics.tsv"] = "".join(f"{q.id}\t{_one_line(q.query)}\n" for q in golden.positives)
        files["qrels.txt"] = "".join(line + "\n" for line in trec_qrels_lines(golden))
        files["negatives.tsv"] = "".join(f"{q.id}\t{_one_line(q.query)}\n"
                                         for q in golden.negatives)
    else:
        if not split or "/" in split or split.strip() != split or split in (".", ".."):
            raise ValueError(f"--split must be a plain file name, got {split!r}")
        files["queries.jsonl"] = _jsonl({"_id": q.id, "text": q.query} for q in golden.positives)
        files[f"qrels/{split}.tsv"] = "query-id\tcorpus-id\tscore\n" + "".join(
            f"{q.id}\t{doc}\t{grade}\n" for q in golden.positives for doc, grade in q.qrels.items())
        files["negatives.jsonl"] = _jsonl({"_id": q.id, "text": q.query} for q in golden.negatives)
        if corpus is not None:
            files["corpus.jsonl"] = _jsonl(corpus_documents(golden, corpus,
                                                            max_file_bytes=max_file_bytes))
    written = []
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
        written.append(path)
    return written


def export_command(args: argparse.Namespace) -> int:
    """``rag golden export``: convert a golden set to TREC or BEIR files."""
    from pathlib import Path

    from rag.eval.golden import GoldenError, load_golden

    try:
        if args.corpus is not None and args.format != "beir":
            raise ValueError("--corpus is only used with --format beir")
        if args.corpus is not None and not Path(args.corpus).is_dir():
            raise ValueError(f"--corpus {args.corpus}: not a directory")
        if args.max_file_bytes <= 0:
            raise ValueError(f"--max-file-bytes must be > 0, got {args.max_file_bytes}")
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out {out}: exists and is not a directory")
        golden = load_golden(Path(args.golden))
        written = export_golden(golden, out, fmt=args.format, corpus=args.corpus,
                                max_file_bytes=args.max_file_bytes, split=args.split)
    except GoldenError as exc:
        print(f"error: {len(exc.problems)} problem(s) in the golden set: "
              + "; ".join(exc.problems), file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(golden.positives)} queries and {len(golden.negatives)} negatives as "
          f"{args.format}: " + ", ".join(str(p) for p in written))
    return 0


def run(args: argparse.Namespace) -> int:
    """Dispatch ``rag golden ACTION``; exit 2 with one ``error:`` line on bad input."""
    from rag.app.config import default_tracking_uri
    from rag.ledger.mlflow_store import Ledger, LedgerError
    from rag.ledger.sweep import per_query_frame

    if args.action == "expected":
        return expected_command(args)
    if args.action == "export":
        return export_command(args)
    if args.action in TOOL_COMMANDS:
        return TOOL_COMMANDS[args.action](args)
    uri = default_tracking_uri(args.tracking_uri)
    try:
        ledger = Ledger(uri, create=False)
        run_id = ledger.resolve_run_id(args.run)
        frame = per_query_frame(ledger.download_text(run_id, "per_query.csv"))
        table = power_table(frame, effect=args.effect, correlation=args.correlation,
                            metrics=args.metric or list(POWER_METRICS))
    except (LookupError, ValueError, OSError, LedgerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        import math

        def finite(r: dict[str, Any]) -> dict[str, Any]:  # JSON has no NaN: null
            return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                    for k, v in r.items()}
        print(json.dumps({"run_id": run_id, "alpha": ALPHA, "power": POWER,
                          "correlation": args.correlation,
                          "metrics": [finite(r) for r in table]}, indent=2))
        return 0
    print(f"pilot row {run_id[:12]}: paired test, alpha {ALPHA}, power {POWER}, assumed "
          f"correlation {args.correlation:g} between two systems' per-query values")
    for r in table:
        head = f"  {r['metric']:12} pilot {r['pilot_positives']} positives, sd {r['sd']:.3f}: "
        if r["positives_needed"] is None:  # no variance to size a study from
            why = (f"every positive scores {r['mean']:g}" if r["pilot_positives"] >= 2
                   else f"{r['pilot_positives']} positive(s) measure no variance")
            print(head + f"{why}, so the pilot has no variance to size a study from (label "
                  "more, or pilot a row where the metric varies)")
            continue
        print(head + f"detects {r['mde_at_pilot_size']:.3f} now; {r['positives_needed']} "
              f"positives needed to detect {r['effect']:g}")
    return 0


# --------------------------------------------------------------------------------------------
# rag golden init / check / stats

STATS_EFFECT = 0.05   # the ΔMRR `rag golden stats` sizes the set for (alpha, power: significance)
STATS_CORRELATION = 0.5   # as `rag golden power`'s default


def add_tool_parsers(acts) -> None:
    """Register ``init``, ``check``, ``stats``, ``mine``, ``pool``, ``review``, ``show`` and
    ``judge`` on ``rag golden``'s subparsers."""
    from rag.golden.mining import add_mine_parser
    from rag.golden.pooling import add_pool_parser
    from rag.golden.review import add_review_parser
    from rag.golden.judge import add_judge_parser
    from rag.golden.show import add_show_parser
    from rag.golden.calibrate import add_calibrate_parser

    add_mine_parser(acts)
    add_pool_parser(acts)
    add_review_parser(acts)
    add_show_parser(acts)
    add_judge_parser(acts)
    add_calibrate_parser(acts)

    def pinned(g) -> None:  # a pinned release as the corpus, as a run names it
        g.add_argument("--sdist", default=None, metavar="REQ",
                       help="a pinned PyPI source distribution, e.g. requests==2.32.3 (as "
                            "corpus.sdist=REQ; fetched once with pip into the cache)")
        g.add_argument("--npm", default=None, metavar="SPEC",
                       help="a pinned npm package, e.g. zod@3.25.76 (as corpus.npm=SPEC)")

    def where(parser, *, default_help: str) -> None:
        g = parser.add_mutually_exclusive_group()
        g.add_argument("--corpus", default=None, metavar="NAME",
                       help=f"a corpus config of conf/corpus/ (flask, zod, ...); {default_help}")
        g.add_argument("--path", default=None, metavar="DIR",
                       help="a corpus directory (as corpus.path=DIR)")
        pinned(g)

    it = acts.add_parser(
        "init", help="scaffold queries.yaml and negatives.yaml for a corpus",
        description=(
            "Write queries.yaml and negatives.yaml for a corpus: its corpus: field (the name "
            "python -m rag.run gives that corpus), one example query labelling a real file of "
            "the corpus (so the set loads and a run works at once; replace it), and commented "
            "examples of a file label, a symbol label, a span label and a negative with grep "
            "evidence. Default directory: golden/<corpus name>/ in the project (for --corpus, "
            "the corpus config's golden_dir), where python -m rag.run corpus.path=DIR (or "
            "corpus.sdist=REQ, corpus.npm=SPEC) finds it. "
            "Existing files are not overwritten without --force."))
    g = it.add_mutually_exclusive_group(required=True)
    g.add_argument("--corpus", default=None, metavar="NAME",
                   help="a corpus config of conf/corpus/ (flask, zod, ...)")
    g.add_argument("--path", default=None, metavar="DIR", help="a corpus directory")
    pinned(g)
    it.add_argument("--out", default=None, metavar="DIR",
                    help="where to write (default: golden/<corpus name>/ in the project)")
    it.add_argument("--force", action="store_true", help="overwrite existing files")

    ck = acts.add_parser(
        "check", help="check a golden set's labels against a corpus (label rot), no model",
        description=(
            "Walk and chunk the corpus as a run would (its walk and chunk settings; nothing is "
            "embedded) and report every label whose path, symbol or span no longer resolves, "
            "with its likely new location found by name (a file defining the symbol, the same "
            "file name elsewhere, the same symbol in another file or spelled differently). "
            "Exit 0: every label resolves; 1: problems found; 2: could not check (bad golden "
            "file, missing corpus)."))
    where(ck, default_help="default: the default corpus")
    ck.add_argument("--golden", default=None, metavar="DIR",
                    help="the golden directory (default: the one python -m rag.run would use "
                         "for that corpus)")
    ck.add_argument("--json", action="store_true", help="print JSON")
    ck.add_argument("--pin", action="store_true",
                    help="when every label resolves, write a digest: of each span label's "
                         "current text into queries.yaml (comments kept), so a later check "
                         "finds spans whose text moved inside the file")

    st = acts.add_parser(
        "stats", help="count a golden set (tags, label units, sources, negatives) and size it",
        description=(
            "Counts by tag, by label unit (file, symbol, span), by source (source: field; "
            "missing = hand), queries with several labels, negatives by tag; and, from a pilot "
            "ledger row (--run, else the newest row of the set's corpus in the ledger), the "
            f"positives needed to detect a difference of {STATS_EFFECT} in MRR between two "
            "systems (paired test, alpha 0.05, power 0.8, as rag golden power with its "
            "defaults)."))
    st.add_argument("--golden", default=None, metavar="DIR",
                    help="the golden directory (default: the default corpus's)")
    st.add_argument("--run", default=None, metavar="ROW",
                    help="the pilot ledger row (run id or unique prefix; default: the newest "
                         "row of the set's corpus, if any)")
    from rag.app.config import add_tracking_uri_argument

    add_tracking_uri_argument(st)
    st.add_argument("--json", action="store_true", help="print JSON")


def _corpus_args(args: Any) -> tuple[str | None, str | None, list[str]]:
    """(``--corpus``, ``--path``, the overrides of ``--sdist``/``--npm``) of a golden command."""
    extra = []
    sdist = getattr(args, "sdist", None)
    if sdist and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*",
                                  sdist.replace(" ", "")):
        # labels name the lines of one release: the newest one would move under them
        raise ValueError(f"--sdist {sdist!r}: pin one release, NAME==VERSION (e.g. "
                         "requests==2.32.3)")
    if sdist:
        extra = [_hydra_override("corpus.sdist", args.sdist), "corpus.npm=null",
                 "corpus.path=null"]
    elif getattr(args, "npm", None):
        extra = [_hydra_override("corpus.npm", args.npm), "corpus.sdist=null",
                 "corpus.path=null"]
    return args.corpus, args.path, extra


def _config_for(corpus: str | None, path: str | None, overrides: Sequence[str] = ()):
    """The composed config of ``--corpus NAME`` (conf/corpus/NAME.yaml), ``--path DIR``
    (corpus.path, named as a run names it), ``overrides`` (``--sdist``/``--npm``: a pinned
    release, fetched into the cache) or the default corpus.

    Raises:
        ValueError: an unknown corpus config, or DIR is not a directory.
    """
    from pathlib import Path

    from rag.app.search_cli import compose_config, set_corpus_dir

    if corpus is not None:
        from rag.app.config import project_root

        known = sorted(f.stem for f in (project_root() / "conf" / "corpus").glob("*.yaml"))
        if corpus not in known:
            hint = (" (a directory is --path DIR)" if "/" in corpus or Path(corpus).is_dir()
                    else "")
            raise ValueError(f"--corpus {corpus!r}: not a corpus config name{hint}; known: "
                             f"{', '.join(known)} (conf/corpus/NAME.yaml)")
        return compose_config([f"corpus={corpus}"])
    cfg = compose_config(list(overrides))
    if path is not None:
        root = Path(path).expanduser().resolve()
        if not root.is_dir():
            raise ValueError(f"--path {path}: not a directory")
        set_corpus_dir(cfg, root)
    return cfg


def _hydra_override(key: str, value: str) -> str:
    """``key=value`` as Hydra's override grammar reads back as ``value`` (quoted when it
    holds characters the grammar parses: ``requests==2.32.3``)."""
    import re

    if not re.fullmatch(r"[\w./~+:@-]+", value):
        value = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return f"{key}={value}"


def _hydra_arg(key: str, value: str) -> str:
    """:func:`_hydra_override` as one shell word (``"corpus.sdist='a==1'"`` rather than
    shlex's ``'corpus.sdist='"'"'a==1'"'"''`` where double quotes can hold it)."""
    import re
    import shlex

    word = _hydra_override(key, value)
    if "'" in word and not re.search(r'["$`\\!]', word):
        return f'"{word}"'
    return shlex.quote(word)


def _seed_file(view) -> str:
    """The file the example query labels: a README at the root, else the first source file,
    else the first documentation file, else the first file."""
    paths = sorted(view.lines, key=lambda p: (p.count("/"), p))
    for p in paths:
        if "/" not in p and p.lower().startswith("readme"):
            return p
    for cat in ("source", "documentation"):
        for p in paths:
            if view.categories.get(p) == cat:
                return p
    return paths[0]


def _yaml_str(s: str) -> str:
    import json as _json

    return _json.dumps(s)  # a JSON string is a YAML double-quoted scalar


def scaffold_texts(view, *, grep_hits: int | None = None) -> tuple[str, str]:
    """(queries.yaml, negatives.yaml) for the corpus ``view``
    (:class:`rag.golden.label_check.CorpusView`)."""
    from rag.golden.pooling import INIT_EXAMPLE_PREFIX

    name = view.name
    seed = _seed_file(view)
    is_readme = seed.lower().startswith("readme")
    query = (f"what is {name} and how do I get started" if is_readme
             else f"what does {seed.rsplit('/', 1)[-1]} do")
    tags = "[prose, docs]" if is_readme else "[prose]"
    sym = next(((p, s) for (p, s) in view.spans
                if view.categories.get(p) == "source" and s != "<module>"), None)
    sym_path, sym_name = sym if sym else ("src/pkg/module.py", "Class.method")
    a, b = view.spans.get(sym, (1, 20)) if sym else (1, 20)
    span_path = sym_path
    q = f"""# Golden set for corpus {name} (format: golden/README.md), written by `rag golden init`.
# Each query names what a developer would type and the corpus items that answer it. Check the
# labels against the corpus in seconds with `rag golden check`; every run checks them too.
corpus: {name}
queries:
  # EXAMPLE: replace it with your own queries (it is here so that the set loads and runs).
  - id: {INIT_EXAMPLE_PREFIX}file
    query: {_yaml_str(query)}
    tags: {tags}             # free-form; metrics are also reported per tag
    relevant:
      - path: {_yaml_str(seed)}      # a file label: any chunk of this file counts

  # More kinds of labels -- uncomment and edit:
  #
  # - id: sym-example                # unique across both files
  #   query: {sym_name.rsplit('.', 1)[-1]}
  #   tags: [symbol]
  #   relevant:
  #     - path: {sym_path}
  #       symbol: {sym_name}         # a symbol label: only this chunk of the file counts
  #       grade: 2                   # optional, the nDCG gain (default 1)
  #
  # - id: span-example
  #   query: where is the part that does X
  #   tags: [prose]
  #   relevant:
  #     - path: {span_path}
  #       lines: [{a}, {b}]          # a span label: lines {a}-{b} of the file, inclusive
"""
    evidence = ("no file of the corpus mentions it" if grep_hits == 0 else
                f"{grep_hits} file(s) mention it: pick another" if grep_hits else
                "no file of the corpus mentions it")
    n = f"""# Unanswerable queries for corpus {name}: the right answer is "nothing in this corpus".
# Give the grep evidence in each note. Tags: off_topic, or near_miss (sounds like the corpus's
# subject but is not in it).
corpus: {name}
negatives: []
# Replace `negatives: []` above with a list like this one:
#
# negatives:
#   - id: neg-sourdough
#     query: how do I bake sourdough bread
#     tags: [off_topic]
#     note: "grep -rli sourdough: {evidence} (checked by rag golden init)"
"""
    return q, n


def init_command(args: argparse.Namespace) -> int:
    """``rag golden init``: scaffold a golden set for a corpus."""
    from pathlib import Path

    from rag.app.config import expand_path, project_root
    from rag.core.errors import RunError
    from rag.eval.golden import NEGATIVES_FILE, QUERIES_FILE, GoldenError, load_golden
    from rag.golden.label_check import corpus_view_from_config

    try:
        cfg = _config_for(*_corpus_args(args))
        view = corpus_view_from_config(cfg)
        if not view.lines:
            raise ValueError(f"corpus {view.name!r} ({view.root}) has no indexable file")
        if args.out:
            out = Path(args.out).expanduser().resolve()
        elif args.corpus and cfg.corpus.golden_dir:
            out = expand_path(cfg.corpus.golden_dir, base=project_root())
        else:
            out = project_root() / "golden" / view.name
        files = {out / QUERIES_FILE: None, out / NEGATIVES_FILE: None}
        existing = [str(f) for f in files if f.exists()]
        if existing and not args.force:
            raise ValueError(f"{', '.join(existing)} already exist(s): pass --force to overwrite, "
                             "or --out DIR")
        grep = 0
        for rel in view.lines:
            try:
                if "sourdough" in (view.root / rel).read_text(encoding="utf-8",
                                                              errors="replace").lower():
                    grep += 1
            except OSError:
                pass  # not a file of the root (an exported issue)
        qtext, ntext = scaffold_texts(view, grep_hits=grep)
        out.mkdir(parents=True, exist_ok=True)
        (out / QUERIES_FILE).write_text(qtext, encoding="utf-8", newline="\n")
        (out / NEGATIVES_FILE).write_text(ntext, encoding="utf-8", newline="\n")
        load_golden(out, corpus_paths=view.paths,
                    corpus_symbols={(p, s) for p, ss in view.symbols.items() for s in ss})
    except GoldenError as exc:  # the scaffold itself does not load: a bug
        print(f"error: the scaffold does not load: {'; '.join(exc.problems)}", file=sys.stderr)
        return 2
    except (ValueError, OSError, RunError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # Hydra / OmegaConf composition errors
        if type(exc).__module__.startswith(("hydra", "omegaconf")):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
    pin = ("corpus.sdist", args.sdist, "--sdist") if args.sdist else (
        ("corpus.npm", args.npm, "--npm") if args.npm else None)
    by_name = bool(args.path or pin)  # found by the run as golden/<corpus name>
    default_found = (out == project_root() / "golden" / view.name) if by_name else (
        bool(cfg.corpus.golden_dir) and out == expand_path(cfg.corpus.golden_dir, base=project_root()))
    # a pin replaces the default corpus's own (corpus.sdist=flask==3.1.3): the other is unset
    where = (_hydra_arg("corpus.path", str(view.root)) if args.path
             else _hydra_arg(pin[0], pin[1]) + (" corpus.sdist=null" if pin[0] == "corpus.npm"
                                                else "") if pin
             else _hydra_arg("corpus", args.corpus) if args.corpus else "")
    golden_arg = _hydra_arg("eval.golden_dir", str(out))
    check_where = (f"--path {_shq(str(view.root))}" if args.path
                   else f"{pin[2]} {_shq(pin[1])}" if pin
                   else f"--corpus {args.corpus}" if args.corpus else "")
    print(f"wrote {out / QUERIES_FILE} and {out / NEGATIVES_FILE} for corpus {view.name!r} "
          f"({len(view.lines)} files): one example query labelling {_seed_file(view)}, "
          "commented examples of the other label kinds")
    print("next:")
    print(f"  edit {out / QUERIES_FILE} and {out / NEGATIVES_FILE} (format: golden/README.md)")
    print(f"  rag golden check {check_where} --golden {_shq(str(out))}   "
          "# every label against the corpus, in seconds")
    print("  " + " ".join(w for w in ("python -m rag.run", where, golden_arg) if w)
          + "   # index, evaluate, one ledger row")
    if default_found and by_name:
        print(f"  (python -m rag.run {where} finds {out} by itself: golden/<corpus name>)")
    if pin:
        print(f"  rag golden show FILE --path {_shq(str(view.root))}   # a file's chunks and "
              "symbols (the fetched release's files are there)")
    print(f"  rag golden stats --golden {_shq(str(out))}")
    return 0


def _shq(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _check_error(exc: BaseException) -> int | None:
    if type(exc).__module__.startswith(("hydra", "omegaconf")):
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return None


def check_command(args: argparse.Namespace) -> int:
    """``rag golden check``: exit 0 clean, 1 label rot found, 2 could not check."""
    import time
    from pathlib import Path

    from rag.core.errors import RunError
    from rag.eval.golden import GoldenError, load_golden
    from rag.golden.label_check import check_golden, corpus_view_from_config, render_problems
    from rag.app.run import golden_dir_for

    t0 = time.perf_counter()
    try:
        cfg = _config_for(*_corpus_args(args))
        golden_dir = Path(args.golden).expanduser().resolve() if args.golden else golden_dir_for(cfg)
        if golden_dir is None:
            raise ValueError(f"no golden set for corpus {cfg.corpus.name!r}: pass --golden DIR")
        if not args.golden:
            from rag.app.run import _labelled_corpus

            other = _labelled_corpus(golden_dir)
            if other and other != str(cfg.corpus.name):  # the default corpus's labels
                raise ValueError(
                    f"no golden set for corpus {cfg.corpus.name!r} (golden/{cfg.corpus.name}/ "
                    f"does not exist; {golden_dir} labels {other!r}): pass --golden DIR, or "
                    "write one with rag golden init")
        golden = load_golden(golden_dir)
        view = corpus_view_from_config(cfg)
    except GoldenError as exc:
        print(f"error: cannot read the golden set: {len(exc.problems)} problem(s):\n  "
              + "\n  ".join(exc.problems), file=sys.stderr)
        return 2
    except (ValueError, OSError, RunError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        code = _check_error(exc)
        if code is None:
            raise
        return code
    problems = check_golden(golden, view)
    seconds = time.perf_counter() - t0
    n_labels = sum(len(q.relevant) + len(getattr(q, "not_relevant", None) or ())
                   for q in golden.positives)
    from rag.golden.pooling import is_init_example

    examples = [q.id for q in golden.positives if is_init_example(q.id)]
    pinned = None
    if args.pin and not problems:
        from rag.golden.label_check import pin_digests

        try:
            pinned = pin_digests(golden_dir / "queries.yaml", view)
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({
            "pinned": pinned,
            "golden_dir": str(golden_dir), "labelled_corpus": golden.corpus, "corpus": view.name,
            "corpus_root": str(view.root), "files": len(view.lines), "chunks": view.chunks,
            "queries": len(golden.positives), "labels": n_labels,
            "negatives": len(golden.negatives), "seconds": round(seconds, 3),
            "example_queries": examples,
            "problems": [p.as_dict() for p in problems]}, indent=2))
        return 1 if problems else 0
    n_not = sum(len(getattr(q, "not_relevant", None) or ()) for q in golden.positives)
    split = f" ({n_labels - n_not} relevant, {n_not} not_relevant)" if n_not else ""
    print(f"{golden_dir}: {len(golden.positives)} queries, {n_labels} labels{split} checked against "
          f"corpus {view.name!r} ({len(view.lines)} files, {view.chunks} chunks) in "
          f"{seconds:.1f} s")
    if golden.corpus and str(golden.corpus) != view.name:
        print(f"note: the set labels corpus {golden.corpus!r}; checked against {view.name!r}")
    if examples:
        print(f"note: {len(examples)} example query(ies) from rag golden init still there: "
              + ", ".join(examples))
    for line in render_problems(problems):
        print(line)
    if problems:
        print(f"{len(problems)} label(s) do not resolve"
              + (": nothing pinned (fix them first)" if args.pin else ""))
        return 1
    print("ok: every label resolves")
    if pinned is not None:
        print(f"pinned {pinned} span digest(s) in {golden_dir / 'queries.yaml'}")
    return 0


def label_unit(lab) -> str:
    """``span`` (a ``lines:`` label), ``symbol`` or ``file``."""
    if getattr(lab, "unit", None) in ("file", "symbol", "span"):
        return lab.unit
    if getattr(lab, "lines", None):
        return "span"
    return "symbol" if lab.symbol else "file"


def golden_stats(golden, per_query=None, *, run_id: str | None = None,
                 effect: float = STATS_EFFECT,
                 correlation: float = STATS_CORRELATION) -> dict[str, Any]:
    """The counts of ``rag golden stats``; with ``per_query`` (a pilot row's positives, as
    :func:`rag.ledger.sweep.per_query_frame` reads them) the MRR line of :func:`power_table`."""
    from collections import Counter

    labels = [lab for q in golden.positives for lab in q.relevant]
    by_labels = Counter(len(q.relevant) for q in golden.positives)
    out: dict[str, Any] = {
        "golden_dir": str(golden.directory), "corpus": golden.corpus,
        "queries": len(golden.positives), "labels": len(labels),
        "negatives": len(golden.negatives),
        "by_tag": dict(sorted(Counter(t for q in golden.positives for t in q.tags).items())),
        "untagged": sum(1 for q in golden.positives if not q.tags),
        "by_unit": {u: sum(1 for lab in labels if label_unit(lab) == u)
                    for u in ("file", "symbol", "span")},
        # by kind: "mined:git <sha>" counts under mined:git
        "by_source": dict(sorted(Counter(str(getattr(q, "source", None) or "hand").split(" ", 1)[0]
                                         for q in golden.positives).items())),
        # each judgement's own source (rag golden review writes it): labelled by hand when
        # it says nothing; by kind, as above
        "labels_by_source": dict(sorted(Counter(
            str(lab.source or "unmarked").split(" ", 1)[0]
            for q in golden.positives for lab in (*q.relevant, *q.not_relevant)).items())),
        "several_labels": sum(n for k, n in by_labels.items() if k > 1),
        "labels_per_query": {str(k): by_labels[k] for k in sorted(by_labels)},
        "graded_labels": sum(1 for lab in labels if lab.grade > 1),
        "not_relevant_labels": sum(len(getattr(q, "not_relevant", None) or ())
                                   for q in golden.positives),
        "negatives_by_tag": dict(sorted(Counter(t for q in golden.negatives
                                                for t in (q.tags or ("(untagged)",))).items())),
        "power": None,
    }
    if per_query is not None:
        row = power_table(per_query, effect=effect, correlation=correlation, metrics=["mrr"])[0]
        out["power"] = {"run_id": run_id, "alpha": ALPHA, "power": POWER,
                        "correlation": correlation, **row,
                        "have": len(golden.positives),
                        "enough": (len(golden.positives) >= row["positives_needed"]
                                   if row["sd"] > 0 else None)}
    return out


def render_stats(st: dict[str, Any]) -> list[str]:
    def kv(d: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"

    lines = [f"{st['golden_dir']} (corpus {st['corpus']}): {st['queries']} queries, "
             f"{st['labels']} labels, {st['negatives']} negatives",
             f"  by tag:      {kv(st['by_tag'])}" + (f"; untagged {st['untagged']}"
                                                    if st["untagged"] else ""),
             f"  label units: {kv(st['by_unit'])}"
             + (f"; graded > 1: {st['graded_labels']}" if st["graded_labels"] else "")
             + (f"; not_relevant: {st['not_relevant_labels']}" if st["not_relevant_labels"] else ""),
             f"  by source:   {kv(st['by_source'])} (queries); labels (relevant and "
             f"not_relevant): {kv(st.get('labels_by_source', {}))}",
             f"  several labels: {st['several_labels']} queries (labels per query: "
             + (", ".join(f"{n} {'query' if n == 1 else 'queries'} with {k}"
                          for k, n in st["labels_per_query"].items()) or "none") + ")",
             f"  negatives by tag: {kv(st['negatives_by_tag'])}"]
    pw = st.get("power")
    if pw and not pw["sd"] > 0:  # every pilot query scored alike: no spread to size from
        lines.append(f"  power: n/a (pilot row {str(pw['run_id'] or '?')[:12]}: every one of "
                     f"its {pw['pilot_positives']} positives has the same MRR, so there is no "
                     "spread to size the set from; use a pilot row with varied results)")
    elif pw:
        verdict = "enough" if pw["enough"] else f"{pw['positives_needed'] - pw['have']} more needed"
        lines.append(
            f"  power (pilot row {str(pw['run_id'] or '?')[:12]}, {pw['pilot_positives']} "
            f"positives, MRR sd {pw['sd']:.3f}): {pw['positives_needed']} positives detect "
            f"ΔMRR {pw['effect']:g} at alpha {pw['alpha']}, power {pw['power']} (assumed "
            f"correlation {pw['correlation']:g}); this set has {pw['have']}: {verdict}; "
            f"the pilot's size detects {pw['mde_at_pilot_size']:.3f}")
    elif st.get("power_note"):
        lines.append(f"  power: {st['power_note']}")
    return lines


def newest_row(ledger, corpus: str, prefix: str = "rag") -> str | None:
    """The id of the newest finished ledger row of ``corpus`` (experiment ``rag-<corpus>``)."""
    exp = ledger.client.get_experiment_by_name(f"{prefix}-{corpus}")
    if exp is None:
        return None
    rows = ledger.rows([exp.experiment_id])
    return rows[-1].info.run_id if rows else None


def stats_command(args: argparse.Namespace) -> int:
    """``rag golden stats``."""
    from pathlib import Path

    from rag.app.config import default_tracking_uri
    from rag.eval.golden import GoldenError, load_golden
    from rag.ledger.mlflow_store import Ledger, LedgerError
    from rag.ledger.sweep import per_query_frame

    try:
        if args.golden:
            golden_dir = Path(args.golden).expanduser().resolve()
        else:
            from rag.app.run import golden_dir_for

            golden_dir = golden_dir_for(_config_for(None, None))
        golden = load_golden(golden_dir)
    except GoldenError as exc:
        print(f"error: cannot read the golden set: {len(exc.problems)} problem(s):\n  "
              + "\n  ".join(exc.problems), file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    frame, run_id, note = None, None, None
    try:
        if args.run or golden.corpus:
            ledger = Ledger(default_tracking_uri(args.tracking_uri), create=False)
            run_id = ledger.resolve_run_id(args.run) if args.run else newest_row(ledger, str(golden.corpus))
            if run_id is None:
                note = f"no ledger row of corpus {golden.corpus!r} yet: pass --run ROW"
            else:
                frame = per_query_frame(ledger.download_text(run_id, "per_query.csv"))
        else:
            note = "the set names no corpus: pass --run ROW"
    except (LookupError, ValueError, OSError, LedgerError) as exc:
        if args.run:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        note = f"no pilot row ({exc})"
    try:
        st = golden_stats(golden, frame, run_id=run_id)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if note:
        st["power_note"] = note
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print("\n".join(render_stats(st)))
    return 0


def _lazy(module: str, name: str):
    """A command that imports its module only when it runs."""
    def command(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(module), name)(args)
    return command


def pool_command(args: argparse.Namespace) -> int:
    """``rag golden pool``: the pooling (rag/golden/pooling.py), given rag's own rankings for
    the queries no row ranked (rag/app/pool_rankings.py)."""
    from rag.app.pool_rankings import rank_with_rag
    from rag.golden.pooling import pool_command as pool

    return pool(args, rank=rank_with_rag)


def review_command(args: argparse.Namespace) -> int:
    """``rag golden review``: the editor (rag/golden/review.py), given the application's config
    composition for a corpus named by overrides."""
    from rag.golden.review import review_command as review
    from rag.app.search_cli import compose_config

    return review(args, compose_config=compose_config)


# rag golden ACTION -> its command; mine, pool and review live in their own modules
TOOL_COMMANDS = {"init": init_command, "check": check_command, "stats": stats_command,
                 "mine": _lazy("rag.golden.mining", "mine_command"),
                 "pool": pool_command,
                 "review": review_command,
                 "show": _lazy("rag.golden.show", "show_command"),
                 "judge": _lazy("rag.golden.judge", "judge_command"),
                 "calibrate": _lazy("rag.golden.calibrate", "calibrate_command")}
