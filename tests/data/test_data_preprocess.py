"""Scaling and seeded subsampling."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.data.base import Dataset
from fedclust.data.builtin import load_digits, load_iris, load_wine
from fedclust.data.preprocess import preprocess, scaling_statistics, subsample
from fedclust.data.registry import planned_scaling, prepare_dataset
from fedclust.data.synthetic import mixed_regression_1d


def _toy():
    X = np.array([[1.0, 5.0, 2.0], [3.0, 5.0, -2.0], [2.0, 5.0, 0.0], [5.0, 5.0, 4.0]])
    return Dataset(X=X, y=[0, 1, 0, 1], name="toy")


def test_minmax_per_feature_hand_values():
    out = preprocess(_toy(), "minmax")
    expected = np.array([[0.0, 0, 4 / 6], [0.5, 0, 0], [0.25, 0, 2 / 6], [1, 0, 1]])
    np.testing.assert_allclose(out.X, expected, rtol=1e-6)  # constant column -> 0
    assert out.meta["preprocess"] == {"scale": "minmax", "minmax_mode": "per_feature"}


def test_minmax_pixel_mode_for_images_and_global_mode():
    d = load_digits()
    out = preprocess(d, "minmax")  # images with pixel_max 16 -> divide by 16
    assert out.meta["preprocess"]["minmax_mode"] == "pixel"
    np.testing.assert_allclose(out.X, d.X / 16.0, rtol=1e-6)
    np.testing.assert_allclose(out.images, d.images / 16.0, rtol=1e-6)
    assert out.X.min() >= 0 and out.X.max() <= 1
    g = preprocess(_toy(), "minmax", minmax_mode="global")
    np.testing.assert_allclose(g.X, (_toy().X + 2) / 7, rtol=1e-6)
    with pytest.raises(ValueError, match="pixel_max"):
        preprocess(_toy(), "minmax", minmax_mode="pixel")


def test_declared_bounds_scale_by_public_numbers_and_clip_what_lies_outside():
    toy = _toy()  # column 0: 1..5, column 1: 5, column 2: -2..4
    one = preprocess(toy, "minmax", bounds=[-2, 6])  # auto + bounds: the declared mode
    np.testing.assert_allclose(one.X, (toy.X + 2) / 8)
    assert one.meta["preprocess"] == {
        "scale": "minmax",
        "minmax_mode": "declared",
        "bounds": [-2, 6],
        "clipped_values": 0,
    }
    per = preprocess(toy, "minmax", minmax_mode="declared", bounds=[[0, 4], [0, 10], [-1, 1]])
    # column 0: 5 above 4; column 2: -2 below -1, 2 and 4 above 1 -> 4 values clipped
    assert per.meta["preprocess"]["clipped_values"] == 4
    expected = np.array([[0.25, 0.5, 1.0], [0.75, 0.5, 0.0], [0.5, 0.5, 0.5], [1.0, 0.5, 1.0]])
    np.testing.assert_allclose(per.X, expected)
    named = Dataset(X=toy.X, y=toy.y, name="toy", meta={"features": ["a", "b", "c"]})
    by_name = preprocess(named, "minmax", bounds={"c": [-1, 1], "a": [0, 4], "b": [0, 10]})
    np.testing.assert_allclose(by_name.X, per.X)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"bounds": [3, 3]}, "hi must be above lo"),
        ({"bounds": [[0, 1], [0, 1]]}, "one per feature \\(3\\), got 2"),
        ({"bounds": {"a": [0, 1]}}, "need a table with named columns"),
        ({"bounds": [0, float("inf")]}, "finite numbers"),
        ({"minmax_mode": "declared"}, "needs bounds"),
        ({"minmax_mode": "per_feature", "bounds": [0, 1]}, "minmax_mode 'auto' or 'declared'"),
    ],
)
def test_declared_bounds_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        preprocess(_toy(), "minmax", **kwargs)
    with pytest.raises(ValueError, match="scale='minmax'"):
        preprocess(_toy(), "standardize", bounds=[0, 1])


def test_bad_bounds_are_refused_before_any_file_is_read():
    # the pre-run check (check_dataset_params) sees the bounds; the file does not exist
    with pytest.raises(ValueError, match="hi must be above lo"):
        prepare_dataset("csv", path="no/such/file.csv", options={"label": "y", "bounds": {"a": [2, 1]}})
    with pytest.raises(ValueError, match="pair of finite numbers"):
        prepare_dataset("csv", path="no/such/file.csv", options={"bounds": [[0, 1], [0]]})


def test_scaling_statistics_says_which_scalings_read_the_data():
    reads = {
        "pixel": scaling_statistics(preprocess(load_digits(), "minmax").meta),
        "declared": scaling_statistics(preprocess(_toy(), "minmax", bounds=[-2, 6]).meta),
        "per_feature": scaling_statistics(preprocess(_toy(), "minmax").meta),
        "global": scaling_statistics(preprocess(_toy(), "minmax", minmax_mode="global").meta),
        "standardize": scaling_statistics(preprocess(_toy(), "standardize").meta),
        "none": scaling_statistics(preprocess(_toy(), "none").meta),
    }
    assert {k: (v["scaling"], v["reads"]) for k, v in reads.items()} == {
        "pixel": ("pixel", "public"),
        "declared": ("declared", "public"),
        "per_feature": ("per_feature", "data"),
        "global": ("global", "data"),
        "standardize": ("standardize", "data"),
        "none": ("none", "public"),
    }
    assert scaling_statistics(_toy().meta) is None  # never scaled by preprocess


@pytest.mark.parametrize("loader", [load_iris, load_wine])
def test_standardize_zero_mean_unit_variance(loader):
    d = loader()
    out = preprocess(d, "standardize")
    np.testing.assert_allclose(out.X.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(out.X.std(0), 1, atol=1e-5)
    assert np.array_equal(out.y, d.y)


def test_none_keeps_values_and_input_untouched():
    d = _toy()
    before = d.X.copy()
    out = preprocess(d, "none")
    assert np.array_equal(out.X, before)
    preprocess(d, "standardize")
    assert np.array_equal(d.X, before)
    with pytest.raises(ValueError, match="scale must be one of"):
        preprocess(d, "zscore")


def test_subsample_per_class_counts_rows_and_determinism():
    d = load_digits()
    a = subsample(d, n_per_class=30, seed=3)
    assert np.bincount(a.y).tolist() == [30] * 10
    idx = a.meta["subsample_index"]
    assert len(np.unique(idx)) == 300 and np.all(np.diff(idx) > 0)  # no repeats, original order
    assert np.array_equal(a.X, d.X[idx]) and np.array_equal(a.images, d.images[idx])
    b = subsample(d, n_per_class=30, seed=3)
    c = subsample(d, n_per_class=30, seed=4)
    assert np.array_equal(a.meta["subsample_index"], b.meta["subsample_index"])
    assert not np.array_equal(a.meta["subsample_index"], c.meta["subsample_index"])


def test_subsample_total_and_errors():
    d = load_wine()
    a = subsample(d, n_total=100, seed=0)
    assert a.n_samples == 100 and len(np.unique(a.meta["subsample_index"])) == 100
    assert subsample(d) is d
    with pytest.raises(ValueError, match=r"n_per_class=49 .*class 2 .* only 48"):
        subsample(d, n_per_class=49)
    with pytest.raises(ValueError, match="n_total=179"):
        subsample(d, n_total=179)
    with pytest.raises(ValueError, match="not both"):
        subsample(d, n_per_class=2, n_total=5)
    with pytest.raises(ValueError, match="n_per_class must be a positive integer"):
        subsample(d, n_per_class=0)


def test_subsample_carries_per_sample_meta():
    ds = mixed_regression_1d(n_clients=10, n_per_client=4, seed=0).as_dataset()
    out = subsample(ds, n_total=12, seed=1)
    idx = out.meta["subsample_index"]
    assert np.array_equal(out.meta["target"], ds.meta["target"][idx])
    assert np.array_equal(out.meta["client"], ds.meta["client"][idx])


def test_id_like_columns_are_flagged_and_continuous_or_repeated_ones_are_not(caplog):
    import logging

    from fedclust.data.preprocess import id_like_columns

    rng = np.random.default_rng(0)
    n = 200
    X = np.column_stack(
        [
            rng.normal(size=n),  # continuous: distinct values, not an ID
            rng.integers(0, 5, size=n),  # integer, few values: not an ID
            1000 + rng.permutation(n),  # a specimen ID: integer, one value per sample
            np.where(np.arange(n) < 4, 0, np.arange(n)),  # nearly unique (197 distinct of 200)
        ]
    ).astype(float)
    flagged = id_like_columns(X)
    assert [c["column"] for c in flagged] == [2, 3]
    assert flagged[0]["n_unique"] == n and flagged[1]["n_unique"] == 197
    assert flagged[0]["range_share"] > 0.4  # it weighs most of the unscaled distance
    with caplog.at_level(logging.WARNING, logger="fedclust.data.preprocess"):
        out = preprocess(Dataset(X=X, y=np.zeros(n, dtype=int), name="with_id"), "minmax")
    assert [c["column"] for c in out.meta["id_like_columns"]] == [2, 3]
    assert "ID-like" in caplog.text and "column 2" in caplog.text and "with_id" in caplog.text
    assert preprocess(load_iris(), "none").meta["id_like_columns"] == []
    assert preprocess(load_digits(), "none").meta["id_like_columns"] == []


@pytest.mark.parametrize(
    "name, scale, options",
    [
        ("digits", "minmax", {}),
        ("digits", "minmax", {"minmax_mode": "per_feature"}),
        ("iris", "minmax", {}),
        ("iris", "minmax", {"minmax_mode": "global"}),
        ("iris", "minmax", {"bounds": [0, 10]}),
        ("wine", "standardize", {}),
        ("breast_cancer", "none", {}),
        ("gaussian_mixture", "minmax", {}),
        ("csv", "minmax", {"label": "label"}),
        ("csv", "minmax", {"label": "label", "bounds": [0, 2000]}),
    ],
)
def test_the_planned_scaling_is_the_one_the_loaded_data_set_went_through(name, scale, options):
    # the MLflow tag is written from the parameters before any data is read; it must say what the
    # loaded data set's scaling then reads
    path = "tests/data/wine.csv" if name == "csv" else None
    loaded = scaling_statistics(prepare_dataset(name, path=path, scale=scale, options=dict(options)).meta)
    assert planned_scaling(name, scale, options) == loaded
