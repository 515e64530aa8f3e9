"""Helpers shared by DP-FedC and its Table I baselines (FZKM, DK++, DKM).

Everything here is plain numpy and vectorized over clients: client sampling, the client-sorted
"segment" layout of the data, nearest-centroid assignment, weighted Lloyd on a small point set,
(weighted) k-means++ seeding, per-round metric logging and the Gaussian-noise calibration of the
baselines.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import NamedTuple

import numpy as np

from fedclust.clustering.base import check_inputs
from fedclust.clustering.common_options import KMEANS_INITS, MECHANISMS
from fedclust.clustering.lloyd import lloyd_step, masked_means
from fedclust.metrics import clustering_scores
from fedclust.options import check_int, check_number
from fedclust.privacy import mechanisms as mech
from fedclust.privacy.events import non_dp_release
from fedclust.privacy.mechanisms import clip_rows
from fedclust.progress import report as report_round
from fedclust.rng import stream
from fedclust.threads import thread_limits


# ----------------------------------------------------------------------------------------------
# parameter checks
# ----------------------------------------------------------------------------------------------
def check_clients_per_round(clients_per_round, n_clients: int) -> int:
    if clients_per_round is None:
        return n_clients
    return check_int("clients_per_round", clients_per_round, 1, n_clients)


def check_all_clients_nonempty(sizes: np.ndarray) -> None:
    if (sizes == 0).any():
        empty = np.flatnonzero(sizes == 0)[:5].tolist()
        raise ValueError(
            f"client: every client id 0..{sizes.size - 1} must hold at least one sample; "
            f"clients {empty} hold none (renumber the clients)"
        )


# ----------------------------------------------------------------------------------------------
# layout, initialisation, sampling
# ----------------------------------------------------------------------------------------------
class SegmentLayout:
    """Samples sorted by client so that client i owns the contiguous rows ``offsets[i]:offsets[i+1]``.

    ``order[j]`` is the original index of sorted row j; ``inverse`` maps back.
    """

    def __init__(self, client: np.ndarray, n_clients: int):
        self.order = np.argsort(client, kind="stable")
        self.inverse = np.empty_like(self.order)
        self.inverse[self.order] = np.arange(self.order.size)
        self.sizes = np.bincount(client, minlength=n_clients).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.n_clients = n_clients

    def rows_of(self, clients: np.ndarray) -> np.ndarray:
        """Sorted-row indices of all samples of ``clients`` (concatenated, in client order)."""
        sz = self.sizes[clients]
        start = np.repeat(self.offsets[clients], sz)
        within = np.arange(sz.sum()) - np.repeat(np.cumsum(sz) - sz, sz)
        return start + within


#: The ways of choosing W^0 (:data:`~fedclust.clustering.common_options.KMEANS_INITS`):
#: ``"data"``: k distinct data rows (the papers' choice; not private); ``"uniform_box"``: uniform in
#: the public data domain ``[low, high]^m`` (``domain``), then scaled into the clip ball when a clip
#: is given; ``"uniform_ball"``: uniform in the L2 ball of radius ``clip`` (or ``radius``);
#: ``"server"`` (the k-means family only): k-means on the server's public points. The last three
#: never look at the clients' data, so they release nothing.
#:
#: The public data domain assumed by ``"uniform_box"`` when none is given: the default min-max scaling.
DEFAULT_DOMAIN = (0.0, 1.0)
#: k-means++ restarts and the most Lloyd iterations of the server's k-means behind ``init="server"``
SERVER_INIT_RESTARTS, SERVER_INIT_ITERS = 10, 100


def default_init(private: bool, has_server: bool = False) -> str:
    """The initialisation a run uses when none is named: the server's points when it holds some,
    else data rows only when the run is not private."""
    if has_server:
        return "server"
    return "uniform_box" if private else "data"


def check_init(init, private: bool, has_server: bool = False) -> str:
    """``init`` validated (None = :func:`default_init`); ``"server"`` needs the server's points."""
    if init is None:
        return default_init(private, has_server)
    if init not in KMEANS_INITS:
        raise ValueError(f"init must be one of {KMEANS_INITS} (or null for the default), got {init!r}")
    if init == "server" and not has_server:
        raise ValueError("init='server' needs the server's public points (server_rows or server_data)")
    return init


def init_is_private_release(init: str, init_centroids=None) -> bool:
    """True when the initialisation reads private data without a DP mechanism (``"data"``)."""
    return init_centroids is None and init == "data"


def public_centroids(
    k: int, m: int, seed: int, init: str, *, clip: float | None = None, domain=None, radius: float | None = None
) -> np.ndarray:
    """k data-independent initial centroids drawn from stream ``"init"`` (no data is read).

    ``"uniform_box"``: uniform in ``[low, high]^m`` (``domain``, default ``DEFAULT_DOMAIN``); a point
    whose norm exceeds ``clip`` is scaled onto the clip ball, so it lies in the clipped data domain.
    ``"uniform_ball"``: uniform in the L2 ball of radius ``radius`` (default ``clip``).
    """
    rng = stream(seed, "init")
    if init == "uniform_box":
        low, high = DEFAULT_DOMAIN if domain is None else (float(domain[0]), float(domain[1]))
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"init_domain must be [low, high] with low < high, got {domain!r}")
        C = rng.uniform(low, high, size=(k, m))
        if clip is not None:
            norms = np.linalg.norm(C, axis=1, keepdims=True)
            C = C * np.minimum(1.0, clip / np.maximum(norms, 1e-300))
        return C
    if init == "uniform_ball":
        r = radius if radius is not None else clip
        if r is None or not r > 0:
            raise ValueError("init='uniform_ball' needs a radius (or the clip bound) > 0")
        g = rng.standard_normal((k, m))
        g /= np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300)
        return g * (r * rng.uniform(size=(k, 1)) ** (1.0 / m))
    raise ValueError(f"public_centroids takes 'uniform_box' or 'uniform_ball', got {init!r}")


def server_centroids(points: np.ndarray, k: int, seed: int, clip: float | None = None) -> np.ndarray:
    """W^0 of ``init="server"``: k-means on the server's public ``points``, the lowest-cost of
    ``SERVER_INIT_RESTARTS`` k-means++ seedings each refined by Lloyd (at most ``SERVER_INIT_ITERS``
    iterations, until it stops moving), all drawn from stream ``"init"``. With a ``clip`` the points
    are first clipped as the clients clip their samples, so W^0 lives where the released means do.
    The points are public: this reads no client data and costs no privacy."""
    P = clip_data(np.asarray(points, dtype=np.float64), clip)
    return server_kmeans(
        P, np.ones(P.shape[0]), None, stream(seed, "init"), SERVER_INIT_ITERS, n_init=SERVER_INIT_RESTARTS, k=k
    )


def initial_centroids(
    X: np.ndarray,
    k: int,
    seed: int,
    init_centroids=None,
    *,
    init: str = "data",
    clip: float | None = None,
    domain=None,
    server_points: np.ndarray | None = None,
) -> np.ndarray:
    """The shared W^0.

    ``init_centroids`` if given (the caller vouches that they are public); else by ``init``:
    ``"data"``: k distinct random rows of ``X`` (the clients' data) drawn from stream ``"init"`` (not
    private: a private run that uses it must report epsilon = inf, see
    :func:`init_is_private_release`); ``"uniform_box"`` / ``"uniform_ball"``: :func:`public_centroids`;
    ``"server"``: :func:`server_centroids` on ``server_points``.
    """
    m = X.shape[1]
    if init_centroids is None:
        if init == "data":
            idx = stream(seed, "init").choice(X.shape[0], size=k, replace=False)
            return X[idx].astype(np.float64, copy=True)
        if init == "server":
            if server_points is None:
                raise ValueError("init='server' needs the server's public points (server_rows or server_data)")
            return server_centroids(server_points, k, seed, clip)
        return public_centroids(k, m, seed, check_init(init, True), clip=clip, domain=domain)
    C = np.array(init_centroids, dtype=np.float64)
    if C.shape != (k, m):
        raise ValueError(f"init_centroids must have shape (k={k}, m={m}), got {C.shape}")
    if not np.isfinite(C).all():
        raise ValueError("init_centroids contains NaN or infinite values")
    return C


class ServerSplit(NamedTuple):
    """The server's public points and what is left to the clients.

    ``points``: the server's (n_s, m) points, or None; ``clients``: the boolean mask of the rows of
    ``X`` that are client data (None: all of them); ``source``: ``"holdout"`` (rows of ``X`` held out
    of the clients), ``"array"`` (a separate public array) or None."""

    points: np.ndarray | None
    clients: np.ndarray | None
    source: str | None

    def info(self) -> dict:
        """The run info's account of the server's data."""
        return {"server_data": self.source, "n_server_points": 0 if self.points is None else int(self.points.shape[0])}


def server_split(X: np.ndarray, k: int, server_rows=None, server_data=None) -> ServerSplit:
    """The server's points from ``server_rows`` (indices of rows of ``X``, which then are no client
    data) or ``server_data`` (a separate (n_s, m) array); at least k of them."""
    n, m = X.shape
    if server_rows is not None and server_data is not None:
        raise ValueError("give server_rows or server_data, not both")
    if server_rows is not None:
        rows = np.asarray(server_rows)
        if rows.ndim != 1 or rows.size == 0 or not np.issubdtype(rows.dtype, np.integer):
            raise ValueError("server_rows must be a non-empty 1-D array of row indices")
        if rows.min() < 0 or rows.max() >= n:
            raise ValueError(f"server_rows must index rows 0..{n - 1} of X")
        clients = np.ones(n, dtype=bool)
        clients[rows] = False
        if not clients.any():
            raise ValueError("server_rows hold every row of X: no client data is left")
        split = ServerSplit(X[~clients], clients, "holdout")
    elif server_data is not None:
        P = np.asarray(server_data, dtype=np.float64)
        if P.ndim != 2 or P.shape[1] != m:
            raise ValueError(f"server_data must be (n_s, {m}), got shape {P.shape}")
        if not np.isfinite(P).all():
            raise ValueError("server_data contains NaN or infinite values")
        split = ServerSplit(P, None, "array")
    else:
        return ServerSplit(None, None, None)
    if split.points.shape[0] < k:
        raise ValueError(f"the server holds {split.points.shape[0]} points, fewer than k={k}")
    return split


def client_rows(X: np.ndarray, client: np.ndarray, split: ServerSplit) -> tuple[np.ndarray, np.ndarray, int]:
    """``(X, client, n_clients)`` of the clients' data: without held-out rows the inputs themselves;
    with them the other rows, the clients renumbered 0..N-1 in order (a client left without a sample
    is dropped)."""
    if split.clients is None:
        return X, client, int(client.max()) + 1 if client.size else 0
    _, renumbered = np.unique(client[split.clients], return_inverse=True)
    return X[split.clients], renumbered, int(renumbered.max()) + 1


def sample_clients(rng: np.random.Generator, n_clients: int, K: int) -> np.ndarray:
    """PCP: K of N clients uniformly without replacement (sorted), from stream ``"sampling"``."""
    return np.sort(rng.choice(n_clients, size=K, replace=False))


def clip_data(X: np.ndarray, clip: float | None) -> np.ndarray:
    """Every row scaled to L2 norm <= clip (no-op when clip is None)."""
    if clip is None:
        return X
    return clip_rows(X, clip)[0]


# ----------------------------------------------------------------------------------------------
# k-means building blocks
# ----------------------------------------------------------------------------------------------
def sq_dists(X: np.ndarray, C: np.ndarray, x_sq: np.ndarray | None = None) -> np.ndarray:
    """(..., n, k) squared Euclidean distances between the rows of X (..., n, m) and of C (..., k, m),
    clamped at 0; leading axes batch (e.g. one set of centres per client). ``x_sq`` = the squared row
    norms of X (..., n), when the caller already has them."""
    if x_sq is None:
        x_sq = (X * X).sum(-1)
    d2 = x_sq[..., :, None] - 2.0 * X @ C.swapaxes(-1, -2) + (C * C).sum(-1)[..., None, :]
    return np.maximum(d2, 0.0, out=d2)


def nearest(X: np.ndarray, C: np.ndarray, x_sq: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Nearest-centroid index of every row and its squared distance (``x_sq``: the squared row norms
    of X, to skip recomputing them every round)."""
    d2 = sq_dists(X, C, x_sq)
    lab = d2.argmin(1)
    return lab, d2[np.arange(X.shape[0]), lab]


def weighted_kmeanspp(P: np.ndarray, w: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding on points ``P`` with non-negative weights ``w`` (D^2 weighting times w)."""
    w = np.maximum(np.asarray(w, dtype=np.float64), 0.0)
    if w.sum() <= 0:
        w = np.ones_like(w)
    first = rng.choice(P.shape[0], p=w / w.sum())
    C = [P[first]]
    d2 = ((P - P[first]) ** 2).sum(1)
    for _ in range(1, k):
        pr = w * d2
        s = pr.sum()
        j = rng.choice(P.shape[0], p=pr / s) if s > 0 else rng.choice(P.shape[0], p=w / w.sum())
        C.append(P[j])
        d2 = np.minimum(d2, ((P - P[j]) ** 2).sum(1))
    return np.array(C)


def weighted_lloyd(P: np.ndarray, w: np.ndarray, C0: np.ndarray, iters: int = 20) -> np.ndarray:
    """Weighted Lloyd iterations on a small point set, warm-started at ``C0``; a centre that gets
    no (positive) weight keeps its previous position."""
    C = np.array(C0, dtype=np.float64, copy=True)
    k = C.shape[0]
    w = np.maximum(np.asarray(w, dtype=np.float64), 0.0)
    for _ in range(iters):
        lab, _ = nearest(P, C)
        onehot = (lab[None, :] == np.arange(k)[:, None]) * w[None, :]  # (k, |P|) weighted
        mass = onehot.sum(1)
        newC = masked_means(C, onehot @ P, mass, mass > 0)
        if np.allclose(newC, C, rtol=0, atol=1e-12):
            C = newC
            break
        C = newC
    return C


# ----------------------------------------------------------------------------------------------
# logging and DP calibration
# ----------------------------------------------------------------------------------------------
def new_history(y, extra=()) -> dict[str, list[float]]:
    h: dict[str, list[float]] = {"objective": []}
    if y is not None:
        h["ACC"], h["NMI"] = [], []
    for name in extra:
        h[name] = []
    return h


def round_logger(name: str, history: dict, X: np.ndarray, y, rounds: int, progress, log=None):
    """``log_round(t, C)``: the end of a baseline's round t, with centres C: the objective (mean squared
    distance to the nearest centre), ACC/NMI when ``y`` is given, a log line, ``progress(t, history)``."""
    log = log or logging.getLogger(f"fedclust.clustering.{name}")

    def log_round(t: int, C: np.ndarray) -> None:
        lab, d2 = nearest(X, C)
        history["objective"].append(float(d2.sum() / X.shape[0]))
        log_scores(history, y, lab)
        log.info("%s round %d/%d objective %.5g", name, t, rounds, history["objective"][-1])
        report_round("round", t, rounds)
        if progress is not None:
            progress(t, history)

    return log_round


def init_release(private: bool, init: str, init_centroids, what: str) -> list:
    """The release of a private run whose W^0 is k private data rows (``init="data"``): one
    ``non_dp_release`` naming ``what`` (epsilon = inf); empty otherwise."""
    if private and init_is_private_release(init, init_centroids):
        return [non_dp_release(f"{what} are k private data rows (init='data')")]
    return []


def log_scores(history: dict, y, labels: np.ndarray) -> None:
    if y is not None:
        sc = clustering_scores(y, labels)
        history["ACC"].append(sc["ACC"])
        history["NMI"].append(sc["NMI"])


def baseline_noise_multiplier(noise_multiplier: float, epsilon, delta: float, mechanism: str) -> float:
    """The noise multiplier z (noise std / L2 sensitivity) of a baseline's per-round release.

    Either given directly (``noise_multiplier``) or calibrated from a per-round ``(epsilon, delta)``
    with the classical or the analytic Gaussian mechanism. 0 = no DP.
    """
    z = check_number("noise_multiplier", noise_multiplier, ge=0)
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    if epsilon is None or (isinstance(epsilon, float) and math.isinf(epsilon)):
        return z
    if z > 0:
        raise ValueError("give either noise_multiplier or epsilon, not both")
    eps = check_number("epsilon", epsilon, gt=0)
    check_number("delta", delta, gt=0)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")

    fn = mech.classical_sigma if mechanism == "classical" else mech.analytic_sigma
    return float(fn(eps, delta, 1.0))


def data_clip(X: np.ndarray, clip, private: bool) -> float | None:
    """The L2 bound on every sample used by a baseline (None when not private and not given).

    A private run must name a public ``clip``: the largest row norm of X would be
    a sensitivity read off the private data (one extreme sample would set its own noise scale), so
    it is refused with a ValueError rather than guessed. ``X`` is kept in the signature for callers.
    """
    if clip is not None:
        return check_number("clip", clip, gt=0)
    if not private:
        return None
    raise ValueError(
        "clip must be a public L2 bound > 0 on every sample in a private run (e.g. sqrt(m) for "
        "features in [0, 1]); it is not derived from the data, whose largest row norm is private"
    )


class BaselineSetup(NamedTuple):
    X: np.ndarray  # the checked data (float64), every row (the server's too): what the run is scored on
    n_clients: int  # N
    K: int  # clients sampled per round
    z: float  # noise multiplier of a round's release (0 = not private)
    private: bool
    clip: float | None  # public L2 bound on every sample (None when not private and not given)
    lay: SegmentLayout  # the clients' rows sorted by client
    Xc: np.ndarray  # the clients' clipped rows in client order
    init: str  # how W^0 was drawn
    C0: np.ndarray  # (k, m) initial centres
    server: ServerSplit  # the server's public points, if any


def baseline_setup(X, client, k: int, o) -> BaselineSetup:
    """The common start of the sampled-client k-means baselines (DK++, DKM, FZKM), from their
    options ``o`` (:class:`~fedclust.clustering.common_options.SampledRounds`,
    :class:`~fedclust.clustering.common_options.BaselineNoiseOptions` and
    :class:`~fedclust.clustering.common_options.KMeansInitOptions`): the checked inputs, the server's
    points (:func:`server_split`; held-out rows are no client data), the clients per round, the
    noise multiplier (:func:`baseline_noise_multiplier`), the public clip (:func:`data_clip`), the
    clients' clipped rows in client order (every client must have a sample) and the initial centres."""
    X, client, _ = check_inputs(X, client, k)
    server = server_split(X, k, o.server_rows, o.server_data)
    Xcl, ccl, n_clients = client_rows(X, client, server)
    K = check_clients_per_round(o.clients_per_round, n_clients)
    z = baseline_noise_multiplier(o.noise_multiplier, o.epsilon, o.delta, o.mechanism)
    private = z > 0
    clip = data_clip(Xcl, o.clip, private)
    lay = SegmentLayout(ccl, n_clients)
    check_all_clients_nonempty(lay.sizes)
    Xc = clip_data(Xcl, clip)[lay.order]
    init = check_init(o.init, private, server.points is not None)
    C0 = initial_centroids(
        Xcl, k, o.seed, o.init_centroids, init=init, clip=clip, domain=o.init_domain, server_points=server.points
    )
    return BaselineSetup(X, n_clients, K, z, private, clip, lay, Xc, init, C0, server)


# ----------------------------------------------------------------------------------------------
# segment / padded layouts of the sampled clients
# ----------------------------------------------------------------------------------------------
def padded_data(lay: SegmentLayout, Xs: np.ndarray, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The padded client layout: the clients' samples (rows of ``Xs``, sorted by client) as one
    (K, n_max, m) array, zero on padding, and the (K, n_max) validity mask."""
    sz = lay.sizes[clients]
    nmax = int(sz.max())
    pos = np.arange(nmax)[None, :]
    mask = pos < sz[:, None]
    rows = lay.offsets[clients][:, None] + np.where(mask, pos, 0)
    return Xs[rows] * mask[..., None], mask


def noisy(x: np.ndarray, std: float, rng: np.random.Generator | None) -> np.ndarray:
    """x + N(0, std^2) per entry (x itself when std == 0)."""
    if std <= 0 or rng is None:
        return x
    return x + rng.normal(0.0, std, size=x.shape)


def lloyd_round(Xc: np.ndarray, lay: SegmentLayout, S: np.ndarray, C: np.ndarray, release, rng_noise) -> np.ndarray:
    """One federated Lloyd round (the FKM step) over the sampled clients ``S``: the shared Lloyd
    step of :mod:`fedclust.clustering.lloyd` on their rows (``release``: a
    :class:`~fedclust.clustering.lloyd.LloydRelease`)."""
    Xr = Xc[lay.rows_of(S)]
    lab, _ = nearest(Xr, C)
    return lloyd_step(Xr, lab, C, release, S.size, rng_noise)


def weighted_cost(P: np.ndarray, w: np.ndarray, C: np.ndarray) -> float:
    return float((np.maximum(w, 0.0) * nearest(P, C)[1]).sum())


def server_kmeans(
    P: np.ndarray,
    w: np.ndarray,
    C_prev: np.ndarray | None,
    rng: np.random.Generator,
    iters: int = 20,
    n_init: int = 2,
    k: int | None = None,
) -> np.ndarray:
    """Weighted k-means on a small point set P (the server's step of FZKM / DK++ / DKM): the best
    (lowest weighted cost) of Lloyd warm-started at ``C_prev`` and ``n_init`` weighted k-means++
    restarts (``k`` is needed only when ``C_prev`` is None)."""
    k = C_prev.shape[0] if C_prev is not None else int(k)
    starts = [C_prev] if C_prev is not None else []
    starts += [weighted_kmeanspp(P, w, k, rng) for _ in range(n_init)]
    best, best_cost = None, np.inf
    for C0 in starts:
        C = weighted_lloyd(P, w, C0, iters)
        c = weighted_cost(P, w, C)
        if c < best_cost:
            best, best_cost = C, c
    return best


def blas_limit(n: int | None):
    """Context limiting BLAS/OpenMP (and torch, if imported) threads to ``n`` (no-op for None); see
    :func:`fedclust.threads.thread_limits`. The federated rounds are many small products, which
    multi-threaded OpenBLAS runs several times slower on a busy CPU."""
    return thread_limits(n, name="blas_threads")


def with_blas_limit(fn):
    """Decorator: adds a keyword ``blas_threads`` (default 1; None = leave BLAS alone) to ``run``."""

    @functools.wraps(fn)
    def wrapper(*args, blas_threads: int | None = 1, **kwargs):
        with blas_limit(blas_threads):
            return fn(*args, **kwargs)

    return wrapper
