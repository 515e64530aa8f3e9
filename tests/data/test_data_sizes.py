"""A data set's size is known before it is built (generators' options, built-ins, file headers), and
one that cannot fit in memory is refused with its estimate before a byte of it is generated or read."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.io

from fedclust.data.registry import load_dataset, prepare_dataset
from fedclust.data.sizes import Shape, dataset_shape, require_dataset_memory, subsampled
from fedclust.errors import user_message
from fedclust.memory import MemoryEstimateError


@pytest.mark.parametrize(
    "name, options",
    [
        ("digits", {}),
        ("iris", {}),
        ("wine", {}),
        ("gaussian_mixture", {"n_samples": 321, "n_features": 7, "k": 4}),
        ("gaussian_mixture", {}),
        ("linear_model", {"n_samples": 50, "n_features": 30, "k": 3}),
        ("concentric_circles", {"n_samples": 99}),
        ("mixed_linear_regression", {"n_samples": 40, "n_features": 3}),
        ("mixed_regression_1d", {"n_clients": 5, "n_per_client": 7}),
    ],
)
def test_the_shape_of_a_built_in_or_generated_data_set_is_its_shape(name, options):
    ds = load_dataset(name, **options)
    shape = dataset_shape(name, options=options)
    assert (shape.n, shape.m) == ds.X.shape
    assert shape.classes == ds.n_classes


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("sizes")
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(240, 9)), rng.integers(0, 3, 240)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(9)]).assign(label=y)
    frame.to_csv(root / "t.csv", index=False)
    frame.to_parquet(root / "t.parquet")
    np.savez(root / "t.npz", X=X, y=y)
    scipy.io.savemat(root / "t.mat", {"X": X.T, "Label": y[:, None]})
    return root


@pytest.mark.parametrize("name, options", [("csv", {}), ("parquet", {}), ("npz", {}), ("mat", {})])
def test_the_shape_of_a_file_is_read_from_its_header(files, name, options):
    shape = dataset_shape(name, files / f"t.{name}", options)
    if name in ("csv", "parquet"):  # every column, the label included: an upper bound of the features
        assert shape.m == 10 and abs(shape.n - 240) <= 240 * 0.05  # a CSV's rows: from its first bytes
    else:
        assert (shape.n, shape.m) == (240, 9)


def test_an_unreadable_header_gives_no_shape_and_the_loader_says_why(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    assert dataset_shape("npz", tmp_path / "bad.npz") is None
    assert dataset_shape("npz", tmp_path / "missing.npz") is None


def test_a_generated_data_set_that_cannot_fit_is_refused_before_it_is_built():
    options = {"n_samples": 10**9, "n_features": 1000}
    with pytest.raises(MemoryEstimateError) as info:
        prepare_dataset("gaussian_mixture", options=options)  # would allocate 7.3 TiB: refused at once
    message = user_message(info.value)
    assert message.startswith(
        "dataset 'gaussian_mixture' (1,000,000,000 samples x 1,000 features) would need about 21.8 TiB"
    )
    assert "\n" not in message and "n_samples, n_features" in message


def test_a_file_that_cannot_fit_is_refused_with_its_estimate(files):
    # 240 x 9 float64 = 16.9 KiB, 3 copies: 50.6 KiB, refused where 10 KiB are available
    with pytest.raises(
        MemoryEstimateError, match=r"dataset 'npz' \(240 samples x 9 features\) would need about 50\.6 KiB"
    ):
        require_dataset_memory("npz", files / "t.npz", available=10 * 1024)
    assert require_dataset_memory("npz", files / "t.npz", available=10**6) == Shape(240, 9, 1)


def test_subsampling_bounds_the_samples():
    assert subsampled(Shape(1797, 64, 10), n_per_class=30) == Shape(300, 64, 10)
    assert subsampled(Shape(1797, 64, 10), n_total=100) == Shape(100, 64, 10)
