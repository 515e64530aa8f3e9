"""A data set without labels in the benchmark: its records carry the k-means objective ratio to
centralized k-means instead of ACC/NMI/ARI, the report ranks its methods by that ratio (lowest
first) without the columns that need labels, and a partition that splits by class label is refused
for it in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmark_records import data_record
from fedclust.errors import DataError
from fedclust.grids import benchmark, cell_data_digest, report
from fedclust.metrics import reference_kmeans_objective

SEEDS = 3
LABEL_ONLY = ("ACC", "NMI", "ARI", "ACC_chance", "ACC_majority", "NMI_chance", "at_chance", "collapsed")


def _blobs_csv(path, seed: int = 0):
    """Three well separated Gaussian blobs in 3-D (centres 6 apart, standard deviation 0.5: more
    than 8 standard deviations between blobs), 60 rows each, shuffled, written without a label column."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0, 0.0], [6.0, 0.0, 0.0], [0.0, 6.0, 0.0]])
    X = np.concatenate([rng.normal(c, 0.5, size=(60, 3)) for c in centres])
    X = X[rng.permutation(len(X))]
    np.savetxt(path, X, delimiter=",", header="a,b,c", comments="")
    return X


def _config(path, **over) -> dict:
    return {
        "datasets": [{"name": "csv", "path": str(path), "label": "blobs", "k": 3}],
        "partitions": [{"scheme": "iid"}],
        "n_clients": 4,
        "epsilons": [None, 4.0],
        "seeds": SEEDS,
        "methods": ["fkm", "kmeans"],
        **over,
    }


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    path = tmp_path_factory.mktemp("unlabelled") / "blobs.csv"
    X = _blobs_csv(path)
    return path, X, benchmark.run(_config(path))


def _ok(records, method, eps):
    return [r for r in records if r["tags"]["method"] == method and r["tags"]["epsilon"] == eps]


def test_the_records_carry_the_objective_ratio_to_centralized_kmeans_instead_of_acc(blobs):
    path, X, records = blobs
    ran = [r for r in records if r["tags"]["status"] == "ok"]
    assert len(ran) == 3 * SEEDS  # fkm at both budgets, kmeans without DP; kmeans at ε = 4 not applicable
    assert {r["tags"]["status"] for r in _ok(records, "kmeans", "4")} == {"not applicable"}
    data = benchmark.load_by_label("blobs", None, _config(path))
    # one reference per data set: k-means with the entry's k = 3 on the cell's (min-max scaled) data
    base = reference_kmeans_objective(data.X.astype(np.float64), 3)
    for r in ran:
        m = r["metrics"]
        assert not set(LABEL_ONLY) & set(m), r["name"]
        assert m["objective_kmeans"] == base
        assert m["objective_ratio"] == pytest.approx(m["objective"] / base, rel=1e-12)
        # no clustering of these data beats the global optimum, which the reference's 10 k-means++
        # restarts reach on blobs more than 8 standard deviations apart: no ratio is below 1
        assert m["objective_ratio"] >= 1.0 - 1e-9, r["name"]
    # centralized k-means (10 restarts per seed) finds that same optimum on every seed: ratio 1 up to
    # floating point, whatever its own seed
    for r in _ok(records, "kmeans", "inf"):
        assert r["metrics"]["objective_ratio"] == pytest.approx(1.0, abs=1e-9)
    # the private fkm pays for its noise: its mean ratio is above the non-private k-means' 1
    private = [r["metrics"]["objective_ratio"] for r in _ok(records, "fkm", "4")]
    assert len(private) == SEEDS and np.mean(private) > 1.0 + 1e-6


def test_the_report_ranks_an_unlabelled_data_set_by_its_objective_ratio_lowest_first(blobs):
    _, _, records = blobs
    table = report.method_table(records)
    assert set(table["score"]) == {report.RATIO}
    for eps, g in table.groupby("epsilon", sort=False):
        ran = g[g["status"] == "ok"]
        # lowest first, not-applicable rows last; the ratio is in the score columns
        assert list(ran["ACC"]) == sorted(ran["ACC"])
        assert (g["status"] != "ok").sum() == 0 or g["status"].iloc[-1] != "ok"
        means = {
            m: np.mean([r["metrics"]["objective_ratio"] for r in _ok(records, m, str(eps))]) for m in ran["method"]
        }
        assert dict(zip(ran["method"], ran["ACC"])) == pytest.approx(means)
    assert not table["at_chance"].any() and not table["collapsed"].any() and table["ACC_chance"].isna().all()
    built = report.build(records, title="t")
    md = built["markdown"]
    assert report.UNLABELLED_NOTE in md and report.RATIO_RULES in md
    head = next(line for line in md.splitlines() if line.startswith("| ε |"))
    assert f"{report.RATIO_LABEL} [95% CI]" in head  # three seeds: an interval, on the log scale
    for label_only in (" chance ", " majority ", " NMI ", " at chance ", " collapsed ", " ACC "):
        assert label_only not in head
    # the parent run names the lowest mean ratio per budget, never an ACC
    best = min(np.mean([r["metrics"]["objective_ratio"] for r in _ok(records, m, "inf")]) for m in ("fkm", "kmeans"))
    assert built["metrics"]["best_objective_ratio_eps_inf"] == pytest.approx(best)
    assert not any(k.startswith("best_ACC") for k in built["metrics"])
    assert "objective ratio" in "\n".join(built["terminal"]) and "NMI" not in built["terminal"][1]


def _rec(ds, method, seed, **metrics):
    return data_record(
        method,
        seed,
        {"rounds": 5.0, "compute_time_s": 0.1, **metrics},
        ds=ds,
        params={"delta": 1e-5},
        name=f"{ds}/{method}/{seed}",
    )


def test_the_best_ratio_is_the_lowest_and_a_labelled_data_set_reads_as_before():
    labelled = [
        _rec("digits", m, s, ACC=acc + 0.01 * s, ACC_chance=0.12, ACC_chance_hi=0.14, NMI=0.6, NMI_chance=0.01)
        for m, acc in (("fkm", 0.7), ("kmeans", 0.8))
        for s in range(3)
    ]
    # lower is better: "good" is clearly best (its log-scale interval is far from "poor"'s)
    ratios = {"good": [1.00, 1.01, 1.00], "poor": [1.60, 1.70, 1.65]}
    unlabelled = [_rec("mine", m, s, objective_ratio=v) for m, vs in ratios.items() for s, v in enumerate(vs)]
    table = report.method_table(labelled + unlabelled)
    mine = table[table["dataset"] == "mine"]
    assert list(mine["method"]) == ["good", "poor"] and list(mine["mark"]) == [report.BEST, ""]
    mean, lo, hi = report.log_t_interval(ratios["good"])
    assert (mine["ACC_lo"].iloc[0], mine["ACC_hi"].iloc[0]) == pytest.approx((lo, hi)) and lo <= mean <= hi
    assert report.best_per_epsilon(labelled + unlabelled)[("mine", "inf")]["method"] == "good"
    # the labelled data set's section is the same text as in a report of its records alone
    alone = report.build(labelled, title="t")["markdown"]
    both = report.build(labelled + unlabelled, title="t")["markdown"]

    def section(md, name):
        return md.split(f"## {name} / iid")[1].split("## ")[0]

    assert section(both, "digits") == section(alone, "digits")
    assert "| ε | method | ACC [95% CI] | chance | majority | NMI |" in section(both, "digits")
    assert report.UNLABELLED_NOTE in section(both, "mine") and report.UNLABELLED_NOTE not in section(both, "digits")
    assert report.best_per_epsilon(labelled)[("digits", "inf")]["method"] == "kmeans"


def test_a_label_based_partition_is_refused_for_it_in_one_line(tmp_path):
    path = tmp_path / "blobs.csv"
    _blobs_csv(path)
    for scheme in ("dirichlet", "shards"):
        with pytest.raises(DataError) as err:
            benchmark.cells(_config(path, partitions=[{"scheme": "iid"}, {"scheme": scheme}]))
        text = str(err.value)
        assert "\n" not in text and "'blobs'" in text and f"'{scheme}'" in text and "no labels" in text
    # iid and the k-means split read no label: both make cells
    cells = benchmark.cells(_config(path, partitions=[{"scheme": "iid"}, {"scheme": "kmeans"}], seeds=1))
    assert {c["partition"]["scheme"] for c in cells} == {"iid", "kmeans"}
    # without its number of clusters a table without labels is refused before any cell
    with pytest.raises(DataError, match="give its number of clusters k"):
        benchmark.cells({**_config(path), "datasets": [{"name": "csv", "path": str(path)}]})


def test_the_cell_key_hashes_the_file_content_and_k(tmp_path):
    path = tmp_path / "blobs.csv"
    _blobs_csv(path)
    cell = benchmark.cells(_config(path, seeds=1, epsilons=[None]))[0]
    assert cell["source"]["k"] == 3
    before = cell_data_digest(cell)
    _blobs_csv(path, seed=1)
    assert cell_data_digest(cell) != before
    _blobs_csv(path)
    assert cell_data_digest(cell) == before
    other_k = benchmark.cells(
        _config(path, seeds=1, epsilons=[None], datasets=[{**_config(path)["datasets"][0], "k": 4}])
    )
    assert other_k[0]["source"] != cell["source"]  # a cell carries its k: another k is another cell


def test_the_figures_leave_out_what_needs_labels_and_say_so(blobs):
    path, _, records = blobs
    config = _config(path)

    def texts(fig):
        return " ".join(t.get_text() for ax in fig.axes for t in [*ax.texts, ax.title]) + " ".join(
            t.get_text() for t in fig.texts
        )

    assert benchmark.chance_levels(records, None, config) == {}
    assert "no data set with labels" in texts(benchmark.confusion_figure(records, None, config))
    assert "no data set with labels" in texts(benchmark.partition_heatmaps(config))
    embedding = texts(benchmark.embedding_figure(records, None, config))
    assert "blobs: no labels" in embedding and "ratio" in embedding and "ACC" not in embedding
    assert "objective ratio" in texts(benchmark.privacy_utility_figure(records))
    summary = benchmark.tables(records)["summary"]
    assert "objective_ratio_mean" in summary.columns
    assert not {"ACC", "NMI", "ARI", "at_chance", "collapsed"} & set(summary.columns)
    assert not math.isnan(summary["objective_ratio_mean"].iloc[0])
