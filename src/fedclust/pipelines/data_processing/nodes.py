"""Data loading node: parameters in, a :class:`fedclust.data.Dataset` out."""

from __future__ import annotations

import logging
from pathlib import Path

from fedclust.data import Dataset
from fedclust.data.registry import prepare_dataset

logger = logging.getLogger(__name__)


def load_dataset(dataset: dict, data_paths: dict, seed: int) -> Dataset:
    """Load, subsample and scale the data set named by ``dataset.name``.

    A file-based data set reads from ``dataset.path`` or, when that is null, from
    ``data_paths.<name>`` (relative to the project root). ``dataset.label`` (default: the file's
    stem for a user's file, else the name; :func:`fedclust.data.registry.dataset_label`) names it.
    """
    params = dict(dataset)
    name = params.pop("name")
    path = params.pop("path", None) or (data_paths or {}).get(name)
    options = params.pop("options", None) or {}
    ds = prepare_dataset(name, path=None if path is None else str(Path(path)), seed=seed, options=options, **params)
    classes = f"{ds.n_classes} classes" if ds.labelled else "no labels"
    logger.info("loaded %s: %d samples x %d features, %s", ds.name, ds.n_samples, ds.n_features, classes)
    return ds
