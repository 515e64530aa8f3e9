"""The majority baseline and the collapsed-clustering flag: on imbalanced classes, a clustering that
puts nearly every sample in one cluster can sit above its ACC chance line while saying nothing about
the data. Next to the chance line every result carries the majority baseline (the ACC of one cluster,
the largest class share) and NMI's chance line, from the same shuffles as ACC's; a result with ACC
above chance but NMI at chance, or with ACC not above the majority baseline, is flagged ``collapsed``."""

import logging
import math

import numpy as np
import pytest

from benchmark_records import data_record
from fedclust import metrics
from fedclust.clustering.base import ClusteringResult
from fedclust.data import Dataset
from fedclust.grids import report
from fedclust.hooks.summary import summary_rows
from fedclust.pipelines.evaluation.nodes import evaluate_clustering, to_mlflow_metrics
from fedclust.pipelines.reporting.nodes import summarize_run
from fedclust.rng import stream

#: imbalanced classes: 60 / 20 / 10 / 6 / 4 % of 1,000 samples
SIZES = [600, 200, 100, 60, 40]


@pytest.fixture(scope="module")
def y():
    return np.repeat(np.arange(len(SIZES)), SIZES)


def collapsed_labels(y, seed):
    """95 % of the samples in cluster 0; the other 5 % (50 samples, all of the majority class) spread
    at random over four small clusters. The big cluster then holds 550 of the 600 majority samples and
    all 400 others, so the best matching scores 550 / 1000 = 0.55, below the majority share 0.6."""
    rng = np.random.default_rng(seed)
    pred = np.zeros(len(y), dtype=int)
    moved = rng.permutation(np.flatnonzero(y == 0))[:50]
    pred[moved] = rng.integers(1, 5, moved.size)
    return pred


def good_labels(y, seed):
    """The true classes with 5 % of the samples relabelled at random: ACC about 0.95."""
    rng = np.random.default_rng(seed)
    pred = y.copy()
    flip = rng.random(len(y)) < 0.05
    pred[flip] = rng.integers(0, len(SIZES), int(flip.sum()))
    return pred


# ------------------------------------------------------------------------------------ majority ACC


def test_majority_accuracy_is_the_largest_class_share():
    y = np.array([3, 3, 3, 1, 1, 7, 7, 7, 7, 0, 0, 7])  # class 7: 5 of 12 samples, non-contiguous ids
    assert metrics.majority_accuracy(y) == pytest.approx(5 / 12)
    # it is the ACC of the one-cluster labelling, and its chance line (every shuffle is the same)
    one = np.zeros_like(y)
    assert metrics.clustering_accuracy(y, one) == pytest.approx(5 / 12)
    assert metrics.chance_scores(y, one, n_permutations=5)["ACC_chance_hi"] == pytest.approx(5 / 12)
    assert metrics.majority_accuracy(np.array(["b", "a", "b"])) == pytest.approx(2 / 3)
    assert math.isnan(metrics.majority_accuracy(np.array([], dtype=int)))


# ------------------------------------------------------------------------------ NMI's chance line


@pytest.mark.parametrize("seed", [0, 7])
def test_nmi_chance_line_comes_from_the_same_shuffles_as_acc(y, seed):
    pred = collapsed_labels(y, 1)
    n = 40
    chance = metrics.chance_scores(y, pred, n_permutations=n, seed=seed)
    # the reference: the run's chance stream shuffles the compacted labels n times; each shuffle is
    # scored by the reference ACC and NMI. Separate draws for NMI would give other numbers.
    _, compact = np.unique(pred, return_inverse=True)
    rng = stream(seed, "chance")
    shuffles = [rng.permutation(compact) for _ in range(n)]
    accs = [metrics.clustering_accuracy(y, q) for q in shuffles]
    nmis = [metrics.nmi(y, q) for q in shuffles]
    assert chance["ACC_chance"] == pytest.approx(np.mean(accs), abs=1e-12)
    assert chance["ACC_chance_hi"] == pytest.approx(np.percentile(accs, 99), abs=1e-12)
    assert chance["NMI_chance"] == pytest.approx(np.mean(nmis), abs=1e-12)
    assert chance["NMI_chance_hi"] == pytest.approx(np.percentile(nmis, 99), abs=1e-12)


def test_nmi_chance_line_is_deterministic_by_seed(y):
    pred = collapsed_labels(y, 2)
    a = metrics.scores_with_chance(y, pred, seed=3)
    assert a == metrics.scores_with_chance(y, pred, seed=3)
    assert a["NMI_chance_hi"] != metrics.scores_with_chance(y, pred, seed=4)["NMI_chance_hi"]


# ------------------------------------------------------------------------------------ is_collapsed


def test_is_collapsed_applies_both_rules_with_the_line_counting_as_no_better():
    line = {"ACC_chance_hi": 0.32, "NMI_chance_hi": 0.02, "ACC_majority": 0.31}
    # ACC above its chance line, NMI on or below its own: collapsed
    assert metrics.is_collapsed({"ACC": 0.35, "NMI": 0.02}, line) is True
    assert metrics.is_collapsed({"ACC": 0.35, "NMI": 0.0201}, line) is False
    # ACC at chance (not above the line): the first rule does not apply; the majority rule decides
    assert metrics.is_collapsed({"ACC": 0.32, "NMI": 0.0}, line) is False
    # ACC on or below the majority share: collapsed whatever the NMI
    assert metrics.is_collapsed({"ACC": 0.31, "NMI": 0.5}, line) is True
    assert metrics.is_collapsed({"ACC": 0.3101, "NMI": 0.5}, {**line, "ACC_chance_hi": 0.4}) is False
    # missing numbers leave their rule out
    assert metrics.is_collapsed({"ACC": 0.35}, line) is False
    assert metrics.is_collapsed({"ACC": 0.30, "NMI": math.nan}, line) is True  # the majority rule still applies
    assert metrics.is_collapsed({"ACC": math.nan, "NMI": 0.0}, line) is False
    assert metrics.is_collapsed({"ACC": 0.30, "NMI": 0.0}, {}) is False


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_collapsed_clustering_is_flagged_and_a_good_one_is_not(y, seed):
    bad = metrics.scores_with_chance(y, collapsed_labels(y, seed), seed=seed)
    assert bad["ACC_majority"] == pytest.approx(0.6)
    assert bad["ACC"] == pytest.approx(0.55)  # the docstring of collapsed_labels
    assert bad["collapsed"] == 1.0
    good = metrics.scores_with_chance(y, good_labels(y, seed), seed=seed)
    assert good["ACC"] > 0.9 and good["NMI"] > 0.5  # 5 % relabelled: far above every line
    assert good["collapsed"] == 0.0 and good["at_chance"] == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_nmi_rule_alone_flags_an_acc_gain_that_nmi_does_not_see(seed):
    # balanced classes (no majority rule: 0.25 is below chance), a 4 x 4 table of 94s with 118 on the
    # diagonal: ACC 4 x 118 / 1600 = 0.295. ACC grows linearly with the diagonal's excess and MI only
    # quadratically, so ACC clears its 99th percentile of random splits (about 0.287) while NMI
    # (0.0038) stays below its own (about 0.005) on each of these chance seeds
    table = np.full((4, 4), 94)
    np.fill_diagonal(table, 118)
    y = np.repeat(np.tile(np.arange(4), 4), table.ravel())
    pred = np.repeat(np.repeat(np.arange(4), 4), table.ravel())
    s = metrics.scores_with_chance(y, pred, seed=seed)
    assert s["ACC"] == pytest.approx(0.295) and s["ACC_majority"] == pytest.approx(0.25)
    assert s["ACC"] > s["ACC_chance_hi"] and s["NMI"] <= s["NMI_chance_hi"]
    assert s["at_chance"] == 0.0 and s["collapsed"] == 1.0


# ------------------------------------------------------------------------------ single runs, MLflow


def test_evaluation_reports_majority_nmi_chance_and_the_flag_to_mlflow(y, caplog):
    data = Dataset(X=np.zeros((len(y), 2)), y=y, name="imbalanced")
    bad = evaluate_clustering(ClusteringResult(labels=collapsed_labels(y, 0)), data)
    good = evaluate_clustering(ClusteringResult(labels=good_labels(y, 0)), data)
    assert bad["ACC_majority"] == pytest.approx(0.6) and bad["collapsed"] == 1.0
    assert good["ACC_majority"] == pytest.approx(0.6) and good["collapsed"] == 0.0
    logged = to_mlflow_metrics(bad, {"epsilon_accountant": "inf"})["metrics"]
    assert logged["ACC_majority"] == pytest.approx(0.6) and logged["collapsed"] == 1.0
    assert logged["NMI_chance_hi"] == pytest.approx(bad["NMI_chance_hi"]) and "NMI_chance" in logged
    # the end-of-run summary table and the method's last log line show both
    row, ok = summary_rows({"fkm": {"metrics": bad}, "fzkm": {"metrics": good}}, {})
    assert "majority ACC 0.600" in row["result"] and "COLLAPSED" in row["result"]
    assert f"NMI {bad['NMI_chance']:.3f}" in row["result"]
    assert "majority ACC 0.600" in ok["result"] and "COLLAPSED" not in ok["result"]
    with caplog.at_level(logging.INFO):
        summarize_run(bad, {}, method="fkm")
        summarize_run(good, {}, method="fzkm")
    b, g = (r.getMessage() for r in caplog.records[-2:])
    assert "majority ACC 0.600" in b and "COLLAPSED" in b
    assert "majority ACC 0.600" in g and "COLLAPSED" not in g


# ------------------------------------------------------------------------------------ the report


def _record(method, seed, scores, ds="imbalanced"):
    return data_record(method, seed, {**scores, "rounds": 5.0}, ds=ds)


@pytest.fixture(scope="module")
def records(y):
    out = []
    for seed in (0, 1):
        out.append(_record("fkm", seed, metrics.scores_with_chance(y, collapsed_labels(y, seed), seed=seed)))
        out.append(_record("kmeans", seed, metrics.scores_with_chance(y, good_labels(y, seed), seed=seed)))
    return out


def test_report_rows_carry_majority_nmi_and_the_collapsed_flag(records):
    table = report.method_table(records)
    row = {r.method: r for r in table.itertuples()}
    assert row["fkm"].collapsed and not row["kmeans"].collapsed
    assert row["fkm"].ACC_majority == pytest.approx(0.6) and row["kmeans"].ACC_majority == pytest.approx(0.6)
    nmis = [r["metrics"]["NMI"] for r in records if r["tags"]["method"] == "fkm"]
    assert row["fkm"].NMI == pytest.approx(np.mean(nmis))
    chance = [r["metrics"]["NMI_chance"] for r in records if r["tags"]["method"] == "fkm"]
    assert row["fkm"].NMI_chance == pytest.approx(np.mean(chance))
    metrics_, _ = report.parent_run_summary(records, table)
    assert metrics_["runs_collapsed"] == 2.0


def test_the_report_marks_collapsed_rows_and_explains_the_mark(records):
    out = report.build(records, title="t")
    md = out["markdown"].splitlines()
    head = next(line for line in md if line.startswith("| ε |"))
    assert "| majority | NMI | NMI chance |" in head and "| collapsed |" in head
    fkm = next(line for line in md if "| fkm |" in line)
    kmeans = next(line for line in md if "kmeans |" in line and "fkm" not in line)
    assert "| 0.600 |" in fkm and report.COLLAPSED in fkm
    assert "| 0.600 |" in kmeans and report.COLLAPSED not in kmeans
    assert report.COLLAPSED_RULE in out["markdown"]  # the legend line
    page = out["html"]
    assert f"<span class='chance'>{report.COLLAPSED}</span></td>" in page  # the mark in a row
    assert page.count(report.COLLAPSED) == 2  # the one row and the legend
    lines = out["terminal"]
    assert max(len(line) for line in lines) <= 100
    fkm_line = next(line for line in lines if " fkm " in f" {line} ")
    kmeans_line = next(line for line in lines if "kmeans" in line and "fkm" not in line)
    assert report.COLLAPSED in fkm_line and "0.600" in fkm_line
    assert report.COLLAPSED not in kmeans_line and "0.600" in kmeans_line
    assert any(line.startswith(f"{report.COLLAPSED}: ACC above") for line in lines)  # its legend


def test_no_legend_line_in_the_terminal_without_a_collapsed_row(records):
    good = [r for r in records if r["tags"]["method"] == "kmeans"]
    assert not any(report.COLLAPSED in line for line in report.terminal_lines(report.method_table(good)))


def test_the_benchmark_summary_table_carries_the_majority_baseline_and_the_flag(records):
    from fedclust.grids import benchmark

    summary = benchmark.tables(records)["summary"]
    row = {r.method: r for r in summary.itertuples()}
    assert summary["collapsed"].dtype == bool
    assert row["fkm"].collapsed and not row["kmeans"].collapsed
    assert row["fkm"].ACC_majority_mean == pytest.approx(0.6)
    hi = [r["metrics"]["NMI_chance_hi"] for r in records if r["tags"]["method"] == "kmeans"]
    assert row["kmeans"].NMI_chance_hi_mean == pytest.approx(np.mean(hi))


def test_a_row_whose_means_escape_the_rule_counts_its_collapsed_runs(y):
    # one collapsed run and one good run of the same method: the means (ACC about 0.75) clear every
    # line, so the row is not COLLAPSED, but it says that 1 of its 2 runs was
    recs = [
        _record("fkm", 0, metrics.scores_with_chance(y, collapsed_labels(y, 0), seed=0)),
        _record("fkm", 1, metrics.scores_with_chance(y, good_labels(y, 1), seed=1)),
    ]
    table = report.method_table(recs)
    assert not table["collapsed"].iloc[0] and table["collapsed_seeds"].iloc[0] == 1
    assert "| 1/2 seeds |" in report.to_markdown(table, {}, title="t")
    lines = report.terminal_lines(table)
    assert "1/2 seeds" in next(line for line in lines if "fkm" in line)
    assert any(line.startswith(f"{report.COLLAPSED}: ACC above") for line in lines)
