"""Checks of the ``<method>.train`` parameter groups against the registry's config classes.

Called by the run hook before any node runs (with the generic checks of
:mod:`fedclust.params_check`), so that a wrong value fails the run at once with every problem listed.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from fedclust.data.registry import NO_FILE_NAMES, check_dataset_params
from fedclust.data.sizes import dataset_shape, require_dataset_memory, subsampled
from fedclust.params_check import ParameterError, raise_for_params, show
from fedclust.partition import check_scheme
from fedclust.registry.helpers import WORK_LIMIT_DEFAULT, set_work_limit
from fedclust.registry.privacy import check_delta_against_units, check_privacy_params
from fedclust.registry.spec import REGISTRY, WorkSizes, check_work, require_run_memory
from fedclust.threads import check_threads


def _rotation_groups(data: Mapping) -> int:
    """The number of rotation groups ``clustered_fl.data`` asks for (``angles`` and ``ratios`` must
    be null or lists: a :class:`ParameterError` otherwise)."""
    for key in ("angles", "ratios"):
        value = data.get(key)
        if value is not None and not isinstance(value, list):
            raise ParameterError(
                f"clustered_fl.data.{key} must be null or a list (one entry per group), got {show(value)}"
            )
        if value:
            return len(value)
    groups = data.get("n_groups") or 4
    return groups if isinstance(groups, int) and not isinstance(groups, bool) else 4


def _dk_pp_rounds(cfg, private: bool, where: str) -> list[str]:
    """DK++ spends its first rounds on seeding and weighting: the rounds of the run must leave room."""
    key = "private_rounds" if private and cfg.private_rounds else "rounds"
    rounds, seeding = cfg.rounds_for(private), cfg.seeding_for(private)
    if rounds >= seeding + 1:
        return []
    return [
        f"{where}.{key} = {rounds} is too few for DK++, which spends {seeding} k-means|| seeding round(s) and "
        f"1 weighting round before its Lloyd rounds: set {where}.{key} >= {seeding + 1}, or lower "
        f"{where}.seeding_rounds (0 is the DP variant)"
    ]


def method_problems(params: Mapping[str, Any], used: Iterable[str] | None = None) -> list[str]:
    """Every problem of the ``<method>.train`` groups of the registered methods (those whose
    ``params:<method>.train`` is in ``used``, or all when ``used`` is None), checked by their config
    classes, plus the checks that need another group (RR-Cluster's ``B`` against the clients)."""
    used = None if used is None else set(used)
    problems: list[str] = []
    for name, spec in REGISTRY.items():
        if used is not None and f"params:{name}.train" not in used:
            continue
        group = (params.get(name) or {}).get("train") if isinstance(params.get(name), Mapping) else None
        where = f"{name}.train"
        values, found = spec.config.collect(group, where)
        if found:
            problems.extend(found)
            continue
        cfg = spec.config(**values)
        between = cfg.problems(where)
        problems.extend(between)
        if name == "dk_pp" and not between:
            problems.extend(_dk_pp_rounds(cfg, (params.get("privacy") or {}).get("epsilon") is not None, where))
        if name == "rr_cluster" and not between:
            data = (params.get("clustered_fl") or {}).get("data") or {}
            try:
                M, k = int(data.get("n_clients")), int(cfg.k or _rotation_groups(data))
            except (TypeError, ValueError):
                continue
            problems.extend(cfg.feasibility(M, k, where))
    return problems


def _data_sizes(params: Mapping[str, Any], family: str) -> WorkSizes | None:
    """The sizes of a run's data from its parameters (:mod:`fedclust.data.sizes`), or None when the
    data set's shape cannot be told before it is read."""
    ds = params.get("dataset") if isinstance(params.get("dataset"), Mapping) else {}
    name = ds.get("name")
    if not isinstance(name, str):
        return None
    paths = params.get("data_paths") if isinstance(params.get("data_paths"), Mapping) else {}
    shape = dataset_shape(name, ds.get("path") or paths.get(name), ds.get("options"))
    if shape is None:
        return None
    shape = subsampled(shape, ds.get("n_per_class"), ds.get("n_total"))
    if family == "clustering":
        part = params.get("partition") if isinstance(params.get("partition"), Mapping) else {}
        clients = part.get("n_clients") or 10
        return WorkSizes(shape.n, shape.m, int(clients) if isinstance(clients, int) else 10, shape.classes)
    data = (params.get("clustered_fl") or {}).get("data") if isinstance(params.get("clustered_fl"), Mapping) else {}
    data = data if isinstance(data, Mapping) else {}
    clients, per_client = data.get("n_clients") or 40, data.get("samples_per_client") or 60
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (clients, per_client)):
        return None
    return WorkSizes(int(clients) * int(per_client), shape.m, int(clients), shape.classes)


def check_limits(params: Mapping[str, Any], used: Iterable[str] | None = None) -> None:
    """The limits checked before any work, on the parameters alone: the data set must fit in memory
    (:func:`fedclust.data.sizes.require_dataset_memory`), and the work estimate of every selected
    method (:func:`fedclust.registry.spec.check_work`, all its loop bounds) must be within
    ``compute.max_work``. Raises :class:`fedclust.memory.MemoryEstimateError` or
    :class:`fedclust.registry.helpers.WorkLimitError`; call it after :func:`method_problems` found none."""
    used = None if used is None else set(used)
    ds = params.get("dataset") if isinstance(params.get("dataset"), Mapping) else {}
    if (used is None or "params:dataset" in used) and isinstance(ds.get("name"), str):
        paths = params.get("data_paths") if isinstance(params.get("data_paths"), Mapping) else {}
        require_dataset_memory(ds["name"], ds.get("path") or paths.get(ds["name"]), ds.get("options"))
    privacy = params.get("privacy") if isinstance(params.get("privacy"), Mapping) else {}
    eps = privacy.get("epsilon")
    private = eps is not None and not (isinstance(eps, float) and math.isinf(eps))
    for name, spec in REGISTRY.items():
        if used is not None and f"params:{name}.train" not in used:
            continue
        sizes = _data_sizes(params, spec.family)
        if sizes is None:
            continue
        group = (params.get(name) or {}).get("train") if isinstance(params.get(name), Mapping) else None
        cfg = spec.config_from(group)
        cfl_data = (
            (params.get("clustered_fl") or {}).get("data") if isinstance(params.get("clustered_fl"), Mapping) else None
        )
        groups = (
            None if spec.family == "clustering" else _rotation_groups(cfl_data if isinstance(cfl_data, Mapping) else {})
        )
        if private and spec.private:  # delta below 1/n, n from the sizes (the calibration checks the data's)
            check_delta_against_units(privacy, sizes.clients if spec.unit == "client" else sizes.n, spec.unit)
        require_run_memory(spec, cfg, sizes, groups)
        check_work(spec, cfg, sizes, private)  # rounds_for: with a budget set


def check_run_params(
    params: Mapping[str, Any], reference: Mapping[str, Any], used: Iterable[str] | None = None
) -> None:
    """The whole check of a run's parameters before anything runs (what the Kedro hook calls, and
    what a test can call in process): the keys and types against ``reference`` (the ``conf/base``
    tree, :func:`fedclust.params_check.raise_for_params`), the privacy budget, the data set and
    partition names, every selected method's ``train`` group (:func:`method_problems`), then
    ``compute.max_work`` and the limits (:func:`check_limits`). ``used``: the ``params:...`` inputs of
    the pipeline to run (None: all). Raises a :class:`~fedclust.errors.FedclustError` whose message
    says what to change."""
    raise_for_params(params, reference)
    used = None if used is None else set(used)
    try:
        check_threads((params.get("compute") or {}).get("threads"), "compute.threads")
    except ValueError as exc:
        raise ParameterError(str(exc)) from None

    def uses(name: str) -> bool:
        return used is None or name in used

    try:
        if uses("params:privacy"):  # the budget every method calibrates to
            methods = [m for m in REGISTRY if uses(f"params:{m}.train")] or [None]
            for method in methods:  # each method's range of epsilon (the message gives it)
                check_privacy_params(params.get("privacy") or {}, method)
        if uses("params:dataset"):  # a key given but unused is a mistake, not something to skip
            ds = params.get("dataset") or {}
            check_dataset_params(
                ds.get("name"),
                seed=params.get("seed", 0),
                scale=ds.get("scale", "minmax"),
                n_per_class=ds.get("n_per_class"),
                n_total=ds.get("n_total"),
                options=ds.get("options") if isinstance(ds.get("options"), Mapping) else None,
            )
            if ds.get("label") is not None and not isinstance(ds.get("label"), str):
                raise ValueError(f"dataset.label must be null or a name (text), got {show(ds['label'])}")
            if ds.get("path") is not None and ds.get("name") in NO_FILE_NAMES:
                raise ValueError(
                    f"dataset.path = {ds['path']!r} is given, but dataset {ds['name']!r} reads "
                    "no file: remove dataset.path, or choose a data set read from files"
                )
        if uses("params:partition"):  # the scheme and its option names (values: in the node)
            part = dict(params.get("partition") or {})
            extra = {k: v for k, v in part.items() if k not in ("scheme", "n_clients", "options")}
            check_scheme(part.get("scheme"), {**extra, **(part.get("options") or {})})
    except ValueError as exc:
        raise ParameterError(str(exc)) from None
    problems = method_problems(params, used)
    if problems:
        head = "invalid parameter" if len(problems) == 1 else f"{len(problems)} invalid parameters"
        raise ParameterError(f"{head}: " + "; ".join(problems))
    set_work_limit((params.get("compute") or {}).get("max_work", WORK_LIMIT_DEFAULT))
    check_limits(params, used)
