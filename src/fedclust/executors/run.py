"""The one way to run a grid's cells: :func:`run_cells` on an executor, logging and storing each cell
as it finishes, resuming what finished (:mod:`fedclust.executors`)."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from filelock import FileLock
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedclust.executors.local import EXECUTORS, _iter_processes, call_cell
from fedclust.executors.ray import _iter_ray
from fedclust.executors.store import CellStore, cell_key, code_version, store_key

logger = logging.getLogger("fedclust.executors")


def iter_cells(
    fn: Callable,
    cells: Sequence,
    executor: str = "serial",
    options: dict | None = None,
    indices: Sequence[int] | None = None,
) -> Iterator[tuple[int, Any]]:
    """Run ``fn`` on ``cells[i]`` for ``i`` in ``indices`` (default all); yield ``(i, result)`` in the
    order they finish. ``fn`` must be a module-level (picklable) function for processes and Ray."""
    options = dict(options or {})
    idx = list(range(len(cells))) if indices is None else list(indices)
    threads = options.get("threads_per_cell", 1)
    if not idx:
        return
    if executor == "serial":
        for i in idx:
            yield i, call_cell(fn, cells[i], threads)
    elif executor == "processes":
        yield from _iter_processes(fn, cells, idx, threads, int(options.get("max_workers") or 2))
    elif executor == "ray":
        yield from _iter_ray(fn, cells, idx, threads, options)
    else:
        raise ValueError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")


class _CellProgress:
    """A progress bar over grid cells on a terminal (rich); nothing when stderr is not a TTY."""

    def __init__(self, label: str, total: int):

        self._bar = None
        if not sys.stderr.isatty() or total <= 1:
            return
        try:
            bar = Progress(
                TextColumn(f"[bold]{label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                transient=True,
            )
            self._task = bar.add_task("", total=total)
            bar.start()  # fails when another live display is active: no bar then
            self._bar = bar
        except Exception:
            self._bar = None

    def advance(self, description: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=description)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _module_of(fn: Callable) -> str | None:
    """The module that defines ``fn`` (a function, a static method or a callable object)."""
    return getattr(fn, "__module__", None) or getattr(type(fn), "__module__", None)


@dataclasses.dataclass
class _Grid:
    """The cells of one :func:`run_cells` call, where they run, and their results so far."""

    fn: Callable
    cells: list
    executor: str
    options: dict | None
    label: str
    store: CellStore | None = None
    code: str | None = None
    #: per cell, with a store: its id (settings), its data's hash and its key in the store
    ids: list[str] = dataclasses.field(default_factory=list)
    datas: list[str] = dataclasses.field(default_factory=list)
    keys: list[str] = dataclasses.field(default_factory=list)
    results: list = dataclasses.field(default_factory=list)
    have: list[bool] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.cells)
        self.have = [False] * len(self.cells)

    def key_cells(self, data_of: Callable[[Any], str] | None) -> None:
        """The store keys of the cells: settings, code version and input data."""
        self.code = self.code or code_version(_module_of(self.fn))
        self.ids = [cell_key(c) for c in self.cells]
        self.datas = [data_of(c) if data_of is not None else "" for c in self.cells]
        self.keys = [store_key(i, self.code, d) for i, d in zip(self.ids, self.datas)]

    def resume(self) -> None:
        """Take the cells already in the store; say how many stored ones are stale, and why."""
        stored = self.store.load_shared()
        changed = {"data": 0, "code": 0}
        for i, k in enumerate(self.keys):
            if k in stored:
                self.results[i], self.have[i] = stored[k], True
            elif self.ids[i] in self.store.seen:
                changed["data" if self.store.seen[self.ids[i]][1] != self.datas[i] else "code"] += 1
        if changed["data"] or changed["code"]:
            logger.info(
                "%s: %d stored cell(s) are recomputed because their input data changed and %d "
                "because their code changed",
                self.label,
                changed["data"],
                changed["code"],
            )


def run_cells(
    fn: Callable,
    cells: Sequence,
    executor: str = "serial",
    options: dict | None = None,
    on_done: Callable[[int, Any, bool], None] | None = None,
    store: CellStore | str | None = None,
    resume: bool = True,
    label: str = "grid",
    name: Callable[[Any], str] | None = None,
    data_of: Callable[[Any], str] | None = None,
    code: str | None = None,
) -> list:
    """Run ``fn`` on every cell with ``executor``; return the results in the order of ``cells``.

    ``on_done(index, result, resumed)`` is called in this process for every cell, as it finishes
    (``resumed=True`` for a cell taken from ``store``). With a ``store``, every finished cell is
    appended to it at once; with ``resume`` the cells already there are not run again (``resume=False``
    starts the store afresh). A stored cell counts as "already there" when its settings, the code
    version (``code``; default :func:`code_version` of ``fn``'s module) and the hash of its input
    data (``data_of(cell)``, e.g. :func:`fedclust.grids.cell_data_digest`) are all the same.
    """
    if isinstance(store, (str, os.PathLike)):
        store = CellStore(store)
    grid = _Grid(fn, list(cells), executor, options, label, store=store, code=code)
    if store is not None:
        grid.key_cells(data_of)
        if resume:
            grid.resume()
        else:
            store.clear()
    n = len(grid.cells)
    todo = [i for i in range(n) if not grid.have[i]]
    if n - len(todo):
        logger.info(
            "%s: %d of %d cells resumed from %s (resume: false recomputes them)", label, n - len(todo), n, store.path
        )
    for i in range(n):
        if grid.have[i] and on_done is not None:
            on_done(i, grid.results[i], True)
    logger.info("%s: %d cell(s) to run on executor %r", label, len(todo), executor)
    t_all = time.perf_counter()
    bar = _CellProgress(label, len(todo))
    done = 0

    def finished(i: int, res, resumed: bool) -> None:
        nonlocal done
        grid.results[i], grid.have[i] = res, True
        if on_done is not None:
            on_done(i, res, resumed)
        done += 1
        desc = name(grid.cells[i]) if name else f"cell {i}"
        bar.advance(desc)
        logger.debug("%s: %s done (%d/%d, %.0f s)", label, desc, done, len(todo), time.perf_counter() - t_all)

    try:
        if store is None:
            for i, res in iter_cells(fn, grid.cells, executor, options, todo):
                finished(i, res, False)
        else:
            _run_shared(grid, todo, finished)
    finally:
        bar.close()
    logger.info("%s: %d cell(s) in %.1f s", label, len(todo), time.perf_counter() - t_all)
    return grid.results


#: the most cells one process claims at a time on a parallel executor: one open lock file each
CLAIM_BATCH = 256


def _run_shared(grid: _Grid, todo: list[int], finished: Callable[[int, Any, bool], None]) -> None:
    """Run the cells ``todo`` with a store that other processes may share: claim a cell before
    computing it (the serial executor one at a time, so that two runs share the work; a parallel one
    a batch at a time), take from the store what another process stored meanwhile, skip the cells
    another process is computing and come back to them at the end, waiting for their claims."""
    pending = list(todo)
    batch = 1 if grid.executor == "serial" else CLAIM_BATCH
    waiting_said = False
    while pending:
        newer = grid.store.refresh()
        if newer:  # cells another process finished since this one last looked
            for i in pending:
                if grid.keys[i] in newer:
                    finished(i, newer[grid.keys[i]], True)
            pending = [i for i in pending if grid.keys[i] not in newer]
        claims: dict[int, FileLock] = {}
        busy: list[int] = []
        for i in pending:
            if len(claims) >= batch:
                break
            lock = grid.store.claim(grid.keys[i])
            if lock is None:
                busy.append(i)
            else:
                claims[i] = lock
        # stored between our last look and the claim: every pending cell read here is taken, not only
        # the claimed ones (this read is the store's latest: the next look sees nothing newer in it)
        newer = grid.store.refresh() if claims else None
        for i in [i for i in pending if newer and grid.keys[i] in newer]:
            if i in claims:
                grid.store.unclaim(claims.pop(i), stored=True)
            finished(i, newer[grid.keys[i]], True)
        busy = [i for i in busy if not grid.have[i]]
        if claims:
            try:
                for i, res in iter_cells(grid.fn, grid.cells, grid.executor, grid.options, list(claims)):
                    grid.store.append(
                        grid.keys[i], grid.cells[i], res, cell_id=grid.ids[i], code=grid.code, data=grid.datas[i]
                    )
                    grid.store.unclaim(claims.pop(i), stored=True)
                    finished(i, res, False)
            finally:
                for lock in claims.values():  # a failed or interrupted batch: its cells are free again
                    grid.store.unclaim(lock, stored=False)
        elif busy:
            if not waiting_said:
                logger.info(
                    "%s: %d cell(s) are being computed by another run on %s; waiting for them",
                    grid.label,
                    len(busy),
                    grid.store.path,
                )
                waiting_said = True
            grid.store.wait_for(grid.keys[busy[0]])
        pending = [i for i in pending if not grid.have[i]]


def same_results(a, b, ignore: Sequence[str] = ("wall_time_s",)) -> bool:
    """Whether two results are equal, bit for bit, except the keys in ``ignore`` (timings)."""

    if isinstance(a, dict) and isinstance(b, dict):
        ka = {k for k in a if k not in ignore}
        kb = {k for k in b if k not in ignore}
        return ka == kb and all(same_results(a[k], b[k], ignore) for k in ka)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_results(x, y, ignore) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b
