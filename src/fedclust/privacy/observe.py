"""Observers of the releases: what a run published, reported by the release functions themselves.

An audit needs the noisy totals a method released, not only its final output. The release functions
of the methods report each release here under a kind (``"lloyd_totals"``, ``"weights"``, ...); a
caller that wants them opens :func:`observe` around the run and reads the list it yields::

    with observe("lloyd_totals") as seen:
        fkm.run(...)
    sums, counts = seen[0]

The observers live in a :class:`contextvars.ContextVar`, so they belong to the caller's thread (or
task) and end with the block: no module attribute is swapped, and a run without an observer pays one
lookup per release. Observation never changes a draw: the noise is the method's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

_OBSERVERS: ContextVar[tuple] = ContextVar("fedclust_release_observers", default=())


def _copy(value):
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value


@contextmanager
def observe(*kinds: str) -> Iterator[list]:
    """Collect, in order, a copy of every release of the given ``kinds`` (all kinds when none) that
    the block's runs report."""
    seen: list = []
    token = _OBSERVERS.set(_OBSERVERS.get() + ((frozenset(kinds), seen),))
    try:
        yield seen
    finally:
        _OBSERVERS.reset(token)


def observing(kind: str) -> bool:
    """Whether an observer of ``kind`` is open (to skip work that only an observer needs)."""
    return any(not kinds or kind in kinds for kinds, _ in _OBSERVERS.get())


def report(kind: str, value) -> None:
    """Report one release of ``kind`` (an array or a tuple of arrays, as released) to every open
    observer of that kind."""
    for kinds, seen in _OBSERVERS.get():
        if not kinds or kind in kinds:
            seen.append(_copy(value))
