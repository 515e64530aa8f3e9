"""Progress of long loops (the rounds of a federated run), for whoever wants to show it.

The library's round loops call :func:`report` once per finished round; it costs one function call
when nobody listens. A front end (the Kedro hook's terminal progress bar, a notebook) listens with
:func:`listening`::

    with progress.listening(lambda label, done, total: print(label, done, total)):
        fkm.run(X, client, k, rounds=50)

Plain Python, no Kedro; one listener at a time per process (runs are sequential in a process).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

Listener = Callable[[str, int, int], None]

_listener: Listener | None = None


def report(label: str, done: int, total: int | None) -> None:
    """``done`` of ``total`` rounds of ``label`` are finished (``total`` None: unknown)."""
    if _listener is not None:
        _listener(label, int(done), int(total) if total is not None else 0)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send every :func:`report` inside the block to ``listener(label, done, total)``."""
    global _listener
    previous, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = previous
