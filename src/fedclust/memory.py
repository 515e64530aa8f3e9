"""Memory before allocating: a run whose big arrays would not fit in the memory this machine has
available is refused up front, with the estimate, instead of dying deep inside numpy or torch
("Unable to allocate 13.2 TiB") or pushing the machine into swap.

A utility (no Kedro, no method imports): the callers (:func:`fedclust.registry.spec.estimate_work`)
say what their big arrays are; :func:`require_memory` compares their sum with the memory available now.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager

from fedclust.errors import FedclustError

#: an estimate above this share of the available memory is refused (the estimate is rough, and the
#: interpreter, the data set and the libraries need memory too)
MAX_SHARE = 0.9


def _libc(name: str):
    """The C library's function ``name`` (glibc's ``malloc_trim``, ``mallopt``), or None where the C
    library has none (macOS, Windows, musl)."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None


_MALLOC_TRIM = _libc("malloc_trim")
_MALLOPT = _libc("mallopt")
#: glibc's ``mallopt`` parameters: free memory kept at the heap's top, and the size above which a
#: block gets a mapping of its own
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: what :func:`large_blocks_kept` sets both to: blocks up to 1 GiB come from the heap and stay there
KEEP_BLOCKS = 1 << 30
#: what it leaves behind: the values glibc's own adjustment reaches once a large block was freed
#: (its ceiling of 32 MiB for the mapping threshold, and twice that kept at the top)
SETTLED_MMAP, SETTLED_TRIM = 32 << 20, 64 << 20


def resident_bytes() -> int | None:
    """This process's resident memory in bytes (Linux ``/proc``), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_free_memory(above: int | None = None) -> bool:
    """Hand the memory that the C allocator holds free back to the operating system (glibc's
    ``malloc_trim(0)``); with ``above``, only when the resident memory exceeds that many bytes. True
    when memory was released; False when none was, when the resident memory is at most ``above``, or
    where there is no ``malloc_trim``.

    Why: torch allocates a tensor's storage with ``malloc``. glibc serves blocks above a threshold
    from their own mappings, returned to the system when freed, but it raises that threshold to the
    size of each such block freed (up to 32 MiB). From then on blocks of that size come from the
    heap, and freed heap pages stay in the process, fragmented, counted in its resident memory. A
    loop that allocates and frees a chunk's tensors many times (the clustered-FL engine's chunks of
    clients) so grows its resident memory by hundreds of MB, by chance, from run to run. Trimming
    costs page faults when the memory is used again, so the engine trims only once the held memory
    passes a ceiling (``above``).
    """
    if _MALLOC_TRIM is None:
        return False
    if above is not None:
        rss = resident_bytes()
        if rss is None or rss <= above:
            return False
    return bool(_MALLOC_TRIM(0))


def keep_large_blocks() -> bool:
    """From now on (this process): glibc serves blocks of up to :data:`KEEP_BLOCKS` from its heap and
    keeps freed ones there (see :func:`large_blocks_kept`, which undoes it on leaving). For worker
    processes that only run the engine's chunks. False where there is no ``mallopt``."""
    if _MALLOPT is None:
        return False
    return bool(_MALLOPT(M_MMAP_THRESHOLD, KEEP_BLOCKS)) and bool(_MALLOPT(M_TRIM_THRESHOLD, KEEP_BLOCKS))


@contextmanager
def large_blocks_kept():
    """While inside: glibc serves blocks of up to :data:`KEEP_BLOCKS` from its heap and keeps freed
    ones there for the next allocation of that size. A no-op where there is no ``mallopt``.

    Why: glibc gives every block above its mapping threshold (at most 32 MiB) a mapping of its own
    and unmaps it when it is freed, so the next block of that size starts again from pages the
    kernel must zero and fault in one by one. The clustered-FL engine allocates and frees blocks of
    hundreds of MB per chunk of clients (256 clients' first-layer weights, 784 x 200 floats each,
    are 160 MB): faulting them in cost it a fifth of a round, more than the copy itself. Kept in the
    heap they are reused; the engine still hands memory back above its ceiling
    (:func:`release_free_memory`). On leaving, the thresholds are set to where glibc's own
    adjustment settles after freeing a large block, the memory stays in the heap until the next trim.
    """
    if not keep_large_blocks():
        yield
        return
    try:
        yield
    finally:
        _MALLOPT(M_MMAP_THRESHOLD, SETTLED_MMAP)
        _MALLOPT(M_TRIM_THRESHOLD, SETTLED_TRIM)


class MemoryEstimateError(FedclustError, MemoryError):
    """A run would need more memory than the machine has available."""


def available_bytes() -> int | None:
    """Memory available to a new allocation now (Linux ``MemAvailable``; elsewhere the physical
    memory), or None when it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def human(nbytes: float) -> str:
    """``nbytes`` in binary units: ``512 B``, ``3.2 GiB``, ``13.2 TiB``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"


def require_memory(what: str, parts: dict[str, float], advice: str, available: int | None = None) -> float:
    """Raise :class:`MemoryEstimateError` when the arrays ``parts`` (name -> bytes) of ``what`` need
    more than :data:`MAX_SHARE` of the ``available`` memory (default: :func:`available_bytes`); return
    the estimate in bytes. The message gives the estimate, its largest part, and ``advice``."""
    need = float(sum(parts.values()))
    have = available_bytes() if available is None else available
    if have is None or need <= MAX_SHARE * have:
        return need
    name, biggest = max(parts.items(), key=lambda kv: kv[1])
    raise MemoryEstimateError(
        f"{what} would need about {human(need)} of memory ({name}: {human(biggest)}), more "
        f"than this machine has available ({human(have)}): {advice}"
    )
