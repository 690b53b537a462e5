"""``rag golden``: work on golden sets. ``rag golden power`` sizes a golden set from a pilot row."""

from __future__ import annotations

import argparse
import json
import sys

from rag.eval.significance import ALPHA, POWER, minimum_detectable_effect, required_queries

POWER_METRICS = ("mrr", "recall_at_8")


def add_parser(sub) -> None:
    """Register ``golden`` (with its ``power`` action) on the ``rag`` subparsers."""
    p = sub.add_parser("golden", help="golden sets: how many queries a set needs (power)",
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


def run(args: argparse.Namespace) -> int:
    """Dispatch ``rag golden ACTION``; exit 2 with one ``error:`` line on bad input."""
    from rag.config import default_tracking_uri
    from rag.ledger.mlflow_store import Ledger, LedgerError
    from rag.ledger.sweep import per_query_frame

    if args.action == "expected":
        return expected_command(args)
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
