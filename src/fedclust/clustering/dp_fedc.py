"""DP-FedC: differentially private federated clustering over non-IID data.

Paper: Y. Li, S. Wang, C.-Y. Chi, T. Q. S. Quek, "Differentially Private Federated Clustering Over
Non-IID Data", IEEE Internet of Things Journal (2023), DOI 10.1109/JIOT.2023.3312852.
The algorithm, our choices where the paper is unclear (penalty, step sizes, public constants of a
private run) and measured numbers are in ``docs/methods/dp_fedc.md``.

Model (eqs. 13-14, with our default penalty weight, see ``rho_factor``): with W (m x k) the shared
centroids and H_i (k x n_i) >= 0 the local soft assignments of client i,

    F(W, H) = (1/N) sum_i F_i(W, H_i)                                                    (13)
    F_i = ||X_i - W H_i||_F^2 + (rho/2)(||1_k' H_i||^2 - ||H_i||_F^2)
          + (mu_h/2)||H_i||_F^2 + (mu_w/2)||W||_F^2                                        (14)

Clients have EQUAL weight 1/N and the server takes the UNWEIGHTED mean of the uploads (16)/(20).

One round t (Algorithm 1):

1. the server samples K of the N clients uniformly without replacement (PCP);
2. every client (``all_clients_update_H=True``, the paper) takes Q1 projected gradient steps on H_i
   with W = the broadcast global W (eq. 17), step 1/gamma (rules below);
3. every sampled client takes Q2^t minibatch SGD steps on its copy of W (eq. 18) with H fixed,
   Q2^t = floor(Qhat/t) + 1 or a constant; minibatches of b_i = min(b, n_i) samples taken from
   reshuffled epochs of the local data; the minibatch gradient is scaled by n_i/b_i
   (unbiased); each minibatch gradient is clipped to Frobenius norm G;
4. each sampled client adds i.i.d. N(0, sigma_{i,t}^2) noise to every entry of W_i (eq. 19), sigma
   from eq. (29) with the sensitivity 2 G Q2^t / eta_i of eq. (28) and the per-round epsilon from
   Theorem 3 / eq. (32) (``fedclust.privacy.paper.dp_fedc``);
5. the server sets W to the plain mean of the K noisy uploads (eq. 20).

Step sizes. With lam = lambda_max(W'W) of the broadcast W and the exact
Lipschitz constant L_H = 2 lam + rho (k-1) + mu_h of grad_H F_i (with the penalty above):

* ``h_step="stable"`` (default): gamma = alpha_1 * L_H, alpha_1 = 1.0 -> guaranteed descent;
* ``h_step="fast"``: gamma = alpha_1 * L_H / 2, alpha_1 = 1.1 (step ~ 1/lam, still < 2/L_H: descent);
* ``h_step="paper_literal"``: gamma = lam / 2 (Sec. VI-A read literally; step ~ 4/L_H, may diverge).

W step: eta_i = alpha_2 * Lambda_i per client (``eta_rule="per_client"``) or the RMS of Lambda
over all clients (``eta_rule="rms"``, the L_W^t of Assumption 1), where Lambda_i is set by
``constants`` (below); alpha_2 = 5 (the paper) with the data's Lambda_i, 1.25 with the public one
(:data:`ALPHA_2`).

Privacy. The release is each sampled client's noisy W_i (sample-level DP, replace-one
neighbours, the paper's Definition 1). The Gaussian of eq. (19) covers it only if the noise scale and
everything the upload depends on, apart from the sampled minibatch, are public. ``constants`` says how
the noise-relevant constants are set:

* ``"public"`` (the default of a private run): every sample is clipped to the public L2 bound
  ``clip`` (default: the largest norm of a row in the public domain ``init_domain``, i.e.
  sqrt(m) max(|low|, |high|)); ||X||_F^2 in rho and mu_h (Sec. VI-A) is replaced by its public worst
  case n clip^2; and Lambda_i is the public stand-in n_i / k (the lambda_max(H_i H_i') of a balanced
  one-hot H_i with unit entries) instead of lambda_max(H_i H_i'). eta_i, sigma_{i,t} and the
  sensitivity 2 G Q2 / eta_i of eq. (28) then depend only on (clip, n, n_i, k, b, Q2, G, eps, delta),
  an upload depends on the client's data only through its Q2^t b_i sampled rows (H columns are
  per-sample: h_j depends on x_j and the broadcasts only), so the subsampling that the accountant
  assumes (fixed-size, without replacement, replace-one; ``privacy.paper.dp_fedc.release``) holds.
  The eta stand-in need not bound lambda_max: privacy only needs it public (every step moves W by
  at most G/eta_i whatever the data).
* ``"data"`` (the paper, literally; the default of a non-private run): rho, mu_h from ||X||_F^2 and
  Lambda_i = lambda_max(H_i H_i') from all of client i's rows. Then the noise scale and every
  client's step depend on private data outside the minibatch, neither eq. (28) nor the amplification
  holds, and a private run reports epsilon = inf (``non_dp_release``).

Initialisation: W^0 is ``init_centroids`` (taken as public), or, when the server holds a public
sample (``server_rows``: rows of X that are no client's data) and no ``init`` is named, the k-means
of that sample (:func:`public_start`), with H^0 the one-hot nearest-centre code of W^0 and the public
energy of rho and mu_h taken from the sample (:func:`sample_energy`) instead of the worst case
n clip^2; else W^0 is drawn by ``init`` (:data:`fedclust.clustering._common.INITS`): k data rows
(``"data"``; a private run that uses it reports epsilon = inf) or data-independent
(``"uniform_box"``, the private default without a public sample). The server's rows are labelled
by the nearest final centroid. Without a public sample a data-independent start collapses
(``docs/methods/dp_fedc.md``).

Trust model (``trust_model``): ``"local"`` (the paper's) adds each sampled client's noise to its own
upload; ``"secure_aggregation"`` adds one draw of std max_i sigma_{i,t} to the sum of the uploads
(:func:`aggregate_sigma`), which gives every client at least its calibrated noise multiplier, so
the accounted releases are the same.

Heterogeneous clients: every client has its own q_{i,t} = Q2^t b_i / n_i and sigma_{i,t}; a
sample belongs to one client and the other clients' uploads depend on it only through the released
broadcasts, so the run's epsilon is the worst client's (:func:`planned_releases` describes the client
whose releases the accountant rates highest, found over all distinct client sizes).

Labels: argmax over each column of H_i (each row of our (n, k) H); an all-zero column falls back to
the nearest centroid of the final W.

Implementation: rows are samples (X is (n, m)), so we store C = W' (k x m) and H as one (n, k) array
in the client-sorted "segment" layout (client i owns a contiguous block of rows). Because every
client receives the same broadcast W, the H step of ALL clients is a single (n, k) update (its
step size is common to all clients), and W'X_i for all clients is one (n, m) x (m, k) product that is
shared by the objective of round t and the H step of round t+1. The W steps of the K sampled
clients run as stacked (K, k, m) arrays with batched matmuls; the per-client H_i H_i' (for eta_i,
``constants="data"``) come from one segment sum (``np.add.reduceat``) and one batched ``eigvalsh``.
No Python loop over clients inside a round (``round_loop`` is a per-client loop reference used only
by tests and the benchmark). numpy float64 is used: the per-round work is a few BLAS-3 products, and
on this 2-core CPU (1 BLAS thread, MNIST sizes) numpy was faster than torch float64 for both hot
products (X C': 26 vs 42 ms; the minibatch gather + batched product: 42 vs 111 ms); float64 also
keeps the vectorized/loop equality at 1e-10. Note that at MNIST sizes (n_i = 100, m = 784) the round
is dominated by the BLAS work (X C' over all n samples, needed by every client's H step), which a
per-client loop pays too, so vectorizing mainly removes the per-client Python overhead (see
benchmarks/bench_dp_fedc.py for measured times).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedclust.clustering._common import (
    DEFAULT_DOMAIN,
    SegmentLayout,
    blas_limit,
    check_all_clients_nonempty,
    check_clients_per_round,
    check_init,
    clip_data,
    init_release,
    initial_centroids,
    log_scores,
    nearest,
    new_history,
    sample_clients,
    server_kmeans,
    server_split,
)
from fedclust.clustering.base import ClusteringResult, check_inputs
from fedclust.clustering.common_options import InitOptions
from fedclust.options import MethodConfig, check_number, param
from fedclust.privacy import observe
from fedclust.privacy._search import falsi_root
from fedclust.privacy.accountants import RDP_ORDERS
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.privacy.events import non_dp_release
from fedclust.privacy.mechanisms import clip_by_norm
from fedclust.privacy.paper.dp_fedc import release, round_epsilon, sensitivity, sigma_round
from fedclust.privacy.release import check_trust_model
from fedclust.progress import report as report_round
from fedclust.rng import stream

logger = logging.getLogger(__name__)

H_STEPS = ("stable", "fast", "paper_literal")
ETA_RULES = ("per_client", "rms")
H_INITS = ("uniform", "nearest")
#: Who adds the noise of a round (:mod:`fedclust.privacy.release`): every sampled client to its own
#: upload (``local``, the paper's), or once to the sum of the uploads (``secure_aggregation``).
DP_FEDC_TRUST_MODELS = ("local", "secure_aggregation")
#: the observed kind (:mod:`fedclust.privacy.observe`) of the clients' uploads of a round under local
#: trust (noisy when private): ``(client ids, uploads)`` blocks, the uploads a (clients, k, m) array
UPLOADS = "dp_fedc_uploads"
#: k-means++ restarts of the server's k-means on its public sample (the start ``public_sample``)
PUBLIC_START_RESTARTS = 10
#: How the noise-relevant constants (rho, mu_h, eta) are set (module docstring): from public
#: quantities only, or from the data as the paper does (not private).
CONSTANTS = ("public", "data")
#: The paper's rho_factor (Sec. VI-A); the default is 1e-2.
PAPER_RHO_FACTOR = 1e-7
#: Default alpha_2 of the W step eta_i = alpha_2 Lambda_i: the paper's 5 with its data-dependent
#: Lambda_i = lambda_max(H_i H_i'); 1.25 with the public stand-in Lambda_i = n_i / k, which assumes unit
#: H entries and measured about 4x lambda_max(H_i H_i') in our runs (entries near 1/2), so that the
#: step 1/eta_i stays near the paper's.
ALPHA_2 = {"data": 5.0, "public": 1.25}


# ----------------------------------------------------------------------------------------------
# objective and per-step building blocks (plain arrays in, arrays out)
# ----------------------------------------------------------------------------------------------
def penalty_params(
    X: np.ndarray | None,
    n_clients: int,
    rho_factor: float = 1e-2,
    mu_h_factor: float = 1e-10,
    *,
    energy: float | None = None,
):
    """rho = rho_factor E / N and mu_h = mu_h_factor E / N (Sec. VI-A) with E = ||X||_F^2
    (the paper), or the given ``energy`` (e.g. the public worst case :func:`public_energy`).

    The default rho_factor is 1e-2; the paper's is :data:`PAPER_RHO_FACTOR` = 1e-7.
    """
    e = (float(np.square(X).sum()) if energy is None else float(energy)) / n_clients
    return rho_factor * e, mu_h_factor * e


def public_energy(n_samples: int, clip: float) -> float:
    """The public worst case of ||X||_F^2 when every one of the n samples has L2 norm <= clip: n clip^2."""
    return float(n_samples) * float(clip) ** 2


def sample_energy(n_samples: int, X_public: np.ndarray) -> float:
    """The stand-in for ||X||_F^2 from the server's public sample: n times the mean squared row norm
    of the (clipped) public rows. Public: it reads no client row."""
    return float(n_samples) * float(np.mean(np.square(X_public).sum(1)))


def public_start(X_public: np.ndarray, k: int, seed: int) -> np.ndarray:
    """W^0 from the server's public sample: the best of :data:`PUBLIC_START_RESTARTS` k-means++ +
    Lloyd runs on its rows (stream ``"init"``). Reads no client row, so it releases nothing."""
    if X_public.shape[0] < k:
        raise ValueError(f"the server's public sample holds {X_public.shape[0]} rows, fewer than k={k}")
    w = np.ones(X_public.shape[0])
    return server_kmeans(X_public, w, None, stream(seed, "init"), n_init=PUBLIC_START_RESTARTS, k=k)


def public_lambda(sizes: np.ndarray, k: int) -> np.ndarray:
    """Public stand-in for lambda_max(H_i H_i') per client: n_i / k, its value for a balanced one-hot
    H_i with unit entries. Not a bound (privacy only needs eta public; module docstring)."""
    return np.asarray(sizes, dtype=np.float64) / float(k)


def domain_clip(m: int, domain=None) -> float:
    """The largest L2 norm of a row of the public domain [low, high]^m: sqrt(m) max(|low|, |high|)."""
    low, high = DEFAULT_DOMAIN if domain is None else (float(domain[0]), float(domain[1]))
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"init_domain must be [low, high] with low < high, got {domain!r}")
    return math.sqrt(m) * max(abs(low), abs(high))


def sample_objective(
    X: np.ndarray,
    XC: np.ndarray,
    CC: np.ndarray,
    H: np.ndarray,
    rho: float,
    mu_h: float,
    x_sq: np.ndarray | None = None,
) -> np.ndarray:
    """Per-sample terms f_j of F_i (eq. 14 without the W term); F_i = sum_{j in i} f_j + mu_w/2 ||W||^2.

    ``XC`` = X C' (n, k) (i.e. (W'X)'), ``CC`` = C C' = W'W (k, k), ``H`` (n, k) rows = columns of H_i,
    ``x_sq`` = the squared row norms of X (computed when not given).
    """
    fit = (np.square(X).sum(1) if x_sq is None else x_sq) - 2.0 * (XC * H).sum(1) + ((H @ CC) * H).sum(1)
    hh = np.square(H).sum(1)
    pen = 0.5 * rho * (np.square(H.sum(1)) - hh)
    return fit + pen + 0.5 * mu_h * hh


def objective(X, client, C, H, *, n_clients: int | None = None, rho: float, mu_h: float, mu_w: float = 0.0) -> float:
    """F(W, H) of eq. (13): (1/N) sum_i F_i with equal client weights (rows of X, H in any order)."""
    X = np.asarray(X, dtype=np.float64)
    N = int(np.max(client)) + 1 if n_clients is None else n_clients
    f = sample_objective(X, X @ C.T, C @ C.T, H, rho, mu_h)
    return float(f.sum() / N + 0.5 * mu_w * np.square(C).sum())


def local_objectives(X, client, C, H, *, n_clients: int, rho: float, mu_h: float, mu_w: float = 0.0):
    """(N,) vector of F_i(W, H_i), eq. (14)."""
    X = np.asarray(X, dtype=np.float64)
    f = sample_objective(X, X @ C.T, C @ C.T, H, rho, mu_h)
    return np.bincount(client, weights=f, minlength=n_clients) + 0.5 * mu_w * np.square(C).sum()


def h_gamma(
    CC: np.ndarray, k: int, rho: float, mu_h: float, rule: str, alpha_1: float, literal_2rho: bool = False
) -> float:
    """The inverse H step gamma (update H - grad/gamma) for the broadcast W (CC = W'W)."""
    lam = float(np.linalg.eigvalsh(CC)[-1])
    # Hessian of F_i in H_i (per column): 2 W'W + a_rho U_k - rho I + mu_h I, a_rho = rho (2 rho literal)
    a_rho = 2.0 * rho if literal_2rho else rho
    L_true = 2.0 * lam + max(a_rho * k - rho, 0.0) + mu_h
    if rule == "stable":
        return alpha_1 * L_true
    if rule == "fast":
        return alpha_1 * L_true / 2.0
    return 0.5 * lam  # paper_literal


def h_grad(
    H: np.ndarray, XC: np.ndarray, CC: np.ndarray, rho: float, mu_h: float, literal_2rho: bool = False
) -> np.ndarray:
    """grad_{H_i} F_i for all clients at once, rows = samples: (2 W'W H - 2 W'X + rho U H - rho H
    + mu_h H)' (``literal_2rho`` uses the paper's 2 rho U H of eq. 80)."""
    a_rho = 2.0 * rho if literal_2rho else rho
    return 2.0 * (H @ CC) - 2.0 * XC + a_rho * H.sum(1, keepdims=True) + (mu_h - rho) * H


def h_steps(
    H: np.ndarray,
    XC: np.ndarray,
    CC: np.ndarray,
    gamma: float,
    Q1: int,
    rho: float,
    mu_h: float,
    literal_2rho: bool = False,
) -> np.ndarray:
    """Q1 projected gradient steps (eq. 17) on H (n, k), every row/client in one update.

    ``H - grad/gamma`` is affine in H: ``H M + c`` with ``M = I - (2 W'W + a_rho 1 1' + (mu_h - rho) I)
    / gamma`` (k x k) and ``c = 2 (W'X)' / gamma``, so each step is one (n, k) x (k, k) product, one
    add and one max (the same numbers as :func:`h_grad`, up to rounding).
    """
    k = CC.shape[0]
    a_rho = 2.0 * rho if literal_2rho else rho
    M = np.eye(k) - (2.0 * CC + a_rho * np.ones((k, k)) + (mu_h - rho) * np.eye(k)) / gamma
    c = (2.0 / gamma) * XC
    for _ in range(Q1):
        H = H @ M
        H += c
        np.maximum(H, 0.0, out=H)
    return H


def client_gram(H: np.ndarray, offsets: np.ndarray, clients: np.ndarray) -> np.ndarray:
    """(len(clients), k, k) stack of H_i H_i' (paper orientation) via one segment sum.

    ``offsets`` are the client-sorted row offsets; every listed client must own >= 1 row.
    """
    Hs = H[_rows(offsets, clients)]
    P = Hs[:, :, None] * Hs[:, None, :]
    sz = offsets[clients + 1] - offsets[clients]
    return np.add.reduceat(P, np.concatenate([[0], np.cumsum(sz)[:-1]]), axis=0)


def q2_schedule(t: int, q2, Qhat: int) -> int:
    """Q2^t = floor(Qhat/t) + 1 (``q2="diminishing"``) or the constant ``q2``."""
    return Qhat // t + 1 if q2 == "diminishing" else int(q2)


def draw_minibatches(rng: np.random.Generator, sizes: np.ndarray, Q2: int, b: int):
    """Minibatches of the sampled clients (sizes ``sizes``): (K, Q2, b_max) local sample positions,
    a (K, b_max) mask of valid slots and the (K,) minibatch sizes b_i.

    Client i uses b_i = min(b, n_i) samples per step; its Q2 b_i samples are consecutive chunks of
    reshuffled epochs (random permutations of its n_i samples, concatenated). All clients
    are drawn at once: random keys (K, epochs, n_max) with +inf on padding, argsorted.
    """
    K = sizes.size
    bi = np.minimum(b, sizes)
    bmax = int(bi.max())
    nmax = int(sizes.max())
    need = Q2 * bi
    E = int(np.max(-(-need // sizes)))
    keys = rng.random((K, E, nmax))
    valid = np.arange(nmax)[None, None, :] < sizes[:, None, None]
    keys[~np.broadcast_to(valid, keys.shape)] = np.inf
    perm = np.argsort(keys, axis=2).reshape(K, E * nmax)
    vflat = np.broadcast_to(valid, (K, E, nmax)).reshape(K, E * nmax)
    # move every client's valid positions to the front, keeping epoch order
    take = np.argsort(~vflat, axis=1, kind="stable")[:, : Q2 * bmax]
    seq = np.take_along_axis(perm, take, axis=1)  # (K, Q2*bmax); the first Q2*b_i are client i's
    p = np.arange(bmax)
    mask = p[None, :] < bi[:, None]
    pos = np.arange(Q2)[None, :, None] * bi[:, None, None] + np.minimum(p[None, None, :], bi[:, None, None] - 1)
    local = np.take_along_axis(seq, pos.reshape(K, -1), axis=1).reshape(K, Q2, bmax)
    return local, mask, bi  # local positions within each client (the caller adds the offsets)


@dataclass
class RoundInput:
    """Everything one round needs besides the state (shared by the vectorized and the loop versions)."""

    sampled: np.ndarray  # (K,) client ids
    mb_rows: np.ndarray  # (K, Q2, b_max) sorted-row indices of the minibatches
    mb_mask: np.ndarray  # (K, b_max) valid minibatch slots
    b_i: np.ndarray  # (K,) minibatch size per sampled client
    Q2: int
    noise: np.ndarray | None  # standard normal draws, (K, k, m) (local) or (k, m) (secure_aggregation); None: no DP
    sigma_fn: object = None  # callable (eta (K,), Q2) -> sigma (K,), when noise is not None
    trust_model: str = "local"  # local: one draw per upload; secure_aggregation: one draw on their sum


def aggregate_sigma(sigma: np.ndarray) -> float:
    """The std of the one Gaussian drawn on the sum of the uploads under secure aggregation: the
    largest of the sampled clients' own stds sigma_{i,t} (eq. 29).

    A sample of client i moves the sum by at most client i's sensitivity 2 G Q2 / eta_i (it sits in
    one upload), so a draw of std max_j sigma_j gives every client at least the noise multiplier
    sigma_i / s_i that its local release would have: each client's accounting (the same releases
    as ``local``) still holds, and the mean carries max_j sigma_j / K per entry instead of
    sqrt(sum_j sigma_j^2) / K.
    """
    return float(np.max(sigma)) if np.size(sigma) else 0.0


#: reals per chunk of the (K, k, m) client stack in :func:`round_vectorized` (256 Ki doubles = 2 MiB)
_CHUNK_REALS = 1 << 18


@dataclass(frozen=True)
class RoundSettings:
    """The settings of one DP-FedC round (eq. 17-20): ``Q1`` projected gradient steps on H with the
    penalty constants ``rho`` and ``mu_h`` and the step rule ``h_rule`` / ``alpha_1`` (:func:`h_gamma`,
    ``literal_2rho``), every client's H or only the sampled ones' (``all_clients_update_H``); SGD on
    W with the ridge weight ``mu_w``, the step ``eta_i = alpha_2 Lambda_i`` (``eta_rule``
    ``"per_client"`` or ``"rms"``; ``lam_public`` (N,): the public Lambda_i of every client
    (``constants="public"``), None: lambda_max(H_i H_i') of the data, the paper) and the gradient
    clip ``G`` (None: no clip)."""

    Q1: int
    rho: float
    mu_h: float
    mu_w: float
    h_rule: str
    alpha_1: float
    eta_rule: str
    alpha_2: float
    G: float | None
    literal_2rho: bool
    all_clients_update_H: bool
    lam_public: np.ndarray | None = None


def _h_update(Xs, offsets, H, C, CC, gamma, sampled, rs: RoundSettings, XC):
    """(a) ``Q1`` projected gradient steps on H (eq. 17): every client's rows, or the sampled clients' only."""
    if rs.all_clients_update_H:
        if XC is None:
            XC = Xs @ C.T
        return h_steps(H, XC, CC, gamma, rs.Q1, rs.rho, rs.mu_h, rs.literal_2rho)
    rows = _rows(offsets, sampled)
    H = H.copy()
    XC_rows = Xs[rows] @ C.T if XC is None else XC[rows]
    H[rows] = h_steps(H[rows], XC_rows, CC, gamma, rs.Q1, rs.rho, rs.mu_h, rs.literal_2rho)
    return H


def _step_sizes(H, sizes, offsets, S, rs: RoundSettings) -> np.ndarray:
    """The W step sizes ``eta_i = alpha_2 Lambda_i`` of the sampled clients ``S`` (eq. 18)."""
    K = S.size
    if rs.lam_public is not None:  # public Lambda_i: no data read
        lam_pub = np.asarray(rs.lam_public, dtype=np.float64)
        lam = lam_pub[S] if rs.eta_rule == "per_client" else np.full(K, math.sqrt(np.mean(lam_pub**2)))
    elif rs.eta_rule == "per_client":
        lam = np.linalg.eigvalsh(client_gram(H, offsets, S))[:, -1]
    else:
        lam_all = np.linalg.eigvalsh(client_gram(H, offsets, np.arange(sizes.size)))[:, -1]
        lam = np.full(K, math.sqrt(np.mean(lam_all**2)))
    return np.maximum(rs.alpha_2 * lam, 1e-12)


def _w_steps(Xs, H, C, rin: RoundInput, sl: slice, c, eta, rs: RoundSettings, gnorm) -> tuple[np.ndarray, int]:
    """(b) The ``Q2`` SGD steps on W (eq. 18) of the sampled clients ``sl`` (one cache-sized chunk),
    all at once; records the gradient norms in ``gnorm`` and returns ``(W, clipped count)``."""
    n_clipped = 0
    W = np.broadcast_to(C, (sl.stop - sl.start,) + C.shape).copy()
    for r in range(rin.Q2):  # local steps (sequential by nature)
        rows = rin.mb_rows[sl, r, :]
        Hb = H[rows] * rin.mb_mask[sl, :, None]  # (c, b, k): H_B of every client, padding zeroed
        Ht = Hb.swapaxes(1, 2)
        D = (Ht @ Hb) @ W
        D -= Ht @ Xs[rows]
        if rs.mu_w:
            D += (rs.mu_w / c[sl])[:, None, None] * W
        nrm = c[sl] * np.sqrt(np.einsum("kij,kij->k", D, D))  # ||grad_i||_F
        gnorm[r, sl] = nrm
        f = c[sl] / eta[sl]
        if rs.G is not None:  # clip every minibatch gradient to G
            over = nrm > rs.G
            n_clipped += int(np.count_nonzero(over))
            f = f * np.minimum(1.0, rs.G / np.maximum(nrm, np.finfo(np.float64).tiny))
        D *= f[:, None, None]
        W -= D
    return W, n_clipped


def round_vectorized(Xs, sizes, offsets, H, C, rin: RoundInput, settings: RoundSettings, XC=None):
    """One DP-FedC round on the client-sorted data with the round's :class:`RoundSettings`; returns
    (H, C_new, stats).

    ``XC`` = Xs @ C.T may be passed in when the caller already has it (the objective of the
    previous round uses the same product).
    """
    rs = settings
    k = C.shape[0]
    CC = C @ C.T
    gamma = h_gamma(CC, k, rs.rho, rs.mu_h, rs.h_rule, rs.alpha_1, rs.literal_2rho)
    H = _h_update(Xs, offsets, H, C, CC, gamma, rin.sampled, rs, XC)
    # (b) Q2 SGD steps on W (eq. 18) for the K sampled clients, stacked as (K, k, m)
    S = rin.sampled
    K = S.size
    eta = _step_sizes(H, sizes, offsets, S, rs)
    # grad_i = c_i (H_B H_B' W_i - H_B X_B) + mu_w W_i with c_i = 2 n_i / b_i (unbiased). The (K, k, m)
    # stack is processed in chunks of clients that fit in the CPU cache, with the constants folded
    # into one (K,) factor, so each step makes about four passes over a chunk instead of a dozen
    # over the whole stack (the per-client loop otherwise wins on cache locality; see the benchmark).
    c = 2.0 * sizes[S] / rin.b_i
    sigma = np.zeros(K)
    if rin.noise is not None:
        sigma = np.asarray(rin.sigma_fn(eta, rin.Q2), dtype=np.float64)
    local_noise = rin.noise is not None and check_trust_model(rin.trust_model, DP_FEDC_TRUST_MODELS) == "local"
    chunk = max(1, _CHUNK_REALS // (k * C.shape[1]))
    C_sum = np.zeros_like(C)
    xi_sum = np.zeros_like(C) if rin.noise is not None else None
    gnorm = np.empty((rin.Q2, K))
    n_clipped = 0
    for lo in range(0, K, chunk):  # chunks of clients (cache blocking), each chunk fully batched
        sl = slice(lo, min(K, lo + chunk))
        W, clipped = _w_steps(Xs, H, C, rin, sl, c, eta, rs, gnorm)
        n_clipped += clipped
        if local_noise:  # (c) Gaussian noise on the uploads (eq. 19)
            xi = sigma[sl, None, None] * rin.noise[sl]
            W += xi
            xi_sum += xi.sum(0)
        if rin.trust_model == "local" and observe.observing(UPLOADS):  # what the server receives from them
            observe.report(UPLOADS, (np.asarray(rin.sampled)[sl], W))
        C_sum += W.sum(0)
    sigma_sum = 0.0
    if rin.noise is not None and not local_noise:  # secure aggregation: one draw on the sum
        sigma_sum = aggregate_sigma(sigma)
        xi_sum += sigma_sum * rin.noise
        C_sum += sigma_sum * rin.noise
    C_new = C_sum / K  # the plain mean of the uploads (eq. 20)
    nts = 0.0
    if rin.noise is not None:
        nts = float(np.linalg.norm(xi_sum / K) / max(np.linalg.norm(C_new), 1e-300))
    stats = {
        "gamma": gamma,
        "eta": eta,
        "sigma": sigma,
        "sigma_sum": sigma_sum,
        "clipped_fraction": n_clipped / (K * rin.Q2),
        "noise_to_signal": nts,
        "grad_norm_median": float(np.median(gnorm)),
    }
    return H, C_new, stats


def _rows(offsets, clients):
    starts, ends = offsets[clients], offsets[clients + 1]
    sz = ends - starts
    return np.repeat(starts, sz) + (np.arange(sz.sum()) - np.repeat(np.cumsum(sz) - sz, sz))


def _loop_h_steps(Xs, offsets, H, C, rin: RoundInput, rs: RoundSettings, h_grad_form: str) -> np.ndarray:
    """(a) of :func:`round_loop`: every updating client's H steps, one client after another."""
    k, N = C.shape[0], offsets.size - 1
    H = H.copy()
    updating = range(N) if rs.all_clients_update_H else rin.sampled
    a_rho = 2.0 * rs.rho if rs.literal_2rho else rs.rho
    for i in updating:
        a, e = offsets[i], offsets[i + 1]
        CC = C @ C.T
        gamma = h_gamma(CC, k, rs.rho, rs.mu_h, rs.h_rule, rs.alpha_1, rs.literal_2rho)
        if h_grad_form == "hoisted":
            H[a:e] = h_steps(H[a:e], Xs[a:e] @ C.T, CC, gamma, rs.Q1, rs.rho, rs.mu_h, rs.literal_2rho)
            continue
        Hi, Xi = H[a:e], Xs[a:e]
        for _ in range(rs.Q1):  # eq. (17) with the gradient of eq. (80) (rows = samples)
            g = -2.0 * (Xi - Hi @ C) @ C.T + a_rho * Hi.sum(1, keepdims=True) + (rs.mu_h - rs.rho) * Hi
            Hi = np.maximum(Hi - g / gamma, 0.0)
        H[a:e] = Hi
    return H


def _loop_step_size(H, offsets, i: int, lam_rms, rs: RoundSettings) -> float:
    """Client ``i``'s W step size in :func:`round_loop` (``lam_rms``: the rms Lambda for ``eta_rule="rms"``)."""
    if rs.eta_rule == "rms":
        lam = lam_rms
    else:
        Hi = H[offsets[i] : offsets[i + 1]]
        lam_public = None if rs.lam_public is None else np.asarray(rs.lam_public, dtype=np.float64)
        lam = lam_public[i] if lam_public is not None else np.linalg.eigvalsh(Hi.T @ Hi)[-1]
    return max(rs.alpha_2 * lam, 1e-12)


def round_loop(Xs, sizes, offsets, H, C, rin: RoundInput, settings: RoundSettings, h_grad_form="hoisted"):
    """Reference: the same round as :func:`round_vectorized`, written as a Python loop over clients
    (each client computes its own W'W, W'X_i, H steps, H_i H_i', W steps, noise). Tests check that
    both agree to 1e-10; the benchmark times both.

    ``h_grad_form="hoisted"`` computes W'X_i once per round (as the vectorized round does);
    ``"textbook"`` evaluates eq. (80) as written, -2 W'(X_i - W H_i) + ..., at each of the Q1 steps
    (the per-client loop one writes from the paper's pseudo-code; same numbers up to rounding).
    """
    if h_grad_form not in ("hoisted", "textbook"):
        raise ValueError(f"h_grad_form must be 'hoisted' or 'textbook', got {h_grad_form!r}")
    rs = settings
    N = sizes.size
    H = _loop_h_steps(Xs, offsets, H, C, rin, rs, h_grad_form)
    lam_rms = None
    if rs.eta_rule == "rms":
        lam_all = (
            np.asarray(rs.lam_public, dtype=np.float64)
            if rs.lam_public is not None
            else np.array(
                [
                    np.linalg.eigvalsh(H[offsets[i] : offsets[i + 1]].T @ H[offsets[i] : offsets[i + 1]])[-1]
                    for i in range(N)
                ]
            )
        )
        lam_rms = math.sqrt(np.mean(lam_all**2))
    uploads, etas, sigmas, n_clipped = [], [], [], 0
    for s, i in enumerate(rin.sampled):
        eta = _loop_step_size(H, offsets, i, lam_rms, rs)
        bi = int(rin.b_i[s])
        W = C.copy()
        for r in range(rin.Q2):
            rows = rin.mb_rows[s, r, :bi]
            Hb, Xb = H[rows], Xs[rows]
            g = (sizes[i] / bi) * (2.0 * (Hb.T @ Hb) @ W - 2.0 * Hb.T @ Xb)
            if rs.mu_w:
                g = g + rs.mu_w * W
            if rs.G is not None:
                g, was = clip_by_norm(g, rs.G)
                n_clipped += int(was)
            W = W - g / eta
        etas.append(eta)
        if rin.noise is not None:
            sig = float(rin.sigma_fn(np.array([eta]), rin.Q2)[0])
            if rin.trust_model == "local":
                W = W + sig * rin.noise[s]
            sigmas.append(sig)
        if rin.trust_model == "local" and observe.observing(UPLOADS):  # what the server receives from it
            observe.report(UPLOADS, (np.array([i]), W[None]))
        uploads.append(W)
    total = sum(uploads)
    if rin.noise is not None and rin.trust_model != "local":
        total = total + aggregate_sigma(np.array(sigmas)) * rin.noise
    C_new = total / len(uploads)
    return H, C_new, {"eta": np.array(etas), "sigma": np.array(sigmas), "n_clipped": n_clipped}


# ----------------------------------------------------------------------------------------------
# labels
# ----------------------------------------------------------------------------------------------
def labels_from_H(H: np.ndarray, X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, int]:
    """argmax of every column of H (row of our H); all-zero columns -> nearest centroid."""
    lab = H.argmax(1)
    zero = ~(H > 0).any(1)
    nz = int(zero.sum())
    if nz:
        lab[zero] = nearest(X[zero], C)[0]
    return lab, nz


# ----------------------------------------------------------------------------------------------
# privacy: the releases of every client, the worst client, budget matching
# ----------------------------------------------------------------------------------------------
#: RDP orders used only to screen clients for the worst one: a subset of the accountant's orders
#: (small integer orders are cheap for the without-replacement bound, whose cost grows as order^2). The minimum over fewer orders is
#: larger, so a screening value is an upper bound on the exact epsilon and screening never discards
#: the worst client (:func:`client_privacy`).
SCREEN_ORDERS = tuple(
    o for o in RDP_ORDERS if o in (1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0, 48.0)
)


@dataclasses.dataclass(frozen=True)
class Schedule(MethodConfig):
    """What a private run's releases depend on besides the client sizes: the rounds R, the clients
    per round K, the local steps Q2^t (``q2``: ``"diminishing"``, Q2^t = floor(Qhat/t) + 1, or a
    constant), the minibatch ``b``, the constant ``c0`` of eq. (32) and the cap on the sampling ratio
    q_{i,t} = Q2^t b_i / n_i."""

    GROUP: ClassVar[str] = "dp_fedc"
    rounds: int = param(100, "int", count=True, doc="communication rounds R", loop="round", conf_default=30)
    clients_per_round: int | None = param(
        30, "int", count=True, doc="K clients sampled per round; None = all", conf_default=5
    )
    q2: int | str = param(
        "diminishing",
        ("int", "str"),
        choices=("diminishing",),
        doc="'diminishing' or a constant Q2 >= 1",
        loop="client",
    )
    Qhat: int = param(10, "int", count=True, doc="Qhat of the diminishing schedule", loop="client")
    b: int = param(50, "int", count=True, doc="minibatch size (a client with n_i < b uses n_i)")
    c0: float = param(1.0, "float", gt=0, doc="constant of eq. (32)")
    q_cap: float = param(0.99, "float", gt=0, lt=1, doc="cap on the data sampling ratio q_{i,t}")

    def problems(self, where: str) -> list[str]:
        if isinstance(self.q2, str) and self.q2 != "diminishing":
            return [f"{where}.q2 must be 'diminishing' or an integer >= 1, got {self.q2!r}"]
        if isinstance(self.q2, int) and self.q2 < 1:
            return [f"{where}.q2 (constant Q2, or 'diminishing') must be >= 1, got {self.q2}"]
        return []

    def q2_max(self) -> int:
        return max(q2_schedule(t, self.q2, self.Qhat) for t in range(1, int(self.rounds) + 1))


def _schedule(schedule: Schedule | None, fields: dict) -> Schedule:
    """A privacy function's :class:`Schedule`: given, or built from its keywords (where ``rounds``
    and ``clients_per_round`` are required)."""
    if schedule is not None:
        return Schedule.build(schedule, fields)
    missing = [key for key in ("rounds", "clients_per_round") if fields.get(key) is None]
    if missing:
        raise TypeError(f"missing schedule keyword(s): {', '.join(missing)}")
    return Schedule.build(None, fields)


def _round_epsilon(sizes, sched: Schedule, eps_bar: float):
    """(per-round eps of eq. (32) inverted, q = max_{i,t} q_{i,t})."""
    sizes = np.asarray(sizes)
    q_acc = float(np.max(np.minimum(sched.q2_max() * np.minimum(sched.b, sizes) / sizes, sched.q_cap)))
    p = int(sched.clients_per_round) / sizes.size
    eps = float(round_epsilon(eps_bar, q_acc, p, int(sched.rounds), c0=sched.c0))
    return eps, q_acc


def _client_releases(n_i: int, sched: Schedule, eps_round: float, delta: float, label: str = "") -> list:
    """The releases of one client of size n_i over all rounds (as if sampled every round)."""
    bi = min(int(sched.b), int(n_i))
    counts: dict[tuple, int] = {}
    for t in range(1, int(sched.rounds) + 1):
        Q2 = q2_schedule(t, sched.q2, sched.Qhat)
        q = min(Q2 * bi / n_i, sched.q_cap)
        key = (
            sigma_round(1.0, Q2, 1.0, eps_round, delta, float(q))[0],
            sensitivity(1.0, Q2, 1.0),
            int(min(Q2 * bi, n_i)),
        )
        counts[key] = counts.get(key, 0) + 1
    return [
        release(sig, sens, rounds=cnt, n_i=int(n_i), batch=batch, label=label)
        for (sig, sens, batch), cnt in counts.items()
    ]


def _signature(releases, n_i) -> tuple:
    """What the accountant sees of a client's releases (equal signatures: equal epsilon)."""
    return tuple(
        sorted(
            (r.noise_multipliers[0], r.count, (0, 0) if r.sample_size >= n_i else (r.population, r.sample_size))
            for r in releases
        )
    )


def _profiles(sizes, sched: Schedule, eps_round: float, delta: float) -> list[tuple[int, int]]:
    """(first client, n_i) of every distinct accounting signature among the client sizes, sorted."""
    groups: dict[tuple, tuple[int, int]] = {}
    for n_i in np.unique(sizes):
        sig = _signature(_client_releases(int(n_i), sched, eps_round, delta), int(n_i))
        first = int(np.flatnonzero(sizes == n_i)[0])
        if sig not in groups or first < groups[sig][0]:
            groups[sig] = (first, int(n_i))
    return sorted(groups.values())


def client_privacy(sizes, *, eps_bar: float, delta: float = 1e-4, schedule: Schedule | None = None, **fields) -> dict:
    """The DP releases of every client of a private run and the worst client.

    Sample-level DP of one client's data, replace-one neighbours (Definition 1). Per round a sampled
    client draws Q2^t b_i of its n_i samples without replacement (all n_i, i.e. no amplification,
    when Q2^t b_i >= n_i), takes Q2^t SGD steps each moving W by at most G/eta_i (clipped gradient,
    public eta_i), so replacing one sample moves the upload by at most 2 G Q2^t / eta_i (eq. 28),
    and adds one Gaussian with multiplier sigma/s of eq. (29) (which depends on G and eta_i only
    through s). The client sampling p = K/N is a second amplification that the releases ignore
    (conservative): every round counts. A sample belongs to one client, and the other clients'
    uploads depend on it only through released broadcasts, so the run's epsilon is the largest
    client epsilon (parallel composition over clients, adaptive composition over rounds).

    Clients differ only through n_i. Every distinct accounting signature is screened with the RDP
    accountant on :data:`SCREEN_ORDERS` (an upper bound on the exact value); exact values (all RDP
    orders) are computed in decreasing screening order until the next screening value is below the
    best exact one, so the worst client is found exactly. With one signature, nothing is accounted.

    Returns ``{"eps_round", "q_accounting", "client", "n_i", "releases", "epsilon", "profiles"}``:
    the worst client's index, size and releases, its accountant epsilon (None when not computed:
    a single signature), and ``profiles``: {n_i: exact epsilon or None} for the sizes examined.
    ``schedule``: a :class:`Schedule`, or its fields as keywords (``rounds`` and
    ``clients_per_round`` required).
    """
    sched = _schedule(schedule, fields)
    sizes = np.asarray(sizes)
    eps_round, q_acc = _round_epsilon(sizes, sched, eps_bar)
    N = sizes.size
    cands = _profiles(sizes, sched, eps_round, delta)
    profiles: dict[int, float | None] = {}
    if len(cands) == 1:
        worst, eps_worst = cands[0], None
        profiles[cands[0][1]] = None
    else:

        def rel_of(n_i):
            return _client_releases(n_i, sched, eps_round, delta)

        screen = sorted(
            ((accounted(rel_of(n_i), delta, orders=SCREEN_ORDERS), c, n_i) for c, n_i in cands),
            key=lambda v: (-v[0], v[1]),
        )
        worst, eps_worst = None, -math.inf
        for upper, c, n_i in screen:
            if upper <= eps_worst:
                break
            e = accounted(rel_of(n_i), delta)
            profiles[n_i] = e
            if e > eps_worst:
                worst, eps_worst = (c, n_i), e
    c, n_i = worst
    label = f"dp_fedc noisy W upload, worst client (client {c}, n_i={n_i}) of {N}"
    releases = _client_releases(n_i, sched, eps_round, delta, label)
    return {
        "eps_round": eps_round,
        "q_accounting": q_acc,
        "client": c,
        "n_i": n_i,
        "releases": releases,
        "epsilon": eps_worst,
        "profiles": profiles,
    }


def planned_releases(sizes, *, eps_bar: float, delta: float = 1e-4, schedule: Schedule | None = None, **fields) -> list:
    """The DP releases a private run makes, known before it starts: those of the worst client
    (:func:`client_privacy`, same arguments). They depend only on the client sizes and the schedule:
    the noise multiplier sigma/s of eqs. (28)-(29) does not depend on G or eta."""
    return client_privacy(sizes, eps_bar=eps_bar, delta=delta, schedule=schedule, **fields)["releases"]


def eps_bar_for_budget(
    target_epsilon: float, delta: float, sizes, *, accountant: str = "rdp", rtol: float = 1e-3, **schedule
) -> float:
    """The paper budget eps_bar whose releases the accountant rates at ``target_epsilon`` for the
    worst client (so the budget holds for every client).

    Lets a comparison give DP-FedC the same *accounted* budget as every other method (the paper's
    own calibration, eps_bar = target, is kept for reproductions). The accounted epsilon increases
    with eps_bar (less noise). The root of log eps(exp(x)) = log target is found by regula falsi
    (:func:`fedclust.privacy._search.falsi_root`), first on the cheap screening bound (RDP on :data:`SCREEN_ORDERS`, the largest
    over all client sizes: an upper bound on the worst client's epsilon, so its root is a valid,
    slightly small eps_bar), then refined with the exact accountant from there (a secant step with
    the screening slope; usually two or three exact accountant calls). The returned eps_bar is rated
    at most the target, within ``rtol`` (relative, on eps_bar or on the accounted epsilon).
    """

    target = check_number("target_epsilon", target_epsilon, gt=0)
    rtol = check_number("rtol", rtol, gt=0)
    sched = _schedule(None, schedule)
    sizes = np.asarray(sizes)
    lo, hi, tol = math.log(1e-6), math.log(1e6), math.log1p(rtol)

    def exact(x):
        e = accounted(
            planned_releases(sizes, eps_bar=math.exp(x), delta=delta, schedule=sched), delta, accountant=accountant
        )
        return math.log(max(e, 1e-300)) - math.log(target)

    x0 = math.log(target)
    if accountant == "rdp":

        def screen(x):
            eps_round, _ = _round_epsilon(sizes, sched, math.exp(x))
            e = max(
                accounted(_client_releases(n_i, sched, eps_round, delta), delta, orders=SCREEN_ORDERS)
                for _, n_i in _profiles(sizes, sched, eps_round, delta)
            )
            return math.log(max(e, 1e-300)) - math.log(target)

        x0, _ = falsi_root(screen, x0, lo, hi, tol)
        if x0 >= hi:
            return math.exp(hi)
        g0 = exact(x0)  # <= 0: the screening value bounds the exact one from above
        if g0 > -tol:
            return math.exp(x0)
        h = 0.05
        slope = max((screen(x0 + h) - screen(x0)) / h, 1e-3)  # d log eps / d log eps_bar, about 1-2
        x, _ = falsi_root(exact, x0, lo, hi, tol, step=max(-g0 / slope, tol), g0=g0)
        return math.exp(x)
    x, _ = falsi_root(exact, x0, lo, hi, tol)
    return math.exp(x)


# ----------------------------------------------------------------------------------------------
# the algorithm
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DPFedCOptions(InitOptions, Schedule):
    """DP-FedC's options: the :class:`Schedule` (rounds, clients per round, local steps, minibatch),
    W^0 (:class:`~fedclust.clustering.common_options.InitOptions`: None = data rows when not
    private, ``uniform_box`` when private) and the fields below.

    ``seed`` is one seed; streams "init" (W^0), "init_h" (H^0), "sampling" (clients), "minibatch",
    "noise" (DP): a DP and a non-DP run with the same seed and the same ``init``, ``constants`` and
    ``clip`` share every draw but the noise. rho = rho_factor E/N and mu_h = mu_h_factor E/N with
    E = ||X||_F^2 (``constants="data"``) or n clip^2 (``"public"``); the paper's rho_factor is
    1e-7 (:data:`PAPER_RHO_FACTOR`). ``eps_bar`` is the total budget over R rounds (Theorem 3);
    None = no DP: the run then records a non-DP release (epsilon = inf) naming what it released
    without noise, including the data-derived constants when ``constants`` is (or defaults to)
    ``"data"``. ``G`` clips every minibatch W gradient (required with DP; without DP it is still
    applied when given, so DP/no-DP runs differ only by the noise). ``clip`` None: no clipping
    unless the run is private or ``constants="public"``, which use sqrt(m) max(|low|, |high|) of
    ``init_domain``.
    """

    GROUP: ClassVar[str] = "dp_fedc"
    seed: int = param(0, "int", doc="seed of every random stream of the run", conf=False)
    Q1: int = param(10, "int", count=True, doc="H steps per round", loop="client")
    rho_factor: float = param(1e-2, "float", gt=0, doc="rho = rho_factor E / N")
    mu_h_factor: float = param(1e-10, "float", ge=0, doc="mu_h = mu_h_factor E / N")
    mu_w: float = param(0.0, "float", ge=0, doc="W regulariser")
    h_step: str = param("stable", "str", choices=H_STEPS, doc="the H step rule")
    alpha_1: float | None = param(None, "float", gt=0, doc="H step factor (None: 1.0 stable, 1.1 fast)")
    eta_rule: str = param("per_client", "str", choices=ETA_RULES, doc="the W step size rule")
    alpha_2: float | None = param(None, "float", gt=0, doc="eta_i = alpha_2 Lambda_i (None: ALPHA_2 of constants)")
    eps_bar: float | None = param(
        None, "float", gt=0, doc="total privacy budget of Theorem 3; None = no DP", conf=False
    )
    delta: float = param(1e-4, "float", gt=0, lt=1, doc="delta of the budget", conf=False)
    G: float | None = param(
        None,
        "float",
        gt=0,
        doc="clip bound on every minibatch W gradient (a private pipeline run's)",
        conf_default=0.03,
    )
    all_clients_update_H: bool = param(True, "bool", doc="the paper's (True) or only the sampled clients")
    literal_2rho: bool = param(False, "bool", doc="the paper's 2 rho 1 1' H in the H gradient (eq. 80)")
    h_init: str | None = param(
        None,
        "str",
        choices=H_INITS,
        doc="H^0 ~ U[0, 1] or one-hot nearest centroid; None: nearest when W^0 is the public sample's, else uniform",
    )
    server_rows: Any = param(
        None,
        "any",
        doc="indices of rows of X the server holds as a public sample (out of the clients' data); "
        "None: no public sample",
        conf=False,
    )
    server_data: Any = param(
        None,
        "any",
        doc="or a separate public (n_s, m) array the server holds (no client's data); not both",
        conf=False,
    )
    trust_model: str = param(
        "local", "str", choices=DP_FEDC_TRUST_MODELS, doc="local (the paper: noise per upload) | secure_aggregation"
    )
    constants: str | None = param(
        None, "str", choices=CONSTANTS, doc="public | data; None: public when private, data (the paper's) otherwise"
    )
    clip: float | None = param(None, "float", gt=0, doc="public L2 bound on every sample")
    blas_threads: int | None = param(
        1,
        "int",
        count=True,
        doc="BLAS threads during the rounds (1: many small products); None leaves them alone",
        conf=False,
    )

    def problems(self, where: str) -> list[str]:
        found = super().problems(where)
        if self.server_rows is not None and self.server_data is not None:
            found.append(f"{where}: give server_rows or server_data, not both")
        if self.eps_bar is not None and self.G is None:
            found.append(f"{where}.G (gradient clip bound) must be given (> 0) when eps_bar is set")
        return found


def run(X, client, k: int, options: DPFedCOptions | None = None, *, y=None, progress=None, **settings):
    """Run DP-FedC (Algorithm 1) (:class:`DPFedCOptions`; keyword ``settings`` override
    ``options``); the arguments are every method's (:mod:`fedclust.clustering.common_options`).

    Returns a :class:`ClusteringResult`; ``dp_events`` are the worst client's releases (plus a
    ``non_dp_release`` for each non-private step; a run without DP has one naming its steps);
    ``history`` has per round "objective" (F of eq. 13 at (W^{t+1}, H^t)), "ACC"/"NMI" (with y), "Q2", "gamma", "eta" (mean over sampled
    clients), "sigma" (mean), "q_eff" (mean), "eps_round", "clipped_fraction", "noise_to_signal"
    (||mean noise||_F / ||W||_F), "grad_norm_median" (median unclipped minibatch gradient norm: a
    way to choose G from a non-private warm-up run). The histories are
    computed on raw data: experimenter-side evaluation, not covered by epsilon. ``info`` has
    "sampled_clients", "round_sigma" and "round_eta" ((R, K): per round, the sampled clients (sorted),
    their noise std and step-size denominator), "H" and the privacy settings.
    """
    o = DPFedCOptions.build(options, settings)
    X_all, client, N = check_inputs(X, client, k)
    rows = _split_rows(X_all, client, N, k, o)
    y = None if y is None else np.asarray(y)[~rows.is_server]  # the histories score the clients' rows
    s = _settings(rows.X.shape[1], rows.N, o, public_sample=rows.X_public is not None)
    st = _initial_state(rows.X, rows.client, k, s, X_public=rows.X_public)
    eps_round, q_acc = _calibrate(st.sizes, s)
    hist, logs = _run_rounds(st, s, eps_round, y, progress)
    labels, n_zero_cols = _final_labels(st, X_all, rows.is_server)
    events, worst = _releases(st.sizes, s)
    info = _run_info(st, s, o, rows, logs, eps_round, q_acc, worst, n_zero_cols)
    return ClusteringResult(
        labels=labels,
        centroids=st.C,
        history=hist,
        dp_events=events,
        uploaded_reals=int(logs.uploaded),
        info=info,
    )


# ----------------------------------------------------------------------------------------------
# the steps of run(), in the order it calls them
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Rows:
    """The clients' rows and the server's: ``X``/``client``/``N`` what the clients keep,
    ``is_server`` the mask of the server's rows in the input, ``X_public`` the server's public sample
    (its rows, or the ``server_data`` split; None without one)."""

    X: np.ndarray
    client: np.ndarray
    N: int
    is_server: np.ndarray
    X_public: np.ndarray | None


def _split_rows(X, client, N: int, k: int, o: DPFedCOptions) -> _Rows:
    """The rows the server holds (``server_rows``) taken from the clients, and the public sample."""
    is_server = _server_mask(X.shape[0], o.server_rows)
    X_all = X
    if is_server.any():  # the clients keep the other rows (a client left without rows drops out)
        X = X[~is_server]
        _, client = np.unique(client[~is_server], return_inverse=True)
        N = int(client.max()) + 1
    # a separate public array is checked as every method's (shape, finite values, at least k points)
    X_public = X_all[is_server] if is_server.any() else server_split(X, k, server_data=o.server_data).points
    return _Rows(X=X, client=client, N=N, is_server=is_server, X_public=X_public)


def _run_rounds(st: _State, s: _Settings, eps_round: float, y, progress) -> tuple[dict, _RoundLogs]:
    """The ``s.rounds`` rounds of Algorithm 1 with their history; returns ``(history, round logs)``."""
    hist = new_history(
        y,
        (
            "Q2",
            "gamma",
            "eta",
            "sigma",
            "q_eff",
            "eps_round",
            "clipped_fraction",
            "noise_to_signal",
            "grad_norm_median",
        ),
    )
    logs = _RoundLogs(s.rounds, s.K)
    rng_s, rng_mb, rng_noise = (stream(s.seed, name) for name in ("sampling", "minibatch", "noise"))
    with blas_limit(s.blas_threads):
        for t in range(1, s.rounds + 1):
            _one_round(t, st, s, eps_round, rng_s, rng_mb, rng_noise, logs)
            _record_round(t, st, s, eps_round, logs, hist, y)
            if progress is not None:
                progress(t, hist)
    return hist, logs


def _final_labels(st: _State, X_all: np.ndarray, is_server: np.ndarray) -> tuple[np.ndarray, int]:
    """Every input row's label: the clients' from H, the server's rows by their nearest final centroid;
    and the number of all-zero columns of H."""
    lab_sorted, n_zero_cols = labels_from_H(st.H, st.Xs, st.C)
    labels = np.empty(X_all.shape[0], dtype=np.int64)
    labels[~is_server] = lab_sorted[st.lay.inverse]
    labels[is_server] = nearest(X_all[is_server], st.C)[0]  # the server's rows: nearest final centroid
    return labels, n_zero_cols


def _run_info(st, s: _Settings, o: DPFedCOptions, rows: _Rows, logs, eps_round, q_acc, worst, n_zero_cols) -> dict:
    """The run's ``info``: the constants and settings used, the privacy figures and the round logs."""
    is_server = rows.is_server
    return {
        "rho": st.rho,
        "mu_h": st.mu_h,
        "mu_w": s.mu_w,
        "G": s.G,
        "clip": s.clip,
        "constants": s.constants,
        "init": "given" if s.init_centroids is not None else ("public_sample" if s.public_sample else s.init),
        "h_init": s.h_init,
        "server_rows": int(is_server.sum()),
        "server_data_rows": 0 if o.server_data is None or is_server.any() else int(rows.X_public.shape[0]),
        "trust_model": s.trust_model,
        "eps_bar": s.eps_bar if s.private else math.inf,
        "eps_round": eps_round,
        "delta": s.delta,
        "q_accounting": q_acc,
        "p": s.K / rows.N,
        "c0": s.c0,
        "clients_per_round": s.K,
        "n_clients": rows.N,
        "h_step": s.h_step,
        "alpha_1": s.alpha_1,
        "eta_rule": s.eta_rule,
        "alpha_2": s.alpha_2,
        "zero_columns": n_zero_cols,
        "privacy_notes": s.notes,
        "eps_round_gt_1": bool(s.private and eps_round > 1.0),
        "dp_event_client": worst.get("client"),
        "dp_event_n_i": worst.get("n_i"),
        "client_epsilon": {str(key): v for key, v in worst.get("profiles", {}).items()},
        "H": st.H[st.lay.inverse],
        "sampled_clients": logs.sampled,
        "round_sigma": logs.sigma,
        "round_eta": logs.eta,
        "round_sigma_sum": logs.sigma_sum,
    }


@dataclasses.dataclass(frozen=True)
class _Settings(DPFedCOptions):
    """The run's options with the defaults that depend on the data and on privacy resolved
    (``clients_per_round`` = ``K``); ``notes`` collects the privacy notes."""

    K: int = param(1, "int", count=True)
    private: bool = param(False, "bool")
    public_sample: bool = param(False, "bool")
    notes: list = param([], "list")


def _server_mask(n: int, server_rows) -> np.ndarray:
    """(n,) bool: the rows the server holds as its public sample."""
    mask = np.zeros(n, dtype=bool)
    if server_rows is not None:
        idx = np.asarray(server_rows, dtype=np.int64).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"server_rows must be row indices in [0, {n}), got values from {idx.min()} to {idx.max()}")
        mask[idx] = True
        if mask.all():
            raise ValueError("server_rows takes every row: no client data is left")
    return mask


def _settings(m: int, N: int, o: DPFedCOptions, public_sample: bool = False) -> _Settings:
    """Resolve the defaults of ``o`` that depend on privacy, the data dimension ``m``, the
    number of clients ``N`` and whether the server holds a public sample."""
    private = o.eps_bar is not None
    # W^0 from the public sample unless the caller names another start
    public_sample = public_sample and o.init_centroids is None and o.init is None
    constants = o.constants or ("public" if private else "data")
    notes: list[str] = []
    clip = o.clip
    if clip is None and (private or constants == "public"):
        clip = domain_clip(m, o.init_domain)
        notes.append(
            f"sample clip not given: the largest row norm of the public domain, sqrt(m) max|domain| = "
            f"{clip:.4g}, is used"
        )
    elif clip is None:
        domain_clip(m, o.init_domain)  # validates init_domain
    K = check_clients_per_round(o.clients_per_round, N)
    resolved = {
        "clients_per_round": K,
        "alpha_1": o.alpha_1 if o.alpha_1 is not None else (1.1 if o.h_step == "fast" else 1.0),
        "alpha_2": o.alpha_2 if o.alpha_2 is not None else ALPHA_2[constants],
        "init": check_init(o.init, private),
        "constants": constants,
        "clip": clip,
        # a good start is worth keeping: one-hot H^0 at the public W^0; the paper's U[0, 1] otherwise
        "h_init": o.h_init or ("nearest" if public_sample else "uniform"),
    }
    return _Settings(**{**o.as_dict(), **resolved}, K=K, private=private, public_sample=public_sample, notes=notes)


@dataclass
class _State:
    """What a round reads and updates: the client-sorted data, the penalty constants, W' (``C``), H."""

    lay: SegmentLayout
    Xs: np.ndarray
    x_sq: np.ndarray
    rho: float
    mu_h: float
    lam_public: np.ndarray | None
    C: np.ndarray
    H: np.ndarray
    XC: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        return self.lay.sizes

    @property
    def offsets(self) -> np.ndarray:
        return self.lay.offsets


def _initial_state(X, client, k, s: _Settings, X_public: np.ndarray | None = None) -> _State:
    """Clip the data, sort it by client, set rho and mu_h, and draw W^0 and H^0. ``X_public``: the
    server's public sample (clipped like the data), for W^0 (``s.public_sample``) and for the public
    energy in rho and mu_h (instead of the worst case n clip^2)."""
    n, N = X.shape[0], int(client.max()) + 1
    lay = SegmentLayout(client, N)
    check_all_clients_nonempty(lay.sizes)
    X = clip_data(X, s.clip)  # every sample within the public bound (a no-op without a clip)
    Xp = None if X_public is None else clip_data(np.asarray(X_public, dtype=np.float64), s.clip)
    Xs = np.ascontiguousarray(X[lay.order])
    if s.constants == "public":
        energy = public_energy(n, s.clip) if Xp is None else sample_energy(n, Xp)
        rho, mu_h = penalty_params(None, N, s.rho_factor, s.mu_h_factor, energy=energy)
        lam_public = public_lambda(lay.sizes, k)
    else:
        rho, mu_h = penalty_params(X, N, s.rho_factor, s.mu_h_factor)
        lam_public = None
    if s.public_sample:
        C = public_start(Xp, k, s.seed)
    else:
        C = initial_centroids(X, k, s.seed, s.init_centroids, init=s.init, clip=s.clip, domain=s.init_domain)
    if s.h_init == "uniform":
        H = stream(s.seed, "init_h").random((n, k))
    else:
        H = np.zeros((n, k))
        H[np.arange(n), nearest(Xs, C)[0]] = 1.0
    return _State(
        lay=lay, Xs=Xs, x_sq=np.square(Xs).sum(1), rho=rho, mu_h=mu_h, lam_public=lam_public, C=C, H=H, XC=Xs @ C.T
    )


def _calibrate(sizes: np.ndarray, s: _Settings) -> tuple[float, float]:
    """The per-round epsilon of eq. (32) and the largest sampling ratio q the accountant uses."""
    if not s.private:
        return math.inf, float(np.max(np.minimum(s.q2_max() * np.minimum(s.b, sizes) / sizes, s.q_cap)))
    eps_round, q_acc = _round_epsilon(sizes, s, s.eps_bar)
    logger.info(
        "dp_fedc: eps_bar=%g -> per-round eps=%.4g (q=%.3g, p=%.3g, R=%d, c0=%g)",
        s.eps_bar,
        eps_round,
        q_acc,
        s.K / sizes.size,
        s.rounds,
        s.c0,
    )
    return eps_round, q_acc


class _RoundLogs:
    """Per-round records that go into ``info``: sampled clients, their noise std and step size."""

    def __init__(self, rounds: int, K: int):
        self.sampled = np.empty((rounds, K), dtype=np.int64)
        self.sigma = np.zeros((rounds, K))
        self.eta = np.zeros((rounds, K))
        self.sigma_sum = np.zeros(rounds)  # the std of the one draw on the sum (secure aggregation)
        self.uploaded = 0
        self.last: dict = {}


def _sigma_fn(s: _Settings, eps_round: float, q_it: np.ndarray):
    """sigma_{i,t} of eq. (29) for the sampled clients, given their step sizes eta (one scalar formula each)."""

    def sigma(eta, Q2):
        out = np.empty(eta.size)
        for j in range(eta.size):
            out[j], note = sigma_round(s.G, Q2, float(eta[j]), eps_round, s.delta, float(q_it[j]))
            if note and note not in s.notes:
                s.notes.append(note)
        return out

    return sigma


def _one_round(t: int, st: _State, s: _Settings, eps_round: float, rng_s, rng_mb, rng_noise, logs: _RoundLogs) -> None:
    """Round t of Algorithm 1: sample clients, draw their minibatches and noise, update H and W."""
    Q2 = q2_schedule(t, s.q2, s.Qhat)
    S = sample_clients(rng_s, st.sizes.size, s.K)
    local, mask, b_i = draw_minibatches(rng_mb, st.sizes[S], Q2, s.b)
    mb_rows = local + st.offsets[S][:, None, None]
    q_it = np.minimum(Q2 * b_i / st.sizes[S], s.q_cap)
    noise = sigma_fn = None
    if s.private:
        shape = st.C.shape if s.trust_model == "secure_aggregation" else (s.K,) + st.C.shape
        noise = rng_noise.standard_normal(shape)
        sigma_fn = _sigma_fn(s, eps_round, q_it)
    rin = RoundInput(S, mb_rows, mask, b_i, Q2, noise, sigma_fn, s.trust_model)
    settings = RoundSettings(
        Q1=s.Q1,
        rho=st.rho,
        mu_h=st.mu_h,
        mu_w=s.mu_w,
        h_rule=s.h_step,
        alpha_1=s.alpha_1,
        eta_rule=s.eta_rule,
        alpha_2=s.alpha_2,
        G=s.G,
        literal_2rho=s.literal_2rho,
        all_clients_update_H=s.all_clients_update_H,
        lam_public=st.lam_public,
    )
    st.H, st.C, out = round_vectorized(st.Xs, st.sizes, st.offsets, st.H, st.C, rin, settings, XC=st.XC)
    st.XC = st.Xs @ st.C.T  # shared by this round's objective and the next round's H step
    logs.uploaded += s.K * st.C.size
    logs.sampled[t - 1], logs.sigma[t - 1], logs.eta[t - 1] = S, out["sigma"], out["eta"]
    logs.sigma_sum[t - 1] = out["sigma_sum"]
    logs.last = {**out, "Q2": Q2, "q_eff": float(np.mean(q_it))}


def _record_round(t: int, st: _State, s: _Settings, eps_round: float, logs: _RoundLogs, hist: dict, y) -> None:
    """History of round t: F(W^{t+1}, H^t), the scores against ``y`` and the privacy diagnostics."""
    f = sample_objective(st.Xs, st.XC, st.C @ st.C.T, st.H, st.rho, st.mu_h, st.x_sq)
    hist["objective"].append(float(f.sum() / st.sizes.size + 0.5 * s.mu_w * np.square(st.C).sum()))
    if y is not None:
        lab_sorted, _ = labels_from_H(st.H, st.Xs, st.C)
        log_scores(hist, y, lab_sorted[st.lay.inverse])
    out = logs.last
    hist["Q2"].append(out["Q2"])
    hist["gamma"].append(float(out["gamma"]))
    hist["eta"].append(float(np.mean(out["eta"])))
    hist["sigma"].append(float(np.mean(out["sigma"])))
    hist["q_eff"].append(out["q_eff"])
    hist["eps_round"].append(eps_round)
    hist["clipped_fraction"].append(float(out["clipped_fraction"]))
    hist["noise_to_signal"].append(float(out["noise_to_signal"]))
    hist["grad_norm_median"].append(out["grad_norm_median"])
    logger.info(
        "dp_fedc round %d/%d F=%.6g%s",
        t,
        s.rounds,
        hist["objective"][-1],
        f" ACC={hist['ACC'][-1]:.4f}" if y is not None else "",
    )
    report_round("round", t, s.rounds)


def _releases(sizes: np.ndarray, s: _Settings) -> tuple[list, dict]:
    """The run's releases for the accountant (the worst client's) and that client's profile.

    A run without DP still names what it released without noise (epsilon = inf), never an empty
    list that an accountant would rate epsilon = 0.
    """
    if not s.private:
        what = "W uploads released without noise (eps_bar null)"
        if s.constants == "data":
            what += (
                "; rho, mu_h and eta computed from the private data (constants='data', the default "
                "without DP), themselves a release"
            )
        s.notes.append(f"not a DP run: {what}")
        return [non_dp_release(f"dp_fedc without DP: {what}")], {}
    worst = client_privacy(sizes, eps_bar=s.eps_bar, delta=s.delta, schedule=s)
    events = list(init_release(True, s.init, s.init_centroids, "dp_fedc initial centroids W^0"))
    if s.constants == "data":
        events.append(
            non_dp_release(
                "dp_fedc noise calibrated from private data (constants='data': eta_i from lambda_max(H_i H_i') "
                "of all the client's rows, rho and mu_h from ||X||_F^2), so the sensitivity 2 G Q2/eta of eq. (28) "
                "and the subsampling amplification do not hold"
            )
        )
    events.extend(worst["releases"])
    return events, worst
