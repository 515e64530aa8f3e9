"""Memory before allocating: a run whose big arrays would not fit in the memory this machine has
available is refused up front, with the estimate, instead of dying deep inside numpy or torch
("Unable to allocate 13.2 TiB") or pushing the machine into swap.

A utility (no Kedro, no method imports): the callers (:func:`fedclust.registry.spec.estimate_work`)
say what their big arrays are; :func:`require_memory` compares their sum with the memory available now.
"""

from __future__ import annotations

import os

from fedclust.errors import FedclustError

#: an estimate above this share of the available memory is refused (the estimate is rough, and the
#: interpreter, the data set and the libraries need memory too)
MAX_SHARE = 0.9


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
