"""fedsc_grid on a user's own files (issue 17): any list of .mat files or patterns, labels from the file
names, the scaling and the Stage II graph as parameters."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
from threadpoolctl import threadpool_limits

from fedclust.grids import fedsc as grid


def _write(path, X, y):
    scipy.io.savemat(path, {"X": np.asarray(X, dtype=float).T, "Label": np.asarray(y)[:, None]})


@pytest.fixture
def mat_files(tmp_path):
    rng = np.random.default_rng(0)
    y = np.repeat([1, 2], 30)
    # feature 2 is huge and uninformative: unscaled it hides the two groups, min-max scaled it does not
    X = np.column_stack(
        [
            np.where(y == 1, 0.0, 1.0) + 0.05 * rng.normal(size=60),
            0.05 * rng.normal(size=60),
            1000.0 * rng.uniform(size=60),
        ]
    )
    _write(tmp_path / "Alpha.mat", X, y)
    X2 = np.vstack([rng.normal(size=(25, 2)), rng.normal(size=(25, 2)) + 8.0])
    _write(tmp_path / "Beta.mat", X2, np.repeat([0, 1], 25))
    return tmp_path


def test_resolve_datasets_takes_files_patterns_dicts_and_names(mat_files):
    src = grid.resolve_datasets(
        [str(mat_files / "*.mat"), {"path": str(mat_files / "Beta.mat"), "label": "B2", "scale": "none"}, "iris"],
        scale="standardize",
    )
    assert list(src) == ["Alpha", "Beta", "B2", "iris"]
    assert src["Alpha"] == {"name": "mat", "path": str(mat_files / "Alpha.mat"), "scale": "standardize", "options": {}}
    assert src["B2"]["scale"] == "none" and src["iris"]["name"] == "iris"
    # the generic "mat" name is labelled by its file, not "mat"
    assert list(grid.resolve_datasets(["mat"], {"mat": str(mat_files / "Beta.mat")})) == ["Beta"]
    with pytest.raises(ValueError, match="no file matches"):
        grid.resolve_datasets([str(mat_files / "nothing*.mat")])
    with pytest.raises(ValueError, match="labelled 'Beta'"):
        grid.resolve_datasets([str(mat_files / "Beta.mat"), str(mat_files / "Beta.mat")])
    with pytest.raises(ValueError, match="unknown key"):
        grid.resolve_datasets([{"path": "x.mat", "scal": "none"}])


def test_grid_runs_on_a_list_of_files_with_scale_and_graph_parameters(mat_files):
    config = {
        "datasets": [str(mat_files / "Alpha.mat"), str(mat_files / "Beta.mat")],
        "trials": 1,
        "n_clients": 2,
        "rounds": 3,
        "n_init": 2,
        "sweeps": ["noise"],
        "betas": [0.0],
        "graph": "mst",
    }
    with threadpool_limits(1):
        scaled = grid.run({**config, "scale": "minmax"})
        raw = grid.run({**config, "scale": "none"})
    assert {r["tags"]["dataset"] for r in scaled} == {"Alpha", "Beta"}
    assert all(r["params"]["graph"] == "mst" and r["params"]["scale"] == "minmax" for r in scaled)
    assert all(r["params"]["scale"] == "none" for r in raw)

    def acc(recs, method, ds):
        return next(r["metrics"]["ACC"] for r in recs if r["tags"]["method"] == method and r["tags"]["dataset"] == ds)

    assert acc(scaled, "kmeans", "Alpha") == 1.0 and acc(raw, "kmeans", "Alpha") < 0.8  # the scaling was applied
    assert acc(scaled, "sc", "Beta") == 1.0
    tables = grid.tables(scaled)
    assert set(tables["noise"]["dataset"]) == {"Alpha", "Beta"}
    with pytest.raises(ValueError, match="graph"):
        grid.run({**config, "graph": "knn"})
