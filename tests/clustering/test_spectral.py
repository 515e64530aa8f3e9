"""Kernel, r and d rules, kNN graph and NJW (fedclust.clustering.spectral; spec 001, sections 2.7-2.8)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from fedclust.clustering import spectral
from fedclust.metrics import clustering_accuracy
from fedclust.rng import stream


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # Small matrices: one BLAS/OpenMP thread avoids oversubscription on shared CI cores.
    with threadpool_limits(1):
        yield


def test_gaussian_kernel_and_mean_distance_by_hand():
    X = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])
    r = 2.0
    K = spectral.gaussian_kernel(X, X, r)
    assert K[0, 1] == pytest.approx(math.exp(-25 / 8))
    assert K[0, 2] == pytest.approx(math.exp(-1 / 8))
    assert np.allclose(np.diag(K), 1.0)
    # eq. (40): mean over all n^2 pairs, diagonal zeros included
    dists = [0, 5, 1, 5, 0, math.sqrt(9 + 9), 1, math.sqrt(18), 0]
    assert spectral.mean_pairwise_distance(X) == pytest.approx(sum(dists) / 9)
    # eq. (42): average of the per-client means
    client = np.array([0, 0, 1])
    assert spectral.federated_mean_distance(X, client) == pytest.approx((10 / 4 + 0.0) / 2)


def test_eigen_rank_counts_distinct_far_apart_points():
    # 3 distinct points, far apart relative to r, each repeated 10 times: K = blockdiag(ones(10)) -> rank 3
    base = np.array([[0.0, 0.0], [100.0, 0.0], [0.0, 100.0]])
    X = np.repeat(base, 10, axis=0)
    assert spectral.eigen_rank(X, r=1.0, tol=0.99) == 3
    assert spectral.eigen_rank(X, r=1.0, tol=0.3) == 1
    # a tiny kernel width makes every sample its own atom: d = n
    Y = np.random.default_rng(0).normal(size=(20, 3))
    assert spectral.eigen_rank(Y, r=1e-3, tol=0.99) == 20


def test_knn_k_rule():
    assert [spectral.knn_k(n) for n in (1, 150, 400, 1000, 1372, 1440, 9298)] == [1, 6, 6, 7, 8, 8, 10]


def _dense_knn_reference(S, k, minmax, include_self):
    S = S.astype(float).copy()
    if minmax:
        S = (S - S.min()) / (S.max() - S.min())
    n = S.shape[0]
    out = np.zeros_like(S)
    for i in range(n):
        row = S[i].copy()
        if not include_self:
            row[i] = -np.inf
        top = np.argsort(-row, kind="stable")[:k]
        out[i, top] = S[i, top]
    return np.maximum(out, out.T)


@pytest.mark.parametrize("minmax,include_self,block", [(False, True, None), (True, True, 3), (True, False, 1)])
def test_knn_graph_matches_dense_reference(minmax, include_self, block):
    rng = np.random.default_rng(3)
    A = rng.normal(size=(17, 17))
    S = A + A.T  # symmetric, with negative entries (like K_hat before min-max)
    k = 4
    W = spectral.knn_graph(lambda s, e: S[s:e], 17, k, include_self=include_self, minmax=minmax, block_rows=block)
    ref = _dense_knn_reference(S, k, minmax, include_self)
    assert sp.issparse(W)
    assert np.allclose(W.toarray(), ref)
    assert np.allclose(W.toarray(), W.toarray().T)
    if minmax:
        assert W.min() >= 0.0 and W.max() <= 1.0 + 1e-12
        if include_self:  # the global max (a diagonal entry here) is kept and rescaled to 1
            assert W.max() == pytest.approx(1.0)


def test_knn_graph_validates_k():
    with pytest.raises(ValueError, match="k"):
        spectral.knn_graph(lambda s, e: np.zeros((e - s, 5)), 5, 0)
    with pytest.raises(ValueError, match="k"):
        spectral.knn_graph(lambda s, e: np.zeros((e - s, 5)), 5, 5, include_self=False)


def _block_affinity(sizes, noise, seed):
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    y = np.repeat(np.arange(len(sizes)), sizes)
    W = rng.uniform(0.3, 1.0, size=(n, n)) * (y[:, None] == y[None, :])
    W += noise * rng.uniform(size=(n, n)) * (y[:, None] != y[None, :])
    W = (W + W.T) / 2
    perm = rng.permutation(n)
    return sp.csr_matrix(W[perm][:, perm]), y[perm]


@pytest.mark.parametrize("solver", ["arpack", "dense"])
@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_njw_recovers_blocks(solver, noise):
    W, y = _block_affinity([30, 50, 40, 80, 25], noise, seed=1)
    labels = spectral.njw(W, 5, seed=0, solver=solver)
    assert clustering_accuracy(y, labels) == 1.0


def test_spectral_embedding_rows_are_unit_and_span_top_eigvecs():
    W, y = _block_affinity([20, 30, 25], 0.0, seed=2)
    U = spectral.spectral_embedding(W, 3, solver="arpack", rng=np.random.default_rng(0))
    assert np.allclose(np.linalg.norm(U, axis=1), 1.0)
    # rows of the same block coincide (piecewise-constant embedding of a disconnected graph)
    for c in range(3):
        rows = U[y == c]
        assert np.allclose(rows, rows[0], atol=1e-6)


def test_vanilla_sc_clusters_clean_circles_perfectly(circles):
    X, y = circles
    res = spectral.spectral_clustering(X, 2, seed=0, y=y, graph="paper")
    assert res.info["ACC"] == 1.0
    assert res.info["knn_k"] == 8 and res.info["graph_components"] == 2  # the two circles
    # the default joins them (fewer components than clusters) and still separates them
    res = spectral.spectral_clustering(X, 2, seed=0, y=y)
    assert res.info["ACC"] == 1.0 and res.info["graph_components"] == 1 and res.info["knn_k"] > 8


def test_spectral_clustering_same_seed_same_labels():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.3, size=(40, 2)) for c in ((0, 0), (3, 0), (0, 3))])
    a = spectral.spectral_clustering(X, 3, seed=5).labels
    b = spectral.spectral_clustering(X, 3, seed=5).labels
    assert np.array_equal(a, b)


def test_parameter_validation():
    with pytest.raises(ValueError, match="r"):
        spectral.eigen_rank(np.zeros((3, 2)), r=0.0)
    with pytest.raises(ValueError, match="tol"):
        spectral.eigen_rank(np.zeros((3, 2)), r=1.0, tol=1.5)
    with pytest.raises(ValueError, match="n_components"):
        spectral.spectral_embedding(sp.eye(4), 5)


def _many_component_graph(n_blobs, seed, per=30, m=3, k=6):
    """kNN graph of far-apart Gaussian blobs: one connected component per blob."""
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(per, m)) + 1000.0 * rng.normal(size=m) for _ in range(n_blobs)])
    return spectral.kernel_knn_graph(X, 1.0, k)


def _same_span(U, V):
    Q, _ = np.linalg.qr(U)
    P, _ = np.linalg.qr(V)
    return np.linalg.norm(Q - P @ (P.T @ Q)) < 1e-6


@pytest.mark.parametrize("graph_seed", [0, 1, 2])
def test_arpack_embedding_keeps_every_copy_of_the_repeated_eigenvalue_one(graph_seed):
    # 9 components -> eigenvalue 1 of D^-1/2 W D^-1/2 repeated 9 times; with 18 wanted eigenvectors a plain
    # single-vector Lanczos (eigsh) often returned fewer copies and a wrong embedding (the COIL20 bug).
    W = _many_component_graph(9, graph_seed)
    assert sp.csgraph.connected_components(W)[0] == 9
    dense = spectral.spectral_embedding(W, 18, solver="dense")
    for s in range(4):
        U = spectral.spectral_embedding(W, 18, solver="arpack", rng=np.random.default_rng(s))
        assert _same_span(U, dense)


def test_component_eigvecs_are_exact_unit_eigenvectors():
    W = _many_component_graph(4, 3)
    U = spectral.component_eigvecs(W)
    deg = np.asarray(W.sum(axis=1)).ravel()
    A = W.toarray() / np.sqrt(np.outer(deg, deg))
    assert U.shape[1] == 4
    assert np.allclose(A @ U, U, atol=1e-12)
    assert np.allclose(U.T @ U, np.eye(4), atol=1e-12)
    assert np.all(np.diff((U != 0).sum(axis=0)) <= 0)  # largest component first


def test_embedding_with_more_components_than_wanted_uses_the_largest_components():
    rng = np.random.default_rng(4)
    sizes = [40, 35, 30, 25, 20, 15]
    X = np.vstack([rng.normal(size=(s, 3)) + 1000.0 * rng.normal(size=3) for s in sizes])
    blob = np.repeat(np.arange(6), sizes)
    W = spectral.kernel_knn_graph(X, 1.0, 6)
    assert sp.csgraph.connected_components(W)[0] == 6
    U = spectral.spectral_embedding(W, 3, solver="arpack")
    norms = np.linalg.norm(U, axis=1)
    assert np.allclose(norms[blob < 3], 1.0) and np.allclose(norms[blob >= 3], 0.0)
    for c in range(3):  # constant, mutually orthogonal rows on the 3 largest components
        assert np.allclose(U[blob == c], U[blob == c][0], atol=1e-12)
    assert np.allclose(U[[0, 40, 75]] @ U[[0, 40, 75]].T, np.eye(3), atol=1e-12)


def test_coil20_arpack_embedding_equals_dense_and_sc_is_stable(coil20):
    # COIL20's kNN graph (k = 8) has 9 components, so the eigenvalue 1 is 9-fold; plain eigsh lost copies of
    # it for start vectors of seeds 1, 3, 5, 6, 7 (e.g. SC ACC 0.71-0.73 instead of 0.80).
    X, y = coil20
    r = spectral.mean_pairwise_distance(X)
    W = spectral.kernel_knn_graph(X, r)
    assert sp.csgraph.connected_components(W)[0] == 9
    dense = spectral.spectral_embedding(W, 20, solver="dense")
    for s in (1, 3, 6):
        assert _same_span(spectral.spectral_embedding(W, 20, rng=stream(s, "init")), dense)
    accs = [clustering_accuracy(y, spectral.njw(W, 20, seed=s, n_init=10)) for s in (0, 1)]
    assert min(accs) > 0.79


# --------------------------------------------------------------------------- connectivity (issue 17)
def _planted_subclusters(seed, n_cl=3, n_sub=4, per=15):
    """``n_cl`` planted clusters, each made of ``n_sub`` tight groups of ``per`` samples: the kNN graph
    with k = ceil(ln n) = 6 < per falls apart into one component per group (12 >= 3 clusters)."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for c in range(n_cl):
        centre = 12.0 * np.array([np.cos(2 * np.pi * c / n_cl), np.sin(2 * np.pi * c / n_cl)])
        for j in range(n_sub):
            sub = centre + 2.5 * np.array([np.cos(2 * np.pi * j / n_sub), np.sin(2 * np.pi * j / n_sub)])
            X.append(sub + 0.2 * rng.standard_normal((per, 2)))
            y += [c] * per
    return np.vstack(X), np.array(y)


@pytest.mark.parametrize("seed", [0, 1])
def test_disconnected_knn_graph_warns_and_connected_graphs_recover_planted_clusters(seed):
    X, y = _planted_subclusters(seed)
    with pytest.warns(spectral.DisconnectedGraphWarning, match=r"12 connected components for 3 clusters"):
        paper = spectral.spectral_clustering(X, 3, seed=seed, graph="paper", y=y)
    assert paper.info["graph_components"] == 12 and paper.info["knn_k"] == 6
    assert paper.info["ACC"] < 0.7  # NJW returns the largest groups, not the clusters
    import warnings

    for graph in ("min_connected_k", "mst"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", spectral.DisconnectedGraphWarning)  # fixed: no warning
            res = spectral.spectral_clustering(X, 3, seed=seed, graph=graph, y=y)
        assert res.info["graph_components_paper"] == 12
        assert res.info["graph_components"] < 3
        assert res.info["ACC"] == 1.0, graph
    assert spectral.spectral_clustering(X, 3, seed=seed, graph="min_connected_k").info["knn_k"] > 15


def test_min_connected_k_is_the_smallest_k_with_fewer_components_than_clusters():
    X, _ = _planted_subclusters(0)
    r = spectral.mean_pairwise_distance(X)
    rows = lambda s, e: spectral.gaussian_kernel(X[s:e], X, r)  # noqa: E731
    W, info = spectral.build_graph(rows, len(X), 3, graph="min_connected_k", block_rows=7)
    k = info["knn_k"]
    assert spectral.n_components(spectral.knn_graph(rows, len(X), k)) < 3
    assert spectral.n_components(spectral.knn_graph(rows, len(X), k - 1)) >= 3
    assert np.allclose(W.toarray(), spectral.knn_graph(rows, len(X), k).toarray())
    # already connected enough: the paper's k is kept
    W2, info2 = spectral.build_graph(rows, len(X), 13, graph="min_connected_k")
    assert info2["knn_k"] == 6 and np.allclose(W2.toarray(), spectral.knn_graph(rows, len(X), 6).toarray())


def test_mst_graph_adds_one_edge_per_component_merge_at_the_most_similar_pair():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(40, 2))
    B = rng.normal(size=(30, 2)) + np.array([30.0, 0.0])
    X = np.vstack([A, B])
    rows = lambda s, e: spectral.gaussian_kernel(X[s:e], X, 5.0)  # noqa: E731
    knn = spectral.knn_graph(rows, 70, 5, minmax=True)
    assert spectral.n_components(knn) == 2
    W, info = spectral.build_graph(rows, 70, 2, graph="mst", k=5, minmax=True, block_rows=9, warn=False)
    assert info["edges_added"] == 1 and spectral.n_components(W) == 1
    D = (W - knn).tocoo()
    i, j = D.row[0], D.col[0]
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    a, b = np.unravel_index(np.argmin(d2), d2.shape)
    assert {i, j} == {a, 40 + b}  # the closest cross pair joins the two components


def test_graph_parameter_is_checked():
    with pytest.raises(ValueError, match="graph"):
        spectral.spectral_clustering(np.zeros((10, 2)), 2, graph="knn")
