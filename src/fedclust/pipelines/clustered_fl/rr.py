"""RR-Cluster and its DP baselines as one pipeline (``rr_cluster``), method chosen by
``rr_cluster.train.method``: rr_cluster (with ``base`` ifca | fesem | fedcam and threshold ``B``),
dp_ifca, dp_fesem, dp_fedcam, dp_fedavg, dp_fedprox, dp_fedper.

Client-level DP under replace-one neighbours with fixed-size client sampling, the same for every
method (amendment A-2; derivation in :mod:`fedclust.clustered_fl.rr_cluster`). Calibration: the target
``privacy.epsilon`` at ``privacy.delta`` (the paper uses 1e-3) over T rounds of m = round(qM) clients
(q = participation), split between the identifier noise (share ``rho_s``) and the model noise, by the
project's accountant (``calibration_bound: accountant``; the paper's Theorem 4.2 bound is available as
``wang_general``). The report's epsilon is the accountant's on the releases the run made;
``epsilon_paper`` is the paper's formula (Prop. 4.1 + Thm 4.2 + eq. 9) on the same multipliers.
"""

from __future__ import annotations

import logging
import math
import time

from fedclust.clustered_fl import dp_baselines as dpb
from fedclust.clustered_fl import rr_cluster
from fedclust.pipelines.clustered_fl.nodes import tensors_and_model
from fedclust.pipelines.privacy.nodes import check_privacy_params
from fedclust.privacy.paper import rr_cluster as rr_privacy

logger = logging.getLogger(__name__)

METHODS = ("rr_cluster", "dp_ifca", "dp_fesem", "dp_fedcam", "dp_fedavg", "dp_fedprox", "dp_fedper")
_CLUSTERED = {"rr_cluster": None, "dp_ifca": "ifca", "dp_fesem": "fesem", "dp_fedcam": "fedcam"}
_ENGINE = ("rounds", "lr", "local_steps", "batch_size", "eval_every", "server_lr")


def _q_T_M(train: dict, rotated) -> tuple[float, int, int]:
    M = int(rotated.group.size)
    q = float(train.get("participation", 0.1))
    return q, int(train["rounds"]), M


def _paper_epsilon(q, T, delta, sigmas) -> float:
    """The paper's epsilon (Thm 4.2 + eq. 9) for the Gaussians of one round (all sharing the sample)."""
    z = [v for v in sigmas if v is not None and not math.isinf(v)]
    s_eff = 1.0 / math.sqrt(sum(1.0 / v**2 for v in z))
    return rr_privacy.epsilon(q, T, None, s_eff, delta)


def calibrate(privacy: dict, train: dict, rotated) -> dict:
    method = train.get("method", "rr_cluster")
    if method not in METHODS:
        raise ValueError(f"rr_cluster.train.method must be one of {METHODS}, got {method!r}")
    literal = train.get("noise_calibration", "replace_one")
    if literal not in rr_cluster.NOISE_CALIBRATIONS:
        raise ValueError(f"rr_cluster.train.noise_calibration must be one of {rr_cluster.NOISE_CALIBRATIONS}, "
                         f"got {literal!r}")
    eps, delta = check_privacy_params(privacy)
    base = {"mechanism": "gaussian", "unit": "client", "delta": delta, "epsilon_target": eps, "method": method,
            "neighbouring": "replace_one", "sampling": "without_replacement", "noise_calibration": literal}
    if eps is None:
        return {**base, "private": False, "sigma_s": 0.0, "sigma_theta": 0.0, "sigma_g": None, "sigma": 0.0}
    q, T, M = _q_T_M(train, rotated)
    bound = train.get("calibration_bound", "accountant")
    kind = _CLUSTERED.get(method, "none") if method != "rr_cluster" else train.get("base", "ifca")
    out = {**base, "private": True, "clip": float(train["clip"]), "sigma_g": None, "calibration_bound": bound}
    if kind == "fedcam":
        ss, sg, st = rr_cluster.calibrate_fedcam(eps, delta, q, T, M, bound=bound)
        out.update(sigma_s=ss, sigma_g=sg, sigma_theta=st)
        sig = (ss, sg, st)
    elif method in ("dp_fedavg", "dp_fedprox", "dp_fedper"):
        out["sigma"] = rr_cluster.calibrate(eps, delta, q, T, M, 0.0, bound=bound)[1]
        sig = (out["sigma"],)
    else:
        ss, st = rr_cluster.calibrate(eps, delta, q, T, M, float(train.get("rho_s", 0.5)), bound=bound)
        out.update(sigma_s=ss, sigma_theta=st)
        sig = (ss, st)
    out["paper_epsilon"] = _paper_epsilon(q, T, delta, sig)
    out["paper_formula"] = ("RR-Cluster Prop. 4.1 + Wang et al. (2019) Thm 4.2 RDP bound, eq. (9) conversion, on the "
                            "replace-one noise multipliers")
    if literal == "paper_literal":
        out["notes"] = ["noise_calibration=paper_literal: the paper's noise (withdrawn resolution A2 for the "
                        "baselines) is smaller than the replace-one calibration; the accountant's epsilon "
                        "exceeds the target"]
    logger.info("%s: epsilon=%s delta=%s -> %s", method, eps, delta,
                {k: v for k, v in out.items() if k.startswith("sigma")})
    return out


def train(rotated, noise: dict, train: dict, seed: int):
    method = noise["method"]
    data, model = tensors_and_model(rotated, train)
    kw = {k: train[k] for k in _ENGINE if train.get(k) is not None}
    kw.update(participation=float(train.get("participation", 0.1)), seed=int(seed))
    clip = noise.get("clip") if noise["private"] else None
    kw["noise_calibration"] = noise.get("noise_calibration", "replace_one")
    k = int(train.get("k") or len(rotated.angles))
    t0 = time.perf_counter()
    if method in ("dp_fedavg", "dp_fedprox", "dp_fedper"):
        fn = {"dp_fedavg": dpb.dp_fedavg, "dp_fedprox": dpb.dp_fedprox, "dp_fedper": dpb.dp_fedper}[method]
        extra = {"mu": float(train.get("mu", 0.01))} if method == "dp_fedprox" else {}
        res = fn(data, model, sigma=noise.get("sigma", 0.0), clip=clip, **extra, **kw)
    else:
        common = dict(sigma_s=noise["sigma_s"], sigma_theta=noise["sigma_theta"], sigma_g=noise.get("sigma_g"),
                      clip=clip, C_s=float(train.get("C_s", 0.1)), **kw)
        if method == "rr_cluster":
            res = rr_cluster.run(data, model, k, base=train.get("base", "ifca"), B=int(train.get("B", 8)), **common)
        else:
            res = getattr(dpb, method)(data, model, k, **common)
    res.info["wall_time_s"] = time.perf_counter() - t0
    res.info["rounds"] = int(kw.get("rounds", 100))
    moved = res.history.get("n_moved") or []
    if moved:
        res.info.setdefault("final", {})["mean_moved_per_round"] = float(sum(moved) / len(moved))
    return res
