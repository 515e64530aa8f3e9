"""Audit case of DP-FedC (Li, Wang, Chi & Quek, IEEE IoT-J 2023): a canary sample.

Setting: 24 digits rows scaled to [0, 1] on 2 clients (n_0 = 10, n_1 = 14), k = 2, one round,
every client sampled (K = N), the run's public defaults otherwise: ``constants="public"`` (rho, mu_h
and eta from the clip bound and the client sizes), samples clipped to the public domain bound
sqrt(m) = 8, W^0 from the public ``uniform_box`` initialisation, Q1 = 10 H steps and Q2^1 = 11 W steps
with the minibatch gradient clipped to G, and the noise of eqs. (28)-(29) for an eps_bar whose
releases the accountant rates at the audited epsilon.

Neighbours are replace-one (the paper's Definition 1 and the relation of DP-FedC's releases): the
last row of client 0 is the canary or its replacement. With b = 50 >= n_i every round uses all of a
client's rows, so there is no subsampling amplification and the guarantee is that of the Gaussian
mechanism for any fixed value of the other, noise-free randomness. The audit therefore fixes that
randomness: W^0 is one public ``uniform_box`` draw shared by all runs and H^0 is the one-hot
nearest-centroid code of W^0 (``h_init="nearest"``), so the noise-free outputs without and with the
canary, A and B, are two fixed matrices.

The canary moves client 0's upload by the whole sensitivity 2 G Q2 / eta_0 of eq. (28). DP must
hold for every data set of the domain, so client 0's other rows are chosen for the audit: each is
the first initial centroid c_0, which its code reconstructs exactly, so it adds nothing to the
gradient. With v a unit vector orthogonal to every initial centroid (pixel 0, blank in every digit,
with the centroid span projected out), the canary is ``c_0 + s v`` and its replacement ``c_0 - s v``,
s = 0.999 sqrt(clip^2 - ||c_0||^2) (both within the clip). Both have the code of c_0 (their
projections on the centroids are equal), so client 0's gradients with the canary and with the
replacement are exact opposites, each clipped to G, at every one of the Q2 steps: the noise-free
uploads differ by 2 G Q2 / eta_0, the sensitivity (``shift_over_sensitivity`` = 1 in the record;
the digit rows used before reached 0.6). Client 1 holds 14 digits rows.

What is scored is what the adversary of the trust model sees. Under ``local`` trust the server
receives every client's noisy upload, so the statistic is client 0's upload U_0 (observed through
:mod:`fedclust.privacy.observe`), scored by the likelihood-ratio test between two isotropic
Gaussians centred at the noise-free uploads A_0 and B_0: ``||U_0 - A_0||^2 - ||U_0 - B_0||^2``. With
the noise off, U_0 equals A_0 or B_0 exactly, so the scores separate perfectly: the power check. The
score is linear in U_0, and U_0 is A_0 or B_0 plus Gaussian noise of client 0's std, so it is itself
a Gaussian statistic with one variance under both hypotheses: the case is audited tightly as well
(``gaussian=True``), and its privacy loss is that of client 0's release, the one accounted.

Measured noise: U_0 minus A_0 (or B_0) is client 0's noise itself, sigma_0 per entry as claimed.

Secure aggregation (case ``dp_fedc_secure_aggregation``): the same setting with
``trust_model="secure_aggregation"``. The server sees only the sum of the two uploads plus one
Gaussian whose std is the larger of the two clients' calibrated stds; client 0 (the smaller client,
so the smaller public eta_0 and the larger sensitivity and std) sets it, so the canary's client gets
exactly its calibrated noise multiplier and the same accounted epsilon. The server sees only the
released mean, which carries ``max_i sigma_i / K`` per entry, the claimed noise the measured-noise
audit checks; the score is the same test on the mean C, between the noise-free means A and B.

Mutant: DP-FedC sets its noise from eps_bar, not from a multiplier, so ``noise_scale`` picks the
eps_bar at which client 0's noise std is ``noise_scale`` times the calibrated one (found by
bisection on the run's own reported std); the accounted epsilon stays that of the calibrated run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from sklearn.datasets import load_digits

from fedclust.clustering import dp_fedc
from fedclust.clustering._common import public_centroids
from fedclust.privacy._search import log_bisect
from fedclust.privacy.accountants import epsilon as account
from fedclust.privacy.audit import AuditCase, epsilon_with_noise
from fedclust.privacy.observe import observe

SIZES = (10, 14)
K_CLUSTERS = 2
#: the canary's offset from the first centroid, as a share of the largest within the clip (module docstring)
CANARY_REACH = 0.999


@lru_cache(maxsize=1)
def audit_data() -> dict:
    """The audit setting: ``X`` (client 0: the first initial centroid, with the replacement in its last
    row; client 1: 14 digits rows / 16), ``client``, ``canary``, ``slot`` (that row), ``clip`` (the
    public default sqrt(m)) and ``W0`` (the public init)."""

    n = sum(SIZES)
    X = load_digits().data[:n] / 16.0
    assert not X[:, 0].any()
    client = np.repeat(np.arange(len(SIZES)), SIZES)
    m = X.shape[1]
    clip = dp_fedc.domain_clip(m)
    W0 = public_centroids(K_CLUSTERS, m, 0, "uniform_box", clip=clip)  # one public draw for every run
    Q, _ = np.linalg.qr(W0.T)
    v = np.zeros(m)
    v[0] = 1.0
    v -= Q @ (Q.T @ v)
    v /= np.linalg.norm(v)
    c0 = W0[0]
    s = CANARY_REACH * np.sqrt(clip**2 - c0 @ c0)
    slot = SIZES[0] - 1
    X[: SIZES[0]] = c0  # client 0's other rows: reconstructed exactly by their code, no gradient
    X[slot] = c0 - s * v  # the replacement row
    canary = c0 + s * v
    return {"X": X, "client": client, "canary": canary, "slot": slot, "clip": clip, "W0": W0}


def neighbours(with_canary: bool) -> tuple[np.ndarray, np.ndarray]:
    """(X, client): the audit data with the canary in client 0's last row, or its replacement."""
    d = audit_data()
    X = d["X"]
    if with_canary:
        X = X.copy()
        X[d["slot"]] = d["canary"]
    return X, d["client"]


@dataclass(frozen=True)
class _DPFedCRuns:
    """The runs of the DP-FedC audit: :func:`fedclust.clustering.dp_fedc.run` with the keyword
    ``settings`` at the calibrated ``eps_bar`` (or without noise)."""

    settings: dict
    eps_bar: float

    def run(self, X, client, seed, noise, eb=None):
        """One run at ``eb`` (default the calibrated eps_bar); the noise-off run is the same mechanism
        (constants, clip, init, sampling) without the Gaussian."""
        eb = self.eps_bar if eb is None else eb
        return dp_fedc.run(X, client, K_CLUSTERS, seed=seed, eps_bar=eb if noise else None, **self.settings)


def _client0_upload(runs: _DPFedCRuns, X, client, seed, noise, eb=None) -> np.ndarray:
    """Client 0's first upload, as the server receives it under local trust."""
    with observe(dp_fedc.UPLOADS) as seen:
        runs.run(X, client, seed, noise, eb)
    ids, uploads = next((ids, u) for ids, u in seen if (ids == 0).any())
    return uploads[int(np.flatnonzero(ids == 0)[0])]


def _released_mean(runs: _DPFedCRuns, X, client, seed, noise, eb=None) -> np.ndarray:
    """The released mean of the uploads (the new centroids)."""
    return runs.run(X, client, seed, noise, eb).centroids


#: what the server of each trust model sees of a run: client 0's own upload (local), the mean (secure aggregation)
SEEN = {"local": _client0_upload, "secure_aggregation": _released_mean}


@dataclass(frozen=True)
class _DPFedCScores:
    """The audit statistic: ``||C - A||^2 - ||C - B||^2`` of what the server sees (``SEEN``), C, with
    A and B its noise-free values without and with the canary; runs at ``eps_bar_run``."""

    runs: _DPFedCRuns
    eps_bar_run: float
    trust_model: str
    A: np.ndarray
    B: np.ndarray

    def seen(self, X, client, seed, noise, eb=None) -> np.ndarray:
        """What the server of the trust model sees of one run."""
        return SEEN[self.trust_model](self.runs, X, client, seed, noise, eb)

    def score(self, C) -> float:
        """The statistic of one release."""
        return float(np.square(C - self.A).sum() - np.square(C - self.B).sum())

    def scores(self, canary_in: bool, noise: bool, n: int, seed: int) -> dict:
        """The statistic and the noise of ``n`` runs on one side of the neighbouring pair."""
        Xn, cl = neighbours(canary_in)
        clean = self.B if canary_in else self.A
        seeds = np.random.SeedSequence(int(seed)).generate_state(int(n), dtype=np.uint32)
        Cs = np.array([self.seen(Xn, cl, int(s), noise, self.eps_bar_run) for s in seeds])
        sc = np.array([self.score(C) for C in Cs])
        return {"score": sc, "gaussian": sc, "noise": (Cs - clean).reshape(len(seeds), -1)}


def _scored_noise_std(probe, trust_model: str) -> float:
    """The claimed noise std per entry of what is scored: client 0's upload carries sigma_0 (local);
    the released mean carries max_i sigma_i / K (secure aggregation: one draw on the sum)."""
    if trust_model == "secure_aggregation":
        mean_std = float(probe.info["round_sigma_sum"][0]) / len(SIZES)
        assert mean_std == float(np.max(probe.info["round_sigma"][0])) / len(SIZES)
        return mean_std
    return float(probe.info["round_sigma"][0][0])


def _dp_fedc_case(
    epsilon: float = 1.0,
    delta: float = 1e-5,
    G: float = 0.03,
    rounds: int = 1,
    n_runs: int = 1000,
    noise_scale: float = 1.0,
    trust_model: str = "local",
) -> AuditCase:
    d = audit_data()
    sizes = np.bincount(d["client"])
    clip, W0 = d["clip"], d["W0"]  # the run's public defaults (features in [0, 1])
    sched = dict(rounds=rounds, clients_per_round=len(SIZES), q2="diminishing", Qhat=10, b=50)
    eps_bar = dp_fedc.eps_bar_for_budget(epsilon, delta, sizes, **sched)
    settings = dict(
        sched,
        G=G,
        delta=delta,
        clip=clip,
        constants="public",
        init_centroids=W0,
        h_init="nearest",
        trust_model=trust_model,
        blas_threads=None,
    )
    runs = _DPFedCRuns(settings=settings, eps_bar=eps_bar)
    probe = runs.run(*neighbours(True), 0, True)
    eps = account(probe.dp_events, delta)
    sigma0 = float(probe.info["round_sigma"][0][0])
    eb_run = (
        eps_bar
        if noise_scale == 1.0
        else _eps_bar_for_sigma(
            lambda eb: float(runs.run(*neighbours(True), 0, True, eb).info["round_sigma"][0][0]), noise_scale * sigma0
        )
    )
    A = SEEN[trust_model](runs, *neighbours(False), 0, False)
    B = SEEN[trust_model](runs, *neighbours(True), 0, False)
    shift = float(np.linalg.norm(B - A)) * (1 if trust_model == "local" else len(SIZES))
    stat = _DPFedCScores(runs=runs, eps_bar_run=eb_run, trust_model=trust_model, A=A, B=B)
    Q2 = int(probe.history["Q2"][0])
    eta0 = float(probe.info["alpha_2"]) * dp_fedc.public_lambda(sizes, K_CLUSTERS)[0]  # client 0's eta
    sens = 2.0 * G * Q2 / eta0  # eq. (28)
    sigma = float(probe.info["round_sigma"][0][0])  # client 0's noise std
    mean_std = _scored_noise_std(probe, trust_model)  # the claimed noise of what is scored
    name = "dp_fedc" if trust_model == "local" else f"dp_fedc_{trust_model}"
    return AuditCase(
        name=name,
        method="dp_fedc",
        scores=stat.scores,
        epsilon=eps,
        delta=delta,
        n_runs=n_runs,
        gaussian=True,
        power_runs=100,
        mutant_runs=100,
        noise_std=mean_std,
        epsilon_at_noise=lambda r: epsilon_with_noise(probe.dp_events, delta, r),
        description=(
            f"24 digits rows on 2 clients (10, 14), k={K_CLUSTERS}, {rounds} round(s), K=N, public constants, "
            f"clip={clip:g}, G={G}, trust model {trust_model}; replace-one canary in client 0 (opposite gradients: "
            "a shift of the whole sensitivity); score = ||C-A||^2 - ||C-B||^2 on what the server sees (local: "
            "client 0's upload; secure aggregation: the mean), A, B: its noise-free values without / with the canary"
        ),
        info={
            "eps_bar": eps_bar,
            "G": G,
            "clip": clip,
            "rounds": rounds,
            "sigma": sigma,
            "sensitivity": sens,
            "noise_multiplier": sigma / sens,
            "shift_over_sensitivity": shift / sens,
            "mutant_noise_scale": noise_scale,
            "eps_bar_run": eb_run,
            "trust_model": trust_model,
            "noise_std_scored": mean_std,
        },
    )


def _eps_bar_for_sigma(sigma_of, target: float) -> float:
    """The eps_bar whose noise std ``sigma_of(eps_bar)`` is ``target`` (the std decreases in eps_bar),
    to 1e-6 relative, on the safe side (std at most ``target``): the privacy layer's log bisection."""
    return log_bisect(lambda eb: sigma_of(eb) > target, 1e-6)


def _dp_fedc_secure_aggregation_case(
    epsilon: float = 1.0,
    delta: float = 1e-5,
    G: float = 0.03,
    rounds: int = 1,
    n_runs: int = 1000,
    noise_scale: float = 1.0,
) -> AuditCase:
    """The DP-FedC case under secure aggregation (module docstring)."""
    return _dp_fedc_case(epsilon, delta, G, rounds, n_runs, noise_scale, trust_model="secure_aggregation")


CASES = {"dp_fedc": _dp_fedc_case, "dp_fedc_secure_aggregation": _dp_fedc_secure_aggregation_case}
