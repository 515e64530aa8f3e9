"""The options of the clustered-FL methods: the one home of each setting's default, bounds, choices
and doc.

The method registry generates each method's config (the keys of ``<method>.train``) from these
classes (:func:`fedclust.options.config_class`); ``conf_default`` is the default of a pipeline run
where it differs from a library call's (a library call keeps the papers' long runs, a pipeline run
the quick tour's). The library ``run`` functions take keyword arguments with the same defaults
(``tests/clustered_fl/test_options.py`` names every difference); ``param(conf=False)`` marks a value
that the run supplies (the seed, the calibrated noise) rather than a key of ``<method>.train``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from fedclust.clustered_fl.engine.distributed import ChunkRunner, ProcessChunkRunner, RayChunkRunner
from fedclust.options import MethodConfig, param
from fedclust.params_check import ParameterError, _nearest

_frozen = dataclasses.dataclass(frozen=True)

#: the RR-Cluster base algorithms (``dp_<base>`` without rebalancing)
RR_BASES = ("ifca", "fesem", "fedcam")
DEVICES = ("cpu", "cuda", "auto")


# ---- where the chunks of a round train -------------------------------------------------------------
# ``<method>.train.chunk_runner``: null (the default) trains the chunks of a round here, one after the
# other; a mapping ``{kind: processes | ray, <options>}`` builds a runner of
# :mod:`fedclust.clustered_fl.engine.distributed` for the run (the grids' ``executor`` and
# ``executor_options`` in one group). The options of each kind are declared below, with the runner's
# own defaults (``tests/clustered_fl/test_options.py`` checks that they agree).


@_frozen
class ProcessRunnerOptions(MethodConfig):
    """``{kind: processes}``: :class:`~fedclust.clustered_fl.engine.ProcessChunkRunner`."""

    GROUP: ClassVar[str] = "chunk_runner"
    workers: int = param(2, "int", count=True, doc="worker processes on this machine (spawned once per run)")
    max_in_flight: int | None = param(None, "int", count=True, doc="chunks outstanding at once; null = 2 x workers")
    threads_per_task: int = param(1, "int", count=True, doc="torch threads of a worker")


@_frozen
class RayRunnerOptions(MethodConfig):
    """``{kind: ray}``: :class:`~fedclust.clustered_fl.engine.RayChunkRunner`."""

    GROUP: ClassVar[str] = "chunk_runner"
    address: str | None = param(
        None, "str", doc="null = start a local Ray instance; auto = the cluster of `ray start`; ray://host:10001"
    )
    num_cpus: int | None = param(None, "int", count=True, doc="CPUs of a local instance; null = all")
    max_in_flight: int | None = param(None, "int", count=True, doc="chunks outstanding at once; null = 2 x CPUs")
    threads_per_task: int = param(1, "int", count=True, doc="torch threads of a task")
    init_options: dict | None = param(None, "dict", doc="more keyword arguments of ray.init")


#: ``kind: (options class, runner class)``; ``serial`` (the same as null) has no options
CHUNK_RUNNERS: dict[str, tuple[type[MethodConfig], type[ChunkRunner]] | None] = {
    "serial": None,
    "processes": (ProcessRunnerOptions, ProcessChunkRunner),
    "ray": (RayRunnerOptions, RayChunkRunner),
}


def _runner_settings(spec: Mapping | None, where: str) -> tuple[str, dict, list[str]]:
    """``(kind, the runner's keyword arguments, problems)`` of a ``chunk_runner`` spec."""
    if spec is None:
        return "serial", {}, []
    if not isinstance(spec, Mapping):
        return "", {}, [f"{where} must be null or a group {{kind: processes | ray, ...}}, got {spec!r}"]
    rest = dict(spec)
    kind = rest.pop("kind", None)
    if kind not in CHUNK_RUNNERS:
        near = _nearest(str(kind), CHUNK_RUNNERS) if kind is not None else None
        hint = f"; did you mean {near!r}?" if near else ""
        if kind is None:
            return "", {}, [f"{where} needs a kind: one of {list(CHUNK_RUNNERS)} (or chunk_runner: null, serial)"]
        return "", {}, [f"{where}.kind must be one of {list(CHUNK_RUNNERS)}, got {kind!r}{hint}"]
    entry = CHUNK_RUNNERS[kind]
    if entry is None:
        if rest:
            return kind, {}, [f"{where}: kind 'serial' takes no options, got {sorted(rest)}"]
        return kind, {}, []
    values, problems = entry[0].collect(rest, where)
    return kind, values, problems


def chunk_runner_problems(spec: Mapping | None, where: str = "chunk_runner", device: str | None = "cpu") -> list[str]:
    """What is wrong with a ``chunk_runner`` spec (one line each; none for null): an unknown kind, an
    unknown option of its kind, a value out of its bounds (``workers: 0``), or a runner asked for on a
    ``device`` other than the CPU (its workers train on CPUs)."""
    kind, _, problems = _runner_settings(spec, where)
    if problems:
        return problems
    if kind != "serial" and device != "cpu":
        stem = where.rsplit(".", 1)[0] + "." if "." in where else ""
        return [f"{where} trains the chunks on CPU workers: it needs {stem}device=cpu, got {device!r}"]
    return []


def make_chunk_runner(spec: Mapping | None, where: str = "chunk_runner") -> ChunkRunner | None:
    """The runner of a ``chunk_runner`` spec (None for null or ``kind: serial``: the engine's own serial
    chunks). The caller closes it (:meth:`ChunkRunner.close`, or ``with``) when the run is over."""
    kind, values, problems = _runner_settings(spec, where)
    if problems:
        raise ParameterError("; ".join(problems))
    entry = CHUNK_RUNNERS[kind]
    return None if entry is None else entry[1](**values)


def describe_chunk_runner(spec: Mapping | None) -> str:
    """A valid ``chunk_runner`` spec in one word and its options as given: ``serial``,
    ``processes(workers=2)``, ``ray(address=auto)``."""
    kind, _, problems = _runner_settings(spec, "chunk_runner")
    if problems:
        raise ParameterError("; ".join(problems))
    given = {k: v for k, v in dict(spec or {}).items() if k != "kind" and v is not None}
    return kind if not given else f"{kind}({', '.join(f'{k}={v}' for k, v in given.items())})"


_CHUNK_RUNNER_DOC = (
    "where the chunks of a round train: null = here, one after another; {kind: processes, workers: 2}; "
    "{kind: ray, address: auto}; same results bit for bit"
)


@_frozen
class EngineOptions(MethodConfig):
    """What every method on the clustered-FL engine takes: rounds, the local steps, the sampled share
    of the clients, the evaluation and where the engine trains."""

    GROUP: ClassVar[str] = "clustered_fl"
    rounds: int = param(300, "int", count=True, doc="communication rounds", loop="round", conf_default=60)
    lr: float = param(0.1, "float", gt=0, doc="the clients' learning rate")
    local_steps: int = param(10, "int", count=True, doc="local steps of a client per round (H)", loop="client")
    participation: float = param(
        0.1, "float", gt=0, le=1, doc="share of the clients sampled per round (a fixed number)", conf_default=0.25
    )
    eval_every: int = param(
        1, "int", ge=0, doc="rounds between two evaluations (0 = after the last round only)", conf_default=5
    )
    max_chunk_mb: float | None = param(None, "float", gt=0, doc="null = 256")
    defer_updates: bool = param(True, "bool", doc="false = local steps one by one (last-bit differences)")
    device: str = param("cpu", "str", choices=DEVICES, doc="where the engine trains; auto = CUDA when present")
    chunk_runner: dict | None = param(None, "dict", doc=_CHUNK_RUNNER_DOC)
    seed: int = param(0, "int", doc="seed of every random stream of the run", conf=False)

    def problems(self, where: str) -> list[str]:
        return chunk_runner_problems(self.chunk_runner, f"{where}.chunk_runner", self.device)


@_frozen
class CFLMGDOptions(EngineOptions):
    """CFL-MGD (:func:`fedclust.clustered_fl.cfl_mgd.run`): Option II (model averaging of H local
    heavy-ball steps) or I (gradient averaging), momentum ``beta``, the step decay and the minibatch."""

    GROUP: ClassVar[str] = "cfl_mgd"
    option: str = param("II", "str", choices=("I", "II"), doc="II: model averaging | I: gradient averaging")
    beta: float = param(0.9, "float", ge=0, lt=1, doc="momentum")
    lr_decay: float = param(1.0, "float", gt=0, doc="lr_t = lr * lr_decay^(t-1)")
    batch_size: int | None = param(
        None, "int", count=True, doc="minibatch of a local step; null = the client's whole data"
    )


@_frozen
class IFCAOptions(EngineOptions):
    """IFCA (:func:`fedclust.clustered_fl.ifca.run`): CFL-MGD without momentum."""

    GROUP: ClassVar[str] = "ifca"
    aggregation: str = param("model", "str", choices=("model", "gradient"), doc="model averaging | gradient")


@_frozen
class FedAvgOptions(EngineOptions):
    """FedAvg (:func:`fedclust.clustered_fl.fedavg.run`): one model for every client."""

    GROUP: ClassVar[str] = "fedavg"


@_frozen
class RRClusterOptions(MethodConfig):
    """RR-Cluster and DP-``base`` (:func:`fedclust.clustered_fl.rr_cluster.run`): the threshold ``B``,
    the clip of the identifiers (``C_s``) and of the updates (``clip``), how the noise is calibrated,
    the server step and the local training."""

    GROUP: ClassVar[str] = "rr_cluster"
    base: str = param("ifca", "str", choices=RR_BASES, doc="the base algorithm")
    B: int = param(
        8, "int", ge=0, doc="every cluster gets >= B updates (B <= participation * clients / k)", conf_default=4
    )
    C_s: float = param(0.1, "float", gt=0, le=1, doc="clip of the cluster identifiers")
    clip: float | None = param(
        None, "float", gt=0, doc="C_theta, the clip of every update (required when private)", conf_default=0.3
    )
    noise_calibration: str = param(
        "replace_one", "str", choices=("replace_one", "paper_literal"), doc="replace_one | paper_literal"
    )
    server_lr: float = param(1.0, "float", gt=0, doc="the server's step gamma")
    rounds: int = param(100, "int", count=True, doc="communication rounds", loop="round", conf_default=30)
    lr: float = param(0.05, "float", gt=0, doc="the clients' learning rate", conf_default=0.1)
    local_steps: int = param(5, "int", count=True, doc="local steps of a client per round (H)", loop="client")
    participation: float = param(
        0.1, "float", gt=0, le=1, doc="share of the clients sampled per round (a fixed number)", conf_default=0.5
    )
    eval_every: int = param(
        1, "int", ge=0, doc="rounds between two evaluations (0 = after the last round only)", conf_default=5
    )
    batch_size: int | None = param(None, "int", count=True, doc="minibatch; null = full batch", conf=False)
    clients_per_round: int | None = param(None, "int", count=True, doc="or a fixed sample size", conf=False)
    sigma_s: float | None = param(0.0, "float", ge=0, doc="identifier noise multiplier", conf=False)
    sigma_theta: float = param(0.0, "float", ge=0, doc="model noise multiplier", conf=False)
    sigma_g: float | None = param(None, "float", ge=0, doc="FedCAM's global-part multiplier", conf=False)
    max_chunk_mb: float | None = param(None, "float", gt=0, doc="null = 256")
    chunk_runner: dict | None = param(None, "dict", doc=_CHUNK_RUNNER_DOC)
    seed: int = param(0, "int", doc="seed of every random stream of the run", conf=False)

    def problems(self, where: str) -> list[str]:
        return chunk_runner_problems(self.chunk_runner, f"{where}.chunk_runner")
