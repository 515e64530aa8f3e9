"""Helpers shared by the method adapters (a leaf module: it imports no adapter and no pipeline)."""

from __future__ import annotations

import logging
import time
from typing import Callable

import numpy as np

from fedclust.errors import FedclustError
from fedclust.options import MethodConfig
from fedclust.params_check import ParameterError

logger = logging.getLogger("fedclust.registry")


def run_timed(fn: Callable, *args, **kwargs):
    """Call a library ``run`` and record its wall time and rounds (a keyword, or the options
    object's) in ``result.info``."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    result.info["wall_time_s"] = time.perf_counter() - t0
    options = next((a for a in args if isinstance(a, MethodConfig)), None)
    rounds = kwargs.get("rounds", getattr(options, "rounds", None))
    if rounds is not None:
        result.info.setdefault("rounds", rounds)
    return result


def n_clusters(k: int | None, dataset) -> int:
    """``k``, or the number of classes of the data when it is null."""
    return int(k or dataset.n_classes)


def true_labels(dataset):
    """The class labels a method may score its rounds against (its ``y=``): None for an unlabelled
    data set (:attr:`fedclust.data.Dataset.labels`), so that no round is scored against placeholders."""
    return getattr(dataset, "labels", dataset.y)


def require_all_assigned(partition, method: str):
    if (partition.client < 0).any():
        raise ValueError(
            f"{method} clusters every sample, but the partition left {(partition.client < 0).sum()} samples "
            "without a client (shards with shards_per_label drops some): use another scheme or options"
        )


def n_clients_of(partition) -> int:
    return int(np.asarray(partition.client).max()) + 1


def refuse_absurd(method: str, checks: list[tuple[str, float | None, float, str]]) -> None:
    """Raise one :class:`ParameterError` for every ``(key, value, limit, what)`` with ``value > limit``:
    ``d > n`` and the like, which would run for hours (or fail deep inside) instead of saying so."""
    bad = [
        f"{method}.train.{key}={value} exceeds {what} ({limit})"
        for key, value, limit, what in checks
        if value is not None and value > limit
    ]
    if bad:
        raise ParameterError("; ".join(bad))


#: work estimates above this warn that a run may take long
WORK_WARNING = 1e12
#: the run's ``compute.max_work``: a run whose work estimate exceeds it is refused before it starts
#: (None: no limit); set at the start of every run by the parameter check
WORK_LIMIT_DEFAULT = 1e13
_WORK_LIMIT: list[float | None] = [WORK_LIMIT_DEFAULT]


class WorkLimitError(FedclustError):
    """A run's work estimate exceeds ``compute.max_work``."""


def set_work_limit(limit: float | None) -> None:
    """The largest work estimate a run may have (``compute.max_work``; None: no limit)."""
    if limit is not None and not float(limit) > 0:
        raise ParameterError(f"compute.max_work must be null (no limit) or a number > 0, got {limit!r}")
    _WORK_LIMIT[0] = None if limit is None else float(limit)


def log_work(
    method: str,
    rounds: float,
    clients: float,
    cost: float,
    unit: str,
    *,
    server: float = 0.0,
    once: float = 0.0,
    bounds: dict[str, float] | None = None,
) -> float:
    """Log a one-line estimate of the work of a run, ``rounds x (clients x cost + server) + once``
    (``cost``: per client and round; ``server``: the server's per round; ``once``: before or after
    the rounds; all in ``unit``), and return it. A run far beyond the quick tour says so before it
    starts, and one beyond ``compute.max_work`` is refused (:class:`WorkLimitError`, naming the first
    of the loop ``bounds``, the one furthest above its default) instead of running for hours."""
    total = float(rounds) * (float(clients) * float(cost) + float(server)) + float(once)
    text = f"{rounds:.0f} rounds x {clients:.0f} clients x {cost:.3g}"
    if server:
        text = f"{rounds:.0f} rounds x ({clients:.0f} clients x {cost:.3g} + {server:.3g} on the server)"
    if once:
        text += f" + {once:.3g} once"
    logger.info("%s: work estimate %s %s = %.3g", method, text, unit, total)
    limit = _WORK_LIMIT[0]
    if limit is not None and total > limit:
        if bounds:
            name, value = next(iter(bounds.items()))
            lower = f"lower {method}.train.{name} (= {value:.0f}) or the data's size"
        else:
            lower = f"lower {method}.train's sizes (rounds, clients_per_round, k, the model) or the data's size"
        raise WorkLimitError(
            f"{method}: the work estimate, {text} {unit} = {total:.3g}, exceeds compute.max_work = {limit:.3g}, "
            f"so the run would take too long: {lower}, or raise compute.max_work (null: no limit)"
        )
    if total > WORK_WARNING:
        logger.warning("%s: the work estimate (%.3g %s) is very large: this run may take hours", method, total, unit)
    return total


# ---- clustered FL: tensors and model ---------------------------------------------------------------


def build_model(spec: dict, d_in: int, n_classes: int, image_shape=None):
    # torch (through the clustered-FL package) loads only when a clustered-FL run needs it
    from fedclust.clustered_fl.models import MLP, LinearRegression, ifca_cnn

    kind = spec.get("type", "mlp")
    if kind == "mlp":
        return MLP(d_in=d_in, hidden=spec.get("hidden", 200), n_classes=n_classes)
    if kind == "cnn":
        if image_shape is None:
            raise ValueError("model.type=cnn needs image data")
        ch = image_shape[0] if len(image_shape) == 3 else 1
        return ifca_cnn(in_channels=ch, image_size=image_shape[-1], n_classes=n_classes)
    if kind == "linear":
        return LinearRegression(d_in)
    raise ValueError(f"model.type must be mlp, cnn or linear, got {kind!r}")


def tensors_and_model(rotated, model: dict | None):
    # torch (through the clustered-FL package) loads only when a clustered-FL run needs it
    from fedclust.clustered_fl import FederatedTensors

    data = FederatedTensors.from_rotated(rotated)
    n_classes = int(max(rotated.y_train.max(), rotated.y_test.max())) + 1
    net = build_model(model or {}, data.d, n_classes, tuple(rotated.images_train.shape[1:]))
    return data, net
