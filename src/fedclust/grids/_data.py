"""Data loading shared by the grids (the same loader as the pipelines' data stage)."""

from __future__ import annotations

from fedclust.data import Dataset
from fedclust.data.registry import prepare_dataset


def load(name: str, data_paths: dict | None, seed: int = 0, **options) -> Dataset:
    path = (data_paths or {}).get(name)
    return prepare_dataset(name, path=path, seed=seed, **options)
