"""Benchmark: the regime map of RR-Cluster, where random rebalancing beats DP-IFCA and where it does not.

**REAL DATA: this script reads the MNIST test set from ``../shared/data/mnist``** (the 10,000 test
images, the same data and preprocessing as ``bench_rr_cluster.py``: centre-cropped to 20x20 and
2x2 average-pooled to 10x10, d = 100). It stops with a message when that folder is missing.

RR-Cluster can only differ from its base method (DP-IFCA, B = 0) in rounds where a noisy cluster
receives fewer than B updates, which needs few sampled clients per cluster and round. This script
sweeps that number, ``m / k`` with ``m = round(qM)`` sampled clients and k = 4 clusters, through the
sampling rate q and the number of clients M, and measures RR-Cluster(IFCA) against DP-IFCA there.

* data: balanced rotations (4 groups of M/4 clients at 0/90/180/270 degrees, k = 4), each client 8
  training and 2 test images used once (``reuse=False``); M in {500, 1000} (the 10,000 images allow
  no more clients of this size);
* regime points (M, q): M = 1000 with q in {0.01, 0.02, 0.03, 0.04, 0.05, 0.1, 0.2} (m/k = 2.5 ... 50) and
  M = 500 with q in {0.02, 0.04, 0.06, 0.1} (m/k = 2.5 ... 12.5): the same m/k reached through two
  (q, M) paths;
* client-level (eps, delta = 1e-3) with eps in {2, 4, 8}, replace-one neighbours, fixed-size sampling,
  calibrated by the project's accountant through the registry's RR dispatch
  (:func:`fedclust.registry.clustered_fl.rr_sigmas` / :func:`~fedclust.registry.clustered_fl.run_rr`,
  the same noise and release as the ``rr_cluster`` pipeline and the ``rr_grid``); budget split
  rho_s = 0.5, C_s = 0.1, C_theta = 0.3 (the registry's default clip) for every method and point,
  so that RR and DP-IFCA differ only in the rebalancing;
* B in {0 (= DP-IFCA), 2, 4, 7}; a B above m/k is infeasible (``B <= qM/k``) and its cell is left out;
* training: T rounds (default 60) of 5 full-batch GD steps at lr 0.1, server step 1, softmax
  regression (100 -> 10);
* seeds 0, 1, 2 (chosen before looking): each seed draws the partition, the initial models, the
  client samples and the noise; a seed's runs share all of them across B (the rebalancing has its
  own random stream), so the gain RR - DP-IFCA is a paired difference per seed.

Per cell: test accuracy (mean and 95 % Student-t CI over seeds), updates moved per round, the
client-clustering ACC (final noise-free argmin-loss assignment of all clients against the true
rotation) with its chance line (a random assignment with the same cluster sizes), and the accounted
epsilon (max over seeds). The figure: the gain of RR-Cluster over DP-IFCA (paired mean and 95 % CI)
against m/k, one line per eps, one panel per B.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_rr_map.py [--quick] [--rounds 60] [--seeds 3] \
        [--figure docs/methods/rr_cluster_map.png] [--json out.json] [--replot out.json] \
        [--clip 0.3] [--points 1000:0.03,1000:0.1] [--epsilons 2,4,8]

``--quick``: eps 4, seed 0, three points, T = 20 (about a minute). ``--replot PATH`` redraws the
tables and the figure from the records of an earlier ``--json`` report without training.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from fedclust import bench
from fedclust.clustered_fl import MLP
from fedclust.clustered_fl.rebalance import identifier_keep_probability
from fedclust.grids.report import t_interval
from fedclust.metrics import client_chance
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.registry.clustered_fl import rr_regime, rr_sigmas, run_rr

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the data of the RR benchmark next to this script
from bench_rr_cluster import build, load_images  # noqa: E402

DELTA, C_S, CLIP = 1e-3, 0.1, 0.3
EPSILONS = (2.0, 4.0, 8.0)
BS = (0, 2, 4, 7)
POINTS = [(1000, q) for q in (0.01, 0.02, 0.03, 0.04, 0.05, 0.1, 0.2)] + [(500, q) for q in (0.02, 0.04, 0.06, 0.1)]
QUICK_POINTS = [(1000, 0.02), (1000, 0.03), (1000, 0.1)]
K = 4


def feasible(B: int, M: int, q: float) -> bool:
    return B * K <= max(1, int(round(q * M)))


def run_point(images, y, M, q, epss, seeds, T, clip=CLIP) -> list[dict]:
    """Every (eps, seed, B) run of one regime point, as flat records."""
    out = []
    for seed in seeds:
        data, k = build(images, y, "balanced", seed, M)
        assert k == K
        for eps in epss:
            sig = rr_sigmas("rr_cluster", eps, DELTA, q, T, M)  # DP-IFCA: the same multipliers (B = 0)
            for B in (b for b in BS if feasible(b, M, q)):
                t0 = time.perf_counter()
                res = run_rr(
                    "rr_cluster" if B else "dp_ifca",
                    data,
                    MLP(data.d, (), 10),
                    k,
                    sigmas=sig,
                    clip=clip,
                    B=B,
                    C_s=C_S,
                    lr=0.1,
                    local_steps=5,
                    rounds=T,
                    participation=q,
                    seed=seed,
                    eval_every=0,
                )
                final, moved = res.info["final"], res.history["n_moved"]
                rec = {
                    "M": M,
                    "q": q,
                    "eps": eps,
                    "seed": seed,
                    "B": B,
                    "rounds": T,
                    "clip": clip,
                    "test_accuracy": float(final["test_accuracy"]),
                    "client_ACC": float(final["client_ACC"]),
                    "moved_per_round": float(np.mean(moved)),
                    "min_noisy_cluster": float(np.mean([min(z) for z in res.history["sizes_before_rr"]])),
                    "epsilon_accountant": float(accounted(res.dp_events, DELTA)),
                    "sigma_s": sig["sigma_s"],
                    "sigma_theta": sig["sigma_theta"],
                    "wall_s": time.perf_counter() - t0,
                    **rr_regime(q, M, k, moved),
                }
                rec.update(client_chance(data.group, res.assignment, rec["client_ACC"], seed=seed))
                out.append(rec)
    return out


# ------------------------------------------------------------------------------------------------
def _ci(values, scale=100.0) -> str:
    mean, half = t_interval([scale * v for v in values])
    return f"{mean:.1f}" if math.isnan(half) else f"{mean:.1f} ± {half:.1f}"


def _by(records):
    d = {}
    for r in records:
        d.setdefault((r["M"], r["q"], r["eps"], r["B"]), {})[r["seed"]] = r
    return d


def gains(records) -> dict:
    """(M, q, eps, B>0) -> (mean, CI half width, n) of the paired per-seed test-accuracy gain RR - DP-IFCA, in points."""
    by, out = _by(records), {}
    for (M, q, eps, B), runs in by.items():
        base = by.get((M, q, eps, 0), {})
        diffs = [100 * (runs[s]["test_accuracy"] - base[s]["test_accuracy"]) for s in runs if s in base]
        if B and diffs:
            out[M, q, eps, B] = (*t_interval(diffs), len(diffs))
    return out


def points_of(records):
    return sorted({(r["M"], r["q"]) for r in records}, key=lambda p: (p[1] * p[0] / K, -p[0]))


def _gain_text(gain) -> str:
    mean, half, _n = gain
    if math.isnan(half):
        return f"{mean:+.1f}"
    mark = " (+)" if mean - half > 0 else " (-)" if mean + half < 0 else ""
    return f"{mean:+.1f} ± {half:.1f}{mark}"


def _rows(records, by, epss, cell) -> None:
    """Print one table row per regime point and threshold B that ran: ``cell(runs, (M, q, eps, B))``
    per epsilon."""
    for M, q in points_of(records):
        for B in BS:
            if (M, q, epss[0], B) not in by:
                continue
            cells = [cell(list(by[M, q, e, B].values()), (M, q, e, B)) for e in epss]
            print(f"| {round(q * M) / K:g} | {M} | {q:g} | {B} | " + " | ".join(cells) + " |")


def tables(records) -> None:
    by, g = _by(records), gains(records)
    epss = sorted({r["eps"] for r in records})
    seeds = sorted({r["seed"] for r in records})
    T, clip = records[0]["rounds"], records[0].get("clip", CLIP)
    print(
        f"\n## RR-Cluster regime map: rotated MNIST (10x10, balanced, k={K}), T={T}, delta={DELTA}, "
        f"C_theta={clip:g}, C_s={C_S}, seeds {seeds}\n"
    )
    head = "| m/k | M | q | B | " + " | ".join(f"eps={e:g}" for e in epss) + " |"
    sep = "|---" * (4 + len(epss)) + "|"
    print(
        "### Test accuracy % (mean ± 95 % CI) / gain over DP-IFCA in points (paired per seed, mean ± 95 % CI) / "
        "updates moved per round (B = 0 is DP-IFCA)\n"
    )
    print(head + "\n" + sep)

    def accuracy(rs, key):
        gain = _gain_text(g[key]) if key[-1] else "-"
        moved = np.mean([r["moved_per_round"] for r in rs])
        return f"{_ci([r['test_accuracy'] for r in rs])} / {gain} / {moved:.2f}"

    _rows(records, by, epss, accuracy)
    print("\n(+) / (-): the 95 % CI of the gain lies above / below 0.")
    print("\n### Client-clustering ACC % (mean ± 95 % CI; its chance line %, mean) / accounted eps (max over seeds)\n")
    print(head + "\n" + sep)

    def clustering(rs, key):
        chance = 100 * np.mean([r["client_ACC_chance"] for r in rs])
        eps_acc = max(r["epsilon_accountant"] for r in rs)
        return f"{_ci([r['client_ACC'] for r in rs])} ({chance:.1f}) / {eps_acc:.3f}"

    _rows(records, by, epss, clustering)
    print(
        "\n### Why: smallest noisy cluster of a round before RR (mean over rounds and seeds, DP-IFCA runs) / "
        "chance that a noisy identifier keeps the client's own cluster\n"
    )
    print("| m/k | M | q | " + " | ".join(f"eps={e:g}" for e in epss) + " |")
    print("|---" * (3 + len(epss)) + "|")
    for M, q in points_of(records):
        cells = []
        for e in epss:
            rs = list(by[M, q, e, 0].values())
            keep = identifier_keep_probability(math.sqrt(2) * rs[0]["sigma_s"], K)  # std sqrt(2) C_s sigma_s
            cells.append(f"{np.mean([r['min_noisy_cluster'] for r in rs]):.1f} / {keep:.2f}")
        print(f"| {round(q * M) / K:g} | {M} | {q:g} | " + " | ".join(cells) + " |")
    # the crossover: per eps, the m/k where some B gains with its CI above 0, and where RR moves anything
    print("\n### Where RR-Cluster helps (a gain whose 95 % CI lies above 0, any B) and where it acts at all\n")
    for e in epss:
        wins = sorted({round(q * M) / K for (M, q, ee, _B), v in g.items() if ee == e and v[0] - v[1] > 0})
        losses = sorted({round(q * M) / K for (M, q, ee, _B), v in g.items() if ee == e and v[0] + v[1] < 0})
        idle = sorted(
            {
                round(q * M) / K
                for M, q in points_of(records)
                if all(
                    r["moved_per_round"] == 0
                    for (MM, qq, ee, _B), rs in by.items()
                    if (MM, qq, ee) == (M, q, e)
                    for r in rs.values()
                )
            }
        )
        print(
            f"- eps={e:g}: gain at m/k in {wins or 'none'}; loss at m/k in {losses or 'none'}; "
            f"no update moved (RR = DP-IFCA exactly) at m/k in {idle or 'none'}"
        )


def figure(records, path) -> None:
    """Gain of RR over DP-IFCA (paired mean, 95 % CI) against m/k, one line per eps, one panel per B."""
    # matplotlib loads only when the figure is drawn
    import matplotlib.pyplot as plt

    g = gains(records)
    epss = sorted({r["eps"] for r in records})
    Bs = [B for B in BS[1:] if any(key[3] == B for key in g)]
    fig, axes = plt.subplots(1, len(Bs), figsize=(4.2 * len(Bs), 3.6), sharex=True, sharey=True, squeeze=False)
    colors = dict(zip(epss, ("tab:red", "tab:orange", "tab:blue", "tab:green")))
    for ax, B in zip(axes[0], Bs):
        ax.axhline(0.0, color="grey", lw=0.8)
        for i, e in enumerate(epss):
            for M, style, marker in ((1000, "-", "o"), (500, "--", "s")):
                pts = sorted(
                    (round(q * MM) / K, *g[MM, q, ee, BB][:2]) for (MM, q, ee, BB) in g if (MM, ee, BB) == (M, e, B)
                )
                if not pts:
                    continue
                x, mean, half = (np.asarray(v, dtype=float) for v in zip(*pts))
                dodge = 1.0 + 0.04 * (i - (len(epss) - 1) / 2) + (0.015 if M == 500 else 0.0)  # bars side by side
                ax.errorbar(
                    x * dodge,
                    mean,
                    yerr=np.nan_to_num(half),
                    color=colors[e],
                    ls=style,
                    marker=marker,
                    ms=4,
                    capsize=3,
                    label=f"ε = {e:g}, M = {M}",
                )
        ax.set_xscale("log")
        ticks = sorted({round(q * M) / K for M, q in points_of(records)})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=7)
        ax.minorticks_off()
        ax.set_title(f"B = {B}")
        ax.set_xlabel("expected sampled clients per cluster per round, m/k")
    axes[0][0].set_ylabel("RR-Cluster − DP-IFCA, test accuracy (points)")
    axes[0][-1].legend(fontsize=7)
    T, seeds = records[0]["rounds"], sorted({r["seed"] for r in records})
    fig.suptitle(
        f"RR-Cluster gain over DP-IFCA (rotated MNIST 10x10, k={K}, T={T}, seeds {seeds}, paired 95 % CI)",
        fontsize=10,
    )
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"\n(figure written to {path})")


def main():
    ap = bench.parser(__doc__, quick="eps 4, seed 0, 3 regime points, T=20 (about a minute)", seeds=3, threads=1)
    ap.add_argument("--rounds", type=int, default=60, help="training rounds T (default 60)")
    ap.add_argument("--figure", default=None, help="write the gain figure (PNG) to this path")
    ap.add_argument("--replot", default=None, metavar="PATH", help="tables and figure from an earlier --json report")
    ap.add_argument("--clip", type=float, default=CLIP, help=f"C_theta of every run (default {CLIP})")
    ap.add_argument("--points", default=None, help="regime points M:q,M:q,... (default: the full map)")
    ap.add_argument("--epsilons", default=None, help="comma-separated epsilons (default 2,4,8)")
    args = ap.parse_args()
    with bench.session(args) as report:
        if args.replot:
            records = json.loads(Path(args.replot).read_text())["records"]
        else:
            if not bench.have_mnist():
                print(f"MNIST not found in {bench.MNIST_DIR}; nothing to do")
                return
            images, y = load_images()
            points, epss, seeds, T = (
                (QUICK_POINTS, (4.0,), [0], 20)
                if args.quick
                else (POINTS, EPSILONS, list(range(args.seeds)), args.rounds)
            )
            if args.points:
                points = [(int(a), float(b)) for a, b in (p.split(":") for p in args.points.split(","))]
            if args.epsilons:
                epss = tuple(float(e) for e in args.epsilons.split(","))
            records, wall0 = [], time.perf_counter()
            for M, q in points:
                t0 = time.perf_counter()
                records += run_point(images, y, M, q, epss, seeds, T, args.clip)
                print(f"point M={M} q={q:g} (m/k={round(q * M) / K:g}): {time.perf_counter() - t0:.1f} s", flush=True)
            print(f"total wall {time.perf_counter() - wall0:.1f} s")
            report["records"] = records
        tables(records)
        if args.figure:
            figure(records, args.figure)


if __name__ == "__main__":
    main()
