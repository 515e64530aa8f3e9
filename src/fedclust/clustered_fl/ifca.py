"""IFCA: Iterative Federated Clustering Algorithm (Ghosh et al., "An Efficient Framework for Clustered
Federated Learning", NeurIPS 2020), as the CFL-MGD baseline (``docs/methods/ifca.md``).

IFCA is the CFL-MGD engine with beta = 0: each sampled client picks
``p_i = argmin_p phi_i(chi_p)`` (IFCA Alg. 1 / CFL-MGD eq. 8), then

* model averaging (IFCA's experiments; default): H local (S)GD steps ``w <- w - lr_t*grad phi_i(w)``
  from ``chi_{p_i}``, then ``chi_p = sum_i r_{i,p} w_i / sum_i r_{i,p}``;
* gradient averaging: ``chi_p <- chi_p - (lr_t/m) sum_i r_{i,p} grad phi_i(chi_{p_i})``.

Empty clusters keep their model. IFCA's restart heuristic for the random init (redraw until every
cluster gets >= 0.35 (k=2) / 0.10 (k=4) of the sampled clients) is ``init_min_fraction``.
"""

from __future__ import annotations

from fedclust.clustered_fl import cfl_mgd
from fedclust.clustered_fl.engine import ClusteredFLResult, FederatedTensors
from fedclust.clustered_fl.models import BatchedModel

__all__ = ["run"]


def run(
    data: FederatedTensors,
    model: BatchedModel,
    k: int,
    *,
    aggregation: str = "model",
    lr: float = 0.1,
    local_steps: int = 10,
    rounds: int = 300,
    participation: float = 0.1,
    seed: int = 0,
    **kwargs,
) -> ClusteredFLResult:
    """IFCA = CFL-MGD with ``beta=0``; ``aggregation`` ``"model"`` (Option II) or ``"gradient"`` (Option I).
    Other keyword arguments as in :func:`fedclust.clustered_fl.cfl_mgd.run`."""
    if aggregation not in ("model", "gradient"):
        raise ValueError(f"aggregation must be 'model' or 'gradient', got {aggregation!r}")
    if kwargs.pop("beta", 0.0) != 0.0:
        raise ValueError("IFCA has no momentum: beta must be 0 (use cfl_mgd.run for beta > 0)")
    kwargs.setdefault("method", "ifca")
    return cfl_mgd.run(
        data,
        model,
        k,
        option="II" if aggregation == "model" else "I",
        beta=0.0,
        lr=lr,
        local_steps=local_steps,
        rounds=rounds,
        participation=participation,
        seed=seed,
        **kwargs,
    )
