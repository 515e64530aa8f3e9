"""DSC, distributed spectral clustering with an anchor point (baseline of FedSC).

The method, our choices and measured numbers: ``docs/methods/fedsc.md``.

Paper: E. Hernandez-Pereira et al., ESANN 2021, as used (and implemented in ``models/DSC.m``) by the
FedSC paper (Qiao, Ding & Fan, NeurIPS 2023). Where the text is unclear this module follows the
authors' code:

1. A random client p0 builds its local kNN similarity graph (``k_p = ceil(ln N_p)``, weights
   ``exp(-(dist / 1)^2)``, kernel scale 1 as in MATLAB's ``spectralcluster`` default, 'complete'
   symmetrization ``max(S, S^T)``) and takes the K eigenvectors of the random-walk Laplacian with the
   smallest eigenvalues (the generalized problem ``W v = mu D v`` with the largest mu). K-means (5
   restarts) on ``|V_p0|`` gives K local centroids.
2. A random anchor ``x_a`` of p0 and its embedding row ``v_a`` go to every other client (this leaks a
   raw data point, as in the original).
3. Every other client appends ``x_a`` to its data, computes its K eigenvectors, flips the sign of every
   column c with ``sign(V[anchor, c]) != sign(v_a[c])``, drops the anchor row, and sends the K
   centroids of k-means on ``|V_p|``.
4. The coordinator clusters the P*K centroids into K global centroids.
5. Every point takes the nearest global centroid, measured from its SIGNED row ``V_i`` (the code's
   behaviour; the centroids were fitted on absolute values).

The method is supposed to be weak (near chance on COIL20/USPS): a fixed kernel scale on unscaled data and
weakly aligned eigenvectors.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from sklearn.cluster import KMeans

from fedclust.clustering import spectral
from fedclust.clustering.base import ClusteringResult, check_inputs
from fedclust.clustering.fedsc import _scores
from fedclust.rng import stream, torch_seed


def local_embedding(Xl: np.ndarray, k: int, *, kernel_scale: float = 1.0, knn: int | None = None) -> np.ndarray:
    """(N, k) eigenvectors of the random-walk Laplacian ``I - D^{-1} W`` with the smallest eigenvalues,
    each column scaled to unit length, for the local kNN graph of ``Xl`` (N, m) (self excluded)."""
    N = Xl.shape[0]
    if N <= k:
        raise ValueError(f"a DSC client needs more than k={k} samples, got {N}")
    kk = min(spectral.knn_k(N) if knn is None else knn, N - 1)
    D2 = spectral.sq_distances(Xl, Xl)
    S = np.exp(-D2 / (kernel_scale * kernel_scale))
    W = spectral.knn_graph(lambda s, e: S[s:e], N, kk, include_self=False).toarray()
    deg = W.sum(axis=1)
    dinv = 1.0 / np.sqrt(deg + np.finfo(float).tiny)
    A = dinv[:, None] * W * dinv[None, :]
    _, U = scipy.linalg.eigh((A + A.T) / 2, subset_by_index=[N - k, N - 1])
    V = dinv[:, None] * U[:, ::-1]  # W v = mu D v: v = D^{-1/2} u, largest mu first
    V /= np.linalg.norm(V, axis=0, keepdims=True) + np.finfo(float).tiny
    return V


def run(X, client, k: int, *, seed: int = 0, kernel_scale: float = 1.0, n_init: int = 5, y=None) -> ClusteringResult:
    """DSC on ``X`` (n, m) held by ``client`` (n,). Returns labels, the K global centroids (in the
    K-dimensional embedding space) and ``info`` with the anchor client and sample."""
    X, client, P = check_inputs(X, client, k)
    if not kernel_scale > 0:
        raise ValueError(f"kernel_scale must be > 0, got {kernel_scale!r}")
    if not isinstance(n_init, (int, np.integer)) or n_init < 1:
        raise ValueError(f"n_init must be a positive int, got {n_init!r}")
    sizes = np.bincount(client, minlength=P)
    if sizes.min() < k:
        raise ValueError(f"every client needs at least k={k} samples for DSC; smallest client has {sizes.min()}")
    rng = stream(seed, "sampling")
    km_rng = stream(seed, "init")

    def kmeans(A):
        km = KMeans(n_clusters=k, n_init=n_init, random_state=torch_seed(km_rng) % (2**31 - 1))
        km.fit(A)
        return km.cluster_centers_

    p0 = int(rng.integers(P))
    idx0 = np.flatnonzero(client == p0)
    V0 = local_embedding(X[idx0], k, kernel_scale=kernel_scale)
    a = int(rng.integers(len(idx0)))
    x_a, v_a = X[idx0[a]], V0[a]
    V = np.zeros((X.shape[0], k))
    V[idx0] = V0
    centroids = [kmeans(np.abs(V0))]
    # One local eigenproblem per client, of a different size each: a single-shot protocol (no rounds),
    # so a loop over clients is the natural form here.
    for p in range(P):
        if p == p0:
            continue
        idx = np.flatnonzero(client == p)
        Vp = local_embedding(np.vstack([X[idx], x_a[None]]), k, kernel_scale=kernel_scale)
        flip = np.sign(Vp[-1]) != np.sign(v_a)
        Vp[:, flip] *= -1.0
        Vp = Vp[:-1]
        V[idx] = Vp
        centroids.append(kmeans(np.abs(Vp)))
    glob = kmeans(np.vstack(centroids))
    labels = np.argmin(spectral.sq_distances(V, glob), axis=1).astype(np.int64)
    info = {"anchor_client": p0, "anchor_index": int(idx0[a])}
    if y is not None:
        info.update(_scores(y, labels))
    uploaded = P * k * k + (P - 1) * (X.shape[1] + k)
    return ClusteringResult(labels=labels, centroids=glob, info=info, uploaded_reals=int(uploaded))
