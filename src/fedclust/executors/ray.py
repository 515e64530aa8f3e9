"""The Ray executor: a grid's cells as Ray tasks, never retried, ending with the driver's job
(:mod:`fedclust.executors`)."""

from __future__ import annotations

import contextlib
import logging
import os

from fedclust.executors.local import call_cell

logger = logging.getLogger("fedclust.executors")


RAY_MISSING = (
    "the 'ray' executor needs Ray, which is not installed: pip install -e '.[ray]' "
    "(or pip install 'ray[default]>=2.9,<3'), or choose executor: serial or processes"
)


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
