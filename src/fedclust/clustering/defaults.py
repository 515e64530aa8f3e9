"""The public rules behind the k-means family's data-dependent defaults (one home for each).

A default that a private run applies to the data must not be read off the data's results: a clip
or a threshold chosen because it scored well on one data set is a release about that data set that
no epsilon accounts for, and it does not carry over to the next data set. Each rule here reads only
public inputs: the dimension ``m``, the declared bound of the features after scaling, the number of
the server's points, a noise scale, or the server's own sample, which the server holds in the clear
and is public by declaration (it never also serves as client data).

* :func:`server_clip`: the clip is the median L2 norm of the server's public points. Half of the
  samples keep their norm, and the noise, which grows with the clip, is sized by a typical sample
  rather than by the largest one. Clipping then only shrinks the long rows: every stage matches and
  sums the clipped rows (the method clusters ``clip(X)``), so a clip below the data's norms scales
  rows, it does not mismatch them.
* :func:`bound_clip`: the bound that the scaling declares: features in ``[0, 1]`` (min-max scaling)
  give rows of norm at most ``sqrt(m)``; standardized features have mean square 1, so ``sqrt(m)`` is
  the root-mean-square row norm. No method's default any more (the DP median below replaced it
  without server data); it is the number to give as the clip for the earlier behaviour.
* :func:`weight_threshold`: the server keeps a point whose noisy weight is at least
  ``z_{1 - 1/n_s}`` noise standard deviations (the standard normal quantile at ``1 - 1/n_s``, ``n_s``
  the server's points): an empty point passes with probability ``1 / n_s``, so on average at most one
  empty point survives, whatever the number of points. A fixed multiple (3 sigma) drops most points of
  a small server sample, whose true weights are small too.
* :func:`dp_clip`: without server data and without a given clip, the k-means family spends one
  release of its budget on the clip: the clients release a noisy histogram of their row norms on a
  public geometric grid (each sample adds 1 to one bin: sensitivity 1, add/remove), and the clip is
  the upper edge of the bin where the noisy cumulative count first reaches half the noisy total (a
  DP median of the row norms). The run's epsilon accounts for it: FKM, FZKM and DK++ count one more
  Gaussian release of the run's noise multiplier; FedDP-KMeans makes it a stage of its budget split
  (the weighting stage's share) and releases it at that stage's multiplier. The declared bound ``sqrt(m)`` of :func:`bound_clip` needs no release but
  is the largest possible norm, so it sizes the noise by the longest row a scaling allows; on [0, 1]
  pixels that is twice a typical row.
* The projection: ``server_pca`` (the top-k principal directions of the server's public points; no
  release) when the server's points outnumber the dimension four times and ``k < m``, else ``none``.
  A sample covariance of ``n_s`` points in ``m`` dimensions resolves a principal direction only when
  its strength exceeds ``sqrt(m / n_s)`` times the noise level (the random-matrix detection limit),
  so at ``n_s >= 4m`` every direction at least half as strong as the noise is found; below that the
  projection throws away directions it cannot tell from noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from fedclust.options import check_number
from fedclust.privacy.events import GaussianRelease
from fedclust.privacy.release import release_sum, sum_noise_std

#: The share of the server's points whose norm the clip keeps (the median).
SERVER_CLIP_QUANTILE = 0.5
#: The names of the clip rules, as calibrations, run info and reports give them.
SERVER_CLIP_RULE = "median row norm of the server's public sample"
DP_CLIP_RULE = "DP median of the row norms (one release of the run's budget)"
#: Scalings whose declared feature bound gives a clip without server data.
BOUND_SCALES = ("minmax", "standardize")


def server_clip(points: np.ndarray, quantile: float = SERVER_CLIP_QUANTILE) -> float:
    """The clip read off the server's public points: the ``quantile`` of their L2 row norms (> 0)."""
    P = np.asarray(points, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] == 0:
        raise ValueError(f"server_clip needs a non-empty (n_s, m) array of the server's points, got shape {P.shape}")
    check_number("quantile", quantile, gt=0, le=1)
    c = float(np.quantile(np.linalg.norm(P, axis=1), quantile))
    if not (c > 0 and math.isfinite(c)):
        raise ValueError(
            f"the server's points have a {quantile:g}-quantile row norm of {c}: no clip can be read off them; "
            "give the clip explicitly"
        )
    return c


def bound_clip(m: int, scale: str | None) -> float:
    """The clip that the scaling declares for ``m`` features: ``sqrt(m)`` for ``minmax`` (features in
    [0, 1]) and ``standardize`` (mean square 1); any other scaling declares no bound (ValueError)."""
    if scale not in BOUND_SCALES:
        raise ValueError(
            f"data scaled with {scale!r} declare no bound on their rows: give the clip explicitly "
            f"(or a server sample, or scale with one of {list(BOUND_SCALES)})"
        )
    return math.sqrt(int(m))


def resolve_clip(clip, server_points=None, m: int | None = None, scale: str | None = None) -> tuple[float, str]:
    """The clip of a run and the rule that gave it: ``clip`` when given, else :func:`server_clip` of
    the server's points when there are any, else :func:`bound_clip`."""
    if clip is not None:
        return check_number("clip", clip, gt=0), "given"
    if server_points is not None and len(server_points):
        return server_clip(server_points), SERVER_CLIP_RULE
    if m is None:
        raise ValueError("no clip, no server sample and no dimension: give the clip explicitly")
    return bound_clip(m, scale), f"sqrt(m) bound of {scale} scaling"


def weight_threshold(n_points: int) -> float:
    """The multiple of the noise std above which a server point's noisy weight is trusted:
    ``z_{1 - 1/n_points}`` (0 for a single point)."""
    n = int(n_points)
    if n < 2:
        return 0.0
    return NormalDist().inv_cdf(1.0 - 1.0 / n)


#: The server's points per dimension from which its own principal directions are trusted.
SERVER_PCA_POINTS_PER_DIM = 4


def projection_rule(n_points: int | None, m: int, k: int) -> str:
    """The projection of a run without a chosen one: ``server_pca`` when the server holds at least
    ``4 m`` points and ``k < m``, else ``none``."""
    if n_points is not None and k < m and n_points >= SERVER_PCA_POINTS_PER_DIM * m:
        return "server_pca"
    return "none"


#: The public grid of :func:`dp_clip`: bin edges ``2**(j / NORM_BINS_PER_OCTAVE)`` for ``j`` from
#: ``NORM_OCTAVES[0]`` to ``NORM_OCTAVES[1]`` octaves (norms from about 1e-3 to 1e6), a quarter octave
#: apart: the estimate is within a factor 2**(1/4) = 1.19 of the noisy median's bin.
NORM_OCTAVES = (-10, 20)
NORM_BINS_PER_OCTAVE = 4
#: The quantile of the row norms that :func:`dp_clip` estimates (as :func:`server_clip`).
DP_CLIP_QUANTILE = SERVER_CLIP_QUANTILE
DP_CLIP_LABEL = "clip estimate: noisy histogram of the row norms"


def norm_grid() -> np.ndarray:
    """The upper edges of :func:`dp_clip`'s bins (public: they depend on no data)."""
    lo, hi = NORM_OCTAVES
    return 2.0 ** (np.arange(lo * NORM_BINS_PER_OCTAVE, hi * NORM_BINS_PER_OCTAVE + 1) / NORM_BINS_PER_OCTAVE)


def norm_bins(X: np.ndarray) -> np.ndarray:
    """The bin of every row of ``X`` on :func:`norm_grid`: the first edge at or above its norm (the last
    bin also holds every longer row)."""
    edges = norm_grid()
    norms = np.linalg.norm(np.asarray(X, dtype=np.float64), axis=1)
    return np.minimum(np.searchsorted(edges, norms, side="left"), edges.size - 1)


@dataclass(frozen=True)
class ClipEstimate:
    """A DP clip: the value, the released (noisy) histogram it was read off and its release event."""

    clip: float
    histogram: np.ndarray
    event: GaussianRelease


def dp_clip(
    X: np.ndarray,
    client: np.ndarray,
    noise_multiplier: float,
    rng: np.random.Generator,
    *,
    trust_model: str = "secure_aggregation",
    quantile: float = DP_CLIP_QUANTILE,
) -> ClipEstimate:
    """A DP estimate of the ``quantile`` of the row norms of ``X`` (rows of clients ``client``): the
    clients release their counts per bin of :func:`norm_grid` with Gaussian noise of std
    ``noise_multiplier`` (sensitivity 1) under ``trust_model``; the clip is the upper edge of the first
    bin whose noisy cumulative count (negative counts read as 0) reaches ``quantile`` of the total."""
    check_number("quantile", quantile, gt=0, le=1)
    z = check_number("noise_multiplier", noise_multiplier, ge=0)  # 0: no noise (an audit's power check)
    n_clients = np.unique(np.asarray(client)).size
    noisy = release_sum(norm_counts(X), z, n_clients, trust_model, rng)
    return ClipEstimate(
        clip=clip_from_counts(noisy, sum_noise_std(z, n_clients, trust_model), quantile),
        histogram=noisy,
        event=clip_release(z, trust_model),
    )


def norm_counts(X: np.ndarray) -> np.ndarray:
    """How many rows of ``X`` fall in each bin of :func:`norm_grid` (one client's statistic of the DP
    clip estimate)."""
    return np.bincount(norm_bins(X), minlength=norm_grid().size).astype(np.float64)


def clip_from_counts(noisy: np.ndarray, sigma: float, quantile: float = DP_CLIP_QUANTILE) -> float:
    """The clip from the released norm histogram ``noisy`` (noise std ``sigma`` on the sum)."""
    edges = norm_grid()
    # post-processing: a bin counts only when its noisy count passes the same threshold as a server
    # point's weight (z_{1 - 1/bins} noise stds: on average at most one empty bin passes); the many
    # empty bins' positive noise would otherwise pull the median towards the middle of the grid
    cdf = np.cumsum(np.where(noisy >= weight_threshold(edges.size) * sigma, noisy, 0.0))
    j = int(np.searchsorted(cdf, quantile * cdf[-1], side="left")) if cdf[-1] > 0 else edges.size - 1
    return float(edges[min(j, edges.size - 1)])


def clip_release(z: float, trust_model: str) -> GaussianRelease:
    """The accountable event of the DP clip estimate at noise multiplier ``z``."""
    return GaussianRelease(
        noise_multipliers=(z,),
        count=1,
        sampling="none",
        neighbouring="add_remove",
        unit="sample",
        label=DP_CLIP_LABEL,
        extra={"trust_model": trust_model},
    )
