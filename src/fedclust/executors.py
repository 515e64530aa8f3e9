"""Run the cells of a grid through an executor, log each as it finishes, resume what finished.

A grid is a list of *cells* (plain, JSON-ready dicts) and a pure module-level function
``run_cell(cell) -> result``: everything a cell computes follows from its dict (its seed included),
so the results do not depend on where or in which order the cells run. Executors:

* ``serial``: one cell after the other in this process (the default);
* ``processes``: a local pool of ``max_workers`` processes (default 2), started with ``spawn``;
* ``ray``: Ray tasks, on a local Ray instance (``num_cpus`` CPUs, default all) or on an existing
  cluster (``address: auto`` or ``ray://host:10001``); Ray is an optional extra
  (``pip install -e '.[ray]'``).

Every executor runs a cell with ``threads_per_cell`` (default 1) BLAS/torch threads, so that a cell
computes the same bits everywhere. :func:`run_cells` hands each finished result to ``on_done`` in
this process (MLflow logging, progress) and appends it to a :class:`CellStore` (JSON lines, keyed by
a hash of the cell): a re-run with the same cells skips the ones already on disk, so an interrupted
sweep keeps what finished. Results come back in the order of the cells, whatever the executor.

No Kedro imports here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

logger = logging.getLogger(__name__)

EXECUTORS = ("serial", "processes", "ray")
#: the keys of a grid's config that say how to run it, not what to compute (never part of a cell)
EXECUTION_KEYS = ("executor", "executor_options", "resume")
RAY_MISSING = ("the 'ray' executor needs Ray, which is not installed: pip install -e '.[ray]' "
               "(or pip install 'ray[default]>=2.9,<3'), or choose executor: serial or processes")


# ---------------------------------------------------------------------------------------------
# execution settings


def execution(config: dict | None) -> dict:
    """``{executor, options, resume}`` from a grid config's ``executor``, ``executor_options`` and
    ``resume`` keys (defaults: serial, {}, true); errors name the key."""
    config = config or {}
    name = config.get("executor") or "serial"
    if name not in EXECUTORS:
        raise ValueError(f"config.executor must be one of {list(EXECUTORS)}, got {name!r}")
    options = dict(config.get("executor_options") or {})
    allowed = {"serial": {"threads_per_cell"},
               "processes": {"threads_per_cell", "max_workers"},
               "ray": {"threads_per_cell", "address", "num_cpus", "init_options"}}[name]
    bad = sorted(set(options) - allowed)
    if bad:
        raise ValueError(f"config.executor_options: unknown option(s) {bad} for executor {name!r} "
                         f"(allowed: {sorted(allowed)})")
    resume = config.get("resume", True)
    if not isinstance(resume, bool):
        raise ValueError(f"config.resume must be true or false, got {resume!r}")
    return {"executor": name, "options": options, "resume": resume}


def without_execution(config: dict | None) -> dict:
    """``config`` less the execution keys (what a cell may depend on)."""
    return {k: v for k, v in (config or {}).items() if k not in EXECUTION_KEYS}


# ---------------------------------------------------------------------------------------------
# threads


@contextlib.contextmanager
def limited_threads(n: int | None):
    """Run the body with ``n`` torch and BLAS/OpenMP threads (:func:`fedclust.threads.thread_limits`);
    ``None`` or 0 leaves them as they are. torch is imported first, so that a cell that imports it
    inside the block runs with ``n`` threads too (bit-identical results across executors)."""
    if not n:
        yield
        return
    import torch  # noqa: F401  (cached after the first cell)

    from fedclust.threads import thread_limits

    with thread_limits(int(n), name="threads_per_cell"):
        yield


def _worker_init(threads: int | None) -> None:
    """A pool worker: ``threads`` threads for BLAS/OpenMP (and torch) before any numerics are imported."""
    if threads:
        from fedclust.threads import apply_thread_setting

        apply_thread_setting(int(threads), name="threads_per_cell")


def call_cell(fn: Callable, cell: Any, threads: int | None = 1, cwd: str | None = None):
    """``fn(cell)`` under ``threads`` threads (what every executor runs for one cell); in ``cwd``
    when given and present (a Ray worker starts elsewhere; relative data paths are the driver's)."""
    if cwd and os.getcwd() != cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    with limited_threads(threads):
        return fn(cell)


# ---------------------------------------------------------------------------------------------
# executors: yield (index, result) as cells finish


def iter_cells(fn: Callable, cells: Sequence, executor: str = "serial", options: dict | None = None,
               indices: Sequence[int] | None = None) -> Iterator[tuple[int, Any]]:
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


def _iter_processes(fn, cells, idx, threads, max_workers):
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    if max_workers < 1:
        raise ValueError(f"executor_options.max_workers must be >= 1, got {max_workers}")
    pool = ProcessPoolExecutor(max_workers=min(max_workers, len(idx)), mp_context=mp.get_context("spawn"),
                               initializer=_worker_init, initargs=(threads,))
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


def import_ray():
    """``ray``, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(RAY_MISSING) from exc
    return ray


def _iter_ray(fn, cells, idx, threads, options):
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        address = options.get("address")
        init = {"address": address}
        if not address:  # a local instance of num_cpus CPUs (default: all), no dashboard
            init["include_dashboard"] = False
            if options.get("num_cpus"):
                init["num_cpus"] = int(options["num_cpus"])
        init.update(options.get("init_options") or {})
        logger.info("ray: %s", f"connecting to {address}" if address else "starting a local instance")
        ray.init(**init)
        started = True
    remote = ray.remote(num_cpus=1, max_retries=0)(call_cell)
    clean = False
    pending: dict = {}
    try:
        fn_ref = ray.put(fn)
        cwd = os.getcwd()
        pending = {remote.remote(fn_ref, cells[i], threads, cwd): i for i in idx}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                yield i, ray.get(ref)
        clean = True
    finally:
        if not clean:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
        if started:
            ray.shutdown()


# ---------------------------------------------------------------------------------------------
# the records on disk


def _encode(v):
    """JSON-ready, type-preserving: numpy arrays and scalars, tuples and non-string keys are tagged."""
    import numpy as np

    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v):
            if any(k.startswith("__") and k.endswith("__") for k in v):
                return {"__dict__": [[k, _encode(x)] for k, x in v.items()]}
            return {k: _encode(x) for k, x in v.items()}
        return {"__dict__": [[_encode(k), _encode(x)] for k, x in v.items()]}
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, tuple):
        return {"__tuple__": [_encode(x) for x in v]}
    if isinstance(v, np.ndarray):
        return {"__ndarray__": _encode(v.tolist()), "dtype": v.dtype.str, "shape": list(v.shape)}
    if isinstance(v, np.generic):
        return {"__npscalar__": _encode(v.item()), "dtype": v.dtype.str}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    raise TypeError(f"cannot store a {type(v).__name__} in a cell record: {v!r:.80}")


def _decode(v):
    import numpy as np

    if isinstance(v, list):
        return [_decode(x) for x in v]
    if isinstance(v, dict):
        if "__dict__" in v and len(v) == 1:
            return {_decode(k): _decode(x) for k, x in v["__dict__"]}
        if "__tuple__" in v and len(v) == 1:
            return tuple(_decode(x) for x in v["__tuple__"])
        if "__ndarray__" in v:
            return np.array(_decode(v["__ndarray__"]), dtype=np.dtype(v["dtype"])).reshape(v["shape"])
        if "__npscalar__" in v:
            return np.dtype(v["dtype"]).type(_decode(v["__npscalar__"]))
        return {k: _decode(x) for k, x in v.items()}
    return v


def cell_key(cell: Any) -> str:
    """A stable hash of a cell (its canonical JSON): the cell's name in the store."""
    text = json.dumps(_encode(cell), sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def code_version() -> str:
    """A hash of the library's source (``fedclust`` without its Kedro side) and of the versions of the
    numerical packages it builds on: stored results from other code are not resumed."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("numpy", "scipy", "scikit-learn", "torch", "dp-accounting"):  # numerics we build on
        try:
            h.update(f"{dist}=={version(dist)}".encode())
        except PackageNotFoundError:
            pass
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith("pipelines/") or rel in ("hooks.py", "settings.py", "pipeline_registry.py", "__main__.py"):
            continue
        h.update(rel.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


class CellStore:
    """The finished cells of a grid, one JSON line each: ``{"key", "code", "cell", "result"}``.

    Appends are flushed line by line, so an interrupted run keeps every finished cell; a torn last
    line (killed while writing) is ignored. Lines written by other library code are not resumed.
    """

    def __init__(self, path: str | os.PathLike, code: str | None = None):
        self.path = Path(path)
        self.code = code or code_version()

    def load(self) -> dict[str, Any]:
        """``{key: result}`` of the cells finished with this code."""
        out: dict[str, Any] = {}
        if not self.path.exists():
            return out
        stale = 0
        with self.path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by an interruption
                if row.get("code") != self.code:
                    stale += 1
                    continue
                out[row["key"]] = _decode(row["result"])
        if stale:
            logger.info("%s: %d stored cell(s) came from other code; they are recomputed", self.path, stale)
        return out

    def append(self, key: str, cell: Any, result: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"key": key, "code": self.code, "cell": _encode(cell), "result": _encode(result)},
                          allow_nan=True, separators=(",", ":"))
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def clear(self) -> None:
        if self.path.exists():
            self.path.unlink()


# ---------------------------------------------------------------------------------------------
# the driver


class _CellProgress:
    """A progress bar over grid cells on a terminal (rich); nothing when stderr is not a TTY."""

    def __init__(self, label: str, total: int):
        import sys

        self._bar = None
        if not sys.stderr.isatty() or total <= 1:
            return
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            bar = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           TextColumn("{task.description}"), transient=True)
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



def run_cells(fn: Callable, cells: Sequence, executor: str = "serial", options: dict | None = None,
              on_done: Callable[[int, Any, bool], None] | None = None, store: CellStore | str | None = None,
              resume: bool = True, label: str = "grid", name: Callable[[Any], str] | None = None) -> list:
    """Run ``fn`` on every cell with ``executor``; return the results in the order of ``cells``.

    ``on_done(index, result, resumed)`` is called in this process for every cell, as it finishes
    (``resumed=True`` for a cell taken from ``store``). With a ``store``, every finished cell is
    appended to it at once; with ``resume`` the cells already there are not run again (``resume=False``
    starts the store afresh).
    """
    cells = list(cells)
    if isinstance(store, (str, os.PathLike)):
        store = CellStore(store)
    keys = [cell_key(c) for c in cells] if store is not None else []
    results: list = [None] * len(cells)
    have = [False] * len(cells)
    if store is not None:
        if resume:
            stored = store.load()
            for i, k in enumerate(keys):
                if k in stored:
                    results[i], have[i] = stored[k], True
        else:
            store.clear()
    todo = [i for i in range(len(cells)) if not have[i]]
    n_resumed = len(cells) - len(todo)
    if n_resumed:
        logger.info("%s: %d of %d cells resumed from %s (resume: false recomputes them)", label, n_resumed,
                    len(cells), store.path)
    for i in range(len(cells)):
        if have[i] and on_done is not None:
            on_done(i, results[i], True)
    logger.info("%s: %d cell(s) to run on executor %r", label, len(todo), executor)
    t_all = time.perf_counter()
    bar = _CellProgress(label, len(todo))
    try:
        for n, (i, res) in enumerate(iter_cells(fn, cells, executor, options, todo), 1):
            results[i], have[i] = res, True
            if store is not None:
                store.append(keys[i], cells[i], res)
            if on_done is not None:
                on_done(i, res, False)
            desc = name(cells[i]) if name else f"cell {i}"
            bar.advance(desc)
            logger.debug("%s: %s done (%d/%d, %.0f s)", label, desc, n, len(todo), time.perf_counter() - t_all)
    finally:
        bar.close()
    logger.info("%s: %d cell(s) in %.1f s", label, len(todo), time.perf_counter() - t_all)
    return results


def same_results(a, b, ignore: Sequence[str] = ("wall_time_s",)) -> bool:
    """Whether two results are equal, bit for bit, except the keys in ``ignore`` (timings)."""
    import numpy as np

    if isinstance(a, dict) and isinstance(b, dict):
        ka = {k for k in a if k not in ignore}
        kb = {k for k in b if k not in ignore}
        return ka == kb and all(same_results(a[k], b[k], ignore) for k in ka)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_results(x, y, ignore) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b
