"""Reading a calibration that ``abstain.calibration`` names: a ``calibration.json`` file, or
the artifact of a ledger row (rag/eval/transfer.py applies it; the ledger is read here, so the
evaluation layer never imports the ledger)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from rag.eval.transfer import Calibration, TransferError


def load_calibration(ref: str, uri: str) -> Calibration:
    """The calibration.json that ``abstain.calibration`` names.

    Args:
        ref: a calibration.json path (relative: from the current directory, else the project
            root), or a ledger run id (or unique prefix) in the store ``uri``.

    Raises:
        TransferError: no such file or row, the row has no calibration.json, it is not a JSON
            object, or its thresholds are not numbers.
    """
    path = Path(ref).expanduser()
    if not path.is_absolute() and not path.is_file():
        from rag.core.paths import project_root

        if (project_root() / path).is_file():  # e.g. golden/flask/calibration.json
            path = project_root() / path
    try:
        if path.is_file():
            data, source = json.loads(path.read_text(encoding="utf-8")), f"file:{path.resolve()}"
        elif os.sep in ref or ref.endswith(".json"):
            raise TransferError(f"abstain.calibration={ref!r}: no such file")
        else:
            from rag.ledger.mlflow_store import Ledger

            ledger = Ledger(uri, create=False)
            run_id = ledger.resolve_run_id(ref)
            data, source = json.loads(ledger.download_text(run_id, "calibration.json")), f"run:{run_id}"
    except TransferError:
        raise
    except LookupError as exc:
        raise TransferError(f"abstain.calibration={ref!r}: {exc} (ledger {uri})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TransferError(f"abstain.calibration={ref!r}: not a calibration JSON ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - the ledger's and MLflow's errors vary
        raise TransferError(f"abstain.calibration={ref!r}: cannot read its calibration.json "
                            f"({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        kind = {list: "a list", int: "a number", float: "a number", str: "a string",
                type(None): "null", bool: "a boolean"}.get(type(data), type(data).__name__)
        raise TransferError(f"abstain.calibration={ref!r}: not a calibration JSON ({kind}, "
                            "not an object)")
    for key in ("suggested_min_dense", "suggested_weak_dense"):
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not math.isfinite(v)):
            raise TransferError(f"abstain.calibration={ref!r}: {key} must be a finite number or "
                                f"null, got {v!r}")
        if v is not None and not 0.0 <= v <= 1.0:
            raise TransferError(f"abstain.calibration={ref!r}: {key} must be a cosine in [0, 1], "
                                f"got {v!r}")
    lo, hi = data.get("suggested_min_dense"), data.get("suggested_weak_dense")
    if lo is not None and hi is not None and lo > hi:
        raise TransferError(f"abstain.calibration={ref!r}: suggested_min_dense {lo!r} is above "
                            f"suggested_weak_dense {hi!r} (the drop floor must not exceed the "
                            "weak band)")
    return Calibration(data=data, source=source)


#: ``abstain.calibration: auto`` (the default): the calibration shipped for the run's embedder
AUTO = "auto"


def shipped_dir() -> Path:
    """Where the calibrations that ship with embedders live: ``models/abstention/`` of the
    project (each a ``rag golden calibrate`` calibration.json)."""
    from rag.core.paths import project_root

    return project_root() / "models" / "abstention"


def shipped_calibration(model_id: str, directory: Path | None = None) -> Calibration | None:
    """The shipped calibration fitted with embedder ``model_id`` (its ``provenance.model_id``
    equal, the whole id: model, package, max_seq, normalisation), or None when none is.

    Raises:
        TransferError: a file of the directory that is not a calibration (naming it), or two
            files for one model (an ambiguous default).
    """
    directory = shipped_dir() if directory is None else directory
    found = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            cal = load_calibration(str(path), "")
        except TransferError as exc:  # the user named nothing: say it is the shipped file
            why = str(exc).split(": ", 1)[-1]
            raise TransferError(f"abstain.calibration=auto: the calibration shipped in {path} "
                                f"is broken ({why}); rewrite it with `rag golden calibrate` "
                                "or run with abstain.calibration=null") from None
        if cal.provenance.get("model_id") == model_id:
            found.append(cal)
    if len(found) > 1:
        raise TransferError(f"abstain.calibration=auto: {len(found)} calibrations in {directory} "
                            f"were fitted with {model_id.split('|')[0]!r} ("
                            + ", ".join(c.source for c in found) + "); keep one")
    return found[0] if found else None


def resolve_calibration(ref: str | None, uri: str, model_id: str) -> Calibration | None:
    """What ``abstain.calibration`` names, for a run of embedder ``model_id``: None (the
    config's bands) for none, the shipped calibration of that embedder (or None when it
    has none) for ``auto``, else :func:`load_calibration` of ``ref``.

    Raises:
        TransferError: see :func:`load_calibration` and :func:`shipped_calibration`.
    """
    if not ref:
        return None
    if str(ref) == AUTO:
        return shipped_calibration(model_id)
    return load_calibration(str(ref), uri)
