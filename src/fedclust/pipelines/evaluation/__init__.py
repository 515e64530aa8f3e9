"""Evaluation nodes shared by every method pipeline."""
