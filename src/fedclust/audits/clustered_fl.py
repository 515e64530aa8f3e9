"""Audit cases of the clustered-FL family: RR-Cluster and its DP baselines.

Methods: ``rr_cluster`` (RR-Cluster(IFCA), B = 2), ``dp_ifca``, ``dp_fesem``, ``dp_fedcam``,
``dp_fedavg``, ``dp_fedprox``, ``dp_fedper``. Each case runs the method's own code path
(:func:`fedclust.clustered_fl.rr_cluster.run` / :mod:`fedclust.clustered_fl.dp_baselines`: the
engine's fixed-size client sampling, local training, identifier noise, rebalancing, clipping and
noise) once per audit run.

Tiny setting (client-level DP, replace-one neighbours, the relation the methods account):

* M = 10 clients, m = 5 sampled per round (q = 0.5, without replacement), T = 1 round, one local
  gradient step, model ``y = w x + b`` (2 parameters; FedCAM: global + cluster copies; FedPer: ``b``
  is the personal head), k = 2 cluster models for the clustering methods;
* public, data-independent initial models: all zeros (``init_params``), so the 9 ordinary clients
  (x = 1, y = 0) have exactly zero updates;
* the canary is client 0 with ``y = +50``: its update ``+lr 50 (1, 1)`` is clipped to ``C (1, 1)/sqrt 2``.
  The neighbouring data set replaces it by the opposite client (``y = -50``), the worst case of the
  replace-one relation (the cluster sum moves by ``2 C``);
* distinguisher: the sum of all released model parameters (every cluster model; FedCAM's global part
  too). Without noise it is ``> 0`` exactly when the canary was sampled and ``< 0`` when its
  replacement was, so the noise-off audit separates the two in about half of the runs (q = 0.5) and
  never errs the other way: the power check.

``epsilon`` is the accountant's epsilon on the releases a probe run of exactly this configuration
reports (``fedclust.privacy.accountants.epsilon(result.dp_events, delta)``), calibrated to the
target ``epsilon`` by :func:`fedclust.clustered_fl.rr_cluster.calibrate`; ``info["epsilon_paper"]`` is the
paper's formula (Thm 4.2 + eq. 9) on the same multipliers. Default 100 runs per side with the noise
on (its distribution-free bound stays near 0 at any affordable count; the measured noise needs few),
:func:`power_runs` with it off (the canary is sampled in half of them: about 1,100 runs per side for
the power check at ε = 4) and 100 for the mutant (the measured-noise audit); one engine run costs
2-5 ms.

Only the distribution-free bound applies to what the canary reveals: with client sampling the
released sum is a mixture (canary sampled or not) of Gaussians, not one Gaussian, so there is no
Gaussian statistic to audit tightly (``info["why_not_gaussian"]``). The noise itself is Gaussian
and is measured: every per-cluster sum release minus the exact sum of the clipped updates, and
FedCAM's global sum likewise (each release reports its noise to :func:`observed_sum_noise`; the
global noise in the unit of the cluster sums' std), against the claimed std ``sum_noise_std`` (the measured-noise audit,
which turns it into the accountant's ε at the measured noise, amplification by sampling included).
Mutant: ``noise_scale`` multiplies every noise std passed to the method; the accounted
epsilon stays that of the calibrated run.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from functools import lru_cache

import numpy as np
import torch

from fedclust.clustered_fl import FederatedTensors, LinearRegression, rr_cluster
from fedclust.clustered_fl import dp_baselines as dpb
from fedclust.privacy.accountants import effective_noise_multiplier
from fedclust.privacy.accountants import epsilon as account
from fedclust.privacy.audit import AuditCase, epsilon_with_noise
from fedclust.privacy.observe import observe
from fedclust.privacy.paper import rr_cluster as paper

N_CLIENTS, N_SAMPLED, N_PER_CLIENT, K_CLUSTERS, B_RR = 10, 5, 2, 2, 2
CANARY_Y, LR, CLIP = 50.0, 0.1, 1.0


def power_runs(epsilon: float) -> int:
    """Noise-off runs per side for the power check at ``epsilon``: the canary is sampled in about half
    of them and never mistaken, so the bound is about ln(0.45 n_eval / 3.7) for n_eval = half the
    runs; this asks for 0.2 above ``epsilon`` (about 1,100 runs at 4, the floor of 200 at 1)."""
    return int(min(4000, max(200, math.ceil(2 * 8.2 * math.exp(float(epsilon) + 0.2)))))


@lru_cache(maxsize=2)
def audit_data(with_canary: bool):
    """Federated data: client 0 is the canary (``y = +50``) or its replace-one neighbour (``y = -50``);
    clients 1..9 have ``x = 1, y = 0``."""

    client = np.repeat(np.arange(N_CLIENTS), N_PER_CLIENT)
    X = np.ones((client.size, 1))
    y = np.zeros(client.size)
    y[client == 0] = CANARY_Y if with_canary else -CANARY_Y
    return FederatedTensors.from_arrays(X, y, client)


def _model():

    return LinearRegression(1, bias=True)


def _zeros(k: int, fedcam: bool = False) -> dict:

    p = {"weight": torch.zeros(k, 1, 1), "bias": torch.zeros(k, 1)}
    if fedcam:
        return {f"{part}.{n}": v.clone() for part in ("g", "c") for n, v in p.items()}
    return p


def _runner(method: str, epsilon: float, delta: float, noise_scale: float = 1.0):
    """``(run(with_canary, noise, seed) -> result, noise settings)`` for ``method``; the noise stds are
    ``noise_scale`` times the calibrated ones (the mutant)."""

    q = N_SAMPLED / N_CLIENTS
    common = dict(lr=LR, local_steps=1, rounds=1, clients_per_round=N_SAMPLED, eval_every=0, clip=CLIP)
    if method in ("dp_fedavg", "dp_fedprox", "dp_fedper"):
        sigma = rr_cluster.calibrate(epsilon, delta, q, 1, N_CLIENTS, 0.0)[1] * noise_scale
        fn = {"dp_fedavg": dpb.dp_fedavg, "dp_fedprox": dpb.dp_fedprox, "dp_fedper": dpb.dp_fedper}[method]

        def run(canary, noise, seed):
            return fn(
                audit_data(canary), _model(), sigma=sigma if noise else 0.0, seed=seed, init_params=_zeros(1), **common
            )

        return run, {"sigma": sigma}
    if method == "dp_fedcam":
        ss, sg, st = (v * noise_scale for v in rr_cluster.calibrate_fedcam(epsilon, delta, q, 1, N_CLIENTS))

        def run(canary, noise, seed):
            return dpb.dp_fedcam(
                audit_data(canary),
                _model(),
                K_CLUSTERS,
                sigma_s=ss if noise else 0.0,
                sigma_g=sg if noise else 0.0,
                sigma_theta=st if noise else 0.0,
                seed=seed,
                init_params=_zeros(K_CLUSTERS, fedcam=True),
                **common,
            )

        return run, {"sigma_s": ss, "sigma_g": sg, "sigma_theta": st}
    ss, st = (v * noise_scale for v in rr_cluster.calibrate(epsilon, delta, q, 1, N_CLIENTS, 0.5))
    if method == "rr_cluster":

        def call(data, **kw):
            return rr_cluster.run(data, _model(), K_CLUSTERS, base="ifca", B=B_RR, **kw)
    else:
        fn = {"dp_ifca": dpb.dp_ifca, "dp_fesem": dpb.dp_fesem}[method]

        def call(data, **kw):
            return fn(data, _model(), K_CLUSTERS, **kw)

    def run(canary, noise, seed):
        return call(
            audit_data(canary),
            sigma_s=ss if noise else 0.0,
            sigma_theta=st if noise else 0.0,
            seed=seed,
            init_params=_zeros(K_CLUSTERS),
            **common,
        )

    return run, {"sigma_s": ss, "sigma_theta": st}


@contextmanager
def observed_sum_noise(sum_std: float, global_std: float | None = None):
    """Collect the noise of every sum release made inside the block, in the unit of the cluster sums'
    claimed std ``sum_std``: the per-cluster sums (reported, flattened, by
    :func:`fedclust.clustered_fl.rr_cluster.release_cluster_sum`, which every method here goes
    through) and FedCAM's global sum (``"global_sum_noise"``, rescaled by ``sum_std / global_std``),
    so one claimed std covers every draw. Yields a list that holds the noise arrays after the block."""
    out: list = []
    with observe("cluster_sum_noise") as cluster, observe("global_sum_noise") as glob:
        yield out
    out += cluster
    if glob:
        out += [g * (sum_std / float(global_std)) for g in glob]


def _score(result) -> float:
    return float(sum(float(v.sum()) for v in result.params.values()))


def _case(
    method: str, epsilon: float = 1.0, delta: float = 1e-5, n_runs: int = 100, noise_scale: float = 1.0
) -> AuditCase:

    run, sigmas = _runner(method, float(epsilon), float(delta), noise_scale)
    probe = _runner(method, float(epsilon), float(delta))[0](True, True, 0)  # the claim of the calibrated run
    eps = account(probe.dp_events, delta)
    (rel,) = probe.dp_events
    sum_std, global_std = float(rel.extra["sum_noise_std"]), rel.extra.get("global_noise_std")

    # the paper's claim (Prop. 4.1 + Thm 4.2 + eq. 9) for the same multipliers, shown next to the accountant's
    eps_paper = paper.epsilon(N_SAMPLED / N_CLIENTS, 1, None, effective_noise_multiplier(rel.noise_multipliers), delta)

    def one(canary_in: bool, noise: bool, seed: int) -> tuple[float, np.ndarray]:
        with observed_sum_noise(sum_std, global_std) as seen:
            res = run(canary_in, noise, seed)
        return _score(res), np.concatenate(seen)

    def scores(canary_in: bool, noise: bool, n: int, seed: int) -> dict:
        seeds = np.random.SeedSequence(int(seed)).generate_state(int(n), dtype=np.uint32)
        out = [one(canary_in, noise, int(s)) for s in seeds]
        return {"score": np.array([o[0] for o in out]), "noise": np.array([o[1] for o in out])}

    return AuditCase(
        name=method,
        method=method,
        scores=scores,
        epsilon=eps,
        delta=delta,
        n_runs=n_runs,
        power_runs=power_runs(epsilon),
        mutant_runs=100,
        noise_std=float(rel.extra["sum_noise_std"]),
        epsilon_at_noise=lambda r: epsilon_with_noise(probe.dp_events, delta, r),
        description=(
            f"{N_CLIENTS} clients, {N_SAMPLED} sampled without replacement, 1 round, y = w x + b from zeros, "
            f"C_theta={CLIP}; canary client y=+{CANARY_Y:g} vs replace-one neighbour y=-{CANARY_Y:g}; "
            "score = sum of all released model parameters"
        ),
        info={
            **sigmas,
            "epsilon_paper": eps_paper,
            "clip": CLIP,
            "neighbouring": rel.neighbouring,
            "sampling": rel.sampling,
            "noise_multipliers": list(rel.noise_multipliers),
            "population": N_CLIENTS,
            "sample_size": N_SAMPLED,
            "k": 1 if method in ("dp_fedavg", "dp_fedprox", "dp_fedper") else K_CLUSTERS,
            "B": B_RR if method == "rr_cluster" else 0,
            "mutant_noise_scale": noise_scale,
            "why_not_gaussian": "client sampling: the released sum is a mixture of two Gaussians (canary sampled or "
            "not), so no statistic is one Gaussian with a fixed shift; the noise is measured "
            "instead (epsilon_audited_noise)",
        },
    )


def _factory(method: str):
    def factory(epsilon: float = 1.0, delta: float = 1e-5, n_runs: int = 100, noise_scale: float = 1.0) -> AuditCase:
        return _case(method, epsilon=epsilon, delta=delta, n_runs=n_runs, noise_scale=noise_scale)

    factory.__name__ = f"{method}_case"
    factory.__doc__ = f"The canary audit of {method} (module docstring)."
    return factory


METHODS = ("rr_cluster", "dp_ifca", "dp_fesem", "dp_fedcam", "dp_fedavg", "dp_fedprox", "dp_fedper")
CASES = {m: _factory(m) for m in METHODS}
