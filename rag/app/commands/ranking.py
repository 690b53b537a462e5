"""``rag ranking train``: train the ranking stage's learned combiner leave-one-repository-out
(what it does: rag/app/ranking_train.py)."""

from __future__ import annotations

import json
import sys

from rag.app.commands import no_rest

NAME, ORDER = "ranking", 85


def add_parser(sub):
    from rag.app.ranking_train import DEFAULT_OUT

    p = sub.add_parser("ranking", help="train the ranking stage's learned combiner (LambdaMART)",
                       description="The ranking stage's learned combiner "
                                   "(ranking.combiner=lambdamart, docs/ranking.md).")
    acts = p.add_subparsers(dest="action", required=True)
    t = acts.add_parser(
        "train", help="train LambdaMART leave-one-repository-out on a semble dataset folder",
        description=(
            "Rank every golden query of every repository of a semble dataset folder with the "
            "configured pipeline (all ranking features, the hand-weighted combiner), label each "
            "candidate by semble's rule, and train one LightGBM lambdarank model per "
            "repository on the other repositories' queries (OUT/loro/REPO.json), one on all "
            "(OUT/all.json), and OUT/training_log.json: each fold's held-out repository and "
            "training repositories."),
        epilog="Evaluate with: python -m rag.run +suite=semble ranking.combiner=lambdamart "
               "'ranking.model=" + DEFAULT_OUT + "/loro/${dataset.repo}.json'")
    t.add_argument("--dataset", default=None,
                   help="semble dataset folder (default: ../shared/data/semble)")
    t.add_argument("--repo", action="append", default=None, metavar="NAME",
                   help="train on these repositories only (repeatable; default: all)")
    t.add_argument("--out", default=None,
                   help=f"model folder [default: {DEFAULT_OUT} under the project root]")
    t.add_argument("--rounds", type=int, default=None, help="boosting rounds [default: 200]")
    t.add_argument("--json", action="store_true", help="print the training log as JSON")
    t.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides for the pipeline that produces the candidates")
    return p


def run(args, rest, parser) -> int:
    no_rest(rest, parser)
    from rag.app.ranking_train import run_training
    from rag.core.paths import expand_path

    from pathlib import Path

    from rag.app.ranking_train import DEFAULT_OUT

    out = expand_path(DEFAULT_OUT) if args.out is None else expand_path(args.out, base=Path.cwd())
    try:
        log = run_training(dataset_path=args.dataset, repos=args.repo, out=out,
                           overrides=list(args.overrides), rounds=args.rounds)
    except ValueError as exc:
        print(f"rag ranking train: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(log, indent=1))
    else:
        print(f"{len(log['folds'])} leave-one-repository-out models and all.json in {out}; "
              f"log: {out / 'training_log.json'}")
    return 0
