"""A repository suite's tables (``+suite=semble``): one row per repository, grouped by
configuration, summarised as semble reports its benchmark and as rag decides with it.

For each configuration (a row's ``sweep_job`` without its ``dataset.repo=`` / ``corpus=``
part), :func:`suite_tables` gives:

* ``repos``: per repository (the ``dataset_repo`` tag, else ``corpus``) its language
  (``dataset_language``), number of queries and the value of every metric of
  :data:`METRICS`;
* ``macro``: the unweighted mean over repositories (semble's aggregate: benchmarks/
  baselines/ablations.py averages per-repository means) and ``micro``: the mean over all
  queries (each repository weighted by its ``n_positives``);
* ``languages``: per language, the macro mean over its repositories;
* ``categories``: per query tag (semble's ``category``), the macro mean over the
  repositories that have that category (``tag.<category>.<metric>``) and the micro mean over
  its queries (weighted by ``tag.<category>.n_queries``);
* with a baseline configuration (the sweep's baseline, or the first one) and two or more
  configurations, ``significance`` against it for the primary metric: a paired
  randomization test **across repositories** (per-repository values paired by repository)
  and, when per-query tables are given, **across queries** (paired by query id), each
  Holm-corrected across the configurations (rag/eval/significance.py; Smucker, Allan &
  Carterette, CIKM 2007).

Reference figures (published numbers of other systems on the same repositories) sit beside
the measured ones when the suite's dataset directory (the rows' ``dataset_path`` tag) holds a
``reference.csv``: rows keyed by its ``repo`` column, and every column whose values are all
numbers in [0, 1] taken as a figure of the primary metric (semble's: ``published_*`` and
``semble070_*_local``, see ``../shared/data/semble/README.md``); :func:`reference_figures`.

A mean over part of the repositories would mislead: ``macro`` / ``micro`` of a configuration
that lacks some repository are None and ``repos_with_rows`` says ``k/n``. For a reference
column that lacks some repository, the side-by-side table adds a row of every column's mean
over exactly the repositories that column has, named by them.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rag.eval.significance import compare_paired, holm

#: the metrics of the tables; the first is the primary one (significance, the headline)
METRICS = ("semble_ndcg_at_10", "semble_ndcg_at_5", "ndcg_at_10", "mrr", "recall_at_10")
_MEMBER_KEYS = ("dataset.repo=", "corpus=")


def member(row: Any) -> str:
    """The repository a suite row evaluated: its ``dataset_repo`` tag, else its corpus."""
    return str(row.tags.get("dataset_repo") or row.tags.get("corpus") or row.experiment)


def config_label(row: Any) -> str:
    """The configuration of a suite row: its ``sweep_job`` without the member part."""
    parts = [p for p in str(row.tags.get("sweep_job", "")).split()
             if not p.lstrip("+~").startswith(_MEMBER_KEYS)]
    return " ".join(parts) or "(defaults)"


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _weighted(pairs: Sequence[tuple[float, float]]) -> float | None:
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else None


def reference_figures(rows: Sequence[Any]) -> dict[str, dict[str, float]]:
    """``{column: {repo: value}}`` from ``reference.csv`` in the rows' ``dataset_path`` (the
    first row's that has one), the columns whose every non-empty value is a number in [0, 1]
    (an empty cell: no figure for that repository); {} when there is no such file or it cannot
    be read as CSV with a ``repo`` column."""
    import csv
    from pathlib import Path

    where = next((r.tags.get("dataset_path") for r in rows if r.tags.get("dataset_path")), None)
    path = Path(where) / "reference.csv" if where else None
    if path is None or not path.is_file():
        return {}
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            table = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error):
        return {}
    if not table or "repo" not in table[0]:
        return {}
    out: dict[str, dict[str, float]] = {}
    for col in table[0]:
        if col == "repo":
            continue
        try:  # an empty cell: no figure for that repository (shown as —)
            values = {r["repo"]: float(r[col]) for r in table if (r[col] or "").strip()}
        except (TypeError, ValueError):
            continue
        if values and all(0.0 <= v <= 1.0 for v in values.values()):
            out[col] = values
    return out


def suite_tables(rows: Sequence[Any], *, frames: Mapping[str, Any] | None = None,
                 baseline: str | None = None, metrics: Sequence[str] = METRICS,
                 seed: int = 0, reference: Mapping[str, Mapping[str, float]] | None = None
                 ) -> dict[str, Any]:
    """The suite's tables (module docstring).

    Args:
        rows: the suite's rows (anything with ``.tags``, ``.metrics``, ``.run_id``,
            ``.experiment``: :class:`rag.ledger.report.LedgerRow`).
        frames: run id -> that row's per-query table (a pandas DataFrame with ``query_id``
            and the metric columns) for the test across queries; None: not computed.
        baseline: the baseline configuration's label (:func:`config_label` form, e.g.
            ``search.mode=bm25``); None: the first configuration.
        metrics: metric names; the first is tested.
        reference: ``{column: {repo: value}}`` of the primary metric from elsewhere
            (:func:`reference_figures`), shown beside the measured values.

    Returns:
        ``{"metric", "members", "baseline", "reference", "configs": [{"config", "repos":
        {repo: {...}}, "macro", "micro", "languages", "categories", "repos_with_rows",
        "significance"?}]}``.
    """
    members = list(dict.fromkeys(member(r) for r in rows))
    groups: dict[str, list[Any]] = {}
    for r in rows:
        groups.setdefault(config_label(r), []).append(r)
    configs = []
    for label, grows in groups.items():
        repos: dict[str, dict[str, Any]] = {}
        for r in grows:
            vals = {m: float(r.metrics[m]) for m in metrics if m in r.metrics}
            cats = {}
            for k, v in r.metrics.items():
                if k.startswith("tag.") and k.endswith(".n_queries"):
                    tag = k[len("tag."):-len(".n_queries")]
                    cats[tag] = {"n": float(v), **{m: float(r.metrics[f"tag.{tag}.{m}"])
                                                   for m in metrics
                                                   if f"tag.{tag}.{m}" in r.metrics}}
            repos[member(r)] = {"language": r.tags.get("dataset_language", ""),
                                "n": float(r.metrics.get("n_positives", 0)),
                                "run_id": r.run_id, **vals, "categories": cats}
        complete = len(repos) == len(members)
        macro = {m: (_mean([v[m] for v in repos.values() if m in v]) if complete else None)
                 for m in metrics}
        micro = {m: (_weighted([(v[m], v["n"]) for v in repos.values() if m in v])
                     if complete else None) for m in metrics}
        languages: dict[str, dict[str, Any]] = {}
        for lang in dict.fromkeys(v["language"] for v in repos.values()):
            vs = [v for v in repos.values() if v["language"] == lang]
            languages[lang] = {"repos": len(vs), **{m: _mean([v[m] for v in vs if m in v])
                                                    for m in metrics}}
        categories: dict[str, dict[str, Any]] = {}
        for cat in dict.fromkeys(c for v in repos.values() for c in v["categories"]):
            cs = [v["categories"][cat] for v in repos.values() if cat in v["categories"]]
            categories[cat] = {"repos": len(cs), "queries": int(sum(c["n"] for c in cs)),
                               **{f"macro_{m}": _mean([c[m] for c in cs if m in c])
                                  for m in metrics},
                               **{f"micro_{m}": _weighted([(c[m], c["n"]) for c in cs if m in c])
                                  for m in metrics}}
        configs.append({"config": label, "repos": repos, "macro": macro, "micro": micro,
                        "languages": languages, "categories": categories,
                        "repos_with_rows": f"{len(repos)}/{len(members)}"})
    base = next((c for c in configs if c["config"] == baseline), configs[0] if configs else None)
    if base is not None and len(configs) > 1:
        _significance(configs, base, metrics[0], frames, seed)
    return {"metric": metrics[0], "members": members, "reference": dict(reference or {}),
            "baseline": base["config"] if base else None, "configs": configs}


def _significance(configs: list[dict[str, Any]], base: dict[str, Any], metric: str,
                  frames: Mapping[str, Any] | None, seed: int) -> None:
    """Paired tests of every configuration against ``base`` (in place): across repositories
    and, with ``frames``, across queries; Holm over the configurations, per test."""
    others = [c for c in configs if c is not base]
    for kind in ("repos", "queries"):
        tests = []
        for c in others:
            a, b = [], []
            if kind == "repos":
                for repo, v in c["repos"].items():
                    w = base["repos"].get(repo)
                    if w is not None and metric in v and metric in w:
                        a.append(w[metric])
                        b.append(v[metric])
            elif frames is not None:
                for repo, v in c["repos"].items():
                    w = base["repos"].get(repo)
                    fa = frames.get(w["run_id"]) if w else None
                    fb = frames.get(v["run_id"])
                    if fa is None or fb is None or metric not in fa or metric not in fb:
                        continue
                    left = fa.dropna(subset=[metric]).set_index("query_id")[metric]
                    right = fb.dropna(subset=[metric]).set_index("query_id")[metric]
                    common = [q for q in left.index if q in right.index]
                    a += [float(left[q]) for q in common]
                    b += [float(right[q]) for q in common]
            tests.append(compare_paired(a, b, seed=seed) if a else None)
        ps = holm([t.p_value for t in tests if t is not None])
        it = iter(ps)
        for c, t in zip(others, tests):
            if t is None:
                continue
            c.setdefault("significance", {})[kind] = {
                "n": t.n, "delta": t.delta, "ci_low": t.ci_low, "ci_high": t.ci_high,
                "p": t.p_value, "p_holm": next(it)}


def _f(v: Any) -> str:
    return "—" if v is None else f"{v:.3f}"


def _side_by_side(tables: dict[str, Any]) -> list[str]:
    """One table: per repository the primary metric of every configuration, then the
    reference figures; the macro mean of each column over the suite's repositories, and for
    each reference column that lacks some repository, every column's macro mean over the
    repositories that column has (a row named by them)."""
    m, configs, ref = tables["metric"], tables["configs"], tables.get("reference") or {}
    members = tables["members"]
    if len(configs) < 2 and not ref:
        return []
    lang = {repo: v["language"] for c in configs for repo, v in c["repos"].items()}
    head = [f"`{c['config']}`" for c in configs] + [f"{col} (reference.csv)" for col in ref]
    out = [f"{m} per repository, every configuration"
           + (" beside the reference figures" if ref else "") + ":", "",
           "| repository | language | " + " | ".join(head) + " |",
           "|---|---|" + "---|" * len(head)]
    for repo in members:
        cells = [_f(c["repos"].get(repo, {}).get(m)) for c in configs]
        cells += [_f(ref[col].get(repo)) for col in ref]
        out.append(f"| {repo} | {lang.get(repo, '')} | " + " | ".join(cells) + " |")
    macro = [_f(c["macro"].get(m)) for c in configs]
    macro += [_f(_mean([ref[col][r] for r in members if r in ref[col]])
                 if all(r in ref[col] for r in members) else None) for col in ref]
    out.append(f"| **macro** | | " + " | ".join(macro) + " |")
    # a reference column without some repository has no macro above; beside it, every column's
    # mean over exactly the repositories it has, so the comparison is over the same ones
    subsets: dict[tuple[str, ...], list[str]] = {}
    for col in ref:
        have = tuple(r for r in members if r in ref[col])
        if 1 < len(have) < len(members):
            subsets.setdefault(have, []).append(col)
    for have, cols in subsets.items():
        cells = [_f(_mean([c["repos"][r][m] for r in have])
                    if all(m in c["repos"].get(r, {}) for r in have) else None) for c in configs]
        cells += [_f(_mean([ref[col][r] for r in have]) if all(r in ref[col] for r in have)
                     else None) for col in ref]
        left = [r for r in members if r not in have]
        out.append(f"| **macro, the {len(have)} with {', '.join(cols)}** (without "
                   f"{', '.join(left)}) | | " + " | ".join(cells) + " |")
    out.append("")
    return out


def render_suite_tables(tables: dict[str, Any]) -> list[str]:
    """Markdown lines: the configurations' macro and micro means (with significance), then
    per configuration its per-repository, per-language and per-category tables."""
    m = tables["metric"]
    out = [f"Primary metric `{m}`; macro = the unweighted mean over repositories (semble's "
           "aggregate), micro = the mean over queries. Δ against the baseline configuration "
           f"`{tables['baseline']}`, paired randomization test across repositories and across "
           "queries, Holm-corrected across configurations (* p < 0.05).", ""]
    out += ["| configuration | repos | macro " + m + " | micro " + m
            + " | Δ macro (p Holm, repos) | Δ micro (p Holm, queries) |", "|---|---|---|---|---|---|"]
    for c in tables["configs"]:
        sig = c.get("significance", {})

        def cell(kind: str) -> str:
            s = sig.get(kind)
            if s is None:
                return "—"
            star = "*" if s["p_holm"] < 0.05 else ""
            return f"{s['delta']:+.3f} (p {s['p_holm']:.3f}{star})"

        out.append(f"| `{c['config']}` | {c['repos_with_rows']} | {_f(c['macro'].get(m))} | "
                   f"{_f(c['micro'].get(m))} | {cell('repos')} | {cell('queries')} |")
    out.append("")
    out += _side_by_side(tables)
    for c in tables["configs"]:
        metrics = [k for k in METRICS if any(k in v for v in c["repos"].values())]
        out += [f"### `{c['config']}`", "", "| repository | language | queries | "
                + " | ".join(metrics) + " |", "|---|---|---|" + "---|" * len(metrics)]
        for repo, v in c["repos"].items():
            out.append(f"| {repo} | {v['language']} | {int(v['n'])} | "
                       + " | ".join(_f(v.get(k)) for k in metrics) + " |")
        out.append(f"| **macro** | | | " + " | ".join(_f(c["macro"].get(k)) for k in metrics)
                   + " |")
        out.append(f"| **micro** | | {int(sum(v['n'] for v in c['repos'].values()))} | "
                   + " | ".join(_f(c["micro"].get(k)) for k in metrics) + " |")
        out += ["", "| language | repos | " + " | ".join(metrics) + " |",
                "|---|---|" + "---|" * len(metrics)]
        for lang, v in c["languages"].items():
            out.append(f"| {lang} | {v['repos']} | " + " | ".join(_f(v.get(k)) for k in metrics)
                       + " |")
        out += ["", f"| category | repos | queries | macro {m} | micro {m} |",
                "|---|---|---|---|---|"]
        for cat, v in c["categories"].items():
            out.append(f"| {cat} | {v['repos']} | {v['queries']} | {_f(v.get('macro_' + m))} | "
                       f"{_f(v.get('micro_' + m))} |")
        out.append("")
    return out
