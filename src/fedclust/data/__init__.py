"""Loaders (scikit-learn built-ins, IDX, .mat, CIFAR-10, CSV, Parquet, .npz), synthetic generators and preprocessing.

Entry points: :func:`load_dataset` / :func:`prepare_dataset` (by name, see
:mod:`fedclust.data.registry`), the generators of :mod:`fedclust.data.synthetic`, the file readers of
:mod:`fedclust.data.files`, and :func:`preprocess` / :func:`subsample`.
"""

from fedclust.data.base import Dataset
from fedclust.data.preprocess import preprocess, subsample
from fedclust.data.registry import DATASET_NAMES, load_dataset, prepare_dataset
from fedclust.data.synthetic import RegressionData

__all__ = [
    "Dataset",
    "RegressionData",
    "load_dataset",
    "prepare_dataset",
    "preprocess",
    "subsample",
    "DATASET_NAMES",
]
