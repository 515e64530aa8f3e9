"""The k-means family's clip rules on five data sets: the DP median, the server's median, sqrt(m).

    .venv/bin/python benchmarks/bench_kmeans_clip.py [--seeds 3] [--quick] [--fed-dp-kmeans]

The rules were fixed before this table was measured (fedclust.clustering.defaults): a private FKM,
FZKM or DK++ run without a given clip reads it off the server's public sample (the median row norm)
when it has one, and otherwise spends one release of its budget on a DP median of the row norms
(a noisy histogram on a public grid of quarter octaves). The alternative public rule without any
release is the declared bound of the scaling, sqrt(m).

For each method and data set (10 iid clients; 100 for the Gaussian mixture), at each epsilon
(delta = 1e-5, RDP, secure aggregation, 5 private rounds) and without DP, on seeds 0, 1, 2:

* ``dp median``: the default without server data (a uniform_box start);
* ``sqrt(m)``: the same start with the clip ``sqrt(m)`` (not defined for unscaled data);
* ``server``: ``server_data: holdout`` (5 %): the start and the clip from the server's sample.

Prints ACC mean ± std, the clip used (seed 0) and centralized k-means ACC as the non-private line.

``--fed-dp-kmeans``: FedDP-KMeans without server data (``server_data: none``: DP candidates, dp_pca,
one Lloyd step) at epsilon 1 and 4 on digits (min-max), wine (standardized) and the unscaled
Gaussian mixture (100 clients): the DP median of the row norms (the default: a clip stage with the
weighting stage's share of the budget) against ``sqrt(m)`` given as the clip (the rule it replaces
on scaled data; on unscaled data it has no meaning beyond a number). Seeds 0, 1, 2; delta 1e-5, RDP.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from sklearn.cluster import KMeans

from fedclust import bench
from fedclust.data.registry import prepare_dataset
from fedclust.metrics import clustering_scores, data_chance_line
from fedclust.partition import make_partition
from fedclust.registry import REGISTRY

DELTA = 1e-5


def datasets(quick: bool):
    out = [("digits", prepare_dataset("digits"), 10)]
    for name in ("iris", "wine", "breast_cancer"):
        out.append((f"{name} (std)", prepare_dataset(name, scale="standardize"), 10))
    if not quick:
        gm = prepare_dataset(
            "gaussian_mixture",
            scale="none",
            options={"n_samples": 20000, "n_features": 100, "k": 10, "separation": 4.0},
        )
        out.append(("Gaussian mixture (unscaled)", gm, 100))
    return out


def one(method, ds, n_clients, seed, eps, settings):
    spec = REGISTRY[method]
    cfg = spec.config_from(settings)
    part = make_partition("iid", y=ds.y, n_clients=n_clients, seed=seed)
    noise = spec.calibrate({"epsilon": eps, "delta": DELTA, "accountant": "rdp"}, cfg, ds, part)
    res = spec.run(ds, part, noise, cfg, seed)
    return clustering_scores(ds.y, res.labels)["ACC"], res.info.get("clip")


def fed_dp_kmeans_table(seeds) -> None:
    """The ``--fed-dp-kmeans`` table (see the module docstring)."""
    sets = [
        ("digits", prepare_dataset("digits"), 10),
        ("wine (std)", prepare_dataset("wine", scale="standardize"), 10),
        (
            "Gaussian mixture (unscaled)",
            prepare_dataset(
                "gaussian_mixture",
                scale="none",
                options={"n_samples": 20000, "n_features": 100, "k": 10, "separation": 4.0},
            ),
            100,
        ),
    ]
    rows = []
    for label, ds, n_clients in sets:
        chance = data_chance_line(ds.y)["ACC_chance_hi"]
        for rule, settings in (("sqrt(m) given", {"clip": math.sqrt(ds.n_features)}), ("dp median", {})):
            cells, clip = [], None
            for eps in (1.0, 4.0):
                runs = [one("fed_dp_kmeans", ds, n_clients, s, eps, {"server_data": "none", **settings}) for s in seeds]
                cells.append(bench.mean_std([a for a, _ in runs]))
                clip = clip or runs[0][1]
            rows.append([label, rule, f"{clip:.3g}", *cells, f"{chance:.3f}"])
            print(" | ".join(rows[-1]), flush=True)
    bench.table(
        ["data", "clip rule", "clip (seed 0, ε=1)", "ε=1", "ε=4", "chance"],
        rows,
        title=f"FedDP-KMeans without server data: clip rules (secure aggregation, 1 Lloyd step), seeds {seeds}",
    )


def main():
    ap = bench.parser(__doc__, quick="no Gaussian mixture, fzkm left out, 2 seeds", seeds=3)
    ap.add_argument("--fed-dp-kmeans", action="store_true", help="only the FedDP-KMeans table (no server data)")
    args = ap.parse_args()
    if args.fed_dp_kmeans:
        logging.getLogger("fedclust").setLevel(logging.WARNING)
        with bench.session(args):
            fed_dp_kmeans_table(list(range(args.seeds)))
        return
    seeds = list(range(2 if args.quick else args.seeds))
    methods = ("fkm", "dk_pp") if args.quick else ("fkm", "fzkm", "dk_pp")
    epsilons = (1.0, 4.0, 16.0, None)
    logging.getLogger("fedclust").setLevel(logging.WARNING)
    with bench.session(args):
        rows = []
        for label, ds, n_clients in datasets(args.quick):
            km = np.mean(
                [
                    clustering_scores(ds.y, KMeans(ds.n_classes, n_init=10, random_state=s).fit_predict(ds.X))["ACC"]
                    for s in seeds
                ]
            )
            chance = data_chance_line(ds.y)["ACC_chance_hi"]
            scaled = ds.meta.get("preprocess", {}).get("scale") in ("minmax", "standardize")
            rules = {"dp median": {}, "server": {"server_data": "holdout"}}
            if scaled:
                rules["sqrt(m)"] = {"clip": math.sqrt(ds.n_features)}
            for method in methods:
                for rule, settings in rules.items():
                    cells, clip = [], None
                    for eps in epsilons:
                        runs = [one(method, ds, n_clients, s, eps, settings) for s in seeds]
                        cells.append(bench.mean_std([a for a, _ in runs]))
                        clip = clip or runs[0][1]
                    rows.append([label, method, rule, f"{clip:.3g}", *cells, f"{km:.3f}", f"{chance:.3f}"])
                    print(" | ".join(rows[-1]), flush=True)
        bench.table(
            ["data", "method", "clip rule", "clip", "ε=1", "ε=4", "ε=16", "no DP", "k-means", "chance"],
            rows,
            title=f"k-means family clip rules (secure aggregation, 5 private rounds), seeds {seeds}",
        )


if __name__ == "__main__":
    main()
