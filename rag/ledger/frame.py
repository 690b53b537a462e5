"""The ledger as a pandas DataFrame, for notebooks and ad-hoc analysis."""

from __future__ import annotations

import io

import pandas as pd

COLUMNS = ("mrr", "recall_at_8", "tag.prose.recall_at_8", "latency_p50_ms", "abstain_rate",
           "false_weak_rate", "answer_support_rate")
PARAMS = ("search.mode", "search.prose_mode", "search.top_k", "fusion.method", "fusion.rrf_k",
          "abstain.min_dense",
          "abstain.weak_dense", "bm25.backend", "embedder.name")


def ledger_frame(uri: str, *, prefix: str = "rag") -> pd.DataFrame:
    """One row per ledger row (sweep parents excluded), oldest first.

    Columns: run_id, experiment, start_time and end_time (UTC), duration_s, label (the
    sweep job, else the run name, else the run id's first 8 characters: what a plot writes
    beside the row's point), corpus and golden fingerprints (compare only rows that share
    both), sweep_name, sweep_job, is_baseline, the params in :data:`PARAMS` and the metrics
    in :data:`COLUMNS` (NaN where absent).

    Raises:
        LedgerError: no store at ``uri`` (it is never created), or it cannot be read.
    """
    from rag.ledger.mlflow_store import Ledger

    ledger = Ledger(uri, create=False)  # a reader: never creates a store
    records = []
    for exp in ledger.experiments(prefix):
        for r in ledger.rows([exp.experiment_id]):
            end = r.info.end_time
            rec = {"run_id": r.info.run_id, "experiment": exp.name,
                   "start_time": pd.Timestamp(r.info.start_time, unit="ms", tz="UTC"),
                   "end_time": pd.Timestamp(end, unit="ms", tz="UTC") if end else pd.NaT,
                   "duration_s": (end - r.info.start_time) / 1000 if end else float("nan"),
                   "label": (r.data.tags.get("sweep_job") or r.info.run_name
                             or r.info.run_id[:8]),
                   "corpus_fingerprint": r.data.tags.get("corpus_fingerprint"),
                   "golden_fingerprint": r.data.tags.get("golden_fingerprint"),
                   "sweep_name": r.data.tags.get("sweep_name"),
                   "sweep_job": r.data.tags.get("sweep_job"),
                   "is_baseline": r.data.tags.get("is_baseline") == "true"}
            rec.update({p: r.data.params.get(p) for p in PARAMS})
            rec.update({m: r.data.metrics.get(m, float("nan")) for m in COLUMNS})
            records.append(rec)
    cols = ["run_id", "experiment", "start_time", "end_time", "duration_s", "label",
            "corpus_fingerprint", "golden_fingerprint",
            "sweep_name", "sweep_job", "is_baseline",
            *PARAMS, *COLUMNS]
    return pd.DataFrame.from_records(records, columns=cols).sort_values("start_time",
                                                                       ignore_index=True)


def pareto_front(df: pd.DataFrame, *, cost: str = "latency_p50_ms", gain: str = "mrr") -> pd.Series:
    """Boolean mask of the rows no other row dominates (cost <= and gain >=, one strictly).

    Rows with NaN in either column are never on the front.
    """
    ok = df[[cost, gain]].notna().all(axis=1)
    mask = pd.Series(False, index=df.index)
    for i in df.index[ok]:
        c, g = df.at[i, cost], df.at[i, gain]
        others = df[ok & (df.index != i)]
        dominated = ((others[cost] <= c) & (others[gain] >= g)
                     & ((others[cost] < c) | (others[gain] > g))).any()
        mask[i] = not dominated
    return mask


def per_query_table(uri: str, run_id: str) -> pd.DataFrame:
    """The per_query.csv artifact of one row.

    Raises:
        LedgerError: no store at ``uri``, or the row has no readable per_query.csv.
    """
    from rag.ledger.mlflow_store import Ledger

    return pd.read_csv(io.StringIO(Ledger(uri, create=False).download_text(run_id,
                                                                          "per_query.csv")))
