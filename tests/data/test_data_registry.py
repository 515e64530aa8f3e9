"""load_dataset / prepare_dataset dispatch, options and errors."""

from __future__ import annotations

import numpy as np
import pytest
from datatest_helpers import FEDSC_DIR, MNIST_DIR, MNIST_IMAGES, need

from fedclust.data.registry import DATASET_NAMES, load_dataset, prepare_dataset


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError) as e:
        load_dataset("imagenet")
    for nm in ("digits", "mnist", "cifar10", "fedsc_coil20", "linear_model"):
        assert nm in str(e.value)
    assert set(DATASET_NAMES) >= {
        "digits",
        "iris",
        "wine",
        "gaussian_mixture",
        "linear_model",
        "concentric_circles",
        "mnist",
        "fashion_mnist",
        "cifar10",
        "mat",
        "fedsc_iris",
        "fedsc_bank",
        "fedsc_coil20",
        "fedsc_circles",
    }


@pytest.mark.parametrize(
    "name, shape, n_classes", [("digits", (1797, 64), 10), ("iris", (150, 4), 3), ("wine", (178, 13), 3)]
)
def test_builtins(name, shape, n_classes):
    ds = load_dataset(name)
    assert ds.X.shape == shape and ds.n_classes == n_classes and ds.meta["dataset"] == name
    if name == "digits":
        assert ds.images.shape == (1797, 8, 8) and np.array_equal(ds.images[5].ravel(), ds.X[5])
    with pytest.raises(ValueError, match="takes no options"):
        load_dataset(name, k=3)


def test_synthetic_by_name_seeded_and_options_checked():
    a = load_dataset("gaussian_mixture", seed=1, n_samples=90, k=3, separation=8.0)
    b = load_dataset("gaussian_mixture", seed=1, n_samples=90, k=3, separation=8.0)
    c = load_dataset("gaussian_mixture", seed=2, n_samples=90, k=3, separation=8.0)
    assert a.X.shape == (90, 2) and np.array_equal(a.X, b.X) and not np.array_equal(a.X, c.X)
    lm = load_dataset("linear_model", seed=0, n_samples=40, n_features=7, k=3, snr_db=5)
    assert lm.X.shape == (40, 7) and lm.meta["W"].shape == (7, 3)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['n_cluster'\].*separation"):
        load_dataset("gaussian_mixture", n_cluster=3)
    reg = load_dataset("mixed_regression_1d", scenario="imbalanced", n_clients=8, n_per_client=2)
    assert reg.X.shape == (16, 1) and "target" in reg.meta


def test_file_names_need_path():
    with pytest.raises(ValueError, match="'mnist' needs path="):
        load_dataset("mnist")
    with pytest.raises(ValueError, match="'fedsc_iris' needs path="):
        load_dataset("fedsc_iris")


@pytest.mark.external_data
def test_fedsc_names_and_mat_by_file():
    need(FEDSC_DIR / "COIL20_tsne.mat", FEDSC_DIR / "Concentric_Circles.mat")
    coil = load_dataset("fedsc_coil20", path=FEDSC_DIR)
    assert coil.X.shape == (1440, 400) and coil.n_classes == 20 and coil.name == "fedsc_coil20"
    same = load_dataset("mat", path=FEDSC_DIR / "COIL20_tsne.mat")
    assert np.array_equal(same.X, coil.X)
    noisy = load_dataset("fedsc_circles", path=FEDSC_DIR, x_key="Xn")
    clean = load_dataset("fedsc_circles", path=FEDSC_DIR / "Concentric_Circles.mat")
    assert noisy.X.shape == clean.X.shape == (1258, 2) and not np.allclose(noisy.X, clean.X)


@pytest.mark.external_data
def test_prepare_dataset_mnist_subsample_and_scale():
    need(MNIST_IMAGES)
    ds = prepare_dataset("mnist", path=MNIST_DIR, seed=0, scale="minmax", n_per_class=20)
    assert ds.X.shape == (200, 784) and np.bincount(ds.y).tolist() == [20] * 10
    assert ds.X.min() >= 0 and ds.X.max() <= 1 and ds.images.shape == (200, 28, 28)
    assert ds.meta["preprocess"]["minmax_mode"] == "pixel"
    again = prepare_dataset("mnist", path=MNIST_DIR, seed=0, scale="minmax", n_per_class=20)
    assert np.array_equal(ds.X, again.X)


def test_prepare_dataset_options_dict_and_errors_before_loading():
    ds = prepare_dataset(
        "concentric_circles", seed=3, scale="standardize", n_total=50, options={"n_samples": 200, "noise": 0.05}
    )
    assert ds.n_samples == 50
    np.testing.assert_allclose(ds.X.mean(0), 0, atol=1e-5)
    with pytest.raises(ValueError, match="scale must be one of"):
        prepare_dataset("mnist", path="does/not/exist", scale="unit")  # caught before the file
    with pytest.raises(ValueError, match="n_per_class must be a positive integer"):
        prepare_dataset("iris", n_per_class=-1)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        prepare_dataset("mnist", path="does/not/exist", seed=-2)
    with pytest.raises(ValueError, match="minmax_mode"):
        prepare_dataset("mnist", path="does/not/exist", minmax_mode="pixels")
    with pytest.raises(ValueError, match="n_per_class=51"):
        prepare_dataset("iris", n_per_class=51)
