"""Spectral-clustering building blocks shared by FedSC, vanilla SC and DSC.

FedSC: Qiao, Ding & Fan, NeurIPS 2023; the method and our choices are described in
``docs/methods/fedsc.md``. Everything here works with rows = samples.

* Gaussian kernel ``K(a, b) = exp(-||a - b||^2 / (2 r^2))`` (paper footnote 2).
* The width rule ``r = mean of all n^2 pairwise distances`` (eq. 40, c = 1; diagonal zeros included),
  its federated version (eq. 42), and the dictionary-size rule ``d = inf{k : cumsum(s)/sum(s) >= tol}``
  over the eigenvalues of ``K_xx`` (eq. 43). Both use an 8000-sample subsample when n >= 8000 (as the
  official code does).
* The kNN graph of eq. (25) as the official code builds it: keep the ``k = max(ceil(ln n), 1)`` largest
  entries of every row *including the diagonal*, optional global min-max rescaling first (FedSC's
  K_hat), then ``W = max(S, S^T)``. The similarity is consumed in row blocks, so the dense n x n matrix
  never exists; memory is O(block * n + n k).
* Ng-Jordan-Weiss spectral clustering [Ng, Jordan & Weiss 2001]: ``L_sym = I - D^{-1/2} W D^{-1/2}``;
  the eigenvectors of its smallest eigenvalues are the top eigenvectors of the sparse normalized
  affinity ``A = D^{-1/2} W D^{-1/2}``, found with :func:`scipy.sparse.linalg.eigsh`; rows normalized
  to unit length; k-means with 50 restarts. The eigenvalue 1 of A is repeated once per connected
  component of the kNN graph (9 on COIL20); those eigenvectors are known in closed form and are put in
  exactly, and eigsh only runs on A deflated by them (a single-vector Lanczos loses copies of a
  repeated eigenvalue; see :func:`spectral_embedding`).
* :func:`spectral_clustering`: the centralized "vanilla SC" baseline: the same r,
  the same graph construction (no min-max: K_xx is already in (0, 1]) and the same NJW.
* Connectivity: with ``k = ceil(ln n)`` the kNN graph can fall apart
  into more connected components than clusters; NJW then just returns the largest
  components. :func:`build_graph` detects this and warns with the numbers, and offers
  ``graph="min_connected_k"`` (the smallest ``k >= ceil(ln n)`` that leaves fewer components than
  clusters, found by bisection on one sorted neighbour list) and ``graph="mst"`` (the paper's kNN
  graph joined by a maximum-similarity spanning tree over its components, Kruskal on the
  component graph). ``graph="paper"`` keeps the paper's rule; the default is ``"min_connected_k"``,
  chosen by measurement (``benchmarks/bench_fedsc.py --graphs``: as good as or better than the paper's
  graph and ``"mst"`` for SC on all six data sets measured; see docs/methods/fedsc.md).
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Callable

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.csgraph  # noqa: F401  (makes sp.csgraph available)
import scipy.sparse.linalg as spla
import torch
from sklearn.cluster import KMeans

from fedclust.clustering.base import ClusteringResult, check_inputs
from fedclust.metrics import clustering_scores
from fedclust.rng import stream, torch_seed

logger = logging.getLogger(__name__)

#: The official code switches to a random subsample for the r and d rules from this n on.
SUBSAMPLE = 8000
#: Bytes of float64 similarity values held at once when a similarity is consumed in row blocks.
BLOCK_BYTES = 64 * 2**20


# --------------------------------------------------------------------------- kernel
def sq_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between the rows of ``A`` (a, m) and ``B`` (b, m), clipped at 0."""
    aa = np.einsum("ij,ij->i", A, A)
    bb = np.einsum("ij,ij->i", B, B)
    D = A @ B.T
    D *= -2.0
    D += aa[:, None]
    D += bb[None, :]
    np.maximum(D, 0.0, out=D)
    return D


def gaussian_kernel(A: np.ndarray, B: np.ndarray, r: float) -> np.ndarray:
    """``K[i, j] = exp(-||a_i - b_j||^2 / (2 r^2))`` for the rows of ``A`` and ``B``."""
    D = sq_distances(A, B)
    D *= -1.0 / (2.0 * r * r)
    return np.exp(D, out=D)


def _check_r(r) -> float:
    if not (isinstance(r, (int, float, np.floating, np.integer)) and math.isfinite(r) and r > 0):
        raise ValueError(f"r (kernel width) must be a finite number > 0, got {r!r}")
    return float(r)


def _subsample(X: np.ndarray, max_samples: int, rng: np.random.Generator | None) -> np.ndarray:
    n = X.shape[0]
    if max_samples is None or n < max_samples:
        return X
    rng = rng if rng is not None else np.random.default_rng(0)
    return X[np.sort(rng.choice(n, size=max_samples, replace=False))]


def _row_blocks(n_rows: int, n_cols: int, block_bytes: int = BLOCK_BYTES):
    step = max(1, min(n_rows, block_bytes // (8 * max(n_cols, 1))))
    for s in range(0, n_rows, step):
        yield s, min(n_rows, s + step)


def mean_pairwise_distance(X, *, max_samples: int | None = SUBSAMPLE, rng: np.random.Generator | None = None) -> float:
    """Kernel width rule, eq. (40) with c = 1: the mean of all n^2 Euclidean distances
    (diagonal zeros included). Uses a random ``max_samples`` subsample when n >= ``max_samples``."""
    X = _subsample(np.asarray(X, dtype=np.float64), max_samples, rng)
    n = X.shape[0]
    if n == 0:
        raise ValueError("X must hold at least one sample")
    total = 0.0
    for s, e in _row_blocks(n, n):
        total += float(np.sqrt(sq_distances(X[s:e], X)).sum())
    return total / (n * n)


def federated_mean_distance(
    X, client, *, max_samples: int | None = SUBSAMPLE, rng: np.random.Generator | None = None
) -> float:
    """Federated kernel width, eq. (42) with c = 1: the average over clients of each client's own
    mean pairwise distance (no cross-client pair is ever formed). Empty clients are skipped."""
    X = np.asarray(X, dtype=np.float64)
    client = np.asarray(client)
    # One small distance computation per client (different sizes); runs once, not per round.
    vals = [
        mean_pairwise_distance(X[client == p], max_samples=max_samples, rng=rng) for p in np.unique(client[client >= 0])
    ]
    return float(np.mean(vals))


def eigen_rank(
    X, r: float, *, tol: float = 0.99, max_samples: int | None = SUBSAMPLE, rng: np.random.Generator | None = None
) -> int:
    """Dictionary size rule, eq. (43): the smallest d with ``cumsum(s)[d-1] / sum(s) >= tol``, where
    ``s`` are the eigenvalues of ``K_xx`` in decreasing order (the code's normalized variant)."""
    r = _check_r(r)
    if not 0.0 < tol <= 1.0:
        raise ValueError(f"tol must be in (0, 1], got {tol!r}")
    X = _subsample(np.asarray(X, dtype=np.float64), max_samples, rng)
    K = gaussian_kernel(X, X, r)
    # All eigenvalues (float64). torch's LAPACK (MKL syevd) is ~2x faster than scipy's OpenBLAS one on one
    # core (n = 4000: 2.7 s vs 4.8 s; the 8000-sample MNIST case: ~25 s instead of ~40-150 s).
    s = torch.linalg.eigvalsh(torch.from_numpy(K)).numpy()[::-1]
    del K
    s = np.maximum(s, 0.0)  # K is PSD; tiny negative values are round-off
    c = np.cumsum(s) / s.sum()
    return int(min(np.searchsorted(c, tol - 1e-12) + 1, len(s)))


def knn_k(n: int) -> int:
    """``k = max(ceil(ln n), 1)`` [von Luxburg 2007], the kNN size used by FedSC and vanilla SC."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return max(int(math.ceil(math.log(n))), 1)


# --------------------------------------------------------------------------- kNN graph
def knn_graph(
    rows: Callable[[int, int], np.ndarray],
    n: int,
    k: int,
    *,
    include_self: bool = True,
    minmax: bool = False,
    block_rows: int | None = None,
) -> sp.csr_matrix:
    """Symmetric kNN affinity from a similarity given in row blocks (eq. 25: kNN sparsification and max-symmetrization).

    ``rows(start, stop)`` returns the (stop - start, n) similarity rows ``start:stop``. For every row the
    ``k`` largest entries are kept with their values (the diagonal counts as an entry when
    ``include_self``; otherwise it is skipped). With ``minmax`` the kept values are rescaled by the
    *global* min and max over all n^2 entries, ``(v - min) / (max - min)``, as FedSC's code does; a
    positive affine map does not change which entries are largest, so one pass suffices. Finally
    ``W = max(S, S^T)``. Only one row block is ever held in memory.
    """
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ValueError(f"k (neighbours) must be an int in [1, n={n}], got {k!r}")
    if not include_self and k > n - 1:
        raise ValueError(f"k (neighbours) must be <= n-1={n - 1} when include_self=False, got {k}")
    idx, val, lo, hi = _sorted_topk(rows, n, k, include_self, block_rows)
    return _graph_from_topk(idx, val, k, lo, hi, minmax)


def kernel_knn_graph(X: np.ndarray, r: float, k: int | None = None, *, include_self: bool = True) -> sp.csr_matrix:
    """kNN graph of the Gaussian kernel matrix ``K(X, X)`` (vanilla SC; no min-max)."""
    X = np.asarray(X, dtype=np.float64)
    r = _check_r(r)
    k = knn_k(X.shape[0]) if k is None else k
    return knn_graph(lambda s, e: gaussian_kernel(X[s:e], X, r), X.shape[0], k, include_self=include_self)


#: Stage II / SC graph constructions: the paper's kNN rule and two connectivity-preserving ones.
GRAPHS = ("paper", "min_connected_k", "mst")


class DisconnectedGraphWarning(UserWarning):
    """The kNN graph has more connected components than there are clusters."""


def _check_graph(graph) -> str:
    if graph not in GRAPHS:
        raise ValueError(f"graph must be one of {list(GRAPHS)}, got {graph!r}")
    return graph


def _sorted_topk(rows, n: int, kmax: int, include_self: bool, block_rows: int | None):
    """Per row, the ``kmax`` largest similarities in decreasing order (indices, values) and the global
    min and max of all n^2 entries (one pass over the row blocks)."""
    step = block_rows or max(1, BLOCK_BYTES // (8 * n))
    idx = np.empty((n, kmax), dtype=np.int64)
    val = np.empty((n, kmax), dtype=np.float64)
    lo, hi = np.inf, -np.inf
    for s in range(0, n, step):
        e = min(n, s + step)
        B = np.array(rows(s, e), dtype=np.float64, copy=True)
        if B.shape != (e - s, n):
            raise ValueError(f"rows({s}, {e}) must return shape {(e - s, n)}, got {B.shape}")
        lo, hi = min(lo, float(B.min())), max(hi, float(B.max()))
        if not include_self:
            B[np.arange(e - s), np.arange(s, e)] = -np.inf
        top = np.argpartition(-B, kmax - 1, axis=1)[:, :kmax] if kmax < n else np.tile(np.arange(n), (e - s, 1))
        v = np.take_along_axis(B, top, axis=1)
        o = np.argsort(-v, axis=1, kind="stable")
        idx[s:e] = np.take_along_axis(top, o, axis=1)
        val[s:e] = np.take_along_axis(v, o, axis=1)
    return idx, val, lo, hi


def _graph_from_topk(idx, val, k: int, lo: float, hi: float, minmax: bool) -> sp.csr_matrix:
    n = idx.shape[0]
    v = val[:, :k]
    if minmax:
        v = (v - lo) / (hi - lo) if hi > lo else np.ones_like(v)
    S = sp.csr_matrix((v.ravel(), idx[:, :k].ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
    W = S.maximum(S.T).tocsr()
    W.eliminate_zeros()
    return W


def n_components(W) -> int:
    """Number of connected components of the undirected graph ``W``."""
    return int(sp.csgraph.connected_components(sp.csr_matrix(W), directed=False)[0])


def _join_components(W, rows, n: int, lo: float, hi: float, minmax: bool, block_rows: int | None) -> tuple:
    """Add to ``W`` the edges of a maximum-similarity spanning tree of its component graph: for every
    pair of components the most similar cross pair (one pass over the similarity rows), then Kruskal
    on the components. Returns (W joined, number of edges added)."""
    c, lab = sp.csgraph.connected_components(W, directed=False)
    if c <= 1:
        return W, 0
    order = np.argsort(lab, kind="stable")
    starts = np.searchsorted(lab[order], np.arange(c))
    best = np.full((c, c), -np.inf)
    arg_i = np.zeros((c, c), dtype=np.int64)
    arg_j = np.zeros((c, c), dtype=np.int64)
    step = block_rows or max(1, BLOCK_BYTES // (8 * n))
    for s in range(0, n, step):
        e = min(n, s + step)
        B = np.asarray(rows(s, e), dtype=np.float64)[:, order]  # columns grouped by component
        # per row and component: the largest similarity and where it is
        mx = np.maximum.reduceat(B, starts, axis=1)  # (b, c)
        rl = lab[s:e]
        for a in range(c):  # loop over components of the rows in this block (c is small)
            sel = np.flatnonzero(rl == a)
            if sel.size == 0:
                continue
            sub = mx[sel]  # (rows of a, c)
            r_best = np.argmax(sub, axis=0)
            v_best = sub[r_best, np.arange(c)]
            upd = v_best > best[a]
            upd[a] = False
            for b in np.flatnonzero(upd):
                i = s + sel[r_best[b]]
                row = B[i - s, starts[b] : (starts[b + 1] if b + 1 < c else n)]
                arg_i[a, b], arg_j[a, b] = i, order[starts[b] + int(np.argmax(row))]
                best[a, b] = v_best[b]
    # Kruskal over the c components, heaviest (most similar) pair first
    pairs = [(best[a, b], a, b) for a in range(c) for b in range(c) if a != b and np.isfinite(best[a, b])]
    pairs.sort(key=lambda t: -t[0])
    parent = list(range(c))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    ii, jj, vv = [], [], []
    for v, a, b in pairs:
        ra, rb = find(a), find(b)
        if ra == rb:
            continue
        parent[ra] = rb
        w = (v - lo) / (hi - lo) if (minmax and hi > lo) else v
        w = max(float(w), np.finfo(float).tiny)  # a zero weight would leave the edge out
        ii += [arg_i[a, b], arg_j[a, b]]
        jj += [arg_j[a, b], arg_i[a, b]]
        vv += [w, w]
    T = sp.csr_matrix((vv, (ii, jj)), shape=(n, n))
    return W.maximum(T).tocsr(), len(vv) // 2


def _min_connected_graph(rows, n: int, n_clusters: int, k0: int, kcap: int, include_self, minmax, block_rows, info):
    """``graph="min_connected_k"``: the kNN graph of the smallest ``k' >= k0`` with fewer components
    than ``n_clusters`` (or ``kcap``), by bisection over prefixes of one sorted neighbour list
    (widened until it holds such a k'); fills ``info``."""
    kmax = min(kcap, max(4 * k0, k0 + 10))
    while True:
        idx, val, lo, hi = _sorted_topk(rows, n, kmax, include_self, block_rows)
        comps = {}

        def count(kk, idx=idx, val=val, lo=lo, hi=hi, comps=comps):  # this iteration's top-k
            if kk not in comps:
                comps[kk] = n_components(_graph_from_topk(idx, val, kk, lo, hi, minmax))
            return comps[kk]

        if count(kmax) < n_clusters or kmax == kcap:
            break
        kmax = min(kcap, 2 * kmax)
    info["components_paper"] = count(k0)
    a, b = k0, kmax  # invariant: count(b) < n_clusters (or b = kcap)
    if count(a) < n_clusters:
        b = a
    while b - a > 1:
        mid = (a + b) // 2
        if count(mid) < n_clusters:
            b = mid
        else:
            a = mid
    W = _graph_from_topk(idx, val, b, lo, hi, minmax)
    info["knn_k"] = int(b)
    info["components"] = count(b)
    return W


def _report_connectivity(info: dict, n: int, k0: int, n_clusters: int, graph: str, warn: bool) -> None:
    """Log a graph with as many components as clusters; warn (:class:`DisconnectedGraphWarning`) about
    a kNN graph with more, or log how the connectivity-preserving graph fixed it."""
    if info["components_paper"] == n_clusters and info["components"] == n_clusters and n_clusters > 1:
        logger.info(
            "the kNN graph (n=%d, k=%d) has as many connected components as clusters (%d): spectral "
            "clustering returns the components",
            n,
            info["knn_k"],
            n_clusters,
        )
    if warn and info["components_paper"] > n_clusters:
        msg = (
            f"the kNN graph (n={n}, k={k0}) has {info['components_paper']} connected components for "
            f"{n_clusters} clusters: spectral clustering then returns its largest components"
        )
        if info["components"] > n_clusters:
            msg += "; set graph='min_connected_k' or graph='mst' for a connected graph"
            logger.warning(msg)
            warnings.warn(msg, DisconnectedGraphWarning, stacklevel=4)  # the caller of build_graph's caller
        else:  # fixed by the connectivity-preserving graph: say what it did
            logger.info("%s; graph=%r used k=%d and has %d component(s)", msg, graph, info["knn_k"], info["components"])


def build_graph(
    rows: Callable[[int, int], np.ndarray],
    n: int,
    n_clusters: int,
    *,
    graph: str = "paper",
    k: int | None = None,
    include_self: bool = True,
    minmax: bool = False,
    block_rows: int | None = None,
    warn: bool = True,
) -> tuple[sp.csr_matrix, dict]:
    """The affinity graph of SC and FedSC's Stage II, with a connectivity check.

    ``graph="paper"``: :func:`knn_graph` with ``k`` (None = ``ceil(ln n)``, eq. 25).
    ``graph="min_connected_k"``: the smallest ``k' >= k`` whose kNN graph has fewer connected
    components than ``n_clusters`` (bisection over prefixes of one sorted neighbour list; the
    components can only merge as k' grows).
    ``graph="mst"``: the ``k``-NN graph joined into one component by a maximum-similarity spanning
    tree of its component graph (:func:`_join_components`; weights min-max rescaled like the rest).
    When the graph that is returned has more than ``n_clusters`` components (with ``"paper"``), a
    :class:`DisconnectedGraphWarning` names the numbers (the other graphs log what they fixed; exactly
    ``n_clusters`` components, e.g. the two clean circles, are taken as the clusters and only logged). Returns ``(W, info)``
    with ``knn_k`` (the k used), ``components_paper`` (of the k-NN graph), ``components`` (of W),
    ``edges_added`` (mst).
    """
    graph = _check_graph(graph)
    k0 = knn_k(n) if k is None else k
    if not isinstance(k0, (int, np.integer)) or not 1 <= k0 <= n:
        raise ValueError(f"k (neighbours) must be an int in [1, n={n}], got {k0!r}")
    if not include_self and k0 > n - 1:
        raise ValueError(f"k (neighbours) must be <= n-1={n - 1} when include_self=False, got {k0}")
    kcap = n if include_self else n - 1
    info = {"graph": graph, "knn_k": int(k0), "edges_added": 0}
    if graph == "min_connected_k":
        W = _min_connected_graph(rows, n, n_clusters, k0, kcap, include_self, minmax, block_rows, info)
    else:
        idx, val, lo, hi = _sorted_topk(rows, n, k0, include_self, block_rows)
        W = _graph_from_topk(idx, val, k0, lo, hi, minmax)
        info["components_paper"] = info["components"] = n_components(W)
        if graph == "mst" and info["components"] > 1:
            W, info["edges_added"] = _join_components(W, rows, n, lo, hi, minmax, block_rows)
            info["components"] = n_components(W)
    _report_connectivity(info, n, k0, n_clusters, graph, warn)
    return W, info


# --------------------------------------------------------------------------- NJW
def spectral_embedding(
    W, n_components: int, *, solver: str = "arpack", rng: np.random.Generator | None = None
) -> np.ndarray:
    """Rows of the ``n_components`` eigenvectors of the smallest eigenvalues of
    ``L_sym = I - D^{-1/2} W D^{-1/2}``, each row normalized to unit length (NJW steps 1-3).

    ``solver="arpack"``: :func:`scipy.sparse.linalg.eigsh` on the sparse ``A = D^{-1/2} W D^{-1/2}``
    (largest algebraic eigenvalues of A = smallest of L_sym); ``"dense"``: :func:`scipy.linalg.eigh`
    (small n only). Degrees use ``1/sqrt(d_i + eps)`` like the official code.

    Connected components (kNN graphs with ``k = ceil(ln n)`` are often disconnected: 9 components on
    COIL20) make the eigenvalue 1 of A exactly repeated, once per component, with the eigenvectors
    ``D^{1/2} 1_component``. A single-vector Krylov method (ARPACK's Lanczos) only sees one direction
    of a repeated eigenspace and recovers the other copies from round-off, so it can silently return
    fewer copies and a wrong embedding (COIL20, seed 1: 7 of the 9 copies, ACC 0.729 instead of 0.802).
    The ``"arpack"`` path therefore puts the component vectors in the embedding exactly and runs
    ``eigsh`` only on A deflated by them (their eigenvalue moved from 1 to -2, below the spectrum).
    With at least ``n_components`` components, every wanted eigenvalue is 1: the component vectors of
    the ``n_components`` largest components are used (any basis of that eigenspace is a valid answer).
    """
    if solver not in ("arpack", "dense"):
        raise ValueError(f"solver must be 'arpack' or 'dense', got {solver!r}")
    W = sp.csr_matrix(W, dtype=np.float64)
    n = W.shape[0]
    if W.shape != (n, n):
        raise ValueError(f"W must be square, got shape {W.shape}")
    if not 1 <= n_components <= n:
        raise ValueError(f"n_components must be in [1, n={n}], got {n_components}")
    deg = np.asarray(W.sum(axis=1)).ravel()
    dinv = 1.0 / np.sqrt(deg + np.finfo(float).eps)
    A = sp.diags(dinv) @ W @ sp.diags(dinv)
    A = (A + A.T) * 0.5  # exact symmetry for the symmetric solvers
    if solver == "dense" or n_components >= n - 1 or n <= 3 * n_components + 20:
        _, U = scipy.linalg.eigh(A.toarray(), subset_by_index=[n - n_components, n - 1])
    else:
        U = _arpack_top_eigvecs(A.tocsr(), W, deg, n_components, rng)
    U = U / (np.linalg.norm(U, axis=1, keepdims=True) + np.finfo(float).eps)
    return U


def component_eigvecs(W, deg: np.ndarray | None = None) -> np.ndarray:
    """The exact eigenvectors of ``D^{-1/2} W D^{-1/2}`` for the eigenvalue 1, one per connected
    component c of the graph W: ``u_c = D^{1/2} 1_c / ||D^{1/2} 1_c||`` (columns, largest component
    first; (n, #components))."""
    W = sp.csr_matrix(W)
    deg = np.asarray(W.sum(axis=1)).ravel() if deg is None else deg
    n_comp, lab = sp.csgraph.connected_components(W, directed=False)
    sizes = np.bincount(lab, minlength=n_comp)
    order = np.argsort(-sizes, kind="stable")
    rank = np.empty(n_comp, dtype=np.int64)
    rank[order] = np.arange(n_comp)
    U = np.zeros((W.shape[0], n_comp))
    U[np.arange(W.shape[0]), rank[lab]] = np.sqrt(np.maximum(deg, 0.0))
    U /= np.maximum(np.linalg.norm(U, axis=0, keepdims=True), 1e-300)
    return U


def _arpack_top_eigvecs(A, W, deg, n_components, rng):
    """Top ``n_components`` eigenvectors of the normalized affinity ``A``: exact component vectors for
    the (repeated) eigenvalue 1, ``eigsh`` on the deflated operator for the rest (see
    :func:`spectral_embedding`). Columns in increasing eigenvalue order."""
    n = A.shape[0]
    U1 = component_eigvecs(W, deg)
    c = U1.shape[1]
    if c >= n_components:
        return U1[:, :n_components][:, ::-1]
    rng = rng if rng is not None else np.random.default_rng(0)
    v0 = rng.uniform(0.5, 1.5, size=n)  # seeded start vector: reproducible eigsh
    need = n_components - c
    if c > 1:
        v0 -= U1 @ (U1.T @ v0)
        op = spla.LinearOperator(
            (n, n),
            dtype=np.float64,
            matvec=lambda x: A @ x - 3.0 * (U1 @ (U1.T @ x)),
            matmat=lambda X: A @ X - 3.0 * (U1 @ (U1.T @ X)),
        )
    else:
        op, need = A, n_components  # connected: the eigenvalue 1 is simple, nothing to deflate
    ncv = min(n, max(4 * need + 1, 40))
    vals, V = spla.eigsh(op, k=need, which="LA", v0=v0, ncv=ncv, tol=0.0, maxiter=n * 20)
    V = V[:, np.argsort(vals)]
    return V if c <= 1 else np.hstack([V, U1])


def njw(
    W, n_clusters: int, *, seed: int = 0, n_init: int = 50, max_iter: int = 1000, solver: str = "arpack"
) -> np.ndarray:
    """Ng-Jordan-Weiss spectral clustering of the affinity ``W`` (sparse or dense, symmetric, >= 0):
    the normalized spectral embedding (:func:`spectral_embedding`) clustered by k-means with
    ``n_init`` restarts. Returns the (n,) labels. Randomness: stream ``"init"`` of ``seed``."""
    if not isinstance(n_init, (int, np.integer)) or n_init < 1:
        raise ValueError(f"n_init must be a positive int, got {n_init!r}")
    rng = stream(seed, "init")
    U = spectral_embedding(W, n_clusters, solver=solver, rng=rng)
    km = KMeans(n_clusters=n_clusters, n_init=n_init, max_iter=max_iter, random_state=torch_seed(rng) % (2**31 - 1))
    return km.fit_predict(U).astype(np.int64)


def spectral_clustering(
    X,
    k: int,
    *,
    seed: int = 0,
    r: float | None = None,
    knn: int | None = None,
    include_self: bool = True,
    n_init: int = 50,
    solver: str = "arpack",
    graph: str = "min_connected_k",
    y=None,
) -> ClusteringResult:
    """Centralized vanilla SC: Gaussian ``K_xx`` with the FedSC width ``r`` (eq. 40
    when None), kNN graph (``k = ceil(ln n)``, self included, max-symmetrized, no min-max) and NJW.
    ``graph``: ``"min_connected_k"`` (default, chosen by measurement on six data sets: the
    smallest k >= ``knn`` that leaves fewer connected components than clusters; the paper's k whenever
    its graph is connected enough), ``"paper"`` (the paper's rule as it is) or ``"mst"`` (see
    :func:`build_graph`). ``y`` is only used to put ACC/NMI
    in ``info``."""
    _check_graph(graph)
    X, _, _ = check_inputs(X, np.zeros(np.asarray(X).shape[0], dtype=np.int64), k)
    r = mean_pairwise_distance(X, rng=stream(seed, "data")) if r is None else _check_r(r)
    W, ginfo = build_graph(
        lambda s, e: gaussian_kernel(X[s:e], X, r), X.shape[0], k, graph=graph, k=knn, include_self=include_self
    )
    labels = njw(W, k, seed=seed, n_init=n_init, solver=solver)
    info = {
        "r": r,
        "knn_k": int(ginfo["knn_k"]),
        "graph": graph,
        "graph_components": int(ginfo["components"]),
        "graph_components_paper": int(ginfo["components_paper"]),
    }
    if y is not None:
        info.update(clustering_scores(y, labels))
    return ClusteringResult(labels=labels, info=info)
