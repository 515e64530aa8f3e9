"""Adapters of the clustered-FL methods (on the rotated clients of :func:`fedclust.partition.rotation`).

IFCA, CFL-MGD and FedAvg are not private (their report says epsilon = inf). RR-Cluster and its DP
baselines (``rr_cluster.train.method``) are client-level DP under replace-one neighbours with
fixed-size client sampling (derivation in :mod:`fedclust.clustered_fl.rr_cluster`):
the target ``privacy.epsilon`` at ``privacy.delta`` over T rounds of m = round(qM) clients, split
between the identifier noise (share ``rho_s``) and the model noise by the project's accountant
(``calibration_bound: accountant``; the paper's Theorem 4.2 bound is ``wang_general``).

:func:`rr_sigmas` and :func:`run_rr` are the one RR dispatch: the ``rr_cluster`` pipeline and the
RR grids call them. Torch is imported only when a method runs.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

from fedclust.params_check import ParameterError
from fedclust.registry import configs as C
from fedclust.registry.helpers import refuse_absurd, tensors_and_model
from fedclust.registry.privacy import check_privacy_params, non_private_calibration

logger = logging.getLogger(__name__)


def n_groups(rotated) -> int:
    return len(rotated.angles)


def _check_k(method: str, cfg, rotated) -> int:
    M = int(rotated.group.size)
    k = getattr(cfg, "k", None)
    refuse_absurd(method, [("k", k, M, "the number of clients")])
    return int(k or n_groups(rotated))


def clustered_calibrate(method: str):
    def calibrate(privacy: dict, cfg, rotated) -> dict:
        return non_private_calibration(privacy, method, "client")

    calibrate.__name__ = f"{method}_calibrate"
    return calibrate


def run_clustered(method: str, data, model, k: int | None, *, seed: int, **kw):
    """IFCA, CFL-MGD or FedAvg on ``data`` (:class:`~fedclust.clustered_fl.FederatedTensors`)."""
    # the clustered-FL methods load when one runs: they import torch, which the registry's every kedro start must not pay
    from fedclust.clustered_fl import cfl_mgd, fedavg, ifca

    if method == "fedavg":
        kw.pop("beta", None)
        return fedavg.run(data, model, seed=int(seed), **kw)
    if method == "ifca":
        kw.pop("beta", None)
        return ifca.run(data, model, k, seed=int(seed), **kw)
    if method == "cfl_mgd":
        return cfl_mgd.run(data, model, k, seed=int(seed), **kw)
    raise ValueError(f"unknown clustered-FL method {method!r}; valid: ifca, cfl_mgd, fedavg")


@contextlib.contextmanager
def chunk_runner_of(method: str, cfg):
    """``(runner, its description)`` for one run of ``<method>.train.chunk_runner`` (runner None: the
    engine's own serial chunks), built when the run starts and closed when it ends, however it ends
    (worker processes stopped, a Ray instance the runner started shut down)."""
    # the runners live with the engine, which imports torch: loaded when a clustered-FL method runs
    from fedclust.clustered_fl.options import describe_chunk_runner, make_chunk_runner

    runner = make_chunk_runner(cfg.chunk_runner, f"{method}.train.chunk_runner")
    described = describe_chunk_runner(cfg.chunk_runner)
    if runner is not None:
        logger.info("%s: the chunks of every round train on %s", method, described)
    try:
        yield runner, described
    finally:
        if runner is not None:
            runner.close()


def _record_runner(method: str, res, described: str) -> None:
    """Which runner trained the run's chunks, in ``result.info`` (informational: the results are the
    same bit for bit); a warning when it had nothing to do because every round fit in one chunk."""
    res.info["chunk_runner"] = described
    if described != "serial" and int(res.info.get("chunks_per_round", 1)) <= 1:
        logger.warning(
            "%s.train.chunk_runner: every round fit in one chunk, which trains here; lower "
            "max_chunk_mb to spread the rounds' clients over the workers",
            method,
        )


def clustered_run(method: str):
    def run(rotated, noise: dict, cfg, seed: int):

        k = _check_k(method, cfg, rotated) if method != "fedavg" else None
        data, model = tensors_and_model(rotated, cfg.model)
        kw = cfg.run_settings(exclude=("chunk_runner",))
        t0 = time.perf_counter()
        with chunk_runner_of(method, cfg) as (runner, described):
            res = run_clustered(method, data, model, k, seed=seed, chunk_runner=runner, **kw)
        res.info["wall_time_s"] = time.perf_counter() - t0
        res.info["rounds"] = int(cfg.rounds)
        _record_runner(method, res, described)
        return res

    run.__name__ = f"{method}_run"
    return run


# ---- RR-Cluster and its DP baselines ---------------------------------------------------------------

#: the base algorithm of every RR method with clusters (None: rr_cluster's own ``base``)
RR_CLUSTERED = {
    "rr_cluster": None,
    "dp_ifca": "ifca",
    "dp_ifca_literal": "ifca",
    "dp_fesem": "fesem",
    "dp_fedcam": "fedcam",
}
RR_GLOBAL = ("dp_fedavg", "dp_fedprox", "dp_fedper")
#: the clustered-FL methods that train one model for every client: they cluster no clients, so their
#: client clustering has no meaning (a report shows it as not applicable, not as at chance)
ONE_MODEL = ("fedavg", *RR_GLOBAL)


def rr_base(method: str, base: str = "ifca") -> str | None:
    """The base of ``method`` (``None`` for the one-model baselines)."""
    if method in RR_GLOBAL:
        return None
    return RR_CLUSTERED[method] or base


def rr_sigmas(method: str, eps, delta, q, T, M, *, rho_s=0.5, base="ifca", bound="accountant") -> dict:
    """The noise multipliers of an RR method for the target ``(eps, delta)`` (``eps=None``: no noise):
    ``{"sigma_s", "sigma_theta", "sigma_g"}`` for the clustered methods, ``{"sigma"}`` for the others."""
    # the clustered-FL methods load when one runs: they import torch, which the registry's every kedro start must not pay
    from fedclust.clustered_fl import rr_cluster

    kind = rr_base(method, base)
    if kind is None:
        return {"sigma": rr_cluster.calibrate(eps, delta, q, T, M, 0.0, bound=bound)[1] if eps is not None else 0.0}
    if eps is None:
        return {"sigma_s": 0.0, "sigma_theta": 0.0, "sigma_g": None}
    if kind == "fedcam":
        ss, sg, st = rr_cluster.calibrate_fedcam(eps, delta, q, T, M, bound=bound)
        return {"sigma_s": ss, "sigma_g": sg, "sigma_theta": st}
    ss, st = rr_cluster.calibrate(eps, delta, q, T, M, float(rho_s), bound=bound)
    return {"sigma_s": ss, "sigma_theta": st, "sigma_g": None}


def run_rr(
    method: str,
    data,
    model,
    k: int,
    *,
    sigmas: dict,
    clip,
    B: int = 0,
    base: str = "ifca",
    C_s: float = 0.1,
    mu: float = 0.01,
    noise_calibration: str = "replace_one",
    **kw,
):
    """Run RR method ``method`` (rr_cluster, dp_ifca, dp_ifca_literal, dp_fesem, dp_fedcam, dp_fedavg,
    dp_fedprox, dp_fedper) with the noise multipliers ``sigmas`` of :func:`rr_sigmas`; ``kw`` go to
    the engine (rounds, lr, local_steps, participation, eval_every, server_lr, seed, ...).
    ``dp_ifca_literal`` is DP-IFCA with the paper's literal noise (``noise_calibration=paper_literal``)."""
    # the clustered-FL methods load when one runs: they import torch, which the registry's every kedro start must not pay
    from fedclust.clustered_fl import dp_baselines as dpb
    from fedclust.clustered_fl import rr_cluster

    if method in RR_GLOBAL:
        extra = {"mu": float(mu)} if method == "dp_fedprox" else {}
        return getattr(dpb, method)(
            data, model, sigma=sigmas.get("sigma", 0.0), clip=clip, noise_calibration=noise_calibration, **extra, **kw
        )
    if method not in RR_CLUSTERED:
        raise ValueError(f"unknown RR method {method!r}; valid: {sorted(RR_CLUSTERED) + list(RR_GLOBAL)}")
    if method == "dp_ifca_literal":
        noise_calibration = "paper_literal"
    # dp_ifca, dp_fesem, dp_fedcam are RR-Cluster without rebalancing (B = 0) on their base
    return rr_cluster.run(
        data,
        model,
        k,
        base=rr_base(method, base),
        B=int(B) if method == "rr_cluster" else 0,
        sigma_s=sigmas["sigma_s"],
        sigma_theta=sigmas["sigma_theta"],
        sigma_g=sigmas.get("sigma_g"),
        clip=clip,
        C_s=float(C_s),
        noise_calibration=noise_calibration,
        **kw,
    )


def rr_regime(q: float, M: int, k: int, moved) -> dict[str, float]:
    """Where an RR run sits on the regime map: ``expected_clients_per_cluster`` = m / k with
    m = round(qM) sampled clients per round (how many updates an average cluster gets before the
    identifier noise; the rebalancing can only act when a noisy cluster falls below B, which needs
    few of them), and ``rr_moves_updates`` (1.0 when the run moved at least one update, i.e. it ran
    in the regime where RR-Cluster differs from its base method; always 0.0 for B = 0)."""
    m = max(1, int(round(float(q) * int(M))))
    return {
        "expected_clients_per_cluster": m / int(k),
        "rr_moves_updates": float(any(n > 0 for n in (moved or []))),
    }


def _paper_epsilon(q, T, delta, sigmas) -> float:
    """The paper's epsilon (Thm 4.2 + eq. 9) for the Gaussians of one round (all sharing the sample)."""
    # the clustered-FL methods load when one runs: they import torch, which the registry's every kedro start must not pay
    from fedclust.privacy.paper import rr_cluster as rr_privacy

    z = [v for v in sigmas if v is not None and not math.isinf(v)]
    s_eff = 1.0 / math.sqrt(sum(1.0 / v**2 for v in z))
    return rr_privacy.epsilon(q, T, None, s_eff, delta)


def rr_calibrate(privacy: dict, cfg: C.RRClusterConfig, rotated) -> dict:
    """Noise multipliers of ``cfg.method`` for the budget; the report's epsilon is the accountant's on
    the releases the run made, ``paper_epsilon`` the paper's formula (Prop. 4.1 + Thm 4.2 + eq. 9)."""
    method, literal = cfg.method, cfg.noise_calibration
    eps, delta = check_privacy_params(privacy)
    # the server clips, adds the noise and picks the sampled clients itself: a trusted server
    base = {
        "mechanism": "gaussian",
        "unit": "client",
        "delta": delta,
        "epsilon_target": eps,
        "method": method,
        "trust_model": "central",
        "neighbouring": "replace_one",
        "sampling": "without_replacement",
        "noise_calibration": literal,
    }
    if eps is None:
        return {**base, "private": False, "sigma_s": 0.0, "sigma_theta": 0.0, "sigma_g": None, "sigma": 0.0}
    q, T, M = float(cfg.participation), int(cfg.rounds), int(rotated.group.size)
    bound = cfg.calibration_bound
    out = {**base, "private": True, "clip": float(cfg.clip), "sigma_g": None, "calibration_bound": bound}
    sig = rr_sigmas(method, eps, delta, q, T, M, rho_s=cfg.rho_s, base=cfg.base, bound=bound)
    out.update(sig)
    out["paper_epsilon"] = _paper_epsilon(q, T, delta, [v for v in sig.values() if v is not None])
    out["paper_formula"] = (
        "RR-Cluster Prop. 4.1 + Wang et al. (2019) Thm 4.2 RDP bound, eq. (9) conversion, on the "
        "replace-one noise multipliers"
    )
    if literal == "paper_literal":
        out["notes"] = [
            "noise_calibration=paper_literal: the paper's noise (for the baselines: "
            "sensitivity C_theta) is smaller than the replace-one calibration; the accountant's epsilon "
            "exceeds the target"
        ]
    logger.info(
        "%s: epsilon=%s delta=%s -> %s", method, eps, delta, {k: v for k, v in out.items() if k.startswith("sigma")}
    )
    return out


def rr_run(rotated, noise: dict, cfg: C.RRClusterConfig, seed: int):

    method = cfg.method
    k = _check_k("rr_cluster", cfg, rotated)
    problems = cfg.feasibility(int(rotated.group.size), k) if method == "rr_cluster" else []
    if problems:
        raise ParameterError(problems[0])
    data, model = tensors_and_model(rotated, cfg.model)
    # the clip of a private run is its calibration's (none without DP)
    kw = cfg.run_settings(exclude=("clip", "chunk_runner"), seed=int(seed))
    sigmas = {key: noise.get(key) for key in ("sigma_s", "sigma_theta", "sigma_g", "sigma")}
    sigmas["sigma"] = sigmas["sigma"] or 0.0
    t0 = time.perf_counter()
    with chunk_runner_of("rr_cluster", cfg) as (runner, described):
        res = run_rr(
            method,
            data,
            model,
            k,
            sigmas=sigmas,
            clip=noise.get("clip") if noise["private"] else None,
            mu=cfg.mu,
            chunk_runner=runner,
            **kw,
        )
    res.info["wall_time_s"] = time.perf_counter() - t0
    res.info["rounds"] = int(cfg.rounds)
    _record_runner("rr_cluster", res, described)
    moved = res.history.get("n_moved") or []
    final = res.info.setdefault("final", {})
    if moved:
        final["mean_moved_per_round"] = float(sum(moved) / len(moved))
    if rr_base(method, cfg.base) is not None:  # the methods with clusters: where the run sits on RR's regime map
        final.update(rr_regime(float(cfg.participation), int(rotated.group.size), k, moved))
    return res
