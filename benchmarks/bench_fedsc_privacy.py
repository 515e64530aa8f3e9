"""FedSC's perturbed-data variant against its budget on digits: ACC at each epsilon, before and after
the declared-domain sensitivity (docs/methods/fedsc.md, "Privacy: measured").

Run from the project root::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fedsc_privacy.py            # 3 seeds (about 2 min)
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fedsc_privacy.py --seeds 1

Every run goes through the method registry (calibrate, then run) as the benchmark grid does it:
digits min-max scaled (pixels / 16), 10 iid clients, delta = 1e-5, the RDP accountant, FedSC with
``d_max = 100`` and ``n_init = 10`` (the benchmark's settings). Columns:

* ``paper``: ``data_sensitivity: paper``, the release of Proposition 3.7 (rows clipped to
  ``clip_tau``, sensitivity ``2 clip_tau``); with the public clip ``sqrt(m) / 2 = 4`` it is the
  release the project ran before the declared domain;
* ``domain``: the default, the declared domain [0, 1]^m (sensitivity ``sqrt(2) clip_tau``);
* ``twin``: the non-private run on the same bounded rows (same clip and domain), its kernel constants
  from the same rules: what the private run tends to as epsilon grows;
* ``sigma``: the noise std per coordinate of the ``domain`` release.

At epsilon = inf the private columns are the plain non-private run (no clip).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from fedclust.clustering import fedsc
from fedclust.data.registry import prepare_dataset
from fedclust.partition.iid import iid
from fedclust.registry import REGISTRY

EPSILONS = (1.0, 4.0, 16.0, 64.0, 256.0, None)
SETTINGS = {"d_max": 100, "n_init": 10}


def acc(ds, part, seed, eps, **train) -> tuple[float, dict]:
    spec = REGISTRY["fedsc"]
    cfg = spec.config_from({**SETTINGS, **train})
    noise = spec.calibrate({"epsilon": eps, "delta": 1e-5, "accountant": "rdp"}, cfg, ds, part)
    return float(spec.run(ds, part, noise, cfg, seed).info["ACC"]), noise


def twin_acc(ds, part, seed, noise) -> float:
    k = int(ds.y.max()) + 1
    res = fedsc.run(
        ds.X,
        part.client,
        k,
        seed=seed,
        y=ds.y,
        clip_tau=noise["clip_tau"],
        data_domain=noise["data_domain"],
        **SETTINGS,
    )
    return float(res.info["ACC"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    ds = prepare_dataset("digits", seed=0, scale="minmax")
    seeds = range(args.seeds)
    parts = {s: iid(ds.X.shape[0], 10, seed=s) for s in seeds}
    t0 = time.perf_counter()
    print(
        f"digits n={ds.X.shape[0]} m={ds.X.shape[1]}, 10 iid clients, delta 1e-5, seeds {list(seeds)}: ACC mean (min-max)"
    )
    print("| epsilon | sigma (domain) | paper (2 tau) | domain (sqrt(2) tau) | twin (no noise) |")
    print("|---|---|---|---|---|")
    twin = None
    for eps in EPSILONS:
        paper = [acc(ds, parts[s], s, eps, data_sensitivity="paper")[0] for s in seeds]
        runs = [acc(ds, parts[s], s, eps) for s in seeds]
        dom = [a for a, _ in runs]
        noise = runs[0][1]
        if eps is not None and twin is None:
            twin = [twin_acc(ds, parts[s], s, noise) for s in seeds]
        sigma = f"{noise['data_noise_std']:.3f}" if eps is not None else "0"

        def cell(v):
            return f"{np.mean(v):.3f} ({min(v):.3f}-{max(v):.3f})"

        tw = cell(twin) if eps is not None else "-"
        print(f"| {'inf' if eps is None else f'{eps:g}'} | {sigma} | {cell(paper)} | {cell(dom)} | {tw} |", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
