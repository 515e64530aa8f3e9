"""Thread settings of torch and BLAS/OpenMP: the one place that sets them.

fedclust's hot loops are many small products (a federated round is hundreds of tiny matrix products),
where extra threads cost more than they give, and torch's intra-op pool, its OpenMP runtime and
numpy's OpenBLAS each default to one thread per core. Left alone on a machine already under load they
oversubscribe the cores: with 2 threads the clustered-FL engine ran up to 5x slower than with 1
(``benchmarks/bench_vs_frameworks.py`` measures both settings side by side).

The setting is one parameter, ``compute.threads`` in ``conf/base/parameters.yml``:

* ``null`` (None): leave every thread pool as it is (torch/OpenBLAS defaults, or ``OMP_NUM_THREADS``);
* an int ``n >= 1``: ``n`` torch intra-op threads AND ``n`` BLAS/OpenMP threads (OpenBLAS, MKL,
  libgomp, as seen by ``threadpoolctl``).

Two entry points:

* :func:`apply_thread_setting` once at process start (sets the pools for the rest of the process and
  ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/``OPENBLAS_NUM_THREADS`` for worker processes started later
  and for torch if it is not imported yet);
* :func:`thread_limits` as a context manager around one computation (sets, then restores).

torch is never imported here: if it is not loaded yet only the environment variables (read by torch at
import) and the BLAS/OpenMP pools already loaded are set, so numpy-only code pays no torch import.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

__all__ = ["check_threads", "thread_limits", "apply_thread_setting", "current_threads", "THREAD_ENV_VARS"]

#: Environment variables read by OpenMP, MKL and OpenBLAS (and by torch at import for its default).
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def check_threads(threads, name: str = "threads") -> int | None:
    """``None`` or an int >= 1; anything else raises a ValueError naming ``name``."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int):
        try:
            ok = isinstance(threads, np.integer)
        except ImportError:  # pragma: no cover
            ok = False
        if not ok:
            raise ValueError(f"{name} must be null (leave threads as they are) or an int >= 1, got {threads!r}")
    if int(threads) < 1:
        raise ValueError(f"{name} must be null (leave threads as they are) or an int >= 1, got {threads!r}")
    return int(threads)


def _torch():
    """The torch module if it is already imported, else None (never imports it)."""
    return sys.modules.get("torch")


def current_threads() -> dict:
    """The thread counts in force now: ``torch`` (intra-op, None if torch is not imported), ``blas`` and
    ``openmp`` (largest count among the loaded libraries of that kind, None if none is loaded)."""

    out: dict = {"torch": None, "blas": None, "openmp": None}
    t = _torch()
    if t is not None:
        out["torch"] = int(t.get_num_threads())
    for lib in threadpool_info():
        api = lib.get("user_api")
        if api in ("blas", "openmp"):
            out[api] = max(out[api] or 0, int(lib["num_threads"]))
    return out


@contextmanager
def thread_limits(threads, *, name: str = "threads") -> Iterator[int | None]:
    """Context: ``threads`` torch intra-op threads and ``threads`` BLAS/OpenMP threads inside, the
    previous settings restored on exit (also on an exception). ``None`` changes nothing.

    torch is set only if it is already imported (code that imports it inside the block gets torch's
    default, which follows ``OMP_NUM_THREADS``; :func:`apply_thread_setting` sets that). Yields the
    validated count."""
    n = check_threads(threads, name)
    if n is None:
        yield None
        return

    t = _torch()
    old = t.get_num_threads() if t is not None else None
    limiter = threadpool_limits(limits=n)  # every loaded BLAS and OpenMP library
    try:
        if t is not None:
            t.set_num_threads(n)
        yield n
    finally:
        limiter.restore_original_limits()
        if t is not None:
            t.set_num_threads(old)


def apply_thread_setting(threads, *, name: str = "compute.threads") -> dict:
    """Process-wide setting at run start (not restored): ``None`` leaves everything alone; an int sets
    torch's intra-op threads (if torch is imported), every loaded BLAS/OpenMP pool, and the environment
    variables :data:`THREAD_ENV_VARS` (torch imported later, and worker processes, follow them).

    Returns the settings now in force (:func:`current_threads`) plus ``"threads"``: the value applied."""
    n = check_threads(threads, name)
    if n is not None:
        for var in THREAD_ENV_VARS:
            os.environ[var] = str(n)

        threadpool_limits(limits=n)
        t = _torch()
        if t is not None:
            t.set_num_threads(n)
    return {"threads": n, **current_threads()}
