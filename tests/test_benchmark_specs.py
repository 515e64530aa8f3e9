"""The benchmark's data sets as names and specs side by side: a user's CSV runs through the grid,
its cells' keys hash the file's content, and records, report and notes name it by its label."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from fedclust.data.builtin import load_wine
from fedclust.errors import DataError
from fedclust.grids import benchmark, cell_data_digest, report
from fedclust.metrics import data_chance_line
from fedclust.pipelines.grids import report_notes

WINE = Path(__file__).resolve().parent / "data" / "wine.csv"


def _config(path) -> dict:
    return {
        "datasets": [
            "iris",
            {"name": "csv", "path": str(path), "options": {"label": "label"}, "label": "mine", "scale": "standardize"},
        ],
        "partitions": [{"scheme": "iid"}],
        "n_clients": 5,
        "epsilons": [None],
        "seeds": 1,
        "rounds": 4,
        "methods": ["fkm"],
    }


def test_a_csv_spec_runs_through_the_grid_and_the_report_names_it_by_its_label(tmp_path):
    path = tmp_path / "mine.csv"
    shutil.copy(WINE, path)
    config = _config(path)
    records = benchmark.run(config)
    by_data = {r["tags"]["dataset"]: r for r in records}
    assert set(by_data) == {"iris", "mine"}
    rec = by_data["mine"]
    assert rec["name"].startswith("mine/iid/eps=inf/fkm") and rec["params"]["dataset"] == "mine"
    assert rec["tags"]["status"] == "ok" and 0.0 <= rec["metrics"]["ACC"] <= 1.0
    # the spec's scale and label column were used: the cell's data are Wine standardized
    spec = benchmark.dataset_specs(config)["mine"]
    data = benchmark.load_by_label("mine", None, config)
    wine = load_wine()
    np.testing.assert_array_equal(data.y, wine.y)
    np.testing.assert_allclose(data.X.std(axis=0), 1.0, atol=1e-5)
    assert spec == {
        "name": "csv",
        "path": str(path),
        "options": {"label": "label"},
        "scale": "standardize",
        "label": "mine",
    }
    # the report's rows, sections and notes name it by its label, never by "csv"
    built = report.build(records, title="t", notes=report_notes(config))
    table = report.method_table(records)
    assert set(table["dataset"]) == {"iris", "mine"}
    assert "mine / iid" in built["markdown"] and "data sets iris, mine;" in built["markdown"]
    assert "csv" not in set(table["dataset"])
    # the header says how each data set was scaled and whether that read the data (no ε covers it)
    assert (by_data["mine"]["params"]["scaling"], by_data["mine"]["params"]["scaling_reads"]) == ("standardize", "data")
    assert (by_data["iris"]["params"]["scaling"], by_data["iris"]["params"]["scaling_reads"]) == ("per_feature", "data")
    assert (
        "scaling of mine: standardized by each feature's own mean and standard deviation, statistics of every "
        "client's data that no ε covers" in built["markdown"]
    )
    # the figures find the spec's data by its label (the chance line of Wine's class sizes)
    assert benchmark.chance_levels(records, None, config)["mine"] == data_chance_line(wine.y)["ACC_chance"]


def test_the_cell_key_hashes_the_file_content(tmp_path):
    path = tmp_path / "mine.csv"
    shutil.copy(WINE, path)
    (iris_cell, cell) = benchmark.cells(_config(path))
    assert iris_cell["dataset"] == "iris" and "source" not in iris_cell  # a plain name: as before
    assert cell["dataset"] == "mine" and cell["source"]["path"] == str(path)
    before = cell_data_digest(cell)
    path.write_text(WINE.read_text().replace("14.23", "14.24", 1))
    assert cell_data_digest(cell) != before
    path.write_text(WINE.read_text())
    assert cell_data_digest(cell) == before


def test_specs_without_labels_or_k_twice_the_same_label_or_unknown_keys_are_refused(tmp_path):
    unlabelled = {"name": "csv", "path": str(WINE)}
    # without labels a table needs its number of clusters (nothing else can say it), a positive int
    with pytest.raises(DataError, match="no label column.*give its number of clusters k"):
        benchmark.dataset_specs({"datasets": [unlabelled]})
    with pytest.raises(DataError, match="k must be a positive int, got 0"):
        benchmark.dataset_specs({"datasets": [{**unlabelled, "k": 0}]})
    assert benchmark.dataset_specs({"datasets": [{**unlabelled, "k": 3}]})["wine"]["k"] == 3
    twice = {"name": "csv", "path": str(WINE), "options": {"label": "label"}}
    with pytest.raises(DataError, match="two data sets are labelled 'wine'"):
        benchmark.dataset_specs({"datasets": [twice, twice]})
    assert list(benchmark.dataset_specs({"datasets": [twice, {**twice, "label": "wine2"}]})) == ["wine", "wine2"]
    with pytest.raises(DataError, match=r"unknown key\(s\) \['labels'\]"):
        benchmark.dataset_specs({"datasets": [{**twice, "labels": "x"}]})
    bad_bounds = {**twice, "options": {"label": "label", "bounds": [5, 1]}}
    with pytest.raises(DataError, match="hi must be above lo"):
        benchmark.dataset_specs({"datasets": [bad_bounds]})
    with pytest.raises(DataError, match="scale='minmax'"):
        benchmark.dataset_specs(
            {"datasets": [{**twice, "scale": "standardize", "options": {"label": "label", "bounds": [0, 9]}}]}
        )


def test_the_clustered_fl_half_runs_rr_clusters_few_per_cluster_regime_by_name():
    config = {"methods": ["rr_cluster", "dp_ifca"], "seeds": 3, "clustered_fl": {"regime": "few_per_cluster"}}
    cells = benchmark.clustered_fl_cells(config, {"mnist": "unused/mnist"})
    inner = [c["cell"] for c in cells]
    # the preset's clients, sampling, budgets and methods, one RR threshold (its largest), the benchmark's seeds
    assert {(c["method"], c["B"]) for c in inner} == {("dp_ifca", 0), ("rr_cluster", 7)}
    assert {c["epsilon"] for c in inner} == {None, 2.0, 4.0, 8.0} and {c["seed"] for c in inner} == {0, 1, 2}
    assert {(c["config"]["n_clients"], c["config"]["participation"], c["config"]["dataset"]) for c in inner} == {
        (1000, 0.03, "mnist")
    }
    assert all("few_per_cluster" in c["partition"] for c in cells)
    with pytest.raises(ValueError, match="regime must be one of"):
        benchmark.clustered_fl_cells({**config, "clustered_fl": {"regime": "few"}}, {})
