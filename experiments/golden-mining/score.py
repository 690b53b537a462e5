"""Score a `rag golden mine --from git` candidates file against the verdicts in this folder.

    python experiments/golden-mining/score.py gin /tmp/gin-candidates.yaml

For each judged round of REPO: how many of the judged candidates the file still proposes,
how many of those were judged usable (as_is or light_trim), and how many of the usable ones it
still proposes (recall of what people would keep). Verdicts are keyed by commit, so any
later miner's output can be scored against them (experiments/golden-mining.md says how
each round was drawn and judged).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of k successes in n (Wilson 1927); (0, 0) for n = 0."""
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (round(c - h, 2), round(c + h, 2))


def main(repo: str, candidates: str) -> None:
    proposed = {c["commit"] for c in yaml.safe_load(Path(candidates).read_text())["candidates"]}
    for f in sorted(HERE.glob(f"{repo}-round*-verdicts.yaml")):
        v = yaml.safe_load(f.read_text())
        usable = [x for x in v if x["verdict"] != "unusable"]
        prop = [x for x in v if x["commit"] in proposed]
        good = [x for x in prop if x["verdict"] != "unusable"]
        kept = [x for x in usable if x["commit"] in proposed]
        lo, hi = wilson(len(good), len(prop))
        print(f"{f.stem.replace('-verdicts', '')}: {len(v)} judged, {len(prop)} still proposed, "
              f"usable {len(good)}/{len(prop)} = {len(good) / max(1, len(prop)):.0%} "
              f"(95% CI {lo:.2f}-{hi:.2f}); usable ones still proposed {len(kept)}/{len(usable)}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
