"""Abstention thresholds carried from one ledger row to another run (``abstain.calibration``).

A row's ``calibration.json`` (:func:`rag.eval.abstention.calibrate_abstention`) carries the
thresholds its rule chose, the learned gate, and its *provenance* (corpus, golden set,
embedder, route). Applying it elsewhere:

* the embedder must be the same model (cosines and gate features are in its units), else
  :class:`TransferError`;
* a learned gate's features must all be measurable in the new run (``top_rerank`` needs a
  reranker), else :class:`TransferError`;
* the row is tagged ``abstain_thresholds_source``: ``transferred`` when the calibration came
  from another golden set, ``in_sample`` when from the same one (its rates are then measured on
  the queries that chose the thresholds, and say nothing about another corpus).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rag.search.signals import DENSE_SIGNALS, LEXICAL_SIGNALS, LearnedGate


class TransferError(ValueError):
    """A calibration that cannot be read or applied; the message names the reference."""


@dataclass(frozen=True)
class Calibration:
    """A loaded calibration: the JSON and where it came from (``file:...`` or ``run:...``)."""

    data: dict[str, Any]
    source: str

    @property
    def provenance(self) -> dict[str, Any]:
        """corpus, golden_fingerprint, model_id, ... of the row that fitted it ({} if older)."""
        p = self.data.get("provenance")
        return p if isinstance(p, dict) else {}


def gate_from(cal: Calibration, ref: str, *, has_reranker: bool, has_dense: bool,
              has_lexical: bool = True) -> LearnedGate:
    """The learned gate of ``cal``, checked against what this run measures.

    Raises:
        TransferError: no gate, a malformed one, or a feature this run cannot measure.
    """
    if "learned_gate" not in cal.data:
        raise TransferError(f"abstain.calibration={ref!r} has no learned gate (it needs two or "
                            "more signals measured on every query and >= 2 queries of each kind)")
    try:
        gate = LearnedGate.from_dict(cal.data["learned_gate"])
    except ValueError as exc:
        raise TransferError(f"abstain.calibration={ref!r}: {exc}") from None
    missing = [f for f in gate.features
               if (f == "top_rerank" and not has_reranker)
               or (f in DENSE_SIGNALS and not has_dense)
               or (f in LEXICAL_SIGNALS and not has_lexical)]
    if missing:
        raise TransferError(f"abstain.calibration={ref!r}: its learned gate reads {missing}, "
                            "which this run does not measure (top_rerank needs a reranker, the "
                            "dense signals a dense channel, the lexical ones a BM25 index); a "
                            "gate never fills in a signal")
    return gate


def _usable_gate(cal: Calibration, ref: str, **measured: bool) -> bool:
    """Whether ``cal`` carries a learned gate whose signals this run measures (False: none,
    or one reading a signal the run cannot measure).

    Raises:
        TransferError: the gate is malformed (a missing field, an unknown feature).
    """
    if "learned_gate" not in cal.data:
        return False
    try:
        LearnedGate.from_dict(cal.data["learned_gate"])
    except ValueError as exc:
        raise TransferError(f"abstain.calibration={ref!r}: {exc}") from None
    try:
        gate_from(cal, ref, **measured)
    except TransferError:
        return False
    return True


def dense_bands(cal: Calibration, ref: str) -> tuple[float, float]:
    """(min_dense, weak_dense) that ``cal``'s rule suggested; None (the rule flags nothing)
    becomes -1 (no query is below it).

    Raises:
        TransferError: the calibration has no dense thresholds.
    """
    if "suggested_weak_dense" not in cal.data:
        raise TransferError(f"abstain.calibration={ref!r} has no dense thresholds (was the dense "
                            "channel measured on that row?)")
    lo = cal.data.get("suggested_min_dense")
    lo = -1.0 if lo is None else float(lo)
    hi = cal.data.get("suggested_weak_dense")
    return lo, lo if hi is None else max(float(hi), lo)


def check_model(cal: Calibration, ref: str, model_id: str) -> None:
    """Refuse a calibration fitted with another embedder (its cosines are other units).

    Raises:
        TransferError: naming both models.
    """
    theirs = cal.provenance.get("model_id")
    if theirs and theirs != model_id:
        raise TransferError(f"abstain.calibration={ref!r} was fitted with embedder "
                            f"{theirs.split('|')[0]!r}, this run uses {model_id.split('|')[0]!r}: "
                            "thresholds are in one model's units")


def source_tag(cal: Calibration, golden_fingerprint: str) -> str:
    """``in_sample`` when ``cal`` was fitted on this golden set (its ``golden_fingerprint``,
    or one of the ``golden_fingerprints`` a pooled calibration was fitted on), else
    ``transferred``."""
    fitted = {cal.provenance.get("golden_fingerprint"),
              *(cal.provenance.get("golden_fingerprints") or [])}
    return "in_sample" if golden_fingerprint and golden_fingerprint in fitted else "transferred"


def options_with(options: Any, bands: tuple[float, float]) -> Any:
    """``options`` (a frozen :class:`rag.search.pipeline.SearchOptions`) with the bands."""
    return replace(options, min_dense=bands[0], weak_dense=bands[1])


def _threshold_tag(v: float | None) -> str:
    """A threshold as a tag: 4 decimals, ``none`` when the rule flags nothing."""
    return "none" if v is None else f"{float(v):.4f}"


def abstention_setup(cfg, options, cal, *, model_id: str, golden_fingerprint: str,
                     has_reranker: bool, has_dense: bool, has_lexical: bool = True):
    """(search options, learned gate or None, tags) with the abstention the config asks for.

    ``cal`` (a :class:`rag.eval.transfer.Calibration`, loaded before any indexing) is None:
    the configured bands (source ``config``). Otherwise the bands it suggested, or its learned
    gate, with source ``transferred`` (another golden set) or ``in_sample`` (this one); the
    tags name it and the thresholds applied.

    Raises:
        RunError: the calibration was fitted with another embedder, has no thresholds for the
            signal, or its gate reads a signal this run does not measure.
    """
    from rag.core.errors import RunError

    a = cfg.abstain
    signal = str(getattr(a.signal, "value", a.signal))
    if signal == "auto":
        # the calibration's gate when it has a usable one, no band is given and no reranker
        # threshold is (``rerank.min_score`` / ``weak_score`` gate on the reranker instead)
        rerank_gated = options.rerank_gated and has_reranker
        try:
            usable = (cal is not None and a.get("min_dense") is None
                      and a.get("weak_dense") is None and not rerank_gated
                      and _usable_gate(cal, str(a.calibration), has_reranker=has_reranker,
                                       has_dense=has_dense, has_lexical=has_lexical))
        except TransferError as exc:
            raise RunError(str(exc)) from None
        signal = "learned" if usable else "top_dense"
    elif signal == "learned" and cal is None:
        raise RunError(f"abstain.signal=learned: no calibration applies (abstain.calibration="
                       f"{a.calibration}: none ships for embedder {model_id.split('|')[0]!r}); "
                       "give abstain.calibration=<ledger row or calibration.json>")
    tags = {"abstain_signal": signal, "abstain_thresholds_source": "config"}
    if a.get("min_dense") is not None and a.get("weak_dense") is not None and signal != "learned":
        cal = None  # both bands given: they win over the shipped calibration (auto)
    if cal is None:
        if options.min_dense > options.weak_dense:
            seed = [k for k in ("min_dense", "weak_dense") if a.get(k) is None]
            raise RunError(f"abstain: min_dense {options.min_dense:g} > weak_dense "
                           f"{options.weak_dense:g}" + (f" ({seed[0]} is the seed's: no "
                                                        "calibration applies here); give both"
                                                        if seed else ""))
        tags.update(abstain_min=_threshold_tag(options.min_dense), abstain_weak=_threshold_tag(options.weak_dense))
        return options, None, tags
    ref = str(a.calibration)
    tags.update(abstain_thresholds_source=source_tag(cal, golden_fingerprint),
                abstain_calibration_from=cal.source)
    try:
        check_model(cal, ref, model_id)
        if signal == "learned":
            gate = gate_from(cal, ref, has_reranker=has_reranker, has_dense=has_dense,
                             has_lexical=has_lexical)
            tags.update(abstain_min=_threshold_tag(gate.min_score), abstain_weak=_threshold_tag(gate.weak_score),
                        abstain_gate_features=",".join(gate.features))
            return options, gate, tags
        bands = dense_bands(cal, ref)
    except TransferError as exc:
        raise RunError(str(exc)) from None
    # a band given explicitly wins over the shipped one (config validation refuses both with a
    # calibration named explicitly)
    given = (a.get("min_dense"), a.get("weak_dense"))
    if any(v is not None for v in given):
        bands = tuple(float(v) if v is not None else b for v, b in zip(given, bands))
        if bands[0] > bands[1]:
            raise RunError(f"abstain: min_dense {bands[0]:g} > weak_dense {bands[1]:g} once "
                           f"the shipped calibration's other band is applied; give both")
        tags["abstain_bands_given"] = ",".join(k for k, v in zip(("min_dense", "weak_dense"),
                                                                   given) if v is not None)
        # one band from the config, the other from the calibration: say both
        tags["abstain_thresholds_source"] = (f"{tags['abstain_bands_given']} from the config, "
                                             f"the other {tags['abstain_thresholds_source']}")
    tags.update(abstain_min=_threshold_tag(bands[0]), abstain_weak=_threshold_tag(bands[1]))
    return options_with(options, bands), None, tags
