"""DK++: distributed k-means++ (k-means|| seeding, then distributed Lloyd), a baseline of DP-FedC's
Table I (our reimplementation).

The method, our choices and measured numbers: ``docs/methods/dk_pp.md``.

Reference: the DK++ baseline of "Differentially Private Federated Clustering Over Non-IID Data"
(Li, Wang, Chi, Quek, IEEE IoT-J 2023), reconstructed from Bahmani et al.,
"Scalable k-means++" (k-means||, VLDB 2012). The paper gives no details; every choice below is ours.

The R communication rounds are spent as:

1. ``seeding_rounds`` k-means|| rounds. The candidate set starts at the shared W^0 (the k initial
   centres). Each round the K sampled clients upload their local cost phi_i = sum_x d^2(x, Cand);
   then every sample x of these clients joins the candidates independently with probability
   min(1, ell d^2(x, Cand) / phi), phi = sum_i phi_i (ell = oversampling, default 2k), and the
   selected points are uploaded;
2. one weighting round: the sampled clients upload, for every candidate, how many of their samples
   are closest to it; the server reclusters the weighted candidates to k centres with weighted
   k-means++ and weighted Lloyd (best of 3 restarts);
3. the remaining rounds are federated Lloyd rounds (as FKM): per-cluster sums and counts.

Optional DP: samples are clipped to a public L2 norm ``clip``; every uploaded
quantity gets Gaussian noise with std z times its add/remove sensitivity: an uploaded sample
point clip, a local cost 4 clip^2, a count 1, a Lloyd (sums, counts) pair sqrt(clip^2 + 1). The
weighting and Lloyd rounds add it where the trust model says (``local``: at every client, as the
paper's baseline; ``secure_aggregation`` / ``central``: once on the sum, see
:mod:`fedclust.privacy.release`), and the Lloyd totals go through the count post-processing of
:mod:`fedclust.clustering.lloyd`.

What is DP. The weighting round (counts of samples per *public* candidate,
sensitivity 1) and the Lloyd rounds (sensitivity sqrt(clip^2 + 1)) are Gaussian mechanisms with
noise multiplier z. The k-means|| seeding is NOT: which samples are uploaded depends on the data
(a sample decides by itself whether it is released, and the number of released points gives it
away), and the distances to noisy candidates outside the clip ball are unbounded. A private run
with ``seeding_rounds > 0`` therefore records a ``non_dp_release`` naming the seeding and reports
epsilon = inf; ``seeding_rounds = 0`` (the candidates are the public W^0 alone) is the DP variant
(``info["dp_exact"]``). Rounds are counted conservatively (every round, ignoring client sampling)
in ``dp_events``.

Initialisation: W^0 is k random data rows only in non-private runs (``init="data"``); a private
run starts from public centres (``init="uniform_box"`` in ``init_domain``, pulled into the clip
ball), and ``init="data"`` in a private run reports epsilon = inf; with server points
(``server_rows`` held out of the clients, or ``server_data``) ``init="server"``, the default then,
starts from k-means on them (public, no privacy cost). The server's reclustering only
sees the candidates (public or noisy) and the noisy counts; a Lloyd cluster with no (noisy) mass
keeps its previous, already released centre, so no raw row reaches the output of a DP run.

Vectorized over clients: distances, selections and segment sums of all sampled clients at once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import ClassVar

import numpy as np

from fedclust.clustering._common import (
    baseline_setup,
    init_is_private_release,
    init_release,
    lloyd_round,
    nearest,
    new_history,
    noisy,
    round_logger,
    sample_clients,
    server_kmeans,
    with_blas_limit,
)
from fedclust.clustering.base import ClusteringResult
from fedclust.clustering.common_options import BaselineNoiseOptions, KMeansInitOptions, ReleaseOptions, SampledRounds
from fedclust.clustering.lloyd import kmeans_release, pair_sensitivity
from fedclust.options import param
from fedclust.privacy.events import GaussianRelease, non_dp_release
from fedclust.privacy.observe import report
from fedclust.privacy.release import release_sum
from fedclust.rng import stream

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DKPPOptions(ReleaseOptions, KMeansInitOptions, BaselineNoiseOptions, SampledRounds):
    """DK++'s options: the shared groups of :mod:`fedclust.clustering.common_options` (a private
    run is DP only with ``seeding_rounds = 0``; otherwise it reports epsilon = inf; ``init_centroids``
    are the initial candidate set) and the k-means|| seeding."""

    GROUP: ClassVar[str] = "dk_pp"
    seeding_rounds: int = param(
        5,
        "int",
        ge=0,
        doc="k-means|| rounds (5 in Bahmani et al.); a pipeline run's null: 5 (at most rounds - 2) without DP, "
        "0 (the DP variant) with DP",
        loop="round",
        conf_default=None,
    )
    oversampling: float | None = param(None, "float", gt=0, doc="ell > 0 points expected per seeding round (None: 2k)")
    recluster_iters: int = param(50, "int", count=True, doc="weighted Lloyd iterations on the candidates", conf=False)

    def problems(self, where: str) -> list[str]:
        found = super().problems(where)
        if self.rounds < self.seeding_rounds + 1:
            found.append(
                f"{where}.rounds must be >= seeding_rounds + 1 = {self.seeding_rounds + 1} (the seeding and "
                f"the weighting round), got {self.rounds}"
            )
        return found


@dataclasses.dataclass(frozen=True)
class _Rounds:
    """What every DK++ round reads: the clipped client-sorted data and layout, the number of clients
    ``N`` and per round ``K``, the noise multiplier ``z`` and clip of a private run, the trust model,
    the streams (client sampling, noise) and the round logger."""

    Xc: np.ndarray
    lay: object
    N: int
    K: int
    z: float
    clip: float
    private: bool
    trust_model: str
    rng_s: np.random.Generator
    rng_noise: np.random.Generator | None
    log_round: object


def _seeding(rd: _Rounds, cand: np.ndarray, rounds: int, ell: float, rng_mb) -> tuple[np.ndarray, int]:
    """1. The k-means|| seeding rounds: every sampled client uploads its noisy cost and the points it
    selects with probability ``ell d^2 / phi``; returns the candidates and the reals uploaded."""
    uploaded = 0
    for t in range(1, rounds + 1):
        S = sample_clients(rd.rng_s, rd.N, rd.K)
        rows = rd.lay.rows_of(S)
        slot = np.repeat(np.arange(rd.K), rd.lay.sizes[S])
        _, d2 = nearest(rd.Xc[rows], cand)
        phi_i = noisy(
            np.bincount(slot, weights=d2, minlength=rd.K), rd.z * 4.0 * rd.clip**2 if rd.private else 0.0, rd.rng_noise
        )
        phi = max(float(phi_i.sum()), 1e-300)
        pick = rng_mb.random(rows.size) < np.minimum(1.0, ell * d2 / phi)
        new = noisy(rd.Xc[rows[pick]], rd.z * rd.clip if rd.private else 0.0, rd.rng_noise)
        uploaded += rd.K + new.size
        cand = np.vstack([cand, new])
        rd.log_round(t, cand)
    return cand, uploaded


def _weighting(rd: _Rounds, cand: np.ndarray, o: DKPPOptions, k: int, t: int) -> tuple[np.ndarray, int]:
    """2. The weighting round (noisy candidate counts) and the server's reclustering of the weighted
    candidates into ``k`` centres; returns the centres and the reals uploaded."""
    S = sample_clients(rd.rng_s, rd.N, rd.K)
    rows = rd.lay.rows_of(S)
    slot = np.repeat(np.arange(rd.K), rd.lay.sizes[S])
    lab, _ = nearest(rd.Xc[rows], cand)
    counts = np.bincount(slot * cand.shape[0] + lab, minlength=rd.K * cand.shape[0]).astype(np.float64)
    counts = release_sum(
        counts.reshape(rd.K, -1).sum(0), rd.z if rd.private else 0.0, rd.K, rd.trust_model, rd.rng_noise
    )
    report("weights", counts)
    w = np.maximum(counts, 0.0)
    C = server_kmeans(cand, w, None, stream(o.seed, "server"), o.recluster_iters, n_init=3, k=k)
    rd.log_round(t, C)
    return C, rd.K * cand.shape[0]


def _dk_pp_events(o: DKPPOptions, private: bool, init, z: float) -> list:
    """The run's releases: the initial candidates', the seeding's (not DP), the counts' and the Lloyd rounds'."""
    R, seeding_rounds, trust_model = o.rounds, o.seeding_rounds, o.trust_model
    events = init_release(private, init, o.init_centroids, "dk_pp initial candidates")
    if not private:
        return events
    if seeding_rounds:
        events.append(
            non_dp_release(
                f"dk_pp k-means|| seeding ({seeding_rounds} rounds): the uploaded points are private samples "
                "selected by their own distances, a data-dependent selection with no bounded sensitivity"
            )
        )
    events.append(
        GaussianRelease(
            noise_multipliers=(z,),
            count=1,
            sampling="none",
            neighbouring="add_remove",
            unit="sample",
            label="dk_pp candidate counts",
            extra={"trust_model": trust_model},
        )
    )
    if R - seeding_rounds - 1 > 0:
        events.append(
            GaussianRelease(
                noise_multipliers=(z,),
                count=R - seeding_rounds - 1,
                sampling="none",
                neighbouring="add_remove",
                unit="sample",
                label="dk_pp Lloyd sums and counts",
                extra={"trust_model": trust_model},
            )
        )
    return events


@with_blas_limit
def run(X, client, k: int, options: DKPPOptions | None = None, *, y=None, progress=None, **settings):
    """Run DK++ (:class:`DKPPOptions`; keyword ``settings`` override ``options``): ``seeding_rounds``
    k-means|| rounds, one weighting round, then Lloyd rounds up to ``rounds``.

    The arguments are every method's (:mod:`fedclust.clustering.common_options`); ``blas_threads``
    (keyword, added by the decorator): BLAS threads during the run (default 1).

    ``history["objective"]`` is the mean squared distance to the current centres (during seeding:
    to the nearest candidate).
    """
    o = DKPPOptions.build(options, settings)
    R, seed, seeding_rounds, trust_model = o.rounds, o.seed, o.seeding_rounds, o.trust_model
    ell = float(2 * k if o.oversampling is None else o.oversampling)
    X, N, K, z, private, clip, lay, Xc, init, C0, server = baseline_setup(X, client, k, o)
    n, m = X.shape
    std_pair = z * pair_sensitivity(clip) if private else 0.0
    # the Lloyd rounds' release (checked here, before any round: the weighting round uses its trust model)
    release = kmeans_release(
        std_pair,
        trust_model=trust_model,
        count_threshold=o.count_threshold,
        project=o.project,
        clip=clip,
        method="dk_pp",
    )
    rng_s = stream(seed, "sampling")
    rng_mb = stream(seed, "minibatch")  # data-level random choices (which samples are selected)
    rng_noise = stream(seed, "noise") if private else None
    hist = new_history(y)
    log_round = round_logger("dk_pp", hist, X, y, R, progress, logger)
    rd = _Rounds(Xc, lay, N, K, z, clip, private, trust_model, rng_s, rng_noise, log_round)
    # 1. k-means|| seeding, 2. weighting round and reclustering, 3. federated Lloyd
    cand, uploaded = _seeding(rd, C0.copy(), seeding_rounds, ell, rng_mb)
    t = seeding_rounds + 1
    C, up = _weighting(rd, cand, o, k, t)
    uploaded += up
    while t < R:
        t += 1
        S = sample_clients(rng_s, N, K)
        C = lloyd_round(Xc, lay, S, C, release, rng_noise)
        uploaded += K * k * (m + 1)
        log_round(t, C)
    labels, _ = nearest(X, C)
    events = _dk_pp_events(o, private, init, z)
    dp_exact = seeding_rounds == 0 and not init_is_private_release(init, o.init_centroids)
    info = {
        "noise_multiplier": z,
        "clip": clip,
        "clients_per_round": K,
        "n_clients": N,
        "noise_std": std_pair,
        "count_noise_std": z if private else 0.0,
        "trust_model": trust_model,
        "n_candidates": int(cand.shape[0]),
        "oversampling": ell,
        "seeding_rounds": seeding_rounds,
        "dp_exact": bool(dp_exact) if private else None,
        "init": "given" if o.init_centroids is not None else init,
        **server.info(),
    }
    return ClusteringResult(
        labels=labels, centroids=C, history=hist, dp_events=events, uploaded_reals=int(uploaded), info=info
    )
