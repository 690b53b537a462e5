"""``rag golden calibrate``: fit the abstention bands that ship with an embedder, on several
ledger rows at once, with their provenance.

Each row's per-query table holds, per query, its kind (positive / negative), its route and
the abstention signals (rag/search/signals.py). The rows' queries are pooled — every corpus's
queries together, each query once, so a corpus weighs by its number of queries — and the
stated rule (rag/eval/abstention.py: the highest abstain_rate on negatives subject to
false_weak_rate <= ``abstain.target_false_weak``; the drop floor with
``abstain.target_dropped``) chooses the bands, exactly as one row's calibration does
(:func:`rag.eval.abstention.calibrate_abstention`). The file written is a calibration.json
that ``abstain.calibration`` reads; put in ``models/abstention/`` it is the one ``abstain.
calibration: auto`` (the default) finds for runs of the same embedder
(:func:`rag.ledger.calibration.shipped_calibration`).

Provenance (``provenance``): the embedder's ``model_id`` (every row must share it: cosines are
in one model's units), ``fitted_on`` (per row: run id, corpus, golden set fingerprint,
positives and negatives), the rule and targets, and when and with which rag commit it was
written. Each row's own (in-sample and cross-validated) numbers stay in its calibration.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence


class CalibrateError(ValueError):
    """Rows that cannot be pooled (one line)."""


def _rows_of(text: str, where: str) -> list[dict[str, Any]]:
    """The per-query table's queries as dicts with the columns the calibration reads."""
    import io
    import math

    import pandas as pd

    from rag.search.signals import SIGNALS

    try:
        frame = pd.read_csv(io.StringIO(text), dtype={"query_id": str}, keep_default_na=False)
    except ValueError as exc:
        raise CalibrateError(f"{where} is not a per-query table ({exc})") from None
    if "kind" not in frame.columns or "top_dense" not in frame.columns:
        raise CalibrateError(f"{where} has no kind/top_dense columns (a row of a retriever "
                             "without a dense channel cannot fit dense bands)")

    def num(v: Any) -> float | None:
        try:
            x = float(v)
        except (TypeError, ValueError):
            return None
        return x if math.isfinite(x) else None

    out = []
    for rec in frame.to_dict("records"):
        row = {"kind": rec["kind"], "route": str(rec.get("route", "")),
               "supported": str(rec.get("supported", "True")) in ("True", "1", "1.0", "true")}
        for name in SIGNALS:
            row[name] = num(rec.get(name)) if name in rec else None
        out.append(row)
    return out


def _commit() -> str | None:
    from rag.core.paths import project_root

    try:
        p = subprocess.run(["git", "-C", str(project_root()), "rev-parse", "HEAD"],
                           capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() or None


def _rates(scores: Sequence[float], rows: Sequence[dict[str, Any]], weak: float | None,
           drop: float | None) -> dict[str, float]:
    """abstain (negatives below ``weak``), false_weak and dropped (positives below ``weak`` /
    ``drop``) of one held-out corpus; a None threshold flags nothing."""
    pos = [s for s, r in zip(scores, rows) if r["kind"] == "positive"]
    neg = [s for s, r in zip(scores, rows) if r["kind"] == "negative"]

    def share(values: list[float], t: float | None) -> float:
        return 0.0 if t is None or not values else sum(v < t for v in values) / len(values)

    return {"abstain_rate": share(neg, weak), "false_weak_rate": share(pos, weak),
            "dropped_rate": share(pos, drop)}


def leave_one_corpus_out(per_row: Sequence[tuple[dict[str, Any], list[dict[str, Any]]]], *,
                         target_false_weak: float, target_dropped: float,
                         gate_features: Sequence[str] | None, seed: int = 0
                         ) -> list[dict[str, Any]]:
    """How the pooled rule transfers: per row, calibrate on the *other* rows' queries and
    apply the dense bands and the learned gate to this row's queries (the bands as they act:
    a query routed to BM25 alone is never flagged).

    Args:
        per_row: (the row's ``fitted_on`` entry, its per-query rows), two or more.

    Returns:
        per row: run_id, corpus, and ``bands`` / ``learned`` -> abstain_rate, false_weak_rate,
        dropped_rate (``learned`` absent when no gate could be fitted on the others).
    """
    from rag.eval.abstention import calibrate_abstention
    from rag.search.signals import DENSE_SIGNALS, LearnedGate

    out = []
    for i, (entry, held) in enumerate(per_row):
        train = [r for j, (_, rows) in enumerate(per_row) if j != i for r in rows]
        cal = calibrate_abstention(train, target_false_weak=target_false_weak,
                                   target_dropped=target_dropped, seed=seed, n_boot=0,
                                   gate_features=gate_features)
        res: dict[str, Any] = {"run_id": entry["run_id"], "corpus": entry["corpus"]}
        if "suggested_weak_dense" in cal and all(r["top_dense"] is not None for r in held):
            applied = [float("inf") if r["route"] == "bm25" else r["top_dense"] for r in held]
            res["bands"] = _rates(applied, held, cal["suggested_weak_dense"],
                                  cal["suggested_min_dense"])
        if "learned_gate" in cal:
            gate = LearnedGate.from_dict(cal["learned_gate"])
            # as the pipeline applies it: a gate reading dense signals never acts on a query
            # routed to BM25 alone; a signal a query lacks counts as its training mean
            reads_dense = any(f in DENSE_SIGNALS for f in gate.features)
            res["learned"] = _rates([float("inf") if reads_dense and r["route"] == "bm25"
                                     else gate.probability(r) for r in held], held,
                                    gate.weak_score, gate.min_score)
        out.append(res)
    return out


def pooled_calibration(ledger: Any, refs: Sequence[str], *, target_false_weak: float,
                       target_dropped: float, seed: int = 0,
                       gate_features: Sequence[str] | None = None) -> dict[str, Any]:
    """The calibration (rag/eval/abstention.py) of the queries of every row of ``refs``
    pooled, with ``provenance`` (module docstring) and, with two rows or more,
    ``leave_one_corpus_out`` (:func:`leave_one_corpus_out`).

    Args:
        gate_features: the signals the learned gate reads (None: every signal measured on
            every query of every row).

    Raises:
        CalibrateError: fewer than one row, a row twice, rows of different embedders or
            corpora given twice, a row without a per-query table or without negatives.
        LookupError: a reference matching no row, or several.
    """
    from rag.eval.abstention import calibrate_abstention
    from rag.ledger.mlflow_store import LedgerError

    if not refs:
        raise CalibrateError("give at least one row (--run)")
    if gate_features is not None and len(set(gate_features)) < 2:
        raise CalibrateError(f"a learned gate reads two or more distinct signals (--gate-signal "
                             f"given: {', '.join(gate_features) or 'none'}); one signal alone is "
                             "what the dense bands are")
    ids = [ledger.resolve_run_id(r) for r in refs]
    if len(set(ids)) != len(ids):
        raise CalibrateError("a row is given twice")
    rows: list[dict[str, Any]] = []
    per_row: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    fitted_on, models, corpora = [], set(), []
    for rid in ids:
        tags = dict(ledger.client.get_run(rid).data.tags)
        try:
            text = ledger.download_text(rid, "per_query.csv")
        except LedgerError as exc:
            raise CalibrateError(f"row {rid[:8]}: {exc}") from None
        got = _rows_of(text, f"per_query.csv of row {rid[:8]}")
        n_pos = sum(r["kind"] == "positive" for r in got)
        n_neg = sum(r["kind"] == "negative" for r in got)
        if not n_neg:
            raise CalibrateError(f"row {rid[:8]} ({tags.get('corpus', '?')}) has no negative "
                                 "query: it cannot say where to abstain")
        if not tags.get("model_id"):
            raise CalibrateError(f"row {rid[:8]} records no model_id: whose cosines are these?")
        models.add(tags["model_id"])
        corpora.append(tags.get("corpus", "?"))
        fitted_on.append({"run_id": rid, "corpus": tags.get("corpus"),
                          "golden_fingerprint": tags.get("golden_fingerprint"),
                          "search_mode": tags.get("search_mode"),
                          "n_positives": n_pos, "n_negatives": n_neg})
        per_row.append((fitted_on[-1], got))
        rows += got
    if len(models) != 1:
        raise CalibrateError("the rows were embedded by different models ("
                             + ", ".join(sorted(m.split("|")[0] for m in models))
                             + "): a cosine threshold is in one model's units")
    dup = sorted({c for c in corpora if corpora.count(c) > 1})
    if dup:
        raise CalibrateError(f"corpus {dup[0]} is given twice: its queries would count twice")
    prints = [f["golden_fingerprint"] for f in fitted_on if f["golden_fingerprint"]]
    twice = sorted({g for g in prints if prints.count(g) > 1})
    if twice:
        raise CalibrateError(f"golden set {twice[0][:12]} is given twice (rows of two corpus "
                             "versions with one label set): its queries would count twice")
    try:
        cal = calibrate_abstention(rows, target_false_weak=target_false_weak,
                                   target_dropped=target_dropped, seed=seed,
                                   gate_features=gate_features)
    except ValueError as exc:
        raise CalibrateError(str(exc)) from None
    if "top_dense" not in cal.get("signals", {}):
        raise CalibrateError("the rows do not measure top_dense on every query (a finite "
                             "cosine for each positive and negative): no dense bands to fit")
    cal.pop("oof_learned", None)  # per-query values of pooled rows: no use elsewhere
    cal["provenance"] = {
        "model_id": models.pop(), "fitted_on": fitted_on,
        "golden_fingerprints": [f["golden_fingerprint"] for f in fitted_on],
        "pooling": "every row's queries together, each once (a corpus weighs by its queries)",
        # what abstain.signal=auto applies from this file: the learned gate when it has
        # one, else the dense bands
        "abstain_signal": "learned" if cal.get("learned_gate") else "top_dense",
        "written_by": "rag golden calibrate",
        "gate_features": (cal.get("learned_gate") or {}).get("features"),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rag_commit": _commit()}
    if len(per_row) >= 2:
        # every held-out gate reads what the pooled one reads
        cal["leave_one_corpus_out"] = leave_one_corpus_out(
            per_row, target_false_weak=target_false_weak, target_dropped=target_dropped,
            gate_features=gate_features or (cal.get("learned_gate") or {}).get("features"),
            seed=seed)
    return cal


def add_calibrate_parser(acts: Any) -> None:
    """Register ``rag golden calibrate``."""
    from rag.eval.abstention import DEFAULT_TARGET_DROPPED, DEFAULT_TARGET_FALSE_WEAK
    from rag.ledger.tracking_uri import add_tracking_uri_argument

    p = acts.add_parser(
        "calibrate",
        help="fit abstention bands on several rows' queries pooled (the calibration that ships "
             "with an embedder)",
        description=(
            "Pool the queries of the rows given (their per_query.csv: kind, route, abstention "
            "signals) and choose the dense bands by the stated rule: the highest abstain_rate "
            "on negatives subject to false_weak_rate <= --target-false-weak (the drop floor: "
            "<= --target-dropped). Writes a calibration.json with its provenance (model, rows, "
            "corpora, golden sets, rule, date, commit); abstain.calibration=FILE applies it, "
            "and in models/abstention/ it is what abstain.calibration=auto (the default) "
            "applies to runs of the same embedder."),
        epilog="Example: rag golden calibrate --run 3454b719 --run 0d308057 --run 9a1c2b3d "
               "--out models/abstention/all-minilm-l6-v2.json")
    p.add_argument("--run", action="append", required=True, metavar="ROW",
                   help="a ledger row (run id or unique prefix) of a corpus with negatives "
                        "(repeatable; one per corpus)")
    p.add_argument("--out", required=True, metavar="FILE", help="the calibration.json to write")
    p.add_argument("--target-false-weak", type=float, default=DEFAULT_TARGET_FALSE_WEAK,
                   help="the rule's bound on false_weak_rate (default "
                        f"{DEFAULT_TARGET_FALSE_WEAK:g})")
    p.add_argument("--target-dropped", type=float, default=DEFAULT_TARGET_DROPPED,
                   help=f"the drop floor's bound (default {DEFAULT_TARGET_DROPPED:g})")
    from rag.search.signals import SIGNALS

    p.add_argument("--gate-signal", action="append", choices=SIGNALS, metavar="SIGNAL",
                   dest="gate_signals",
                   help="a signal the learned gate reads (repeatable; default every signal "
                        f"measured on every query; one of {', '.join(SIGNALS)})")
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")
    add_tracking_uri_argument(p)


def calibrate_command(args: argparse.Namespace) -> int:
    """``rag golden calibrate``: exit 0, or 2 with one ``error:`` line."""
    from rag.ledger.mlflow_store import Ledger, LedgerError
    from rag.ledger.tracking_uri import default_tracking_uri

    for name in ("target_false_weak", "target_dropped"):
        v = getattr(args, name)
        if not 0 <= v < 1:
            print(f"error: --{name.replace('_', '-')} must be in [0, 1), got {v}",
                  file=sys.stderr)
            return 2
    from rag.core.paths import write_text_replacing

    out = Path(args.out)
    try:
        if out.exists() and not out.resolve().is_file():
            raise CalibrateError(f"cannot write {out}: "
                                 + ("it is a directory" if out.is_dir() else "not a regular file"))
        ledger = Ledger(default_tracking_uri(args.tracking_uri), create=False)
        cal = pooled_calibration(ledger, args.run, target_false_weak=args.target_false_weak,
                                 target_dropped=args.target_dropped,
                                 gate_features=args.gate_signals)
        write_text_replacing(out, json.dumps(cal, indent=2) + "\n")
    except (CalibrateError, LookupError, LedgerError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(cal, indent=2))
        return 0
    dense = cal["signals"]["top_dense"]
    prov = cal["provenance"]
    print(f"wrote {out}: {prov['model_id'].split('|')[0]}, "
          f"{cal['n_positives']} positives and {cal['n_negatives']} negatives of "
          + ", ".join(f"{f['corpus']} ({f['run_id'][:8]})" for f in prov["fitted_on"]))
    for band, key in (("weak", "suggested_weak_dense"), ("drop", "suggested_min_dense")):
        c = dense[band]
        cv = c.get("cross_validated") or {}
        t = "none (flag nothing)" if cal[key] is None else f"{cal[key]:.4f}"
        print(f"  {band} < {t}: pooled abstain "
              f"{c['abstain_rate']:.3f}, false_weak {c['false_weak_rate']:.3f}"
              + (f" ({cv['folds']}-fold cross-validated: abstain {cv['abstain_rate']:.3f}, false_weak "
                 f"{cv['false_weak_rate']:.3f})" if cv else ""))
    learned = cal["signals"].get("learned")
    if learned is not None:
        gate = cal["learned_gate"]
        print(f"  learned gate over {', '.join(gate['features'])}: weak < "
              f"{gate['weak_score']:.4f}, drop < {gate['min_score']:.4f}: pooled abstain "
              f"{learned['weak']['abstain_rate']:.3f}, false_weak "
              f"{learned['weak']['false_weak_rate']:.3f} (out-of-fold)"
              if gate["weak_score"] is not None and gate["min_score"] is not None else
              f"  learned gate over {', '.join(gate['features'])}: {learned['message']}")
    for held in cal.get("leave_one_corpus_out", []):
        parts = [f"{kind} abstain {r['abstain_rate']:.3f}, false_weak {r['false_weak_rate']:.3f}, "
                 f"dropped {r['dropped_rate']:.3f}"
                 for kind in ("bands", "learned") if (r := held.get(kind))]
        print(f"  {held['corpus']} ({held['run_id'][:8]}) calibrated on the other rows only: "
              + "; ".join(parts))
    return 0
