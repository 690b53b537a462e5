"""rag's default beside semble's published default (reference.csv ``published_semble_auto``)
over the repositories whose published figure was made with the annotations here: all with a
figure but chi, fmtlib and sinatra (../shared/data/semble/README.md: other annotation
versions). Reads the systems sweep's rows from the ledger.

    .venv/bin/python experiments/ranking-probes/published_comparison.py SWEEP_ID [LEDGER]
"""

import csv
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OTHER_ANNOTATIONS = ("chi", "fmtlib", "sinatra")

sweep = sys.argv[1]
db = sys.argv[2] if len(sys.argv) > 2 else str(ROOT / "mlflow.db")
ref = {r["repo"]: r for r in csv.DictReader(open(ROOT / "../shared/data/semble/reference.csv"))}
rows = dict(sqlite3.connect(db).execute(
    """select t.value, m.value from runs r
       join tags t on t.run_uuid = r.run_uuid and t.key = 'dataset_repo'
       join tags s on s.run_uuid = r.run_uuid and s.key = 'sweep_id' and s.value = ?
       join tags j on j.run_uuid = r.run_uuid and j.key = 'sweep_job'
                  and j.value like '%system=rag_default%'
       join metrics m on m.run_uuid = r.run_uuid and m.key = 'semble_ndcg_at_10'""",
    (sweep,)).fetchall())
same = sorted(r for r in rows if ref[r]["published_semble_auto"] and r not in OTHER_ANNOTATIONS)
pub = {r: float(ref[r]["published_semble_auto"]) for r in same}
print(f"{len(same)} repositories: {', '.join(same)}")
print(f"rag default {sum(rows[r] for r in same) / len(same):.4f}, semble published default "
      f"{sum(pub.values()) / len(same):.4f}; rag above on {sum(rows[r] > pub[r] for r in same)}")
