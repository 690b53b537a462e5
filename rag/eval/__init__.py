"""Evaluation: golden sets, metrics, calibration and the evaluator."""
