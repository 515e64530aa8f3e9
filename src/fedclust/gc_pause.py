"""Start-up without needless garbage-collector passes.

A ``kedro`` command spends much of its start-up importing libraries (MLflow and its SQL store,
scikit-learn, matplotlib). Imports build objects that live as long as the process, and many of
them: about half a million in a tiny run. CPython's cyclic collector walks all of them in every full
pass: one each time the heap has grown by a quarter, several while the imports run, and a last one at
exit. None of them is garbage.

:func:`long_lived` pauses the collector while a block runs (an import, a hook that imports). In a
``kedro`` command it then moves every object alive at that point out of the collector's reach
(:func:`gc.freeze`), so that later passes, while the nodes run and at exit, walk only the objects
made after it. On our 2-core benchmark machine this took a tiny FKM run from 7.8 to 6.1 s and
``kedro --version`` from 3.8 to 3.1 s (medians of five interleaved runs each); pausing alone gained
nothing.

What freezing costs: a frozen object that later becomes part of unreachable cycles is never freed
(reference counting still frees everything else). The cyclic garbage the imports themselves leave
is kept for good, about a megabyte in a tiny run. A command ends when its run does, so that is all
it costs there; a notebook, a test session or any other process that lives on could keep its own
objects that way, so there the collector is only paused, never frozen (:func:`is_kedro_command`).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


def is_kedro_command() -> bool:
    """Whether this process is Kedro's command line (``kedro ...`` or ``python -m kedro ...``),
    which ends with its command; not a notebook, a test session or another host that imports Kedro."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name.partition(".")[0] == "kedro":
        return True
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name in ("kedro", "kedro.exe")


@contextmanager
def long_lived(freeze: bool | None = None) -> Iterator[None]:
    """Pause the cyclic garbage collector for the block; then, when ``freeze`` (by default: in a
    ``kedro`` command, :func:`is_kedro_command`), collect what was garbage before the block and
    freeze what is alive (see the module).

    Nests: an inner block leaves the collector paused for the outer one. The collector is switched
    back on at the end only if it was on at the start, also when the block raises.
    """
    if freeze is None:
        freeze = is_kedro_command()
    was_enabled = gc.isenabled()
    if freeze and was_enabled:
        # garbage made before the block is freed, not frozen; cheap after the first freeze, as the
        # pass walks only objects made since
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was_enabled:
            gc.enable()
