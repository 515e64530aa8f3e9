"""scikit-learn's bundled data sets (no download needed): digits, iris, wine and breast_cancer.

Each loader returns a :class:`~fedclust.data.base.Dataset` with ``X`` float32 (rows = samples) in the
raw units of the source. ``digits`` also carries its 8x8 images (pixel values 0..16, as shipped).
Scaling is done separately by :func:`fedclust.data.preprocess.preprocess`.
"""

from __future__ import annotations

from fedclust.data.base import Dataset

__all__ = ["load_digits", "load_iris", "load_wine", "load_breast_cancer", "BUILTIN_LOADERS"]


def load_digits() -> Dataset:
    """scikit-learn's handwritten digits: 1797 samples, 64 features (8x8 images, values 0..16), 10 classes.

    ``images`` has shape (1797, 8, 8); ``meta["pixel_max"] = 16`` so that min-max scaling of images
    divides by 16.
    """
    from sklearn.datasets import load_digits  # on first use: sklearn costs a second at every kedro start

    b = load_digits()
    return Dataset(
        X=b.data,
        y=b.target,
        name="digits",
        images=b.images,
        meta={"source": "sklearn.datasets.load_digits", "pixel_max": 16.0},
    )


def _sklearn_table(name: str) -> Dataset:
    """scikit-learn's bundled table ``load_<name>``: its data, target and feature names."""
    from sklearn import datasets  # on first use: sklearn costs a second at every kedro start

    b = getattr(datasets, f"load_{name}")()
    return Dataset(
        X=b.data,
        y=b.target,
        name=name,
        meta={"source": f"sklearn.datasets.load_{name}", "feature_names": list(b.feature_names)},
    )


def load_iris() -> Dataset:
    """scikit-learn's Iris: 150 samples, 4 features, 3 classes (50 each)."""
    return _sklearn_table("iris")


def load_wine() -> Dataset:
    """scikit-learn's Wine: 178 samples, 13 features, 3 classes (59/71/48)."""
    return _sklearn_table("wine")


def load_breast_cancer() -> Dataset:
    """scikit-learn's Breast Cancer Wisconsin (diagnostic): 569 samples, 30 features, 2 classes (212/357)."""
    return _sklearn_table("breast_cancer")


#: name -> zero-argument loader
BUILTIN_LOADERS = {
    "digits": load_digits,
    "iris": load_iris,
    "wine": load_wine,
    "breast_cancer": load_breast_cancer,
}
