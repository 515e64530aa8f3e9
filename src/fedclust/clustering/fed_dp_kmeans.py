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

The clip: given, or the median row norm of the server's public points, or, with neither, one more
release before the others (stage 0, ``clip``): the clients release a noisy histogram of their row
norms on a public grid (sensitivity 1) and the clip is its median
(:func:`fedclust.clustering.defaults.dp_clip`). The release takes a stage share of its own (by default
the weighting stage's share: both are histograms of counts) and the accountant composes it with the
rest; a run without noise reads the same histogram without noise.

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
from fedclust.clustering.defaults import (
    DP_CLIP_RULE,
    clip_from_counts,
    norm_counts,
    norm_grid,
    projection_rule,
    resolve_clip,
    weight_threshold,
)
from fedclust.clustering.lloyd import LloydRelease, cluster_totals, min_count, update_centres
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
#: The stages a ``shares`` dict may name: the four above and ``clip``, the DP clip estimate of a run
#: without a clip and without server data, whose share defaults to the weighting stage's (both release
#: one histogram of counts of sensitivity 1).
SHARE_STAGES = ("clip", *DEFAULT_SHARES)
DEFAULT_COUNT_SHARE = 0.3
#: The clip rule of a run without noise, without a clip and without server data.
NOISELESS_CLIP_RULE = "median of the row norms (no noise: the run is not private)"


def release_projection(projection: str | None, has_server_data: bool) -> str:
    """The projection as far as the releases go: ``dp_pca`` when chosen or when there is no server
    data (the default then), ``none`` otherwise (``server_pca`` releases nothing)."""
    if projection == "dp_pca" or (projection is None and not has_server_data):
        return "dp_pca"
    return "none"


def has_clip_stage(clip, has_server_data: bool) -> bool:
    """Whether a run starts with the clip stage: no clip given and no server data to read it off."""
    return clip is None and not has_server_data


def release_names(projection: str, steps: int, has_server_data: bool, clip_stage: bool = False) -> list[str]:
    """The releases of a run, in order (``steps`` Lloyd steps count as one name; ``clip_stage``: the
    run releases the DP clip estimate first, :func:`has_clip_stage`)."""
    projection = release_projection(projection, has_server_data)
    names = ["clip"] if clip_stage else []
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
    clip_stage: bool = False,
) -> dict[str, float]:
    """The share of the run's mu^2 of every release (one Lloyd step's share for ``step_*``),
    from the stage ``shares`` renormalised over the stages the run has (``clip_stage``: the DP clip
    estimate is one of them, at ``shares["clip"]``, by default the weighting stage's share)."""
    projection = release_projection(projection, has_server_data)
    sh = dict(DEFAULT_SHARES if shares is None else shares)
    unknown = set(sh) - set(SHARE_STAGES)
    if unknown:
        raise ValueError(f"shares: unknown stages {sorted(unknown)}; valid: {list(SHARE_STAGES)}")
    if any(not (v >= 0 and math.isfinite(v)) for v in sh.values()):
        raise ValueError(f"shares must be finite numbers >= 0, got {sh}")
    if not 0 < count_share < 1:
        raise ValueError(f"count_share must be in (0, 1), got {count_share}")
    stages = {"clip": sh.get("clip", sh.get("weighting", 0.0))} if clip_stage else {}
    stages["weighting"] = sh.get("weighting", 0.0)
    if projection == "dp_pca":
        stages["projection"] = sh.get("projection", 0.0)
        stages["lift"] = sh.get("lift", 0.0)
    if steps:
        stages["steps"] = sh.get("steps", 0.0)
    if any(v <= 0 for v in stages.values()):
        raise ValueError(f"every stage of this run needs a share > 0: {stages}")
    total = sum(stages.values())
    stages = {k: v / total for k, v in stages.items()}
    out = {"clip": stages["clip"]} if clip_stage else {}
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
    clip_stage: bool = False,
) -> dict[str, float]:
    """The noise multiplier of every release so that the whole run is (epsilon, delta)-DP by the
    accountant: one step of all releases composed, release i at ``z / sqrt(w_i)`` (``clip_stage``:
    the run releases the DP clip estimate too, :func:`has_clip_stage`)."""
    w = budget_weights(projection, steps, has_server_data, shares, count_share, clip_stage)
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
        "(fedclust.clustering.defaults), or without server points a DP median of the clients' row "
        "norms (one more release, noise['clip'])",
    )
    weight_threshold: float | None = param(
        None,
        "float",
        ge=0,
        doc="server points kept when their noisy weight >= max(1, this x its noise std); "
        "None: the normal quantile at 1 - 1/(server points), at most one empty point kept on average",
    )
    noise: dict | None = param(
        None,
        "dict",
        doc="noise multiplier per release (noise_multipliers, with clip_stage=has_clip_stage(...)); None: not private",
        conf=False,
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


@dataclasses.dataclass
class Plan:
    """What the server knows before the first release: the public choices of a run (clip,
    projection, noise), its server points, and the clients' clipped rows (``Xc``, ``client``: only
    the simulation backend holds them; the Flower backend's clients hold their own)."""

    o: FedDPKMeansOptions
    k: int
    m: int
    n_contributors: int
    clip: float | None
    clip_rule: str | None
    projection: str
    Xs_c: np.ndarray | None
    z: dict
    Xc: np.ndarray | None = None
    client: np.ndarray | None = None
    clip_stage: bool = False  # the run releases its clip first (a plan without clip until then)

    @property
    def private(self) -> bool:
        return bool(self.z)

    def std(self, name: str, sens: float) -> float:
        """The noise std of release ``name`` of sensitivity ``sens`` (0 when not private)."""
        return float(self.z[name]) * sens if self.private else 0.0

    def with_clip(self, clip: float) -> Plan:
        """The plan of a run with a clip stage once the stage released ``clip``: the clients' rows
        clipped to it (there are no server points to clip)."""
        rule = DP_CLIP_RULE if self.private else NOISELESS_CLIP_RULE
        Xc = None if self.Xc is None else clip_data(self.Xc, clip)
        return dataclasses.replace(self, clip=float(clip), clip_rule=rule, Xc=Xc)


def server_points(X: np.ndarray, o: FedDPKMeansOptions, k: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The rows the server holds (``is_server`` mask) and its public points (None: DP candidates)."""
    n, m = X.shape
    is_server = np.zeros(n, dtype=bool)
    if o.server_rows is not None:
        is_server[np.asarray(o.server_rows, dtype=np.int64)] = True
        Xs = X[is_server]
    elif o.server_data is not None:
        Xs = np.asarray(o.server_data, dtype=np.float64)
        if Xs.ndim != 2 or Xs.shape[1] != m:
            raise ValueError(f"server_data must be (n_s, {m}), got shape {Xs.shape}")
    else:
        Xs = None
    if Xs is not None and Xs.shape[0] < k:
        raise ValueError(f"the server holds {Xs.shape[0]} points, fewer than k={k}")
    return is_server, Xs


def plan_run(X, client, k: int, o: FedDPKMeansOptions) -> Plan:
    """Check the inputs and fix the run's public choices (the server's side before any release);
    the clients' clipped rows go into the plan for the simulation backend. A run with a clip stage
    (:func:`has_clip_stage`) is planned without a clip (the rows unclipped, only the clip stage can
    run); :meth:`Plan.with_clip` then gives the plan with the clip the stage released."""
    X, client, _ = check_inputs(X, client, k)
    m = X.shape[1]
    check_trust_model(o.trust_model, method="fed_dp_kmeans")
    is_server, Xs = server_points(X, o, k)
    priv = ~is_server
    _, cl = np.unique(client[priv], return_inverse=True)
    z = dict(o.noise or {})
    clip_stage = has_clip_stage(o.clip, Xs is not None)
    clip, clip_rule = (None, None) if clip_stage else resolve_clip(o.clip, Xs)
    projection = o.projection
    if projection is None:
        projection = "dp_pca" if Xs is None else projection_rule(Xs.shape[0], m, k)
    expected = release_names(projection, o.steps, Xs is not None, clip_stage)
    if z and sorted(z) != sorted(expected):
        hint = (
            " (without a clip and without server data the run releases a DP clip estimate first: "
            "noise_multipliers(..., clip_stage=True))"
            if clip_stage
            else ""
        )
        raise ValueError(f"noise must give a multiplier for each of {expected}, got {sorted(z)}{hint}")
    # Every stage matches and sums the clipped rows, the server's points clipped alike: matching clipped
    # client rows to unclipped server points piles the samples onto the server's short rows.
    return Plan(
        o=o,
        k=k,
        m=m,
        n_contributors=int(cl.max()) + 1,  # clients taking part in every release
        clip=clip,
        clip_rule=clip_rule,
        projection=projection,
        Xs_c=clip_data(Xs, clip) if Xs is not None else None,
        z=z,
        Xc=clip_data(X[priv], clip),
        client=cl,
        clip_stage=clip_stage,
    )


# ---- the client side of every stage: what one client computes from its clipped rows and the broadcast
def upper_triangle(M: np.ndarray) -> np.ndarray:
    """The upper triangle (diagonal included) of a symmetric matrix, row by row."""
    return M[np.triu_indices(M.shape[0])]


def symmetric_from(upper: np.ndarray, m: int) -> np.ndarray:
    """The symmetric (m, m) matrix whose upper triangle is ``upper`` (:func:`upper_triangle`)."""
    M = np.zeros((m, m))
    M[np.triu_indices(m)] = upper
    return M + np.triu(M, 1).T


def clip_statistic(X: np.ndarray, broadcast: dict) -> dict[str, np.ndarray]:
    """Stage 0 at a client (a run with a clip stage): how many of its (unclipped) rows fall in each bin
    of the public norm grid (:func:`fedclust.clustering.defaults.norm_counts`)."""
    return {"norm_counts": norm_counts(X)}


def projection_statistic(Xc: np.ndarray, broadcast: dict) -> dict[str, np.ndarray]:
    """Stage 1 at a client: the upper triangle of ``sum_x x x^T`` (and, without server data, the
    sum of the samples and their number)."""
    out = {"second_moment": upper_triangle(Xc.T @ Xc)}
    if "candidates" in broadcast:
        out["sum"] = Xc.sum(0)
        out["size"] = np.array([float(Xc.shape[0])])
    return out


def _projected(Xc: np.ndarray, broadcast: dict) -> np.ndarray:
    return Xc @ broadcast["V"] if "V" in broadcast else Xc


def weighting_statistic(Xc: np.ndarray, broadcast: dict) -> dict[str, np.ndarray]:
    """Stage 2 at a client: how many of its projected samples are nearest each server point."""
    points = broadcast["points"]
    lab, _ = nearest(_projected(Xc, broadcast), points)
    return {"weights": np.bincount(lab, minlength=points.shape[0]).astype(np.float64)}


def lloyd_statistic(Xc: np.ndarray, broadcast: dict) -> dict[str, np.ndarray]:
    """Stages 3 and 4 at a client: per-cluster sums and counts of its clipped samples under their
    nearest broadcast centre (in the projected space when a projection ``V`` is broadcast)."""
    C = broadcast["centres"]
    lab, _ = nearest(_projected(Xc, broadcast), C)
    sums, counts = cluster_totals(Xc, lab, C.shape[0])
    return {"sums": sums, "counts": counts}


#: The client-side statistic of every stage, by the stage's name.
STATISTICS = {
    "clip": clip_statistic,
    "projection": projection_statistic,
    "weighting": weighting_statistic,
    "lift": lloyd_statistic,
    "step": lloyd_statistic,
}


class SimulatedSums:
    """The simulation backend's release of a stage: the stage's client statistic on the union of the
    clients' rows (the statistics are sums over samples, so this is the sum of the clients' own),
    each array noised under the trust model (:func:`fedclust.privacy.release.release_sum`)."""

    def __init__(self, plan: Plan, rng: np.random.Generator | None):
        self.plan, self.rng = plan, rng
        self.n_contributors = plan.n_contributors

    def __call__(self, stage: str, broadcast: dict, stds: dict[str, float]) -> dict[str, np.ndarray]:
        stats = STATISTICS[stage](self.plan.Xc, broadcast)
        p = self.plan
        return {
            name: release_sum(value, stds.get(name, 0.0), p.n_contributors, p.o.trust_model, self.rng)
            for name, value in stats.items()
        }


# ---- the server side of every stage: the next state from the released sums
def clip_stage(plan: Plan, release) -> float:
    """Stage 0 (a run without a clip and without server data; ``plan`` made before it, its rows
    unclipped): the clients release their counts per bin of the public norm grid (sensitivity 1,
    noise multiplier ``noise["clip"]``), and the clip is the median read off the noisy histogram
    (:func:`fedclust.clustering.defaults.clip_from_counts`, the k-means family's DP clip estimate)."""
    std = plan.std("clip", 1.0)
    noisy = release("clip", {}, {"norm_counts": std})["norm_counts"]
    report("norm_counts", noisy)
    return clip_from_counts(noisy, sum_noise_std(std, release.n_contributors, plan.o.trust_model))


def projection_stage(plan: Plan, release, seed: int):
    """Stage 1: the projection ``V`` (None: data space) and the server's projected points."""
    o, m, k, clip = plan.o, plan.m, plan.k, plan.clip
    q = min(o.n_components or k, m)
    if plan.projection == "server_pca":  # the server's own public points: no release, no budget
        V = _top_components(plan.Xs_c.T @ plan.Xs_c, q)
        return V, plan.Xs_c @ V, 0
    if plan.projection != "dp_pca":
        return None, plan.Xs_c, 0
    K = release.n_contributors
    bc = {} if plan.Xs_c is not None else {"candidates": np.ones(1)}
    stds = {"second_moment": plan.std("projection", clip**2)}
    if "candidates" in bc:
        stds.update(sum=plan.std("mean", clip), size=plan.std("size", 1.0))
    out = release("projection", bc, stds)
    M = symmetric_from(out["second_moment"], m)
    V = _top_components(M, q)
    if plan.Xs_c is not None:
        return V, plan.Xs_c @ V, K * m * (m + 1) // 2
    size = max(out["size"][0], 1.0)
    mean = out["sum"] / size
    second = M / size - np.outer(mean, mean)
    mu_p, cov_p = mean @ V, V.T @ second @ V
    vals, vecs = np.linalg.eigh((cov_p + cov_p.T) / 2)
    root = vecs * np.sqrt(np.maximum(vals, 0.0))
    n_c = int(o.n_candidates or 50 * k)
    Ps = mu_p + stream(o.seed, "server").standard_normal((n_c, V.shape[1])) @ root.T
    return V, Ps, K * m * (m + 1) // 2 + K * (m + 1)


def weighting_stage(plan: Plan, release, V, Ps, rng_server):
    """Stage 2: the noisy weights of the server points, the trusted ones, and k centres ``Cp`` in the
    projected space from the server's weighted k-means."""
    o, k = plan.o, plan.k
    K = release.n_contributors
    std_w = plan.std("weighting", 1.0)
    sigma_w = sum_noise_std(std_w, K, o.trust_model)
    bc = {"points": Ps} if V is None else {"points": Ps, "V": V}
    w = release("weighting", bc, {"weights": std_w})["weights"]
    report("weights", w)
    w_thr = weight_threshold(Ps.shape[0]) if o.weight_threshold is None else float(o.weight_threshold)
    keep = w >= max(1.0, w_thr * sigma_w)
    if keep.sum() < k:  # too few trusted points: keep the k heaviest
        keep = np.zeros_like(keep)
        keep[np.argsort(-w, kind="stable")[:k]] = True
    Cp = server_kmeans(
        Ps[keep], np.maximum(w[keep], 0.0), None, rng_server, iters=50, n_init=max(1, o.server_restarts), k=k
    )
    return Cp, keep, w_thr


def lloyd_release(plan: Plan, stage: str) -> LloydRelease:
    """The release of the lift (``stage="lift"``) or of one Lloyd step (``"step"``)."""
    private = plan.private and (stage == "lift" or plan.o.steps > 0)
    return LloydRelease(
        sum_std=plan.std(f"{stage}_sums", plan.clip) if private else 0.0,
        count_std=plan.std(f"{stage}_counts", 1.0) if private else 0.0,
        trust_model=plan.o.trust_model,
        count_threshold=plan.o.count_threshold,
        clip=plan.clip,
        project=plan.o.project,
    )


def lloyd_stage(release, stage: str, broadcast: dict, rel: LloydRelease) -> np.ndarray:
    """Stages 3 and 4: the released per-cluster sums and counts under the broadcast centres, and the
    server's update (:func:`fedclust.clustering.lloyd.update_centres`) from ``broadcast["start"]``
    (the lift's start in data space) or the broadcast centres."""
    out = release(stage, broadcast, {"sums": rel.sum_std, "counts": rel.count_std})
    report("lloyd_totals", (out["sums"], out["counts"]))
    start = broadcast.get("start", broadcast["centres"])
    return update_centres(start, out["sums"], out["counts"], rel, release.n_contributors)


def run_stages(plan: Plan, release, log_step) -> tuple[np.ndarray, dict]:
    """Every stage of a run in order, each a ``release(stage, broadcast, stds)`` of the sum of the
    clients' statistics followed by the server's update; the same code serves both backends
    (``release``: :class:`SimulatedSums` or the Flower backend's secure aggregation)."""
    o, clip = plan.o, plan.clip
    V, Ps, uploaded = projection_stage(plan, release, o.seed)
    Cp, keep, w_thr = weighting_stage(plan, release, V, Ps, stream(o.seed, "server"))
    K = release.n_contributors
    uploaded += K * Ps.shape[0] + (K * norm_grid().size if plan.clip_stage else 0)
    if plan.projection == "server_pca":  # back along the public projection; the Lloyd steps leave the subspace
        C = clip_data(Cp @ V.T, clip)
    elif V is not None:
        bc = {"centres": Cp, "V": V, "start": clip_data(Cp @ V.T, clip)}
        C = lloyd_stage(release, "lift", bc, lloyd_release(plan, "lift"))
        uploaded += K * plan.k * (plan.m + 1)
    else:
        C = np.array(Cp, dtype=np.float64)
    log_step(1, C)
    step = lloyd_release(plan, "step")
    for t in range(o.steps):
        C = lloyd_stage(release, "step", {"centres": C}, step)
        uploaded += K * plan.k * (plan.m + 1)
        log_step(t + 2, C)
    state = {
        "weight_threshold": w_thr,
        "n_server_points": int(Ps.shape[0]),
        "server_points_kept": int(keep.sum()),
        "uploaded": int(uploaded),
        "min_count": min_count(step, K),
    }
    return C, state


def result_of(X, plan: Plan, C: np.ndarray, state: dict, hist: dict, events_z: dict | None = None):
    """The run's :class:`ClusteringResult` (``events_z``: the noise multipliers to account, when they
    differ from the planned ones)."""
    o = plan.o
    labels, _ = nearest(clip_data(np.asarray(X, dtype=np.float64), plan.clip), C)
    info = {
        "trust_model": o.trust_model,
        "projection": plan.projection,
        "steps": int(o.steps),
        "clip": plan.clip,
        "clip_rule": plan.clip_rule,
        "weight_threshold": state["weight_threshold"],
        "n_server_points": state["n_server_points"],
        "server_points_kept": state["server_points_kept"],
        "server_data": "rows"
        if o.server_rows is not None
        else ("array" if o.server_data is not None else "dp_candidates"),
        "noise_multipliers": plan.z,
        "min_count": state["min_count"],
    }
    z = plan.z if events_z is None else events_z
    return ClusteringResult(
        labels=labels,
        centroids=C,
        history=hist,
        dp_events=events(z, o.steps, o.trust_model) if plan.private else [],
        uploaded_reals=state["uploaded"],
        info=info,
    )


def run(X, client, k: int, options: FedDPKMeansOptions | None = None, *, y=None, progress=None, **settings):
    """Run FedDP-KMeans (:class:`FedDPKMeansOptions`; keyword ``settings`` override ``options``);
    the arguments are every method's (:mod:`fedclust.clustering.common_options`; ``client`` is
    ignored for the server's rows, ``progress`` is called after every step). The simulation backend:
    every stage's sum is computed here and noised under the trust model."""
    o = FedDPKMeansOptions.build(options, settings)
    X, client, _ = check_inputs(X, client, k)
    plan = plan_run(X, client, k, o)
    if plan.clip_stage:  # its own noise stream: the other releases draw what they draw with a given clip
        clip = clip_stage(plan, SimulatedSums(plan, stream(o.seed, "clip") if plan.private else None))
        plan = plan.with_clip(clip)
    hist = new_history(y)
    log_step = round_logger("fed_dp_kmeans", hist, X, y, o.steps + 1, progress, logger)
    release = SimulatedSums(plan, stream(o.seed, "noise") if plan.private else None)
    C, state = run_stages(plan, release, log_step)
    return result_of(X, plan, C, state, hist)
