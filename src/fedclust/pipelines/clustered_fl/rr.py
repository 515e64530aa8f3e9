"""RR-Cluster and its DP baselines as one pipeline (``rr_cluster``), method chosen by
``rr_cluster.train.method``: rr_cluster (with ``base`` ifca | fesem | fedcam and threshold ``B``),
dp_ifca, dp_fesem, dp_fedcam, dp_fedavg, dp_fedprox, dp_fedper.

Client-level DP. Calibration (spec 002, section 3.4): the target ``privacy.epsilon`` at
``privacy.delta`` (the paper uses 1e-3) over T rounds with fixed-size sampling q = participation,
split between the identifier noise (share ``rho_s``) and the model noise; the paper's own
accountant (Wang et al. bound, eq. 9 conversion) gives ``epsilon_paper`` and dp-accounting the
audited figure.
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


def calibrate(privacy: dict, train: dict, rotated) -> dict:
    method = train.get("method", "rr_cluster")
    if method not in METHODS:
        raise ValueError(f"rr_cluster.train.method must be one of {METHODS}, got {method!r}")
    eps, delta = check_privacy_params(privacy)
    base = {"mechanism": "gaussian", "unit": "client", "delta": delta, "epsilon_target": eps, "method": method}
    if eps is None:
        return {**base, "private": False, "sigma_s": 0.0, "sigma_theta": 0.0, "sigma_g": None, "sigma": 0.0}
    q, T, M = _q_T_M(train, rotated)
    kind = _CLUSTERED.get(method, "none") if method != "rr_cluster" else train.get("base", "ifca")
    out = {**base, "private": True, "clip": float(train["clip"]), "sigma_g": None}
    if kind == "fedcam":
        ss, sg, st = rr_cluster.calibrate_fedcam(eps, delta, q, T, M)
        out.update(sigma_s=ss, sigma_g=sg, sigma_theta=st)
    elif method in ("dp_fedavg", "dp_fedprox", "dp_fedper"):
        out["sigma"] = rr_cluster.calibrate(eps, delta, q, T, M, 0.0)[1]
    else:
        ss, st = rr_cluster.calibrate(eps, delta, q, T, M, float(train.get("rho_s", 0.5)))
        out.update(sigma_s=ss, sigma_theta=st)
        out["paper_epsilon"] = rr_privacy.epsilon(q, T, ss, st, delta)
        out["paper_formula"] = "RR-Cluster Prop. 4.1 + Wang et al. (2019) Thm 4.2 RDP bound, eq. (9) conversion"
    logger.info("%s: epsilon=%s delta=%s -> %s", method, eps, delta,
                {k: v for k, v in out.items() if k.startswith("sigma")})
    return out


def train(rotated, noise: dict, train: dict, seed: int):
    method = noise["method"]
    data, model = tensors_and_model(rotated, train)
    kw = {k: train[k] for k in _ENGINE if train.get(k) is not None}
    kw.update(participation=float(train.get("participation", 0.1)), seed=int(seed))
    clip = noise.get("clip") if noise["private"] else None
    k = int(train.get("k") or len(rotated.angles))
    t0 = time.perf_counter()
    if method in ("dp_fedavg", "dp_fedprox", "dp_fedper"):
        fn = {"dp_fedavg": dpb.dp_fedavg, "dp_fedprox": dpb.dp_fedprox, "dp_fedper": dpb.dp_fedper}[method]
        extra = {"mu": float(train.get("mu", 0.01))} if method == "dp_fedprox" else {}
        res = fn(data, model, sigma=noise.get("sigma", 0.0), clip=clip, **extra, **kw)
    else:
        common = dict(sigma_s=noise["sigma_s"], sigma_theta=noise["sigma_theta"], sigma_g=noise.get("sigma_g"),
                      clip=clip, C_s=float(train.get("C_s", 0.1)), sensitivity_factor=train.get("sensitivity_factor"), **kw)
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
