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
from typing import ClassVar

from fedclust.options import MethodConfig, param

_frozen = dataclasses.dataclass(frozen=True)

#: the RR-Cluster base algorithms (``dp_<base>`` without rebalancing)
RR_BASES = ("ifca", "fesem", "fedcam")
DEVICES = ("cpu", "cuda", "auto")


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
    seed: int = param(0, "int", doc="seed of every random stream of the run", conf=False)


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
    seed: int = param(0, "int", doc="seed of every random stream of the run", conf=False)
