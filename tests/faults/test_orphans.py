"""A grid killed with SIGKILL leaves no process behind: the workers of the ``processes`` executor
(and multiprocessing's resource tracker) end with the process that started them, and the Ray tasks
of the ``ray`` executor are cancelled (their worker processes end) when their driver dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")

#: a grid whose two cells sleep for ten minutes, on a pool of two worker processes
GRID = textwrap.dedent("""
    import time
    from fedclust.executors import iter_cells
    if __name__ == "__main__":
        for _ in iter_cells(time.sleep, [600, 600], "processes", {"max_workers": 2, "threads_per_cell": None}):
            pass
""")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for(condition, deadline_s: float, what: str):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what}")


def _workers(parent: psutil.Process) -> list[psutil.Process]:
    """The pool's two worker processes once they run (else an empty list)."""
    out = []
    for c in parent.children():
        try:
            if "spawn_main" in " ".join(c.cmdline()):
                out.append(c)
        except psutil.Error:
            pass
    return out if len(out) >= 2 else []


@pytest.mark.slow
@pytest.mark.allow_skip("reads the process tree of Linux")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree of Linux")
def test_workers_die_with_a_grid_killed_by_sigkill(tmp_path):
    script = tmp_path / "grid.py"
    script.write_text(GRID)
    env = {**os.environ, "PYTHONPATH": SRC}
    grid = subprocess.Popen([sys.executable, str(script)], env=env)
    children: list[psutil.Process] = []
    try:
        parent = psutil.Process(grid.pid)
        _wait_for(lambda: _workers(parent), 120, "the pool's workers")
        time.sleep(2)  # let them import and start their cells (the test holds either way)
        children = parent.children(recursive=True)  # the workers and the resource tracker
        assert len(children) >= 2 and grid.poll() is None  # the grid runs its two cells
        os.kill(grid.pid, signal.SIGKILL)
        grid.wait()
        _wait_for(lambda: not any(_alive(c) for c in children), 10, "the workers to end after 10 s")
        assert not any(_alive(c) for c in children)
    finally:
        if grid.poll() is None:
            grid.kill()
        for c in children:  # never leave a test's processes behind
            try:
                c.kill()
            except psutil.Error:
                pass


#: the same grid on the ``ray`` executor, on a local Ray instance of two CPUs
RAY_GRID = GRID.replace(
    '"processes", {"max_workers": 2, "threads_per_cell": None}', '"ray", {"num_cpus": 2, "threads_per_cell": None}'
)


#: the environment variable that marks the processes of one test's grid (Ray's processes inherit it)
MARK = "FEDCLUST_ORPHAN_TEST"


def _marked(token: str) -> list[psutil.Process]:
    """Every process whose environment carries ``MARK=token``: the grid's driver and what it started,
    found whether or not it is still the grid's descendant (a process may be re-parented)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARK) == token:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _names(token: str) -> list[str]:
    names = []
    for p in _marked(token):
        try:
            names.append(f"{p.pid}:{p.name()}:{p.status()}")
        except psutil.Error:
            pass
    return names


def _ray_tasks(token: str) -> list[psutil.Process]:
    """The Ray worker processes running a cell (Ray names them after the task), once both run."""
    out = []
    for c in _marked(token):
        try:
            if "call_cell" in c.name() or "call_cell" in " ".join(c.cmdline()):
                out.append(c)
        except psutil.Error:
            pass
    return out if len(out) >= 2 else []


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree of Linux")
def test_ray_tasks_end_with_a_driver_killed_by_sigkill(tmp_path):
    pytest.importorskip("ray")
    assert 'iter_cells(time.sleep, [600, 600], "ray"' in RAY_GRID
    script = tmp_path / "grid.py"
    script.write_text(RAY_GRID)
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "PYTHONPATH": SRC, "RAY_USAGE_STATS_ENABLED": "0", MARK: token}
    grid = subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path)
    everything: list[psutil.Process] = []
    try:
        try:
            tasks = _wait_for(lambda: _ray_tasks(token), 180, "the two Ray tasks")
        except AssertionError as exc:  # say what did run, for a failure that is hard to reproduce
            raise AssertionError(f"{exc}; the grid's processes: {_names(token)}") from None
        everything = [p for p in _marked(token) if p.pid != grid.pid]  # Ray's own processes too
        os.kill(grid.pid, signal.SIGKILL)
        grid.wait()
        _wait_for(lambda: not any(_alive(t) for t in tasks), 20, "the Ray tasks to end after 20 s")
    finally:
        if grid.poll() is None:
            grid.kill()
        for c in everything:  # Ray's agents linger up to a minute after their raylet: end them here
            try:
                c.kill()
            except psutil.Error:
                pass
