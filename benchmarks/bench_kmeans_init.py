"""FKM and FZKM across budgets, from their default start and from the server's public sample.

    .venv/bin/python benchmarks/bench_kmeans_init.py [--seeds 3] [--quick]

scikit-learn digits (pixels / 16) on 10 iid clients (a permutation per seed), delta = 1e-5, RDP
accounting, every run through the method registry with its defaults (what ``kedro run`` with
``privacy.epsilon`` set computes): 20 rounds without DP, ``private_rounds`` = 5 with DP, clip 3,
secure aggregation, count threshold 3, clip-ball projection; FZKM with its default fuzzifier
1 + 1/sqrt(m) and, for comparison, the usual FCM's 2.0. Two starts per method:

* ``default``: the papers' k data rows without DP, public ``uniform_box`` centres with DP;
* ``server``: ``server_data: holdout`` (5 % of the rows held out as the server's public sample, the
  same rows as FedDP-KMeans's for the seed; they are no client data) and ``init: server`` (k-means
  on them). The run is scored on every row.

Prints the ACC table (mean ± std over seeds; the chance line is a random split with the true class
sizes) and each private cell's gap to its non-private twin: the same start, clip and rounds
(5, as the private run) with the noise off.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from fedclust import bench
from fedclust.data.registry import prepare_dataset
from fedclust.metrics import clustering_scores, data_chance_line
from fedclust.registry import REGISTRY

DELTA = 1e-5
N_CLIENTS = 10
EPSILONS = (1.0, 4.0, 16.0, 256.0, None)
#: (label, method, <method>.train settings)
VARIANTS = (
    ("fkm, default start", "fkm", {}),
    ("fkm, server start", "fkm", {"server_data": "holdout", "init": "server"}),
    ("fzkm, default start", "fzkm", {}),
    ("fzkm, server start", "fzkm", {"server_data": "holdout", "init": "server"}),
    ("fzkm f=2, default start", "fzkm", {"fuzzifier": 2.0}),
    ("fzkm f=2, server start", "fzkm", {"fuzzifier": 2.0, "server_data": "holdout", "init": "server"}),
)


def run_once(method, settings, dataset, seed, eps, twin=False):
    """ACC of one registry run; ``twin``: the private run (its start, clip and rounds) with the
    noise multiplier set to 0."""
    spec = REGISTRY[method]
    if twin and settings.get("init") is None:
        settings = {**settings, "init": "uniform_box"}  # the private run's default start
    cfg = spec.config_from(settings)
    partition = SimpleNamespace(client=np.random.default_rng(seed).permutation(np.arange(len(dataset.y)) % N_CLIENTS))
    noise = spec.calibrate({"epsilon": eps, "delta": DELTA, "accountant": "rdp"}, cfg, dataset, partition)
    if twin:
        noise = {**noise, "noise_multiplier": 0.0}
    res = spec.run(dataset, partition, noise, cfg, seed)
    return clustering_scores(dataset.y, res.labels)["ACC"]


def main():
    ap = bench.parser(__doc__, quick="2 seeds, ε in {4, 256, ∞}", seeds=3)
    args = ap.parse_args()
    seeds = range(2 if args.quick else args.seeds)
    epsilons = (4.0, 256.0, None) if args.quick else EPSILONS
    with bench.session(args):
        ds = prepare_dataset("digits")
        dataset = SimpleNamespace(name="digits", X=ds.X.astype(np.float64), y=ds.y, n_classes=10, images=None)
        chance = data_chance_line(ds.y)["ACC_chance"]
        rows, gaps = [], []
        for label, method, settings in VARIANTS:
            row = [label]
            for eps in epsilons:
                row.append(bench.mean_std([run_once(method, settings, dataset, s, eps) for s in seeds]))
            rows.append(row)
            twin = [run_once(method, settings, dataset, s, 256.0, twin=True) for s in seeds]
            priv = [run_once(method, settings, dataset, s, 256.0) for s in seeds]
            gaps.append([label, bench.mean_std(priv), bench.mean_std(twin), f"{np.mean(priv) - np.mean(twin):+.3f}"])
        heads = ["variant"] + [f"ε = {e:g}" if e else "no DP" for e in epsilons]
        bench.table(
            heads,
            rows,
            title=f"digits: ACC, 10 iid clients, δ = 1e-5, seeds {list(seeds)} (chance {chance:.3f}); "
            "private: 5 rounds, no DP: 20 rounds",
        )
        bench.table(
            ["variant", "ε = 256", "its twin (same start, clip, 5 rounds, no noise)", "gap"],
            gaps,
            title="digits: the private run at ε = 256 against its non-private twin",
        )


if __name__ == "__main__":
    main()
