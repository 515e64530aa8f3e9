"""DP-FedC nodes.

Calibration (``train.budget``): with ``accountant`` (the default) ``privacy.epsilon`` is the
accounted epsilon of the worst client, like every other method's, and the paper's eps_bar of
Theorem 3 is solved for (:func:`fedclust.clustering.dp_fedc.eps_bar_for_budget`); with ``paper``
``privacy.epsilon`` *is* eps_bar (the paper's protocol; the accounted epsilon can then be far larger
or smaller). Either way the per-round epsilon comes from inverting eq. (32), and every round's sigma
from eq. (29) inside the run (it depends on that round's Q2 and the client's public step size). The
privacy report puts the paper's claim (eps_bar) next to what the accountant computes for the noise
actually added, for the worst client (amendment A-1). A private run uses public constants, a public
sample clip and a data-independent W^0 by default (``train.constants``, ``train.clip``,
``train.init``); the paper's data-dependent settings make the report say epsilon = inf.
"""

from __future__ import annotations

from fedclust.clustering import dp_fedc
from fedclust.pipelines.methods import n_clusters, require_all_assigned, run_timed
from fedclust.pipelines.privacy.nodes import check_privacy_params

_RUN_KEYS = (
    "rounds", "clients_per_round", "Q1", "q2", "Qhat", "b", "rho_factor", "mu_h_factor", "mu_w", "h_step",
    "alpha_1", "eta_rule", "alpha_2", "c0", "q_cap", "all_clients_update_H", "literal_2rho", "h_init",
    "init", "init_domain", "constants", "clip",
)


BUDGETS = ("accountant", "paper")


def calibrate(privacy: dict, train: dict, dataset, partition) -> dict:
    target, delta = check_privacy_params(privacy)
    base = {"mechanism": "gaussian", "unit": "sample", "delta": delta, "epsilon_target": target}
    budget = train.get("budget") or "accountant"
    if budget not in BUDGETS:
        raise ValueError(f"dp_fedc.train.budget must be one of {BUDGETS}, got {budget!r}")
    if target is None:
        return {**base, "private": False}
    G = train.get("G")
    if G is None or float(G) <= 0:
        raise ValueError("dp_fedc.train.G (clip bound on every minibatch gradient, spec A4) must be > 0 for a private run")
    eps_bar = target
    if budget == "accountant":
        import numpy as np

        n_clients = int(partition.client.max()) + 1
        sched = {key: train[key] for key in ("rounds", "Qhat", "b", "c0", "q_cap") if train.get(key) is not None}
        sched["q2"] = train.get("q2") or "diminishing"
        sched["clients_per_round"] = train.get("clients_per_round") or n_clients
        sizes = np.bincount(partition.client[partition.client >= 0], minlength=n_clients)
        eps_bar = dp_fedc.eps_bar_for_budget(target, delta, sizes, accountant=privacy.get("accountant", "rdp"), **sched)
    return {
        **base, "private": True, "budget": budget, "eps_bar": eps_bar, "G": float(G), "c0": float(train.get("c0", 1.0)),
        "paper_epsilon": eps_bar,
        "paper_formula": "DP-FedC Theorem 3, eq. (32): eps_bar = c0 q^2 eps sqrt(pR/(1-q)), per-round sigma eq. (29)",
        "notes": [
            "the paper's total-loss bound (32) has an unspecified constant c0 (here "
            f"{float(train.get('c0', 1.0))}) and assumes eps <= 1 per round; the accountant's epsilon is the figure that holds",
            "the accountant's epsilon is the worst client's (clients differ in n_i, hence in q_i and sigma_i; "
            "sample-level DP composes in parallel over clients)",
        ],
    }


def train(dataset, partition, noise: dict, train: dict, seed: int):
    require_all_assigned(partition, "dp_fedc")
    kw = {key: train[key] for key in _RUN_KEYS if train.get(key) is not None}
    n_clients = int(partition.client.max()) + 1
    kw["clients_per_round"] = train.get("clients_per_round") or n_clients  # null = all clients
    if kw.get("clients_per_round") and kw["clients_per_round"] > n_clients:
        raise ValueError(
            f"dp_fedc.train.clients_per_round={kw['clients_per_round']} exceeds the number of clients ({n_clients})"
        )
    if noise["private"]:
        kw.update(eps_bar=noise["eps_bar"], delta=noise["delta"], G=noise["G"])
    result = run_timed(dp_fedc.run, dataset.X, partition.client, n_clusters(train, dataset), seed=int(seed), y=dataset.y, **kw)
    # keep the pickled result small: the soft assignments and the sampling log are large and derivable
    for big in ("H", "sampled_clients"):
        result.info.pop(big, None)
    result.info["metrics"] = {"eps_round": float(result.info["eps_round"]), "zero_columns": float(result.info["zero_columns"])}
    return result
