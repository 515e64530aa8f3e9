"""FKM (federated Lloyd): accuracy against scikit-learn KMeans, and speed against a per-client loop.

    .venv/bin/python benchmarks/bench_fkm.py [--quick] [--mnist ../shared/data/mnist]

Prints two tables:
1. ACC/NMI of FKM (10 clients, iid and shards, all clients every round) against scikit-learn's
   KMeans on the pooled data, over seeds (issue 2's done-when check: within 0.03).
2. Wall time of one round, vectorized (segment sums) against a naive loop over clients.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans

from fedclust.clustering import fkm
from fedclust.data.registry import prepare_dataset
from fedclust.metrics import clustering_scores
from fedclust.partition import iid, shards


def loop_round(X, client, C, chosen):
    """The same round as fkm.run, one client at a time (the naive reference)."""
    k, m = C.shape
    tot, cnt = np.zeros((k, m)), np.zeros(k)
    for i in chosen:
        Xi = X[client == i]
        lab, _ = fkm.nearest_centroid(Xi, C)
        for l in range(k):
            sel = lab == l
            tot[l] += Xi[sel].sum(0)
            cnt[l] += sel.sum()
    C = C.copy()
    ok = cnt >= 1
    C[ok] = tot[ok] / cnt[ok, None]
    return C


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mnist", default="../shared/data/mnist")
    args = ap.parse_args()
    seeds = range(2 if args.quick else 5)
    rounds = 20 if args.quick else 50
    if Path(args.mnist).exists():
        ds = prepare_dataset("mnist", path=args.mnist)
    else:
        print(f"(MNIST not found at {args.mnist}: using digits)")
        ds = prepare_dataset("digits")
    k = ds.n_classes
    print(f"## ACC on {ds.name}: n={ds.n_samples}, m={ds.n_features}, k={k}, 10 clients, {rounds} rounds\n")
    print("| method | ACC mean ± std | NMI mean ± std |")
    print("|---|---|---|")
    rows = {"sklearn KMeans (pooled, n_init=10)": [], "FKM iid": [], "FKM shards (2 labels/client)": []}
    for s in seeds:
        rows["sklearn KMeans (pooled, n_init=10)"].append(
            clustering_scores(ds.y, KMeans(k, n_init=10, random_state=s).fit_predict(ds.X))
        )
        for name, part in (("FKM iid", iid(ds.n_samples, 10, seed=s)), ("FKM shards (2 labels/client)", shards(ds.y, 10, 2, seed=s))):
            r = fkm.run(ds.X, part.client, k, rounds=rounds, seed=s)
            rows[name].append(clustering_scores(ds.y, r.labels))
    for name, vals in rows.items():
        acc = np.array([v["ACC"] for v in vals])
        nmi = np.array([v["NMI"] for v in vals])
        print(f"| {name} | {acc.mean():.4f} ± {acc.std():.4f} | {nmi.mean():.4f} ± {nmi.std():.4f} |")

    print("\n## One round: vectorized vs per-client loop\n")
    print("| clients | samples | vectorized s/round | loop s/round | speed-up |")
    print("|---|---|---|---|---|")
    X = ds.X.astype(np.float64)
    for n_clients in (10, 100, 1000, 5000):
        part = iid(ds.n_samples, n_clients, seed=0)
        C = fkm.init_from_data(X, k, 0)
        reps = 5
        chosen = np.arange(n_clients)
        rng = np.random.default_rng(0)
        x_sq = np.einsum("ij,ij->i", X, X)  # computed once per run in fkm.run
        t = time.perf_counter()
        for _ in range(reps):
            lab, _ = fkm.nearest_centroid(X, C, x_sq)
            C_vec = fkm.aggregate_round(X, part.client, lab, C, chosen, n_clients, 0.0, rng)
        t_vec = (time.perf_counter() - t) / reps
        t = time.perf_counter()
        for _ in range(reps):
            loop_round(X, part.client, C, np.arange(n_clients))
        t_loop = (time.perf_counter() - t) / reps
        same = np.allclose(C_vec, loop_round(X, part.client, C, chosen))  # the same centroids
        print(f"| {n_clients} | {ds.n_samples} | {t_vec:.4f} | {t_loop:.4f} | {t_loop / t_vec:.1f}x{'' if same else ' (MISMATCH)'} |")


if __name__ == "__main__":
    main()
