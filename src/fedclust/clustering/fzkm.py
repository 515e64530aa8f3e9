"""FZKM: federated fuzzy c-means, a baseline of DP-FedC's Table I (our reimplementation).

The method, our choices and measured numbers: ``docs/methods/fzkm.md``.

Reference: the FZKM baseline of "Differentially Private Federated Clustering Over Non-IID Data"
(Li, Wang, Chi, Quek, IEEE IoT-J 2023), reconstructed from Stallmann &
Wilbik, "Towards federated clustering: a federated fuzzy c-means algorithm (FFCM)" (arXiv
2201.07316): clients run fuzzy c-means locally, and the server obtains the global centres by
k-means on the received local centres. The paper gives no details; every choice below is ours.

One round t:

1. the server samples K of the N clients (uniformly, without replacement) and broadcasts the global
   centres C (k x m);
2. each sampled client runs ``local_iters`` fuzzy c-means iterations on its data, initialised at
   C: memberships ``u_jl = 1 / sum_l' (d_jl / d_jl')^(2/(f-1))`` (fuzzifier f; by default
   ``1 + 1/sqrt(m)``, :func:`default_fuzzifier`; ``fuzzifier=2`` is the usual FCM), then the
   per-cluster statistics ``S_il = sum_j u_jl^f x_j`` and ``M_il = sum_j u_jl^f``; with
   ``local_iters > 1`` the next iteration uses the client's own centres S_il / M_il;
3. optional DP: samples are clipped to a public L2 norm ``clip``; with
   ``local_iters = 1`` the memberships come from the public C and the sample itself, and as
   sum_l u_jl^(2f) <= 1, one sample changes (S_i, M_i) by at most sqrt(clip^2 + 1) in L2
   (add/remove), so i.i.d. N(0, (z sqrt(clip^2+1))^2) noise on every uploaded entry is a Gaussian
   mechanism with noise multiplier z. With ``local_iters > 1`` the last memberships depend on the
   client's other samples (through its own centres), so one sample can move every other sample's
   contribution: the sensitivity is not bounded and the run is NOT DP; it records a
   ``non_dp_release`` and reports epsilon = inf (``info["dp_exact"]``);
4. (``trust_model="local"``, the paper's protocol: every client adds its noise and the server sees
   every upload) the server forms the K*k local centres ``V_il = S_il / max(M_il, t)`` with weights
   ``M_il`` where ``M_il >= t`` and 0 elsewhere (``t = max(1, count_threshold * sigma)``, sigma the
   noise std of one upload; t = 1 without noise), projected onto the clip ball when ``project``
   (both post-processing of the uploads), and runs weighted k-means on them: the lowest-cost of
   Lloyd warm-started at the previous C and ``server_restarts`` weighted k-means++ restarts
   (``server_iters`` iterations each).
   Under ``secure_aggregation`` or ``central`` the server sees only the sums over the clients,
   ``sum_i S_il`` and ``sum_i M_il``, noised once (:mod:`fedclust.privacy.release`); its update is
   then the fuzzy c-means centre step ``C_l = sum_i S_il / sum_i M_il`` with the count
   post-processing of :mod:`fedclust.clustering.lloyd` (there are no local centres to cluster).

Initialisation (a release too): the shared W^0 is k random data rows only in non-private runs (the
paper's choice, ``init="data"``); a private run starts from public centres (``init="uniform_box"``,
uniform in the public domain ``init_domain`` and pulled into the clip ball), and a private run with
``init="data"`` releases private rows and reports epsilon = inf. With server points
(``server_rows`` held out of the clients, or ``server_data``) ``init="server"``, the default then,
starts from k-means on them (public, no privacy cost). The server step only ever sees the noisy
uploads and its own previous (public) centres, so no raw row can reach the output.

Why the fuzzifier is not 2 by default: with f = 2 on 64-dimensional digits the memberships are
nearly uniform, every centre drifts to the grand mean, and the run sits at 0.26-0.42 ACC with or
without noise (f = 2 stays available).

Labels: nearest global centre (the argmax membership of FCM with these centres gives the same).
Vectorized over clients: the sampled clients' data sit in one padded (K, n_max, m) array and every
FCM iteration is two batched matmuls.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import ClassVar

import numpy as np

from fedclust.clustering._common import (
    baseline_setup,
    clip_data,
    init_is_private_release,
    init_release,
    nearest,
    new_history,
    noisy,
    padded_data,
    round_logger,
    sample_clients,
    server_kmeans,
    sq_dists,
    with_blas_limit,
)
from fedclust.clustering.base import ClusteringResult
from fedclust.clustering.common_options import BaselineNoiseOptions, KMeansInitOptions, ReleaseOptions, SampledRounds
from fedclust.clustering.lloyd import kmeans_release, min_count, pair_sensitivity, release_totals, update_centres
from fedclust.options import param
from fedclust.privacy.events import GaussianRelease, non_dp_release
from fedclust.rng import stream

logger = logging.getLogger(__name__)


def default_fuzzifier(m: int) -> float:
    """The fuzzifier of a run that names none: ``1 + 1 / sqrt(m)``, a rule on the public dimension m.

    Memberships follow ratios of squared distances raised to ``1 / (f - 1)``. In m dimensions the
    squared distances of a sample to different centres differ relatively by about ``1 / sqrt(m)``
    (they concentrate), so at a fixed f the memberships flatten towards ``1 / k`` as m grows and
    every centre is drawn to the grand mean. An exponent ``1 / (f - 1) = sqrt(m)`` keeps them about
    as crisp as f = 2 (the common choice) keeps them in one dimension: f = 2 at m = 1, 1.125 at
    m = 64, towards hard k-means as m grows."""
    return 1.0 + 1.0 / math.sqrt(max(int(m), 1))


def fcm_memberships(d2: np.ndarray, fuzzifier: float) -> np.ndarray:
    """FCM memberships from squared distances (..., k): u_l proportional to d2_l^(-1/(f-1)).
    A zero distance gets all the membership (split equally among ties). Computed from the ratios
    ``d2_l / min_l' d2_l'`` (at most 1 after the power), which neither overflows nor divides by 0
    for a fuzzifier near 1."""
    zero = d2 <= 1e-300
    dmin = np.maximum(d2.min(-1, keepdims=True), 1e-300)
    inv = (np.maximum(d2, 1e-300) / dmin) ** (-1.0 / (fuzzifier - 1.0))
    anyzero = zero.any(-1, keepdims=True)
    inv = np.where(anyzero, zero.astype(np.float64), inv)
    return inv / inv.sum(-1, keepdims=True)


def local_fcm_stats(Xp: np.ndarray, mask: np.ndarray, C: np.ndarray, fuzzifier: float, iters: int):
    """Local FCM for all sampled clients at once. ``Xp`` (K, n_max, m) padded data, ``mask``
    (K, n_max). Returns S (K, k, m) and M (K, k) of the last iteration."""
    K = Xp.shape[0]
    V = np.broadcast_to(C, (K,) + C.shape)
    xsq = np.square(Xp).sum(-1)  # (K, n_max)
    for _ in range(iters):
        d2 = sq_dists(Xp, V, xsq)  # (K, n_max, k)
        U = fcm_memberships(d2, fuzzifier) ** fuzzifier * mask[..., None]  # (K, n_max, k)
        S = U.swapaxes(1, 2) @ Xp  # (K, k, m)
        M = U.sum(1)  # (K, k)
        V = np.where(M[..., None] > 1e-12, S / np.maximum(M, 1e-12)[..., None], V)
    return S, M


@dataclasses.dataclass(frozen=True)
class FZKMOptions(ReleaseOptions, KMeansInitOptions, BaselineNoiseOptions, SampledRounds):
    """FZKM's options: the shared groups of :mod:`fedclust.clustering.common_options` (noise std
    ``z * sqrt(clip^2 + 1)`` per uploaded entry, or ``epsilon`` per round) and the fuzzy c-means
    settings. Under ``trust_model="local"`` (the paper's protocol: noisy uploads, server k-means on
    the local centres) a local centre whose noisy mass is below the count threshold gets no weight
    and (``project``) every local centre is projected onto the clip ball; under
    ``secure_aggregation``/``central`` the server takes a fuzzy c-means step on the summed
    statistics. ``fuzzifier=None``: :func:`default_fuzzifier` (``2.0``: the usual FCM)."""

    GROUP: ClassVar[str] = "fzkm"
    fuzzifier: float | None = param(
        None, "float", gt=1, doc="f > 1; None: 1 + 1/sqrt(m), a rule on the dimension (2 = the usual FCM)"
    )
    local_iters: int = param(1, "int", count=True, doc="local FCM iterations (> 1 is not DP)", loop="client")
    server_iters: int = param(20, "int", count=True, doc="weighted Lloyd iterations on the server", loop="server")
    server_restarts: int = param(2, "int", count=True, doc="weighted k-means++ restarts on the server", loop="server")


def _fzkm_events(o: FZKMOptions, private: bool, init, z: float) -> list:
    """The run's releases: the initial centres', the fuzzy sums and masses of every round, and a
    non-DP record when the local iterations break the sensitivity bound."""
    R, local_iters, trust_model = o.rounds, o.local_iters, o.trust_model
    events = init_release(private, init, o.init_centroids, "fzkm initial centres")
    if private and local_iters > 1:
        events.append(
            non_dp_release(
                f"fzkm local_iters={local_iters} > 1: the uploaded fuzzy sums use memberships computed from the "
                "client's own centres, so one sample moves the others' contributions (unbounded sensitivity)"
            )
        )
    if private:
        events.append(
            GaussianRelease(
                noise_multipliers=(z,),
                count=R,
                sampling="none",
                neighbouring="add_remove",
                unit="sample",
                label="fzkm fuzzy sums and masses (conservative: every round counted)",
                extra={"trust_model": trust_model},
            )
        )
    return events


@with_blas_limit
def run(X, client, k: int, options: FZKMOptions | None = None, *, y=None, progress=None, **settings):
    """Run FZKM (:class:`FZKMOptions`; keyword ``settings`` override ``options``).

    The arguments are every method's (:mod:`fedclust.clustering.common_options`); ``blas_threads``
    (keyword, added by the decorator): BLAS threads during the run (default 1).
    """
    o = FZKMOptions.build(options, settings)
    R, seed, local_iters, trust_model = o.rounds, o.seed, o.local_iters, o.trust_model
    X, N, K, z, private, clip, lay, Xc, init, C, server = baseline_setup(X, client, k, o)
    n, m = X.shape
    fuzzifier = default_fuzzifier(m) if o.fuzzifier is None else float(o.fuzzifier)
    std = z * pair_sensitivity(clip) if private else 0.0
    release = kmeans_release(
        std, trust_model=trust_model, count_threshold=o.count_threshold, project=o.project, clip=clip, method="fzkm"
    )
    # local: one client's upload is one release; a local centre counts when its noisy mass passes this
    # (1 without noise, the rule of a Lloyd step), post-processing of the released masses
    local_min_mass = min_count(release, 1)

    rng_s = stream(seed, "sampling")
    rng_server = stream(seed, "server")
    rng_noise = stream(seed, "noise") if private else None
    hist = new_history(y)
    log_round = round_logger("fzkm", hist, X, y, R, progress, logger)
    uploaded = 0
    for t in range(1, R + 1):
        S = sample_clients(rng_s, N, K)
        Xp, mask = padded_data(lay, Xc, S)
        Ssum, M = local_fcm_stats(Xp, mask, C, fuzzifier, local_iters)
        uploaded += K * k * (m + 1)
        if trust_model == "local":
            Ssum = noisy(Ssum, std, rng_noise)
            M = noisy(M, std, rng_noise)
            V = (Ssum / np.maximum(M, local_min_mass)[..., None]).reshape(K * k, m)
            if release.project:  # post-processing: every true local centre lies in the clip ball
                V = clip_data(V, clip)
            w = np.where(M >= local_min_mass, M, 0.0).ravel()
            C = server_kmeans(V, w, C, rng_server, o.server_iters, o.server_restarts)
        else:
            tot, mass = release_totals(Ssum.sum(0), M.sum(0), release, K, rng_noise)
            C = update_centres(C, tot, mass, release, K)

        log_round(t, C)

    labels, _ = nearest(X, C)
    events = _fzkm_events(o, private, init, z)
    info = {
        "noise_multiplier": z,
        "noise_std": std,
        "trust_model": trust_model,
        "clip": clip,
        "clients_per_round": K,
        "n_clients": N,
        "fuzzifier": fuzzifier,
        "local_iters": local_iters,
        "dp_exact": bool(private and local_iters == 1 and not init_is_private_release(init, o.init_centroids)),
        "init": "given" if o.init_centroids is not None else init,
        **server.info(),
    }
    return ClusteringResult(
        labels=labels, centroids=C, history=hist, dp_events=events, uploaded_reals=int(uploaded), info=info
    )
