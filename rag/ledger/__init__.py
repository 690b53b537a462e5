"""Ledger: every evaluation is one MLflow run (a ledger row); reports are rendered from MLflow."""
