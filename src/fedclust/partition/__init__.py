"""Partitioners: how samples are spread across clients.

Each scheme is a plain function taking ``seed`` (randomness from ``fedclust.rng.stream(seed, "partition")``)
and returning a :class:`Partition` (``rotation`` returns :class:`RotatedData`, because rotating creates
new samples; its ``.partition()`` is a Partition over its ``X``/``y``). :func:`make_partition` dispatches
by name for the pipeline; :mod:`fedclust.partition.report` summarizes a partition.
"""

from __future__ import annotations

import difflib
import inspect

from fedclust.partition.base import Partition
from fedclust.partition.dirichlet import dirichlet
from fedclust.partition.iid import iid
from fedclust.partition.kmeans_split import kmeans_split
from fedclust.partition.power_law import power_law
from fedclust.partition.report import heatmap_figure, label_matrix, partition_stats
from fedclust.partition.rotation import HeldOut, RotatedData, rotation
from fedclust.partition.shards import shards

SCHEMES = ("iid", "dirichlet", "shards", "power_law", "kmeans", "rotation")
#: the schemes that split by class label: a data set without labels cannot use them
LABEL_SCHEMES = ("dirichlet", "shards", "power_law", "rotation")


def make_partition(scheme: str, *, X=None, y=None, images=None, n_clients: int, seed: int = 0, **options):
    """Run partition scheme ``scheme`` (one of :data:`SCHEMES`) on a dataset's arrays.

    * ``iid`` needs ``X`` or ``y`` (only the sample count is used); ``dirichlet``, ``shards`` and
      ``power_law`` need ``y``; ``kmeans`` needs ``X``; ``rotation`` needs ``images`` and ``y``.
    * ``options`` go to the scheme function (e.g. ``alpha``, ``labels_per_client``, ``n_groups``, ``ratios``).

    Returns a :class:`Partition`, or :class:`RotatedData` for ``rotation``.
    """
    check_scheme(scheme, options)

    def need(name, value):
        if value is None:
            raise ValueError(f"partition scheme {scheme!r} needs {name}")
        return value

    if scheme == "iid":
        n = len(y) if y is not None else len(need("X or y", X))
        return iid(n, n_clients, seed, **options)
    if scheme == "dirichlet":
        return dirichlet(need("y", y), n_clients, seed=seed, **options)
    if scheme == "shards":
        return shards(need("y", y), n_clients, seed=seed, **options)
    if scheme == "power_law":
        return power_law(need("y", y), n_clients, seed=seed, **options)
    if scheme == "kmeans":
        return kmeans_split(need("X", X), n_clients, seed=seed, **options)
    return rotation(need("images", images), need("y", y), n_clients=n_clients, seed=seed, **options)


#: arguments of the scheme functions that make_partition fills in itself (not options)
_NOT_OPTIONS = frozenset({"y", "X", "images", "n_samples", "n_clients", "seed"})


def check_scheme(scheme: str, options: dict | None = None) -> None:
    """ValueError unless ``scheme`` is one of :data:`SCHEMES` and takes every key of ``options``
    (cheap: no data needed, so a run can check it before any work)."""
    if scheme not in SCHEMES:
        near = difflib.get_close_matches(str(scheme), SCHEMES, n=1, cutoff=0.5)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ValueError(f"partition.scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}{hint}")
    _check_options(scheme, options or {})


def _check_options(scheme: str, options: dict) -> None:
    """Unknown options stop the run with the scheme's valid options and the nearest one."""
    func = {
        "iid": iid,
        "dirichlet": dirichlet,
        "shards": shards,
        "power_law": power_law,
        "kmeans": kmeans_split,
        "rotation": rotation,
    }[scheme]
    valid = [p for p in inspect.signature(func).parameters if p not in _NOT_OPTIONS]
    for key in options:
        if key in valid:
            continue
        if not valid:
            raise ValueError(f"partition scheme {scheme!r} takes no options, got partition.options.{key}")
        near = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.5)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ValueError(f"unknown option {key!r} of partition scheme {scheme!r}{hint} (options: {', '.join(valid)})")


__all__ = [
    "Partition",
    "RotatedData",
    "SCHEMES",
    "LABEL_SCHEMES",
    "check_scheme",
    "dirichlet",
    "heatmap_figure",
    "iid",
    "kmeans_split",
    "label_matrix",
    "make_partition",
    "partition_stats",
    "power_law",
    "rotation",
    "HeldOut",
    "shards",
]
