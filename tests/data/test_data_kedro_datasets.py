"""Kedro dataset classes: load a fedclust Dataset, refuse to save, fail clearly on missing files."""

from __future__ import annotations

import numpy as np
import pytest
from datatest_helpers import FEDSC_DIR, MNIST_IMAGES, MNIST_LABELS, need, write_cifar_batch, write_idx
from kedro.io import DataCatalog, DatasetError

from fedclust.data.base import Dataset
from fedclust.pipelines.datasets import CIFAR10Dataset, IDXDataset, MatDataset


@pytest.mark.external_data
def test_idx_dataset_real_mnist_and_read_only():
    need(MNIST_IMAGES, MNIST_LABELS)
    ds = IDXDataset(images_filepath=str(MNIST_IMAGES), labels_filepath=str(MNIST_LABELS))
    assert ds.exists()
    data = ds.load()
    assert isinstance(data, Dataset) and data.X.shape == (10000, 784) and data.images.shape[1:] == (28, 28)
    with pytest.raises(DatasetError, match="read-only"):
        ds.save(data)


def test_idx_dataset_missing_and_truncated(tmp_path):
    imgs = np.zeros((3, 28, 28), np.uint8)
    ip = write_idx(tmp_path / "img", imgs, 2051)
    ds = IDXDataset(images_filepath=str(ip), labels_filepath=str(tmp_path / "labels.gz"))
    assert not ds.exists()
    with pytest.raises(DatasetError, match="labels.gz: file not found"):
        ds.load()
    ip.write_bytes(ip.read_bytes()[:-5])
    write_idx(tmp_path / "labels.gz", np.zeros(3, np.uint8), 2049, gz=True)
    with pytest.raises(DatasetError, match="truncated"):
        ds.load()


@pytest.mark.external_data
def test_mat_dataset_through_catalog_config():
    need(FEDSC_DIR / "Iris_tsne.mat")
    catalog = DataCatalog.from_config(
        {
            "iris_raw": {
                "type": "fedclust.pipelines.datasets.MatDataset",
                "filepath": str(FEDSC_DIR / "Iris_tsne.mat"),
            },
        }
    )
    data = catalog.load("iris_raw")
    assert data.X.shape == (150, 4) and np.bincount(data.y).tolist() == [50, 50, 50]
    with pytest.raises(DatasetError, match="read-only"):
        catalog.save("iris_raw", data)
    assert "Iris_tsne.mat" in repr(MatDataset(filepath=str(FEDSC_DIR / "Iris_tsne.mat")))


def test_cifar10_dataset_fake_batch(tmp_path):
    data = np.arange(2 * 3072, dtype=np.int64).reshape(2, 3072).astype(np.uint8)
    write_cifar_batch(tmp_path / "test_batch", data, [4, 7])
    ds = CIFAR10Dataset(folder=str(tmp_path), split="test")
    out = ds.load()
    assert out.images.shape == (2, 3, 32, 32) and out.y.tolist() == [4, 7]
    with pytest.raises(DatasetError, match="read-only"):
        ds.save(out)
    with pytest.raises(DatasetError, match="data_batch_1"):
        CIFAR10Dataset(folder=str(tmp_path), split="train").load()
    with pytest.raises(DatasetError, match="split"):
        CIFAR10Dataset(folder=str(tmp_path), split="valid")
