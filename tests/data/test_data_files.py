"""File readers: real MNIST / FedSC files, and corrupt, truncated, mismatched or missing fake files."""

from __future__ import annotations

import gzip
import pickle

import numpy as np
import pytest
import scipy.io
from datatest_helpers import (
    FEDSC_DIR,
    MNIST_DIR,
    MNIST_IMAGES,
    MNIST_LABELS,
    idx_bytes,
    need,
    write_cifar_batch,
    write_idx,
)

from fedclust.data.files import load_cifar10, load_idx, load_mat, load_mnist_folder
from fedclust.data.preprocess import preprocess

MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


# ------------------------------------------------------------------ real MNIST
@pytest.mark.external_data
def test_mnist_test_set_real_file():
    need(MNIST_IMAGES, MNIST_LABELS)
    ds = load_idx(MNIST_IMAGES, MNIST_LABELS)
    assert ds.X.shape == (10000, 784) and ds.X.dtype == np.float32
    assert ds.images.shape == (10000, 28, 28)
    assert np.array_equal(ds.X, ds.images.reshape(10000, -1))
    assert ds.y.dtype == np.int64 and set(np.unique(ds.y)) == set(range(10))
    assert np.bincount(ds.y).tolist() == MNIST_TEST_COUNTS  # the official test-set class counts
    assert ds.X.min() == 0 and ds.X.max() == 255
    scaled = preprocess(ds, "minmax")
    assert scaled.X.min() == 0.0 and scaled.X.max() == 1.0
    np.testing.assert_allclose(scaled.X, ds.X / 255.0, rtol=1e-6)
    # the folder loader finds the same files by their standard names
    ds2 = load_mnist_folder(MNIST_DIR, split="test")
    assert np.array_equal(ds2.X, ds.X) and np.array_equal(ds2.y, ds.y)


@pytest.mark.external_data
def test_mnist_folder_train_split_missing_names_the_file(tmp_path):
    need(MNIST_IMAGES)
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        load_mnist_folder(tmp_path, split="train")
    with pytest.raises(ValueError, match="split"):
        load_mnist_folder(tmp_path, split="validation")


# ------------------------------------------------------------------ IDX on fake files
@pytest.fixture
def small_idx():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8), np.array([3, 1, 4, 1, 5], np.uint8)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_raw_and_gz_roundtrip(tmp_path, small_idx, gz):
    imgs, labs = small_idx
    ip = write_idx(tmp_path / "img", imgs, 2051, gz)
    lp = write_idx(tmp_path / "lab", labs, 2049, gz)
    ds = load_idx(ip, lp)
    assert np.array_equal(ds.images, imgs.astype(np.float32))
    assert np.array_equal(ds.y, labs)
    assert np.array_equal(ds.X[2], imgs[2].ravel())


def test_idx_truncated_names_path_and_bytes(tmp_path, small_idx):
    imgs, labs = small_idx
    full = idx_bytes(imgs, 2051)
    ip = tmp_path / "img-truncated"
    ip.write_bytes(full[:-100])
    lp = write_idx(tmp_path / "lab", labs, 2049)
    with pytest.raises(ValueError) as e:
        load_idx(ip, lp)
    msg = str(e.value)
    assert str(ip) in msg and f"expected {len(full)} bytes" in msg and f"got {len(full) - 100}" in msg


def test_idx_truncated_gzip_stream(tmp_path, small_idx):
    imgs, labs = small_idx
    gz = gzip.compress(idx_bytes(imgs, 2051))
    ip = tmp_path / "img.gz"
    ip.write_bytes(gz[: len(gz) // 2])
    lp = write_idx(tmp_path / "lab.gz", labs, 2049, gz=True)
    with pytest.raises(ValueError, match="img.gz.*truncated"):
        load_idx(ip, lp)


def test_idx_trailing_bytes_and_short_header(tmp_path, small_idx):
    imgs, labs = small_idx
    lp = write_idx(tmp_path / "lab", labs, 2049)
    ip = tmp_path / "img"
    ip.write_bytes(idx_bytes(imgs, 2051) + b"\0\0")
    with pytest.raises(ValueError, match="trailing"):
        load_idx(ip, lp)
    ip.write_bytes(idx_bytes(imgs, 2051)[:10])
    with pytest.raises(ValueError, match="header"):
        load_idx(ip, lp)


def test_idx_wrong_magic(tmp_path, small_idx):
    imgs, labs = small_idx
    ip = write_idx(tmp_path / "img", imgs, 2051)
    lp = write_idx(tmp_path / "lab", labs, 2049)
    with pytest.raises(ValueError, match="magic number 2049.*expected 2051"):
        load_idx(lp, ip)  # swapped


def test_idx_count_mismatch(tmp_path, small_idx):
    imgs, labs = small_idx
    ip = write_idx(tmp_path / "img", imgs, 2051)
    lp = write_idx(tmp_path / "lab", labs[:4], 2049)
    with pytest.raises(ValueError) as e:
        load_idx(ip, lp)
    msg = str(e.value)
    assert "5 images" in msg and "4 labels" in msg and str(ip) in msg and str(lp) in msg


def test_idx_image_size_checked(tmp_path):
    ip = write_idx(tmp_path / "img", np.zeros((2, 32, 32), np.uint8), 2051)
    lp = write_idx(tmp_path / "lab", np.zeros(2, np.uint8), 2049)
    with pytest.raises(ValueError, match="32 x 32; expected 28 x 28"):
        load_idx(ip, lp)
    assert load_idx(ip, lp, image_shape=None).images.shape == (2, 32, 32)


def test_idx_missing_file(tmp_path, small_idx):
    imgs, _ = small_idx
    ip = write_idx(tmp_path / "img", imgs, 2051)
    missing = tmp_path / "nope-labels-idx1-ubyte.gz"
    with pytest.raises(FileNotFoundError) as e:
        load_idx(ip, missing)
    msg = str(e.value)
    assert str(missing) in msg and "IDX1 label file" in msg and "downloads nothing" in msg


# ------------------------------------------------------------------ real .mat (FedSC)
@pytest.mark.external_data
@pytest.mark.parametrize(
    "fname, shape, counts",
    [
        ("Iris_tsne.mat", (150, 4), [50, 50, 50]),
        ("Bank_tsne.mat", (1372, 4), [762, 610]),
        ("COIL20_tsne.mat", (1440, 400), [72] * 20),
        ("Concentric_Circles.mat", (1258, 2), [629, 629]),
    ],
)
def test_fedsc_mat_real_files(fname, shape, counts):
    p = FEDSC_DIR / fname
    need(p)
    ds = load_mat(p)
    raw = scipy.io.loadmat(p)
    assert ds.X.shape == shape and ds.images is None
    np.testing.assert_allclose(ds.X[7], raw["X"][:, 7], rtol=1e-6)  # samples were columns
    assert np.bincount(ds.y).tolist() == counts  # labels remapped to 0..C-1
    assert np.array_equal(ds.meta["label_values"][ds.y], raw["Label"].ravel())


@pytest.mark.external_data
def test_concentric_circles_mat_noisy_copy_and_radii():
    p = FEDSC_DIR / "Concentric_Circles.mat"
    need(p)
    clean, noisy = load_mat(p), load_mat(p, x_key="Xn")
    assert noisy.X.shape == clean.X.shape and not np.allclose(noisy.X, clean.X)
    r = np.linalg.norm(clean.X, axis=1)
    assert abs(r[clean.y == 0].mean() - 2) < 0.1 and abs(r[clean.y == 1].mean() - 4) < 0.1


# ------------------------------------------------------------------ .mat on fake files
def test_mat_transpose_remap_and_errors(tmp_path):
    X = np.arange(12.0).reshape(3, 4)  # 3 features x 4 samples
    p = tmp_path / "toy.mat"
    scipy.io.savemat(p, {"X": X, "Label": np.array([[9], [5], [9], [7]])})
    ds = load_mat(p)
    assert np.array_equal(ds.X, X.T) and ds.y.tolist() == [2, 0, 2, 1]
    assert ds.meta["label_values"].tolist() == [5, 7, 9]
    # samples as rows: 3 rows but 4 labels -> mismatch named
    with pytest.raises(ValueError, match="4 labels.*3 samples"):
        load_mat(p, samples_as="rows")
    with pytest.raises(ValueError, match=r"no variable 'Xn' \(x_key\).*\['Label', 'X'\]"):
        load_mat(p, x_key="Xn")
    bad = tmp_path / "garbage.mat"
    bad.write_bytes(b"MATLAB 5.0 MAT-file" + b"\x00" * 20)
    with pytest.raises(ValueError, match="garbage.mat"):
        load_mat(bad)
    with pytest.raises(FileNotFoundError, match="missing.mat.*'X' and 'Label'"):
        load_mat(tmp_path / "missing.mat")


@pytest.mark.external_data
def test_mat_truncated_real_copy(tmp_path):
    p = FEDSC_DIR / "Iris_tsne.mat"
    need(p)
    raw = p.read_bytes()
    cut = tmp_path / "Iris_cut.mat"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="Iris_cut.mat"):
        load_mat(cut)


# ------------------------------------------------------------------ CIFAR-10 on fake batches
def test_cifar10_fake_test_batch_layout(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, size=(7, 3072), dtype=np.uint8)
    labels = [0, 9, 3, 3, 1, 2, 8]
    write_cifar_batch(tmp_path / "test_batch", data, labels)
    ds = load_cifar10(tmp_path, split="test")
    assert ds.X.shape == (7, 3072) and ds.images.shape == (7, 3, 32, 32)
    assert ds.y.tolist() == labels
    # channel c, row r, column q of image i is data[i, c*1024 + r*32 + q]
    assert ds.images[4, 2, 5, 17] == data[4, 2 * 1024 + 5 * 32 + 17]
    assert ds.images[0, 0, 31, 0] == data[0, 31 * 32]
    assert ds.meta["pixel_max"] == 255.0


def test_cifar10_train_concatenates_batches_and_parent_folder(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for i in range(1, 6):
        write_cifar_batch(folder / f"data_batch_{i}", np.full((2, 3072), i, np.uint8), [i, i])
    ds = load_cifar10(tmp_path, split="train")  # parent folder accepted
    assert ds.y.tolist() == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert np.array_equal(ds.X[:, 0], ds.y)


def test_cifar10_missing_truncated_and_bad_batches(tmp_path):
    data = np.zeros((3, 3072), np.uint8)
    for i in (1, 2, 4, 5):
        write_cifar_batch(tmp_path / f"data_batch_{i}", data, [0, 1, 2])
    with pytest.raises(FileNotFoundError, match="data_batch_3.*downloads nothing"):
        load_cifar10(tmp_path, split="train")
    p = write_cifar_batch(tmp_path / "test_batch", data, [0, 1, 2])
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 3])
    with pytest.raises(ValueError, match="test_batch.*truncated or corrupt"):
        load_cifar10(tmp_path, split="test")
    write_cifar_batch(p, np.zeros((3, 100), np.uint8), [0, 1, 2])
    with pytest.raises(ValueError, match=r"\(n, 3072\) uint8"):
        load_cifar10(tmp_path, split="test")
    write_cifar_batch(p, data, [0, 1])
    with pytest.raises(ValueError, match="3 rows but 'labels' has 2"):
        load_cifar10(tmp_path, split="test")


class _Evil:
    def __reduce__(self):
        import os

        return (os.getcwd, ())


def test_cifar10_refuses_pickles_that_call_functions(tmp_path):
    with open(tmp_path / "test_batch", "wb") as f:
        pickle.dump({b"data": _Evil(), b"labels": [0]}, f)
    with pytest.raises(ValueError, match="refusing to load"):
        load_cifar10(tmp_path, split="test")
