"""FedSC nodes: calibrate the perturbation, then run :func:`fedclust.clustering.fedsc.run`.

Privacy variants (``fedsc.train.privacy_variant``), used when ``privacy.epsilon`` is set:

* ``data`` (default): every client perturbs its (row-clipped to ``clip_tau``) data once with
  Gaussian noise (sample-level, replace-one, sensitivity ``2 clip_tau``); sigma from the accountant
  (``mechanism: accountant``), Proposition 3.7 (``classical``, the paper's formula, valid for
  epsilon < 1) or the analytic Gaussian mechanism (``analytic``). r, d and everything else are
  computed from the perturbed data (post-processing).
* ``factors``: noise on every uploaded Z_p (each round) and on C once. The noise is calibrated by the
  accountant (``factor_calibration: accountant``, default) on the per-sample sensitivities of
  :func:`fedclust.clustering.fedsc.factor_sensitivities` (``Delta_Z`` needs ``tau_c``, a fixed
  ``z_lr``, public ``r`` and ``d``; ``Delta_C = 2 tau_c``), the budget split ``factor_budget_z``
  between Z and C; ``factor_calibration: paper`` takes the stds of Theorem 3.9 instead (needs
  ``tau_z``; the accountant still reports the epsilon they give). r and d are public
  (``kernel_constants: public``: ``train.r``/``train.d`` or the data-free defaults
  :func:`~fedclust.clustering.fedsc.public_kernel_width` / ``public_dictionary_size``);
  ``kernel_constants: data`` is the paper's literal choice (rules eq. 40/43 on the raw data), which
  is not private: the run then reports epsilon = inf and names the step.

Without a privacy budget the paper's sweeps are available: ``data_noise_beta`` (noise std =
beta * std(X)) and ``z_noise_alpha``/``c_noise_alpha``; they are not DP and the report says so.
"""

from __future__ import annotations

import logging

import numpy as np

from fedclust.clustering import fedsc, spectral
from fedclust.pipelines.methods import n_clusters, require_all_assigned, run_timed
from fedclust.pipelines.privacy.nodes import check_privacy_params
from fedclust.privacy.events import non_dp_release
from fedclust.privacy.paper import fedsc as fedsc_privacy
from fedclust.rng import stream

logger = logging.getLogger(__name__)

_SWEEP_KEYS = ("data_noise_beta", "z_noise_alpha", "c_noise_alpha")
#: Factor-variant settings used when ``fedsc.train`` leaves them null.
FACTOR_DEFAULTS = {"tau_c": 1.0, "z_lr": 0.5}


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
        mech = train.get("mechanism", "classical")
        if mech not in ("accountant", "classical", "analytic"):
            raise ValueError(f"fedsc.train.mechanism must be 'accountant', 'classical' or 'analytic', got {mech!r}")
        if mech == "accountant":
            from fedclust.privacy.accountants import calibrate_noise_multiplier

            # the accountant's smallest noise multiplier for one Gaussian release of sensitivity 2 tau_X
            sigma = calibrate_noise_multiplier(eps, delta, steps=1, accountant=privacy.get("accountant", "rdp")) * 2.0 * tau_x
        else:
            sigma = fedsc_privacy.perturbed_data_sigma(eps, delta, tau_x, mechanism=mech)
        logger.info("fedsc: perturbed data, epsilon=%s delta=%s tau_x=%s -> sigma %.4g", eps, delta, tau_x, sigma)
        notes = ["r and d are estimated on the perturbed data (post-processing of the DP release)"
                 if not (train.get("r") and train.get("d")) else "r and d were given (public)"]
        if eps >= 1 and mech == "classical":
            notes.append(
                f"Prop. 3.7 uses the classical Gaussian mechanism, proven only for epsilon < 1 (here {eps}); "
                "the accountant's epsilon below is the valid figure"
            )
        return {
            **base, "private": True, "variant": "data", "data_noise_std": sigma, "clip_tau": tau_x, "notes": notes,
            "data_mechanism": mech, "paper_epsilon": fedsc_privacy.perturbed_data_epsilon(sigma, delta, tau_x),
            "paper_formula": "FedSC Proposition 3.7: epsilon = 2 tau_X sqrt(2 ln(1.25/delta)) / sigma",
        }
    if variant != "factors":
        raise ValueError(f"fedsc.train.privacy_variant must be 'data' or 'factors', got {variant!r}")
    share = float(train.get("factor_budget_z", 0.5))
    if not 0.0 < share < 1.0:
        raise ValueError(f"fedsc.train.factor_budget_z must be in (0, 1), got {share}")
    for key in ("tau_c", "z_lr"):
        if train.get(key) is not None and not float(train[key]) > 0:
            raise ValueError(f"fedsc.train.{key} must be > 0 (or null for {FACTOR_DEFAULTS[key]}) for privacy_variant=factors")
    constants = train.get("kernel_constants", "public")
    if constants not in ("public", "data"):
        raise ValueError(f"fedsc.train.kernel_constants must be 'public' or 'data', got {constants!r}")
    how = train.get("factor_calibration", "accountant")
    if how not in ("accountant", "paper"):
        raise ValueError(f"fedsc.train.factor_calibration must be 'accountant' or 'paper', got {how!r}")
    rounds = int(train["rounds"])
    tau_c = float(train.get("tau_c") or FACTOR_DEFAULTS["tau_c"])
    z_lr = float(train.get("z_lr") or FACTOR_DEFAULTS["z_lr"])
    tau_z = train.get("tau_z")
    lam = float(train.get("lam", 1e-3))
    m, k = int(dataset.X.shape[1]), n_clusters(train, dataset)
    notes = []
    if constants == "public":
        r = float(train["r"]) if train.get("r") else fedsc.public_kernel_width(m, tau_x)
        d = int(train["d"]) if train.get("d") else fedsc.public_dictionary_size(m, k)
        notes.append(f"kernel width r={r:.6g} ({'given' if train.get('r') else 'public default sqrt(m/6)'}) and "
                     f"dictionary size d={d} ({'given' if train.get('d') else 'public default 2m'}) read no data")
    else:
        # the paper's literal choice: rules on the raw data (stream "data" of seed 0), fixed here so the
        # sensitivities hold for the run; the run reports epsilon = inf for it (train() adds the release)
        r, d = _kernel_rules(dataset, train, 0)
    sens = fedsc.factor_sensitivities(d=d, r=r, tau_c=tau_c, z_lr=z_lr, lam=lam, tau_x=tau_x,
                                      tau_z=float(tau_z) if tau_z else None)
    z_rounds = rounds - 1  # data-dependent Z uploads (round 1 uploads the random init)
    paper = None
    if tau_z:
        paper = {"ups": float(tau_z) + tau_x, "z": sens["z_paper"], "c": sens["c_paper"]}
    if how == "paper":
        if paper is None:
            raise ValueError("fedsc.train.tau_z must be > 0 for factor_calibration=paper (Theorem 3.9)")
        s = fedsc_privacy.perturbed_factors_sigmas(
            eps * share, delta * share, eps * (1 - share), delta * (1 - share),
            rounds=max(z_rounds, 1), tau_x=tau_x, tau_c=tau_c, tau_z=float(tau_z),
            upsilon=paper["ups"], r=r, d=d, lam=lam, eta=z_lr,
        )
        sigma_z, sigma_c, paper_eps = s["sigma_z"], s["sigma_c"], s["epsilon"]
        notes.append("noise stds from Theorem 3.9's formulas (paper calibration); the accountant's epsilon uses the "
                     "per-sample sensitivities and is the valid figure")
    else:
        cal = fedsc.factor_noise_stds(eps, delta, rounds=rounds, d=d, r=r, tau_c=tau_c, z_lr=z_lr, share_z=share,
                                      accountant=privacy.get("accountant", "rdp"))
        sigma_z, sigma_c = cal["z_noise_std"], cal["c_noise_std"]
        paper_eps = None
        if paper is not None and z_rounds > 0:
            paper_eps = (fedsc_privacy.factor_epsilon_z(sigma_z, delta * share, z_rounds, paper["z"])
                         + fedsc_privacy.factor_epsilon_c(sigma_c, delta * (1 - share), paper["c"]))
    logger.info("fedsc: perturbed factors, epsilon=%s r=%.4g d=%d -> sigma_z %.4g, sigma_c %.4g", eps, r, d, sigma_z, sigma_c)
    return {
        **base, "private": True, "variant": "factors", "clip_tau": tau_x, "r": r, "d": d,
        "kernel_constants": constants, "factor_calibration": how, "tau_c": tau_c, "z_lr": z_lr,
        "z_noise_std": sigma_z, "c_noise_std": sigma_c, "sensitivity_z": sens["z"], "sensitivity_c": sens["c"],
        "notes": notes, "paper_epsilon": paper_eps,
        "paper_formula": "FedSC Theorem 3.9 (Kairouz composition for Z, Gaussian for C), at the stds used",
    }


def train(dataset, partition, noise: dict, train: dict, seed: int):
    require_all_assigned(partition, "fedsc")
    kw = {
        key: train[key]
        for key in ("rounds", "d", "d_max", "d_tol", "r", "lam", "z_step", "local_steps", "z_lr", "participation",
                    "n_init", "tau_z", "tau_c", "graph")
        if train.get(key) is not None
    }
    if noise.get("private"):
        kw["clip_tau"] = noise["clip_tau"]
        if noise["variant"] == "data":
            kw["data_noise_std"] = noise["data_noise_std"]
        else:
            kw.update(z_noise_std=noise["z_noise_std"], c_noise_std=noise["c_noise_std"], r=noise["r"], d=noise["d"])
            kw.update(z_step="gradient", local_steps=1, tau_c=noise["tau_c"], z_lr=noise["z_lr"])
            kw.pop("d_max", None)
    else:
        kw.update({k: noise[k] for k in _SWEEP_KEYS if noise.get(k)})
    result = run_timed(fedsc.run, dataset.X, partition.client, n_clusters(train, dataset), seed=int(seed), y=dataset.y, **kw)
    if noise.get("private") and noise.get("kernel_constants") == "data":
        result.dp_events.append(non_dp_release(
            "fedsc kernel width r and dictionary size d computed from the private data (eq. 40/43, "
            "kernel_constants=data)", neighbouring="replace_one"))
    result.info["metrics"] = {
        key: float(result.info[key]) for key in ("NMI_paper", "reconstruction_error", "d", "r", "knn_k", "graph_components")
        if result.info.get(key) is not None
    }
    return result
