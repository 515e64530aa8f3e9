"""Audit cases: filled in by the next commit."""

CASES: dict = {}
