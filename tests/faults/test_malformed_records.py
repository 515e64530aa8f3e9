"""A cell file line that is not a cell record (valid JSON of another shape, or not JSON at all) is
skipped with one warning naming the file and the line, and its cell is recomputed: never a traceback,
and the next runs on that file work."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.io

from fedclust.executors import CellStore, same_results
from fedclust.grids import fedsc as grid

CONFIG = {"trials": 1, "sweeps": ["d"], "d_values": [None], "rounds": 2, "n_clients": 3, "n_init": 2}
_REAL_RUN_CELL = grid.run_cell

#: what a hand edit, a merge or another tool may leave on a line of cells.jsonl
MALFORMED = [
    '{"key": "abc"}',  # valid JSON, no result
    "null",
    "[1]",
    '"a string"',
    '{"key": 5, "result": []}',  # a key that is not a string
    '{"key": "abc", "result": {"__ndarray__": [1], "dtype": "not a dtype", "shape": [1]}}',  # undecodable
    "{not json",
]


def _blobs(seed):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(20, 2)), rng.normal(size=(20, 2)) + 6.0])
    return X, np.repeat([0, 1], 20)


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    for name, seed in (("A", 0), ("B", 1)):
        X, y = _blobs(seed)
        scipy.io.savemat(folder / f"{name}.mat", {"X": X.T, "Label": y[:, None]})
    return folder


def _run(folder, store, monkeypatch):
    ran = []

    def spy(cell):
        ran.append(cell["dataset"])
        return _REAL_RUN_CELL(cell)

    monkeypatch.setattr(grid, "run_cell", spy)
    recs = grid.run({**CONFIG, "datasets": [str(folder / "A.mat"), str(folder / "B.mat")]}, store=store)
    return ran, recs


@pytest.fixture(scope="module")
def stored(two_files, tmp_path_factory):
    """A finished two-cell store (lines: A's record, B's record) and the records of that run."""
    store = tmp_path_factory.mktemp("store") / "cells.jsonl"
    mp = pytest.MonkeyPatch()
    try:
        ran, recs = _run(two_files, store, mp)
    finally:
        mp.undo()
    assert ran == ["A", "B"]
    return store.read_text().splitlines(), recs


@pytest.mark.parametrize("bad", MALFORMED)
def test_a_line_that_is_not_a_record_is_skipped_with_one_warning_and_its_cell_recomputed(
    bad, stored, two_files, tmp_path, monkeypatch, caplog
):
    lines, full = stored
    store = tmp_path / "cells.jsonl"
    store.write_text(f"{lines[0]}\n{bad}\n")  # B's record replaced by the malformed line (line 2)
    with caplog.at_level("WARNING", logger="fedclust.executors"):
        ran, recs = _run(two_files, store, monkeypatch)
    assert ran == ["B"]  # A kept, B recomputed
    assert same_results(recs, full)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert str(store) in warnings[0] and "line 2" in warnings[0] and "recomputed" in warnings[0]

    caplog.clear()  # the next run on that file works too, and recomputes nothing
    ran, _ = _run(two_files, store, monkeypatch)
    assert ran == []
    rows = [json.loads(x) for x in store.read_text().splitlines()[2:]]
    assert [r["cell"]["dataset"] for r in rows] == ["B"]


@pytest.mark.parametrize("bad", MALFORMED)
def test_the_store_reads_around_a_malformed_line(bad, tmp_path, caplog):
    path = tmp_path / "c.jsonl"
    store = CellStore(path)
    store.append("k1", {"seed": 1}, [1.5])
    with path.open("a") as fh:
        fh.write(bad + "\n")
    store.append("k3", {"seed": 3}, (np.float32(3.5),))
    with caplog.at_level("WARNING", logger="fedclust.executors"):
        back = CellStore(path).load()
    assert back == {"k1": [1.5], "k3": (np.float32(3.5),)}
    assert [r.getMessage() for r in caplog.records if str(path) in r.getMessage() and "line 2" in r.getMessage()]
