"""FedDP-KMeans: differentially private federated k-means with a server-side initialisation.

Reference: J. Scott, C. H. Lampert, D. Saulpic, "Differentially Private Federated k-Means Clustering
with Server-Side Data", ICML 2025. This is our reimplementation; ``docs/methods/fed_dp_kmeans.md``
gives the equations, our choices and the measured results.

The difficulty of private k-means is the start: Lloyd's steps only refine, and from a poor start
every noisy step wastes budget. The paper starts from a small data set that the server holds (public,
possibly out of distribution), lets the clients tell the server, privately, which of its points
look like theirs, and then spends what is left of the budget on one or two private Lloyd steps.
Every release is a sum over clients, noised once under secure aggregation.

Stages (each one private release of sums over all clients, sample-level DP, add/remove; every sample
clipped to the L2 ball of radius ``clip``):

1. **Projection** (``projection="dp_pca"``): the clients release ``M = sum_x x x^T``
   (sensitivity ``clip^2`` in Frobenius norm); the server takes the top-``n_components`` eigenvectors
   ``V`` of the noisy ``M`` and projects its own points, ``P_s = X_s V``. ``projection="none"``
   skips this release and works in the data space (``V = I``).
2. **Weighting**: each client maps every projected sample ``x V`` to its nearest projected server
   point and the clients release the histogram of those counts over the server points (sensitivity
   1). The server drops points whose noisy weight is below ``max(1, count_threshold * sigma)``,
   and runs weighted k-means (k-means++ seeding, ``server_restarts`` restarts) on the rest: k centres
   ``Cp`` in the projected space.
3. **Lift** (only with ``dp_pca``): each client assigns its samples to the nearest ``Cp`` (in the
   projected space) and the clients release per-cluster sums (sensitivity ``clip``) and counts
   (sensitivity 1); the centres in data space are ``sums / counts`` (a cluster whose count fails the
   threshold starts from ``Cp_l V^T``).
4. **Lloyd steps** (``steps``, 1 or 2 in the paper): federated Lloyd with released sums and counts,
   the count post-processing and the clip-ball projection of :mod:`fedclust.clustering.lloyd`.

Budget: every release is a Gaussian mechanism, and Gaussian mechanisms compose exactly in Gaussian
DP: a release of noise multiplier ``z_i`` costs ``mu_i^2 = 1 / z_i^2`` and the run costs
``mu^2 = sum_i mu_i^2``. A target ``(epsilon, delta)`` fixes ``mu``; ``shares`` splits ``mu^2`` between
the stages (within a sums-and-counts release, ``count_share`` of it goes to the counts), so that
``z_i = z / sqrt(share_i)`` with ``z`` the noise multiplier of a single release at the target. The
accountant (PLD by default) composes the same releases back to the target.

Without server data (``server_data`` absent), the initial candidates come from the clients too:
the projection stage also releases the sum of the samples and their count, and the server draws
``n_candidates`` points from the Gaussian with the released mean and second moment in the projected
space, then weights and clusters them exactly as it would its own points (everything the server
uses is a release or public, so this is DP as well).

Trust models (:mod:`fedclust.privacy.release`): ``secure_aggregation`` (default, the paper's),
``central``, or ``local`` (every client adds the full noise: sqrt(K) times more on the sums).

The paper's margin rule in stage 3 (a sample counts only when it is clearly nearer one centre than
the next) is left out: with all samples counted, the lift is one plain Lloyd step.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, ClassVar

import numpy as np

from fedclust.clustering._common import clip_data, nearest, new_history, round_logger, server_kmeans
from fedclust.clustering.base import ClusteringResult, check_inputs
from fedclust.clustering.common_options import ReleaseOptions
from fedclust.clustering.defaults import projection_rule, resolve_clip, weight_threshold
from fedclust.clustering.lloyd import LloydRelease, lloyd_step, min_count
from fedclust.options import param
from fedclust.privacy.accountants import calibrate_noise_multiplier, split_noise_multipliers
from fedclust.privacy.events import GaussianRelease
from fedclust.privacy.observe import report
from fedclust.privacy.release import check_trust_model, release_sum, sum_noise_std
from fedclust.rng import stream

logger = logging.getLogger(__name__)

PROJECTIONS = ("dp_pca", "server_pca", "none")
#: Default split of the run's Gaussian-DP budget (mu^2) between the stages.
DEFAULT_SHARES = {"projection": 0.1, "weighting": 0.1, "lift": 0.3, "steps": 0.5}
DEFAULT_COUNT_SHARE = 0.3


def release_projection(projection: str | None, has_server_data: bool) -> str:
    """The projection as far as the releases go: ``dp_pca`` when chosen or when there is no server
    data (the default then), ``none`` otherwise (``server_pca`` releases nothing)."""
    if projection == "dp_pca" or (projection is None and not has_server_data):
        return "dp_pca"
    return "none"


def release_names(projection: str, steps: int, has_server_data: bool) -> list[str]:
    """The releases of a run, in order (``steps`` Lloyd steps count as one name)."""
    projection = release_projection(projection, has_server_data)
    names = []
    if projection == "dp_pca":
        names.append("projection")
        if not has_server_data:
            names += ["mean", "size"]
    names.append("weighting")
    if projection == "dp_pca":
        names += ["lift_sums", "lift_counts"]
    if steps:
        names += ["step_sums", "step_counts"]
    return names


def budget_weights(
    projection: str,
    steps: int,
    has_server_data: bool,
    shares: dict | None = None,
    count_share: float = DEFAULT_COUNT_SHARE,
) -> dict[str, float]:
    """The share of the run's mu^2 of every release (one Lloyd step's share for ``step_*``),
    from the stage ``shares`` renormalised over the stages the run has."""
    projection = release_projection(projection, has_server_data)
    sh = dict(DEFAULT_SHARES if shares is None else shares)
    unknown = set(sh) - set(DEFAULT_SHARES)
    if unknown:
        raise ValueError(f"shares: unknown stages {sorted(unknown)}; valid: {list(DEFAULT_SHARES)}")
    if any(not (v >= 0 and math.isfinite(v)) for v in sh.values()):
        raise ValueError(f"shares must be finite numbers >= 0, got {sh}")
    if not 0 < count_share < 1:
        raise ValueError(f"count_share must be in (0, 1), got {count_share}")
    stages = {"weighting": sh.get("weighting", 0.0)}
    if projection == "dp_pca":
        stages["projection"] = sh.get("projection", 0.0)
        stages["lift"] = sh.get("lift", 0.0)
    if steps:
        stages["steps"] = sh.get("steps", 0.0)
    if any(v <= 0 for v in stages.values()):
        raise ValueError(f"every stage of this run needs a share > 0: {stages}")
    total = sum(stages.values())
    stages = {k: v / total for k, v in stages.items()}
    out = {}
    if "projection" in stages:
        if has_server_data:
            out["projection"] = stages["projection"]
        else:  # second moment, sum and size share the projection stage
            out.update(
                projection=stages["projection"] * 0.6, mean=stages["projection"] * 0.3, size=stages["projection"] * 0.1
            )
    out["weighting"] = stages["weighting"]
    if "lift" in stages:
        out.update(lift_sums=stages["lift"] * (1 - count_share), lift_counts=stages["lift"] * count_share)
    if steps:
        out.update(
            step_sums=stages["steps"] * (1 - count_share) / steps, step_counts=stages["steps"] * count_share / steps
        )
    return out


def _repeats(name: str, steps: int) -> int:
    """How many times release ``name`` is made in a run (a Lloyd step's releases once per step)."""
    return steps if name.startswith("step_") else 1


def noise_multipliers(
    epsilon: float,
    delta: float,
    *,
    projection: str = "dp_pca",
    steps: int = 1,
    has_server_data: bool = True,
    shares: dict | None = None,
    count_share: float = DEFAULT_COUNT_SHARE,
    accountant: str = "pld",
) -> dict[str, float]:
    """The noise multiplier of every release so that the whole run is (epsilon, delta)-DP by the
    accountant: one step of all releases composed, release i at ``z / sqrt(w_i)``."""
    w = budget_weights(projection, steps, has_server_data, shares, count_share)
    # every single release once (a Lloyd step's pair `steps` times): the weights sum to 1
    flat = [w[n] for n in w for _ in range(_repeats(n, steps))]
    z = calibrate_noise_multiplier(epsilon, delta, steps=1, weights=flat, accountant=accountant)
    return dict(zip(w, split_noise_multipliers(z, list(w.values()))))


def events(z: dict[str, float], steps: int, trust_model: str) -> list[GaussianRelease]:
    """The run's releases as accountable events (all clients every time: no sampling claimed)."""
    out = []
    for name, zi in z.items():
        out.append(
            GaussianRelease(
                noise_multipliers=(zi,),
                count=_repeats(name, steps),
                label=f"fed_dp_kmeans {name}",
                extra={"trust_model": trust_model},
            )
        )
    return out


def _top_components(M: np.ndarray, n: int) -> np.ndarray:
    _, vecs = np.linalg.eigh((M + M.T) / 2.0)
    return vecs[:, ::-1][:, :n]


def _symmetric_noise(m: int, std: float, K: int, trust_model: str, rng) -> np.ndarray:
    """Gaussian noise on the upper triangle of an (m, m) matrix, mirrored (one release of M)."""
    if std <= 0:
        return np.zeros((m, m))
    iu = np.triu_indices(m)
    E = np.zeros((m, m))
    E[iu] = release_sum(np.zeros(iu[0].size), std, K, trust_model, rng)
    return E + np.triu(E, 1).T


def holdout_rows(n: int, fraction: float, seed: int) -> np.ndarray:
    """Indices of a random ``fraction`` of ``n`` rows (stream ``"server_data"``): the server's
    sample, held out of the clients' data."""
    if not 0 < fraction < 1:
        raise ValueError(f"server_fraction must be in (0, 1), got {fraction}")
    size = max(1, int(round(fraction * n)))
    return np.sort(stream(seed, "server_data").choice(n, size=size, replace=False))


@dataclasses.dataclass(frozen=True)
class FedDPKMeansOptions(ReleaseOptions):
    """FedDP-KMeans's options: the server's public points, the stages, the noise of every release
    and the trust model with its post-processing (:mod:`fedclust.clustering.common_options`)."""

    GROUP: ClassVar[str] = "fed_dp_kmeans"
    server_rows: Any = param(
        None, "any", doc="indices of rows of X the server holds (public); taken out of the clients' data", conf=False
    )
    server_data: Any = param(None, "any", doc="or a separate public (n_s, m) array; neither: DP candidates", conf=False)
    steps: int = param(1, "int", ge=0, doc="private Lloyd steps after the initialisation", loop="round")
    projection: str | None = param(
        None,
        "str",
        choices=PROJECTIONS,
        doc="dp_pca (the paper's stage 1) | server_pca (the server's public points; no release) | none; "
        "None: server_pca when the server holds >= 4m points and k < m, none with fewer, dp_pca without any",
    )
    n_components: int | None = param(None, "int", count=True, doc="dimension of the projection (None: k)")
    clip: float | None = param(
        None,
        "float",
        gt=0,
        doc="public L2 bound on every sample; None: the median row norm of the server's points "
        "(fedclust.clustering.defaults), or sqrt(m) under data_scale without server points",
    )
    data_scale: str | None = param(
        None,
        "str",
        doc="the scaling of X (minmax | standardize | ...): declares the clip without server points",
        conf=False,
    )
    weight_threshold: float | None = param(
        None,
        "float",
        ge=0,
        doc="server points kept when their noisy weight >= max(1, this x its noise std); "
        "None: the normal quantile at 1 - 1/(server points), at most one empty point kept on average",
    )
    noise: dict | None = param(
        None, "dict", doc="noise multiplier per release (noise_multipliers); None: not private", conf=False
    )
    n_candidates: int | None = param(
        None, "int", count=True, doc="DP candidates without server data (None: 50 k)", conf=False
    )
    server_restarts: int = param(
        10, "int", count=True, doc="k-means++ restarts of the server's weighted k-means", loop="once"
    )
    seed: int = param(0, "int", doc="seed of every random stream of the run", conf=False)

    def problems(self, where: str) -> list[str]:
        found = []
        if self.server_rows is not None and self.server_data is not None:
            found.append(f"{where}: give server_rows or server_data, not both")
        if self.server_rows is None and self.server_data is None and self.projection not in ("dp_pca", None):
            found.append(
                "without server data the candidates come from the DP projection stage: "
                "set projection='dp_pca' (or give server_rows / server_data)"
            )
        return found


def run(X, client, k: int, options: FedDPKMeansOptions | None = None, *, y=None, progress=None, **settings):
    """Run FedDP-KMeans (:class:`FedDPKMeansOptions`; keyword ``settings`` override ``options``);
    the arguments are every method's (:mod:`fedclust.clustering.common_options`; ``client`` is
    ignored for the server's rows, ``progress`` is called after every step)."""
    o = FedDPKMeansOptions.build(options, settings)
    server_rows, server_data, steps, projection = o.server_rows, o.server_data, o.steps, o.projection
    clip, trust_model, count_threshold, seed = o.clip, o.trust_model, o.count_threshold, o.seed
    X, client, _ = check_inputs(X, client, k)
    n, m = X.shape
    check_trust_model(trust_model, method="fed_dp_kmeans")
    private = bool(o.noise)
    is_server = np.zeros(n, dtype=bool)
    if server_rows is not None:
        is_server[np.asarray(server_rows, dtype=np.int64)] = True
        Xs = X[is_server]
    elif server_data is not None:
        Xs = np.asarray(server_data, dtype=np.float64)
        if Xs.ndim != 2 or Xs.shape[1] != m:
            raise ValueError(f"server_data must be (n_s, {m}), got shape {Xs.shape}")
    else:
        Xs = None
    if Xs is not None and Xs.shape[0] < k:
        raise ValueError(f"the server holds {Xs.shape[0]} points, fewer than k={k}")
    priv = ~is_server
    Xp_raw, cl = X[priv], client[priv]
    _, cl = np.unique(cl, return_inverse=True)
    K = int(cl.max()) + 1  # clients taking part in every release
    clip, clip_rule = resolve_clip(clip, Xs, m, o.data_scale)
    if projection is None:
        projection = "dp_pca" if Xs is None else projection_rule(Xs.shape[0], m, k)
    # Every stage matches and sums the clipped rows, the server's points clipped alike: matching clipped
    # client rows to unclipped server points piles the samples onto the server's short rows.
    Xc = clip_data(Xp_raw, clip)
    Xs_c = clip_data(Xs, clip) if Xs is not None else None
    z = dict(o.noise or {})
    expected = release_names(projection, steps, Xs is not None)
    if private and sorted(z) != sorted(expected):
        raise ValueError(f"noise must give a multiplier for each of {expected}, got {sorted(z)}")

    def std(name: str, sens: float) -> float:
        return float(z[name]) * sens if private else 0.0

    rng = stream(seed, "noise") if private else None
    rng_server = stream(seed, "server")
    hist = new_history(y)
    log_step = round_logger("fed_dp_kmeans", hist, X, y, steps + 1, progress, logger)
    q = o.n_components or k
    uploaded = 0

    # 1. projection
    if projection == "dp_pca":
        M = Xc.T @ Xc + _symmetric_noise(m, std("projection", clip**2), K, trust_model, rng)
        V = _top_components(M, min(q, m))
        uploaded += K * m * (m + 1) // 2
        if Xs is None:
            total = release_sum(Xc.sum(0), std("mean", clip), K, trust_model, rng)
            size = release_sum(np.array([float(Xc.shape[0])]), std("size", 1.0), K, trust_model, rng)[0]
            size = max(size, 1.0)
            mean = total / size
            second = M / size - np.outer(mean, mean)
            mu_p, cov_p = mean @ V, V.T @ second @ V
            vals, vecs = np.linalg.eigh((cov_p + cov_p.T) / 2)
            root = vecs * np.sqrt(np.maximum(vals, 0.0))
            n_c = int(o.n_candidates or 50 * k)
            Ps = mu_p + stream(seed, "server").standard_normal((n_c, V.shape[1])) @ root.T
            uploaded += K * (m + 1)
        else:
            Ps = Xs_c @ V
    elif projection == "server_pca":  # the server's own public points: no release, no budget
        V = _top_components(Xs_c.T @ Xs_c, min(q, m))
        Ps = Xs_c @ V
    else:
        V = None
        Ps = Xs_c
    Pc = Xc @ V if V is not None else Xc

    # 2. weighting of the server points, weighted k-means on the server
    sigma_w = sum_noise_std(std("weighting", 1.0), K, trust_model)
    lab, _ = nearest(Pc, Ps)
    w = release_sum(
        np.bincount(lab, minlength=Ps.shape[0]).astype(np.float64), std("weighting", 1.0), K, trust_model, rng
    )
    report("weights", w)
    uploaded += K * Ps.shape[0]
    w_thr = weight_threshold(Ps.shape[0]) if o.weight_threshold is None else float(o.weight_threshold)
    threshold = max(1.0, w_thr * sigma_w)
    keep = w >= threshold
    if keep.sum() < k:  # too few trusted points: keep the k heaviest
        keep = np.zeros_like(keep)
        keep[np.argsort(-w, kind="stable")[:k]] = True
    Cp = server_kmeans(
        Ps[keep], np.maximum(w[keep], 0.0), None, rng_server, iters=50, n_init=max(1, o.server_restarts), k=k
    )

    # 3. lift to the data space
    if projection == "server_pca":  # back along the public projection; the Lloyd steps leave the subspace
        C = clip_data(Cp @ V.T, clip)
    elif V is not None:
        start = clip_data(Cp @ V.T, clip)
        lift = LloydRelease(
            sum_std=std("lift_sums", clip),
            count_std=std("lift_counts", 1.0),
            trust_model=trust_model,
            count_threshold=count_threshold,
            clip=clip,
            project=o.project,
        )
        labp, _ = nearest(Pc, Cp)
        C = lloyd_step(Xc, labp, start, lift, K, rng)
        uploaded += K * k * (m + 1)
    else:
        C = np.array(Cp, dtype=np.float64)
    log_step(1, C)

    # 4. private Lloyd steps
    step = LloydRelease(
        sum_std=std("step_sums", clip) if steps else 0.0,
        count_std=std("step_counts", 1.0) if steps else 0.0,
        trust_model=trust_model,
        count_threshold=count_threshold,
        clip=clip,
        project=o.project,
    )
    for t in range(steps):
        labs, _ = nearest(Xc, C)
        C = lloyd_step(Xc, labs, C, step, K, rng)
        uploaded += K * k * (m + 1)
        log_step(t + 2, C)

    labels, _ = nearest(clip_data(X, clip), C)
    info = {
        "trust_model": trust_model,
        "projection": projection,
        "steps": int(steps),
        "clip": clip,
        "clip_rule": clip_rule,
        "weight_threshold": w_thr,
        "n_server_points": int(Ps.shape[0]),
        "server_points_kept": int(keep.sum()),
        "server_data": "rows" if server_rows is not None else ("array" if server_data is not None else "dp_candidates"),
        "noise_multipliers": z,
        "min_count": min_count(step, K),
    }
    return ClusteringResult(
        labels=labels,
        centroids=C,
        history=hist,
        dp_events=events(z, steps, trust_model) if private else [],
        uploaded_reals=int(uploaded),
        info=info,
    )
