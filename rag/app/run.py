"""``python -m rag.run``: index the corpus, evaluate the golden and negative sets, log one
ledger row to MLflow and refresh reports/ledger.md.

Every flag is a Hydra key: ``python -m rag.run search.mode=bm25 search.top_k=5``.
``python -m rag.run --help`` lists the config groups; ``--cfg job`` prints the config.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import sys
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

import hydra
from omegaconf import DictConfig, ListConfig, OmegaConf

from rag.app.config import (expand_path, ledger_uri, output_path, project_root, register_configs,
                        to_container, validate)
from rag.corpus.fetch import corpus_root  # noqa: F401 - re-exported (it lived here)
from rag.core.errors import RunError  # re-exported: entry points import it from here
from rag.eval.transfer import abstention_setup  # noqa: F401 - re-exported (it lived here)
from rag.app.stages import STAGES, StageCache

log = logging.getLogger("rag.run")
register_configs()


def check_golden_corpus(golden_dir: Path, corpus_name: str, *, allow_mismatch: bool,
                        advice: str | None = None) -> None:
    """Refuse, in one line and before any label is checked against the corpus, a golden set
    whose ``corpus:`` field names another corpus than the one being evaluated.

    Raises:
        RunError: the field names another corpus (and ``allow_mismatch`` is false), or the
            golden directory has no queries file.
    """
    import yaml

    from rag.eval.golden import QUERIES_FILE

    qfile = golden_dir / QUERIES_FILE
    if not qfile.is_file():
        raise RunError(f"eval.golden_dir={str(golden_dir)!r}: no {QUERIES_FILE} there "
                       "(point eval.golden_dir at the labels for this corpus)")
    try:
        data = yaml.safe_load(qfile.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return  # load_golden reports the syntax error with its line
    labelled = data.get("corpus") if isinstance(data, dict) else None
    if labelled and str(labelled) != corpus_name and not allow_mismatch:
        raise RunError(f"{qfile} labels corpus {str(labelled)!r} but this run evaluates corpus "
                       f"{corpus_name!r}: " + (advice or (
                           f"pass eval.golden_dir=<labels for {corpus_name}> (or "
                           "corpus.name=..., or eval.allow_corpus_mismatch=true to accept it)")))


def golden_dir_for(cfg: DictConfig) -> Path:
    """``eval.golden_dir`` made absolute (from the project root), with one fallback for a run
    of another corpus (``corpus.path``, ``corpus.sdist``, ``corpus.npm``): when
    ``eval.golden_dir`` was not set (it is still its default,
    ``${corpus.golden_dir}``, e.g. the default corpus group's ``golden/flask``) and the labels
    there are missing or name another corpus (the run would be refused), ``golden/<corpus.name>``
    under the project root is used if it holds a ``queries.yaml`` whose ``corpus:`` is this
    corpus or unset -- where ``rag golden init --path DIR`` writes them. So
    ``python -m rag.run corpus.path=DIR`` finds ``golden/<DIR's name>/`` and
    ``"corpus.sdist='marshmallow==4.4.0'"`` finds ``golden/marshmallow-4.4.0/``; labels that
    would be accepted are never replaced, and an explicit ``eval.golden_dir`` or a dataset's
    own labels (``dataset=beir|trec|semble``) always win."""
    configured = expand_path(cfg.eval.golden_dir, base=project_root()) if cfg.eval.golden_dir else None
    raw = OmegaConf.to_container(cfg.eval, resolve=False).get("golden_dir")
    fmt = OmegaConf.select(cfg, "dataset.format")
    if raw != "${corpus.golden_dir}" or str(getattr(fmt, "value", fmt) or "none") != "none":
        return configured  # an explicit golden_dir, or a dataset's own converted labels
    name = str(cfg.corpus.name)
    if configured is not None and (not configured.exists()
                                   or _labelled_corpus(configured) in (None, name)):
        return configured  # labels it accepts, or a folder not made yet (the run says so)
    own = project_root() / "golden" / name
    if (own / "queries.yaml").is_file() and _labelled_corpus(own) in (None, name):
        print(f"eval.golden_dir: {own} (the labels of corpus {name!r}; {configured} labels "
              "another corpus)", file=sys.stderr)
        return own
    return configured


def _labelled_corpus(golden_dir: Path) -> str | None:
    """The ``corpus:`` field of ``golden_dir``'s queries.yaml; None when it has none, and
    ``""`` when there is no readable queries.yaml (never equal to a corpus name)."""
    import yaml

    try:
        data = yaml.safe_load((golden_dir / "queries.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return ""
    labelled = data.get("corpus") if isinstance(data, dict) else None
    return None if labelled is None else str(labelled)


def run_inputs(cfg: DictConfig) -> tuple[Path, Path, dict[str, str]]:
    """(corpus root, golden directory, ledger tags) of a run: ``corpus`` and
    ``eval.golden_dir``, or what a ``dataset=beir|trec`` group converts into the cache
    (rag/datasets/common.py; BEIR brings its corpus, TREC labels the configured one), with
    ``dataset_*`` tags naming it.

    Raises:
        RunError: the corpus cannot be had, or a dataset file is missing or malformed
            (``file:line: ...``).
    """
    from rag.datasets.common import DatasetError, prepare_dataset

    try:
        prepared = prepare_dataset(cfg, lambda: corpus_root(cfg))
    except DatasetError as exc:
        raise RunError(str(exc)) from None
    except OSError as exc:
        raise RunError(f"dataset: {exc}") from None
    if prepared is None:
        golden = golden_dir_for(cfg)
        configured = expand_path(cfg.eval.golden_dir, base=project_root()) \
            if cfg.eval.golden_dir else None
        if golden is not None and golden != configured:
            # the fallback found this corpus's own labels: the row's params and config.yaml
            # name the labels it was scored on, not the default corpus's
            cfg.eval.golden_dir = str(golden)
            cfg.corpus.golden_dir = str(golden)
        return corpus_root(cfg), golden, {}
    print(prepared.summary(), file=sys.stderr)
    # what the dataset says of its corpus's walk (BEIR: every document)
    for key, value in prepared.corpus_settings.items():
        cfg.corpus[key] = value
    root = prepared.corpus_root or corpus_root(cfg)
    extra = dataset_search_overrides(cfg)
    if prepared.corpus_root is not None and extra:
        print(f"  to rank it as this row does: rag search QUERY -r {prepared.corpus_root} "
              + " ".join(extra), file=sys.stderr)
    return root, prepared.golden_dir, prepared.tags


def dataset_search_overrides(cfg: DictConfig) -> list[str]:
    """``KEY=VALUE`` for every key the dataset's config group (conf/dataset/<format>.yaml)
    sets beyond ``dataset.*``, with this run's value: what ``rag search -r`` on the dataset's
    corpus needs to rank as the row did (semble: ``corpus.content=code
    ranking.file_saturation=0.5``). Empty when the group sets nothing else (a group file
    without ``# @package _global_`` sets ``dataset.*`` only) or has no file."""
    fmt = OmegaConf.select(cfg, "dataset.format")
    fmt = getattr(fmt, "value", fmt)  # the schema's enum
    path = project_root() / "conf" / "dataset" / f"{fmt}.yaml"
    if not fmt or not path.is_file():
        return []
    if "# @package _global_" not in path.read_text(encoding="utf-8"):
        return []  # a group file in its own package sets dataset.* only
    group = OmegaConf.to_container(OmegaConf.load(path), resolve=False)

    def keys(node: Any, prefix: str) -> list[str]:
        if not isinstance(node, dict):
            return [prefix]
        return [k for name, v in node.items() if not str(name).startswith("defaults")
                for k in keys(v, f"{prefix}.{name}" if prefix else str(name))]

    out = []
    for key in keys({k: v for k, v in group.items() if k not in ("dataset", "defaults")}, ""):
        value = OmegaConf.select(cfg, key)
        value = getattr(value, "value", value)
        out.append(f"{key}={json.dumps(value) if isinstance(value, str) and not value.isidentifier() else value}")
    return out


def per_query_csv(rows: list[dict[str, Any]]) -> str:
    """The per-query table as CSV (union of columns, in first-seen order)."""
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def print_row(run_id: str | None, cfg: DictConfig, metrics: dict[str, float],
              stats: dict[str, Any], calibration: dict[str, Any] | None = None,
              abstention: dict[str, str] | None = None, out=None) -> None:
    """Print the ledger row just added: flags, the ranking half (before abstention), the
    returned half (after abstention), the abstention calibration, latency and index stats."""
    out = out or sys.stdout
    ks = list(cfg.eval.recall_ks)
    mode = getattr(cfg.search.mode, "value", cfg.search.mode)
    prose = getattr(cfg.search.prose_mode, "value", cfg.search.prose_mode)
    p = lambda k: metrics.get(k, float("nan"))  # noqa: E731
    abstention = abstention or {}

    def ms(k: str, digits: int = 1) -> str:
        v = metrics.get(k)
        return "n/a" if v is None else f"{v:.{digits}f}"

    print(f"\nledger row {run_id or '(tracking disabled: not logged)'}", file=out)
    kind = str(cfg.retriever.kind)
    if kind != "pipeline":  # another retriever: rag's own stage flags do not apply to it
        print(f"  corpus {cfg.corpus.name}  retriever={kind}"
              + (f" mode={cfg.retriever.mode}" if cfg.retriever.mode else "")
              + f" top_k={cfg.search.top_k} (rag's pipeline flags are not used; its index "
              "only checks the labels)", file=out)
    else:
        content = str(getattr(cfg.corpus.content, "value", cfg.corpus.content))
        saturation = float(cfg.ranking.file_saturation) if cfg.ranking.enabled else 1.0
        print(f"  corpus {cfg.corpus.name}"
              + (f" (content={content})" if content != "all" else "")
              + f"  mode={mode} prose_mode={prose} "
              f"top_k={cfg.search.top_k} fusion={cfg.fusion.method}"
              + (f" rrf_k={cfg.fusion.rrf_k} " if cfg.fusion.method == "rrf" else
                 f" norm={cfg.fusion.norm} ")
              + ("ranking=off " if not cfg.ranking.enabled else
                 f"file_saturation={saturation:g} " if saturation < 1 else "")
              + f"rerank={getattr(cfg.rerank.kind, 'value', cfg.rerank.kind) if cfg.rerank.enabled else 'off'} "
              f"abstain={abstention_text(abstention, cfg, mode)} "
              f"({abstention.get('abstain_thresholds_source', 'config')}"
              + (f" from {abstention['abstain_calibration_from']}"
                 if abstention.get("abstain_calibration_from") else "") + ")", file=out)
    print(f"  positives {int(p('n_positives'))}  negatives {int(p('n_negatives'))}", file=out)
    if metrics.get("failed_queries") or metrics.get("missing_queries"):
        print(f"  UNANSWERED: {int(metrics.get('failed_queries', 0))} queries failed at the "
              f"retriever, {int(metrics.get('missing_queries', 0))} missing from the run file; "
              "each scores 0 (reasons in per_query.csv)", file=out)
    def na(k: str) -> str:  # a slice the golden set does not have (no such tag): n/a
        v = metrics.get(k)
        return "n/a" if v is None or v != v else f"{v:.3f}"

    print(f"  ranking (before abstention, to depth {cfg.eval.depth}; ranks count units, a "
          "file's unlabelled chunks once — golden/README.md, the unit rule — so Recall@k can "
          "reach past the top_k chunks returned):", file=out)
    print("    " + "  ".join(f"Recall@{k} {p(f'recall_at_{k}'):.3f}" for k in ks), file=out)
    print("    " + "  ".join(f"hit@{k} {p(f'hit_at_{k}'):.3f}" for k in ks), file=out)
    print(f"    MRR {p('mrr'):.3f}  nDCG@{cfg.eval.ndcg_k} {p(f'ndcg_at_{cfg.eval.ndcg_k}'):.3f}  "
          f"prose Recall@8 {na('tag.prose.recall_at_8')}  symbol MRR {na('tag.symbol.mrr')}  "
          f"candidate pool recall (first-stage top {cfg.rerank.candidates} chunks) "
          + (f"{metrics['candidate_pool_recall']:.3f}" if "candidate_pool_recall" in metrics
             else "n/a"), file=out)
    if "semble_ndcg_at_10" in metrics:  # the chunk list as returned (rag/eval/chunk_metrics.py)
        print(f"    semble NDCG@10 {p('semble_ndcg_at_10'):.3f}  NDCG@5 {p('semble_ndcg_at_5'):.3f}  "
              "(top chunks as returned, semble's rule)", file=out)
    print(f"    judged@{cfg.search.top_k} {p(f'judged_at_{cfg.search.top_k}'):.3f}  judged@10 {p('judged_at_10'):.3f}  (share of the top k units with a relevance judgement; min_overlap {cfg.eval.get('min_overlap', 0.0):g})", file=out)  # noqa: E501
    from rag.eval.evaluate import TOKEN_BUDGETS

    if all(f"token_recall_at_{b}" in metrics for b in TOKEN_BUDGETS):
        print("    at a context budget (chunks in rank order, the embedder's tokens): recall "
              + " / ".join(f"{p(f'token_recall_at_{b}'):.3f}" for b in TOKEN_BUDGETS)
              + "  answer support " + " / ".join(f"{p(f'token_support_at_{b}'):.3f}"
                                                  for b in TOKEN_BUDGETS)
              + "  at " + " / ".join(f"{b:,}" for b in TOKEN_BUDGETS) + " tokens", file=out)
    if "bpref" in metrics:
        print(f"    bpref {p('bpref'):.3f}  condensed nDCG@10 {p('condensed_ndcg_at_10'):.3f}  condensed MRR {p('condensed_mrr'):.3f}  (unjudged units ignored: Buckley & Voorhees 2004, Sakai 2007)", file=out)  # noqa: E501
    print(f"  returned (after abstention, the top_k = {cfg.search.top_k} chunks):", file=out)
    print(f"    answer_support_rate {p('answer_support_rate'):.3f}  dropped_rate "
          f"{p('dropped_rate'):.3f}  false_weak_rate {p('false_weak_rate'):.3f}  abstain_rate "
          f"(negatives) " + (f"{metrics['abstain_rate']:.3f}" if "abstain_rate" in metrics
                             else "n/a (no negatives)"), file=out)
    gates = sorted({k.split("/")[1] for k in metrics if k.startswith("rerank_gate/")}, key=float)
    if gates:
        print("  rerank gate (evaluated, not applied): " + "  ".join(
            f"< {t}: abstain {p(f'rerank_gate/{t}/abstain_rate'):.3f} false_weak "
            f"{p(f'rerank_gate/{t}/false_weak_rate'):.3f}" for t in gates), file=out)
    print(f"  latency p50 {ms('latency_p50_ms')} ms  p95 {ms('latency_p95_ms')} ms over all "
          f"queries; per stage, over the queries that ran it: embed_query p50 "
          f"{ms('latency_embed_query_p50_ms')}, dense {ms('latency_dense_p50_ms', 2)}, bm25 "
          f"{ms('latency_bm25_p50_ms', 2)}, fusion {ms('latency_fusion_p50_ms', 3)}, rerank "
          f"{ms('latency_rerank_p50_ms')}", file=out)
    for line in calibration_lines(calibration or {}):
        print("  " + line, file=out)
    how = ("reused in this process" if stats.get("index_reused")
           else "chunks loaded from the chunk store, no file read" if not stats.get("corpus_read")
           else "corpus read and chunked")
    from rag.app.stages import category_lengths

    lengths = category_lengths(cfg)
    cut = (f"{cfg.embedder.max_seq_length} (" + ", ".join(f"{k} {v}" for k, v in lengths.items())
           + ")" if lengths else f"{cfg.embedder.max_seq_length}")
    print(f"  index ({how}): {stats.get('files_indexed')} files, {stats.get('chunks')} chunks, "
          f"chunks embedded: {stats.get('chunks_embedded')}, from cache: "
          f"{stats.get('chunks_from_cache')}, truncated at {cut} "
          f"word pieces: " + (f"{stats['chunks_truncated']} "
                              f"({100 * stats.get('chunks_truncated_share', 0):.1f}%)"
                              if stats.get("chunks_truncated") is not None
                              else "n/a (no dense channel in this run)"), file=out)
    skipped = {k[len('files_skipped_'):]: v for k, v in stats.items()
               if k.startswith("files_skipped_") and v}
    print(f"  files skipped: {skipped or 'none'}", file=out)
    from rag.corpus.walk import describe_redactions

    if (redacted := describe_redactions(stats)) is not None:
        print(f"  {redacted}", file=out)
    from rag.corpus.languages import describe_languages

    if (langs := describe_languages(stats)) is not None:
        print(f"  {langs}", file=out)


#: the row's token-budget curve: its table and its figure (artifacts)
TOKEN_BUDGET_CSV, TOKEN_BUDGET_FIGURE = "token_budget.csv", "figures/token_budget.png"


def _gate_features(tags: dict[str, Any]) -> list[str] | None:
    """The learned gate's features as the row's ``abstain_gate_features`` tag names them
    (comma-separated); None when the tag is absent (an older row: read as reading dense)."""
    raw = tags.get("abstain_gate_features")
    return [f.strip() for f in str(raw).split(",") if f.strip()] if raw else None


def abstention_text(tags: dict[str, Any], cfg: DictConfig, mode: str) -> str:
    """What the row's abstention reads and where it cuts, in words: ``learned gate P(answerable)
    from top_dense, term_coverage: dropped < 0.5269, weak < 0.9009``, or ``top dense cosine:
    dropped < 0.3094, weak < 0.4067``; ``(never acts: ...)`` for a BM25-only mode, whose
    route runs no dense channel."""
    signal = tags.get("abstain_signal", "top_dense")
    lo = tags.get("abstain_min", cfg.abstain.min_dense)
    hi = tags.get("abstain_weak", cfg.abstain.weak_dense)
    what = (f"learned gate P(answerable) from {tags['abstain_gate_features'].replace(',', ', ')}"
            if signal == "learned" and tags.get("abstain_gate_features") else
            "learned gate P(answerable)" if signal == "learned" else "top dense cosine")
    text = f"{what}: dropped < {lo}, weak < {hi}"
    from rag.search.abstain import never_acts

    if never_acts(mode, _gate_features(tags) if signal == "learned" else None):
        text += f" (never acts: search.mode={mode} runs no dense channel)"
    return text


def calibration_lines(cal: dict[str, Any]) -> list[str]:
    """The abstention calibration as printable lines: the rule and target, then per signal its
    AUC, overlap, chosen threshold and achieved rates with 95% CIs, or a plain statement that
    no threshold meets the target."""
    if not cal.get("signals"):
        return [f"abstention calibration: {cal.get('message', 'not measured')}"]
    lines = [f"abstention calibration (rule: {cal['rule']}, target {cal['target_false_weak']:g}; "
             f"drop floor target {cal['target_dropped']:g}):"]
    for name, c in cal["signals"].items():
        w = c["weak"]
        where = "" if name != "learned" else " [out-of-fold]"
        head = (f"  {name:17} AUC {c['auc']:.3f}  overlap {'yes' if c['overlap'] else 'no '}  ")
        if c["met_target"]:
            lines.append(head + f"weak < {w['threshold']:.4g}: abstain {w['abstain_rate']:.3f} "
                         f"[{w['abstain_ci'][0]:.2f}, {w['abstain_ci'][1]:.2f}]  false_weak "
                         f"{w['false_weak_rate']:.3f} [{w['false_weak_ci'][0]:.2f}, "
                         f"{w['false_weak_ci'][1]:.2f}]" + where)
        else:
            lines.append(head + c["message"] + where)
    if cal.get("overlap") is not None:
        lines.append(f"  top_dense overlap: {'yes' if cal['overlap'] else 'no'} (positive_min "
                     f"{cal['positive_min_top_dense']:.3f}, negative_max "
                     f"{cal['negative_max_top_dense']:.3f}); suggested min_dense "
                     f"{_fmt(cal.get('suggested_min_dense'))} weak_dense "
                     f"{_fmt(cal.get('suggested_weak_dense'))}")
    dense = cal["signals"].get("top_dense", {})
    cv_weak = (dense.get("weak") or {}).get("cross_validated")
    cv_drop = (dense.get("drop") or {}).get("cross_validated")
    if cv_weak:
        t = cv_weak["threshold_median"]
        lines.append(
            f"  top_dense, this row's own calibration {cv_weak['folds']}-fold cross-validated "
            f"(each fold's thresholds chosen on the others): weak < {_fmt(t)}: abstain "
            f"{cv_weak['abstain_rate']:.3f} [{cv_weak['abstain_ci'][0]:.2f}, "
            f"{cv_weak['abstain_ci'][1]:.2f}]  false_weak {cv_weak['false_weak_rate']:.3f} "
            f"[{cv_weak['false_weak_ci'][0]:.2f}, {cv_weak['false_weak_ci'][1]:.2f}]"
            + (f"; drop < {_fmt(cv_drop['threshold_median'])}: dropped "
               f"{cv_drop['false_weak_rate']:.3f}" if cv_drop else ""))
    return lines


def _fmt(v: float | None) -> str:
    return "none (drop nothing)" if v is None else f"{v:.3f}"


def _sweep_context() -> dict[str, Any]:
    """This job's view of its multirun: overrides, sweep dir, launcher, and sweep.json."""
    from rag.ledger.sweep import read_sweep_file

    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ValueError, ImportError):
        return {}
    if hc.mode != RunMode.MULTIRUN:
        return {"overrides": list(hc.overrides.task)}
    sweep_dir = Path(str(hc.sweep.dir))
    return {"overrides": list(hc.overrides.task), "sweep_dir": sweep_dir, "job_num": hc.job.num,
            "file": read_sweep_file(sweep_dir)}


def sweep_tags(cfg: DictConfig, ctx: dict[str, Any] | None = None) -> dict[str, str]:
    """Tags that line the jobs of one sweep up in MLflow: sweep name and id, the parent run,
    the baseline's overrides, this job's label (its values of the keys that vary), the label
    of its baseline, and whether it is the baseline.

    The sweep id and parent run come from the sweep.json that
    :class:`rag.app.sweep_callback.SweepCallback` wrote into the multirun directory; a job run
    outside a multirun gets a fresh ``<name>-adhoc-...`` id of its own.
    """
    from rag.app.config import sweep_name
    from rag.ledger.sweep import baseline_label, job_label, new_sweep_id

    name = sweep_name(cfg)
    if not name:
        return {}
    ctx = ctx if ctx is not None else _sweep_context()
    info = ctx.get("file") or {}
    overrides = ctx.get("overrides", [])
    varying = set(info.get("varying", []))
    tags = {"sweep_name": name, "sweep_baseline": str(cfg.sweep.baseline or ""),
            "sweep_id": info.get("sweep_id") or new_sweep_id(f"{name}-adhoc")}
    if cfg.suite.name:
        tags["suite"] = str(cfg.suite.name)
    # a suite has one parent run per corpus experiment
    parents = info.get("parent_run_ids") or {}
    from rag.app.config import experiment_name

    parent = (parents.get(str(cfg.corpus.name)) or parents.get(experiment_name(cfg))
              or info.get("parent_run_id"))
    if parent:
        tags["mlflow.parentRunId"] = parent
    if "job_num" in ctx:
        tags["sweep_job_num"] = str(ctx["job_num"])
    tags["sweep_job"] = job_label(overrides, varying)
    tags["sweep_baseline_job"] = baseline_label(overrides, varying, str(cfg.sweep.baseline or ""))
    # the baseline is the job whose own values are the baseline's: a label match alone is not
    # enough (with no varying keys known, every job's label is "(defaults)")
    tags["is_baseline"] = str(bool(cfg.sweep.baseline)
                              and tags["sweep_job"] == tags["sweep_baseline_job"]
                              and baseline_values_differ(cfg, overrides) is None).lower()
    return tags


def baseline_values_differ(cfg: DictConfig, overrides: list[str]) -> str | None:
    """Why this job is not its sweep's baseline (``sweep.baseline``, e.g.
    ``search.mode=dense``), judged on its own overrides and resolved config
    (:func:`rag.ledger.sweep.baseline_mismatch`), or None when its values are the baseline's."""
    from rag.ledger.mlflow_store import param_value
    from rag.ledger.sweep import baseline_mismatch

    params = {}
    for pair in str(cfg.sweep.baseline or "").split():
        key = pair.split("=", 1)[0].lstrip("+~")
        try:
            value = OmegaConf.select(cfg, key, default=None)
        except Exception:  # noqa: BLE001 - a key that does not resolve: nothing to compare
            continue
        if value is not None and not isinstance(value, (DictConfig, ListConfig)):
            params[key] = param_value(getattr(value, "value", value))
        elif isinstance(value, ListConfig):
            params[key] = param_value(OmegaConf.to_container(value, resolve=True))
    return baseline_mismatch({"hydra_overrides": json.dumps(list(overrides)),
                              "sweep_baseline": str(cfg.sweep.baseline or "")}, params)


def check_sweep_opened(cfg: DictConfig, ctx: dict[str, Any] | None = None) -> None:
    """In a multirun of a named sweep that logs rows, the sweep callback must have opened the
    sweep (its parent run and ``sweep.json``) before this job: a row without it would belong
    to no sweep and be compared with nothing, or with the wrong baseline.

    Raises:
        RunError: no ``sweep.json`` in the multirun directory.
    """
    from rag.app.config import sweep_name
    from rag.ledger.sweep import SWEEP_FILE

    ctx = ctx if ctx is not None else _sweep_context()
    name = sweep_name(cfg)
    if "sweep_dir" not in ctx or not name or not cfg.tracking.enabled or ctx.get("file"):
        return
    raise RunError(f"sweep {name}: {Path(ctx['sweep_dir']) / SWEEP_FILE} is missing: the sweep "
                   "callback (hydra.callbacks.sweep) did not open the sweep's parent run, so "
                   "this job's row would belong to no sweep; no row written")


def open_ledger(cfg: DictConfig):
    """The :class:`rag.ledger.mlflow_store.Ledger` of ``tracking.uri``, created if new.

    Raises:
        RunError: ``cannot open the ledger at URI: reason`` (not a database, a directory that
            cannot be made, a server that does not answer, ...).
    """
    from rag.ledger.mlflow_store import Ledger, LedgerError

    try:
        return Ledger(ledger_uri(cfg), output_path(cfg, cfg.tracking.artifact_root),
                      retries=cfg.tracking.get("server_retries"))
    except LedgerError as exc:
        raise RunError(str(exc)) from None


class PeerSkipped(RunError):
    """A peer retriever (rag/peers/) is not installed: the run is skipped with this reason
    and writes no ledger row (exit 0; a suite's other jobs run)."""


@dataclass
class Prepared:
    """What a row is evaluated with, built by :func:`prepare` (the index and golden set of
    one corpus, the pipeline over them and where its links point)."""

    embedder: Any
    index: Any
    golden: Any
    reranker: Any
    options: Any
    abstention_tags: dict[str, Any]
    pipeline: Any
    source: Any


@dataclass
class Timing:
    """When a job started: ``t_start`` (perf_counter, for ``wall_s``) and ``started_ms`` (the
    ledger row's start time, ms since the epoch: MLflow shows durations)."""

    t_start: float = field(default_factory=time.perf_counter)
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))


def run_job(cfg: DictConfig, *, stages: StageCache | None = None) -> dict[str, float]:
    """Execute one evaluation and (if tracking is on) log it as one ledger row, in named
    stages: :func:`check_config`, :func:`open_ledger`, :func:`load_reference_calibration`,
    :func:`build_external_retriever`, :func:`run_inputs`, :func:`open_external_retriever`,
    :func:`prepare`, :func:`evaluate_row`, then :func:`log_row` (or :func:`print_row` alone).

    Validation (config, corpus, golden labels) happens before anything is written, so a
    failing run leaves no MLflow row.

    Args:
        cfg: the composed config.
        stages: where built embedders, indexes and rerankers are kept (default: the
            process-wide :data:`rag.app.stages.STAGES`, shared by a sweep's jobs).

    Returns:
        The metrics (Hydra sweepers may optimise on them).

    Raises:
        RunError: any user-facing problem (bad config, empty corpus, bad golden labels).
        PeerSkipped: the configured peer retriever is not installed.
    """
    timing = Timing()
    check_config(cfg)
    check_sweep_opened(cfg)
    # the ledger is opened (created, migrated) before any work, so that a store that cannot
    # be reached fails the run now, in one line, not after the whole evaluation
    ledger = open_ledger(cfg) if cfg.tracking.enabled else None
    calibration = load_reference_calibration(cfg)
    retriever = build_external_retriever(cfg)
    root, golden_dir, dataset_tags = run_inputs(cfg)
    open_external_retriever(retriever, root)
    try:
        prepared = prepare(cfg, root=root, golden_dir=golden_dir, dataset_tags=dataset_tags,
                           stages=STAGES if stages is None else stages, calibration=calibration)
        if retriever is None:
            from rag.eval.retriever import build_retriever

            retriever = build_retriever(cfg, pipeline=prepared.pipeline)
        result, metrics, links = evaluate_row(cfg, prepared, retriever, timing=timing)
        if cfg.tracking.enabled:
            log_row(cfg, ledger, prepared, retriever, result, metrics, links, root=root,
                    golden_dir=golden_dir, dataset_tags=dataset_tags, timing=timing)
        else:
            print_row(None, cfg, metrics, prepared.index.stats, result.calibration,
                      prepared.abstention_tags)
        if links is not None:
            print("\n".join(links.lines()))
        return metrics
    finally:
        if hasattr(retriever, "close"):
            retriever.close()


def check_config(cfg: DictConfig) -> None:
    """Stage 1: the composed config against the schema (:func:`rag.app.config.validate`).

    Raises:
        RunError: the schema's message.
    """
    try:
        validate(cfg)
    except ValueError as exc:
        raise RunError(str(exc)) from exc


def load_reference_calibration(cfg: DictConfig) -> Any:
    """Stage 3: the abstention thresholds of ``abstain.calibration`` (another row's), or
    None; a bad reference fails before any indexing or training. ``auto`` (the default: the
    calibration shipped for the embedder) is None here and resolved once the embedder's
    model id is known (:func:`rag.ledger.calibration.resolve_calibration`, in
    :func:`prepare`).

    Raises:
        RunError: the reference cannot be read or does not apply.
    """
    from rag.ledger.calibration import AUTO

    if not cfg.abstain.calibration or str(cfg.abstain.calibration) == AUTO:
        return None
    from rag.eval.transfer import TransferError
    from rag.ledger.calibration import load_calibration

    try:
        return load_calibration(str(cfg.abstain.calibration), ledger_uri(cfg))
    except TransferError as exc:
        raise RunError(str(exc)) from None


def build_external_retriever(cfg: DictConfig) -> Any:
    """Stage 4: the retriever of ``retriever.kind`` when it is not the pipeline (a run file,
    an endpoint, a peer), built and its settings checked before any indexing; None for the
    pipeline (built by :func:`run_job` once its index exists).

    Raises:
        PeerSkipped: a peer that is not installed.
        RunError: bad settings.
    """
    if str(cfg.retriever.kind) == "pipeline":
        return None
    from rag.eval.retriever import build_retriever
    from rag.peers import PeerUnavailable

    try:
        return build_retriever(cfg)
    except PeerUnavailable as exc:
        raise PeerSkipped(str(exc)) from None
    except (ValueError, OSError) as exc:
        raise RunError(str(exc)) from None


def open_external_retriever(retriever: Any, root: Path) -> None:
    """Stage 6: a peer indexes the corpus itself (rag/peers/: ``open(root)``).

    Raises:
        PeerSkipped: the peer turns out not to be installed.
    """
    if not hasattr(retriever, "open"):
        return
    from rag.peers import PeerUnavailable

    try:
        retriever.open(root)
    except PeerUnavailable as exc:
        raise PeerSkipped(str(exc)) from None


def prepare(cfg: DictConfig, *, root: Path, golden_dir: Path, dataset_tags: dict[str, str],
            stages: StageCache, calibration: Any) -> Prepared:
    """Stage 7: index the corpus (or reuse its build), load the golden set against it, and
    build the reranker, the abstention setup and the pipeline.

    Raises:
        RunError: labels of another corpus, or labels that do not resolve.
    """
    from rag.eval.golden import GoldenError, corpus_units, load_golden
    from rag.search.pipeline import SearchOptions, SearchPipeline

    check_golden_corpus(golden_dir, str(cfg.corpus.name),
                        allow_mismatch=bool(cfg.eval.allow_corpus_mismatch),
                        advice=("a dataset names its corpus with dataset.name (it sets corpus.name "
                                "and the labels' corpus: together), e.g. dataset.name="
                                f"{cfg.corpus.name}" if dataset_tags else None))
    embedder = stages.embedder(cfg)
    # a bar on a terminal; `python -m rag.run 2> file` gets a line every 10 s, never frames
    index = stages.index(cfg, root, embedder, progress=True)
    from rag.core.trace_links import resolve_source

    # the commit and URL template of the traces' links, resolved once (rag/core/trace_links.py)
    source = resolve_source(root, url_template=cfg.corpus.url_template or None)
    if source.dirty and source.usable:
        print(f"warning: the corpus work tree {root} has uncommitted changes: links point at "
              f"commit {source.commit}, which may not hold the indexed text", file=sys.stderr)
    try:
        golden = load_golden(golden_dir, corpus_paths=index.paths, corpus_symbols=index.symbols,
                             units=corpus_units(index))
    except GoldenError as exc:
        raise RunError(str(exc)) from exc
    if golden.unindexed:  # `unindexed: keep`: labels of files the walk skipped, still counted
        print(f"{len(golden.unindexed)} label(s) name a file the index does not hold (kept as "
              f"unresolved: relevant, never retrievable): " + "; ".join(golden.unindexed[:5])
              + (" ..." if len(golden.unindexed) > 5 else ""), file=sys.stderr)
    reranker = stages.reranker(cfg, embedder)
    if calibration is None:  # abstain.calibration=auto: the embedder's shipped one, if any
        from rag.eval.transfer import TransferError
        from rag.ledger.calibration import resolve_calibration

        try:
            calibration = resolve_calibration(cfg.abstain.calibration, ledger_uri(cfg),
                                              embedder.model_id)
        except TransferError as exc:
            raise RunError(str(exc)) from None
    options, gate, abstention_tags = abstention_setup(
        cfg, SearchOptions.from_config(cfg), calibration, model_id=embedder.model_id,
        golden_fingerprint=golden.fingerprint, has_reranker=reranker is not None,
        has_dense=index.dense is not None, has_lexical=index.bm25 is not None)
    return Prepared(embedder=embedder, index=index, golden=golden, reranker=reranker,
                    options=options, abstention_tags=abstention_tags,
                    pipeline=SearchPipeline(index, options, reranker=reranker, gate=gate),
                    source=source)


def evaluate_row(cfg: DictConfig, prepared: Prepared, retriever: Any, *, timing: Timing
                 ) -> tuple[Any, dict[str, float], Any]:
    """Stage 8: evaluate ``retriever`` on the golden set and gather the row's metrics (the
    evaluator's, ANN recall, the index's counters, the link check's, ``wall_s``).

    Returns:
        (the :class:`rag.eval.evaluate.EvalResult`, the row's metrics, the link check or None).
    """
    from rag.core.trace_links import run_links
    from rag.eval.evaluate import evaluate

    embedder, index, golden = prepared.embedder, prepared.index, prepared.golden
    reranker, options, source = prepared.reranker, prepared.options, prepared.source
    abstention_tags = prepared.abstention_tags
    result = evaluate(retriever, golden, recall_ks=list(cfg.eval.recall_ks),
                      ndcg_k=cfg.eval.ndcg_k, depth=cfg.eval.depth,
                      use_expected_types=cfg.eval.filter == "expected",
                      gate_thresholds=[float(x) for x in cfg.rerank.gate_thresholds]
                      if reranker is not None else (),
                      target_false_weak=float(cfg.abstain.target_false_weak),
                      target_dropped=float(cfg.abstain.target_dropped),
                      count_tokens=embedder.count_tokens,
                      ties=str(getattr(cfg.eval.ties, "value", cfg.eval.ties)),
                      min_overlap=float(cfg.eval.min_overlap),
                      progress=True, trace_n=int(cfg.links.top_n),
                      hit_url=run_links(source, github_export=bool(cfg.corpus.github_export)))
    metrics = dict(result.metrics)
    # --- ANN recall (dense.index=hnsw|ivf, rag/index/ann.py): the ANN's top-10 chunk ids
    # against exact search's top-10 over every golden query (re-embedded here, untimed)
    dense_channel = index.dense if str(cfg.retriever.kind) == "pipeline" else None
    if dense_channel is not None and getattr(dense_channel, "ann", None) is not None:
        texts = [q.query for q in (*golden.positives, *golden.negatives)]
        metrics["ann_recall_at_10"] = dense_channel.ann_recall(
            [dense_channel.embed_query(q) for q in texts], k=10)
    # ---
    # where these thresholds were fitted: checked when another run applies them
    result.calibration["provenance"] = {
        "corpus": str(cfg.corpus.name), "corpus_fingerprint": index.corpus_fingerprint,
        "golden_fingerprint": golden.fingerprint, "model_id": embedder.model_id,
        "search_mode": options.mode, "prose_mode": options.prose_mode,
        "eval_filter": str(cfg.eval.filter), "abstain_signal": abstention_tags["abstain_signal"]}
    for k in ("chunks", "chunks_embedded", "chunks_from_cache", "chunks_truncated",
              "chunks_truncated_share", "files_indexed", "index_reused", "corpus_read",
              "embedder_distill_s", "chunks_distinct_texts", "tokens_embedded"):
        if k in index.stats:
            metrics[f"index/{k}"] = float(index.stats[k])
    for k, v in index.stats.items():  # skip counts, timings, per-language chunk stats
        if (k.startswith(("files_skipped_", "lang/", "secrets_redacted", "files_redacted"))
                or k.endswith("_s")
                or k == "symbol_coverage"):
            metrics[f"index/{k}"] = float(v)
    links = None
    if cfg.eval.check_links:  # bounded HEAD requests; failures are reported, never raised
        from rag.core.trace_links import check_run_traces

        links = check_run_traces(result.per_query, cfg.links)
        metrics.update(links.metrics())
    metrics["wall_s"] = time.perf_counter() - timing.t_start
    return result, metrics, links


#: seconds between two rewrites of the markdown report by the jobs of one sweep
SWEEP_REPORT_EVERY_S = 60


def _written_within(path: Path, seconds: float) -> bool:
    """Whether ``path`` exists and was modified less than ``seconds`` ago."""
    try:
        return time.time() - path.stat().st_mtime < seconds
    except OSError:
        return False


def log_row(cfg: DictConfig, ledger: Any, prepared: Prepared, retriever: Any, result: Any,
            metrics: dict[str, float], links: Any, *, root: Path, golden_dir: Path,
            dataset_tags: dict[str, str], timing: Timing) -> str:
    """Stage 9: log the row (params, metrics, tags, artifacts, figures) into ``ledger``, print
    it and refresh the ledger report.

    Returns:
        The MLflow run id of the row.
    """
    from rag.core.trace_links import source_tags
    from rag.eval.evaluate import chunk_run_jsonl, chunk_run_lines, trec_run_lines
    from rag.eval.golden import trec_qrels_lines

    embedder, index, golden = prepared.embedder, prepared.index, prepared.golden
    reranker, source = prepared.reranker, prepared.source
    abstention_tags = prepared.abstention_tags
    t = cfg.tracking
    from rag.app.report import write_report
    from rag.ledger.mlflow_store import (CHUNK_RUN_FILE, CHUNK_RUN_JSONL, QRELS_FILE,
                                         RUN_FILE, LedgerError, git_commit, golden_input,
                                         params_from_config)

    container = to_container(cfg)
    if container.get("retriever", {}).get("url"):  # no credentials in params or artifacts
        from rag.eval.retriever import public_url

        container["retriever"]["url"] = public_url(container["retriever"]["url"])
    uri = ledger.uri
    artifacts = {
        "config.yaml": OmegaConf.to_yaml(OmegaConf.create(container)),
        "per_query.csv": per_query_csv(result.per_query),
        "calibration.json": json.dumps(result.calibration, indent=2) + "\n",
        **({"links.json": json.dumps(links.as_dict(), indent=2) + "\n"} if links else {}),
        # TREC run and qrels, named .txt so the MLflow UI previews them as text
        RUN_FILE: "\n".join(trec_run_lines(result.run, "rag")) + "\n",
        QRELS_FILE: "\n".join(trec_qrels_lines(golden)) + "\n",
        # the same ranking chunk by chunk, as returned (semble's metric reads it)
        CHUNK_RUN_FILE: "\n".join(chunk_run_lines(result.chunk_run, "rag")) + "\n",
        CHUNK_RUN_JSONL: chunk_run_jsonl(result.chunk_run, {
            q.id: q.query for q in (*golden.positives, *golden.negatives)}),
    }
    if "learned_gate" in result.calibration:
        artifacts["abstention_gate.json"] = json.dumps(result.calibration["learned_gate"],
                                                       indent=2) + "\n"
    import tempfile

    from rag.ledger.figures import row_figures, save_png

    plot_dir = Path(tempfile.mkdtemp(prefix="rag-plot-"))
    if result.calibration.get("signals"):  # score histograms, risk-coverage curves
        in_force = (abstention_tags["abstain_signal"],
                    *(None if abstention_tags.get(k) in (None, "none")
                      else float(abstention_tags[k]) for k in ("abstain_min", "abstain_weak")))
        for name, fig in row_figures(result.per_query, result.calibration,
                                     in_force=in_force).items():
            artifacts[name] = save_png(fig, plot_dir / Path(name).name)
    if result.token_curve:  # recall / answer support per context budget (docs/metrics.md)
        from rag.ledger.figures import token_budget

        artifacts[TOKEN_BUDGET_CSV] = "budget,recall,answer_support,queries\n" + "".join(
            f"{c['budget']},{c['recall']:.6f},{c['answer_support']:.6f},{c['queries']}\n"
            for c in result.token_curve)
        artifacts[TOKEN_BUDGET_FIGURE] = save_png(token_budget(result.token_curve),
                                                  plot_dir / Path(TOKEN_BUDGET_FIGURE).name)
    commit = git_commit(project_root())
    ctx = _sweep_context()
    tags = {
        "git_commit": commit,
        "corpus": cfg.corpus.name,
        "corpus_root": str(root),
        "hydra_overrides": json.dumps(ctx.get("overrides", [])),
        "corpus_fingerprint": index.corpus_fingerprint,
        "golden_fingerprint": golden.fingerprint,
        "golden_dir": str(golden_dir),
        **dataset_tags,
        "model_id": embedder.model_id,
        "retriever": str(cfg.retriever.kind),
        **getattr(retriever, "tags", {}),
        **({"retriever_factory": str(cfg.retriever.factory)} if cfg.retriever.factory else {}),
        **abstention_tags,
        **({"rerank_model_id": reranker.model_id, "rerank_score_unit": reranker.score_unit}
           if reranker is not None else {}),
        "mlflow.source.git.commit": commit.removesuffix("-dirty"),
        **sweep_tags(cfg, ctx),
        **source_tags(source),
    }
    # a sweep job's significance against its baseline is computed once, when the sweep
    # ends (rag.ledger.sweep.sweep_significance): no job waits for its baseline
    from rag.app.config import experiment_name

    experiment = experiment_name(cfg)
    try:
        run_id = ledger.log_row(experiment=experiment, run_name=t.run_name or tags.get("sweep_job"),
                                params=params_from_config(container), metrics=metrics,
                                tags=tags, artifacts=artifacts, start_time_ms=timing.started_ms,
                                inputs=[golden_input(
                                    name=golden_dir.name, fingerprint=golden.fingerprint,
                                    source=str(golden_dir),
                                    profile={"positives": len(golden.positives),
                                             "negatives": len(golden.negatives),
                                             "tags": list(golden.tags)})])
    except LedgerError as exc:  # the store failed: one line (the row marked FAILED if it could be)
        raise RunError(str(exc)) from None
    finally:
        import shutil

        shutil.rmtree(plot_dir, ignore_errors=True)
    print_row(run_id, cfg, metrics, index.stats, result.calibration, abstention_tags)
    print(f"  ledger: {uri}")
    report_path = output_path(cfg, t.report_path)
    if "sweep_id" in tags and _written_within(report_path, SWEEP_REPORT_EVERY_S):
        # a sweep's jobs rewrite the report at most once a minute (it reads every row, so
        # rewriting it per job grows with the ledger); the sweep's end writes it whole
        print(f"  report: {report_path} (next rewrite within {SWEEP_REPORT_EVERY_S} s, and at "
              "the sweep's end)")
        return run_id
    try:
        report = write_report(uri, report_path, prefix=t.experiment_prefix, ledger=ledger)
        print(f"  report: {report}")
    except (OSError, LedgerError) as exc:  # the row is logged; only the report is not
        print(f"warning: ledger row logged but report not written: {exc}", file=sys.stderr)
    return run_id


#: the one-line errors of the jobs of this process's multirun that wrote no row (appended by
#: :func:`main`; read once by the entry point after ``hydra.main`` returns)
FAILED_JOBS: list[str] = []


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Hydra entry point; returns MRR so a sweeper can optimise on it."""
    for name in ("mlflow", "sentence_transformers", "bm25s", "transformers", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:  # the "Loading weights" bar is noise next to our own progress bars
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    try:
        metrics = run_job(cfg)
    except PeerSkipped as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        _note_outcome("skipped", str(exc))
        return 0.0
    except BaseException as exc:
        if not isinstance(exc, RunError):
            raise
        print(f"error: {exc}", file=sys.stderr, flush=True)
        if _note_outcome("failed", str(exc)):
            # in a multirun: this job wrote no row and the others still run; the sweep's end
            # marks the sweep incomplete and exits 2 (rag/app/sweep_callback.py), and so does
            # the entry point below when no callback did
            FAILED_JOBS.append(str(exc))
            return 0.0
        if "sweep_dir" in _sweep_context():
            raise  # the multirun directory cannot be written: Hydra fails the job
        from rag.core.exit_codes import ExitCode

        sys.exit(ExitCode.ERROR)
    return metrics.get("mrr", 0.0)


def _note_outcome(outcome: str, message: str) -> bool:
    """In a multirun, note in its directory that this job wrote no row and why
    (:func:`rag.ledger.sweep.record_job_outcome`); True when noted, False outside a multirun
    or when the directory cannot be written."""
    from rag.ledger.sweep import record_job_outcome

    ctx = _sweep_context()
    if "sweep_dir" not in ctx:
        return False
    try:
        record_job_outcome(ctx["sweep_dir"], ctx.get("job_num", "?"), outcome=outcome,
                           message=message)
    except OSError:
        return False
    return True


if __name__ == "__main__":
    from rag.app.config import check_config_files, check_override_keys, check_override_values
    from rag.core.exit_codes import ExitCode, guarded

    try:  # a bad key or value: one line and exit 2, as every command (rag/core/exit_codes.py)
        check_config_files(sys.argv[1:])  # an alias bomb in a config group: refused, not hung
        check_override_keys(sys.argv[1:])
        check_override_values(sys.argv[1:])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(ExitCode.ERROR)
    status = guarded(lambda: main() and None)  # hydra.main returns nothing; MRR is for sweepers
    if status == ExitCode.OK and FAILED_JOBS:  # a multirun whose sweep callback did not say so
        print(f"error: {len(FAILED_JOBS)} job(s) of the multirun failed and wrote no row "
              f"(first: {FAILED_JOBS[0]})", file=sys.stderr)
        status = ExitCode.ERROR
    sys.exit(status)
