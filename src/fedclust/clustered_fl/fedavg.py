"""FedAvg (McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
AISTATS 2017) as the single-model baseline of CFL-MGD (``docs/methods/ifca.md``).

One global model, no clustering: ``chi(t) = sum_{i in M_t} chi~_i(t) / |M_t|`` with ``chi~_i`` from H local
plain (S)GD steps (beta = 0), the same lr, H, batch size, rounds and seeds as CFL-MGD and IFCA.
It runs on the clustered-FL engine with k = 1; test accuracy uses the single
model for every test client, and the reported client-clustering ACC is that of putting every client
in one cluster (1/P for P equal groups).
"""

from __future__ import annotations

from fedclust.clustered_fl.engine import (
    ClusteredFLEngine,
    ClusteredFLResult,
    EngineConfig,
    FederatedTensors,
    ModelAveraging,
)
from fedclust.clustered_fl.models import BatchedModel

__all__ = ["run"]


def run(
    data: FederatedTensors,
    model: BatchedModel,
    *,
    lr: float = 0.1,
    lr_decay: float = 1.0,
    local_steps: int = 10,
    batch_size: int | None = None,
    rounds: int = 300,
    participation: float = 0.1,
    seed: int = 0,
    beta: float = 0.0,
    **engine_kwargs,
) -> ClusteredFLResult:
    """FedAvg with H = ``local_steps`` local steps (``beta`` > 0 gives FedAvg with server-carried momentum,
    not a paper baseline). Other keyword arguments are settings of
    :class:`~fedclust.clustered_fl.engine.EngineConfig`."""
    engine_kwargs.setdefault("method", "fedavg")
    for bad in ("k", "init_min_fraction", "local_update"):
        if bad in engine_kwargs:
            raise ValueError(f"FedAvg does not take {bad!r} (one model, model averaging)")
    config = EngineConfig(
        k=1,
        rounds=rounds,
        lr=lr,
        lr_decay=lr_decay,
        beta=beta,
        local_update="model",
        local_steps=local_steps,
        batch_size=batch_size,
        participation=participation,
        aggregator=ModelAveraging(),
        seed=seed,
        **engine_kwargs,
    )
    return ClusteredFLEngine(data, model, config).run()
