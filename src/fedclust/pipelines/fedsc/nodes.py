"""FedSC nodes: calibrate the perturbation, then run :func:`fedclust.clustering.fedsc.run`.

Privacy variants (``fedsc.train.privacy_variant``), used when ``privacy.epsilon`` is set:

* ``data`` (default): every client perturbs its (row-clipped to ``clip_tau``) data once with
  Gaussian noise, sigma from Proposition 3.7 (sample-level, replace-one).
* ``factors``: noise on every uploaded Z_p (each round) and on C once, sigmas from Theorem 3.9 with
  the budget split ``factor_budget_z`` between Z and C; needs the gradient Z-step, a fixed ``z_lr``
  and the bounds ``tau_z``, ``tau_c``.

Without a privacy budget the paper's sweeps are available: ``data_noise_beta`` (noise std =
beta * std(X)) and ``z_noise_alpha``/``c_noise_alpha``; they are not DP and the report says so.
"""

from __future__ import annotations

import logging

import numpy as np

from fedclust.clustering import fedsc, spectral
from fedclust.pipelines.methods import n_clusters, require_all_assigned, run_timed
from fedclust.pipelines.privacy.nodes import check_privacy_params
from fedclust.privacy.paper import fedsc as fedsc_privacy
from fedclust.rng import stream

logger = logging.getLogger(__name__)

_SWEEP_KEYS = ("data_noise_beta", "z_noise_alpha", "c_noise_alpha")


def _kernel_rules(dataset, train: dict, seed: int) -> tuple[float, int]:
    rng = stream(seed, "data")
    r = train.get("r") or spectral.mean_pairwise_distance(dataset.X, rng=rng)
    d = train.get("d") or spectral.eigen_rank(dataset.X, r, tol=train.get("d_tol", 0.99), rng=rng)
    if train.get("d_max"):
        d = min(int(d), int(train["d_max"]))
    return float(r), int(d)


def calibrate(privacy: dict, train: dict, dataset, partition) -> dict:
    eps, delta = check_privacy_params(privacy)
    sweep = {k: float(train.get(k) or 0.0) for k in _SWEEP_KEYS}
    base = {"mechanism": "gaussian", "unit": "sample", "delta": delta, "epsilon_target": eps, **sweep}
    if eps is None:
        notes = []
        if any(sweep.values()):
            notes.append("noise set relative to the data's std (paper sweep): not calibrated, no DP guarantee")
        return {**base, "private": False, "variant": None, "notes": notes}
    if any(sweep.values()):
        raise ValueError(
            "fedsc: set either privacy.epsilon (calibrated DP) or the sweep parameters "
            f"{_SWEEP_KEYS}, not both"
        )
    variant = train.get("privacy_variant", "data")
    tau_x = train.get("clip_tau")
    if tau_x is None or tau_x <= 0:
        raise ValueError("fedsc.train.clip_tau (L2 bound on every sample) must be > 0 for a private run")
    if variant == "data":
        sigma = fedsc_privacy.perturbed_data_sigma(eps, delta, tau_x, mechanism=train.get("mechanism", "classical"))
        logger.info("fedsc: perturbed data, epsilon=%s delta=%s tau_x=%s -> sigma %.4g", eps, delta, tau_x, sigma)
        notes = []
        if eps >= 1 and train.get("mechanism", "classical") == "classical":
            notes.append(
                f"Prop. 3.7 uses the classical Gaussian mechanism, proven only for epsilon < 1 (here {eps}); "
                "the accountant's epsilon below is the valid figure"
            )
        return {
            **base, "private": True, "variant": "data", "data_noise_std": sigma, "clip_tau": tau_x, "notes": notes,
            "paper_epsilon": eps, "paper_formula": "FedSC Proposition 3.7: sigma = 2 tau_X sqrt(2 ln(1.25/delta)) / epsilon",
        }
    if variant != "factors":
        raise ValueError(f"fedsc.train.privacy_variant must be 'data' or 'factors', got {variant!r}")
    share = float(train.get("factor_budget_z", 0.5))
    if not 0.0 < share < 1.0:
        raise ValueError(f"fedsc.train.factor_budget_z must be in (0, 1), got {share}")
    for key in ("tau_z", "tau_c", "z_lr"):
        if not train.get(key):
            raise ValueError(f"fedsc.train.{key} must be > 0 for privacy_variant=factors (Theorem 3.9)")
    # r and d are fixed here (stream "data" of seed 0) and passed to training, so that the
    # sensitivities of Theorem 3.9 hold for the run (they depend on r and d).
    r, d = _kernel_rules(dataset, train, 0)
    s = fedsc_privacy.perturbed_factors_sigmas(
        eps * share, delta * share, eps * (1 - share), delta * (1 - share),
        rounds=int(train["rounds"]) - 1, tau_x=tau_x, tau_c=train["tau_c"], tau_z=train["tau_z"],
        upsilon=train["tau_z"] + tau_x, r=r, d=d, lam=float(train.get("lam", 1e-3)), eta=float(train["z_lr"]),
    )
    return {
        **base, "private": True, "variant": "factors", "clip_tau": tau_x, "r": r, "d": d,
        "z_noise_std": s["sigma_z"], "c_noise_std": s["sigma_c"],
        "paper_epsilon": s["epsilon"], "paper_formula": "FedSC Theorem 3.9 (Kairouz composition for Z, Gaussian for C)",
    }


def train(dataset, partition, noise: dict, train: dict, seed: int):
    require_all_assigned(partition, "fedsc")
    kw = {
        key: train[key]
        for key in ("rounds", "d", "d_max", "d_tol", "r", "lam", "z_step", "local_steps", "z_lr", "participation",
                    "n_init", "tau_z", "tau_c")
        if train.get(key) is not None
    }
    if noise.get("private"):
        kw["clip_tau"] = noise["clip_tau"]
        if noise["variant"] == "data":
            kw["data_noise_std"] = noise["data_noise_std"]
        else:
            kw.update(z_noise_std=noise["z_noise_std"], c_noise_std=noise["c_noise_std"], r=noise["r"], d=noise["d"])
            kw.update(z_step="gradient", local_steps=1)
    else:
        kw.update({k: noise[k] for k in _SWEEP_KEYS if noise.get(k)})
    result = run_timed(fedsc.run, dataset.X, partition.client, n_clusters(train, dataset), seed=int(seed), y=dataset.y, **kw)
    result.info["metrics"] = {
        key: float(result.info[key]) for key in ("NMI_paper", "reconstruction_error", "d", "r") if result.info.get(key) is not None
    }
    return result
