"""Two grid runs on one cell store share the work: no cell is computed twice, no record is lost, and
a cell another run is computing is waited for, then taken from the store, or computed here when that
run ended without it. Each test starts real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fedclust.executors import CellStore, cell_key, run_cells, store_key

SRC = str(Path(__file__).resolve().parents[2] / "src")

#: a grid of N cells whose cells sleep a little and note which process computed them
GRID = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from fedclust.executors import run_cells

    def run_cell(cell):
        with open(os.environ["GRID_LOG"], "a") as fh:
            fh.write(f"{cell['i']} {os.getpid()}\\n")
        time.sleep(float(os.environ.get("GRID_SLEEP", "0.25")))
        return {"i": cell["i"], "square": cell["i"] ** 2}

    if __name__ == "__main__":
        store, n, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
        Path(go.with_suffix(f".{os.getpid()}")).touch()  # ready
        while not go.exists():  # both start at the same moment
            time.sleep(0.01)
        import grid  # run_cell from an importable module, as the grids have it
        results = run_cells(grid.run_cell, [{"i": i} for i in range(n)], store=store, code="v1")
        print(json.dumps(results))
""")

N = 8


def _start(tmp_path: Path, n: int, go: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), SRC]), "GRID_LOG": str(log)}
    return subprocess.Popen(
        [sys.executable, str(tmp_path / "grid.py"), str(tmp_path / "cells.jsonl"), str(n), str(go)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _computed(log: Path) -> list[tuple[int, int]]:
    return [tuple(map(int, line.split())) for line in log.read_text().splitlines()] if log.exists() else []


def _stored(path: Path) -> list[int]:
    return [json.loads(line)["result"]["i"] for line in path.read_text().splitlines()]


@pytest.mark.slow  # two fresh interpreters importing numpy: 6-10 s on the shared 2-core machine
def test_two_processes_on_one_store_compute_each_cell_once_and_both_get_every_result(tmp_path):
    (tmp_path / "grid.py").write_text(GRID)
    go, log = tmp_path / "go", tmp_path / "computed.log"
    procs = [_start(tmp_path, N, go, log) for _ in range(2)]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("go.*"))) < 2:  # both imported and waiting
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    go.touch()
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]

    computed = _computed(log)
    assert sorted(i for i, _ in computed) == list(range(N))  # every cell computed exactly once
    assert len({pid for _, pid in computed}) == 2  # and the two runs shared them
    assert sorted(_stored(tmp_path / "cells.jsonl")) == list(range(N))  # each record once, none lost
    expected = [{"i": i, "square": i * i} for i in range(N)]
    assert [json.loads(out) for out, _ in outs] == [expected, expected]  # both runs have every result


@pytest.mark.slow  # a fresh interpreter and a wait: about 6 s
def test_a_cell_claimed_by_a_run_that_ends_without_it_is_waited_for_then_computed(tmp_path):
    (tmp_path / "grid.py").write_text(GRID)
    go, log = tmp_path / "go", tmp_path / "computed.log"
    go.touch()
    store = CellStore(tmp_path / "cells.jsonl")
    claimed = 2
    cell_id = cell_key({"i": claimed})
    # this test process stands for another run computing cell 2 (its lock is a kernel lock, as theirs)
    lock = store.claim(store_key(cell_id, "v1", ""))
    assert lock is not None
    proc = _start(tmp_path, 4, go, log)
    try:
        deadline = time.monotonic() + 60
        while len(_computed(log)) < 3:  # every other cell is done ...
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
        assert proc.poll() is None  # ... and the run waits for the claimed one instead of ending
        assert claimed not in [i for i, _ in _computed(log)]
    finally:
        store.unclaim(lock, stored=False)  # the other run ends without storing it
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert sorted(i for i, _ in _computed(log)) == [0, 1, 2, 3]  # picked up at the end, once
    assert [i for i, _ in _computed(log)][-1] == claimed
    assert sorted(_stored(tmp_path / "cells.jsonl")) == [0, 1, 2, 3]
    assert [r["i"] for r in json.loads(out)] == [0, 1, 2, 3]


class _RacingStore(CellStore):
    """A run's store at which, on its first claim, another run stores a cell: the moment between
    this run's last look at the store and the look it takes after claiming."""

    def __init__(self, path, other):
        super().__init__(path)
        self.other, self.raced = other, False

    def claim(self, key):
        lock = super().claim(key)
        if not self.raced:
            self.raced = True
            self.other()
        return lock


def test_a_cell_stored_while_this_run_claims_another_is_taken_not_computed_again(tmp_path):
    """The look after a claim reads everything stored since the last one: a cell another run stored
    meanwhile is taken from it, even though it is not the cell just claimed (the next look at an
    unchanged store would not see it again, and the cell would be computed twice)."""
    path = tmp_path / "cells.jsonl"
    cells = [{"i": 0}, {"i": 1}]
    theirs = {"i": 1, "square": 1, "by": "the other run"}

    def other_run_stores_cell_1():
        cid = cell_key(cells[1])
        CellStore(path).append(store_key(cid, "v1", ""), cells[1], theirs, cell_id=cid, code="v1", data="")

    computed = []

    def run_cell(cell):
        computed.append(cell["i"])
        return {"i": cell["i"], "square": cell["i"] ** 2, "by": "this run"}

    results = run_cells(run_cell, cells, store=_RacingStore(path, other_run_stores_cell_1), code="v1")
    assert computed == [0]
    assert results == [{"i": 0, "square": 0, "by": "this run"}, theirs]
