"""The ledger's pictures: per row, per sweep, for the report and the notebook.

Every function here builds a :class:`matplotlib.figure.Figure` with matplotlib's object API
(no pyplot, no global backend): a notebook displays the returned figure inline with its own
backend, and :func:`save_png` renders it to a PNG with the Agg canvas — the only place a
backend is chosen. Nothing here reads MLflow except :func:`write_report_figures`.

Per row (:func:`row_figures`, logged by ``rag.app.run`` as artifacts):

* ``figures/score_histograms.png``: per abstention signal, the scores of positives against
  negatives, with the thresholds the calibration chose (weak, drop) and, for the signal in
  force, the thresholds the row applied;
* ``figures/risk_coverage.png``: each signal's risk–coverage curve (Geifman & El-Yaniv,
  "Selective classification for deep neural networks", NeurIPS 2017; AURC as in
  rag.eval.abstention).

Per sweep (:func:`sweep_figures`, logged on the sweep's parent run and embedded in the
report):

* ``figures/pareto.png``: MRR against p50 latency, one labelled point per row, the Pareto
  front (:func:`rag.ledger.frame.pareto_front`) joined;
* ``figures/rank_vs_baseline.png``: per job, each positive's first relevant rank against the
  baseline's (log scales; "not found" within the evaluation depth drawn past the last rank);
* ``figures/delta_mrr.png``: each job's ΔMRR against the baseline with its 95% interval
  (paired randomization test, rag.eval.significance).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

ROW_FIGURES = ("figures/score_histograms.png", "figures/risk_coverage.png")
SWEEP_FIGURES = ("figures/pareto.png", "figures/rank_vs_baseline.png", "figures/delta_mrr.png")
# what each figure is called in the report
TITLES = {"figures/score_histograms.png": "Scores of positives and negatives",
          "figures/risk_coverage.png": "Risk–coverage",
          "figures/pareto.png": "MRR against p50 latency",
          "figures/rank_vs_baseline.png": "First relevant rank against the baseline",
          "figures/delta_mrr.png": "ΔMRR against the baseline"}
DPI = 90


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save_png(fig: Any, path: Path) -> Path:
    """Render ``fig`` to the PNG ``path`` (parents created) with the Agg canvas; returns
    ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    import os
    import tempfile

    FigureCanvasAgg(fig)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # written under a temporary name, then renamed: parallel sweep jobs refresh the report's
    # figures at the same time, and none may read half a file
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png")
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, dpi=DPI, format="png")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _frame(per_query: pd.DataFrame | Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    return per_query if isinstance(per_query, pd.DataFrame) else pd.DataFrame(list(per_query))


def _values(frame: pd.DataFrame, kind: str, column: str) -> np.ndarray:
    if column not in frame.columns:
        return np.asarray([], dtype=float)
    col = pd.to_numeric(frame.loc[frame["kind"] == kind, column], errors="coerce")
    return col.dropna().to_numpy(dtype=float)


def score_histograms(per_query: pd.DataFrame | Sequence[Mapping[str, Any]],
                     calibration: Mapping[str, Any], *,
                     in_force: tuple[str, float | None, float | None] | None = None) -> Any:
    """Per abstention signal, histograms of positives' and negatives' scores (20 shared bins)
    with the calibration's chosen weak (dashed) and drop (dotted) thresholds.

    Args:
        per_query: the row's per-query table (``kind`` and one column per signal; the
            ``learned`` signal reads ``calibration["oof_learned"]``, positives first).
        calibration: the row's calibration (``calibration.json``: ``signals``).
        in_force: ``(signal, min, weak)``: the thresholds the row applied, drawn in red on
            that signal's panel (None: not drawn).

    Returns:
        a Figure with one panel per signal (a single note when there is none).
    """
    frame = _frame(per_query)
    signals = list((calibration or {}).get("signals", {}))
    cols = max(1, min(3, len(signals)))
    rows = max(1, math.ceil(len(signals) / cols))
    fig = _figure(5 * cols, 3.6 * rows)
    if not signals:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no abstention calibration in this row", ha="center", va="center")
        ax.set_axis_off()
        return fig
    n_pos = int((frame["kind"] == "positive").sum()) if "kind" in frame else 0
    for i, name in enumerate(signals):
        ax = fig.add_subplot(rows, cols, i + 1)
        c = calibration["signals"][name]
        if name == "learned":
            oof = np.asarray(calibration.get("oof_learned", []), dtype=float)
            pos, neg = oof[:n_pos], oof[n_pos:]
        else:
            pos, neg = _values(frame, "positive", name), _values(frame, "negative", name)
        both = np.concatenate([pos, neg])
        bins = np.histogram_bin_edges(both, bins=20) if both.size else 20
        ax.hist(pos, bins=bins, alpha=0.6, color="C0", label=f"positives ({pos.size})")
        ax.hist(neg, bins=bins, alpha=0.6, color="C1", label=f"negatives ({neg.size})")
        for key, style in (("weak", "--"), ("drop", ":")):
            t = (c.get(key) or {}).get("threshold")
            if t is not None:
                ax.axvline(t, color="k", linestyle=style, label=f"chosen {key} {t:.3g}")
        if in_force is not None and in_force[0] == name:
            for t, what, style in ((in_force[1], "min", ":"), (in_force[2], "weak", "--")):
                if t is not None:
                    ax.axvline(t, color="C3", linestyle=style, label=f"in force {what} {t:.3g}")
        ax.set_title(f"{name}: ROC AUC {c.get('auc', float('nan')):.3f}"
                     + ("  (overlap)" if c.get("overlap") else ""))
        ax.set_xlabel("score")
        ax.set_ylabel("queries")
        ax.legend(fontsize=7)
    return fig


def threshold_histogram(per_query: pd.DataFrame | Sequence[Mapping[str, Any]], column: str,
                        thresholds: Mapping[str, float | None], *, title: str = "") -> Any:
    """One signal's scores, positives against negatives (40 bins over [0, 1] when every score
    is there, else 20 over their range), with named threshold lines (``{"min_dense":
    0.45, "weak_dense": 0.55}``; None values are skipped)."""
    frame = _frame(per_query)
    pos, neg = _values(frame, "positive", column), _values(frame, "negative", column)
    both = np.concatenate([pos, neg])
    bins = (np.linspace(0, 1, 41) if both.size and both.min() >= 0 and both.max() <= 1
            else np.histogram_bin_edges(both, bins=20) if both.size else 20)
    fig = _figure(7.0, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    ax.hist(pos, bins=bins, alpha=0.6, color="C0", label=f"positives (n={pos.size})")
    ax.hist(neg, bins=bins, alpha=0.6, color="C1", label=f"negatives (n={neg.size})")
    for (name, value), style in zip(thresholds.items(), ("--", ":", "-.", "-")):
        if value is not None:
            ax.axvline(float(value), color="k", linestyle=style, label=f"{name} = {float(value):g}")
    ax.set_xlabel(column)
    ax.set_ylabel("queries")
    ax.set_title(title or f"{column}: positives against negatives")
    ax.legend(fontsize=8)
    return fig


def risk_coverage(calibration: Mapping[str, Any]) -> Any:
    """Every signal's risk–coverage curve (coverage = share of queries answered, risk = share
    of the answered that are wrong), labelled with its AURC (lower is better)."""
    fig = _figure(6.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    drawn = 0
    for name, c in (calibration or {}).get("signals", {}).items():
        pts = np.asarray(c.get("risk_coverage") or [], dtype=float)
        if pts.size:
            ax.plot(pts[:, 0], pts[:, 1], label=f"{name} (AURC {c.get('aurc', float('nan')):.3f})")
            drawn += 1
    ax.set_xlabel("coverage (share of queries answered)")
    ax.set_ylabel("risk (share of answered that are wrong)")
    ax.set_title("Risk–coverage per abstention signal")
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no abstention calibration in this row", ha="center",
                transform=ax.transAxes)
    return fig


def token_budget(curve: Sequence[Mapping[str, float]]) -> Any:
    """Recall and answer support against the token budget of the context (log2 axis), one
    point per budget of :data:`rag.eval.evaluate.TOKEN_CURVE_BUDGETS`."""
    fig = _figure(6.5, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    if not curve:
        ax.text(0.5, 0.5, "no token counts in this row", ha="center", transform=ax.transAxes)
        return fig
    b = [c["budget"] for c in curve]
    ax.plot(b, [c["recall"] for c in curve], marker="o", label="recall")
    ax.plot(b, [c["answer_support"] for c in curve], marker="s",
            label="answer support (any relevant unit)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(b, [f"{x:,}" for x in b], fontsize=8)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("context budget (embedder tokens; ranked chunks taken in order)")
    ax.set_ylabel(f"share, mean over {int(curve[0].get('queries', 0))} positives")
    ax.set_title("What a context budget buys")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def row_figures(per_query: pd.DataFrame | Sequence[Mapping[str, Any]],
                calibration: Mapping[str, Any], *,
                in_force: tuple[str, float | None, float | None] | None = None) -> dict[str, Any]:
    """The row's figures by artifact name (:data:`ROW_FIGURES`)."""
    return {ROW_FIGURES[0]: score_histograms(per_query, calibration, in_force=in_force),
            ROW_FIGURES[1]: risk_coverage(calibration)}


def pareto(frame: pd.DataFrame, *, cost: str = "latency_p50_ms", gain: str = "mrr",
           label: str = "label", title: str | None = None) -> Any:
    """``gain`` against ``cost`` (log scale when the costs span more than a factor of 10), one
    point per row, **every point labelled** with its ``label`` column, the Pareto front
    (:func:`rag.ledger.frame.pareto_front`) drawn as a line. Rows missing either value are
    left out (the title counts them)."""
    from rag.ledger.frame import pareto_front

    df = frame.copy()
    df[cost] = pd.to_numeric(df[cost], errors="coerce")
    df[gain] = pd.to_numeric(df[gain], errors="coerce")
    ok = df[[cost, gain]].notna().all(axis=1)
    missing = int((~ok).sum())
    df = df[ok].reset_index(drop=True)
    fig = _figure(7.5, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    if df.empty:
        ax.text(0.5, 0.5, f"no row has both {gain} and {cost}", ha="center", transform=ax.transAxes)
        return fig
    front = pareto_front(df, cost=cost, gain=gain)
    rest = df[~front]
    ax.scatter(rest[cost], rest[gain], color="0.55", label="dominated", zorder=2)
    line = df[front].sort_values(cost)
    ax.plot(line[cost], line[gain], "o-", color="C3", label="Pareto front", zorder=3)
    lo, hi = df[cost].min(), df[cost].max()
    if lo > 0 and hi / lo > 10:
        ax.set_xscale("log")
        ax.set_xlabel(f"{cost} (log scale)")
    else:
        ax.set_xlabel(cost)
    ax.set_ylabel(gain)
    ax.set_title((title or f"{gain} against {cost}, one point per row")
                 + (f" ({missing} without values left out)" if missing else ""))
    ax.legend(fontsize=8)
    label_points(fig, ax, df[cost].tolist(), df[gain].tolist(), [str(v) for v in df[label]])
    return fig


# label positions tried in turn, as (dx, dy) offsets in points from the point; a negative dx
# puts the label's right end there
_LABEL_OFFSETS = [(dx, dy) for dy in (4, -11, 14, -21, 24, -31, 34, -41) for dx in (5, -5)]


def label_points(fig: Any, ax: Any, xs: Sequence[float], ys: Sequence[float],
                 labels: Sequence[str], *, fontsize: float = 7) -> list[Any]:
    """Write ``labels[i]`` beside the point ``(xs[i], ys[i])`` of ``ax``, **every point
    labelled**, each label at the first offset of :data:`_LABEL_OFFSETS` where it overlaps no
    label placed before it and stays inside the axes (in display space, after the figure's
    layout); where none is free, the first. Returns the annotations, in input order."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.draw_without_rendering()  # constrained layout: axes at their final place
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    placed: list[Any] = []
    out: list[Any] = [None] * len(labels)
    for i in sorted(range(len(labels)), key=lambda k: (xs[k], ys[k])):
        best = None
        for dx, dy in _LABEL_OFFSETS:
            ann = ax.annotate(labels[i], (xs[i], ys[i]), xytext=(dx, dy),
                              textcoords="offset points", fontsize=fontsize,
                              ha="left" if dx > 0 else "right", va="bottom")
            box = ann.get_window_extent(renderer)
            free = (not any(box.overlaps(b) for b in placed) and box.x0 >= inside.x0
                    and box.x1 <= inside.x1 and box.y0 >= inside.y0 and box.y1 <= inside.y1)
            if free:
                if best is not None:
                    best[0].remove()
                best = (ann, box)
                break
            if best is None:
                best = (ann, box)
            else:
                ann.remove()
        out[i] = best[0]
        placed.append(best[1])
    return out


def _ranks(per_query: pd.DataFrame) -> pd.Series:
    pos = per_query[per_query["kind"] == "positive"] if "kind" in per_query else per_query
    if "query_id" in pos.columns:
        pos = pos.set_index(pos["query_id"].astype(str))
    return pd.to_numeric(pos["first_relevant_rank"], errors="coerce")


def rank_vs_baseline(baseline: pd.DataFrame, jobs: Mapping[str, pd.DataFrame], *,
                     depth: int | None = None, baseline_label: str = "baseline") -> Any:
    """Per job, each positive's first relevant rank (``first_relevant_rank`` of per_query.csv)
    against the baseline's, on the queries both share; a query with no relevant hit within
    the evaluation depth is drawn at ``depth + 1`` ("not found"). Points below the diagonal
    improved. Each panel's title counts better / same / worse.

    Args:
        baseline: the baseline row's per-query table.
        jobs: job label -> its per-query table.
        depth: the evaluation depth (default: the largest rank seen).
    """
    base = _ranks(baseline)
    tables = {k: _ranks(v) for k, v in jobs.items()}
    seen = [s.max() for s in (base, *tables.values()) if s.notna().any()]
    depth = int(depth or (max(seen) if seen else 10))
    missing = depth + 1
    n = max(1, len(tables))
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = _figure(4.2 * cols, 4.0 * rows)
    if not tables:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no job besides the baseline", ha="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    for i, (name, ranks) in enumerate(tables.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        common = base.index.intersection(ranks.index)
        x = base.loc[common].fillna(missing).to_numpy(dtype=float)
        y = ranks.loc[common].fillna(missing).to_numpy(dtype=float)
        better, worse = int((y < x).sum()), int((y > x).sum())
        rng = np.random.default_rng(0)  # a little jitter so identical ranks stay visible
        jx = x * np.exp(rng.uniform(-0.06, 0.06, x.size))
        jy = y * np.exp(rng.uniform(-0.06, 0.06, y.size))
        colors = np.where(y < x, "C2", np.where(y > x, "C3", "0.5"))
        ax.scatter(jx, jy, s=12, c=colors, alpha=0.7)
        ax.plot([1, missing], [1, missing], color="0.3", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = [t for t in (1, 2, 5, 10, 20, 50, 100) if t <= depth] + [missing]
        for set_ticks, set_labels in ((ax.set_xticks, ax.set_xticklabels),
                                      (ax.set_yticks, ax.set_yticklabels)):
            set_ticks(ticks)
            set_labels([str(t) for t in ticks[:-1]] + ["none"], fontsize=7)
        ax.set_xlabel(f"rank in {baseline_label}")
        ax.set_ylabel(f"rank in {name}" if len(name) < 40 else "rank in job")
        ax.set_title(f"{name}\n{better} better, {len(common) - better - worse} same, {worse} worse",
                     fontsize=8)
    return fig


def delta_mrr(jobs: Sequence[Mapping[str, Any]], *, metric: str = "mrr") -> Any:
    """Each job's Δ``metric`` against the baseline with its 95% interval; a job whose
    Holm-adjusted p is below 0.05 is drawn filled.

    Args:
        jobs: ``{"label", "<metric>_delta", "<metric>_ci_low", "<metric>_ci_high",
            "<metric>_p_holm"?}`` per job (short significance names,
            :func:`rag.ledger.metric_groups.baseline_values`).
    """
    have = [j for j in jobs if j.get(f"{metric}_delta") is not None]
    fig = _figure(7.0, 0.9 + 0.45 * max(1, len(have)))
    ax = fig.add_subplot(1, 1, 1)
    if not have:
        ax.text(0.5, 0.5, "no job was compared with a baseline", ha="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    for i, j in enumerate(have):
        d = float(j[f"{metric}_delta"])
        lo, hi = j.get(f"{metric}_ci_low"), j.get(f"{metric}_ci_high")
        p = j.get(f"{metric}_p_holm", j.get(f"{metric}_p"))
        sig = p is not None and p < 0.05
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [i, i], color="C0", linewidth=2)
        ax.plot([d], [i], "o", color="C0", markerfacecolor="C0" if sig else "white")
    ax.axvline(0, color="0.3", linewidth=0.8)
    ax.set_yticks(range(len(have)))
    ax.set_yticklabels([str(j.get("label", "?")) for j in have], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"Δ{metric} against the baseline (95% interval; filled: Holm p < 0.05)")
    return fig


def sweep_figures(rows: Sequence[Any], per_query: Mapping[str, pd.DataFrame]) -> dict[str, Any]:
    """The figures of one sweep id by artifact name (:data:`SWEEP_FIGURES`).

    Args:
        rows: the sweep's rows (:class:`rag.ledger.report.LedgerRow`: ``run_id``, ``tags``,
            ``metrics``, ``params``, ``run_name``).
        per_query: run id -> its per-query table, for the rank plot (rows without one are
            left out of it).
    """
    from rag.ledger.metric_groups import baseline_values

    label = {r.run_id: r.tags.get("sweep_job") or r.run_name or r.run_id[:8] for r in rows}
    frame = pd.DataFrame({"label": [label[r.run_id] for r in rows],
                          "mrr": [r.metrics.get("mrr") for r in rows],
                          "latency_p50_ms": [r.metrics.get("latency_p50_ms") for r in rows]})
    name = rows[0].tags.get("sweep_name", "sweep") if rows else "sweep"
    out = {SWEEP_FIGURES[0]: pareto(frame, title=f"Sweep {name}: MRR against p50 latency")}
    base = next((r for r in rows if r.tags.get("is_baseline") == "true"), None)
    jobs = {label[r.run_id]: per_query[r.run_id] for r in rows
            if r is not base and r.run_id in per_query}
    if base is not None and base.run_id in per_query:
        depth = base.params.get("eval.depth")
        out[SWEEP_FIGURES[1]] = rank_vs_baseline(
            per_query[base.run_id], jobs, baseline_label=f"baseline {label[base.run_id]}",
            depth=int(depth) if depth and str(depth).isdigit() else None)
    out[SWEEP_FIGURES[2]] = delta_mrr([{"label": label[r.run_id], **baseline_values(r.metrics)}
                                       for r in rows if r is not base])
    return out


def _stamp(parts: Iterable[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def write_report_figures(ledger: Any, rows: Sequence[Any], out_dir: Path, *,
                         parents: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Write the report's pictures under ``out_dir`` (``reports/figures``) and return, per
    run id (rows whose calibration block the report shows) and per sweep id, figure name ->
    path relative to ``out_dir.parent`` (the report's folder), for markdown links.

    A row's figures are its own artifacts (``figures/score_histograms.png``, or
    ``calibration.png`` for rows logged before), copied once (a row never changes). A sweep's
    figures are drawn from its rows (:func:`sweep_figures`) and redrawn only when its rows or
    its parent's status changed (a stamp file beside them). Never raises for one missing
    artifact: that figure is left out.
    """
    from rag.core.names import safe_component

    out: dict[str, dict[str, str]] = {}
    rel_root = out_dir.name
    by_exp: dict[str, list[Any]] = {}
    for r in rows:
        by_exp.setdefault(r.experiment, []).append(r)
    shown: list[Any] = []  # rows whose calibration block the report renders
    sweeps: dict[str, list[Any]] = {}
    for exp_rows in by_exp.values():
        single = [r for r in exp_rows if not r.tags.get("sweep_name")]
        if single:
            shown.append(max(single, key=lambda r: r.start_time_ms))
        for r in exp_rows:
            if r.tags.get("sweep_name"):
                sweeps.setdefault(r.tags.get("sweep_id", ""), []).append(r)
    for sid, srows in sweeps.items():
        base = next((r for r in srows if r.tags.get("is_baseline") == "true"), None)
        shown.append(base or max(srows, key=lambda r: r.start_time_ms))
    for r in shown:
        links = (_copy_artifacts(ledger, r.run_id, ROW_FIGURES, out_dir)
                 or _copy_artifacts(ledger, r.run_id, ("calibration.png",), out_dir))
        if links:
            out[r.run_id] = links
    for sid, srows in sweeps.items():
        folder = out_dir / safe_component(f"sweep-{sid}", what="sweep id", encode=True)
        stamp = _stamp([*sorted(r.run_id for r in srows), str((parents or {}).get(sid))])
        links = {}
        if (folder / ".stamp").is_file() and (folder / ".stamp").read_text() == stamp:
            links = {f"figures/{p.name}": f"{rel_root}/{folder.name}/{p.name}"
                     for p in sorted(folder.glob("*.png"))}
        else:
            tables = {}
            for r in srows:
                try:
                    tables[r.run_id] = per_query_frame_any(ledger.download_text(r.run_id,
                                                                                "per_query.csv"))
                except Exception:  # noqa: BLE001 - the rank plot goes without that row
                    continue
            for name, fig in sweep_figures(srows, tables).items():
                p = save_png(fig, folder / Path(name).name)
                links[name] = f"{rel_root}/{folder.name}/{p.name}"
            (folder / ".stamp").write_text(stamp)
        out[sid] = links
    return out


def _copy_artifacts(ledger: Any, run_id: str, names: Sequence[str],
                    out_dir: Path) -> dict[str, str]:
    """Copy a row's PNG artifacts to ``out_dir/<run id[:12]>/`` (once: a row never changes);
    name -> link relative to the report's folder, for those that exist."""
    links = {}
    for name in names:
        dest = out_dir / run_id[:12] / Path(name).name
        if not dest.is_file():
            data = ledger.download_bytes(run_id, name)
            if data is None:
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        links[name] = f"{out_dir.name}/{run_id[:12]}/{dest.name}"
    return links


def per_query_frame_any(csv_text: str) -> pd.DataFrame:
    """A per_query.csv artifact as a DataFrame (query ids as strings; empty cells NaN)."""
    import io

    return pd.read_csv(io.StringIO(csv_text), dtype={"query_id": str})
