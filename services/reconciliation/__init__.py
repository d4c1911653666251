"""Reconciliation: records opened for pending side effects, operator resolve and retry."""
