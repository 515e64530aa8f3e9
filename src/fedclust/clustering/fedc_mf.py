"""FedCAvg and FedCGds: federated clustering via matrix factorization.

The method, our choices and measured numbers: ``docs/methods/fedc_mf.md``.

Paper: S. Wang and T.-H. Chang, "Federated Clustering via Matrix Factorization Models: From Model
Averaging to Gradient Sharing", arXiv:2002.04930 (text of September 17, 2021).

Model (eqs. 2, 4, 5, 104). Columns are samples in the paper; this module receives ``X`` with rows =
samples and works with ``X^T`` implicitly. With W (M x K, columns = scaled centroids) and H (K x N)::

    F(W, H) = (1/N) ||X^T - W H||_F^2 + sum_j [ (rho/2) ((1^T h_j)^2 - ||h_j||^2) + (nu/2) ||h_j||^2 ]
    W in [min X, max X] (box),  H >= 0,  label of sample j = argmax_i H[i, j].

Client p holds the columns X_p, H_p (N_p samples, omega_p = N_p / N); its local objective (5) is
F_p = ||X_p - W H_p||^2 / N_p + R_H(H_p) / omega_p, so that sum_p omega_p F_p = F.

Methods
-------
* :func:`run_fedcavg`: Algorithm 1 (model averaging). Every round the server broadcasts
  W^s = P_W(sum_p omega_p W_p^{s-1,Q}) (eq. 9); each client takes Q1 projected H steps (10) with W^s,
  then Q2 *unprojected* gradient steps (12) on its own copy of W with its H_p fixed, and uploads W_p
  (M K reals). Optional diminishing Q2^s = floor(Q_hat / s) + 1 (Theorem 2).
* :func:`run_fedcgds`: Algorithm 2 (gradient sharing). Each round m of the P clients, drawn uniformly
  without replacement, take Q1 projected H steps (70) and upload the differences
  U_p = H_p' H_p'^T - H_p H_p^T and V_p = X_p H_p'^T - X_p H_p^T (71) (M K + K^2 reals). The server
  keeps the running sums G1 = (2/N) sum_p H_p H_p^T and G2 = (2/N) sum_p X_p H_p^T (72), initialised
  from all clients, and takes Q2 projected W steps on the exact gradient W G1 - G2 (73)-(74).
* :func:`run_fedcpalm`: the naive model-averaging baseline of Remark 1: each client runs
  ``local_steps`` (= Q/2) PALM steps (7)-(8) (projected H step, then projected W step), the server
  averages and projects W.
* :func:`run_sncp`: centralized SNCP stand-in: PALM (3a)-(3b) on the pooled data with the
  rho-continuation; it is FedCGds with one client.
* :func:`run_kmeanspp`: sklearn K-means with k-means++ seeding on the pooled data.

SNCP continuation. Every solver takes ``continuation="sncp"``: after each round the
relative change eps = |F^s - F^{s-1}| / F^{s-1} is computed; the run stops when eps < ``tol``
(default 1e-8 under continuation); otherwise when eps < ``rho_tol`` (2e-5 synthetic, 8e-5 MNIST, see
:data:`SNCP_RHO_TOL`) rho is multiplied by ``rho_growth`` (1.5). At a rho change the objective of the
*current* iterate is re-evaluated with the new rho and used as F^{s-1} of the next test, so the
jump of F caused by the new penalty never counts as progress. ``rounds`` is the maximum number of
(accumulated) rounds. Without continuation, rho stays fixed and ``tol`` (default None: off) can stop
early.

Partial participation and the rho trigger. Under the paper's per-round test
(``rho_trigger="round"``), with m << P the change of F in one round reflects only the m sampled clients:
a round whose clients barely move reads as converged and raises rho, often several rounds in a row,
while most clients have not taken one H step at the previous rho; once rho is large, their H columns
lock onto whatever entry leads; the cause is the trigger, not the step sizes or the running sums.
``rho_trigger="epoch"`` (ours) measures eps over a window of E = ceil(P/m) rounds, F^s against F^{s-E}
(or the re-evaluated iterate after a rho change), and tests it only at the end of a window, for both
the rho increase and the stop: each rho stage then gets about one participation per client, as one
full-participation round does. It is the paper's rule when m = P; at m = P/10 it takes about E times
more rounds but about the uploads of m = P. Measurements: ``docs/methods/fedc_mf.md``.

Step sizes. ``step_rule="lipschitz"`` (default) uses the exact Lipschitz
constants of the gradients as implemented, with c_p = (gamma/2) L_{H_p} for every H block;
d = (gamma/2) L_W for FedCGds / SNCP (Theorem 3) and d = gamma L_W (Theorem 2) or (s+1) L_W
(``d_schedule="thm1"``, Theorem 1) for FedCAvg. L_{H_p} is the spectral norm of the per-column Hessian
(2/N_p) W^T W + (N/N_p)(rho 1 1^T + (nu - rho) I) (computed by ``eigvalsh``, so it includes the rho term
the paper drops); the N_p factors cancel in the step, so every client's H step equals the
centralized one. FedCAvg's L_W is sqrt(sum_p omega_p L_{W_p}^2) with L_{W_p} = (2/N_p) lmax(H_p H_p^T)
(``lw="clients"``, Theorem 1/2) or (2/N) lmax(H H^T) (``lw="global"``); both use the global H of the
current round, an oracle in a real deployment. ``step_rule="paper"`` is the literal rule of
Sec. V: c_p = lmax(W^T W)/2, d = lmax(H H^T)/2 (FedCGds) or lmax(H H^T) (FedCAvg), applied to the
normalized gradients of (5), which gives far shorter steps.

Communication: ``history["comm_reals"]`` is the cumulative number of reals uploaded: FedCAvg
and FedCPALM M K per client per round, FedCGds (M K + K^2) per participating client per round; the
one-off upload that initialises G1, G2 is excluded (as in the paper) and reported in
``info["init_upload_reals"]``. Centralized SNCP uploads nothing.

Vectorization. Samples are sorted by client once. H steps of all (participating) clients are one
(K x K) @ (K x n) product per step. FedCGds sums of U_p, V_p are one product over the participating
columns. FedCAvg's Q2 local W steps are affine in W_p, W_p^{Q2} = W^s A_p^{Q2} + a_p X_p H_p^T
sum_{i<Q2} A_p^i with A_p = I - a_p H_p H_p^T (K x K), so the server average needs only the batched
(P, K, K) matrices and one (K x N) @ (N x M) product (exactly equal to running the steps). FedCPALM
uses zero-padded (clients, N_p max, M) blocks in memory-bounded chunks of clients.

Client ids are the distinct values of ``client``; ids with no sample are ignored (P = number of
clients holding data). The small (K x K)-sized products run on one BLAS thread (threaded OpenBLAS is far slower on them);
only the products with the whole data set use all BLAS threads.

Shared initialization: ``init=None`` draws (W0, H0) from ``fedclust.rng.stream(seed, "init")`` with
:func:`make_init`; pass ``init=make_init(X, k, trial_seed)`` (or a ``(W0, H0)`` tuple / a dict with
"W", "H") to give every method of a trial the same starting point. Client sampling uses the
"sampling" stream.

Example (one trial of Fig. 6)::

    init = make_init(X, k, trial)
    common = dict(init=init, seed=trial, continuation="sncp", rho_tol=SNCP_RHO_TOL["mnist"], y=y)
    gds = run_fedcgds(X, client, k, rounds=400, Q1=100, Q2=100, clients_per_round=50, **common)
    avg = run_fedcavg(X, client, k, rounds=400, Q1=10, q_hat=10, **common)
    ref = run_sncp(X, k, rounds=800, Q1=10, Q2=10, **common)
    km = run_kmeanspp(X, k, seed=trial, y=y)

Every result has ``history["objective"|"eps"|"rho"|"comm_reals"]`` (+ "ACC", "NMI" with ``y``), one
entry per round, and ``uploaded_reals`` = the last "comm_reals".
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, ClassVar

import numpy as np
from sklearn.cluster import KMeans

from fedclust.clustering.base import ClusteringResult, check_inputs
from fedclust.metrics import clustering_accuracy, nmi
from fedclust.options import MethodConfig, param
from fedclust.progress import report as report_round
from fedclust.rng import stream
from fedclust.threads import current_threads, thread_limits

logger = logging.getLogger(__name__)

#: rho-increase thresholds tau_rho of the paper's clustering experiments (Sec. V-D).
SNCP_RHO_TOL = {"synthetic": 2e-5, "mnist": 8e-5}

STEP_RULES = ("lipschitz", "paper")
LW_RULES = ("clients", "global")
D_SCHEDULES = ("thm2", "thm1")
CONTINUATIONS = (None, "sncp")
RHO_TRIGGERS = ("round", "epoch")

ProgressFn = Callable[[int, dict], Any]


_BLAS = {"threads": None}


def _blas_limit(n_threads):
    """A context limiting BLAS/OpenMP (and torch, if imported) threads to ``n_threads`` (None: the BLAS
    thread count found at the first call); see :func:`fedclust.threads.thread_limits`."""

    if n_threads is None:
        if _BLAS["threads"] is None:
            _BLAS["threads"] = current_threads()["blas"] or 1
        n_threads = _BLAS["threads"]
    return thread_limits(n_threads, name="blas_threads")


def _one_blas_thread():
    """Small products (K x K times K x n, M x K times K x K) run on one BLAS thread.

    OpenBLAS threads cost far more than they give on such products; on a busy machine a threaded
    (20 x 2000) @ (2000 x 20) took 0.1 s instead of 0.1 ms. The solvers run under this limit and
    lift it only for the products with the whole data set (:func:`_big`).
    """
    return _blas_limit(1)


def _big(a, b):
    """``a @ b`` for the products with X (N x M), with BLAS threads restored when it is large."""
    if a.size * b.shape[-1] < 20_000_000:  # small: one thread is as fast, and skips the switch
        return a @ b
    with _blas_limit(None):
        return a @ b


# --------------------------------------------------------------------------- data and state
class _Data:
    """Pooled data sorted by client (samples of a client are contiguous)."""

    def __init__(self, X, client, k: int):
        X, client, _ = check_inputs(X, client, k)
        _, cid = np.unique(client, return_inverse=True)  # drops empty clients
        self.order = np.argsort(cid, kind="stable")
        self.inverse = np.empty_like(self.order)
        self.inverse[self.order] = np.arange(self.order.size)
        self.X = np.ascontiguousarray(X[self.order])  # (N, M) float64, rows sorted by client
        self.cid = cid[self.order]
        self.n_p = np.bincount(self.cid).astype(np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.n_p)[:-1]]).astype(np.int64)
        self.P = int(self.n_p.size)
        self.N, self.M = self.X.shape
        self.K = int(k)
        self.omega = self.n_p / self.N
        self.lo, self.hi = float(self.X.min()), float(self.X.max())
        self.xsq = float(np.einsum("ij,ij->", self.X, self.X))

    def columns_of(self, clients: np.ndarray) -> np.ndarray:
        """Sorted column indices of the given clients."""
        return np.flatnonzero(np.isin(self.cid, clients))

    def labels(self, H: np.ndarray) -> np.ndarray:
        """Labels in the caller's sample order."""
        return np.argmax(H, axis=0)[self.inverse].astype(np.int64)


def make_init(X, k: int, seed: int, *, w_init: str = "samples", normalize_h: bool = True) -> dict:
    """A random initial point, from stream ``"init"`` of ``seed``.

    * ``W0`` (M x K): ``w_init="samples"``: K distinct samples (rows of ``X``) as columns;
      ``"uniform"``: i.i.d. U[min X, max X].
    * ``H0`` (K x N): i.i.d. U[0, 1], columns rescaled to sum to 1 when ``normalize_h``.

    Returns ``{"W": W0, "H": H0}`` in the caller's sample order (column j of H0 is row j of X).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
    N, M = X.shape
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= N:
        raise ValueError(f"k must be an int in [1, {N}], got {k!r}")
    if w_init not in ("samples", "uniform"):
        raise ValueError(f"w_init must be 'samples' or 'uniform', got {w_init!r}")
    rng = stream(seed, "init")
    if w_init == "samples":
        W = X[rng.choice(N, size=k, replace=False)].T.copy()
    else:
        W = rng.uniform(X.min(), X.max(), size=(M, k))
    H = rng.uniform(0.0, 1.0, size=(k, N))
    if normalize_h:
        H /= H.sum(axis=0, keepdims=True)
    return {"W": W, "H": H}


def _resolve_init(init, X_caller, data: _Data, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if init is None:
        init = make_init(X_caller, data.K, seed)
    if isinstance(init, dict):
        if "W" not in init or "H" not in init:
            raise ValueError("init must be a dict with keys 'W' (M x K) and 'H' (K x N), or a (W0, H0) tuple")
        W, H = init["W"], init["H"]
    else:
        try:
            W, H = init
        except (TypeError, ValueError):
            raise ValueError("init must be None, a dict with 'W' and 'H', or a (W0, H0) tuple") from None
    W = np.array(W, dtype=np.float64)
    H = np.array(H, dtype=np.float64)
    if W.shape != (data.M, data.K):
        raise ValueError(f"init W must have shape (n_features, k) = {(data.M, data.K)}, got {W.shape}")
    if H.shape != (data.K, data.N):
        raise ValueError(f"init H must have shape (k, n_samples) = {(data.K, data.N)}, got {H.shape}")
    if not (np.isfinite(W).all() and np.isfinite(H).all()):
        raise ValueError("init W and H must be finite")
    if (H < 0).any():
        raise ValueError("init H must be nonnegative (H >= 0 is the constraint set)")
    W = np.clip(W, data.lo, data.hi)  # start feasible: P_W(W0), as in round 1 of eq. (9)
    return W, np.ascontiguousarray(H[:, data.order])


# --------------------------------------------------------------------------- model pieces
def _regularizer(H: np.ndarray, rho: float, nu: float) -> float:
    """sum_j R_H(h_j) of eq. (104)."""
    col = H.sum(axis=0)
    sq = float(np.einsum("ij,ij->", H, H))
    return 0.5 * rho * (float(col @ col) - sq) + 0.5 * nu * sq


def _objective_stats(data: _Data, W, G1, G2, H, rho, nu) -> float:
    """F from G1 = (2/N) H H^T and G2 = (2/N) X^T H^T (no raw data needed)."""
    fit = data.xsq / data.N - float(np.einsum("ij,ij->", W, G2)) + 0.5 * float(np.einsum("ij,ij->", W.T @ W, G1))
    return fit + _regularizer(H, rho, nu)


def _h_hessian(A: np.ndarray, rho: float, nu: float, N: int) -> np.ndarray:
    """Per-column Hessian of F in h_j: (2/N) W^T W + rho 1 1^T + (nu - rho) I (A = W^T W, may be batched)."""
    K = A.shape[-1]
    return (2.0 / N) * A + rho * np.ones((K, K)) + (nu - rho) * np.eye(K)


def _spectral_norm_sym(S: np.ndarray) -> np.ndarray:
    ev = np.linalg.eigvalsh(S)
    return np.maximum(np.abs(ev[..., 0]), np.abs(ev[..., -1]))


def _h_step_scale(data: _Data, A: np.ndarray, rho, nu, gamma, step_rule, cols=None):
    """Step length on the *global* H gradient for every column (scalar, or (n,) for the paper rule).

    Local gradient of client p = (N/N_p) x global gradient, and L_{H_p} = (N/N_p) L_H(global), so with
    c_p = (gamma/2) L_{H_p} the step on the global gradient is 2 / (gamma L_H) for every client.
    """
    if step_rule == "lipschitz":
        L = float(_spectral_norm_sym(_h_hessian(A, rho, nu, data.N)))
        return 2.0 / (gamma * max(L, 1e-300))
    # paper: c_p = lmax(W^T W)/2 applied to the local gradient, i.e. (2/lmax) (N/N_p) on the global one
    lam = max(float(np.linalg.eigvalsh(A)[-1]), 1e-300)
    n_col = data.n_p[data.cid if cols is None else data.cid[cols]]
    return (2.0 / lam) * (data.N / n_col)


def _h_phase(H, B, A, rho, nu, N, steps: int, alpha):
    """``steps`` projected gradient steps (eqs. 10 / 70) on the columns of H (K x n), W fixed.

    ``B`` = W^T X^T of these columns, ``A`` = W^T W, ``alpha`` the step on the global gradient
    (2/N)(A H - B) + rho 1 1^T H + (nu - rho) H.
    """
    if steps == 0:
        return H
    Hess = _h_hessian(A, rho, nu, N)
    if np.ndim(alpha) == 0:
        # H <- max((I - alpha Hess) H + alpha (2/N) B, 0): one K x K product per step
        Mstep = np.eye(A.shape[0]) - alpha * Hess
        Bs = (alpha * 2.0 / N) * B
        for _ in range(steps):
            H = Mstep @ H
            H += Bs
            np.maximum(H, 0.0, out=H)
        return H
    alpha = np.asarray(alpha)[None, :]
    Bs = (2.0 / N) * B
    for _ in range(steps):
        H = np.maximum(H - alpha * (Hess @ H - Bs), 0.0)
    return H


def _segment_gram(data: _Data, H: np.ndarray) -> np.ndarray:
    """(P, K, K) per-client H_p H_p^T as a segment sum of per-sample outer products."""
    K = H.shape[0]
    outer = np.einsum("an,bn->nab", H, H).reshape(H.shape[1], K * K)
    return np.add.reduceat(outer, data.starts, axis=0).reshape(data.P, K, K)


# --------------------------------------------------------------------------- engines
@dataclasses.dataclass(frozen=True)
class _Steps:
    """The steps of a round shared by FedCGds and FedCAvg: ``Q1`` H steps, ``Q2`` W steps, the step
    constant ``gamma`` and the ``step_rule`` ("lipschitz" or "paper")."""

    Q1: int
    Q2: int
    gamma: float
    step_rule: str


class _Engine:
    """State of one solver; ``round(s)`` runs round s, ``objective()`` evaluates F at the state."""

    name = "engine"
    upload_per_round = 0

    def __init__(self, data: _Data, W, H, rho, nu):
        self.data, self.W, self.H, self.rho, self.nu = data, W, H, float(rho), float(nu)

    def set_rho(self, rho: float, s: int | None = None):
        self.rho = float(rho)


class _GdsEngine(_Engine):
    """FedCGds (Algorithm 2); with one client it is centralized PALM/BCD (SNCP's inner solver)."""

    name = "fedcgds"

    def __init__(self, data, W, H, rho, nu, *, steps: _Steps, m, rng, recompute_stats, central):
        super().__init__(data, W, H, rho, nu)
        self.Q1, self.Q2, self.gamma, self.step_rule = steps.Q1, steps.Q2, steps.gamma, steps.step_rule
        self.m = m
        self.rng, self.recompute_stats = rng, recompute_stats
        N = data.N
        # Initial upload from ALL clients
        self.G1 = (2.0 / N) * (H @ H.T)
        self.G2 = (2.0 / N) * _big(data.X.T, H.T)
        self.upload_per_round = 0 if central else m * (data.M * data.K + data.K**2)
        self.init_upload = 0 if central else data.P * (data.M * data.K + data.K**2)

    def round(self, s: int):
        d, N = self.data, self.data.N
        W = self.W
        A = W.T @ W
        if self.m < d.P:
            active = np.sort(self.rng.choice(d.P, size=self.m, replace=False))
            cols = d.columns_of(active)
            Xa = d.X[cols]
            H0 = self.H[:, cols]
        else:
            active, cols, Xa, H0 = None, None, d.X, self.H
        alpha = _h_step_scale(d, A, self.rho, self.nu, self.gamma, self.step_rule, cols)
        H1 = _h_phase(H0.copy(), _big(Xa, W).T, A, self.rho, self.nu, N, self.Q1, alpha)  # (70)
        # (71)-(72): the sum over participating clients of U_p and V_p, added to the running sums
        if cols is None:
            self.H = H1
        else:
            self.H[:, cols] = H1  # idle clients keep their H_p
        if self.recompute_stats:
            self.G1 = (2.0 / N) * (self.H @ self.H.T)
            self.G2 = (2.0 / N) * _big(d.X.T, self.H.T)
        else:
            U = H1 @ H1.T - H0 @ H0.T  # sum over the participating clients of U_p
            V = _big(Xa.T, (H1 - H0).T)  # ... and of V_p
            self.G1 += (2.0 / N) * U
            self.G2 += (2.0 / N) * V
        # (73)-(74): Q2 projected W steps on the exact gradient W G1 - G2
        if self.Q2:
            L_W = float(np.linalg.eigvalsh(self.G1)[-1])
            if self.step_rule == "lipschitz":
                dstep = 0.5 * self.gamma * L_W
            else:  # paper: d = lmax(H H^T)/2 = (N/4) lmax(G1)
                dstep = 0.25 * N * L_W
            if dstep > 0:
                Mw = np.eye(d.K) - self.G1 / dstep
                Cw = self.G2 / dstep
                for _ in range(self.Q2):
                    W = W @ Mw
                    W += Cw
                    np.clip(W, d.lo, d.hi, out=W)
        self.W = W
        self.last_active = active

    def objective(self) -> float:
        return _objective_stats(self.data, self.W, self.G1, self.G2, self.H, self.rho, self.nu)


class _AvgEngine(_Engine):
    """FedCAvg (Algorithm 1), all clients every round."""

    name = "fedcavg"

    def __init__(self, data, W, H, rho, nu, *, steps: _Steps, q_hat, q_hat_restart, lw, d_schedule):
        super().__init__(data, W, H, rho, nu)
        self.Q1, self.Q2, self.gamma, self.step_rule = steps.Q1, steps.Q2, steps.gamma, steps.step_rule
        self.q_hat, self.q_hat_restart, self.lw, self.d_schedule = q_hat, q_hat_restart, lw, d_schedule
        self.upload_per_round = data.P * data.M * data.K
        self.stage_start = 0  # round index at the last rho change (for q_hat_restart)
        self.XtHt = _big(data.X.T, H.T)  # X^T H^T at the current H, for the objective
        self.HHt = H @ H.T
        self.last_q2 = None

    def set_rho(self, rho: float, s: int | None = None):
        super().set_rho(rho)
        if s is not None:
            self.stage_start = s

    def q2_of_round(self, s: int) -> int:
        if self.q_hat is None:
            return self.Q2
        r = s - self.stage_start if self.q_hat_restart else s
        return self.q_hat // r + 1  # Theorem 2: Q2^s = floor(Q_hat / s) + 1

    def w_step_d(self, S: np.ndarray, s: int) -> float:
        d = self.data
        if self.step_rule == "paper":
            return float(np.linalg.eigvalsh(S.sum(axis=0))[-1])  # d = lmax(H H^T)
        if self.lw == "clients":
            L_p = (2.0 / d.n_p) * np.linalg.eigvalsh(S)[:, -1]
            L_W = float(np.sqrt(np.sum(d.omega * L_p**2)))
        else:
            L_W = (2.0 / d.N) * float(np.linalg.eigvalsh(S.sum(axis=0))[-1])
        factor = self.gamma if self.d_schedule == "thm2" else (s + 1.0)
        return factor * L_W

    def round(self, s: int):
        d, N, K = self.data, self.data.N, self.data.K
        W = self.W  # W^s = P_W(average of the previous round), already projected
        A = W.T @ W
        alpha = _h_step_scale(d, A, self.rho, self.nu, self.gamma, self.step_rule)
        H = _h_phase(self.H, _big(d.X, W).T, A, self.rho, self.nu, N, self.Q1, alpha)  # (10), all clients
        S = _segment_gram(d, H)  # (P, K, K) H_p H_p^T
        q2 = self.q2_of_round(s)
        dstep = self.w_step_d(S, s)
        if not dstep > 0:  # H = 0 everywhere: every local W gradient is 0, the W phase is a no-op
            self.H, self.HHt, self.last_q2 = H, S.sum(axis=0), q2
            self.XtHt = _big(d.X.T, H.T)
            return
        # Q2 unprojected local steps (12): W_p <- W_p (I - a_p S_p) + a_p X_p H_p^T, a_p = 2/(d N_p)
        a = 2.0 / (dstep * d.n_p)
        Amat = np.eye(K)[None] - a[:, None, None] * S
        Pow = np.broadcast_to(np.eye(K), S.shape).copy()
        Csum = np.zeros_like(S)
        with np.errstate(over="ignore", invalid="ignore"):
            for _ in range(q2):
                Csum += Pow
                Pow = Pow @ Amat
            # sum_p omega_p W_p^{s,Q} = W^s sum_p omega_p A_p^Q2 + (2/(d N)) X^T [C_{p(j)} h_j]_j
            # (omega_p a_p = 2/(d N) for every p; C_p is symmetric)
            Ht = np.einsum("nab,bn->an", Csum[d.cid], H)
            Z = _big(d.X.T, np.vstack([Ht, H]).T)  # (M, 2K): one pass over the data for both products
            avg = W @ np.tensordot(d.omega, Pow, axes=1) + (2.0 / (dstep * N)) * Z[:, :K]
        self.W = np.clip(avg, d.lo, d.hi)  # (9) of the next round: P_W(weighted average)
        self.H = H
        self.XtHt = Z[:, K:]
        self.HHt = S.sum(axis=0)
        self.last_q2 = q2

    def objective(self) -> float:
        G1 = (2.0 / self.data.N) * self.HHt
        G2 = (2.0 / self.data.N) * self.XtHt
        return _objective_stats(self.data, self.W, G1, G2, self.H, self.rho, self.nu)


class _PalmEngine(_Engine):
    """FedCPALM (Remark 1): ``local_steps`` local PALM steps (7)-(8) per client, then averaging (9)."""

    name = "fedcpalm"

    def __init__(self, data, W, H, rho, nu, *, local_steps, gamma, max_block_elems):
        super().__init__(data, W, H, rho, nu)
        self.local_steps, self.gamma = local_steps, gamma
        self.upload_per_round = data.P * data.M * data.K
        # Chunks of clients (sorted by size) whose zero-padded (c, n_max, M) block stays bounded
        order = np.argsort(data.n_p, kind="stable")
        self.chunks = []
        i = 0
        while i < data.P:
            j = i + 1
            while j < data.P and (j + 1 - i) * data.n_p[order[j]] * data.M <= max_block_elems:
                j += 1
            ids = order[i:j]
            n_max = int(data.n_p[ids].max())
            pos = np.arange(n_max)[None, :]
            mask = pos < data.n_p[ids][:, None]
            col = np.where(mask, data.starts[ids][:, None] + pos, 0)
            Xpad = data.X[col] * mask[..., None]  # (c, n_max, M)
            self.chunks.append((ids, mask, col, Xpad))
            i = j
        self.XtHt = _big(data.X.T, H.T)
        self.HHt = H @ H.T

    def round(self, s: int):
        d, N = self.data, self.data.N
        avg = np.zeros_like(self.W)
        H = self.H.copy()
        for ids, mask, col, Xpad in self.chunks:  # loop over memory-bounded chunks, not clients
            c = ids.size
            Wp = np.broadcast_to(self.W, (c,) + self.W.shape).copy()  # (c, M, K)
            Hp = np.where(mask[..., None], H.T[col], 0.0)  # (c, n_max, K) rows = samples
            n_p = d.n_p[ids].astype(np.float64)
            for _ in range(self.local_steps):
                # (7) projected H step with the client's own W_p; c_p = (gamma/2) L_{H_p}
                A = np.transpose(Wp, (0, 2, 1)) @ Wp
                Hess = _h_hessian(A, self.rho, self.nu, N)
                alpha = 2.0 / (self.gamma * np.maximum(_spectral_norm_sym(Hess), 1e-300))
                B = _big(Xpad, Wp)  # (c, n_max, K) = (W_p^T X_p)^T
                grad = Hp @ Hess - (2.0 / N) * B
                Hp = np.maximum(Hp - alpha[:, None, None] * grad, 0.0) * mask[..., None]
                # (8) projected W step on the local problem, d_p = gamma L_{W_p} (local constant)
                S = np.transpose(Hp, (0, 2, 1)) @ Hp
                T = _big(np.transpose(Xpad, (0, 2, 1)), Hp)  # (c, M, K) X_p H_p^T
                L_p = (2.0 / n_p) * np.linalg.eigvalsh(S)[:, -1]
                step = np.where(L_p > 0, (2.0 / n_p) / (self.gamma * np.maximum(L_p, 1e-300)), 0.0)
                Wp = np.clip(Wp - step[:, None, None] * (Wp @ S - T), d.lo, d.hi)
            avg += np.tensordot(d.omega[ids], Wp, axes=1)
            H[:, col[mask]] = Hp[mask].T
        self.W = np.clip(avg, d.lo, d.hi)
        self.H = H
        self.XtHt = _big(d.X.T, H.T)
        self.HHt = H @ H.T

    def objective(self) -> float:
        G1 = (2.0 / self.data.N) * self.HHt
        G2 = (2.0 / self.data.N) * self.XtHt
        return _objective_stats(self.data, self.W, G1, G2, self.H, self.rho, self.nu)


# --------------------------------------------------------------------------- driver
def _drive(engine: _Engine, o: _SolverOptions, y, progress: ProgressFn | None, rho_trigger: str = "round"):
    """Round loop shared by all solvers: history, eps, SNCP rho-continuation, stopping."""
    hist: dict[str, list] = {"objective": [], "eps": [], "comm_reals": [], "rho": []}
    if y is not None:
        y = np.asarray(y)
        if y.shape != (engine.data.N,):
            raise ValueError(f"y must have one label per sample ({engine.data.N}), got shape {y.shape}")
        hist["ACC"], hist["NMI"] = [], []
    tol = (1e-8 if o.continuation == "sncp" else 0.0) if o.tol is None else o.tol
    with _one_blas_thread():
        return _drive_loop(engine, hist, o, tol, y, progress, rho_trigger)


def _epoch_rounds(engine: _Engine, rho_trigger: str) -> int:
    """Rounds between two tests of eps: 1 (the paper) or ceil(P / m) (``rho_trigger="epoch"``)."""
    m = getattr(engine, "m", None)
    if rho_trigger == "round" or m is None:
        return 1
    return -(-engine.data.P // m)


def _drive_loop(engine, hist, o: _SolverOptions, tol: float, y, progress, rho_trigger: str):
    data, rounds = engine.data, o.rounds
    F_prev = engine.objective()
    F0 = F_prev
    E = _epoch_rounds(engine, rho_trigger)
    F_ref, since = F_prev, 0  # objective at the start of the current test window, rounds since then
    comm = 0
    stop = "max_rounds"
    n_rho = 0
    s = 0
    for s in range(1, rounds + 1):
        rho_used = engine.rho
        engine.round(s)
        comm += engine.upload_per_round
        F = engine.objective()
        eps = abs(F - F_prev) / max(abs(F_prev), 1e-300) if np.isfinite(F) else float("nan")
        hist["objective"].append(F)
        hist["eps"].append(eps)
        hist["comm_reals"].append(comm)
        hist["rho"].append(rho_used)
        if y is not None:
            lab = data.labels(engine.H)
            hist["ACC"].append(clustering_accuracy(y, lab))
            hist["NMI"].append(nmi(y, lab))
        if progress is not None:
            progress(s, {key: v[-1] for key, v in hist.items()})
        logger.info("%s round %d: F=%.6g eps=%.3g rho=%.3g comm=%d", engine.name, s, F, eps, rho_used, comm)
        report_round("round (at most)", s, rounds)
        if not np.isfinite(F):
            stop = "diverged"
            break
        F_prev = F
        since += 1
        if since < E:  # rho_trigger="epoch": test only at the end of a window of E rounds
            continue
        # eps over the window (= the per-round eps when E = 1, the paper's test)
        eps_test = abs(F - F_ref) / max(abs(F_ref), 1e-300)
        F_ref, since = F, 0
        if eps_test < tol:
            stop = "converged"
            break
        if o.continuation == "sncp" and eps_test < o.rho_tol:
            engine.set_rho(engine.rho * o.rho_growth, s)
            n_rho += 1
            F_prev = engine.objective()  # compare the next round with the re-evaluated iterate
            F_ref = F_prev
    info = {
        "rounds_run": s,
        "stop_reason": stop,
        "rho_final": engine.rho,
        "n_rho_updates": n_rho,
        "objective0": F0,
        "n_clients": data.P,
        "tol": tol,
        "rho_trigger": rho_trigger,
        "test_window": E,
    }
    return hist, info


def _finish(engine: _Engine, hist: dict, info: dict, extra: dict) -> ClusteringResult:
    d = engine.data
    info.update(extra)
    return ClusteringResult(
        labels=d.labels(engine.H),
        centroids=engine.W.T.copy(),
        history=hist,
        uploaded_reals=int(hist["comm_reals"][-1]) if hist["comm_reals"] else 0,
        info=info,
    )


# --------------------------------------------------------------------------- options
@dataclasses.dataclass(frozen=True)
class _SolverOptions(MethodConfig):
    """What every solver of the objective takes: rounds, seed, the initial point (None: a random
    one, :func:`make_init`; or ``{"W": (M, K), "H": (K, N)}``), the step factor ``gamma``, the
    penalties rho and nu, and the rho-continuation of SNCP (``continuation="sncp"``: rho grows by
    ``rho_growth`` when the relative change of F falls below ``rho_tol``; the run stops when it
    falls below ``tol``, None: 1e-8 with continuation, else 0)."""

    rounds: int = param(100, "int", count=True, doc="rounds (at most)", loop="round", conf_default=60)
    seed: int = param(0, "int", doc="seed of every random stream of the run", conf=False)
    init: Any = param(None, "any", doc="initial point {'W', 'H'}; None: make_init", conf=False)
    gamma: float = param(1.1, "float", ge=1, doc="step factor (> 1 for a decreasing objective)")
    rho: float = param(1e-8, "float", gt=0, doc="penalty rho")
    nu: float = param(1e-10, "float", ge=0, doc="penalty nu")
    continuation: str | None = param(None, "str", choices=("sncp",), doc="None | sncp")
    rho_growth: float = param(1.5, "float", gt=1, doc="factor of rho at a continuation step", conf=False)
    rho_tol: float = param(
        2e-5, "float", gt=0, doc="relative change of F that triggers a continuation step", conf_default=8e-5
    )
    tol: float | None = param(None, "float", ge=0, doc="relative change of F that stops the run", conf=False)


@dataclasses.dataclass(frozen=True)
class _StepOptions(_SolverOptions):
    """Local steps per round: ``Q1`` H steps then ``Q2`` W steps, with the step rule."""

    Q1: int = param(10, "int", count=True, doc="H steps per round", loop="client")
    Q2: int = param(1, "int", count=True, doc="W steps per round", loop="client")
    step_rule: str = param("lipschitz", "str", choices=STEP_RULES, doc="the step-size rule")


@dataclasses.dataclass(frozen=True)
class FedCGdsOptions(_StepOptions):
    """FedCGds: ``clients_per_round`` = m (None: all P non-empty clients), drawn uniformly without
    replacement from stream "sampling". ``recompute_stats=True`` recomputes G1, G2 from the current
    H every round instead of accumulating the uploaded differences (equal in exact arithmetic).
    ``rho_trigger`` (with ``continuation="sncp"``): "round" (the paper) tests eps every round;
    "epoch" tests the relative change of F over windows of E = ceil(P/m) rounds (one expected
    participation per client; E = 1 and the same run as "round" when m = P). See the module
    docstring ("Partial participation and the rho trigger") for why and when it matters."""

    GROUP: ClassVar[str] = "fedcgds"
    Q2: int = param(100, "int", count=True, doc="W steps per round", loop="server")
    clients_per_round: int | None = param(None, "int", count=True, doc="m clients per round; None = all")
    recompute_stats: bool = param(False, "bool", doc="recompute G1, G2 every round", conf=False)
    rho_trigger: str = param("round", "str", choices=RHO_TRIGGERS, doc="when eps is tested")


@dataclasses.dataclass(frozen=True)
class FedCAvgOptions(_StepOptions):
    """FedCAvg: ``q_hat``: if given, the diminishing schedule Q2^s = floor(q_hat / s) + 1 replaces
    ``Q2``; s is the accumulated round index, or the index within the current rho stage when
    ``q_hat_restart``. ``lw``: "clients" (L_W = sqrt(sum_p omega_p L_{W_p}^2), Theorems 1-2) or
    "global" ((2/N) lmax(HH^T)). ``d_schedule``: "thm2" (d = gamma L_W) or "thm1" (d = (s+1) L_W)."""

    GROUP: ClassVar[str] = "fedcavg"
    q_hat: int | None = param(
        None, "int", ge=0, doc="diminishing Q2 schedule (None: constant Q2)", loop="client", conf_default=10
    )
    lw: str = param("clients", "str", choices=LW_RULES, doc="the Lipschitz constant of the W step", conf=False)
    d_schedule: str = param("thm2", "str", choices=D_SCHEDULES, doc="the W step constant", conf=False)
    q_hat_restart: bool = param(False, "bool", doc="restart the schedule at every rho stage", conf=False)


@dataclasses.dataclass(frozen=True)
class FedCPALMOptions(_SolverOptions):
    """FedCPALM: ``local_steps`` (= Q/2) local PALM steps per client; ``max_block_elems`` bounds a
    chunk's zero-padded X block."""

    GROUP: ClassVar[str] = "fedcpalm"
    local_steps: int = param(5, "int", count=True, doc="local PALM steps per client")
    max_block_elems: int = param(10_000_000, "int", count=True, doc="entries of a chunk's padded X block")


@dataclasses.dataclass(frozen=True)
class SNCPOptions(_StepOptions):
    """Centralized SNCP: one "round" = ``Q1`` projected H steps then ``Q2`` projected W steps
    (Q1 = Q2 = 1 is PALM); ``continuation=None`` gives plain PALM at fixed rho."""

    GROUP: ClassVar[str] = "sncp"
    rounds: int = param(1000, "int", count=True, doc="rounds (at most)")
    Q1: int = param(1, "int", ge=0, doc="H steps per round")
    Q2: int = param(1, "int", ge=0, doc="W steps per round (0: H steps only)")
    continuation: str | None = param("sncp", "str", choices=("sncp",), doc="None | sncp")


# --------------------------------------------------------------------------- public solvers
def run_fedcgds(X, client, k: int, options: FedCGdsOptions | None = None, *, y=None, progress=None, **settings):
    """FedCGds (Algorithm 2, eqs. 70-74): gradient sharing with differential uploads
    (:class:`FedCGdsOptions`; keyword ``settings`` override ``options``).

    Returns a :class:`ClusteringResult` (labels = argmax of H's columns, centroids = W^T (scaled);
    ``info`` has "init_upload_reals", rounds run and the stop reason).
    """
    o = FedCGdsOptions.build(options, settings)
    data = _Data(X, client, k)
    m = data.P if o.clients_per_round is None else o.clients_per_round
    if m > data.P:
        raise ValueError(f"clients_per_round must be in [1, {data.P}] (the non-empty clients), got {m}")
    W, H = _resolve_init(o.init, X, data, o.seed)
    steps = _Steps(Q1=o.Q1, Q2=o.Q2, gamma=o.gamma, step_rule=o.step_rule)
    eng = _GdsEngine(
        data, W, H, o.rho, o.nu, steps=steps, m=m,
        rng=stream(o.seed, "sampling"), recompute_stats=o.recompute_stats, central=False,
    )  # fmt: skip
    hist, info = _drive(eng, o, y, progress, o.rho_trigger)
    extra = {"method": "fedcgds", "clients_per_round": m, "init_upload_reals": eng.init_upload}
    return _finish(eng, hist, info, {**extra, **o.pick("Q1", "Q2", "gamma", "step_rule")})


def run_fedcavg(X, client, k: int, options: FedCAvgOptions | None = None, *, y=None, progress=None, **settings):
    """FedCAvg (Algorithm 1, eqs. 9-13): model averaging, all clients every round
    (:class:`FedCAvgOptions`; keyword ``settings`` override ``options``).

    ``history["Q2"]`` is not kept; ``info["Q2_last"]`` is the last Q2 used.
    """
    o = FedCAvgOptions.build(options, settings)
    data = _Data(X, client, k)
    W, H = _resolve_init(o.init, X, data, o.seed)
    steps = _Steps(Q1=o.Q1, Q2=o.Q2, gamma=o.gamma, step_rule=o.step_rule)
    eng = _AvgEngine(
        data, W, H, o.rho, o.nu, steps=steps, q_hat=o.q_hat, q_hat_restart=o.q_hat_restart,
        lw=o.lw, d_schedule=o.d_schedule,
    )  # fmt: skip
    hist, info = _drive(eng, o, y, progress)
    extra = {"method": "fedcavg", "q_hat": o.q_hat, "Q2_last": eng.last_q2}
    return _finish(eng, hist, info, {**extra, **o.pick("Q1", "Q2", "gamma", "step_rule", "lw", "d_schedule")})


def run_fedcpalm(X, client, k: int, options: FedCPALMOptions | None = None, *, y=None, progress=None, **settings):
    """FedCPALM, the naive baseline of Remark 1 (:class:`FedCPALMOptions`; keyword ``settings``
    override ``options``).

    Each local step is a projected H step (c_p = (gamma/2) L_{H_p} from the client's own W_p) followed by
    a projected W step with the client's own constant d_p = gamma L_{W_p} (the paper leaves FedCPALM's
    steps unspecified). The server averages with omega_p and projects. Per-client blocks are zero-padded
    to the largest client of a chunk.
    """
    o = FedCPALMOptions.build(options, settings)
    data = _Data(X, client, k)
    W, H = _resolve_init(o.init, X, data, o.seed)
    eng = _PalmEngine(
        data, W, H, o.rho, o.nu, local_steps=o.local_steps, gamma=o.gamma, max_block_elems=o.max_block_elems
    )
    hist, info = _drive(eng, o, y, progress)
    return _finish(eng, hist, info, {"method": "fedcpalm", "local_steps": o.local_steps, "gamma": o.gamma})


def run_sncp(X, k: int, options: SNCPOptions | None = None, *, y=None, progress=None, **settings):
    """Centralized SNCP stand-in: PALM (3a)-(3b) on the pooled data with rho-continuation
    (:class:`SNCPOptions`; keyword ``settings`` override ``options``).

    It is FedCGds with a single client; nothing is uploaded (``uploaded_reals`` = 0).
    """
    o = SNCPOptions.build(options, settings)
    X = np.asarray(X)
    client = np.zeros(X.shape[0] if X.ndim == 2 else 0, dtype=np.int64)
    data = _Data(X, client, k)
    W, H = _resolve_init(o.init, X, data, o.seed)
    steps = _Steps(Q1=o.Q1, Q2=o.Q2, gamma=o.gamma, step_rule=o.step_rule)
    eng = _GdsEngine(
        data, W, H, o.rho, o.nu, steps=steps, m=1,
        rng=stream(o.seed, "sampling"), recompute_stats=True, central=True,
    )  # fmt: skip
    eng.name = "sncp"
    hist, info = _drive(eng, o, y, progress)
    return _finish(eng, hist, info, {"method": "sncp", **o.pick("Q1", "Q2", "gamma", "step_rule")})


def run_kmeanspp(X, k: int, seed: int = 0, *, y=None, n_init: int = 1, max_iter: int = 300) -> ClusteringResult:
    """K-means++ on the pooled data (sklearn ``KMeans(init="k-means++")``), the paper's benchmark [47].

    The sklearn ``random_state`` comes from stream "init" of ``seed`` (recorded in ``info``). The history
    holds one entry: "inertia" (K-means objective, not F) and, with ``y``, "ACC"/"NMI". Nothing is uploaded.
    """

    X = np.asarray(X, dtype=np.float64)
    X, _, _ = check_inputs(X, np.zeros(X.shape[0] if X.ndim == 2 else 0, dtype=np.int64), k)
    random_state = int(stream(seed, "init").integers(0, 2**31 - 1))
    km = KMeans(n_clusters=k, init="k-means++", n_init=n_init, max_iter=max_iter, random_state=random_state)
    labels = km.fit_predict(X).astype(np.int64)
    hist: dict[str, list] = {"inertia": [float(km.inertia_)]}
    if y is not None:
        hist["ACC"] = [clustering_accuracy(y, labels)]
        hist["NMI"] = [nmi(y, labels)]
    return ClusteringResult(
        labels=labels,
        centroids=km.cluster_centers_,
        history=hist,
        uploaded_reals=0,
        info={
            "method": "kmeans++",
            "random_state": random_state,
            "n_iter": int(km.n_iter_),
            "inertia": float(km.inertia_),
        },
    )
