"""A user's own files: CSV, Parquet and .npz through the data registry and the Kedro catalog.

tests/data/wine.csv is scikit-learn's Wine written as CSV (13 feature columns with a header, the
class names class_0..class_2 in a ``label`` column); wine_unlabelled.csv is the same without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kedro.io import DataCatalog

from fedclust.clustering.base import ClusteringResult
from fedclust.data.builtin import load_wine
from fedclust.data.registry import DATASET_NAMES, dataset_digest, dataset_label, load_dataset, prepare_dataset
from fedclust.errors import DataError, user_message
from fedclust.metrics import kmeans_objective, objective_scores
from fedclust.pipelines.datasets import TableDataset
from fedclust.pipelines.evaluation.nodes import evaluate_clustering
from fedclust.pipelines.partitioning.nodes import split_clients

HERE = Path(__file__).resolve().parent
WINE = HERE / "wine.csv"
WINE_UNLABELLED = HERE / "wine_unlabelled.csv"


@pytest.fixture(scope="module")
def wine():
    return load_wine()


def test_the_file_kinds_are_registered():
    assert {"csv", "parquet", "npz", "mat"} <= set(DATASET_NAMES)


def test_a_csv_with_a_label_column_gives_the_source_arrays_and_classes(wine):
    ds = load_dataset("csv", path=WINE, label="label")
    np.testing.assert_array_equal(ds.X, wine.X)
    # the class names sort as class_0 < class_1 < class_2: the same ids as scikit-learn's targets
    np.testing.assert_array_equal(ds.y, wine.y)
    assert list(ds.meta["label_values"]) == ["class_0", "class_1", "class_2"]
    assert ds.labelled and ds.n_classes == 3 and ds.name == "wine"


def test_text_labels_map_to_the_sorted_distinct_values(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("a,kind\n1,pear\n2,apple\n3,plum\n4,apple\n")
    ds = load_dataset("csv", path=p, label="kind")
    assert ds.y.tolist() == [1, 0, 2, 0]
    # numeric labels sort by value, not as text (10 after 9)
    p.write_text("a,kind\n1,10\n2,9\n3,10\n")
    assert load_dataset("csv", path=p, label="kind").y.tolist() == [1, 0, 1]


def test_without_a_label_the_data_set_is_unlabelled_and_k_must_be_given(wine):
    ds = load_dataset("csv", path=WINE_UNLABELLED)
    np.testing.assert_array_equal(ds.X, wine.X)
    assert not ds.labelled and ds.labels is None
    with pytest.raises(DataError, match="has no labels.*train.k"):
        _ = ds.n_classes
    # the label column of the labelled copy is text, so the default features leave it out anyway
    assert load_dataset("csv", path=WINE).meta["dropped_columns"] == ["label"]


def test_features_pick_and_order_columns(wine):
    ds = load_dataset("csv", path=WINE, label="label", features=["proline", "alcohol"])
    np.testing.assert_array_equal(ds.X, wine.X[:, [12, 0]])


def test_parquet_and_npz_give_the_same_arrays_as_the_csv(tmp_path):
    frame = pd.read_csv(WINE)
    frame.to_parquet(tmp_path / "w.parquet")
    ref = load_dataset("csv", path=WINE, label="label")
    pq = load_dataset("parquet", path=tmp_path / "w.parquet", label="label")
    np.testing.assert_array_equal(pq.X, ref.X)
    np.testing.assert_array_equal(pq.y, ref.y)
    np.savez(tmp_path / "w.npz", data=frame.drop(columns="label").to_numpy(), y=frame["label"].to_numpy(dtype=str))
    nz = load_dataset("npz", path=tmp_path / "w.npz", x_key="data", label="y")
    np.testing.assert_array_equal(nz.X, ref.X)
    np.testing.assert_array_equal(nz.y, ref.y)
    assert not load_dataset("npz", path=tmp_path / "w.npz", x_key="data").labelled


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_kedro_catalog_dataset_gives_the_same_arrays_as_the_library(tmp_path, fmt):
    path = WINE
    if fmt == "parquet":
        path = tmp_path / "w.parquet"
        pd.read_csv(WINE).to_parquet(path)
    catalog = DataCatalog.from_config(
        {"mine": {"type": "fedclust.pipelines.datasets.TableDataset", "filepath": str(path), "label": "label"}}
    )
    via_kedro = catalog.load("mine")
    via_library = load_dataset(fmt, path=path, label="label")
    np.testing.assert_array_equal(via_kedro.X, via_library.X)
    np.testing.assert_array_equal(via_kedro.y, via_library.y)
    assert via_kedro.name == via_library.name
    # and unlabelled, with a feature subset
    a = TableDataset(filepath=str(path), features=["ash", "hue"]).load()
    b = load_dataset(fmt, path=path, features=["ash", "hue"])
    np.testing.assert_array_equal(a.X, b.X)
    assert not a.labelled and not b.labelled


def test_bad_cells_are_one_error_line_naming_the_column_and_the_bad_rows(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("a,b,c,label\n1,2,x,A\n3,,5,B\n4,5,?,A\n6,7,8,B\n9,1,2,A\n")
    with pytest.raises(DataError) as err:
        load_dataset("csv", path=p, label="label")
    msg = user_message(err.value)
    assert "\n" not in msg
    assert "column 'b': 1 row with a missing" in msg and "data row 2" in msg
    assert "column 'c': 2 rows with a missing or non-numeric value (first: data row 1, 'x')" in msg
    assert "column 'a'" not in msg
    # leaving the bad columns out loads the rest
    assert load_dataset("csv", path=p, label="label", features=["a"]).X.ravel().tolist() == [1, 3, 4, 6, 9]


def test_missing_labels_and_unknown_columns_are_named(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("a,label\n1,A\n2,\n3,B\n4,\n")
    with pytest.raises(DataError, match=r"label column 'label': 2 row\(s\) without a label \(first: data row 2\)"):
        load_dataset("csv", path=p, label="label")
    with pytest.raises(DataError, match="no column 'lable'.*did you mean 'label'"):
        load_dataset("csv", path=p, label="lable")
    with pytest.raises(DataError, match="no column 'zz'"):
        load_dataset("csv", path=p, features=["a", "zz"])
    with pytest.raises(ValueError, match="unknown option.*did you mean 'label'"):
        load_dataset("csv", path=p, labl="label")
    with pytest.raises(DataError, match=r"no array 'y'.*\['X'\]"):
        np.savez(tmp_path / "a.npz", X=np.ones((3, 2)))
        load_dataset("npz", path=tmp_path / "a.npz", label="y")


def test_nan_in_an_npz_is_named_by_column_and_rows(tmp_path):
    np.savez(tmp_path / "a.npz", X=np.array([[1.0, 2.0], [3.0, np.nan], [4.0, np.nan]]))
    with pytest.raises(DataError, match=r"'X\[:, 1\]': 2 rows .*first: data row 2"):
        load_dataset("npz", path=tmp_path / "a.npz")


def test_scaling_is_computed_from_the_file_itself():
    std = prepare_dataset("csv", path=WINE_UNLABELLED, scale="standardize")
    np.testing.assert_allclose(std.X.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(std.X.std(axis=0), 1, atol=1e-5)
    mm = prepare_dataset("csv", path=WINE, options={"label": "label"})
    assert mm.X.min(axis=0).tolist() == [0.0] * 13 and mm.X.max(axis=0).tolist() == [1.0] * 13


def test_the_display_name_is_the_label_else_the_file_stem_else_the_name():
    assert dataset_label({"name": "csv", "path": "data/01_raw/mine.csv"}) == "mine"
    assert dataset_label({"name": "csv", "path": "data/01_raw/mine.csv", "label": "survey"}) == "survey"
    assert dataset_label({"name": "mat", "path": "x/Bank_tsne.mat"}) == "Bank_tsne"
    assert dataset_label({"name": "mat"}, {"mat": "x/COIL.mat"}) == "COIL"
    assert dataset_label("digits") == "digits" and dataset_label({"name": "fedsc_iris", "path": "d/"}) == "fedsc_iris"
    ds = prepare_dataset("csv", path=WINE, options={"label": "label"}, label="survey")
    assert ds.name == "survey"


def test_the_digest_of_a_file_data_set_follows_its_content(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text(WINE.read_text())
    before = dataset_digest("csv", p, 0, {"label": "label"})
    assert before == dataset_digest("csv", WINE, 0, {"label": "label"})
    p.write_text(WINE.read_text().replace("14.23", "14.24", 1))
    assert dataset_digest("csv", p, 0, {"label": "label"}) != before


def test_label_splitting_schemes_and_n_per_class_refuse_unlabelled_data():
    ds = prepare_dataset("csv", path=WINE_UNLABELLED)
    with pytest.raises(DataError, match="'dirichlet' splits by class label.*has no labels"):
        split_clients(ds, {"scheme": "dirichlet", "n_clients": 4, "options": {"alpha": 0.5}}, 0)
    part = split_clients(ds, {"scheme": "iid", "n_clients": 4}, 0)
    assert sorted(np.bincount(part.client).tolist()) == [44, 44, 45, 45]
    with pytest.raises(DataError, match="n_per_class=5 draws per class"):
        prepare_dataset("csv", path=WINE_UNLABELLED, n_per_class=5)


def test_kmeans_objective_is_the_mean_squared_distance_to_the_nearest_centre():
    X = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0], [10.0, 3.0]])
    C = np.array([[1.0, 0.0], [10.0, 1.0], [np.nan, np.nan]])  # a non-finite centre is left out
    assert kmeans_objective(X, centers=C) == pytest.approx((1 + 1 + 1 + 4) / 4)
    # without centres: the means of the clusters
    assert kmeans_objective(X, labels=[0, 0, 1, 1]) == pytest.approx((1 + 1 + 2.25 + 2.25) / 4)


def test_an_unlabelled_run_reports_its_objective_relative_to_centralized_kmeans():
    from fedclust.clustering.fedsc import centralized_kmeans

    ds = prepare_dataset("csv", path=WINE_UNLABELLED, scale="standardize")
    ref = centralized_kmeans(ds.X, 3, seed=0, n_init=10)
    same = evaluate_clustering(ClusteringResult(labels=ref.labels, centroids=ref.centroids, uploaded_reals=7), ds)
    assert "ACC" not in same and "at_chance" not in same and same["uploaded_reals"] == 7
    assert same["objective_ratio"] == pytest.approx(1.0)  # the reference itself
    # three centres at one point (the data mean, repeated): the objective is the total variance,
    # 13 for 13 standardized features, far above k-means'
    one = objective_scores(ds.X, centers=np.zeros((3, 13)), labels=np.zeros(ds.n_samples, int))
    assert one["objective"] == pytest.approx(13.0, rel=1e-5)
    assert one["objective_ratio"] == pytest.approx(13.0 / one["objective_kmeans"]) and one["objective_ratio"] > 1.5
