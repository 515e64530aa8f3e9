"""Reporting nodes: plots of per-round histories."""
