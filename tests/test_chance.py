"""The chance line: the ACC/NMI of a random split with the same cluster sizes, reported next to
every result, and the ``at chance`` flag for results within noise of it."""

import logging
import math

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits

from fedclust import metrics
from fedclust.clustering.base import ClusteringResult
from fedclust.data import Dataset
from fedclust.grids import benchmark
from fedclust.rng import stream


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X, y


@pytest.fixture(scope="module")
def kmeans_labels(digits):
    X, _ = digits
    return KMeans(n_clusters=10, n_init=10, random_state=0).fit_predict(X)


# ------------------------------------------------------------------------------------ chance_scores


def test_balanced_random_assignment_on_digits_matches_the_permutation_expectation(digits):
    _, y = digits
    rng = np.random.default_rng(123)
    pred = rng.permutation(np.arange(len(y)) % 10)  # a random balanced 10-cluster assignment
    chance = metrics.chance_scores(y, pred, n_permutations=200, seed=0)
    # an independent estimate: shuffle with another generator and score with the reference metrics
    other = np.random.default_rng(7)
    accs, nmis = [], []
    for _ in range(200):
        q = other.permutation(pred)
        accs.append(metrics.clustering_accuracy(y, q))
        nmis.append(metrics.nmi(y, q))
    assert 0.11 < chance["ACC_chance"] < 0.14  # well above 1/10: the best matching picks the lucky cells
    assert chance["ACC_chance"] == pytest.approx(np.mean(accs), abs=0.002)
    assert chance["ACC_chance_hi"] == pytest.approx(np.percentile(accs, 99), abs=0.004)
    assert chance["NMI_chance"] == pytest.approx(np.mean(nmis), abs=0.001)
    assert 0 < chance["NMI_chance"] < 0.02
    assert chance["ACC_chance"] < chance["ACC_chance_hi"] and chance["NMI_chance"] < chance["NMI_chance_hi"]


@pytest.mark.parametrize("case", ["digits_kmeans", "more_clusters", "fewer_clusters", "odd_labels"])
def test_each_shuffle_is_scored_exactly_like_the_reference_metrics(case, digits, kmeans_labels):
    # one shuffle: the fast contingency path must give the ACC of clustering_accuracy and sklearn's NMI
    _, y = digits
    rng = np.random.default_rng(5)
    pred = {
        "digits_kmeans": kmeans_labels,
        "more_clusters": rng.integers(0, 15, len(y)),
        "fewer_clusters": rng.choice(3, len(y), p=[0.6, 0.3, 0.1]),
        "odd_labels": np.where(kmeans_labels < 4, -1, kmeans_labels * 7 + 100),  # non-contiguous, negative
    }[case]
    seed = 11
    chance = metrics.chance_scores(y, pred, n_permutations=1, seed=seed)
    _, compact = np.unique(pred, return_inverse=True)
    shuffled = stream(seed, "chance").permutation(compact)
    assert chance["ACC_chance"] == pytest.approx(metrics.clustering_accuracy(y, shuffled), abs=1e-12)
    assert chance["NMI_chance"] == pytest.approx(metrics.nmi(y, shuffled), abs=1e-12)


def test_chance_scores_are_reproducible_per_seed(digits, kmeans_labels):
    _, y = digits
    a = metrics.chance_scores(y, kmeans_labels, n_permutations=50, seed=3)
    assert a == metrics.chance_scores(y, kmeans_labels, n_permutations=50, seed=3)
    assert a != metrics.chance_scores(y, kmeans_labels, n_permutations=50, seed=4)
    assert set(a) == {"ACC_chance", "ACC_chance_hi", "NMI_chance", "NMI_chance_hi"}


def test_chance_scores_refuse_bad_input():
    with pytest.raises(ValueError, match="length"):
        metrics.chance_scores([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="n_permutations"):
        metrics.chance_scores([0, 1], [0, 1], n_permutations=0)


# ------------------------------------------------------------------------------------- is_at_chance


def test_one_cluster_labelling_is_at_chance(digits):
    _, y = digits
    one = np.zeros_like(y)
    scores = metrics.clustering_scores(y, one)
    chance = metrics.chance_scores(y, one)
    # every shuffle of a single cluster is the same labelling: the chance line is the largest class share
    share = np.bincount(y).max() / len(y)
    assert chance["ACC_chance"] == pytest.approx(share) and chance["ACC_chance_hi"] == pytest.approx(share)
    assert chance["NMI_chance"] == 0.0
    assert metrics.is_at_chance(scores, chance) is True


def test_kmeans_on_digits_is_not_at_chance(digits, kmeans_labels):
    _, y = digits
    scores = metrics.clustering_scores(y, kmeans_labels)
    chance = metrics.chance_scores(y, kmeans_labels)
    assert scores["ACC"] > 0.7
    assert chance["ACC_chance_hi"] < 0.16
    assert metrics.is_at_chance(scores, chance) is False


def test_a_random_labelling_is_at_chance(digits):
    _, y = digits
    pred = np.random.default_rng(0).integers(0, 10, len(y))
    scores = metrics.clustering_scores(y, pred)
    assert metrics.is_at_chance(scores, metrics.chance_scores(y, pred, seed=1)) is True


def test_is_at_chance_compares_acc_with_the_upper_chance_level():
    chance = {"ACC_chance": 0.12, "ACC_chance_hi": 0.14}
    assert metrics.is_at_chance({"ACC": 0.14}, chance) is True  # on the line: within noise
    assert metrics.is_at_chance({"ACC": 0.13}, chance) is True
    assert metrics.is_at_chance({"ACC": 0.1401}, chance) is False
    assert metrics.is_at_chance({"ACC": math.nan}, chance) is False  # nothing to compare
    assert metrics.is_at_chance({}, chance) is False
    assert metrics.is_at_chance({"ACC": 0.1}, {}) is False


def test_data_chance_line_is_a_random_split_with_the_true_class_sizes(digits):
    _, y = digits
    line = metrics.data_chance_line(y, n_permutations=100, seed=2)
    assert line == metrics.chance_scores(y, y, n_permutations=100, seed=2)
    assert 0.11 < line["ACC_chance"] < 0.14
    assert line["ACC_chance"] > np.bincount(y).max() / len(y)  # above the one-cluster share of 0.10


# ------------------------------------------------------------------------------------- single runs


def test_evaluate_clustering_reports_the_chance_line_and_flag(digits, kmeans_labels):
    from fedclust.pipelines.evaluation.nodes import evaluate_clustering, to_mlflow_metrics

    X, y = digits
    data = Dataset(X=X, y=y, name="digits")
    good = evaluate_clustering(ClusteringResult(labels=kmeans_labels, uploaded_reals=5), data)
    assert good["at_chance"] == 0.0 and isinstance(good["at_chance"], float)
    assert 0.11 < good["ACC_chance"] < 0.14 and good["ACC_chance"] <= good["ACC_chance_hi"] < good["ACC"]
    assert {"NMI_chance", "NMI_chance_hi"} <= good.keys()
    one = evaluate_clustering(ClusteringResult(labels=np.zeros_like(y)), data)
    assert one["at_chance"] == 1.0
    # MLflow gets the chance line and the flag as metrics
    logged = to_mlflow_metrics(one, {"epsilon_accountant": "inf"})["metrics"]
    assert logged["at_chance"] == 1.0 and logged["ACC_chance"] == pytest.approx(one["ACC_chance"])


def test_summarize_run_prints_the_chance_line_and_at_chance(caplog):
    from fedclust.pipelines.reporting.nodes import summarize_run

    with caplog.at_level(logging.INFO):
        summarize_run(
            {
                "ACC": 0.102,
                "ACC_chance": 0.1019,
                "ACC_chance_hi": 0.1019,
                "NMI": 0.0,
                "NMI_chance": 0.0,
                "at_chance": 1.0,
            },
            {},
            method="fkm",
        )
        summarize_run(
            {
                "ACC": 0.79,
                "ACC_chance": 0.132,
                "ACC_chance_hi": 0.14,
                "NMI": 0.74,
                "NMI_chance": 0.01,
                "at_chance": 0.0,
            },
            {},
            method="fzkm",
        )
        summarize_run({"test_accuracy": 0.9}, {}, method="ifca")  # no chance line: printed as before
    bad, good, cfl = (r.getMessage() for r in caplog.records[-3:])
    assert "ACC 0.102 (chance 0.102)" in bad and "NMI 0.000 (chance 0.000)" in bad and "AT CHANCE" in bad
    assert "ACC 0.790 (chance 0.132)" in good and "NMI 0.740 (chance 0.010)" in good
    assert "AT CHANCE" not in good
    assert "test_accuracy 0.900 ·" in cfl and "chance" not in cfl.lower()


# ------------------------------------------------------------------------------------ grid tables


def _rec(method, seed, acc, chance=None, hi=None, status="ok", dataset="digits", eps="inf"):
    m = (
        {}
        if status != "ok"
        else {
            "ACC": acc,
            "NMI": 0.5,
            "ARI": 0.4,
            "epsilon_accountant": math.inf,
            "uploaded_reals": 10.0,
            "wall_time_s": 0.1,
        }
    )
    if status == "ok" and chance is not None:
        m.update({"ACC_chance": chance, "ACC_chance_hi": hi, "NMI_chance": 0.01})
    tags = {
        "method": method,
        "dataset": dataset,
        "partition": "iid",
        "epsilon": eps,
        "status": status,
        "family": "data_clustering",
    }
    return {
        "name": f"{dataset}/iid/eps={eps}/{method}/seed={seed}",
        "tags": tags,
        "params": {"seed": seed, "status": status},
        "metrics": m,
        "history": {},
    }


def test_data_tables_mark_groups_at_chance():
    records = [
        # ACC equal to its chance level: at chance
        _rec("noise", 0, 0.13, chance=0.13, hi=0.14),
        _rec("noise", 1, 0.13, chance=0.13, hi=0.14),
        # well above the chance line: not at chance
        _rec("good", 0, 0.80, chance=0.13, hi=0.14),
        _rec("good", 1, 0.78, chance=0.13, hi=0.14),
        # the group's mean decides: seeds at 0.12 and 0.17 average 0.145 > mean hi 0.14
        _rec("mixed", 0, 0.12, chance=0.12, hi=0.14),
        _rec("mixed", 1, 0.17, chance=0.12, hi=0.14),
        # the mean ACC exactly on the mean upper chance level: within noise
        _rec("edge", 0, 0.13, chance=0.12, hi=0.13),
        _rec("edge", 1, 0.15, chance=0.12, hi=0.15),
        # records from before the chance line: nothing to compare
        _rec("old", 0, 0.13),
        # not applicable under a budget: never flagged
        _rec("kmeans", 0, None, status="not applicable", eps="4"),
        # another data set keeps its own chance line
        _rec("noise", 0, 0.34, chance=0.35, hi=0.40, dataset="iris"),
    ]
    summary = benchmark.tables(records)["summary"]
    row = {(r.dataset, r.method): r for r in summary.itertuples()}
    assert summary["at_chance"].dtype == bool
    assert row["digits", "noise"].at_chance and row["iris", "noise"].at_chance
    assert not row["digits", "good"].at_chance
    assert not row["digits", "mixed"].at_chance
    assert row["digits", "edge"].at_chance
    assert not row["digits", "old"].at_chance and math.isnan(row["digits", "old"].ACC_chance_mean)
    kmeans = row["digits", "kmeans"]
    assert kmeans.status == "not applicable" and not kmeans.at_chance
    assert row["digits", "good"].ACC_chance_mean == pytest.approx(0.13)
    assert row["digits", "mixed"].ACC_chance_mean == pytest.approx(0.12)
    assert row["iris", "noise"].ACC_chance_mean == pytest.approx(0.35)
    assert row["digits", "good"].NMI_chance_mean == pytest.approx(0.01)
    assert row["digits", "good"].ACC_chance_hi_mean == pytest.approx(0.14)
    assert row["digits", "good"].ACC == "0.790 ± 0.010"  # the formatted metrics are unchanged


def test_data_tables_without_any_chance_line_flag_nothing():
    summary = benchmark.tables([_rec("fkm", 0, 0.05), _rec("fkm", 1, 0.07)])["summary"]
    assert summary["at_chance"].tolist() == [False]
    assert math.isnan(summary["ACC_chance_mean"].iloc[0])


def test_chance_levels_give_the_data_sets_chance_line():
    recs = [_rec("fkm", 0, 0.5, dataset="iris")]
    y = benchmark.load("iris", None).y
    level = benchmark.chance_levels(recs)["iris"]
    assert level == pytest.approx(metrics.data_chance_line(y)["ACC_chance"])
    assert level > np.bincount(y).max() / len(y)  # not the largest class share (1/3 on iris)


def test_grid_records_carry_the_chance_line_and_the_flag():
    from fedclust.metrics import scores_with_chance

    y = np.repeat(np.arange(4), 50)
    good = scores_with_chance(y, y, seed=0)
    collapsed = scores_with_chance(y, np.zeros_like(y), seed=0)
    assert good["ACC"] == 1.0 and good["at_chance"] == 0.0 and good["ACC_chance"] < 0.4
    assert collapsed["ACC"] == pytest.approx(0.25) and collapsed["at_chance"] == 1.0


def test_clustered_fl_runs_carry_the_chance_line_of_their_client_clustering():
    from types import SimpleNamespace

    from fedclust.pipelines.clustered_fl.nodes import evaluate_clustered

    group = np.repeat(np.arange(4), 25)
    rotated = SimpleNamespace(group=group)
    good = SimpleNamespace(info={"final": {"client_ACC": 1.0, "test_accuracy": 0.9}}, assignment=group.copy())
    one = SimpleNamespace(info={"final": {"client_ACC": 0.25, "test_accuracy": 0.3}}, assignment=np.zeros(100, int))
    g, o = evaluate_clustered(good, rotated), evaluate_clustered(one, rotated)
    assert g["client_at_chance"] == 0.0 and g["client_ACC_chance"] < 0.4
    assert o["client_at_chance"] == 1.0 and o["client_ACC_chance"] == pytest.approx(0.25)
