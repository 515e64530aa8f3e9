"""What a resumed grid may reuse: stored cells are keyed by their settings, the content of their
input data and the code of their grid's modules; the store survives a write cut short."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.io

from fedclust import executors
from fedclust.executors import CellStore, code_version, same_results
from fedclust.executors import store as _store  # noqa: F401 (executors.store, patched below)
from fedclust.grids import cell_data_digest, cell_sources
from fedclust.grids import fedsc as grid

#: one cheap FedSC cell per data set (the d sweep only, one trial)
CONFIG = {"trials": 1, "sweeps": ["d"], "d_values": [None], "rounds": 2, "n_clients": 3, "n_init": 2}


def _write(path, X, y):
    scipy.io.savemat(path, {"X": np.asarray(X, dtype=float).T, "Label": np.asarray(y)[:, None]})


def _blobs(seed, shift):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(20, 2)), rng.normal(size=(20, 2)) + shift])
    return X, np.repeat([0, 1], 20)


@pytest.fixture
def two_files(tmp_path):
    _write(tmp_path / "A.mat", *_blobs(0, 6.0))
    _write(tmp_path / "B.mat", *_blobs(1, 6.0))
    return tmp_path


class _Spy:
    """``grid.run_cell`` that records which data set each call computed."""

    def __init__(self):
        self.ran = []

    def __call__(self, cell):
        self.ran.append(cell["dataset"])
        return _REAL_RUN_CELL(cell)


_REAL_RUN_CELL = grid.run_cell


def _run(folder, store, monkeypatch):
    spy = _Spy()
    monkeypatch.setattr(grid, "run_cell", spy)
    recs = grid.run({**CONFIG, "datasets": [str(folder / "A.mat"), str(folder / "B.mat")]}, store=store)
    return spy.ran, recs


def test_replacing_a_data_file_recomputes_its_cells_and_only_those(two_files, tmp_path, monkeypatch):
    store = tmp_path / "cells.jsonl"
    ran, first = _run(two_files, store, monkeypatch)
    assert ran == ["A", "B"]
    ran, again = _run(two_files, store, monkeypatch)
    assert ran == [] and same_results(again, first)  # nothing changed: everything resumed

    _write(two_files / "A.mat", *_blobs(7, 0.5))  # new content at the same path, same shape
    ran, after = _run(two_files, store, monkeypatch)
    assert ran == ["A"]  # the cell that reads A.mat, not the one that reads B.mat
    a_before = [r for r in first if r["params"]["dataset"] == "A"]
    a_after = [r for r in after if r["params"]["dataset"] == "A"]
    assert not same_results(a_after, a_before)  # computed on the new data, not taken from the store
    assert same_results(
        [r for r in after if r["params"]["dataset"] == "B"], [r for r in first if r["params"]["dataset"] == "B"]
    )
    ran, _ = _run(two_files, store, monkeypatch)
    assert ran == []  # and the new result is the one resumed from now on


def test_the_data_digest_follows_content_not_names(tmp_path):
    cell = {"dataset": "digits", "config": {}, "data_paths": {}}
    assert cell_sources(cell) == [{"name": "digits", "path": None, "options": {}}]
    assert cell_data_digest(cell) == cell_data_digest(dict(cell))  # built-in: the array's hash
    assert cell_data_digest(cell) != cell_data_digest({**cell, "dataset": "iris"})
    _write(tmp_path / "A.mat", *_blobs(0, 6.0))
    shutil.copy(tmp_path / "A.mat", tmp_path / "copy.mat")
    at = {"source": {"name": "mat", "path": str(tmp_path / "A.mat"), "options": {}}}
    copy = {"source": {"name": "mat", "path": str(tmp_path / "copy.mat"), "options": {}}}
    assert cell_data_digest(at) == cell_data_digest(copy)  # the same bytes under another name
    # the same file a grid reads through data_paths, for cells that name the data set in their config
    by_config = {
        "config": {"dataset": "mat"},
        "data_paths": {"mat": str(tmp_path / "A.mat"), "mnist": str(tmp_path / "nowhere")},
    }
    assert cell_sources(by_config) == [{"name": "mat", "path": str(tmp_path / "A.mat"), "options": {}}]
    assert cell_data_digest(by_config) == cell_data_digest(at)


def test_editing_a_module_the_grid_does_not_import_keeps_its_cells(two_files, tmp_path, monkeypatch):
    package = tmp_path / "pkg" / "fedclust"
    shutil.copytree(executors._ROOT, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(executors.store, "_ROOT", package)  # the code versions are read from this copy
    base = code_version("fedclust.grids.fedsc")
    store = tmp_path / "cells.jsonl"
    assert _run(two_files, store, monkeypatch)[0] == ["A", "B"]

    for unrelated in ("clustering/dp_fedc.py", "plots.py", "pipelines/grids.py"):
        (package / unrelated).write_text((package / unrelated).read_text() + "\n# edited\n")
    assert code_version("fedclust.grids.fedsc") == base
    assert _run(two_files, store, monkeypatch)[0] == []  # kept

    (package / "clustering/fedsc.py").write_text((package / "clustering/fedsc.py").read_text() + "\n# edited\n")
    assert code_version("fedclust.grids.fedsc") != base
    assert _run(two_files, store, monkeypatch)[0] == ["A", "B"]  # the method's own code changed


def test_code_version_covers_the_numerical_packages(monkeypatch):
    base = code_version("fedclust.grids.fedsc")
    monkeypatch.setattr(executors.store, "version", lambda dist: "0.0-other" if dist == "numpy" else "1")
    assert code_version("fedclust.grids.fedsc") != base


def _lines(path):
    return path.read_bytes().split(b"\n")


def test_a_torn_last_line_is_dropped_and_does_not_swallow_the_next_cell(two_files, tmp_path, monkeypatch, caplog):
    store = tmp_path / "cells.jsonl"
    _, full = _run(two_files, store, monkeypatch)
    whole = _lines(store)
    assert len(whole) == 3 and whole[-1] == b""  # two records, each ending with a newline

    # a crash between the two writes: the first record is on disk, the second was cut short
    store.write_bytes(whole[0] + b"\n" + whole[1][: len(whole[1]) // 2])
    with caplog.at_level("WARNING", logger="fedclust.executors"):
        ran, recs = _run(two_files, store, monkeypatch)
    assert ran == ["B"]  # the finished cell is kept, the torn one recomputed
    assert "torn last line" in caplog.text
    rows = [json.loads(x) for x in _lines(store) if x]
    assert [r["cell"]["dataset"] for r in rows] == ["A", "B"]  # no cell lost, none doubled
    assert same_results(recs, full)
    ran, _ = _run(two_files, store, monkeypatch)
    assert ran == []  # the recomputed cell was stored whole


def test_a_write_cut_short_by_a_crash_loses_only_that_cell(tmp_path):
    path = tmp_path / "c.jsonl"
    store = CellStore(path)
    store.append("k1", {"seed": 1}, [1.5])

    real_write = executors.os.write

    def crash_midway(fd, data):  # the process dies after writing half of the record
        real_write(fd, bytes(data[: len(data) // 2]))
        raise SystemExit("killed")

    executors.os.write = crash_midway
    try:
        with pytest.raises(SystemExit):
            store.append("k2", {"seed": 2}, [2.5])
    finally:
        executors.os.write = real_write
    assert set(CellStore(path).load()) == {"k1"}
    store.append("k2", {"seed": 2}, [2.5])
    store.append("k3", {"seed": 3}, [3.5])
    back = CellStore(path).load()
    assert back == {"k1": [1.5], "k2": [2.5], "k3": [3.5]}
    assert path.read_bytes().count(b"\n") == 3 and path.read_bytes().endswith(b"\n")
