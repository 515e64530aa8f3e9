"""FedSC: federated spectral clustering via secure similarity reconstruction.

Paper: Dong Qiao, Chris Ding, Jicong Fan, "Federated Spectral Clustering via Secure Similarity
Reconstruction", NeurIPS 2023. The method, our choices where the paper is unclear and measured numbers
are in ``docs/methods/fedsc.md``.

Stage I (Algorithm 1, federated kernel factorization ``phi(X_p) ~ phi(Z) C_p``, eq. 6-8):

* objective ``f_p(Z, C_p) = 1/2 Tr K(X_p,X_p) - Tr(C_p^T K(Z,X_p)) + 1/2 Tr(C_p^T K(Z,Z) C_p)
  + lam/2 ||C_p||_F^2`` (eq. 8), Gaussian kernel with width ``r`` (eq. 40, or eq. 42 federated);
* C-step, closed form (eq. 14): ``(K_zz + lam I) C_p = K(Z, X_p)``. Every client receives the same Z, so
  all clients' right-hand sides are solved at once with ONE Cholesky factorization of ``K_zz + lam I``;
* Z-step from the gradient (eq. 15): ``dF/dZ = (X_p W - Z diag(1^T W))/r^2 + 2 (Z Q - Z diag(1^T Q))/r^2``,
  ``W = -C_p^T * K(X_p, Z)``, ``Q = 1/2 (C_p C_p^T) * K(Z, Z)``. ``z_step="official"`` takes the
  official code's preconditioned fixed-point step ``Z_p = Z - G tau^{-1}``,
  ``tau = (2Q - diag(1^T W + 2 1^T Q))/r^2`` (one step per round); ``z_step="gradient"``
  takes ``local_steps`` plain gradient steps (eq. 16) with a fixed ``z_lr`` or a backtracking 1/L.
  All clients' Z-steps run as batched matmuls / batched solves over a zero-padded (P, N_max, .) layout;
* server: plain mean of the participating clients' ``Z_p`` (eq. 11);
* final C, recomputed from the final Z: ``final_c="projection"`` (default)
  solves eq. (14) with a 1e-6 jitter instead of ``lam`` (the ridge cuts the small-eigenvalue directions
  of ``K_zz`` that carry the nearest-neighbour order; ``docs/methods/fedsc.md`` has the numbers);
  ``"paper"`` keeps ``lam``. ``run`` calls the stages in the order of Algorithm 1 (see its docstring).

Stage II (eq. 12, 23, 25): ``K_hat = C^T K(Z,Z) C``, global min-max to [0, 1], kNN with
``k = ceil(ln n)`` (self included), ``max(S, S^T)``, NJW spectral clustering (sparse eigsh, k-means with
50 restarts). K_hat is only ever formed in row blocks (see :mod:`fedclust.clustering.spectral`).
``graph`` swaps the paper's kNN graph for a connectivity-preserving one; Stage II reads only
the released Z and C, so any graph is post-processing.

Privacy variants (section 3 of the paper):

* perturbed data (eq. 22, Prop. 3.7): ``X~ = clip_tau(X) + N(0, sigma^2)`` with ``sigma = data_noise_std``
  or ``data_noise_beta * std(X)``; with ``clip_tau`` (rows clipped to ``||x|| <= tau_X``) and an absolute
  ``sigma`` the release is a :class:`~fedclust.privacy.events.GaussianRelease` with L2 sensitivity
  ``2 tau_X`` (replace-one; ``sqrt(2) tau_X`` when a non-negative feature domain is declared,
  :func:`data_sensitivity`), and everything after it (r, d, Stage I and II) is post-processing;
* perturbed factors (eq. 32, Thm 3.9): noise on every uploaded ``Z_p`` every round and on every ``C_p``
  once at the end (std absolute, or ``alpha * std(Z_p)`` / ``alpha * std(C_p)`` per client as the code
  does). With ``tau_c`` (column clip of C), ``z_step="gradient"``, a fixed ``z_lr`` and absolute stds
  the releases are Gaussian mechanisms with the per-sample sensitivities of
  :func:`factor_sensitivities` (``Delta_Z = 2 z_lr tau_c (1 + sqrt(d) tau_c)/(r sqrt(e))``,
  ``Delta_C = 2 tau_c``); ``tau_z`` clips the dictionaries in Frobenius norm (non-expansive). ``r`` and
  ``d`` must then be public: the data rules (eq. 40-43) on the raw data are a non-DP release.
Releases that are not DP mechanisms (noise scales from the data, unclipped inputs, a factor sent
without noise) are recorded with :func:`fedclust.privacy.events.non_dp_release`, so the run reports
epsilon = inf and names the step. Histories and scores computed from raw data are evaluation, not
releases (``info["privacy_notes"]`` says which outputs the guarantee covers).
The noise stds are inputs: calibration from (epsilon, delta) lives in the privacy layer.

Baselines: :func:`centralized_kmeans`, :func:`fedclust.clustering.spectral.spectral_clustering`
(vanilla SC), :mod:`fedclust.clustering.dsc`, :func:`attack_on_c`, and ``run`` with one client (P = 1).
Metrics: :func:`nmi_paper` is the paper-compatible NMI.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Callable, ClassVar

import numpy as np
import scipy.linalg
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans

from fedclust.clustering import spectral
from fedclust.clustering.base import ClusteringResult, check_inputs
from fedclust.metrics import clustering_scores, fit_centralized_kmeans
from fedclust.options import MethodConfig, param
from fedclust.privacy.accountants import calibrate_noise_multiplier
from fedclust.privacy.events import GaussianRelease, non_dp_release
from fedclust.progress import report as report_round
from fedclust.rng import stream, torch_seed

logger = logging.getLogger(__name__)

Z_STEPS = {"official": "official", "fixed_point": "official", "gradient": "gradient", "gd": "gradient"}
#: ``track_reconstruction=None`` logs the reconstruction error every round up to this n, else once.
TRACK_EVERY_ROUND_MAX_N = 2000
#: Memory budget of one batch of clients in the Z-step (the (P, d, d) temporaries grow as P d^2).
CHUNK_BYTES = 256 * 2**20
#: ``final_c``: "paper" = the final C solves the Stage I ridge (eq. 14 with ``lam``); "projection" = the
#: least-squares projection of phi(X) on span phi(Z) (eq. 14 with this jitter in place of ``lam``).
FINAL_C = ("projection", "paper")
#: Ridge jitter of ``final_c="projection"`` (K_zz has unit diagonal, so it is relative to K_zz's scale).
PROJECTION_JITTER = 1e-6
#: Who adds FedSC's noise: every client perturbs its own data or factors before they leave it.
TRUST_MODEL = "local"


# --------------------------------------------------------------------------- math of one client
def ridge_coefficients(Kzz: np.ndarray, Kzx: np.ndarray, lam: float) -> np.ndarray:
    """C-step, eq. (14): solve ``(K_zz + lam I) C = K_zx`` for all columns with one Cholesky factor."""
    A = Kzz + lam * np.eye(Kzz.shape[0])
    try:
        fac = scipy.linalg.cho_factor(A, lower=True, check_finite=False)
        return scipy.linalg.cho_solve(fac, Kzx, check_finite=False)
    except np.linalg.LinAlgError:  # lam = 0 and K_zz singular: least-squares solution
        return np.linalg.lstsq(A, Kzx, rcond=None)[0]


def local_objective(Z: np.ndarray, Xp: np.ndarray, Cp: np.ndarray, r: float, lam: float) -> float:
    """``f_p(Z, C_p)`` of eq. (8). Rows are samples / atoms: ``Z`` (d, m), ``Xp`` (N_p, m), ``Cp`` (d, N_p)."""
    Kzx = spectral.gaussian_kernel(Z, Xp, r)
    Kzz = spectral.gaussian_kernel(Z, Z, r)
    return float(0.5 * Xp.shape[0] - np.sum(Cp * Kzx) + 0.5 * np.sum(Cp * (Kzz @ Cp)) + 0.5 * lam * np.sum(Cp * Cp))


def z_gradient(Z: np.ndarray, Xp: np.ndarray, Cp: np.ndarray, r: float) -> np.ndarray:
    """``d f_p / d Z`` of eq. (15), returned in the row layout of ``Z`` (d, m) (the transpose of the
    paper's m x d formula). ``Xp`` (N_p, m), ``Cp`` (d, N_p)."""
    G, _ = _grad_and_tau(
        Z[None],
        Xp[None],
        Cp.T[None],
        spectral.gaussian_kernel(Xp, Z, r)[None],
        spectral.gaussian_kernel(Z, Z, r)[None],
        r * r,
    )
    return G[0]


# --------------------------------------------------------------------------- batched over clients
def _batched_kernel(A: np.ndarray, B: np.ndarray, r2: float) -> np.ndarray:
    """Gaussian kernel between the rows of ``A`` (P, a, m) and ``B`` (P, b, m), batched over P."""
    D = np.matmul(A, B.transpose(0, 2, 1))
    D *= -2.0
    D += np.einsum("pij,pij->pi", A, A)[:, :, None]
    D += np.einsum("pij,pij->pi", B, B)[:, None, :]
    np.maximum(D, 0.0, out=D)
    D *= -1.0 / (2.0 * r2)
    return np.exp(D, out=D)


def _grad_and_tau(Zb, Xpad, Cpad, Kxz, Kzz, r2, gradient: bool = True):
    """Gradient (eq. 15) and the official preconditioner tau for P clients at once.

    Zb (P, d, m) client dictionaries; Xpad (P, N, m) zero-padded client data; Cpad (P, N, d) = C_p^T,
    zero on padding rows (so padding contributes nothing); Kxz (P, N, d); Kzz (P, d, d) or (1, d, d).
    Returns G (P, d, m) = (1/r^2) W^T X_p + tau Z_p and tau (P, d, d) (symmetric); with
    ``gradient=False`` the first output is ``W^T X_p`` instead of G (all the official step needs).
    """
    W = -Cpad * Kxz  # (P, N, d)   W_Z
    WX = np.matmul(W.transpose(0, 2, 1), Xpad)  # (P, d, m)   (X_p W_Z)^T
    wsum = W.sum(axis=1)  # (P, d)      1^T W_Z
    Q = np.matmul(Cpad.transpose(0, 2, 1), Cpad)  # (P, d, d)   C_p C_p^T
    Q *= Kzz
    Q *= 0.5  #             Q_Z
    qsum = Q.sum(axis=2)  # (P, d)      1^T Q_Z (Q symmetric)
    tau = 2.0 * Q
    idx = np.arange(tau.shape[1])
    tau[:, idx, idx] -= wsum + 2.0 * qsum
    tau /= r2
    if not gradient:
        return WX, tau
    G = WX / r2 + np.matmul(tau, Zb)
    return G, tau


def _dot(A: np.ndarray, B: np.ndarray) -> float:
    """``sum(A * B)`` without the elementwise temporary."""
    if A.flags.c_contiguous and B.flags.c_contiguous:
        return float(np.dot(A.ravel(), B.ravel()))
    return float(np.einsum("ij,ij->", A, B))


def official_z_steps(Z, Xpad, Cpad, Kxz, Kzz, r2, chunk_bytes: int | None = None):
    """The official code's preconditioned Z-step for P clients that all start from the
    server's ``Z`` (d, m): ``Z_p = Z - G_p tau_p^{-1}``, computed as the frozen-weight stationary point
    ``-tau_p^{-1} W_p^T X_p / r^2`` (identical; skips the ``tau Z`` product). Inputs as in
    :func:`_grad_and_tau` (zero-padded, (P, N_max, .)); ``Kzz`` (d, d). Clients are processed as one
    batch, split into chunks only to bound the (chunk, d, d) temporaries to ``chunk_bytes``."""
    P, Nmax, m = Xpad.shape
    d = Z.shape[0]
    budget = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    chunk = max(1, int(budget // (8 * (3 * d * d + 2 * Nmax * (d + m) + 2 * d * m))))
    out = np.empty((P, d, m))
    for c0 in range(0, P, chunk):
        sl = slice(c0, min(P, c0 + chunk))
        Zb = np.broadcast_to(Z, (sl.stop - sl.start, d, m))
        WX, tau = _grad_and_tau(Zb, Xpad[sl], Cpad[sl], Kxz[sl], Kzz[None], r2, gradient=False)
        out[sl] = _solve_tau(tau, WX) * (-1.0 / r2)
    return out


def _batched_objective(Zb, Xpad, Cpad, sizes, r2, lam):
    """``f_p(Z_p, C_p)`` (eq. 8) for all clients: (P,)."""
    Kxz = _batched_kernel(Xpad, Zb, r2)
    Kzz = _batched_kernel(Zb, Zb, r2)
    CC = np.matmul(Cpad.transpose(0, 2, 1), Cpad)
    return (
        0.5 * sizes
        - np.einsum("pnd,pnd->p", Cpad, Kxz)
        + 0.5 * np.einsum("pij,pij->p", CC, Kzz)
        + 0.5 * lam * np.einsum("pnd,pnd->p", Cpad, Cpad)
    )


def _solve_tau(tau, G):
    """``tau^{-1} G`` for every client (batched); clients whose tau is singular fall back to a
    least-squares solve (a rare failure path, so a loop over those clients is fine)."""
    try:
        Y = np.linalg.solve(tau, G)
        if np.all(np.isfinite(Y)):
            return Y
    except np.linalg.LinAlgError:
        pass
    Y = np.empty_like(G)
    for p in range(tau.shape[0]):
        Y[p] = np.linalg.lstsq(tau[p], G[p], rcond=None)[0]
    return Y


def clip_frobenius(Z, tau_z):
    """Scale each (d, m) dictionary down to Frobenius norm <= ``tau_z`` (batched over a leading axis).

    This is the Euclidean projection onto the Frobenius ball, so it is non-expansive:
    ``||clip(A) - clip(B)||_F <= ||A - B||_F``, and a sensitivity bound on the input holds for the
    output. It also enforces the Thm 3.9 assumption ``||Z||_sp <= ||Z||_F <= tau_z``. (A rescaling
    to spectral norm <= tau_z, which this replaces, is not non-expansive in the Frobenius norm: it can
    stretch distances by up to ``sqrt(rank - 1)``.)"""
    if tau_z is None:
        return Z
    single = Z.ndim == 2
    Zb = Z[None] if single else Z
    norms = np.sqrt(np.einsum("pij,pij->p", Zb, Zb))
    Zb = Zb * np.minimum(1.0, tau_z / np.maximum(norms, 1e-300))[:, None, None]
    return Zb[0] if single else Zb


def _clip_columns(C, tau_c):
    """Columns of C (one per sample) scaled down to L2 norm <= ``tau_c`` (non-expansive per column)."""
    if tau_c is None:
        return C
    norms = np.linalg.norm(C, axis=0)
    return C * np.minimum(1.0, tau_c / np.maximum(norms, 1e-300))[None, :]


# --------------------------------------------------------------------------- privacy helpers
def clip_rows(X: np.ndarray, tau: float) -> np.ndarray:
    """Rows of X scaled down to L2 norm <= tau (the tau_X bound of Prop. 3.7 / Thm 3.9)."""
    norms = np.linalg.norm(X, axis=1)
    return X * np.minimum(1.0, tau / np.maximum(norms, 1e-300))[:, None]


def check_domain(domain) -> tuple[float, float] | None:
    """A declared feature domain ``[low, high]`` (``low < high``, finite) as a pair of floats; None stays None."""
    if domain is None:
        return None
    try:
        low, high = (float(v) for v in domain)
    except (TypeError, ValueError):
        raise ValueError(f"data_domain must be [low, high], got {domain!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"data_domain must be [low, high] with finite low < high, got {domain!r}")
    return low, high


def bound_rows(X: np.ndarray, clip_tau: float | None, domain=None) -> np.ndarray:
    """What the perturbed-data release adds its noise to: every coordinate projected onto the declared
    ``domain`` [low, high] (when given; the identity on data that respect it), then every row scaled
    down to ``||x|| <= clip_tau`` (when given)."""
    dom = check_domain(domain)
    if dom is not None:
        X = np.clip(X, dom[0], dom[1])
    if clip_tau is not None:
        X = clip_rows(X, clip_tau)
    return X


def data_sensitivity(clip_tau: float, m: int, domain=None) -> float:
    """L2 sensitivity (replace-one) of the rows :func:`bound_rows` returns: the largest distance of
    two of them.

    * No declared domain (the paper, Prop. 3.7): ``2 tau_X``, two opposite points of the ball.
    * A domain with ``low >= 0``: both rows lie in the non-negative orthant (scaling towards the
      origin keeps them there), so ``x . x' >= 0`` and ``||x - x'||^2 = ||x||^2 + ||x'||^2 - 2 x . x'
      <= 2 tau_X^2``: ``sqrt(2) tau_X``.
    * A domain with ``low <= 0 <= high``: the row clip keeps the rows in the box, whose diameter is
      ``sqrt(m) (high - low)``.

    The smallest bound that applies is returned; all read public inputs only (the clip, the
    dimension and the declared domain)."""
    tau = float(clip_tau)
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"clip_tau must be a finite number > 0, got {clip_tau!r}")
    bound = 2.0 * tau
    dom = check_domain(domain)
    if dom is not None:
        low, high = dom
        if low >= 0.0:
            bound = min(bound, math.sqrt(2.0) * tau)
        if low <= 0.0 <= high:
            bound = min(bound, math.sqrt(m) * (high - low))
    return bound


def public_clip(m: int, domain) -> float:
    """A row clip that reads no data: half the largest norm of a point of the declared domain,
    ``sqrt(m) max(|low|, |high|) / 2`` (``sqrt(m) / 2`` on [0, 1]^m)."""
    low, high = check_domain(domain)
    return 0.5 * math.sqrt(m) * max(abs(low), abs(high))


def perturb_data(
    X: np.ndarray, clip_tau: float | None, sigma: float, rng: np.random.Generator, domain=None
) -> np.ndarray:
    """The perturbed-data release (eq. 22): ``bound(X) + N(0, sigma^2)`` entrywise, where ``bound``
    (:func:`bound_rows`) projects onto the declared ``domain`` (when given) and clips rows to ``clip_tau``.

    Replacing one sample moves the release by at most :func:`data_sensitivity` in L2 (``2 tau_X``
    without a domain, Prop. 3.7), so it is a Gaussian mechanism with noise multiplier
    ``sigma / sensitivity``."""
    X = bound_rows(X, clip_tau, domain)
    if sigma > 0:
        X = X + sigma * rng.standard_normal(X.shape)
    return X


#: ``max_t t exp(-t^2 / (2 r^2)) = r e^{-1/2}``: the largest value of ``K(a, b) ||a - b||``.
_KERNEL_DISTANCE_MAX = math.exp(-0.5)


def factor_sensitivities(
    *,
    d: int,
    r: float,
    tau_c: float,
    z_lr: float,
    lam: float | None = None,
    tau_x: float | None = None,
    tau_z: float | None = None,
    upsilon: float | None = None,
) -> dict[str, float]:
    """L2 sensitivities of the perturbed-factor releases under replace-one (sample-level) neighbours.

    The accountant uses the bounds ``"z"`` and ``"c"``, which need only the public ``d``, ``r``,
    ``tau_c`` (column clip of C) and the fixed step ``z_lr``:

    * C-step (eq. 14) is column-separable: ``c_i = clip_{tau_c}((K_zz + lam I)^{-1} K(Z, x_i))`` depends
      on sample i alone, so replacing it moves the released C by ``Delta_C = 2 tau_c``;
    * the gradient (eq. 15) is a sum of per-sample terms; row j of sample i's term is
      ``(c_ij / r^2)(-K(z_j, x_i)(x_i - z_j) + sum_k c_ik K(z_j, z_k)(z_k - z_j))`` and
      ``K(a, b) ||a - b|| <= r e^{-1/2}``, so each term has Frobenius norm at most
      ``B = tau_c (1 + sqrt(d) tau_c) / (r sqrt(e))``; one plain step ``Z - eta G_p`` followed by the
      non-expansive :func:`clip_frobenius` moves by ``Delta_Z = 2 eta B``.

    When ``lam``, ``tau_x`` and ``tau_z`` are given, the paper's Theorem 3.9 values are added for
    reference as ``"z_paper"`` and ``"c_paper"`` (``Upsilon = tau_z + tau_x`` unless given):
    ``(2 sqrt(d) tau_C tau_X eta / r^2)(1 + (tau_X + tau_Z)(tau_X + Upsilon)/r^2)`` and
    ``2 sqrt(d) tau_X (tau_X + Upsilon) / (lam r^2)``. They are not used for accounting.
    """
    for name, v in (("d", d), ("r", r), ("tau_c", tau_c), ("z_lr", z_lr)):
        if v is None or not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0 for the perturbed-factor sensitivities, got {v!r}")
    per_sample = tau_c * (1.0 + math.sqrt(d) * tau_c) * _KERNEL_DISTANCE_MAX / r
    out = {"z": 2.0 * z_lr * per_sample, "c": 2.0 * tau_c, "z_per_sample": per_sample}
    if lam is not None and tau_x is not None and tau_z is not None:
        for name, v in (("lam", lam), ("tau_x", tau_x), ("tau_z", tau_z)):
            if not v > 0:
                raise ValueError(f"{name} must be > 0 for the Theorem 3.9 sensitivities, got {v!r}")
        ups = tau_z + tau_x if upsilon is None else float(upsilon)
        r2 = r * r
        out["upsilon"] = ups
        out["z_paper"] = 2.0 * math.sqrt(d) * tau_c * tau_x * z_lr / r2 * (1.0 + (tau_x + tau_z) * (tau_x + ups) / r2)
        out["c_paper"] = 2.0 * math.sqrt(d) * tau_x * (tau_x + ups) / (lam * r2)
    return out


def factor_noise_stds(
    epsilon: float,
    delta: float,
    *,
    rounds: int,
    d: int,
    r: float,
    tau_c: float,
    z_lr: float,
    share_z: float = 0.5,
    accountant: str = "rdp",
) -> dict[str, float]:
    """Noise stds of the perturbed-factor variant calibrated by the accountant to (epsilon, delta).

    The run makes ``rounds - 1`` data-dependent Z uploads and one C upload, Gaussian mechanisms with
    the sensitivities of :func:`factor_sensitivities`. Gaussian releases compose exactly through
    ``sum_i 1/z_i^2`` (the same RDP curve and privacy-loss distribution as one Gaussian with
    ``1/z^2 = sum_i 1/z_i^2``), so one Gaussian is calibrated to the budget and Z gets the share
    ``share_z`` of ``1/z^2`` (split evenly over its uploads), C the rest (all of it when rounds = 1).
    Returns ``{"z_noise_std", "c_noise_std", "z_multiplier", "c_multiplier", "sensitivity_z", "sensitivity_c"}``.
    """

    if not 0.0 < share_z < 1.0:
        raise ValueError(f"share_z must be in (0, 1), got {share_z!r}")
    if not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    sens = factor_sensitivities(d=d, r=r, tau_c=tau_c, z_lr=z_lr)
    z_eff = calibrate_noise_multiplier(epsilon, delta, steps=1, accountant=accountant)
    z_rounds = int(rounds) - 1
    z_z = z_eff * math.sqrt(z_rounds / share_z) if z_rounds > 0 else 0.0
    z_c = z_eff / math.sqrt(1.0 - share_z) if z_rounds > 0 else z_eff
    return {
        "z_noise_std": z_z * sens["z"],
        "c_noise_std": z_c * sens["c"],
        "z_multiplier": z_z,
        "c_multiplier": z_c,
        "sensitivity_z": sens["z"],
        "sensitivity_c": sens["c"],
    }


def public_kernel_width(m: int, clip_tau: float | None = None) -> float:
    """A kernel width that reads no data: ``sqrt(m / 6)``, the root mean squared distance of two
    independent uniform points of the public domain ``[0, 1]^m`` (min-max scaled data; the paper's
    rule, eq. 40, is the mean distance of the data), capped at ``clip_tau`` when given."""
    r = math.sqrt(m / 6.0)
    return float(min(r, clip_tau)) if clip_tau is not None else float(r)


def public_dictionary_size(m: int, k: int, cap: int = 50) -> int:
    """A dictionary size that reads no data: ``d = 2 m`` (the ``d = gamma m`` rule of thumb of App. D.3),
    at least ``k`` and at most ``cap`` (the factor noise grows like ``sqrt(d)``)."""
    return int(max(k, min(2 * m, cap)))


# --------------------------------------------------------------------------- metrics / baselines
def nmi_paper(y, pred) -> float:
    """The paper-compatible NMI: the official ``getNMI`` after ``bestMap``.

    True labels are compacted to 0..C-1; predicted clusters are mapped to true label values by the
    best one-to-one matching (Hungarian); then every sample labelled 0 (true or mapped) is left out of
    the mutual information and of both entropies, while the counts and N stay those of all samples:
    ``NMI = -2 sum_{i,j>=1} N_ij ln(N N_ij / (N_i. N_.j)) / (sum_{i>=1} N_i. ln(N_i./N) + sum_{j>=1} N_.j ln(N_.j/N))``.
    """

    y = np.asarray(y).ravel()
    pred = np.asarray(pred).ravel()
    if y.shape != pred.shape:
        raise ValueError(f"y and pred differ in length: {y.shape[0]} vs {pred.shape[0]}")
    _, a = np.unique(y, return_inverse=True)
    _, b = np.unique(pred, return_inverse=True)
    na, nb = a.max() + 1, b.max() + 1
    T = np.zeros((nb, na), dtype=np.int64)
    np.add.at(T, (b, a), 1)
    rows, cols = linear_sum_assignment(T, maximize=True)
    mapping = np.arange(nb) + na  # unmatched clusters get fresh (nonzero) values
    mapping[rows] = cols
    bm = mapping[b]
    N = float(len(a))
    nv = max(na, bm.max() + 1)
    J = np.zeros((nv, nv))
    np.add.at(J, (a, bm), 1.0)
    Ni, Nj = J.sum(1), J.sum(0)
    J, Ni, Nj = J[1:, 1:], Ni[1:], Nj[1:]  # drop the value 0
    with np.errstate(divide="ignore", invalid="ignore"):
        mi = np.where(J > 0, J * np.log(N * J / np.outer(Ni, Nj)), 0.0).sum()
        h = np.where(Ni > 0, Ni * np.log(Ni / N), 0.0).sum() + np.where(Nj > 0, Nj * np.log(Nj / N), 0.0).sum()
    if h == 0:
        return 1.0 if mi == 0 else float("nan")
    return float(-2.0 * mi / h)


def centralized_kmeans(X, k: int, *, seed: int = 0, n_init: int = 5, y=None) -> ClusteringResult:
    """Baseline (a): centralized k-means (k-means++, ``n_init`` restarts; the code uses 5)."""
    X, _, _ = check_inputs(X, np.zeros(np.asarray(X).shape[0], dtype=np.int64), k)
    km = fit_centralized_kmeans(X, k, seed=seed, restarts=n_init)
    labels = km.labels_.astype(np.int64)
    info = _scores(y, labels) if y is not None else {}
    return ClusteringResult(labels=labels, centroids=km.cluster_centers_, info=info)


def attack_on_c(C: np.ndarray, k: int, *, seed: int = 0, n_init: int = 5) -> np.ndarray:
    """Baseline (d), "attack on C" (App. D.4, Table 6): k-means on the columns of the uploaded C (d, n)."""
    km = KMeans(n_clusters=k, n_init=n_init, random_state=torch_seed(stream(seed, "attack")) % (2**31 - 1))
    return km.fit_predict(np.asarray(C, dtype=np.float64).T).astype(np.int64)


def _scores(y, labels) -> dict[str, float]:

    out = clustering_scores(y, labels)
    out["NMI_paper"] = nmi_paper(y, labels)
    return out


# --------------------------------------------------------------------------- Stage II
def reconstruct_and_cluster(
    Z: np.ndarray,
    C: np.ndarray,
    k: int,
    r: float,
    *,
    seed: int = 0,
    knn: int | None = None,
    include_self: bool = True,
    n_init: int = 50,
    solver: str = "arpack",
    X_ref: np.ndarray | None = None,
    graph: str = "min_connected_k",
    graph_info: dict | None = None,
) -> tuple[np.ndarray, float | None]:
    """Stage II: ``K_hat = C^T K(Z,Z) C`` in row blocks -> global min-max -> kNN (self included) ->
    max-symmetrize -> NJW. Returns ``(labels, reconstruction_error)``; the error
    ``||K_hat - K(X_ref, X_ref)||_F / ||K||_F`` is accumulated in the first pass when ``X_ref`` is given.
    ``graph`` (``"paper"``, ``"min_connected_k"``, ``"mst"``) is passed to
    :func:`fedclust.clustering.spectral.build_graph`, which warns when the graph has more than ``k``
    components; ``graph_info`` (a dict) receives its report (k used, components)."""
    n = C.shape[1]
    B = spectral.gaussian_kernel(Z, Z, r) @ C  # (d, n)
    acc = [0.0, 0.0]

    first_pass = [True]  # mst (and min_connected_k when it widens its search) read the rows again: count once

    def rows(s, e):
        Kh = C[:, s:e].T @ B
        if X_ref is not None and first_pass[0]:
            K = spectral.gaussian_kernel(X_ref[s:e], X_ref, r)
            acc[0] += float(np.sum((Kh - K) ** 2))
            acc[1] += float(np.sum(K * K))
            if e == n:
                first_pass[0] = False
        return Kh

    W, ginfo = spectral.build_graph(rows, n, k, graph=graph, k=knn, include_self=include_self, minmax=True)
    if graph_info is not None:
        graph_info.update(ginfo)
    labels = spectral.njw(W, k, seed=seed, n_init=n_init, solver=solver)
    err = math.sqrt(acc[0] / acc[1]) if X_ref is not None else None
    return labels, err


def reconstruction_error(Z: np.ndarray, C: np.ndarray, X: np.ndarray, r: float) -> float:
    """``||C^T K(Z,Z) C - K(X,X)||_F / ||K(X,X)||_F``, computed in row blocks (O(block * n) memory)."""
    B = spectral.gaussian_kernel(Z, Z, r) @ C
    num = den = 0.0
    for s, e in spectral._row_blocks(X.shape[0], X.shape[0]):
        K = spectral.gaussian_kernel(X[s:e], X, r)
        num += float(np.sum((C[:, s:e].T @ B - K) ** 2))
        den += float(np.sum(K * K))
    return math.sqrt(num / den)


# --------------------------------------------------------------------------- FedSC: options
@dataclasses.dataclass(frozen=True)
class FedSCOptions(MethodConfig):
    """FedSC's options (defaults: the paper's where it gives them, ours elsewhere).

    * ``rounds`` S = 20; ``d``: dictionary size, None = eigenvalue rule with ``d_tol`` = 0.99 (eq. 43)
      on the clustered (noisy) data; ``d_max`` caps the rule's d (not in the paper: the rule gives
      d = 2703 on the MNIST test set (8000-sample subsample), where Stage I then costs
      O(P d^3 + n d^2) per round, about 13 s per round on one core); ``r``: kernel width, None =
      ``r_rule`` "global" (eq. 40, code) or "federated" (eq. 42); ``lam`` = 1e-3 (code; the paper
      says 1e-2).
    * ``z_step``: "official" (alias "fixed_point"; one preconditioned step) or "gradient"
      (alias "gd"; ``local_steps`` gradient steps with step ``z_lr``, or 1/L by backtracking when None).
    * ``participation``: fraction of clients that upload each round (P_bar = round(participation * P) >= 1).
    * perturbed data: ``data_noise_std`` (sigma) or ``data_noise_beta`` (sigma = beta * std(X));
      ``clip_tau``: clip every row to norm <= tau_X first (Prop. 3.7). Only ``clip_tau`` with an absolute
      ``data_noise_std`` is DP (:func:`perturb_data`); r, d and everything else are then computed from
      the perturbed data (post-processing). ``data_noise_beta`` (noise scale from the data) or no clip
      is recorded as a non-DP release (epsilon = inf). ``data_domain`` [low, high] declares the feature
      domain: coordinates are projected onto it before the row clip (the identity on data that respect
      it) and the sensitivity shrinks from the paper's ``2 tau_X`` to the bound of
      :func:`data_sensitivity` (``sqrt(2) tau_X`` when ``low >= 0``).
    * perturbed factors: ``z_noise_std`` or ``z_noise_alpha`` (std = alpha * std(Z_p) per client and
      round), ``c_noise_std`` or ``c_noise_alpha`` (std = alpha * std(C_p) per client, once).
      ``tau_c`` clips every column of C to ``||c_i|| <= tau_c`` and ``tau_z`` every dictionary to
      ``||Z||_F <= tau_z`` (:func:`clip_frobenius`, non-expansive; implies the Thm 3.9 bound on
      ``||Z||_sp``). Absolute stds with ``tau_c`` ask for a DP run: the Z uploads then need
      ``z_step="gradient"``, a fixed ``z_lr`` and ``local_steps=1`` (else an error) and are
      accounted with :func:`factor_sensitivities`; ``r`` and ``d`` must then be given (public), the
      data rules make the run report epsilon = inf. alpha-relative noise, no noise on one of the
      factors, or no ``tau_c`` are recorded as non-DP releases (epsilon = inf, step named).
    * ``return_uploads``: put the released arrays in ``info["uploads"]`` (``X_released``/``X_clipped``;
      ``Z_released``/``Z_clean`` per data-dependent round, each (P_bar, d, m); ``Z_server`` per round;
      ``C_released``/``C_clean``), for tests and audits. ``cluster=False`` stops after Stage I and the
      releases (labels all -1).
    * Stage II: ``knn`` (None = ceil(ln n)), ``include_self``, ``n_init`` = 50, ``eigen_solver``;
      ``graph``: ``"min_connected_k"`` (default: the smallest k >= ``knn`` that leaves fewer
      connected components than clusters; the paper's k whenever its graph is connected enough),
      ``"paper"`` (the kNN graph of eq. 25 with k = ``knn``, as the paper) or ``"mst"`` (the
      kNN graph joined by a spanning tree of its components); see
      :func:`fedclust.clustering.spectral.build_graph`. A graph with more than ``k``
      components is warned about; ``info`` gets ``knn_k`` (used), ``graph_components`` and
      ``graph_components_paper``.
    * ``final_c``: the C-step that produces the C sent to Stage II (recomputed from the final Z).
      ``"projection"`` (default): ridge weight :data:`PROJECTION_JITTER` = 1e-6 instead of
      ``lam``, i.e. the least-squares projection of phi(X) on span phi(Z): ``lam`` = 1e-3 cuts the
      directions of K_zz with eigenvalues below 1e-3 (about 50 of d = 287 on digits), which carry the
      nearest-neighbour order that the kNN graph needs. ``"paper"``: the Stage I ridge with ``lam``
      (the paper and code). The perturbed-factor variant (factor noise or ``tau_c``) and
      ``code_compat_pairing`` always use ``"paper"`` (the released C and Theorem 3.9's bounds are defined
      with ``lam``); ``info["final_c"]`` says which was used. Stage I itself always uses ``lam``.
    * ``code_compat_pairing``: return the code's (Z^S, C^{S-1}) pairing instead of C recomputed from
      the final Z. ``track_reconstruction``: log ``||K_hat - K||_F/||K||_F`` every round
      (True), only once at the end (False), or every round when n <= 2000 (None). Needs no n x n memory.
    * ``attack``: also run the "attack on C" and put its labels in ``info["attack_on_c_labels"]``;
      ``return_factors``: put ``Z`` (d, m) and ``C`` (d, n) (as uploaded, noise included) in ``info``.
    """

    GROUP: ClassVar[str] = "fedsc"
    seed: int = param(0, "int", doc="seed of every random stream of the run", conf=False)
    rounds: int = param(20, "int", count=True, doc="Stage I rounds S", loop="round")
    d: int | None = param(None, "int", count=True, doc="dictionary size (None: the eigenvalue rule)")
    d_tol: float = param(0.99, "float", gt=0, le=1, doc="energy kept by the eigenvalue rule of d")
    d_max: int | None = param(None, "int", count=True, doc="cap on the rule's d", conf_default=500)
    r: float | None = param(None, "float", gt=0, doc="kernel width (None: r_rule)")
    r_rule: str = param("global", "str", choices=("global", "federated"), doc="eq. 40 (global) or eq. 42", conf=False)
    lam: float = param(1e-3, "float", gt=0, doc="ridge weight of the C-step")
    z_step: str = param("official", "str", choices=tuple(Z_STEPS), doc="official | gradient (aliases allowed)")
    local_steps: int = param(1, "int", count=True, doc="gradient steps per round", conf=False)
    z_lr: float | None = param(None, "float", gt=0, doc="gradient step (None: 1/L by backtracking)")
    participation: float = param(1.0, "float", gt=0, le=1, doc="fraction of clients uploading per round")
    data_noise_std: float = param(0.0, "float", ge=0, doc="sigma of the perturbed data", conf=False)
    data_noise_beta: float = param(0.0, "float", ge=0, doc="sigma = beta std(X) (not DP)")
    clip_tau: float | None = param(None, "float", gt=0, doc="row clip before the data noise")
    data_domain: list | None = param(
        None,
        "list",
        doc="declared feature domain [low, high] (None: none declared, the paper's 2 tau_X sensitivity)",
        conf_default=[0.0, 1.0],
    )
    z_noise_std: float = param(0.0, "float", ge=0, doc="std of the noise on every Z_p upload", conf=False)
    z_noise_alpha: float = param(0.0, "float", ge=0, doc="std = alpha std(Z_p) (not DP)")
    c_noise_std: float = param(0.0, "float", ge=0, doc="std of the noise on every C_p upload", conf=False)
    c_noise_alpha: float = param(0.0, "float", ge=0, doc="std = alpha std(C_p) (not DP)")
    tau_z: float | None = param(None, "float", gt=0, doc="Frobenius clip of every dictionary")
    tau_c: float | None = param(None, "float", gt=0, doc="clip of every column of C")
    knn: int | None = param(None, "int", count=True, doc="kNN k of the graph (None: ceil(ln n))", conf=False)
    include_self: bool = param(True, "bool", doc="a point is its own neighbour", conf=False)
    n_init: int = param(50, "int", count=True, doc="k-means restarts of the spectral embedding", loop="once")
    eigen_solver: str = param("arpack", "str", doc="eigen-solver of the spectral embedding", conf=False)
    graph: str = param("min_connected_k", "str", choices=spectral.GRAPHS, doc="the kNN graph rule")
    final_c: str = param("projection", "str", choices=FINAL_C, doc="the C sent to Stage II")
    code_compat_pairing: bool = param(False, "bool", doc="the code's (Z^S, C^{S-1}) pairing", conf=False)
    track_reconstruction: bool | None = param(
        None, "bool", doc="reconstruction error every round / at the end", conf=False
    )
    attack: bool = param(False, "bool", doc="also run the attack on C", conf=False)
    return_factors: bool = param(False, "bool", doc="put Z and C in info", conf=False)
    return_uploads: bool = param(False, "bool", doc="put the released arrays in info['uploads']", conf=False)
    cluster: bool = param(True, "bool", doc="run Stage II (False: labels all -1)", conf=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "z_step", Z_STEPS[self.z_step])  # canonical name of an alias

    def problems(self, where: str) -> list[str]:
        found = []
        try:
            check_domain(self.data_domain)
        except ValueError as e:
            found.append(f"{where}.{e}")
        step = Z_STEPS.get(self.z_step, self.z_step)
        if step == "official" and self.local_steps != 1:
            found.append(f"{where}.local_steps must be 1 with z_step='official' (one fixed-point step per round)")
        for a, b in (
            ("data_noise_std", "data_noise_beta"),
            ("z_noise_std", "z_noise_alpha"),
            ("c_noise_std", "c_noise_alpha"),
        ):
            if getattr(self, a) and getattr(self, b):
                found.append(f"{where}: give at most one of {a} and {b} (both are > 0)")
        # the perturbed-factor variant is asked for as DP by absolute noise stds with a column clip tau_c
        if (
            self.z_noise_std > 0
            and self.tau_c is not None
            and not (step == "gradient" and self.z_lr is not None and self.local_steps == 1)
        ):
            found.append(
                "z_noise_std with tau_c asks for differentially private Z uploads, which needs z_step='gradient', a "
                "fixed z_lr > 0 and local_steps=1 (the sensitivity bound covers one plain gradient step; the code's "
                "matrix-preconditioned step has no bounded sensitivity)"
            )
        return found


# --------------------------------------------------------------------------- FedSC: the stages of Algorithm 1
def privatize_data(X, *, clip_tau, data_noise_std, data_noise_beta, seed, uploads=None, domain=None):
    """Privacy variant "perturbed data" (eq. 22, Prop. 3.7), applied before anything else.

    Returns ``(X~, sigma, is_dp, events, notes)``: ``X~ = bound(X) + N(0, sigma^2)`` with
    ``sigma = data_noise_std`` or ``data_noise_beta * std(X)``, ``bound`` = :func:`bound_rows` (the
    declared ``domain``, then rows clipped to ``clip_tau``). Only rows clipped to ``clip_tau`` with an
    absolute std are a Gaussian mechanism (sensitivity :func:`data_sensitivity`: ``2 tau_X`` without a
    domain, ``sqrt(2) tau_X`` on a non-negative one; replace-one, local trust: each client adds the
    noise to its own rows); a data-dependent std or unclipped rows are recorded as a non-DP release.
    ``uploads`` (a dict) receives ``X_clipped`` and ``X_released``."""
    events, notes = [], []
    X_bounded = bound_rows(X, clip_tau, domain)
    sigma_x = data_noise_std or (data_noise_beta * float(X_bounded.std()))
    if uploads is not None:
        uploads["X_clipped"] = X_bounded
    X = perturb_data(X, clip_tau, sigma_x, stream(seed, "noise"), domain)
    data_dp = clip_tau is not None and data_noise_std > 0
    if data_dp:
        sens = data_sensitivity(clip_tau, X.shape[1], domain)
        dom = check_domain(domain)
        events.append(
            GaussianRelease(
                noise_multipliers=(sigma_x / sens,),
                count=1,
                neighbouring="replace_one",
                unit="sample",
                label="fedsc_perturbed_data",
                extra={
                    "sensitivity": sens,
                    "std": sigma_x,
                    "clip_tau": clip_tau,
                    "data_domain": list(dom) if dom else None,
                    "std_rule": "absolute",
                    "trust_model": TRUST_MODEL,
                },
            )
        )
        where = f"coordinates projected onto the declared domain {list(dom)}, " if dom else ""
        notes.append(
            f"perturbed data (Prop. 3.7): {where}rows clipped to tau_X={clip_tau:g}, Gaussian noise std "
            f"{sigma_x:.6g} (L2 sensitivity {sens:.6g}, replace-one, added by each client: local trust); r, d, "
            "the factors, K_hat and the labels are computed from the perturbed data (post-processing, covered by "
            "the guarantee)"
        )
    elif sigma_x > 0:
        why = (
            "its noise std is beta * std(X), computed from the private data"
            if data_noise_beta
            else "the rows are not clipped (no clip_tau), so the sensitivity is unbounded"
        )
        events.append(non_dp_release(f"fedsc perturbed data: {why}", neighbouring="replace_one"))
    if uploads is not None:
        uploads["X_released"] = X
    return X, sigma_x, data_dp, events, notes


def kernel_constants(X, client, o: FedSCOptions, *, on_private_data, perturbed, info, events):
    """The kernel width ``r`` (eq. 40 global / eq. 42 federated) and the dictionary size ``d`` (eq. 43,
    capped at ``d_max``), each computed only when not given in the options ``o``. They are computed centrally on the clustered
    data, as in the paper's experiments; ``on_private_data`` (factor releases of raw data) records each
    data rule as a non-DP release. Fills ``info`` (``r_source``, ``d_rule``, ``d_source``)."""
    r, d, r_rule = o.r, o.d, o.r_rule
    data_rng = stream(o.seed, "data")
    src = "perturbed" if perturbed else "raw"
    if r is None:
        r = (
            spectral.mean_pairwise_distance(X, rng=data_rng)
            if r_rule == "global"
            else spectral.federated_mean_distance(X, client, rng=data_rng)
        )
        info["r_source"] = f"rule eq. {40 if r_rule == 'global' else 42} on the {src} data"
        if on_private_data:
            events.append(
                non_dp_release(
                    "fedsc kernel width r computed from the private data (eq. 40/42); pass a public r",
                    neighbouring="replace_one",
                )
            )
    else:
        info["r_source"] = "given"
    if d is None:
        d = spectral.eigen_rank(X, r, tol=o.d_tol, rng=data_rng)
        info["d_rule"] = int(d)
        if o.d_max is not None:
            d = min(d, o.d_max)
        info["d_source"] = f"rule eq. 43 on the {src} data"
        if on_private_data:
            events.append(
                non_dp_release(
                    "fedsc dictionary size d computed from the private data (eq. 43); pass a public d",
                    neighbouring="replace_one",
                )
            )
    else:
        info["d_source"] = "given"
    return r, d


class ClientLayout:
    """The clients' samples in a zero-padded (P, N_max, .) layout, for the batched Z-steps."""

    def __init__(self, X: np.ndarray, client: np.ndarray, sizes: np.ndarray):
        n, P = X.shape[0], len(sizes)
        order = np.argsort(client, kind="stable")
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        Nmax = int(sizes.max())
        slot = np.arange(n) - np.repeat(starts, sizes)  # position of each sorted sample in its client
        self.pad_idx = np.zeros((P, Nmax), dtype=np.int64)
        self.pad_mask = np.zeros((P, Nmax), dtype=bool)
        self.pad_idx[client[order], slot] = order
        self.pad_mask[client[order], slot] = True
        self.sizes = sizes
        self.Xpad = X[self.pad_idx] * self.pad_mask[:, :, None]

    def padded(self, A_rows: np.ndarray, who: np.ndarray) -> np.ndarray:
        """(n, q) per-sample rows -> (len(who), N_max, q) for the clients ``who``, zero padding."""
        return A_rows[self.pad_idx[who]] * self.pad_mask[who][:, :, None]


def init_dictionaries(rng: np.random.Generator, n_part: int, d: int, m: int) -> np.ndarray:
    """Algorithm 1, line 1: every first-round participant draws ``Z_p^0 ~ N(0, 1)`` (d, m)."""
    return rng.standard_normal((n_part, d, m))


def perturb_z_uploads(Zp, *, z_noise_std, z_noise_alpha, rng):
    """Privacy variant "perturbed factors", the Z half (eq. 32): noise on every uploaded ``Z_p`` (std
    absolute, or ``alpha * std(Z_p)`` per client). Returns ``(released, mean std)``; ``(Zp, None)``
    without noise."""
    if not (z_noise_std > 0 or z_noise_alpha > 0):
        return Zp, None
    std = np.full(len(Zp), z_noise_std) if z_noise_std > 0 else z_noise_alpha * Zp.reshape(len(Zp), -1).std(axis=1)
    return Zp + std[:, None, None] * rng.standard_normal(Zp.shape), float(std.mean())


def aggregate(Zp: np.ndarray, tau_z: float | None) -> np.ndarray:
    """Server, eq. (11): the plain mean of the participants' dictionaries (Frobenius-clipped to
    ``tau_z`` when given)."""
    return clip_frobenius(Zp.mean(axis=0), tau_z)


def c_step(Z, X, r, lam, tau_c):
    """Clients, eq. (14): ``(K_zz + lam I) C = K(Z, X)`` for all clients at once (they share Z), columns
    clipped to ``tau_c`` when given. Returns ``(K_zz, K_zx, C)``."""
    Kzz = spectral.gaussian_kernel(Z, Z, r)
    Kzx = spectral.gaussian_kernel(Z, X, r)  # (d, n), shared by all clients
    return Kzz, Kzx, _clip_columns(ridge_coefficients(Kzz, Kzx, lam), tau_c)


def stage1_objective(C, Kzx, Kzz, n, lam, tau_c):
    """``sum_p f_p(Z, C_p)`` (eq. 8) at the server Z after the C-step; returns ``(objective, K_zz C)``."""
    # (K_zz + lam I) C = K_zx, so K_zz C = K_zx - lam C for the unclipped ridge solution (lam > 0):
    # saves a (d, d) x (d, n) product per round (the largest one in the loop when d is large).
    KzzC = Kzx - lam * C if (tau_c is None and lam > 0) else Kzz @ C
    return 0.5 * n - _dot(C, Kzx) + 0.5 * _dot(C, KzzC) + 0.5 * lam * _dot(C, C), KzzC


def local_z_updates(Z, C, Kzx, Kzz, layout: ClientLayout, part, o: FedSCOptions, *, r, L_est):
    """Clients, eq. (10): the local Z update of the participants ``part``, batched over clients: the
    official preconditioned fixed-point step or ``o.local_steps`` gradient steps (eq. 15-16;
    ``L_est`` holds the per-client backtracking estimates and is updated in place). The result is
    Frobenius-clipped to ``o.tau_z`` (non-expansive: the step's sensitivity holds for the upload)."""
    r2 = r * r
    Cpad = layout.padded(C.T, part)
    if o.z_step == "official":
        Zp = official_z_steps(Z, layout.Xpad[part], Cpad, layout.padded(Kzx.T, part), Kzz, r2)
    else:
        d, m = Z.shape
        Zb = np.broadcast_to(Z, (len(part), d, m)).copy()
        Zp, L_est[part] = _gradient_steps(
            Zb, layout.Xpad[part], Cpad, layout.sizes[part], r2, o.lam, o.local_steps, o.z_lr, L_est[part]
        )
    return clip_frobenius(Zp, o.tau_z)


def _tracked_kernel(X, r, track) -> tuple[np.ndarray | None, float | None]:
    """``K(X, X)`` and its squared Frobenius norm when the reconstruction error is tracked every round
    on a small data set (n <= ``TRACK_EVERY_ROUND_MAX_N``), else ``(None, None)``."""
    if not (track and X.shape[0] <= TRACK_EVERY_ROUND_MAX_N):
        return None, None
    Kxx_full = spectral.gaussian_kernel(X, X, r)
    return Kxx_full, float(np.sum(Kxx_full**2))


def _release_z_uploads(Zp, s, o: FedSCOptions, rng, z_stds: list, uploads):
    """Round ``s``'s uploads as released (noised in the factor variant), recording the noise std and,
    for the data-dependent rounds (s > 0), the clean and released uploads in ``uploads``."""
    Zp_clean = Zp
    Zp, z_std = perturb_z_uploads(Zp, z_noise_std=o.z_noise_std, z_noise_alpha=o.z_noise_alpha, rng=rng)
    if z_std is not None:
        z_stds.append(z_std)
    if uploads is not None and s > 0:
        uploads["Z_clean"].append(Zp_clean)
        uploads["Z_released"].append(Zp)
    return Zp


def _round_values(obj, C, KzzC, Z, X, r, kxx, track) -> dict:
    """The round's logged values: the objective and, when tracked, the relative reconstruction error
    (from ``kxx`` = :func:`_tracked_kernel` when it holds ``K(X, X)``, else computed blockwise)."""
    vals = {"objective": obj}
    if track:
        Kxx_full, Kxx_sq = kxx
        vals["reconstruction_error"] = (
            math.sqrt(float(np.sum((C.T @ KzzC - Kxx_full) ** 2)) / Kxx_sq)
            if Kxx_sq is not None
            else reconstruction_error(Z, C, X, r)
        )
    return vals


def stage1(X, layout: ClientLayout, o: FedSCOptions, *, d, r, track, lam_final=None, progress=None, uploads=None):
    """Stage I, federated similarity reconstruction (Algorithm 1, in the loop order of the authors' code),
    with the Stage I settings of ``o`` (``rounds``, ``lam``, ``z_step``, ``local_steps``, ``z_lr``,
    ``participation``, ``tau_z``, ``tau_c``, ``z_noise_std``/``z_noise_alpha``, ``seed``,
    ``code_compat_pairing``).

    Round s: the participants' uploads ``Z_p`` (noised by :func:`perturb_z_uploads` in the factor
    variant) are averaged (eq. 11), every client solves its C-step (eq. 14), the objective (eq. 8) and
    the reconstruction error are logged, and the next round's participants take their local Z step
    (eq. 10/15/16). The last round's local step would be discarded and is skipped.
    Returns ``dict(Z, C, history, z_stds, n_part)`` with ``C`` recomputed from the final Z (ridge
    weight ``lam_final`` when given and different from ``lam``) or, with ``code_compat_pairing``, the
    code's C of the previous round.
    ``uploads`` (a dict) receives ``Z_clean``/``Z_released`` (data-dependent rounds) and ``Z_server``."""
    n, m = X.shape
    P, rounds = len(layout.sizes), o.rounds
    n_part = max(1, int(round(o.participation * P)))
    samp_rng, init_rng, zn_rng = stream(o.seed, "sampling"), stream(o.seed, "init"), stream(o.seed, "noise/z")

    def choose():  # the participants A^s (Algorithm 1, lines 2 and 12)
        return np.arange(P) if n_part == P else np.sort(samp_rng.choice(P, size=n_part, replace=False))

    kxx = _tracked_kernel(X, r, track)
    part = choose()
    Zp = init_dictionaries(init_rng, n_part, d, m)
    C = C_prev = np.zeros((d, n))
    Z = None
    L_est = np.full(P, np.nan)
    hist = {"objective": [], "reconstruction_error": []}
    z_stds = []
    if uploads is not None:
        uploads.update(Z_clean=[], Z_released=[], Z_server=[])
    for s in range(rounds):
        # uploads of round s (the Z_p of round 0 are the random init; all later ones depend on data)
        Zp = _release_z_uploads(Zp, s, o, zn_rng, z_stds, uploads)
        Z = aggregate(Zp, o.tau_z)
        if uploads is not None:
            uploads["Z_server"].append(Z)
        C_prev = C
        Kzz, Kzx, C = c_step(Z, X, r, o.lam, o.tau_c)
        obj, KzzC = stage1_objective(C, Kzx, Kzz, n, o.lam, o.tau_c)
        vals = _round_values(obj, C, KzzC, Z, X, r, kxx, track)
        for key, v in vals.items():
            hist[key].append(v)
        logger.info("FedSC round %d/%d: %s", s + 1, rounds, vals)
        report_round("Stage I round", s + 1, rounds)
        if progress is not None:
            progress(s + 1, vals)
        if s == rounds - 1:
            break  # the last local step would be discarded: skip it
        part = choose()
        Zp = local_z_updates(Z, C, Kzx, Kzz, layout, part, o, r=r, L_est=L_est)
    if o.code_compat_pairing and rounds > 1:
        C = C_prev
    elif lam_final is not None and lam_final != o.lam:
        C = _clip_columns(ridge_coefficients(Kzz, Kzx, lam_final), o.tau_c)  # the final C-step
    return {"Z": Z, "C": C, "history": hist, "z_stds": z_stds, "n_part": n_part}


def perturb_c_upload(C, client, sizes, *, c_noise_std, c_noise_alpha, rng):
    """Privacy variant "perturbed factors", the C half (eq. 32): noise on every ``C_p`` once, at the
    end (std absolute, or ``alpha * std(C_p)`` per client). Returns ``(released C, mean std)``."""
    if not (c_noise_std > 0 or c_noise_alpha > 0):
        return C, 0.0
    P, d = len(sizes), C.shape[0]
    if c_noise_std > 0:
        std_cols = np.full(C.shape[1], c_noise_std)
    else:
        s1 = np.bincount(client, weights=C.sum(axis=0), minlength=P)
        s2 = np.bincount(client, weights=(C * C).sum(axis=0), minlength=P)
        mean = s1 / (d * sizes)
        std_p = c_noise_alpha * np.sqrt(np.maximum(s2 / (d * sizes) - mean**2, 0.0))
        std_cols = std_p[client]
    return C + std_cols[None, :] * rng.standard_normal(C.shape), float(std_cols.mean())


def factor_release_events(o, *, d, r, events, notes):
    """The releases of the perturbed-factor variant (the paper's Sec. 3.2, Thm 3.9), appended to ``events`` and
    ``notes``: the ``rounds - 1`` data-dependent Z uploads and the C upload, as Gaussian mechanisms with
    the per-sample sensitivities of :func:`factor_sensitivities` when asked for as DP (absolute stds,
    ``tau_c``, a fixed ``z_lr``), otherwise as non-DP releases naming the reason."""
    rounds, tau_c = o.rounds, o.tau_c
    sens = (
        factor_sensitivities(
            d=d, r=r, tau_c=tau_c, z_lr=o.z_lr, lam=o.lam if o.lam > 0 else None, tau_x=o.clip_tau, tau_z=o.tau_z
        )
        if tau_c is not None and o.z_lr is not None
        else None
    )
    if rounds > 1:  # uploads of rounds 2..S depend on the data (round 1 uploads the random init)
        if o.z_noise_std > 0 and tau_c is not None:  # FedSCOptions checked the DP request
            events.append(
                GaussianRelease(
                    noise_multipliers=(o.z_noise_std / sens["z"],),
                    count=rounds - 1,
                    neighbouring="replace_one",
                    unit="sample",
                    label="fedsc_perturbed_Z",
                    extra={
                        "sensitivity": sens["z"],
                        "std": o.z_noise_std,
                        "rounds_with_data": rounds - 1,
                        "participation": o.participation,
                        "paper_sensitivity": sens.get("z_paper"),
                        "bound": "2 z_lr tau_c (1 + sqrt(d) tau_c) / (r sqrt(e)) (per-sample gradient terms)",
                        "trust_model": TRUST_MODEL,
                    },
                )
            )
        else:
            why = (
                "its noise std is alpha * std(Z_p), computed from the private data"
                if o.z_noise_alpha > 0
                else "it adds no noise"
                if o.z_noise_std == 0
                else "no column clip tau_c, so the gradient has no sensitivity bound"
            )
            events.append(non_dp_release(f"fedsc Z_p uploads: {why}", neighbouring="replace_one"))
    if o.c_noise_std > 0 and tau_c is not None:
        events.append(
            GaussianRelease(
                noise_multipliers=(o.c_noise_std / sens["c"],) if sens else (o.c_noise_std / (2.0 * tau_c),),
                count=1,
                neighbouring="replace_one",
                unit="sample",
                label="fedsc_perturbed_C",
                extra={
                    "sensitivity": 2.0 * tau_c,
                    "std": o.c_noise_std,
                    "bound": "2 tau_c (column clip)",
                    "paper_sensitivity": sens.get("c_paper") if sens else None,
                    "trust_model": TRUST_MODEL,
                },
            )
        )
    else:
        why = (
            "its noise std is alpha * std(C_p), computed from the private data"
            if o.c_noise_alpha > 0
            else "it adds no noise"
            if o.c_noise_std == 0
            else "no column clip tau_c, so its sensitivity is unbounded"
        )
        events.append(non_dp_release(f"fedsc C upload: {why}", neighbouring="replace_one"))
    if all(e.is_private for e in events):
        dz = f"Delta_Z={sens['z']:.6g}, " if sens else ""
        notes.append(
            f"perturbed factors: Z_p uploads (std {o.z_noise_std:.6g}, {rounds - 1} data-dependent rounds) and C "
            f"(std {o.c_noise_std:.6g}) accounted with per-sample sensitivities {dz}Delta_C={2.0 * tau_c:.6g} "
            "(replace-one; Theorem 3.9's own sensitivities are not used); r and d were given and must be public"
        )


def _evaluation_note(data_dp: bool) -> str:
    if data_dp:
        return "outside the guarantee: ACC/NMI/ARI (true labels) are experimenter-side evaluation"
    return (
        "outside the guarantee (experimenter-side evaluation on the raw data): the per-round objective and "
        "reconstruction_error histories, info['reconstruction_error'] and ACC/NMI/ARI; covered: the noisy "
        "uploads and what is computed from them (Z, C, K_hat, labels)"
    )


@dataclasses.dataclass(frozen=True)
class _Releases:
    """What a FedSC run releases and how it is accounted: the release records (``events``) and
    privacy notes (``notes``) so far, whether the perturbed data are DP (``data_dp``) and whether the
    factors are released from the raw data (``factor_releases``, not post-processing of a DP release)."""

    events: list
    notes: list
    data_dp: bool
    factor_releases: bool


def _client_sizes(client, P: int) -> np.ndarray:
    """The number of samples of every client 0..P-1 (an empty client is an error)."""
    sizes = np.bincount(client, minlength=P)
    if np.any(sizes == 0):
        raise ValueError(
            f"client ids must be 0..P-1 with every client non-empty; empty clients: {np.flatnonzero(sizes == 0).tolist()}"
        )
    return sizes


def _perturbed_data(X, o: FedSCOptions, info: dict, uploads) -> tuple[np.ndarray, float, _Releases]:
    """Step 0 of :func:`run`: the perturbed data (eq. 22, :func:`privatize_data`), their noise std and
    the run's releases so far."""
    X, sigma_x, data_dp, events, notes = privatize_data(
        X,
        clip_tau=o.clip_tau,
        data_noise_std=o.data_noise_std,
        data_noise_beta=o.data_noise_beta,
        seed=o.seed,
        uploads=uploads,
        domain=o.data_domain,
    )
    info["data_noise_std"] = sigma_x
    # factor releases of the raw data (not post-processing of a DP release)
    factor_releases = (
        any(v > 0 for v in (o.z_noise_std, o.z_noise_alpha, o.c_noise_std, o.c_noise_alpha)) and not data_dp
    )
    return X, sigma_x, _Releases(events=events, notes=notes, data_dp=data_dp, factor_releases=factor_releases)


def _kernel_setup(X, client, o: FedSCOptions, sigma_x: float, rel: _Releases, info: dict) -> tuple:
    """Step 1 of :func:`run`: kernel width r (eq. 40/42), dictionary size d (eq. 43) and kNN k (eq. 25),
    recorded in ``info`` with the Stage I settings and the C-step that feeds Stage II (``final_c``)."""
    n, m = X.shape
    r, d = kernel_constants(
        X,
        client,
        o,
        on_private_data=rel.factor_releases and sigma_x == 0,
        perturbed=sigma_x > 0,
        info=info,
        events=rel.events,
    )
    knn = spectral.knn_k(n) if o.knn is None else o.knn
    info.update({"r": r, "d": int(d), "knn_k": int(knn), "lam": o.lam, "rounds": int(o.rounds), "z_step": o.z_step})
    logger.info("FedSC: n=%d m=%d P=%d d=%d r=%.4g k_nn=%d", n, m, info["n_clients"], d, r, knn)
    # the final C-step with the projection jitter unless the factors are perturbed or clipped (their
    # release uses lam)
    factor_variant = o.tau_c is not None or any(
        v > 0 for v in (o.z_noise_std, o.z_noise_alpha, o.c_noise_std, o.c_noise_alpha)
    )
    info["final_c"] = "paper" if (o.final_c == "paper" or factor_variant or o.code_compat_pairing) else "projection"
    return r, d, knn


def _finish_info(info: dict, o: FedSCOptions, rel: _Releases, Z, C, uploads, y, labels) -> None:
    """The run's closing ``info`` entries: factors and uploads when asked for, the scores against the
    true labels ``y`` (experimenter-side), the trust model and the privacy notes."""
    if o.return_factors:
        info["Z"], info["C"] = Z, C
    if o.return_uploads:
        info["uploads"] = uploads
    if y is not None and o.cluster:
        info.update(_scores(y, labels))
        if o.attack:
            info["attack_on_c_ACC"] = _scores(y, info["attack_on_c_labels"])["ACC"]
    if rel.events:
        info["trust_model"] = TRUST_MODEL
    if rel.notes:
        info["privacy_notes"] = rel.notes
        info["dp_note"] = "; ".join(rel.notes)


# --------------------------------------------------------------------------- FedSC
def run(
    X,
    client,
    k: int,
    options: FedSCOptions | None = None,
    *,
    y=None,
    progress: Callable[[int, dict], None] | None = None,
    **settings,
) -> ClusteringResult:
    """Run FedSC (Stage I + Stage II) on ``X`` (n, m) held by ``client`` (n,) and return the labels.

    The stages of Algorithm 1, each a function of this module:

    0. :func:`privatize_data`: perturbed data ``X~ = clip(X) + N(0, sigma^2)`` (eq. 22, Prop. 3.7);
    1. :func:`kernel_constants`: kernel width ``r`` (eq. 40 / 42) and dictionary size ``d`` (eq. 43);
    2. :func:`stage1`, Stage I, S rounds of: :func:`init_dictionaries` (round 1: ``Z_p^0``),
       :func:`perturb_z_uploads` (factor variant, eq. 32), :func:`aggregate` (server mean, eq. 11),
       :func:`c_step` (ridge solve, eq. 14), :func:`stage1_objective` (eq. 8) and
       :func:`local_z_updates` (the official fixed-point step, or gradient steps eq. 15-16); then the
       final C from the final Z (``final_c``);
    3. :func:`perturb_c_upload` (factor variant, eq. 32) and :func:`factor_release_events` (Thm 3.9
       accounting with the sensitivities of :func:`factor_sensitivities`);
    4. :func:`reconstruct_and_cluster`, Stage II: ``K_hat = C^T K(Z,Z) C`` (eq. 23), kNN graph
       (eq. 25), NJW spectral clustering (eq. 12).

    Options: :class:`FedSCOptions` (keyword ``settings`` override ``options``); ``y``: true labels,
    only used to put ACC/NMI/ARI/NMI_paper in ``info``; ``progress(round, values)``.

    Returns a :class:`ClusteringResult`: ``labels`` (Stage II), ``history`` with per-round
    ``"objective"`` (sum_p f_p at the server Z after the C-step) and ``"reconstruction_error"``,
    ``dp_events`` (the releases: GaussianRelease items, non-DP ones from
    :func:`~fedclust.privacy.events.non_dp_release`), ``uploaded_reals`` and ``info``
    (``d, r, r_source, d_source, knn_k, lam, rounds, n_clients, participants, noise stds,
    reconstruction_error``, ``privacy_notes`` ...).
    The reconstruction error is relative to ``K(X~, X~)``, the kernel of the data actually clustered;
    ``info["reconstruction_error"]`` is that of the C used in Stage II (after any C noise), the history
    that of the noise-free C of each round.
    """
    o = FedSCOptions.build(options, settings)
    X, client, P = check_inputs(X, client, k)
    n, m = X.shape
    sizes = _client_sizes(client, P)
    info: dict = {"n_clients": P}
    uploads: dict | None = {} if o.return_uploads else None

    # 0. perturbed data (eq. 22), before anything else (r and d are estimated on X~)
    X, sigma_x, rel = _perturbed_data(X, o, info, uploads)
    # 1. kernel constants r (eq. 40/42) and d (eq. 43); kNN k (eq. 25)
    r, d, knn = _kernel_setup(X, client, o, sigma_x, rel, info)
    # 2. Stage I: federated factorization phi(X_p) ~ phi(Z) C_p (eq. 8-11, 14-16), then the final C-step
    track = (n <= TRACK_EVERY_ROUND_MAX_N) if o.track_reconstruction is None else bool(o.track_reconstruction)
    lam_final = PROJECTION_JITTER if info["final_c"] == "projection" else None
    layout = ClientLayout(X, client, sizes)
    s1 = stage1(X, layout, o, d=d, r=r, track=track, lam_final=lam_final, progress=progress, uploads=uploads)
    Z, C, hist = s1["Z"], s1["C"], s1["history"]
    info["participants_per_round"] = s1["n_part"]
    # 3. perturbed factors: noise on each C_p once (eq. 32), and the releases of the variant
    C = _release_factors(o, C, client, sizes, s1, d=d, r=r, releases=rel, info=info, uploads=uploads)
    # 4. Stage II: K_hat = C^T K(Z,Z) C (eq. 23), kNN graph (eq. 25), spectral clustering (eq. 12)
    labels = _stage2(X, Z, C, k, r, knn, hist, info, o)
    _finish_info(info, o, rel, Z, C, uploads, y, labels)
    uploaded = o.rounds * s1["n_part"] * d * m + d * n
    return ClusteringResult(
        labels=labels, centroids=None, history=hist, dp_events=rel.events, uploaded_reals=int(uploaded), info=info
    )


def _release_factors(o, C, client, sizes, s1, *, d, r, releases: _Releases, info, uploads):
    """Step 3 of :func:`run`: noise on each client's C_p (once), and the releases of the factor variant
    (appended to ``releases``).

    Returns the C that leaves the clients (noisy when the variant asks for it).
    """
    if uploads is not None and (o.c_noise_std > 0 or o.c_noise_alpha > 0):
        uploads["C_clean"] = C
    C, sigma_c = perturb_c_upload(
        C, client, sizes, c_noise_std=o.c_noise_std, c_noise_alpha=o.c_noise_alpha, rng=stream(o.seed, "noise/c")
    )
    if uploads is not None:
        uploads.setdefault("C_clean", C)
        uploads["C_released"] = C
    info["z_noise_std"] = float(np.mean(s1["z_stds"])) if s1["z_stds"] else 0.0
    info["c_noise_std"] = sigma_c
    if releases.factor_releases:
        factor_release_events(o, d=d, r=r, events=releases.events, notes=releases.notes)
    if releases.events:
        releases.notes.append(_evaluation_note(releases.data_dp))
    return C


def _stage2(X, Z, C, k, r, knn, hist, info, o: FedSCOptions) -> np.ndarray:
    """Step 4 of :func:`run` (Stage II): the labels from the spectral clustering of K_hat = C' K(Z,Z) C.

    Also records the graph actually used, the reconstruction error and, with ``o.attack``, the labels
    an attacker gets from C alone.
    """
    seed, graph = o.seed, o.graph
    if o.cluster:
        ginfo: dict = {}
        labels, err = reconstruct_and_cluster(
            Z,
            C,
            k,
            r,
            seed=seed,
            knn=knn,
            include_self=o.include_self,
            n_init=o.n_init,
            solver=o.eigen_solver,
            X_ref=X,
            graph=graph,
            graph_info=ginfo,
        )
        info.update(
            graph=graph,
            knn_k=int(ginfo["knn_k"]),
            graph_components=int(ginfo["components"]),
            graph_components_paper=int(ginfo["components_paper"]),
        )
    else:
        labels, err = np.full(X.shape[0], -1, dtype=np.int64), None
    info["reconstruction_error"] = err
    if not hist["reconstruction_error"] and err is not None:
        hist["reconstruction_error"].append(err)
    if o.attack:
        info["attack_on_c_labels"] = attack_on_c(C, k, seed=seed)
    return labels


def _gradient_steps(Zb, Xp, Cpad, sizes, r2, lam, steps, z_lr, L_prev):
    """``steps`` plain gradient steps (eq. 16) for all clients at once. With ``z_lr`` the step is fixed
    (the Theorem 3.9 setting); otherwise eta = 1/L with a per-client backtracking (Armijo) estimate of L,
    vectorized: the loop runs over halvings, not over clients."""
    L = np.where(np.isfinite(L_prev), L_prev * 0.5, np.nan)
    for _ in range(steps):
        Kxz = _batched_kernel(Xp, Zb, r2)
        Kzz = _batched_kernel(Zb, Zb, r2)
        G, tau = _grad_and_tau(Zb, Xp, Cpad, Kxz, Kzz, r2)
        if z_lr is not None:
            Zb = Zb - z_lr * G
            continue
        if np.any(~np.isfinite(L)):  # first estimate: the norm of the frozen-weight Hessian, |tau|_2
            L0 = np.linalg.norm(tau, ord=2, axis=(1, 2))
            L = np.where(np.isfinite(L), L, np.maximum(L0, 1e-12))
        f0 = _batched_objective(Zb, Xp, Cpad, sizes, r2, lam)
        g2 = np.einsum("pij,pij->p", G, G)
        todo = np.ones(len(L), dtype=bool)
        Znew = Zb.copy()
        for _bt in range(60):
            Znew[todo] = Zb[todo] - G[todo] / L[todo][:, None, None]
            f1 = _batched_objective(Znew[todo], Xp[todo], Cpad[todo], sizes[todo], r2, lam)
            ok = f1 <= f0[todo] - 0.5 * g2[todo] / L[todo]
            idx = np.flatnonzero(todo)
            todo[idx[ok]] = False
            L[idx[~ok]] *= 2.0
            if not todo.any():
                break
        Zb = Znew
    return Zb, L
