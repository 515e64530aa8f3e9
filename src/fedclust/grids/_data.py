"""Data loading shared by the grids (the same loader as the pipelines' data stage), and a small
per-process cache: a grid cell is a pure function of its dict, so a worker process (or this one)
loads a data set or builds a partition once and reuses it for the next cells that name it. The
cache keys of anything read from a file carry the file's :func:`stamp`, so that a file replaced
at the same path is read again."""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from fedclust.data import Dataset
from fedclust.data.registry import prepare_dataset

_CACHES: dict[str, OrderedDict] = {"data": OrderedDict(), "small": OrderedDict()}
_SIZES = {"data": 2, "small": 64}


def memo(key: Any, build: Callable[[], Any], cache: str = "small"):
    """``build()``, computed once per ``key`` in this process (LRU: 2 data sets, 64 small objects)."""
    store = _CACHES[cache]
    k = json.dumps(key, sort_keys=True, default=str)
    if k in store:
        store.move_to_end(k)
        return store[k]
    value = build()
    store[k] = value
    while len(store) > _SIZES[cache]:
        store.popitem(last=False)
    return value


def stamp(path) -> list | None:
    """Size and modification time of the file or folder at ``path`` (None without a path): part of
    the cache keys of what is read from it."""
    if path is None:
        return None
    p = Path(path)
    try:
        if p.is_dir():
            return sorted([f.as_posix(), f.stat().st_size, f.stat().st_mtime_ns] for f in p.rglob("*") if f.is_file())
        st = p.stat()
    except OSError:
        return [os.fspath(path), "missing"]
    return [os.fspath(path), st.st_size, st.st_mtime_ns]


def load(name: str, data_paths: dict | None, seed: int = 0, **options) -> Dataset:
    path = (data_paths or {}).get(name)
    return prepare_dataset(name, path=path, seed=seed, **options)


def load_cached(name: str, data_paths: dict | None, seed: int = 0, **options) -> Dataset:
    """:func:`load`, once per process for the same arguments (callers must not modify the arrays)."""
    path = (data_paths or {}).get(name)
    return memo(("load", name, stamp(path), seed, options), lambda: load(name, data_paths, seed, **options), "data")


def load_spec(spec: dict) -> Dataset:
    """The data set of a resolved spec (``name``, ``path``, ``options``, ``scale``, ``label``; see
    :func:`fedclust.grids.benchmark.dataset_specs`), named by its label."""
    return prepare_dataset(
        spec["name"],
        path=spec.get("path"),
        options=dict(spec.get("options") or {}),
        scale=spec.get("scale") or "minmax",
        label=spec.get("label"),
    )


def load_spec_cached(spec: dict) -> Dataset:
    """:func:`load_spec`, once per process for the same spec and file (callers must not modify the arrays)."""
    return memo(("load_spec", spec, stamp(spec.get("path"))), lambda: load_spec(spec), "data")
