"""FKM: federated k-means (federated Lloyd), the first baseline of DP-FedC's Table I.

The method, our choices and measured numbers: ``docs/methods/fkm.md``.

Reference: the FKM baseline of "Differentially Private Federated Clustering Over Non-IID Data"
(Li, Wang, Chi, Quek, IEEE IoT-J 2023), reconstructed from "Secure
federated clustering" (SecFC), which runs exact Lloyd iterations (eqs. (9)-(10) of the DP-FedC
paper) over the clients' data. This is *our* reimplementation.

One round t:

1. The server samples K of the N clients uniformly without replacement and broadcasts the
   centroids C (k x m).
2. Every sampled client i assigns each local sample to its nearest centroid (eq. 9) and computes the
   per-cluster sums ``s_il = sum_{x in cluster l} x`` and counts ``c_il``.
3. Optional Gaussian DP: each sample is first clipped (for the sums; the assignment uses the raw
   sample) to L2 norm ``clip``; a client's upload ``(s_i, c_i)`` then has L2 sensitivity
   ``sqrt(clip^2 + 1)`` under adding/removing one sample. One release carries
   ``N(0, (z * sqrt(clip^2 + 1))^2)`` noise per entry (noise multiplier ``z`` from the calibration
   stage), added where the trust model says: at every client (``local``, the paper's baseline: the
   sum carries K draws) or once on the sum (``secure_aggregation``, ``central``: sqrt(K) times less
   noise for the same epsilon).
4. The server sets ``C_l = sum_i s_il / sum_i c_il`` (eq. 10) where the noisy count passes the
   threshold of :mod:`fedclust.clustering.lloyd` and keeps the old ``C_l`` elsewhere; with
   ``count_threshold = 0`` and ``project = False`` this is the paper's rule (count >= 1).

Initialisation (initialisation is a release). Because of the rule in step 4, W^0 can be published
verbatim, so it must not be private data in a private run. A non-private run starts from k random
data rows (the paper's choice, ``init="data"``); a private run by default from ``"uniform_box"``
(uniform in the public feature domain ``init_domain``, pulled into the clip ball), which reads no
data; after round 1 the old centroid is itself a released (noisy) value. A private run with
``init="data"`` is kept as the labelled paper-literal variant: it records a ``non_dp_release`` and
reports epsilon = inf.

Server data. When the server holds public points (``server_rows``: rows of X held out of the
clients' data; ``server_data``: a separate array), ``init="server"`` (the default then) starts from
k-means on them (:func:`fedclust.clustering._common.server_centroids`). The points are public by
declaration, so W^0 costs no privacy, and held-out rows take no part in any client's upload; the
run is still scored on every row of X. ``info["server_data"]`` says which: ``"holdout"``,
``"array"`` or None.

All clients of a round are processed together: assignments for every sample in one distance
computation (reused by the next round), and the sum of the clients' per-cluster sums as one sparse
segment sum; the sum of the clients' independent noises is drawn in one go (the server only uses
the sum of the uploads). There is no Python loop over clients.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, ClassVar

import numpy as np

from fedclust.clustering._common import (
    check_clients_per_round,
    check_init,
    client_rows,
    clip_data,
    init_release,
    initial_centroids,
    nearest,
    server_split,
)
from fedclust.clustering.base import ClusteringResult, check_inputs
from fedclust.clustering.common_options import KMeansInitOptions, NoiseOptions, ReleaseOptions, SampledRounds
from fedclust.clustering.lloyd import LloydRelease, cluster_totals, kmeans_release, lloyd_step, pair_sensitivity
from fedclust.metrics import clustering_scores
from fedclust.options import param
from fedclust.privacy.events import GaussianRelease
from fedclust.privacy.release import sum_noise_std
from fedclust.progress import report as report_round
from fedclust.rng import stream

logger = logging.getLogger(__name__)


def aggregate_round(Xc, client, labels, C, chosen, n_clients, release: LloydRelease, rng) -> np.ndarray:
    """One server update from the uploads of the ``chosen`` clients (steps 2-4 of the round).

    ``labels`` is the nearest-centroid assignment of every sample under the broadcast ``C``. The
    server only ever uses the *sum* of the K uploads, so the per-cluster totals are one sparse
    segment sum over the chosen clients' samples, released under the run's trust model by the
    shared Lloyd step (:func:`fedclust.clustering.lloyd.lloyd_step`).
    """
    if len(chosen) == n_clients:  # full participation: no selection copy
        lab, Xsel = labels, Xc
    else:
        in_round = np.zeros(n_clients, dtype=bool)
        in_round[chosen] = True
        idx = np.flatnonzero(in_round[client])
        lab, Xsel = labels[idx], Xc[idx]
    return lloyd_step(Xsel, lab, C, release, len(chosen), rng)


@dataclasses.dataclass(frozen=True)
class FKMOptions(ReleaseOptions, KMeansInitOptions, NoiseOptions, SampledRounds):
    """FKM's options: rounds (default 20) of ``clients_per_round`` clients (default: all), the
    noise (``noise_multiplier`` z: std ``z * sqrt(clip^2 + 1)`` on every uploaded entry; ``clip``
    required when z > 0), W^0 and the trust model with its post-processing
    (:mod:`fedclust.clustering.common_options`). ``count_threshold = 0`` and ``project = False``
    give the paper's rule (count >= 1); both only matter in a private run."""

    GROUP: ClassVar[str] = "fkm"
    rounds: int = param(20, "int", count=True, doc="communication rounds R", loop="round")
    clients_per_round: int | None = param(None, "int", count=True, doc="K clients sampled per round; None = all")

    def problems(self, where: str) -> list[str]:
        found = super().problems(where)
        if self.noise_multiplier > 0 and self.clip is None:
            found.append(f"{where}.clip must be > 0 when noise_multiplier > 0 (a public L2 bound on every sample)")
        return found


@dataclasses.dataclass
class Plan:
    """A run's public choices before its first round (``W^0``, the release, the clients per round)
    and, for the simulation backend, the clients' rows (``Xc`` clipped, ``client`` their owners)."""

    o: FKMOptions
    k: int
    m: int
    n_clients: int
    K: int
    init: str
    C0: np.ndarray
    release: LloydRelease
    std: float
    server: Any
    Xc: np.ndarray
    client: np.ndarray

    @property
    def private(self) -> bool:
        return self.o.noise_multiplier > 0


def plan_run(X, client, k: int, o: FKMOptions) -> Plan:
    """Check the inputs and fix the run's public choices (the server's side before any round)."""
    # the server's public points; rows held out for it are no client data (X stays whole for scoring)
    server = server_split(X, k, o.server_rows, o.server_data)
    Xcl, ccl, n_clients = client_rows(X, client, server)
    K = check_clients_per_round(o.clients_per_round, n_clients)
    private = o.noise_multiplier > 0
    init = check_init(o.init, private, server.points is not None)
    C = initial_centroids(
        Xcl, k, o.seed, o.init_centroids, init=init, clip=o.clip, domain=o.init_domain, server_points=server.points
    )
    std = o.noise_multiplier * (pair_sensitivity(o.clip) if private else 0.0)
    release = kmeans_release(
        std, trust_model=o.trust_model, count_threshold=o.count_threshold, project=o.project, clip=o.clip, method="fkm"
    )
    return Plan(o, k, X.shape[1], n_clients, K, init, C, release, std, server, clip_data(Xcl, o.clip), ccl)


def client_statistic(X_raw: np.ndarray, Xc: np.ndarray, C: np.ndarray) -> dict[str, np.ndarray]:
    """One client's upload before noise (steps 2-3 of a round): its raw samples assigned to the nearest
    broadcast centre (eq. 9), the per-cluster sums of its clipped samples and the counts."""
    labels, _ = nearest(X_raw, C)
    sums, counts = cluster_totals(Xc, labels, C.shape[0])
    return {"sums": sums, "counts": counts}


def run_rounds(X: np.ndarray, plan: Plan, update, y=None, progress=None):
    """The rounds of a run: the server samples the round's clients, ``update(C, chosen, labels)``
    returns the next centres from their released totals (``labels``: the clients' rows' nearest
    broadcast centre, which the simulation backend reuses), and the round is scored. Returns the final
    centres, every row's label and the history."""
    n = X.shape[0]
    r_sampling = stream(plan.o.seed, "sampling")
    history: dict[str, list[float]] = {"objective": []}
    if y is not None:
        history["ACC"], history["NMI"] = [], []
    C = plan.C0
    # Clients assign their raw samples to the nearest broadcast centroid (eq. 9); the assignment of
    # every sample under the current C is computed once per round and serves both the evaluation of
    # round t (every row, the server's too) and the local step of round t+1 (the clients' rows).
    x_sq = np.einsum("ij,ij->i", X, X)
    lab_all, _ = nearest(X, C, x_sq)
    rounds = plan.o.rounds
    for t in range(1, rounds + 1):
        chosen = np.sort(r_sampling.choice(plan.n_clients, size=plan.K, replace=False))
        lab_cl = lab_all if plan.server.clients is None else lab_all[plan.server.clients]
        C = update(C, chosen, lab_cl)
        lab_all, d2 = nearest(X, C, x_sq)
        history["objective"].append(float(d2.sum() / n))
        if y is not None:
            sc = clustering_scores(y, lab_all)
            history["ACC"].append(sc["ACC"])
            history["NMI"].append(sc["NMI"])
        logger.info("fkm round %d/%d objective %.5g", t, rounds, history["objective"][-1])
        report_round("round", t, rounds)
        if progress is not None:
            progress(t, history)
    return C, lab_all, history


def result_of(plan: Plan, C, labels, history, noise_multiplier: float | None = None) -> ClusteringResult:
    """The run's :class:`ClusteringResult` (``noise_multiplier``: the one to account, when it differs
    from the planned one)."""
    o = plan.o
    events = init_release(plan.private, plan.init, o.init_centroids, "initial centroids")
    if plan.private:
        events.append(
            GaussianRelease(
                noise_multipliers=(o.noise_multiplier if noise_multiplier is None else noise_multiplier,),
                count=o.rounds,
                sampling="none",  # conservative: a sample may be uploaded in every round
                neighbouring="add_remove",
                unit="sample",
                label="fkm per-cluster sums and counts",
                extra={"trust_model": o.trust_model},
            )
        )
    return ClusteringResult(
        labels=labels,
        centroids=C,
        history=history,
        dp_events=events,
        uploaded_reals=int(o.rounds * plan.K * plan.k * (plan.m + 1)),
        info={
            "noise_std": plan.std,
            "aggregate_noise_std": sum_noise_std(plan.std, plan.K, o.trust_model),
            "trust_model": o.trust_model,
            "clip": o.clip,
            "clients_per_round": plan.K,
            "n_clients": plan.n_clients,
            "init": "given" if o.init_centroids is not None else plan.init,
            **plan.server.info(),
        },
    )


def run(X, client, k: int, options: FKMOptions | None = None, *, y=None, progress=None, **settings):
    """Run federated Lloyd (:class:`FKMOptions`; keyword ``settings`` override ``options``); the
    arguments are every method's (:mod:`fedclust.clustering.common_options`). The simulation
    backend: a round's totals are computed here over the chosen clients' rows and released under
    the trust model."""
    o = FKMOptions.build(options, settings)
    X, client, _ = check_inputs(X, client, k)
    plan = plan_run(X, client, k, o)
    r_noise = stream(o.seed, "noise")

    def update(C, chosen, lab_cl):
        return aggregate_round(plan.Xc, plan.client, lab_cl, C, chosen, plan.n_clients, plan.release, r_noise)

    C, labels, history = run_rounds(X, plan, update, y, progress)
    return result_of(plan, C, labels, history)
