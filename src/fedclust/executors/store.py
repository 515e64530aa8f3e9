"""The store of a grid's finished cells (:class:`CellStore`, JSON lines keyed by the cell, its data
and the code version) and the code versions that key it (:mod:`fedclust.executors`)."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout

from fedclust.digest import file_digest, text_digest

logger = logging.getLogger("fedclust.executors")


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
_ROOT = Path(__file__).resolve().parent.parent


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
