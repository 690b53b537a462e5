"""rag's own rankings for ``rag golden pool``: every pooled query searched over a corpus
directory in several search modes, so that candidates (which no ledger row ranks) are pooled
too. The index is the one ``rag search -r DIR`` serves (built and published on first use,
reused after); each mode is one ranking of the pool, named ``rag:<mode>``."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Sequence


def search_modes() -> tuple[str, ...]:
    """Every ``search.mode`` the schema takes (rag/app/config.py ``SearchMode``): the modes
    ``+sweep=routing`` compares, plus any registered channel."""
    from rag.app.config import SearchMode

    return tuple(m.value for m in SearchMode)


def rank_with_rag(corpus_root: Path, queries: Sequence, *, modes: Sequence[str] | None,
                  depth: int, overrides: Sequence[str]) -> list:
    """One :class:`rag.golden.pooling.RunSource` per mode: each query's top ``depth`` units
    (:func:`rag.golden.pooling.chunk_unit`, a unit once) from the ranking before abstention.

    Args:
        corpus_root: the corpus directory (as ``rag search -r``).
        queries: :class:`rag.golden.pooling.PoolQuery` objects.
        modes: search modes (default :func:`search_modes`).
        depth: units per query.
        overrides: config overrides (Hydra grammar, as ``rag search`` takes them).

    Raises:
        rag.golden.pooling.PoolError: a mode the schema does not take.
        SystemExit: the config or index cannot be loaded (one ``error:`` line, as
            ``rag search`` exits).
    """
    from rag.app.search_cli import _load, search_abstention
    from rag.eval.golden import trec_docno
    from rag.golden.pooling import PoolError, RunSource, chunk_unit
    from rag.search.pipeline import SearchPipeline

    known = search_modes()
    modes = tuple(modes or known)
    bad = [m for m in modes if m not in known]
    if bad:
        raise PoolError(f"--modes {' '.join(bad)}: not a search mode (one of {', '.join(known)})")
    print(f"loading the index of {corpus_root} (the first time it is built: every chunk is "
          "embedded, minutes on 2 cores; reused after)", file=sys.stderr)
    cfg, index, _ = _load(list(overrides), corpus_dir=Path(corpus_root).resolve())
    options, _ = search_abstention(cfg, index)
    out = []
    for mode in modes:
        opts = dataclasses.replace(options, mode=mode, top_k=max(options.top_k, depth))
        pipeline = SearchPipeline(index, opts)
        ranking: dict[str, list[str]] = {}
        lines: dict[str, tuple[int, int]] = {}
        for n, q in enumerate(queries, 1):
            res = pipeline.search(q.query)
            docs = ranking[q.id] = []
            for h in res.ranked:
                docno = trec_docno(chunk_unit(h.path, h.symbol, h.start_line, h.end_line))
                if docno in docs:
                    continue
                docs.append(docno)
                if h.start_line >= 1:
                    lines.setdefault(docno, (h.start_line, max(h.start_line, h.end_line)))
                if len(docs) >= depth:
                    break
            if n % 50 == 0 or n == len(queries):
                print(f"  rag:{mode}: {n}/{len(queries)} queries ranked", file=sys.stderr)
        out.append(RunSource(id=f"rag:{mode}", label=f"rag {mode}", ranking=ranking,
                             corpus_root=str(Path(corpus_root).resolve()), lines=lines))
    return out
