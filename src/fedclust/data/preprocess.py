"""Preprocessing (scaling) and seeded subsampling of a :class:`~fedclust.data.base.Dataset`.

Both functions return a new :class:`Dataset` and never modify their input. They record what they
did in ``meta["preprocess"]`` / ``meta["subsample"]``.

:func:`id_like_columns` finds features that look like identifiers: integer-valued with
(almost) one distinct value per sample (a row number, a specimen ID). Unscaled, such a column
dominates every Euclidean distance; scaled, it still adds a dimension of pure noise. :func:`preprocess`
lists them in ``meta["id_like_columns"]`` and logs a warning naming them.
"""

from __future__ import annotations

import logging

import numpy as np

from fedclust.data.base import Dataset
from fedclust.errors import DataError
from fedclust.rng import stream

__all__ = ["preprocess", "subsample", "id_like_columns", "scaling_statistics", "scaling_of", "SCALES", "SCALING_WORDS"]

logger = logging.getLogger(__name__)

#: a column is ID-like when at least this fraction of its values are distinct (and all are integers)
ID_UNIQUE_FRACTION = 0.95
#: ... and the data set has at least this many samples (tiny sets have unique values by chance)
ID_MIN_SAMPLES = 20


def id_like_columns(
    X, *, min_unique_fraction: float = ID_UNIQUE_FRACTION, min_samples: int = ID_MIN_SAMPLES
) -> list[dict]:
    """Columns of ``X`` (n, m) that look like identifiers: every value an integer and at least
    ``min_unique_fraction`` of the n values distinct (n >= ``min_samples``). Continuous measurements
    (also mostly distinct) are not flagged: they are not integer-valued. Returns one dict per flagged
    column: ``column``, ``n_unique``, ``unique_fraction``, ``range`` (max - min) and
    ``range_share`` (its share of the sum of all columns' ranges, i.e. how much it weighs unscaled)."""
    if not 0.0 < min_unique_fraction <= 1.0:
        raise ValueError(f"min_unique_fraction must be in (0, 1], got {min_unique_fraction!r}")
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    if X.ndim != 2 or n < min_samples:
        return []
    integral = np.all(np.isfinite(X) & (X == np.round(X)), axis=0)
    cand = np.flatnonzero(integral)
    if cand.size == 0:
        return []
    ranges = X.max(axis=0) - X.min(axis=0)
    total = float(ranges.sum()) or 1.0
    srt = np.sort(X[:, cand], axis=0)
    n_unique = 1 + np.count_nonzero(np.diff(srt, axis=0), axis=0)
    out = []
    for j, u in zip(cand, n_unique):
        if u >= min_unique_fraction * n:
            out.append(
                {
                    "column": int(j),
                    "n_unique": int(u),
                    "unique_fraction": float(u / n),
                    "range": float(ranges[j]),
                    "range_share": float(ranges[j] / total),
                }
            )
    return out


SCALES = ("minmax", "standardize", "none")
MINMAX_MODES = ("auto", "pixel", "per_feature", "global", "declared")

#: what each scaling reads: the data's own statistics (outside any epsilon) or public numbers
_SCALING_READS = {
    "pixel": ("public", "each value divided by the data set's declared pixel range"),
    "declared": ("public", "min-max scaling by bounds declared in the parameters, values outside them clipped"),
    "per_feature": ("data", "min-max scaling by each feature's min and max over the whole data set"),
    "global": ("data", "min-max scaling by the min and max over all values of the whole data set"),
    "standardize": ("data", "standardization by each feature's mean and standard deviation over the whole data set"),
    "none": ("public", "no scaling: the values as loaded"),
}


#: how reports name each scaling in a sentence about a data set ("scaling of mine: ...")
SCALING_WORDS = {
    "pixel": "divided by its declared pixel range",
    "declared": "min-max by declared bounds",
    "per_feature": "min-max by each feature's own min and max",
    "global": "min-max by the min and max of all its values",
    "standardize": "standardized by each feature's own mean and standard deviation",
    "none": "not scaled",
}


def resolve_minmax_mode(minmax_mode: str, bounds, declares_pixels: bool) -> str:
    """The min-max mode that ``"auto"`` stands for: ``"declared"`` with ``bounds``, else ``"pixel"``
    for a data set that declares its pixel range, else ``"per_feature"``; any other mode as given."""
    if minmax_mode != "auto":
        return minmax_mode
    if bounds is not None:
        return "declared"
    return "pixel" if declares_pixels else "per_feature"


def scaling_statistics(meta: dict | None) -> dict | None:
    """What a data set's scaling read (``meta["preprocess"]`` of :func:`preprocess`): ``{"scaling"``
    (the min-max mode, ``standardize`` or ``none``), ``"reads": "public" | "data", "what"}``; None when the data set was not scaled by :func:`preprocess`.

    ``reads == "data"``: the scaling read statistics of the whole data set (its min and max, or mean and
    standard deviation) before any protocol ran. No method releases them and no epsilon covers them;
    a run that must be private end to end scales by public bounds instead (``minmax_mode="declared"``).
    """
    info = (meta or {}).get("preprocess")
    if not info:
        return None
    key = info.get("minmax_mode") if info.get("scale") == "minmax" else info.get("scale")
    return scaling_of(key) if key in _SCALING_READS else None


def scaling_of(key: str) -> dict:
    """``{"scaling": key, "reads", "what"}`` of a scaling (a min-max mode, ``standardize`` or ``none``)."""
    reads, what = _SCALING_READS[key]
    return {"scaling": key, "reads": reads, "what": what}


def _bound_pair(v, where: str = "") -> tuple[float, float]:
    """``(lo, hi)`` of one declared pair (a ValueError naming ``bounds<where>`` otherwise)."""
    if (
        not isinstance(v, (list, tuple))
        or len(v) != 2
        or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) for x in v)
    ):
        raise ValueError(f"bounds{where} must be a pair of finite numbers [lo, hi], got {v!r}")
    if not v[1] > v[0]:
        raise ValueError(f"bounds{where}: hi must be above lo, got {list(v)!r}")
    return float(v[0]), float(v[1])


def _parsed_bounds(bounds) -> tuple[str, object]:
    """Declared ``bounds`` checked pair by pair, as ``("one", pair)``, ``("list", [pairs])`` or
    ``("names", {name: pair})`` (a ValueError naming what is wrong)."""
    if isinstance(bounds, dict):
        return "names", {str(name): _bound_pair(v, f"[{name!r}]") for name, v in bounds.items()}
    if isinstance(bounds, (list, tuple)) and len(bounds) == 2 and not isinstance(bounds[0], (list, tuple)):
        return "one", _bound_pair(bounds)
    if isinstance(bounds, (list, tuple)):
        return "list", [_bound_pair(v, f"[{j}]") for j, v in enumerate(bounds)]
    raise ValueError(
        f"bounds must be [lo, hi], a list of them per feature or a mapping by feature name, got {bounds!r}"
    )


def check_bounds_values(bounds) -> None:
    """The checks of declared ``bounds`` that need no data (every pair finite with ``hi > lo``); the
    number of pairs and the names are checked against the data by :func:`declared_bounds`."""
    _parsed_bounds(bounds)


def declared_bounds(bounds, m: int, features=None) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature ``(lo, hi)`` arrays from declared ``bounds``: one pair ``[lo, hi]`` for every feature,
    a list of ``m`` pairs, or a mapping ``{feature name: [lo, hi]}`` that names every feature of a
    table (``features``: its column names). A ValueError names what is wrong."""
    kind, parsed = _parsed_bounds(bounds)
    if kind == "names":
        if features is None:
            raise ValueError("bounds given by feature name need a table with named columns; give a list instead")
        names = [str(f) for f in features]
        unknown = sorted(set(parsed) - set(names))
        missing = [f for f in names if f not in parsed]
        if unknown or missing:
            raise ValueError(
                "bounds by feature name must name every feature once"
                + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                + (f"; missing: {', '.join(missing)}" if missing else "")
            )
        pairs = [parsed[f] for f in names]
    elif kind == "one":
        pairs = [parsed] * m
    else:
        if len(parsed) != m:
            raise ValueError(
                f"bounds: one [lo, hi] for all features or one per feature ({m}), got {len(parsed)} entries"
            )
        pairs = parsed
    lo, hi = (np.array(v, dtype=np.float64) for v in zip(*pairs))
    return lo, hi


def preprocess(ds: Dataset, scale: str = "minmax", *, minmax_mode: str = "auto", bounds=None) -> Dataset:
    """Scale the features of ``ds``.

    * ``scale="minmax"`` maps the features to [0, 1]. Which min and max, by ``minmax_mode``:

      - ``"auto"`` (default): ``"pixel"`` when the data set has images and declares its pixel range
        in ``meta["pixel_max"]`` (MNIST, Fashion-MNIST, CIFAR-10: 255, i.e. divide by 255; digits: 16),
        otherwise ``"per_feature"``.
      - ``"pixel"``: divide every value by ``meta["pixel_max"]`` (keeps the relative scale of pixels).
      - ``"per_feature"``: ``(x - min_j) / (max_j - min_j)`` per column j; a constant column becomes 0.
      - ``"global"``: one min and max over all values.
      - ``"declared"`` (the mode of ``"auto"`` when ``bounds`` are given): ``(x - lo_j) / (hi_j - lo_j)``
        with public bounds (:func:`declared_bounds`: one ``[lo, hi]``, one per feature, or by column
        name); values outside are clipped to them first (their count is in ``meta`` and logged), so
        the scaled features lie in [0, 1] as declared. The only min-max mode besides ``"pixel"`` that
        reads nothing of the data (:func:`scaling_statistics`).
    * ``scale="standardize"``: per feature, zero mean and unit (population) variance; a constant
      column becomes 0.
    * ``scale="none"``: unchanged.

    When the data set has images, they are rebuilt from the scaled ``X`` (``X`` is their flattening).
    ID-like columns of the unscaled data (:func:`id_like_columns`) are listed in
    ``meta["id_like_columns"]`` and logged as a warning.
    """
    check_scaling(scale, minmax_mode, bounds)
    X = ds.X.astype(np.float64)
    info: dict = {"scale": scale}
    ids = id_like_columns(X)
    if ids:
        logger.warning(
            "data set %r: %d ID-like column(s) (integer-valued, one distinct value per sample or nearly): %s; "
            "an identifier dominates every distance unless scaled and carries no cluster information; drop it",
            ds.name,
            len(ids),
            ", ".join(
                f"column {c['column']} ({c['n_unique']} distinct of {X.shape[0]}, "
                f"{100 * c['range_share']:.0f}% of the total feature range)"
                for c in ids
            ),
        )
    if scale == "minmax":
        mode = resolve_minmax_mode(minmax_mode, bounds, ds.images is not None and "pixel_max" in ds.meta)
        info["minmax_mode"] = mode
        if mode == "declared":
            lo, hi = declared_bounds(bounds, X.shape[1], ds.meta.get("features"))
            outside = int(np.count_nonzero((X < lo) | (X > hi)))
            if outside:
                logger.warning(
                    "data set %r: %d value(s) outside the declared bounds, clipped to them", ds.name, outside
                )
            X = (np.clip(X, lo, hi) - lo) / (hi - lo)
            info["bounds"] = bounds
            info["clipped_values"] = outside
        elif mode == "pixel":
            if "pixel_max" not in ds.meta:
                raise ValueError(
                    f"minmax_mode='pixel' needs meta['pixel_max'] in data set {ds.name!r}; "
                    "use 'per_feature' or 'global'"
                )
            X = X / float(ds.meta["pixel_max"])
        elif mode == "per_feature":
            lo, hi = X.min(axis=0), X.max(axis=0)
            span = hi - lo
            X = np.where(span > 0, (X - lo) / np.where(span > 0, span, 1.0), 0.0)
        else:  # global
            lo, hi = X.min(), X.max()
            X = (X - lo) / (hi - lo) if hi > lo else np.zeros_like(X)
    elif scale == "standardize":
        mu, sd = X.mean(axis=0), X.std(axis=0)
        X = np.where(sd > 0, (X - mu) / np.where(sd > 0, sd, 1.0), 0.0)

    images = None
    if ds.images is not None:
        images = X.reshape(ds.images.shape)
    meta = dict(ds.meta)
    meta["preprocess"] = info
    meta["id_like_columns"] = ids
    return Dataset(X=X, y=ds.y.copy(), name=ds.name, images=images, meta=meta)


def check_scaling(scale: str, minmax_mode: str = "auto", bounds=None) -> None:
    """The scaling settings, checked before any data are read (a ValueError naming the setting):
    ``scale`` and ``minmax_mode`` among the known ones; declared bounds go with min-max scaling in the
    ``"declared"`` mode (or ``"auto"``), that mode needs them, and every pair is finite with ``hi > lo``."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {list(SCALES)}, got {scale!r}")
    if minmax_mode not in MINMAX_MODES:
        raise ValueError(f"minmax_mode must be one of {list(MINMAX_MODES)}, got {minmax_mode!r}")
    if bounds is not None and (scale != "minmax" or minmax_mode not in ("auto", "declared")):
        raise ValueError(
            f"bounds are declared for min-max scaling (scale='minmax', minmax_mode 'auto' or 'declared'), "
            f"got scale={scale!r}, minmax_mode={minmax_mode!r}"
        )
    if bounds is None and minmax_mode == "declared":
        raise ValueError("minmax_mode='declared' needs bounds: [lo, hi], one pair per feature or by feature name")
    if bounds is not None:
        check_bounds_values(bounds)


def _check_count(name: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    return int(value)


def subsample(ds: Dataset, n_per_class: int | None = None, n_total: int | None = None, seed: int = 0) -> Dataset:
    """A seeded random subset of ``ds`` (without replacement).

    * ``n_per_class``: stratified, exactly ``n_per_class`` samples of every class.
    * ``n_total``: ``n_total`` samples drawn uniformly (not stratified).
    * Both ``None``: ``ds`` itself is returned.

    Give at most one of them. Asking for more than is available (more than the smallest class holds,
    or more than ``ds.n_samples``) raises a ValueError that names the parameter. The chosen samples keep
    their original order; arrays named in ``meta["per_sample_keys"]`` are subset too.
    Randomness: ``fedclust.rng.stream(seed, "subsample")`` (separate from the
    ``"data"`` stream of the synthetic generators). ``meta["subsample_index"]`` holds the chosen indices
    into ``ds``.
    """
    n_per_class = _check_count("n_per_class", n_per_class)
    n_total = _check_count("n_total", n_total)
    if n_per_class is None and n_total is None:
        return ds
    if n_per_class is not None and n_total is not None:
        raise ValueError(
            f"give either n_per_class or n_total, not both (got n_per_class={n_per_class}, n_total={n_total})"
        )
    if n_per_class is not None and not ds.labelled:
        raise DataError(
            f"n_per_class={n_per_class} draws per class, but data set {ds.name!r} has no labels: "
            "use n_total, or name the label column with dataset.options.label"
        )
    rng = stream(seed, "subsample")
    if n_per_class is not None:
        classes, counts = np.unique(ds.y, return_counts=True)
        if n_per_class > counts.min():
            c = classes[np.argmin(counts)]
            raise ValueError(
                f"n_per_class={n_per_class} is more than available: class {c} of data set {ds.name!r} "
                f"has only {counts.min()} samples (allowed: 1..{counts.min()})"
            )
        # one random key per sample, then the n_per_class smallest keys within each class:
        # a stratified sample without replacement, vectorized over classes.
        keys = rng.random(ds.n_samples)
        order = np.lexsort((keys, ds.y))  # by class, then by random key
        start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.arange(ds.n_samples) - np.repeat(start, counts)
        idx = np.sort(order[rank < n_per_class])
        info = {"n_per_class": n_per_class, "seed": seed}
    else:
        if n_total > ds.n_samples:
            raise ValueError(
                f"n_total={n_total} is more than available: data set {ds.name!r} has {ds.n_samples} "
                f"samples (allowed: 1..{ds.n_samples})"
            )
        idx = np.sort(rng.choice(ds.n_samples, size=n_total, replace=False))
        info = {"n_total": n_total, "seed": seed}
    out = ds.subset(idx)
    for key in ds.meta.get("per_sample_keys", ()):  # per-sample arrays kept in meta follow the subset
        if out.meta.get(key) is not None:
            out.meta[key] = np.asarray(out.meta[key])[idx]
    out.meta["subsample"] = info
    out.meta["subsample_index"] = idx
    return out
