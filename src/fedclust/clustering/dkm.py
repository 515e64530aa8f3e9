"""DKM: coreset-based distributed k-means (Balcan, Ehrlich, Liang), a baseline of DP-FedC's Table I
(our reimplementation).

The method, our choices and measured numbers: ``docs/methods/dkm.md``.

Reference: the DKM baseline of "Differentially Private Federated Clustering Over Non-IID Data"
(Li, Wang, Chi, Quek, IEEE IoT-J 2023), reconstructed from Balcan,
Ehrlich, Liang, "Distributed k-means and k-median clustering on general topologies" (NeurIPS 2013).
The paper gives no details; every choice below is ours. The k-means (squared distance) variant.

Balcan et al.'s distributed coreset, run once per round over the K sampled clients:

1. each sampled client i computes a local constant-factor solution B_i (k centres): k-means++
   seeding and ``local_iters`` Lloyd iterations on its own data, and uploads its local cost
   cost_i = sum_{x in P_i} d^2(x, B_i);
2. the server splits a coreset budget t_c over the clients in proportion to cost_i, t_i;
3. client i draws t_i samples with probability d^2(x, B_i) / cost_i (with replacement) and uploads
   them together with its centres B_i and their cluster sizes |P_b|;
4. importance weights: a sampled point q gets w_q = sum_i cost_i / (t_c d^2(q, B_i)); a centre b gets
   |P_b| - sum_{q in P_b, sampled} w_q (clamped at 0). The server computes these weights from the
   uploaded quantities (post-processing), so they need no noise of their own;
5. the server keeps the latest coreset portion of every client seen so far and runs weighted
   k-means on their union (best of Lloyd warm-started at the previous centres and
   ``server_restarts`` weighted k-means++ restarts) to get the new global centres.

Noisy variant: samples are clipped to a public L2 norm ``clip``; every uploaded
quantity gets i.i.d. Gaussian noise with std z times its per-item add/remove sensitivity (a sampled
point or a centre: clip; a count: 1; a local cost: 4 clip^2). This is NOT a DP mechanism: the coreset points are private samples chosen by their own distances (a data-dependent
selection; whether a sample is uploaded depends on itself), and a local k-means solution can jump
with one sample. A noisy run therefore records a ``non_dp_release`` naming these steps and reports
epsilon = inf; the noise multiplier stays available to reproduce the paper's protocol
(``info["dp_exact"] = False``).

Initialisation: W^0 is k random data rows only in non-private runs (``init="data"``); with noise it
defaults to public centres (``init="uniform_box"`` in ``init_domain``, pulled into the clip ball);
with server points (``server_rows`` held out of the clients, or ``server_data``) ``init="server"``,
the default then, starts from k-means on them (public).

Vectorized over clients: local k-means++ and Lloyd run on the padded (K, n_max, m) data with batched matmuls,
and the importance sampling of all clients is one ``searchsorted`` on a global cumulative sum.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import ClassVar

import numpy as np

from fedclust.clustering import _common as common
from fedclust.clustering.base import ClusteringResult
from fedclust.clustering.common_options import BaselineNoiseOptions, KMeansInitOptions, SampledRounds
from fedclust.options import param
from fedclust.privacy.events import GaussianRelease, non_dp_release
from fedclust.rng import stream

logger = logging.getLogger(__name__)


def _pick(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of ``weights`` (K, n) with probability proportional to the row."""
    cs = np.cumsum(weights, axis=1)
    u = rng.random(weights.shape[0]) * cs[:, -1]
    return np.minimum((cs <= u[:, None]).sum(1), weights.shape[1] - 1)


def local_kmeans(Xp: np.ndarray, mask: np.ndarray, k: int, iters: int, rng: np.random.Generator):
    """Local k-means (k-means++ seeding then ``iters`` Lloyd steps) on every sampled client at once:
    Balcan et al.'s local constant-factor approximation. ``Xp`` (K, n_max, m), ``mask`` (K, n_max).
    Returns the local centres B (K, k, m), squared distances to them (K, n_max, 0 on padding) and
    cluster sizes (K, k)."""
    K, nmax, m = Xp.shape
    fmask = mask.astype(np.float64)
    B = np.empty((K, k, m))
    ar = np.arange(K)
    xsq = np.square(Xp).sum(-1)

    def d2_to(c):  # (K, m) one centre per client -> (K, n_max) squared distances
        return np.maximum(xsq - 2.0 * np.einsum("knm,km->kn", Xp, c) + np.square(c).sum(-1)[:, None], 0.0) * fmask

    B[:, 0] = Xp[ar, _pick(fmask, rng)]
    d2min = d2_to(B[:, 0])
    for j in range(1, k):  # k-means++ over the k seeds (sequential by nature), all clients at once
        w = np.where(d2min.sum(1, keepdims=True) > 0, d2min, fmask)
        B[:, j] = Xp[ar, _pick(w, rng)]
        d2min = np.minimum(d2min, d2_to(B[:, j]))
    for it in range(iters + 1):
        d2 = common.sq_dists(Xp, B, xsq)  # (K, n_max, k): every client's points to its own centres
        lab = d2.argmin(-1)
        onehot = (lab[..., None] == np.arange(k)) * mask[..., None]  # (K, n_max, k)
        cnt = onehot.sum(1).astype(np.float64)
        if it == iters:
            break
        sums = onehot.swapaxes(1, 2).astype(np.float64) @ Xp
        B = np.where(cnt[..., None] > 0, sums / np.maximum(cnt, 1)[..., None], B)
    dmin = np.take_along_axis(d2, lab[..., None], -1)[..., 0] * fmask
    return B, dmin, cnt


@dataclasses.dataclass(frozen=True)
class DKMOptions(KMeansInitOptions, BaselineNoiseOptions, SampledRounds):
    """DKM's options: the shared groups of :mod:`fedclust.clustering.common_options` (the run is
    not DP whatever the noise: epsilon = inf, see the module docstring) and the coreset settings."""

    GROUP: ClassVar[str] = "dkm"
    coreset_size: int | None = param(
        None, "int", count=True, doc="t_c points sampled per round (None: 20 k)", loop="server"
    )
    local_iters: int = param(5, "int", count=True, doc="local Lloyd iterations", loop="client")
    server_iters: int = param(10, "int", count=True, doc="weighted Lloyd iterations on the server", loop="server")
    server_restarts: int = param(1, "int", count=True, doc="weighted k-means++ restarts on the server", loop="server")


def _coreset_budget(cost: np.ndarray, t_c: int) -> np.ndarray:
    """Coreset points per client, proportional to the local costs (largest remainders), ``t_c`` in all."""
    share = t_c * cost / float(cost.sum())
    ti = np.floor(share).astype(np.int64)
    rest = t_c - ti.sum()
    if rest > 0:
        ti[np.argsort(-(share - ti), kind="stable")[:rest]] += 1
    return ti


def _coreset_rows(dmin: np.ndarray, ti: np.ndarray, sizes: np.ndarray, rng_mb) -> tuple[np.ndarray, np.ndarray]:
    """Importance sampling of all clients at once (a global cumulative sum of d^2 per client):
    ``(owner, pos)``, the client slot and row of every coreset point."""
    cs = np.cumsum(dmin, axis=1)  # (K, n_max)
    owner = np.repeat(np.arange(len(ti)), ti)
    u = rng_mb.random(owner.size) * cs[owner, -1]
    pos = np.minimum((cs[owner] <= u[:, None]).sum(1), sizes[owner] - 1)
    return owner, pos


def _server_weights(pts, Bn, szn, owner, total: float, t_c: int) -> tuple[np.ndarray, np.ndarray]:
    """The server's weights of the coreset points and of the local centres, from the uploaded (noisy)
    quantities only."""
    d2q = np.maximum(np.square(pts[:, None, :] - Bn[owner]).sum(-1), 0.0)  # (t_c, k)
    bq = d2q.argmin(1)
    wq = total / (t_c * np.maximum(d2q[np.arange(owner.size), bq], 1e-12))
    wb = szn.copy()
    np.subtract.at(wb, (owner, bq), wq)
    return wq, np.maximum(wb, 0.0)


def _dkm_events(o: DKMOptions, private: bool, init, z: float) -> list:
    """The run's releases: the initial centres' and, in a run with noise, the coreset's (not DP)."""
    events = common.init_release(private, init, o.init_centroids, "dkm initial centres")
    if private:
        events.append(
            non_dp_release(
                "dkm coreset: uploaded points are private samples chosen by their own distances and the local "
                "k-means centres have no bounded sensitivity (data-dependent selection)"
            )
        )
        events.append(
            GaussianRelease(
                noise_multipliers=(z, z, z, z),
                count=o.rounds,
                sampling="none",
                neighbouring="add_remove",
                unit="sample",
                label="dkm local costs, coreset points, centres, sizes (noise per item; not DP as a whole)",
            )
        )
    return events


@common.with_blas_limit
def run(X, client, k: int, options: DKMOptions | None = None, *, y=None, progress=None, **settings):
    """Run DKM (:class:`DKMOptions`; keyword ``settings`` override ``options``): every round one
    distributed coreset from ``clients_per_round`` sampled clients.

    The arguments are every method's (:mod:`fedclust.clustering.common_options`); ``blas_threads``
    (keyword, added by the decorator): BLAS threads during the run (default 1).
    """
    o = DKMOptions.build(options, settings)
    R, seed, local_iters = o.rounds, o.seed, o.local_iters
    t_c = 20 * k if o.coreset_size is None else o.coreset_size
    X, N, K, z, private, clip, lay, Xc, init, C, server = common.baseline_setup(X, client, k, o)
    n, m = X.shape
    std_pt = z * clip if private else 0.0
    std_cnt = z if private else 0.0
    std_cost = z * 4.0 * clip**2 if private else 0.0
    rng_s, rng_mb, rng_server = stream(seed, "sampling"), stream(seed, "minibatch"), stream(seed, "server")
    rng_noise = stream(seed, "noise") if private else None
    hist = common.new_history(y)
    log_round = common.round_logger("dkm", hist, X, y, R, progress, logger)
    uploaded = 0
    store_pts: dict[int, np.ndarray] = {}
    store_w: dict[int, np.ndarray] = {}
    for t in range(1, R + 1):
        S = common.sample_clients(rng_s, N, K)
        Xp, mask = common.padded_data(lay, Xc, S)
        B, dmin, sizes = local_kmeans(Xp, mask, k, local_iters, rng_mb)
        cost = common.noisy(dmin.sum(1), std_cost, rng_noise)  # (K,) local costs (uploaded)
        cost = np.maximum(cost, 1e-12)
        total = float(cost.sum())
        owner, pos = _coreset_rows(dmin, _coreset_budget(cost, t_c), lay.sizes[S], rng_mb)
        pts = common.noisy(Xp[owner, pos], std_pt, rng_noise)
        Bn = common.noisy(B, std_pt, rng_noise)
        szn = common.noisy(sizes, std_cnt, rng_noise)
        uploaded += K + owner.size * m + K * k * (m + 1)
        wq, wb = _server_weights(pts, Bn, szn, owner, total, t_c)
        for j, i in enumerate(S):  # bookkeeping of the server's store (dict per client), O(K)
            sel = owner == j
            store_pts[int(i)] = np.vstack([pts[sel], Bn[j]])
            store_w[int(i)] = np.concatenate([wq[sel], wb[j]])
        P = np.vstack(list(store_pts.values()))
        w = np.concatenate(list(store_w.values()))
        C = common.server_kmeans(P, w, C, rng_server, o.server_iters, o.server_restarts)
        log_round(t, C)
    labels, _ = common.nearest(X, C)
    events = _dkm_events(o, private, init, z)
    info = {
        "noise_multiplier": z,
        "clip": clip,
        "clients_per_round": K,
        "n_clients": N,
        "coreset_size": t_c,
        "local_iters": local_iters,
        "dp_exact": False if private else None,
        "init": "given" if o.init_centroids is not None else init,
        **server.info(),
    }
    return ClusteringResult(
        labels=labels, centroids=C, history=hist, dp_events=events, uploaded_reals=int(uploaded), info=info
    )
