"""Grid cells on executors (serial, processes, Ray) and the resumable cell store (issues 15, 16)."""

import json
import math
import sys

import numpy as np
import pytest

from fedclust import executors
from fedclust.executors import CellStore, cell_key, same_results
from fedclust.grids import dp_fedc

#: 2 (table1: fkm, no DP / eps_bar 20) + 2 (sweep: eps_bar none / 20) = 4 cells on iris
TINY = {
    "dataset": "iris",
    "n_clients": 5,
    "rounds": 3,
    "seeds": 1,
    "parts": ["table1", "sweep"],
    "table1_K": 5,
    "table1_methods": ["fkm"],
    "splits": ["iid"],
    "Ks": [5],
    "eps_bars": [None, 20.0],
    "rho_factors": [1e-2],
}


@pytest.fixture(scope="module")
def serial_records():
    return dp_fedc.run(TINY)


def _without_wall_time(tabs):
    return {k: t[[c for c in t.columns if not c.startswith("wall_time_s")]] for k, t in tabs.items()}


def test_processes_give_the_same_records_as_serial(serial_records):
    recs = dp_fedc.run({**TINY, "executor": "processes", "executor_options": {"max_workers": 2}})
    assert len(recs) == len(serial_records) == 4
    assert [r["name"] for r in recs] == [r["name"] for r in serial_records]  # cell order, not finishing order
    assert same_results(recs, serial_records)  # bit for bit, timings aside
    assert not same_results([{"metrics": {"ACC": 0.5}}], [{"metrics": {"ACC": 0.5 + 1e-16}}])


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_same_records_as_serial(local_ray, serial_records):
    recs = dp_fedc.run({**TINY, "executor": "ray"})
    assert local_ray.is_initialized()  # an instance that was running is used, not shut down
    assert [r["name"] for r in recs] == [r["name"] for r in serial_records]
    assert same_results(recs, serial_records)
    assert dp_fedc.tables(recs)["table1"]["ACC"].tolist() == dp_fedc.tables(serial_records)["table1"]["ACC"].tolist()


def test_ray_executor_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match=r"pip install -e '\.\[ray\]'"):
        dp_fedc.run({**TINY, "executor": "ray"})


def test_execution_settings_are_checked_with_the_key_named():
    assert executors.execution({}) == {"executor": "serial", "options": {}, "resume": True}
    with pytest.raises(ValueError, match="config.executor must be one of"):
        executors.execution({"executor": "dask"})
    with pytest.raises(
        ValueError, match=r"executor_options: unknown option\(s\) \['address'\] for executor 'processes'"
    ):
        executors.execution({"executor": "processes", "executor_options": {"address": "auto"}})
    with pytest.raises(ValueError, match="config.resume must be true or false"):
        executors.execution({"resume": "yes"})


class _Counting:
    """``dp_fedc.run_cell`` that counts its calls and is interrupted at call ``fail_at``."""

    def __init__(self, real, fail_at=None):
        self.real, self.fail_at, self.calls = real, fail_at, []

    def __call__(self, cell):
        self.calls.append(cell_key(cell))
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise KeyboardInterrupt("injected")
        return self.real(cell)


def test_interrupted_grid_keeps_finished_cells_and_resumes_only_the_missing(tmp_path, monkeypatch, serial_records):
    store = tmp_path / "cells.jsonl"
    first = _Counting(dp_fedc.run_cell, fail_at=4)
    monkeypatch.setattr(dp_fedc, "run_cell", first)
    logged = []
    with pytest.raises(KeyboardInterrupt):
        dp_fedc.run(TINY, store=store, on_done=lambda i, recs, resumed: logged.append((i, resumed)))
    assert logged == [(0, False), (1, False), (2, False)]  # each cell handed over as it finished
    lines = [json.loads(x) for x in store.read_text().splitlines()]
    assert len(lines) == 3  # the 3 finished cells are on disk
    assert same_results([executors._decode(x["result"])[0] for x in lines], serial_records[:3])

    again = _Counting(dp_fedc.run_cell)
    monkeypatch.setattr(dp_fedc, "run_cell", again)
    logged.clear()
    recs = dp_fedc.run(TINY, store=store, on_done=lambda i, recs, resumed: logged.append((i, resumed)))
    assert len(again.calls) == 1 and again.calls[0] == first.calls[-1]  # only the missing cell ran
    assert logged == [(0, True), (1, True), (2, True), (3, False)]
    assert same_results(recs, serial_records)
    t_resumed, t_full = _without_wall_time(dp_fedc.tables(recs)), _without_wall_time(dp_fedc.tables(serial_records))
    assert all(t_resumed[k].equals(t_full[k]) for k in t_full)

    # resume: false recomputes every cell (and starts the store afresh)
    fresh = _Counting(dp_fedc.run_cell)
    monkeypatch.setattr(dp_fedc, "run_cell", fresh)
    dp_fedc.run({**TINY, "resume": False}, store=store)
    assert len(fresh.calls) == 4 and len(store.read_text().splitlines()) == 4


def test_a_larger_sweep_resumes_the_cells_it_shares_and_a_changed_setting_does_not(tmp_path, monkeypatch):
    store = tmp_path / "cells.jsonl"
    dp_fedc.run(TINY, store=store)
    more = _Counting(dp_fedc.run_cell)
    monkeypatch.setattr(dp_fedc, "run_cell", more)
    dp_fedc.run({**TINY, "eps_bars": [None, 20.0, 2.0], "executor": "serial"}, store=store)
    assert len(more.calls) == 1  # the new sweep cell (eps_bar = 2) only; the executor is no part of a cell
    other = _Counting(dp_fedc.run_cell)
    monkeypatch.setattr(dp_fedc, "run_cell", other)
    dp_fedc.run({**TINY, "rounds": 4}, store=store)
    assert len(other.calls) == 4  # another setting shared by every cell: nothing to resume


def test_store_round_trips_records_exactly_and_skips_torn_lines_and_other_code(tmp_path):
    rec = {
        "name": "a",
        "metrics": {"ACC": 0.1 + 0.2, "eps": math.inf, "nan": math.nan, "n": np.float64(1 / 3)},
        "labels": np.arange(5, dtype=np.int32),
        "params": {"alphas": (0.1, 0.2), 3: "int key", "__x__": 1},
        "history": {"objective": [1.5, 2.25]},
    }
    store = CellStore(tmp_path / "c.jsonl", code="v1")
    store.append("k1", {"seed": 0}, [rec])
    with (tmp_path / "c.jsonl").open("a") as fh:
        fh.write('{"key": "k2", "code": "v1", "res')  # a line cut short by an interruption
    (back,) = store.load()["k1"]
    assert same_results(back, rec, ignore=())
    assert back["labels"].dtype == np.int32 and type(back["metrics"]["n"]) is np.float64
    assert back["params"]["alphas"] == (0.1, 0.2) and back["params"][3] == "int key"
    assert set(store.load()) == {"k1"}
    assert CellStore(tmp_path / "c.jsonl", code="v2").load() == {}  # results of other code are not resumed
