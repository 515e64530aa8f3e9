"""How a grid runs here: the execution settings of a grid config, the thread limits of a cell, and
the serial and process-pool executors (:mod:`fedclust.executors`)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable

from fedclust.threads import apply_thread_setting, thread_limits

logger = logging.getLogger("fedclust.executors")


EXECUTORS = ("serial", "processes", "ray")


#: the keys of a grid's config that say how to run it, not what to compute (never part of a cell)
EXECUTION_KEYS = ("executor", "executor_options", "resume")


def execution(config: dict | None) -> dict:
    """``{executor, options, resume}`` from a grid config's ``executor``, ``executor_options`` and
    ``resume`` keys (defaults: serial, {}, true); errors name the key."""
    config = config or {}
    name = config.get("executor") or "serial"
    if name not in EXECUTORS:
        raise ValueError(f"config.executor must be one of {list(EXECUTORS)}, got {name!r}")
    options = dict(config.get("executor_options") or {})
    allowed = {
        "serial": {"threads_per_cell"},
        "processes": {"threads_per_cell", "max_workers"},
        "ray": {"threads_per_cell", "address", "num_cpus", "init_options"},
    }[name]
    bad = sorted(set(options) - allowed)
    if bad:
        raise ValueError(
            f"config.executor_options: unknown option(s) {bad} for executor {name!r} (allowed: {sorted(allowed)})"
        )
    resume = config.get("resume", True)
    if not isinstance(resume, bool):
        raise ValueError(f"config.resume must be true or false, got {resume!r}")
    return {"executor": name, "options": options, "resume": resume}


def without_execution(config: dict | None) -> dict:
    """``config`` less the execution keys (what a cell may depend on)."""
    return {k: v for k, v in (config or {}).items() if k not in EXECUTION_KEYS}


@contextlib.contextmanager
def limited_threads(n: int | None):
    """Run the body with ``n`` torch and BLAS/OpenMP threads (:func:`fedclust.threads.thread_limits`);
    ``None`` or 0 leaves them as they are. torch is imported first, so that a cell that imports it
    inside the block runs with ``n`` threads too (bit-identical results across executors)."""
    if not n:
        yield
        return
    import torch  # noqa: F401  (cached after the first cell)

    with thread_limits(int(n), name="threads_per_cell"):
        yield


def _worker_init(threads: int | None, parent: int | None = None, signal_on_death: bool = False) -> None:
    """A pool worker: ``threads`` threads for BLAS/OpenMP (and torch) before any numerics are
    imported, and it dies with its parent process ``parent`` (:func:`die_with_parent`)."""
    if parent is not None:
        die_with_parent(parent, signal_on_death=signal_on_death)
    # Ctrl-C reaches every process of the terminal's group: the driver stops the pool (and says so
    # in one line); a worker that raised KeyboardInterrupt itself would print a traceback each
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if threads:
        apply_thread_setting(int(threads), name="threads_per_cell")


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, poll_s: float = 1.0, signal_on_death: bool = False) -> None:
    """End this process when process ``parent`` dies, even by SIGKILL (which gives the parent no
    chance to stop its pool): a daemon thread checks every ``poll_s`` seconds that ``parent`` is
    still this process's parent and ends the process when it is not. With ``signal_on_death`` (on
    Linux), the kernel also sends SIGKILL at once when the parent dies (``prctl(PR_SET_PDEATHSIG)``);
    the kernel counts the death of the parent's *thread* that started this process, so the parent
    asks for it only when that thread is its main thread."""
    if signal_on_death and sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):  # no libc (musl without prctl): the watchdog still runs
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above ran
        os._exit(1)

    def watch():
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="fedclust-parent-watchdog", daemon=True).start()


def call_cell(fn: Callable, cell: Any, threads: int | None = 1, cwd: str | None = None):
    """``fn(cell)`` under ``threads`` threads (what every executor runs for one cell); in ``cwd``
    when given and present (a Ray worker starts elsewhere; relative data paths are the driver's)."""
    if cwd and os.getcwd() != cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    with limited_threads(threads):
        return fn(cell)


def _iter_processes(fn, cells, idx, threads, max_workers):

    if max_workers < 1:
        raise ValueError(f"executor_options.max_workers must be >= 1, got {max_workers}")
    pool = ProcessPoolExecutor(
        max_workers=min(max_workers, len(idx)),
        mp_context=mp.get_context("spawn"),
        initializer=_worker_init,
        initargs=(threads, os.getpid(), threading.current_thread() is threading.main_thread()),
    )
    clean = False
    try:
        pending = {pool.submit(call_cell, fn, cells[i], threads): i for i in idx}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f]):
                i = pending.pop(fut)
                yield i, fut.result()
        clean = True
    finally:
        if clean:
            pool.shutdown(wait=True)
        else:  # interrupted or a cell failed: do not wait for the cells still running
            procs = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                with contextlib.suppress(Exception):
                    p.terminate()
