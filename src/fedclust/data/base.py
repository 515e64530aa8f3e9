"""The in-memory dataset every loader and generator returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedclust.errors import DataError


def _int_labels(y, name: str) -> np.ndarray:
    """``y`` as int64 class labels; a missing (NaN), infinite or fractional label is an error, not a class."""
    y = np.asarray(y)
    if y.dtype.kind == "f":
        bad = ~np.isfinite(y)
        if bad.any():
            raise ValueError(
                f"Dataset {name!r}: y holds {int(bad.sum())} missing (NaN) or infinite label(s), "
                f"first at sample {int(np.flatnonzero(bad)[0])}; drop or label those samples"
            )
        frac = y != np.round(y)
        if frac.any():
            raise ValueError(
                f"Dataset {name!r}: y holds non-integer label(s), e.g. {y[frac][0]!r} at sample "
                f"{int(np.flatnonzero(frac)[0])}; labels must be class numbers"
            )
    elif y.dtype.kind not in "iub":
        raise ValueError(f"Dataset {name!r}: y must hold integer class labels, got dtype {y.dtype}")
    return y.astype(np.int64, copy=False)


@dataclass
class Dataset:
    """Features, labels and (where the source has them) images.

    * ``X``: (n_samples, n_features) float32, rows are samples.
    * ``y``: (n_samples,) int64 labels, 0..n_classes-1. An unlabelled data set is made with
      ``y=None``: ``y`` is then all zeros, ``labelled`` is False (``meta["labelled"]``) and
      ``n_classes`` raises a :class:`~fedclust.errors.DataError` (the number of clusters must be
      given, it cannot be read from labels).
    * ``images``: (n_samples, H, W) or (n_samples, C, H, W) float32 when the source is images, else None.
      ``X`` is then the flattened image.
    * ``meta``: free-form facts (source path, preprocessing, true parameters of a synthetic model...).
    """

    X: np.ndarray
    y: np.ndarray | None = None
    name: str = ""
    images: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.X = np.ascontiguousarray(self.X, dtype=np.float32)
        if self.y is None:
            self.y = np.zeros(self.X.shape[0] if self.X.ndim else 0, dtype=np.int64)
            self.meta = {**self.meta, "labelled": False}
        self.y = _int_labels(self.y, self.name)
        if self.X.ndim != 2:
            raise ValueError(f"Dataset {self.name!r}: X must be 2-D, got shape {self.X.shape}")
        if self.y.shape != (self.X.shape[0],):
            raise ValueError(f"Dataset {self.name!r}: y has shape {self.y.shape}, expected ({self.X.shape[0]},)")
        if self.images is not None:
            self.images = np.asarray(self.images, dtype=np.float32)
            if self.images.shape[0] != self.X.shape[0]:
                raise ValueError(f"Dataset {self.name!r}: images and X differ in number of samples")

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def labelled(self) -> bool:
        """Whether ``y`` holds true class labels (False for a data set loaded without labels)."""
        return bool(self.meta.get("labelled", True))

    @property
    def labels(self) -> np.ndarray | None:
        """``y``, or None for an unlabelled data set (what the methods' ``y=`` argument takes)."""
        return self.y if self.labelled else None

    @property
    def n_classes(self) -> int:
        if not self.labelled:
            raise DataError(
                f"data set {self.name!r} has no labels, so the number of clusters cannot default to its "
                "number of classes: set k in the method's train parameters (e.g. fed_dp_kmeans.train.k=3), "
                "or name the label column with dataset.options.label"
            )
        return int(np.unique(self.y).size)

    def subset(self, idx) -> "Dataset":
        idx = np.asarray(idx)
        return Dataset(
            X=self.X[idx],
            y=self.y[idx],
            name=self.name,
            images=None if self.images is None else self.images[idx],
            meta=dict(self.meta),
        )
