"""Run the cells of a grid through an executor, log each as it finishes, resume what finished.

A grid is a list of *cells* (plain, JSON-ready dicts) and a pure module-level function
``run_cell(cell) -> result``: everything a cell computes follows from its dict (its seed included),
so the results do not depend on where or in which order the cells run. Executors:

* ``serial``: one cell after the other in this process (the default);
* ``processes``: a local pool of ``max_workers`` processes (default 2), started with ``spawn``; a
  worker dies with the process that started it, even when that one is killed with SIGKILL;
* ``ray``: Ray tasks, on a local Ray instance (``num_cpus`` CPUs, default all) or on an existing
  cluster (``address: auto`` or ``ray://host:10001``); Ray is an optional extra
  (``pip install -e '.[ray]'``). Its tasks are never retried (``max_retries=0``) and belong to the
  driver's job, so they end with the driver: an interrupted or failed grid cancels them, and when the
  driver is killed (SIGKILL included) Ray ends the job's tasks, on a local instance (whose processes
  share the driver's fate) as on a cluster.

Every executor runs a cell with ``threads_per_cell`` (default 1) BLAS/torch threads, so that a cell
computes the same bits everywhere. :func:`run_cells` hands each finished result to ``on_done`` in
this process (MLflow logging, progress) and appends it to a :class:`CellStore` (JSON lines, keyed by
a hash of the cell): a re-run with the same cells skips the ones already on disk, so an interrupted
sweep keeps what finished. Results come back in the order of the cells, whatever the executor.

No Kedro imports here.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import hashlib
import json
import logging
import math
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from filelock import FileLock, Timeout
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedclust.digest import file_digest, text_digest
from fedclust.threads import apply_thread_setting, thread_limits

logger = logging.getLogger(__name__)

EXECUTORS = ("serial", "processes", "ray")
#: the keys of a grid's config that say how to run it, not what to compute (never part of a cell)
EXECUTION_KEYS = ("executor", "executor_options", "resume")
RAY_MISSING = (
    "the 'ray' executor needs Ray, which is not installed: pip install -e '.[ray]' "
    "(or pip install 'ray[default]>=2.9,<3'), or choose executor: serial or processes"
)


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


# ---------------------------------------------------------------------------------------------
# executors: yield (index, result) as cells finish


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


def import_ray():
    """``ray``, or an ImportError that says how to install it."""
    try:
        # ray is an optional dependency (pip install -e '.[ray]'), needed only by the ray executor
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
    """A stable hash of a cell's settings (its canonical JSON): the cell's identity in a grid."""
    text = json.dumps(_encode(cell), sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def store_key(cell_id: str, code: str, data: str) -> str:
    """The key of a stored cell: its settings (``cell_id``), the code version that computes it and
    a hash of the content of its input data. A cell is resumed only when all three are equal."""
    return text_digest(cell_id, code, data)[:20]


#: the numerical packages whose versions are part of every code version
NUMERIC_PACKAGES = ("numpy", "scipy", "scikit-learn", "torch", "dp-accounting")
#: the folder of the ``fedclust`` package (the sources that code versions hash)
_ROOT = Path(__file__).resolve().parent


def _package_versions() -> list[str]:
    out = []
    for dist in NUMERIC_PACKAGES:
        try:
            out.append(f"{dist}=={version(dist)}")
        except PackageNotFoundError:
            out.append(f"{dist}==none")
    return out


def _fedclust_file(name: str, root: Path) -> Path | None:
    """The source of module ``fedclust.a.b`` under ``root`` (the package's folder), or None."""
    parts = name.split(".")[1:]
    base = root.joinpath(*parts)
    for p in (base.with_suffix(".py") if parts else None, base / "__init__.py"):
        if p is not None and p.is_file():
            return p
    return None


def _imports(path: Path) -> set[str]:
    """The ``fedclust`` modules a source file imports, anywhere in it (also inside functions), and
    the packages above them (importing ``fedclust.a.b`` runs ``fedclust/a/__init__.py``)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)  # kept when it is a module
    out = set()
    for n in names:
        parts = n.split(".")
        if parts[0] == "fedclust":
            out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def module_closure(module: str, root: Path | None = None) -> dict[str, Path]:
    """``{name: source}`` of ``module`` and every ``fedclust`` module it imports, directly or not."""
    root = root or _ROOT
    start = _fedclust_file(module, root) if module.split(".")[0] == "fedclust" else None
    if start is None:  # a module outside the package (a test's stand-in for run_cell)
        start = getattr(sys.modules.get(module), "__file__", None)
        start = Path(start) if start else None
    out: dict[str, Path] = {}
    todo = [(module, start)]
    while todo:
        name, path = todo.pop()
        if path is None or name in out:
            continue
        out[name] = path
        for dep in _imports(path):
            if dep not in out:
                todo.append((dep, _fedclust_file(dep, root)))
    return out


def code_version(module: str | None = None, root: Path | None = None) -> str:
    """A hash of the code that computes a grid's cells: the sources of ``module`` (the module of
    its ``run_cell``) and of every ``fedclust`` module it imports, directly or not, with the
    versions of the numerical packages. Editing a module that the grid does not import (another
    method, the plots, the Kedro pipelines) keeps its stored cells. Without ``module``: every
    library module (``fedclust`` less its Kedro side)."""
    root = root or _ROOT
    if module is None:
        files = {
            p.relative_to(root).as_posix(): p
            for p in sorted(root.rglob("*.py"))
            if not p.relative_to(root).as_posix().startswith(("pipelines/", "hooks/"))
            and p.name not in ("settings.py", "pipeline_registry.py", "__main__.py")
        }
    else:
        files = module_closure(module, root)
    parts = _package_versions()
    for name in sorted(files):
        parts += [name, file_digest(files[name])]
    return text_digest(*parts)[:12]


class CellStore:
    """The finished cells of a grid, one JSON line each:
    ``{"key", "cell_id", "code", "data", "cell", "result"}``.

    Each record is written with one ``write`` of a newline-terminated line, then flushed and
    fsynced, so that an interrupted run keeps every finished cell. A run killed while writing can
    leave a torn last line (no newline at its end): it is dropped with a warning, on reading and
    before the next record is appended, so that it never swallows the next cell. With ``code``,
    only the records of that code version are read (the keys of :func:`run_cells` cover it anyway).

    Several processes may share one store (two grid runs in one project). Every append, and every
    read by :func:`run_cells`, holds the store's lock (:meth:`locked`), so that no process reads a
    line another one is writing or cuts it as torn; and a process claims a cell (:meth:`claim`)
    before computing it, so that no cell is computed twice. Both are ``filelock`` locks on files in
    a hidden folder beside the store (``.cells.jsonl.locks/``): kernel locks (``flock``), which the
    OS releases when their holder dies, even by SIGKILL, so a crashed run never leaves a cell or
    the store locked. (A store in SQLite with transactions would do the same for the records, but
    not for the claims of cells still being computed, and would change the format that runs resume.)
    """

    def __init__(self, path: str | os.PathLike, code: str | None = None):
        self.path = Path(path)
        self.code = code
        #: cell_id -> (code, data) of the records read by the last :meth:`load`
        self.seen: dict[str, tuple] = {}
        #: the size of the file as this process last read or wrote it (another process appended
        #: when it differs): see :meth:`refresh`
        self._known_size: int | None = None

    @property
    def lock_dir(self) -> Path:
        return self.path.with_name(f".{self.path.name}.locks")

    def _lock(self, name: str) -> FileLock:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        return FileLock(self.lock_dir / f"{name}.lock")

    @contextlib.contextmanager
    def locked(self):
        """The whole store, for one read or one append (a few milliseconds)."""
        try:
            lock: FileLock | None = self._lock("store")
            lock.acquire()
        except OSError:  # a folder that cannot hold the lock (read-only): reading stays possible
            lock = None
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

    def _size(self) -> int | None:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return None

    def load_shared(self) -> dict[str, Any]:
        """:meth:`load` under the store's lock, remembering the size read."""
        with self.locked():
            size = self._size()
            out = self.load()
        self._known_size = size
        return out

    def refresh(self) -> dict[str, Any] | None:
        """The stored cells read again when another process appended since this one last read or
        wrote the store, else None (nothing new)."""
        if self._size() == self._known_size:
            return None
        return self.load_shared()

    def claim(self, key: str) -> FileLock | None:
        """The claim on cell ``key`` (held until released), or None while another process holds it."""
        lock = self._lock(key)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return None
        return lock

    def wait_for(self, key: str, poll_s: float = 0.5) -> None:
        """Until no process holds the claim on cell ``key`` (its result is stored, or its run ended)."""
        lock = self._lock(key)
        lock.acquire(poll_interval=poll_s)
        lock.release()

    def unclaim(self, lock: FileLock, stored: bool) -> None:
        """Release a claim; once its cell is stored, its lock file goes (a process that opened it
        meanwhile finds the cell stored when it gets the lock, and computes nothing)."""
        lock.release()
        if stored:
            with contextlib.suppress(OSError):
                os.unlink(lock.lock_file)

    def load(self) -> dict[str, Any]:
        """``{key: result}`` of the stored cells (of this store's code version, when it has one)."""
        out: dict[str, Any] = {}
        self.seen = {}
        if not self.path.exists():
            return out
        stale = 0
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        for n, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            last = n == len(lines)  # text after the last newline: a record cut short
            try:
                row = json.loads(raw)
                if last:
                    raise ValueError("no newline")
            except ValueError:
                where = "torn last line (a write cut short)" if last else f"unreadable line {n} (not JSON)"
                logger.warning("%s: %s dropped; its cell is recomputed", self.path, where)
                continue
            if (why := _not_a_record(row)) is not None:
                logger.warning(
                    "%s: line %d is not a cell record (%s): skipped; its cell is recomputed", self.path, n, why
                )
                continue
            if self.code is not None and row.get("code") != self.code:
                stale += 1
                continue
            try:
                result = _decode(row["result"])
            except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a tagged value that is not ours
                logger.warning(
                    "%s: line %d has an unreadable result (%s): skipped; its cell is recomputed", self.path, n, exc
                )
                continue
            out[row["key"]] = result
            if "cell_id" in row:
                self.seen[row["cell_id"]] = (row.get("code"), row.get("data"))
        if stale:
            logger.info("%s: %d stored cell(s) came from other code; they are recomputed", self.path, stale)
        return out

    def _drop_torn_tail(self) -> None:
        """Cut a torn last line (no newline at the end of the file) before appending to it."""
        try:
            fh = self.path.open("rb+")
        except FileNotFoundError:
            return
        with fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            pos = size
            while pos > 0:  # back to the last newline
                step = min(_CHUNK, pos)
                fh.seek(pos - step)
                block = fh.read(step)
                cut = block.rfind(b"\n")
                if cut >= 0:
                    pos = pos - step + cut + 1
                    break
                pos -= step
            fh.truncate(pos)
            fh.flush()
            os.fsync(fh.fileno())
        logger.warning("%s: dropped a torn last line (%d bytes) left by an interrupted write", self.path, size - pos)

    def append(
        self,
        key: str,
        cell: Any,
        result: Any,
        *,
        cell_id: str | None = None,
        code: str | None = None,
        data: str | None = None,
    ) -> None:
        """Write one record: a single newline-terminated line, flushed and fsynced, under the store's
        lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.locked():
            self._append(key, cell, result, cell_id=cell_id, code=code, data=data)

    def _append(self, key, cell, result, *, cell_id, code, data) -> None:
        new = not self.path.exists()
        if not new:
            self._drop_torn_tail()
        before = self._size()
        row = {
            "key": key,
            "cell_id": cell_id,
            "code": code or self.code,
            "data": data,
            "cell": _encode(cell),
            "result": _encode(result),
        }
        line = (json.dumps(row, allow_nan=True, separators=(",", ":")) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(line)
            while view:  # one write for the whole line; loop only if the kernel wrote part of it
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:  # the file's entry in its folder is durable too
            _fsync_dir(self.path.parent)
        if before == self._known_size:
            self._known_size = (before or 0) + len(line)  # nothing new from others: no need to read it again

    def clear(self) -> None:
        if self.path.exists():
            self.path.unlink()


_CHUNK = 1 << 16


def _not_a_record(row) -> str | None:
    """Why a parsed JSON line is not a cell record (as :meth:`CellStore.append` writes them), or
    None when it is one: an object with a string ``key``, a ``result``, and ``cell_id``, ``code``
    and ``data`` that are strings or null when present."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__ if row is not None else 'null'}, not an object"
    missing = [k for k in ("key", "result") if k not in row]
    if missing:
        return f"no {' and no '.join(repr(k) for k in missing)}"
    bad = [k for k in ("key", "cell_id", "code", "data") if k in row and not isinstance(row[k], (str, type(None)))]
    if not isinstance(row["key"], str) or bad:
        return f"{', '.join(repr(k) for k in (bad or ['key']))} not a string"
    return None


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not possible on every platform
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# the driver


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
    cells = list(cells)
    if isinstance(store, (str, os.PathLike)):
        store = CellStore(store)
    keys: list[str] = []
    ids: list[str] = []
    datas: list[str] = []
    if store is not None:
        code = code or code_version(_module_of(fn))
        ids = [cell_key(c) for c in cells]
        datas = [data_of(c) if data_of is not None else "" for c in cells]
        keys = [store_key(i, code, d) for i, d in zip(ids, datas)]
    results: list = [None] * len(cells)
    have = [False] * len(cells)
    if store is not None:
        if resume:
            stored = store.load_shared()
            changed = {"data": 0, "code": 0}
            for i, k in enumerate(keys):
                if k in stored:
                    results[i], have[i] = stored[k], True
                elif ids[i] in store.seen:
                    changed["data" if store.seen[ids[i]][1] != datas[i] else "code"] += 1
            if changed["data"] or changed["code"]:
                logger.info(
                    "%s: %d stored cell(s) are recomputed because their input data changed and %d "
                    "because their code changed",
                    label,
                    changed["data"],
                    changed["code"],
                )
        else:
            store.clear()
    todo = [i for i in range(len(cells)) if not have[i]]
    n_resumed = len(cells) - len(todo)
    if n_resumed:
        logger.info(
            "%s: %d of %d cells resumed from %s (resume: false recomputes them)",
            label,
            n_resumed,
            len(cells),
            store.path,
        )
    for i in range(len(cells)):
        if have[i] and on_done is not None:
            on_done(i, results[i], True)
    logger.info("%s: %d cell(s) to run on executor %r", label, len(todo), executor)
    t_all = time.perf_counter()
    bar = _CellProgress(label, len(todo))
    done = 0

    def finished(i: int, res, resumed: bool) -> None:
        nonlocal done
        results[i], have[i] = res, True
        if on_done is not None:
            on_done(i, res, resumed)
        done += 1
        desc = name(cells[i]) if name else f"cell {i}"
        bar.advance(desc)
        logger.debug("%s: %s done (%d/%d, %.0f s)", label, desc, done, len(todo), time.perf_counter() - t_all)

    try:
        if store is None:
            for i, res in iter_cells(fn, cells, executor, options, todo):
                finished(i, res, False)
        else:
            _run_shared(fn, cells, executor, options, todo, store, keys, ids, datas, code, finished, have, label)
    finally:
        bar.close()
    logger.info("%s: %d cell(s) in %.1f s", label, len(todo), time.perf_counter() - t_all)
    return results


#: the most cells one process claims at a time on a parallel executor: one open lock file each
CLAIM_BATCH = 256


def _run_shared(fn, cells, executor, options, todo, store, keys, ids, datas, code, finished, have, label) -> None:
    """Run the cells ``todo`` with a store that other processes may share: claim a cell before
    computing it (the serial executor one at a time, so that two runs share the work; a parallel one
    a batch at a time), take from the store what another process stored meanwhile, skip the cells
    another process is computing and come back to them at the end, waiting for their claims."""
    pending = list(todo)
    batch = 1 if executor == "serial" else CLAIM_BATCH
    waiting_said = False
    while pending:
        newer = store.refresh()
        if newer:  # cells another process finished since this one last looked
            for i in pending:
                if keys[i] in newer:
                    finished(i, newer[keys[i]], True)
            pending = [i for i in pending if keys[i] not in newer]
        claims: dict[int, FileLock] = {}
        busy: list[int] = []
        for i in pending:
            if len(claims) >= batch:
                break
            lock = store.claim(keys[i])
            if lock is None:
                busy.append(i)
            else:
                claims[i] = lock
        newer = store.refresh() if claims else None  # stored between our last look and the claim
        for i in [i for i in claims if newer and keys[i] in newer]:
            store.unclaim(claims.pop(i), stored=True)
            finished(i, newer[keys[i]], True)
        if claims:
            try:
                for i, res in iter_cells(fn, cells, executor, options, list(claims)):
                    store.append(keys[i], cells[i], res, cell_id=ids[i], code=code, data=datas[i])
                    store.unclaim(claims.pop(i), stored=True)
                    finished(i, res, False)
            finally:
                for lock in claims.values():  # a failed or interrupted batch: its cells are free again
                    store.unclaim(lock, stored=False)
        elif busy:
            if not waiting_said:
                logger.info(
                    "%s: %d cell(s) are being computed by another run on %s; waiting for them",
                    label,
                    len(busy),
                    store.path,
                )
                waiting_said = True
            store.wait_for(keys[busy[0]])
        pending = [i for i in pending if not have[i]]


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
