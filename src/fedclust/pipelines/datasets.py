"""Kedro dataset classes for the raw data files (read-only).

They wrap the readers of :mod:`fedclust.data.files` and return a :class:`fedclust.data.base.Dataset`.
Relative paths are resolved against the working directory (the project root under ``kedro run``).
Example ``catalog.yml`` entries::

    mnist_test:
      type: fedclust.pipelines.datasets.IDXDataset
      images_filepath: ../shared/data/mnist/t10k-images-idx3-ubyte.gz
      labels_filepath: ../shared/data/mnist/t10k-labels-idx1-ubyte.gz

    fedsc_iris:
      type: fedclust.pipelines.datasets.MatDataset
      filepath: ../shared/data/fedsc/Iris_tsne.mat

    cifar10_train:
      type: fedclust.pipelines.datasets.CIFAR10Dataset
      folder: data/01_raw/cifar-10-batches-py
      split: train

    my_table:
      type: fedclust.pipelines.datasets.TableDataset
      filepath: data/01_raw/mine.csv     # or .parquet (file_format: parquet)
      label: label                       # the column of classes; absent: unlabelled
      load_args: {sep: ";"}              # passed to kedro-datasets (pandas.read_csv)

A missing, truncated or mismatched file fails the load with a :class:`kedro.io.DatasetError` whose
message carries the reader's message (the path and what was expected). ``save`` always raises:
raw data is read-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset, DatasetError

from fedclust.data.base import Dataset
from fedclust.data.files import load_cifar10, load_idx, load_mat, table_to_dataset

__all__ = ["IDXDataset", "MatDataset", "CIFAR10Dataset", "TableDataset"]


class _ReadOnlyDataset(AbstractDataset[Dataset, Dataset]):
    def _save(self, data: Dataset) -> None:
        raise DatasetError(f"{type(self).__name__} is read-only: raw data files are never written")


class IDXDataset(_ReadOnlyDataset):
    """MNIST / Fashion-MNIST images and labels from two IDX files (``.gz`` or raw)."""

    def __init__(
        self, images_filepath: str, labels_filepath: str, name: str = "mnist", metadata: dict[str, Any] | None = None
    ):
        self._images = Path(images_filepath)
        self._labels = Path(labels_filepath)
        self._name = name
        self.metadata = metadata

    def _load(self) -> Dataset:
        return load_idx(self._images, self._labels, name=self._name)

    def _describe(self) -> dict[str, Any]:
        return {"images_filepath": str(self._images), "labels_filepath": str(self._labels), "name": self._name}

    def _exists(self) -> bool:
        return self._images.is_file() and self._labels.is_file()


class MatDataset(_ReadOnlyDataset):
    """A MATLAB ``.mat`` file with samples as columns of ``x_key`` and labels in ``label_key``."""

    def __init__(
        self,
        filepath: str,
        x_key: str = "X",
        label_key: str = "Label",
        samples_as: str = "columns",
        metadata: dict[str, Any] | None = None,
    ):
        self._filepath = Path(filepath)
        self._x_key = x_key
        self._label_key = label_key
        self._samples_as = samples_as
        self.metadata = metadata

    def _load(self) -> Dataset:
        return load_mat(self._filepath, x_key=self._x_key, label_key=self._label_key, samples_as=self._samples_as)

    def _describe(self) -> dict[str, Any]:
        return {
            "filepath": str(self._filepath),
            "x_key": self._x_key,
            "label_key": self._label_key,
            "samples_as": self._samples_as,
        }

    def _exists(self) -> bool:
        return self._filepath.is_file()


class CIFAR10Dataset(_ReadOnlyDataset):
    """CIFAR-10 python batches from ``folder`` (the ``cifar-10-batches-py`` folder or its parent)."""

    def __init__(self, folder: str, split: str = "train", metadata: dict[str, Any] | None = None):
        if split not in ("train", "test"):
            raise DatasetError(f"CIFAR10Dataset: split must be 'train' or 'test', got {split!r}")
        self._folder = Path(folder)
        self._split = split
        self.metadata = metadata

    def _load(self) -> Dataset:
        return load_cifar10(self._folder, split=self._split)

    def _describe(self) -> dict[str, Any]:
        return {"folder": str(self._folder), "split": self._split}

    def _exists(self) -> bool:
        return self._folder.is_dir()


class TableDataset(_ReadOnlyDataset):
    """A table (CSV or Parquet) read through kedro-datasets' ``pandas.CSVDataset`` /
    ``pandas.ParquetDataset`` and turned into a :class:`Dataset` by
    :func:`fedclust.data.files.table_to_dataset`, the same conversion as the library's
    ``dataset.name: csv`` / ``parquet``: both give the same arrays.

    ``file_format``: ``csv`` or ``parquet`` (default: from the file's suffix); ``label``: the
    column of classes (None: unlabelled); ``features``: the feature columns (None: every numeric
    column but the label); ``name``: the data set's display name (default: the file's stem);
    ``load_args``: passed to the kedro-datasets class (and so to pandas)."""

    _FORMATS = ("csv", "parquet")

    def __init__(
        self,
        filepath: str,
        file_format: str | None = None,
        label: str | None = None,
        features: list[str] | None = None,
        name: str | None = None,
        load_args: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ):
        self._filepath = Path(filepath)
        fmt = file_format or self._filepath.suffix.lstrip(".").lower()
        if fmt not in self._FORMATS:
            raise DatasetError(
                f"TableDataset: file_format must be one of {list(self._FORMATS)} (or a .csv / .parquet "
                f"file), got {fmt!r} for {filepath}"
            )
        self._format = fmt
        self._label = label
        self._features = features
        self._name = name or self._filepath.stem
        self._load_args = dict(load_args or {})
        self.metadata = metadata

    def _load(self) -> Dataset:
        if not self._filepath.is_file():
            raise FileNotFoundError(f"{self._filepath}: file not found; expected a {self._format} table")
        # kedro-datasets' pandas package imports every pandas dataset it has (about 0.3 s, BigQuery's
        # client included): loaded when a table is read, not wherever the catalog is built
        from kedro_datasets.pandas import CSVDataset, ParquetDataset

        cls = CSVDataset if self._format == "csv" else ParquetDataset
        reader = cls(filepath=str(self._filepath), load_args=self._load_args)
        frame = reader.load()
        return table_to_dataset(
            frame, label=self._label, features=self._features, name=self._name, source=str(self._filepath)
        )

    def _describe(self) -> dict[str, Any]:
        return {
            "filepath": str(self._filepath),
            "file_format": self._format,
            "label": self._label,
            "features": self._features,
            "name": self._name,
        }

    def _exists(self) -> bool:
        return self._filepath.is_file()
