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

import os  # noqa: F401 (tests reach os through this module)

from fedclust.executors.local import (  # noqa: F401
    _PR_SET_PDEATHSIG,
    EXECUTION_KEYS,
    EXECUTORS,
    _iter_processes,
    _worker_init,
    call_cell,
    die_with_parent,
    execution,
    limited_threads,
    without_execution,
)
from fedclust.executors.ray import (  # noqa: F401
    RAY_MISSING,
    _iter_ray,
    import_ray,
)
from fedclust.executors.run import (  # noqa: F401
    CLAIM_BATCH,
    _CellProgress,
    _module_of,
    _run_shared,
    iter_cells,
    run_cells,
    same_results,
)
from fedclust.executors.store import (  # noqa: F401
    _CHUNK,
    _ROOT,
    NUMERIC_PACKAGES,
    CellStore,
    _decode,
    _encode,
    _fedclust_file,
    _fsync_dir,
    _imports,
    _not_a_record,
    _package_versions,
    cell_key,
    code_version,
    module_closure,
    store_key,
)

__all__ = [
    "EXECUTORS",
    "EXECUTION_KEYS",
    "execution",
    "without_execution",
    "limited_threads",
    "die_with_parent",
    "call_cell",
    "RAY_MISSING",
    "import_ray",
    "cell_key",
    "store_key",
    "NUMERIC_PACKAGES",
    "module_closure",
    "code_version",
    "CellStore",
    "iter_cells",
    "run_cells",
    "CLAIM_BATCH",
    "same_results",
]
