"""Synthetic data generators with a known ground truth.

Every generator takes one integer ``seed`` and draws all its randomness from
``fedclust.rng.stream(seed, "data")``, so the same arguments always give the same data.

* :func:`gaussian_mixture`: isotropic Gaussian clusters whose centres are a chosen number of
  standard deviations apart.
* :func:`linear_model`: the FedCAvg/FedCGds model X = W H + E at a given SNR in dB
  (the synthetic data of the FedCAvg/FedCGds paper).
* :func:`concentric_circles`: noisy points on concentric circles (the FedSC "Concentric Circles" shape).
* :func:`mixed_linear_regression` and :func:`mixed_regression_1d`: regression data from k true
  parameter vectors, for sanity checks of clustered federated learning
  (like the synthetic regression of the RR-Cluster paper's App. D.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from fedclust.data.base import Dataset
from fedclust.options import check_int, check_number
from fedclust.rng import stream

__all__ = [
    "gaussian_mixture",
    "linear_model",
    "concentric_circles",
    "RegressionData",
    "mixed_linear_regression",
    "mixed_regression_1d",
    "RR_CLUSTER_LINES",
]


# --------------------------------------------------------------------------- helpers
def _check_weights(weights, k: int, name: str = "weights") -> np.ndarray:
    if weights is None:
        return np.full(k, 1.0 / k)
    w = np.asarray(weights, dtype=float)
    if w.shape != (k,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(
            f"{name} must be {k} non-negative numbers with a positive sum (one per cluster), got {weights!r}"
        )
    return w / w.sum()


def _exact_counts(n: int, w: np.ndarray) -> np.ndarray:
    """Split ``n`` into integer counts proportional to ``w`` (largest remainders; sums to ``n``)."""
    raw = n * w
    counts = np.floor(raw).astype(np.int64)
    short = n - counts.sum()
    if short:
        order = np.argsort(-(raw - counts), kind="stable")
        counts[order[:short]] += 1
    return counts


def _labels_with_counts(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Labels with exactly ``counts[c]`` copies of ``c``, in random order."""
    y = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    rng.shuffle(y)
    return y


# --------------------------------------------------------------------------- Gaussian mixture
#: elements per block of a large generated array (32 MiB of float64): each block is one numpy call,
#: and a signal (SIGTERM, Ctrl-C) is handled between two blocks, so within a fraction of a second
_BLOCK = 1 << 22


def _row_blocks(n: int, d: int):
    """``(start, stop)`` of consecutive row blocks of an ``(n, d)`` array, about :data:`_BLOCK` elements each."""
    rows = max(1, _BLOCK // max(d, 1))
    return ((a, min(a + rows, n)) for a in range(0, n, rows))


def _standard_normal_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``rng.standard_normal((n, d))``, the same numbers, drawn block by block (:func:`_row_blocks`):
    a generation of gigabytes stays interruptible (the interpreter runs signal handlers only between
    numpy calls)."""
    out = np.empty((n, d))
    for a, b in _row_blocks(n, d):
        rng.standard_normal(out=out[a:b])
    return out


def _equidistant_centres(k: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """``k <= d + 1`` points in R^d with all pairwise distances equal to 1 (a randomly rotated simplex)."""
    # Centred one-hot vectors of R^k are pairwise sqrt(2) apart and span a (k-1)-dim subspace.
    c = np.eye(k) - 1.0 / k
    u, s, _ = np.linalg.svd(c)
    coords = u[:, : k - 1] * s[: k - 1]  # (k, k-1), same pairwise distances
    if k - 1 > 0:
        q, _ = np.linalg.qr(rng.standard_normal((d, k - 1)))  # (d, k-1) orthonormal columns
        coords = coords @ q.T
    else:
        coords = np.zeros((1, d))
    return coords / np.sqrt(2.0)


def gaussian_mixture(
    n_samples: int = 1000,
    n_features: int = 2,
    k: int = 3,
    separation: float = 4.0,
    seed: int = 0,
    *,
    cluster_std: float = 1.0,
    weights: Sequence[float] | None = None,
) -> Dataset:
    """Isotropic Gaussian clusters: ``x = c_y + cluster_std * z`` with ``z ~ N(0, I)``.

    **Separation.** ``separation`` is the distance between cluster centres in units of the cluster
    standard deviation ``cluster_std`` (the per-coordinate std): the closest two centres are exactly
    ``separation * cluster_std`` apart.

    * If ``k <= n_features + 1`` the centres are the vertices of a randomly rotated regular simplex, so
      *every* pair of centres is exactly ``separation * cluster_std`` apart.
    * Otherwise (more clusters than fit equidistantly) the centres are the best of several uniform
      draws in the unit cube (largest minimum pairwise distance, so fairly evenly spread), rescaled so
      that the *minimum* pairwise distance equals ``separation * cluster_std``; other pairs are farther.

    Along the line joining two centres, the 1-D Bayes error between the two clusters is
    ``Phi(-separation / 2)``: e.g. separation 4 gives 2.3 %, separation 6 gives 0.13 %.

    Cluster sizes are exact: ``n_samples`` is split in proportion to ``weights`` (balanced by default)
    by largest remainders, and the labels are shuffled.

    Returns a :class:`Dataset` with ``meta["centers"]`` (k, n_features), ``meta["separation"]`` and
    ``meta["cluster_std"]``.
    """
    n = check_int("n_samples", n_samples, 1)
    d = check_int("n_features", n_features, 1)
    k = check_int("k", k, 1)
    if k > n:
        raise ValueError(f"k must be <= n_samples ({n}), got {k}")
    sep = check_number("separation", separation, ge=0)
    std = check_number("cluster_std", cluster_std, gt=0)
    w = _check_weights(weights, k)
    rng = stream(seed, "data")

    if k == 1:
        centres = np.zeros((1, d))
    elif k <= d + 1:
        centres = _equidistant_centres(k, d, rng) * (sep * std)
    else:
        # Best of several uniform draws in the unit cube (the one with the largest minimum pairwise
        # distance), so that the centres are spread fairly evenly; then rescale the minimum to sep*std.
        trials = int(max(1, min(200, 2e7 // (k * k * d))))
        raw = rng.uniform(0.0, 1.0, size=(trials, k, d))
        sq = (raw**2).sum(-1)
        d2 = sq[:, :, None] + sq[:, None, :] - 2 * np.einsum("tid,tjd->tij", raw, raw)
        iu = np.triu_indices(k, 1)
        dmin = np.sqrt(np.maximum(d2[:, iu[0], iu[1]].min(axis=1), 0.0))
        best = int(np.argmax(dmin))
        c = raw[best] - raw[best].mean(axis=0)
        diff = c[:, None, :] - c[None, :, :]
        dmin_best = np.sqrt((diff**2).sum(-1))[iu].min()
        centres = c / dmin_best * (sep * std)

    y = _labels_with_counts(_exact_counts(n, w), rng)
    X = _standard_normal_rows(rng, n, d)  # the same draws as one standard_normal((n, d)) call
    for a, b in _row_blocks(n, d):
        X[a:b] *= std
        X[a:b] += centres[y[a:b]]
    return Dataset(
        X=X,
        y=y,
        name="gaussian_mixture",
        meta={"centers": centres, "separation": sep, "cluster_std": std, "weights": w, "seed": seed},
    )


# --------------------------------------------------------------------------- linear model X = W H + E
def linear_model(
    n_samples: int = 10000,
    n_features: int = 2000,
    k: int = 20,
    snr_db: float = -3.0,
    seed: int = 0,
    *,
    balanced: bool = False,
    exact_snr: bool = True,
) -> Dataset:
    """The FedCAvg/FedCGds synthetic model ``X = W H + E`` (paper defaults
    M = 2000, N = 10000, K = 20, SNR = -3 dB).

    In the paper's notation (columns = samples):

    * ``W`` (M x K), M = ``n_features``: i.i.d. U[0, 1].
    * ``H`` (K x N), N = ``n_samples``: one-hot columns; column j is ``e_{y_j}`` with the label ``y_j``
      drawn uniformly from {0..K-1} (``balanced=True`` instead gives exact equal class counts, shuffled).
    * ``E`` (M x N): i.i.d. Gaussian, scaled so that ``SNR = 10 log10(||WH||_F^2 / ||E||_F^2) = snr_db``.
      With ``exact_snr=True`` (default, the paper's "scaled so that") a standard Gaussian draw is rescaled
      so the realized SNR equals ``snr_db`` exactly; with ``exact_snr=False`` E has i.i.d. entries of
      variance ``sigma^2 = ||WH||_F^2 / (M N 10^(snr_db/10))`` and the realized SNR is ``snr_db`` only
      in expectation. X is **not** clipped (it has negative entries at low SNR).

    The returned :class:`Dataset` has rows = samples, i.e. ``X_rows = (W H + E)^T`` of shape (N, M), and
    ``y`` = the cluster of each one-hot column of H. ``meta`` holds ``"W"`` (M x K, float64), ``"snr_db"``
    (asked), ``"snr_db_realized"``, ``"noise_std"`` and the signal/noise energies.
    """
    n = check_int("n_samples", n_samples, 1)
    m = check_int("n_features", n_features, 1)
    k = check_int("k", k, 1)
    try:
        snr = float(snr_db)
    except (TypeError, ValueError):
        raise ValueError(f"snr_db must be a finite number (dB), got {snr_db!r}") from None
    if not np.isfinite(snr):
        raise ValueError(f"snr_db must be a finite number (dB), got {snr_db!r}")
    rng = stream(seed, "data")

    W = rng.uniform(0.0, 1.0, size=(m, k))
    if balanced:
        y = _labels_with_counts(_exact_counts(n, np.full(k, 1.0 / k)), rng)
    else:
        y = rng.integers(0, k, size=n).astype(np.int64)
    signal = W.T[y]  # (N, M) = (W H)^T, since W H's column j is W[:, y_j]
    signal_energy = float(np.sum(signal**2))
    target_noise_energy = signal_energy / 10.0 ** (snr / 10.0)

    noise = _standard_normal_rows(rng, n, m)
    if exact_snr:
        noise *= np.sqrt(target_noise_energy / np.sum(noise**2))
        noise_std = float(np.sqrt(target_noise_energy / (n * m)))
    else:
        noise_std = float(np.sqrt(target_noise_energy / (n * m)))
        noise *= noise_std
    noise_energy = float(np.sum(noise**2))
    noise += signal  # in place: X = (W H + E)^T without a third (N, M) array
    del signal
    return Dataset(
        X=noise,
        y=y,
        name="linear_model",
        meta={
            "W": W,
            "snr_db": snr,
            "snr_db_realized": 10.0 * np.log10(signal_energy / noise_energy),
            "noise_std": noise_std,
            "signal_energy": signal_energy,
            "noise_energy": noise_energy,
            "exact_snr": bool(exact_snr),
            "seed": seed,
        },
    )


# --------------------------------------------------------------------------- concentric circles
def concentric_circles(
    n_samples: int = 1258,
    radii: Sequence[float] = (2.0, 4.0),
    noise: float = 0.1,
    seed: int = 0,
    *,
    angles: str = "random",
) -> Dataset:
    """Points on concentric circles in the plane, one class per circle (label = index in ``radii``).

    ``n_samples`` is split as evenly as possible between the circles (the first circles get the
    remainder). Point i of circle c is ``radii[c] * (cos t_i, sin t_i) + noise * z_i`` with
    ``z_i ~ N(0, I_2)``: ``noise`` is the std of isotropic Gaussian noise per coordinate.
    ``angles="random"`` draws t_i ~ U[0, 2 pi); ``angles="grid"`` puts them evenly spaced on [0, 2 pi)
    (the FedSC file ``Concentric_Circles.mat`` has radii 2 and 4 with 629 points each).
    """
    n = check_int("n_samples", n_samples, 1)
    r = np.asarray(radii, dtype=float).ravel()
    if r.size < 1 or not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise ValueError(f"radii must be one or more positive numbers, got {radii!r}")
    if n < r.size:
        raise ValueError(f"n_samples must be >= the number of circles ({r.size}), got {n}")
    sd = check_number("noise", noise, ge=0)
    if angles not in ("random", "grid"):
        raise ValueError(f"angles must be 'random' or 'grid', got {angles!r}")
    rng = stream(seed, "data")

    counts = _exact_counts(n, np.full(r.size, 1.0 / r.size))
    y = np.repeat(np.arange(r.size, dtype=np.int64), counts)
    if angles == "random":
        t = rng.uniform(0.0, 2 * np.pi, size=n)
    else:
        t = np.concatenate([np.arange(c) * (2 * np.pi / c) for c in counts])
    X = r[y, None] * np.stack([np.cos(t), np.sin(t)], axis=1)
    X = X + sd * rng.standard_normal((n, 2))
    return Dataset(X=X, y=y, name="concentric_circles", meta={"radii": r, "noise": sd, "angles": angles, "seed": seed})


# --------------------------------------------------------------------------- mixed linear regression
@dataclass
class RegressionData:
    """Regression samples drawn from k true linear models (clustered FL sanity checks).

    * ``X``: (n, d) float32 features.
    * ``target``: (n,) float32 responses, ``target_i = X_i . w_g + b_g + noise_std * eps_i`` with
      ``g = group[i]`` and ``eps_i ~ N(0, 1)``.
    * ``group``: (n,) int64, the true model (0..k-1) of each sample.
    * ``true_params``: (k, d + 1) float64; row g is ``(w_g[0], ..., w_g[d-1], b_g)`` (slopes then
      intercept; the intercept is 0 when the generator was asked for none).
    * ``noise_std``: the Gaussian noise std.
    * ``client``: (n,) int64 client of each sample, or None when the data is not split into clients.
    * ``client_group``: (n_clients,) int64 true group of each client, or None.
    * ``meta``: the generator's settings.
    """

    X: np.ndarray
    target: np.ndarray
    group: np.ndarray
    true_params: np.ndarray
    noise_std: float
    client: np.ndarray | None = None
    client_group: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.true_params.shape[0])

    def as_dataset(self, name: str = "mixed_linear_regression") -> Dataset:
        """A :class:`Dataset` with ``y`` = the group of each sample; ``meta`` holds ``target``,
        ``true_params``, ``client`` and ``client_group``."""
        meta = dict(self.meta)
        meta.update(
            target=self.target,
            true_params=self.true_params,
            noise_std=self.noise_std,
            client=self.client,
            client_group=self.client_group,
            per_sample_keys=("target", "client"),
        )
        return Dataset(X=self.X, y=self.group, name=name, meta=meta)


def _regression_params(true_params, k: int, d: int, rng) -> np.ndarray:
    if true_params is None:
        return rng.standard_normal((k, d + 1))
    p = np.asarray(true_params, dtype=float)
    if p.ndim != 2 or p.shape[0] != k or p.shape[1] not in (d, d + 1) or not np.all(np.isfinite(p)):
        raise ValueError(
            f"true_params must have shape ({k}, {d}) or ({k}, {d + 1}) (slopes[, intercept] per model), "
            f"got shape {np.shape(true_params)}"
        )
    if p.shape[1] == d:
        p = np.concatenate([p, np.zeros((k, 1))], axis=1)
    return p


def _regression_targets(X, group, params, noise_std, rng) -> np.ndarray:
    w, b = params[:, :-1], params[:, -1]
    clean = np.einsum("nd,nd->n", X, w[group]) + b[group]
    return clean + noise_std * rng.standard_normal(X.shape[0])


def mixed_linear_regression(
    n_samples: int = 1000,
    n_features: int = 1,
    k: int = 4,
    noise_std: float = 0.1,
    seed: int = 0,
    *,
    weights: Sequence[float] | None = None,
    true_params=None,
    intercept: bool = True,
    x_range: tuple[float, float] = (-3.0, 3.0),
) -> RegressionData:
    """A d-dimensional mixture of k linear regressions, one group per sample.

    ``X ~ U[x_range]^d``; the group sizes are exact, in proportion to ``weights`` (balanced by default),
    shuffled; ``target = X . w_g + b_g + noise_std * N(0, 1)``. ``true_params`` (k, d) or (k, d + 1)
    fixes the models; otherwise slopes and intercepts are i.i.d. N(0, 1) (intercepts 0 when
    ``intercept=False``). Returns :class:`RegressionData` (``client`` is None: partition the samples
    with ``fedclust.partition`` or use :func:`mixed_regression_1d` for a per-client design).
    """
    n = check_int("n_samples", n_samples, 1)
    d = check_int("n_features", n_features, 1)
    k = check_int("k", k, 1)
    sd = check_number("noise_std", noise_std, ge=0)
    lo, hi = (float(v) for v in x_range)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"x_range must be (low, high) with low < high, got {x_range!r}")
    w = _check_weights(weights, k)
    rng = stream(seed, "data")
    params = _regression_params(true_params, k, d, rng)
    if not intercept and true_params is None:
        params[:, -1] = 0.0
    group = _labels_with_counts(_exact_counts(n, w), rng)
    X = rng.uniform(lo, hi, size=(n, d))
    target = _regression_targets(X, group, params, sd, rng)
    return RegressionData(
        X=X.astype(np.float32),
        target=target.astype(np.float32),
        group=group,
        true_params=params,
        noise_std=sd,
        meta={"weights": w, "x_range": (lo, hi), "seed": seed},
    )


#: Our four ground-truth lines (slope, intercept) for RR-Cluster's App. D.3 (the paper does not list them).
RR_CLUSTER_LINES = np.array([[-2.0, -3.0], [-0.5, -1.0], [0.5, 1.0], [2.0, 3.0]])

_SCENARIO_RATIOS = {"balanced": (1, 1, 1, 1), "imbalanced": (4, 2, 1, 1)}
_DIFFICULTY_STD = {"easy": 0.1, "hard": 1.0}


def mixed_regression_1d(
    scenario: str = "balanced",
    difficulty: str = "easy",
    seed: int = 0,
    *,
    n_clients: int = 100,
    n_per_client: int = 50,
    ratios: Sequence[float] | None = None,
    noise_std: float | None = None,
    true_params=None,
    x_range: tuple[float, float] = (-3.0, 3.0),
) -> RegressionData:
    """The 1-D mixed linear regression of RR-Cluster's App. D.3, with our choices where the paper is silent.

    Model: ``y_hat = k_g x + b_g + eps``, ``eps ~ N(0, sigma^2)``, ``x ~ U[-3, 3]``, with the 4 lines
    (k, b) in {(-2, -3), (-0.5, -1), (0.5, 1), (2, 3)} (:data:`RR_CLUSTER_LINES`).

    * ``scenario``: ``"balanced"`` (clients split 1:1:1:1 between the lines) or ``"imbalanced"``
      (4:2:1:1); ``ratios`` overrides it (one number per line).
    * ``difficulty``: ``"easy"`` (sigma = 0.1) or ``"hard"`` (sigma = 1.0); ``noise_std`` overrides it.
    * ``n_clients`` clients with ``n_per_client`` points each (defaults 100 and 50). Every client belongs
      to one group: exact client counts per group (largest remainders), assigned in random order.

    Returns :class:`RegressionData` with ``X`` (n_clients * n_per_client, 1), ``client`` (clients are
    contiguous blocks: sample i belongs to client ``i // n_per_client``), ``client_group`` and
    ``group = client_group[client]``.
    """
    if scenario not in _SCENARIO_RATIOS:
        raise ValueError(f"scenario must be one of {sorted(_SCENARIO_RATIOS)}, got {scenario!r}")
    if difficulty not in _DIFFICULTY_STD:
        raise ValueError(f"difficulty must be one of {sorted(_DIFFICULTY_STD)}, got {difficulty!r}")
    nc = check_int("n_clients", n_clients, 1)
    npc = check_int("n_per_client", n_per_client, 1)
    params = RR_CLUSTER_LINES if true_params is None else true_params
    params = _regression_params(params, np.shape(params)[0], 1, None)
    k = params.shape[0]
    w = _check_weights(
        ratios if ratios is not None else (_SCENARIO_RATIOS[scenario] if k == 4 else None), k, name="ratios"
    )
    sd = _DIFFICULTY_STD[difficulty] if noise_std is None else check_number("noise_std", noise_std, ge=0)
    lo, hi = (float(v) for v in x_range)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"x_range must be (low, high) with low < high, got {x_range!r}")
    rng = stream(seed, "data")

    client_group = _labels_with_counts(_exact_counts(nc, w), rng)
    client = np.repeat(np.arange(nc, dtype=np.int64), npc)
    group = client_group[client]
    X = rng.uniform(lo, hi, size=(nc * npc, 1))
    target = _regression_targets(X, group, params, sd, rng)
    return RegressionData(
        X=X.astype(np.float32),
        target=target.astype(np.float32),
        group=group,
        true_params=params,
        noise_std=sd,
        client=client,
        client_group=client_group,
        meta={
            "scenario": scenario,
            "difficulty": difficulty,
            "ratios": w,
            "n_clients": nc,
            "n_per_client": npc,
            "x_range": (lo, hi),
            "seed": seed,
        },
    )
