"""FKM (federated Lloyd): accuracy against scikit-learn KMeans, and speed against a per-client loop.

    .venv/bin/python benchmarks/bench_fkm.py [--quick] [--mnist ../shared/data/mnist] [--init-only]

Prints three tables:
1. ACC/NMI of FKM (10 clients, iid and shards, all clients every round) against scikit-learn's
   KMeans on the pooled data, over seeds (target: within 0.03).
2. Wall time of one round, vectorized (segment sums) against a naive loop over clients.
3. ACC of FKM by initialisation on digits with the pipeline's defaults (iid, 10 clients, 20 rounds,
   clip 1.0), non-private and at accounted budgets epsilon = 4 and 16 (a private run may
   not start from data rows; this table is how its data-independent default was chosen).
   ``--init-only`` prints just this table.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans

from fedclust import bench
from fedclust.clustering import fkm
from fedclust.clustering._common import initial_centroids, nearest
from fedclust.clustering.lloyd import LloydRelease, masked_means
from fedclust.data.registry import prepare_dataset
from fedclust.metrics import clustering_scores
from fedclust.partition import iid, shards


def loop_round(X, client, C, chosen):
    """The same round as fkm.run, one client at a time (the naive reference)."""
    k, m = C.shape
    tot, cnt = np.zeros((k, m)), np.zeros(k)
    for i in chosen:
        Xi = X[client == i]
        lab, _ = nearest(Xi, C)
        for l in range(k):
            sel = lab == l
            tot[l] += Xi[sel].sum(0)
            cnt[l] += sel.sum()
    return masked_means(C, tot, cnt, cnt >= 1)


def init_table(seeds=(0, 1, 2), epsilons=(None, 4.0, 16.0), rounds: int = 20, clip: float = 1.0):
    """Table 3: FKM's ACC on digits by initialisation (pipeline defaults), mean ± std over seeds."""
    from fedclust.clustering._common import public_centroids
    from fedclust.privacy.accountants import calibrate_noise_multiplier

    ds = prepare_dataset("digits")
    X, y, k = ds.X.astype(np.float64), ds.y, ds.n_classes
    inits = {
        "data rows (paper; not private)": dict(init="data"),
        "uniform_box [0,1] (private default)": dict(init="uniform_box"),
        "uniform_box [0.4,0.6]": dict(init="uniform_box", init_domain=[0.4, 0.6]),
        "uniform_ball r=1": None,  # built per seed below
    }
    print(f"\n## FKM ACC by initialisation: digits, iid, 10 clients, {rounds} rounds, clip {clip} (private)\n")
    rows = []
    for name, kw in inits.items():
        cells = []
        for eps in epsilons:
            z = 0.0 if eps is None else calibrate_noise_multiplier(eps, 1e-5, steps=rounds)
            accs = []
            for s in seeds:
                client = iid(ds.n_samples, 10, seed=s).client
                kw_s = (
                    kw
                    if kw is not None
                    else dict(init_centroids=public_centroids(k, X.shape[1], s, "uniform_ball", radius=1.0))
                )
                r = fkm.run(
                    X, client, k, rounds=rounds, seed=s, noise_multiplier=z, clip=clip if z > 0 else None, **kw_s
                )
                accs.append(clustering_scores(y, r.labels)["ACC"])
            cells.append(f"{np.mean(accs):.3f} ± {np.std(accs):.3f}")
        rows.append([name, *cells])
    bench.table(["init", *("no DP" if e is None else f"eps={e:g}" for e in epsilons)], rows)


def main():
    ap = bench.parser(__doc__, quick="2 seeds, 20 rounds")
    ap.add_argument("--mnist", default=str(bench.MNIST_DIR), help="MNIST folder (default ../shared/data/mnist)")
    ap.add_argument("--init-only", action="store_true", help="only the initialisation table")
    args = ap.parse_args()
    with bench.session(args):
        run(args)


def run(args):
    if args.init_only:
        init_table()
        return
    seeds = range(2 if args.quick else 5)
    rounds = 20 if args.quick else 50
    if bench.have_mnist(args.mnist):
        ds = prepare_dataset("mnist", path=args.mnist)
    else:
        print(f"(MNIST not found at {args.mnist}: using digits)")
        ds = prepare_dataset("digits")
    k = ds.n_classes
    print(f"## ACC on {ds.name}: n={ds.n_samples}, m={ds.n_features}, k={k}, 10 clients, {rounds} rounds\n")
    rows = {"sklearn KMeans (pooled, n_init=10)": [], "FKM iid": [], "FKM shards (2 labels/client)": []}
    for s in seeds:
        rows["sklearn KMeans (pooled, n_init=10)"].append(
            clustering_scores(ds.y, KMeans(k, n_init=10, random_state=s).fit_predict(ds.X))
        )
        for name, part in (
            ("FKM iid", iid(ds.n_samples, 10, seed=s)),
            ("FKM shards (2 labels/client)", shards(ds.y, 10, 2, seed=s)),
        ):
            r = fkm.run(ds.X, part.client, k, rounds=rounds, seed=s)
            rows[name].append(clustering_scores(ds.y, r.labels))
    bench.table(
        ["method", "ACC mean ± std", "NMI mean ± std"],
        [
            (name, bench.mean_std([v["ACC"] for v in vals], nd=4), bench.mean_std([v["NMI"] for v in vals], nd=4))
            for name, vals in rows.items()
        ],
    )

    print("## One round: vectorized vs per-client loop (median of 5 interleaved repeats)\n")
    X = ds.X.astype(np.float64)
    rows = []
    for n_clients in (10, 100, 1000, 5000):
        part = iid(ds.n_samples, n_clients, seed=0)
        C = initial_centroids(X, k, 0, init="data")
        chosen = np.arange(n_clients)
        rng = np.random.default_rng(0)
        x_sq = np.einsum("ij,ij->i", X, X)  # computed once per run in fkm.run

        def vectorized():
            lab, _ = nearest(X, C, x_sq)
            return fkm.aggregate_round(X, part.client, lab, C, chosen, n_clients, LloydRelease(), rng)

        out: dict = {}
        med = bench.interleaved(
            {"vec": vectorized, "loop": lambda: loop_round(X, part.client, C, chosen)}, 5, results=out
        )
        same = np.allclose(out["vec"], out["loop"])  # the same centroids
        t_vec, t_loop = med["vec"], med["loop"]
        rows.append(
            (
                n_clients,
                ds.n_samples,
                f"{t_vec:.4f}",
                f"{t_loop:.4f}",
                f"{t_loop / t_vec:.1f}x{'' if same else ' (MISMATCH)'}",
            )
        )
    bench.table(["clients", "samples", "vectorized s/round", "loop s/round", "speed-up"], rows)
    init_table()


if __name__ == "__main__":
    main()
