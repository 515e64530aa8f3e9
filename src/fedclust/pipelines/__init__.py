"""Thin Kedro wiring. Nodes only adapt catalog data and parameters to library functions."""
