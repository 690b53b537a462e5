"""``rag golden``: work on golden sets. ``rag golden power`` sizes a golden set from a pilot row,
``rag golden expected`` writes a row's expected scores, ``rag golden export`` converts a golden
set to TREC or BEIR files."""

from __future__ import annotations

import argparse
import json
import sys

from rag.eval.significance import ALPHA, POWER, minimum_detectable_effect, required_queries

POWER_METRICS = ("mrr", "recall_at_8")
EXPORT_FORMATS = ("trec", "beir")


def add_parser(sub) -> None:
    """Register ``golden`` (with its ``power`` action) on the ``rag`` subparsers."""
    p = sub.add_parser("golden", help="golden sets: power, expected scores, export to TREC/BEIR",
                       description="Golden-set tools.")
    acts = p.add_subparsers(dest="action", required=True)
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
    pw.add_argument("--tracking-uri", default=None,
                    help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                         "sqlite:///mlflow.db under $RAG_OUTPUT_DIR or the project root)")
    pw.add_argument("--json", action="store_true", help="print JSON")
    ex = acts.add_parser(
        "expected",
        help="write a golden set's expected.yaml from a ledger row (Anserini-style regression)",
        description=("Write the ranking and returned metrics of one ledger row, with a "
                     "tolerance, as expected.yaml beside the golden set it was measured on, and "
                     "the row's calibration.json next to it (apply it elsewhere with "
                     "abstain.calibration=PATH). "
                     "The Flask integration test checks the default row against "
                     "golden/flask/expected.yaml."))
    ex.add_argument("--run", required=True, metavar="RUN_ID", help="the ledger row (id or unique prefix)")
    ex.add_argument("--out", default=None,
                    help="output file (default: expected.yaml in the row's golden directory)")
    ex.add_argument("--tolerance", type=float, default=None,
                    help="absolute tolerance per metric (default 0.005)")
    ex.add_argument("--tracking-uri", default=None,
                    help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                         "sqlite:///mlflow.db under $RAG_OUTPUT_DIR or the project root)")
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
    size and the positives needed for ``effect``.

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
        rows.append({"metric": m, "pilot_positives": int(v.size), "mean": float(v.mean()),
                     "sd": sd, "sd_difference": sd_d,
                     "mde_at_pilot_size": minimum_detectable_effect(sd_d, int(v.size)),
                     "effect": effect, "positives_needed": required_queries(sd_d, effect)})
    return rows


def expected_command(args: argparse.Namespace) -> int:
    """``rag golden expected``: write expected.yaml from one row."""
    from pathlib import Path

    from rag.config import default_tracking_uri
    from rag.eval.expected import DEFAULT_TOLERANCE, EXPECTED_FILE, ExpectedError, render_expected
    from rag.ledger.mlflow_store import Ledger, LedgerError

    try:
        tol = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
        if not (tol >= 0 and tol != float("inf")):
            raise ValueError(f"--tolerance must be a finite number >= 0, got {tol}")
        ledger = Ledger(default_tracking_uri(args.tracking_uri), create=False)
        run_id = ledger.resolve_run_id(args.run)
        row = ledger.client.get_run(run_id)
        tags = row.data.tags
        if not args.out and "golden_dir" not in tags:
            raise ValueError(f"row {run_id[:8]} does not record its golden directory; pass --out FILE")
        out = Path(args.out) if args.out else Path(tags["golden_dir"]) / EXPECTED_FILE
        overrides = json.loads(tags.get("hydra_overrides", "[]"))
        text = render_expected(
            corpus=tags.get("corpus", "?"), overrides=overrides,
            condition=" ".join(["python -m rag.run", *overrides]),
            golden_fingerprint=tags.get("golden_fingerprint", "?"), source_run=run_id,
            metrics=row.data.metrics, tolerance=tol)
        cal = ledger.download_text(run_id, "calibration.json")
        out.write_text(text, encoding="utf-8")
        # its abstention calibration beside it, so a run can apply it by path
        # (abstain.calibration=golden/<corpus>/calibration.json, conf/abstain/*.yaml)
        (out.parent / "calibration.json").write_text(cal, encoding="utf-8")
    except (LookupError, ValueError, OSError, ExpectedError, LedgerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} and {out.parent / 'calibration.json'}")
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
    them, so that every corpus-id of the qrels names a document. A file's document also
    holds its symbols' text, but only the symbol's document is relevant to a symbol label,
    just as rag judges a hit on another chunk of that file.

    Raises:
        GoldenError: a label names a path that is not indexed, or a symbol that is not a
            chunk of its path.
        FileNotFoundError: ``root`` is not a directory.
    """
    from rag.corpus.chunk import chunk_document
    from rag.corpus.walk import walk_corpus
    from rag.eval.golden import load_golden

    docs = {d.path: d for d in walk_corpus(root, max_file_bytes=max_file_bytes)}
    labelled = {lab.path for q in golden.positives for lab in q.relevant}
    chunks = {p: chunk_document(docs[p]) for p in sorted(labelled) if p in docs}
    symbols = {(c.path, c.symbol) for cs in chunks.values() for c in cs if c.symbol}
    load_golden(golden.directory, corpus_paths=set(docs), corpus_symbols=symbols)  # checks labels
    out = [{"_id": d.path, "title": "", "text": d.text} for d in docs.values()]
    seen: set[str] = set()
    for q in golden.positives:
        for lab in q.relevant:
            if lab.symbol and lab.doc_key not in seen:
                seen.add(lab.doc_key)
                text = "".join(c.text for c in chunks[lab.path] if c.symbol == lab.symbol)
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
    from rag.config import default_tracking_uri
    from rag.ledger.mlflow_store import Ledger, LedgerError
    from rag.ledger.sweep import per_query_frame

    if args.action == "expected":
        return expected_command(args)
    if args.action == "export":
        return export_command(args)
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
        print(json.dumps({"run_id": run_id, "alpha": ALPHA, "power": POWER,
                          "correlation": args.correlation, "metrics": table}, indent=2))
        return 0
    print(f"pilot row {run_id[:12]}: paired test, alpha {ALPHA}, power {POWER}, assumed "
          f"correlation {args.correlation:g} between two systems' per-query values")
    for r in table:
        print(f"  {r['metric']:12} pilot {r['pilot_positives']} positives, sd {r['sd']:.3f}: "
              f"detects {r['mde_at_pilot_size']:.3f} now; {r['positives_needed']} positives "
              f"needed to detect {r['effect']:g}")
    return 0
