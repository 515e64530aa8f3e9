"""Private federated k-means at the budgets people use: FedDP-KMeans against the k-means family.

    .venv/bin/python benchmarks/bench_fed_dp_kmeans.py [--seeds 3] [--mnist [PATH]] [--quick]

Prints, per data set (scikit-learn digits; with ``--mnist`` also the 10,000-image MNIST test set of
``../shared/data/mnist``, pixels / 255), a methods x epsilon table of ACC (mean ± std over seeds;
10 iid clients, delta = 1e-5, RDP accounting as the benchmark), each private cell with its trust
model, and the chance line (ACC of a random split with the true class sizes). Every method runs
the registry's defaults: FKM, DK++ (``seeding_rounds: 0``) and FZKM for ``private_rounds`` rounds
from data-independent centres, FKM also with the papers' per-client noise (``local``), FedDP-KMeans
from a 5 % held-out server sample, with its defaults (chosen on digits) and with the paper's DP
projection and 3 Lloyd steps (the setting for high-dimensional data). The last table gives each
FedDP-KMeans variant's gap to its own non-private run (same seed, server sample and clip).
"""

from __future__ import annotations

import numpy as np

from fedclust import bench
from fedclust.clustering import dk_pp, fed_dp_kmeans, fkm, fzkm
from fedclust.data.registry import prepare_dataset
from fedclust.metrics import clustering_scores, data_chance_line
from fedclust.privacy.accountants import calibrate_noise_multiplier
from fedclust.registry import REGISTRY

DELTA = 1e-5
N_CLIENTS = 10


def _kmeans_family(mod, X, y, client, k, seed, eps, trust_model, **kw):
    cfg = REGISTRY[mod.__name__.rsplit(".", 1)[-1]].config_from({})
    R = cfg.rounds_for(eps is not None)
    z = calibrate_noise_multiplier(eps, DELTA, steps=R) if eps is not None else 0.0
    res = mod.run(
        X,
        client,
        k,
        rounds=R,
        clients_per_round=N_CLIENTS,
        seed=seed,
        noise_multiplier=z,
        clip=cfg.clip,
        init="uniform_box",
        trust_model=trust_model,
        **kw,
    )
    return clustering_scores(y, res.labels)["ACC"]


def _fed_dp(X, y, client, k, seed, eps, **overrides):
    cfg = REGISTRY["fed_dp_kmeans"].config_from(overrides)
    rows = fed_dp_kmeans.holdout_rows(X.shape[0], cfg.server_fraction, seed)
    z = fed_dp_kmeans.noise_multipliers(eps, DELTA, projection=cfg.projection, steps=cfg.steps) if eps else None
    res = fed_dp_kmeans.run(
        X,
        client,
        k,
        server_rows=rows,
        noise=z,
        clip=cfg.clip,
        seed=seed,
        steps=cfg.steps,
        projection=cfg.projection,
        trust_model=cfg.trust_model,
    )
    return clustering_scores(y, res.labels)["ACC"]


#: FedDP-KMeans with its defaults (chosen on digits) and with the paper's DP projection and 3 steps
#: (the setting for high-dimensional data such as MNIST)
FEDDP = {
    "fed_dp_kmeans (secure_aggregation)": {},
    "fed_dp_kmeans (dp_pca, 3 steps, secure_aggregation)": {"projection": "dp_pca", "steps": 3},
}
METHODS = {
    **{name: (lambda *a, o=o: _fed_dp(*a, **o)) for name, o in FEDDP.items()},
    "fkm (secure_aggregation)": lambda *a: _kmeans_family(fkm, *a, "secure_aggregation"),
    "fkm (local, the paper's)": lambda *a: _kmeans_family(fkm, *a, "local"),
    "dk_pp (secure_aggregation)": lambda *a: _kmeans_family(dk_pp, *a, "secure_aggregation", seeding_rounds=0),
    "fzkm (secure_aggregation)": lambda *a: _kmeans_family(fzkm, *a, "secure_aggregation"),
}


def run_table(name, X, y, seeds, epsilons):
    k = int(y.max()) + 1
    rows, gaps = [], []
    results = {}
    for method, fn in METHODS.items():
        row = [method]
        for eps in epsilons:
            accs = []
            for seed in seeds:
                client = np.random.default_rng(seed).permutation(np.arange(len(y)) % N_CLIENTS)
                accs.append(fn(X, y, client, k, seed, eps))
            results[(method, eps)] = accs
            row.append(bench.mean_std(accs))
        rows.append(row)
    chance = data_chance_line(y)["ACC_chance"]
    heads = ["method"] + [f"ε = {e:g}" if e else "no DP" for e in epsilons]
    bench.table(heads, rows, title=f"{name}: ACC, 10 iid clients, δ = 1e-5, seeds {list(seeds)} (chance {chance:.3f})")
    for variant in FEDDP:
        base = results[(variant, None)]
        for eps in epsilons:
            if eps is None:
                continue
            priv = results[(variant, eps)]
            gaps.append(
                [
                    variant,
                    f"{eps:g}",
                    bench.mean_std(priv),
                    bench.mean_std(base),
                    f"{np.mean(priv) - np.mean(base):+.3f}",
                ]
            )
    bench.table(
        ["variant", "ε", "private", "its non-private run", "gap"],
        gaps,
        title=f"{name}: FedDP-KMeans against its own non-private run",
    )


def main():
    ap = bench.parser(__doc__, quick="digits only, 2 seeds, ε in {1, 4}", seeds=3)
    ap.add_argument(
        "--mnist",
        nargs="?",
        const=str(bench.MNIST_DIR),
        default=None,
        help="also the MNIST test set (default folder ../shared/data/mnist)",
    )
    args = ap.parse_args()
    seeds = range(2 if args.quick else args.seeds)
    epsilons = [1.0, 4.0, None] if args.quick else [1.0, 4.0, 8.0, None]
    with bench.session(args):
        ds = prepare_dataset("digits")
        run_table("digits", ds.X.astype(np.float64), ds.y, seeds, epsilons)
        if args.mnist and not args.quick:
            X, y, _ = bench.mnist_test(args.mnist)
            run_table("MNIST (10,000 test images)", X, y, seeds, epsilons)


if __name__ == "__main__":
    main()
