"""CFL-MGD ("MCFL"): Clustered Federated Learning based on Momentum Gradient Descent.

Paper: an MDPI-style journal article (no title line, authors or venue in the text we worked from;
``docs/methods/cfl_mgd.md``): IFCA (Ghosh et al., "An Efficient Framework for Clustered Federated
Learning") with Polyak heavy-ball momentum carried across rounds per cluster.

Round t (runs on :mod:`fedclust.clustered_fl.engine`):

* cluster estimate, eq. (8): ``p_i = argmin_p phi_i(chi_p^{t-1})`` (ties -> lowest index);
* Option I, gradient averaging, eq. (3) + (5):
  ``u_i = beta*u_{p_i}^{t-1} + grad phi_i(chi_{p_i}^{t-1})``;
  ``chi_p^t = chi_p^{t-1} - (lr_t/m) * sum_{i in S_p} u_i`` (m = TOTAL number of clients);
  ``u_p^t = mean_{i in S_p} u_i``;
* Option II, model averaging (default), eq. (4) + (6) and LocalUpdate (Alg. 1 lines 19-21): from
  ``(w, u) = (chi_{p_i}^{t-1}, u_{p_i}^{t-1})`` run H heavy-ball steps ``u <- beta*u + grad phi_i(w)``,
  ``w <- w - lr_t*u`` (u first; the one-variable form is eq. (7)); then ``chi_p^t = mean_{i in S_p} w_i``,
  ``u_p^t = mean_{i in S_p} u_i``;
* an empty cluster keeps its model and momentum; momentum starts at 0 and is never reset.

Defaults follow the paper's MNIST setting: lr 0.1, no decay, beta 0.9, H = 10 full-batch
steps, Option II. Random independent init of the k models (IFCA's restart heuristic optional).
"""

from __future__ import annotations

from fedclust.clustered_fl.engine import (
    ClusteredFLEngine,
    ClusteredFLResult,
    EngineConfig,
    FederatedTensors,
    GradientAveraging,
    ModelAveraging,
)
from fedclust.clustered_fl.models import BatchedModel

__all__ = ["run"]


def run(
    data: FederatedTensors,
    model: BatchedModel,
    k: int,
    *,
    option: str = "II",
    beta: float = 0.9,
    ga_normalization: str = "total",
    **settings,
) -> ClusteredFLResult:
    """Run CFL-MGD with ``option="II"`` (model averaging, H = ``local_steps`` local heavy-ball steps)
    or ``option="I"`` (gradient averaging, one momentum-gradient message per client per round,
    server step ``lr_t/m``; ``ga_normalization="sampled"`` uses ``1/|M_t|`` instead of ``1/m``).

    Other keyword arguments are settings of :class:`~fedclust.clustered_fl.engine.EngineConfig`, with
    its defaults (``lr`` 0.1, ``lr_decay`` 1, ``local_steps`` 10, ``batch_size``/``local_epochs`` None,
    ``rounds`` 300, ``participation`` 0.1 or ``clients_per_round``, ``seed`` 0, ``eval_every``,
    ``init_min_fraction``, ``progress``...). Returns a
    :class:`~fedclust.clustered_fl.engine.ClusteredFLResult` (``dp_events`` empty).
    """
    opt = str(option).upper()
    if opt not in ("I", "II"):
        raise ValueError(f"option must be 'I' (gradient averaging) or 'II' (model averaging), got {option!r}")
    if not 0 <= beta < 1:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    agg = GradientAveraging(ga_normalization) if opt == "I" else ModelAveraging()
    settings.setdefault("method", f"cfl_mgd_{'ga' if opt == 'I' else 'ma'}")
    config = EngineConfig(
        k=k,
        beta=beta,
        local_update="gradient" if opt == "I" else "model",
        aggregator=agg,
        **settings,
    )
    return ClusteredFLEngine(data, model, config).run()
