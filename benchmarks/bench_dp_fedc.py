"""DP-FedC and its Table I baselines on the MNIST test set (docs/methods/dp_fedc.md).

Run from the project root::

    .venv/bin/python benchmarks/bench_dp_fedc.py            # full: 5 seeds, R = 100
    .venv/bin/python benchmarks/bench_dp_fedc.py --quick    # 1 seed, R = 4 (< 1 minute)

Prints
1. the Table I layout (IID, N = 100, K = 30, Q1 = 10, Q2 = 5, R = 100): FKM, FZKM, DK++, DKM and
   DP-FedC x {no DP, eps_bar = 20}, final ACC mean +- std over the seeds. Every method gets the same
   initial centres W^0 per seed. The baselines get the same per-round (eps, delta) as DP-FedC (the
   per-round eps that Theorem 3 gives DP-FedC) with the classical Gaussian mechanism on their uploads,
   samples clipped to the largest row norm (our choice). The baselines are OUR reimplementations;
2. the paper's qualitative claims (Figs. 3-4 setting, Q2^t = floor(10/t)+1): ACC ordering
   no DP > eps_bar=20 > eps_bar=2, IID >= non-IID (two digits per client), larger K better;
3. wall time of one vectorized DP-FedC round against a per-client Python loop of the same round
   (same inputs, results equal to 1e-10), and of a full 100-round run;
4. what privacy costs when a private run is sound (public W^0, clip and constants): ACC of the paper's
   non-private DP-FedC, of the same mechanism as the private run with its noise off (public W^0,
   public clip, public constants), and of the private run at one budget (its accountant epsilon
   printed next to it), for a few gradient clips G.

Private runs: W^0 is a public draw (uniform in [0, 1]^m, pulled into the clip ball)
shared by every method of a seed, every sample is clipped to the public bound ``--clip`` (default
sqrt(m), the largest row norm of [0, 1]^m; never the data's largest norm), and DP-FedC uses its public
constants. Non-private runs keep the paper's choices (k data rows as W^0, data-dependent constants).
DP-FedC's penalty: rho_factor = 1e-2 (ours, a stronger one-hot penalty) and the paper's 1e-7 (``--rho-variant``).

Data: ``../shared/data/mnist`` (the 10,000-image MNIST test set, pixels / 255), or ``--data``.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from fedclust import bench
from fedclust.clustering import dk_pp, dkm, dp_fedc, fkm, fzkm
from fedclust.clustering._common import SegmentLayout, initial_centroids, public_centroids, sample_clients
from fedclust.data.synthetic import gaussian_mixture
from fedclust.metrics import clustering_accuracy
from fedclust.partition.iid import iid
from fedclust.partition.shards import shards
from fedclust.privacy.mechanisms import classical_sigma
from fedclust.privacy.paper.dp_fedc import round_epsilon
from fedclust.rng import stream

N_CLIENTS, K_DEFAULT, DELTA, B = 100, 30, 1e-4, 50


def ms(a):
    """ACC in percent, mean ± std."""
    return bench.mean_std(a, scale=100, nd=1, width=5)


def partition(y, split, seed):
    if split == "iid":
        return iid(y.size, N_CLIENTS, seed=seed).client
    return shards(y, N_CLIENTS, labels_per_client=2, seed=seed).client


def public_w0(X, k, seed, clip):
    """The private runs' W^0: uniform in [0, 1]^m pulled into the clip ball (no data read)."""
    return public_centroids(k, X.shape[1], seed, "uniform_box", clip=clip)


def table1(X, y, seeds, R, G, rho_variant, clip):
    """Table I: methods x {no DP, eps_bar = 20}, IID, K = 30, Q2 = 5."""
    k = 10
    K = K_DEFAULT
    # DP-FedC's per-round eps (Theorem 3 with q = min(Q2 b / n_i, 0.99), p = K/N), shared by all
    q = min(5 * B / (X.shape[0] / N_CLIENTS), 0.99)
    eps_round = round_epsilon(20.0, q, K / N_CLIENTS, R)
    with warnings.catch_warnings():  # eps >= 1 in --quick (few rounds): classical formula still used
        warnings.simplefilter("ignore")
        z = classical_sigma(eps_round, DELTA, 1.0)
    rows = {}
    times = {}

    variant = f"DP-FedC, rho_factor={rho_variant:g}" + (" (the paper's)" if rho_variant == 1e-7 else "")
    methods = [("FKM", fkm), ("FZKM", fzkm), ("DK++", dk_pp), ("DKM", dkm), ("DP-FedC", dp_fedc), (variant, dp_fedc)]
    for name, mod in methods:
        for dp in (False, True):
            accs, t0 = [], time.perf_counter()
            for seed in seeds:
                client = partition(y, "iid", seed)
                W0 = public_w0(X, k, seed, clip) if dp else initial_centroids(X, k, seed)
                common = dict(rounds=R, clients_per_round=K, seed=seed, init_centroids=W0)
                if mod is dp_fedc:
                    rf = rho_variant if name == variant else 1e-2
                    r = dp_fedc.run(
                        X,
                        client,
                        k,
                        q2=5,
                        G=G if dp else None,
                        eps_bar=20.0 if dp else None,
                        rho_factor=rf,
                        clip=clip if dp else None,
                        **common,
                    )
                elif mod is fkm:
                    r = fkm.run(X, client, k, noise_multiplier=z if dp else 0.0, clip=clip if dp else None, **common)
                else:
                    extra = {"seeding_rounds": 0 if dp else min(5, R - 2)} if mod is dk_pp else {}
                    r = mod.run(
                        X, client, k, noise_multiplier=z if dp else 0.0, clip=clip if dp else None, **common, **extra
                    )
                accs.append(clustering_accuracy(y, r.labels))
            rows[(name, dp)] = accs
            times[(name, dp)] = (time.perf_counter() - t0) / len(seeds)
    print(
        f"\n## 1. Table I layout (MNIST test set, IID, N={N_CLIENTS}, K={K}, Q1=10, Q2=5, R={R}, "
        f"{len(seeds)} seed(s); ACC %, mean ± std)"
    )
    print(
        f"per-round eps given to every method at eps_bar=20: {eps_round:.4g} (delta={DELTA}); baseline "
        f"noise multiplier z={z:.3g}, sample clip={clip:.3g}; DP-FedC gradient clip G={G}"
    )
    print(
        "(FKM, FZKM, DK++, DKM are our reimplementations, not the paper's code; DKM's noisy run is not DP "
        "(epsilon = inf); private runs start from a public W^0)\n"
    )
    print("| method | without DP | eps_bar = 20 | drop | s/run (no DP, DP) |")
    print("|---|---|---|---|---|")
    for name, _ in methods:
        a, b = np.array(rows[(name, False)]), np.array(rows[(name, True)])
        print(
            f"| {name} | {ms(a)} | {ms(b)} | {100 * (a.mean() - b.mean()):5.1f} | "
            f"{times[(name, False)]:.1f}, {times[(name, True)]:.1f} |"
        )
    return rows


def claims(X, y, seeds, R, G, Ks, rho_factor=1e-2, clip=None):
    """DP-FedC in the Figs. 3-4 setting (Q2^t = floor(10/t)+1)."""
    k = 10
    res = {}
    noise = {}  # (split, K) -> per-entry std of the noise in the server mean, averaged over rounds

    def go(split, K, eb):
        key = (split, K, eb)
        if key not in res:
            accs = []
            for seed in seeds:
                client = partition(y, split, seed)
                W0 = public_w0(X, k, seed, clip) if eb else initial_centroids(X, k, seed)
                r = dp_fedc.run(
                    X,
                    client,
                    k,
                    rounds=R,
                    clients_per_round=K,
                    seed=seed,
                    q2="diminishing",
                    G=G if eb else None,
                    eps_bar=eb,
                    init_centroids=W0,
                    rho_factor=rho_factor,
                    clip=clip if eb else None,
                )
                accs.append(clustering_accuracy(y, r.labels))
                if eb == 20.0:
                    noise.setdefault((split, K), []).append(np.mean(r.history["sigma"]) / np.sqrt(K))
            res[key] = np.array(accs)
        return res[key]

    tag = "the paper's" if rho_factor == 1e-7 else "ours, not the paper's: a stronger one-hot penalty"
    print(
        f"\n## 2. Qualitative claims (DP-FedC, Q1=10, Q2^t=floor(10/t)+1, R={R}, G={G}, "
        f"rho_factor={rho_factor:g} ({tag}), {len(seeds)} seed(s); final ACC %)\n"
    )
    # reference points: W never moves (every gradient clipped to ~0, no noise), i.e. H steps on W^0
    w0 = []
    for seed in seeds:
        r = dp_fedc.run(
            X,
            partition(y, "iid", seed),
            k,
            rounds=R,
            clients_per_round=K_DEFAULT,
            seed=seed,
            G=1e-12,
            init_centroids=initial_centroids(X, k, seed),
            rho_factor=rho_factor,
        )
        w0.append(clustering_accuracy(y, r.labels))
    print(f"reference: W frozen at the shared W^0 (H steps only): {ms(w0)}\n")
    print("| split | K | no DP | eps_bar=20 | eps_bar=2 |")
    print("|---|---|---|---|---|")
    for split in ("iid", "noniid"):
        print(
            f"| {split} | {K_DEFAULT} | {ms(go(split, K_DEFAULT, None))} | {ms(go(split, K_DEFAULT, 20.0))} | "
            f"{ms(go(split, K_DEFAULT, 2.0))} |"
        )
    print("\n| split | eps_bar | " + " | ".join(f"K={K}" for K in Ks) + " |")
    print("|---|---|" + "---|" * len(Ks))
    for split in ("iid", "noniid"):
        print(f"| {split} | 20 | " + " | ".join(ms(go(split, K, 20.0)) for K in Ks) + " |")
    print()
    for split in ("iid", "noniid"):
        a, b, c = (go(split, K_DEFAULT, e).mean() for e in (None, 20.0, 2.0))
        print(
            f"- [{'x' if a > b > c else ' '}] {split}: ACC no DP > eps_bar=20 > eps_bar=2 "
            f"({100 * a:.1f} > {100 * b:.1f} > {100 * c:.1f})"
        )
    for eb in (None, 20.0, 2.0):
        a, b = go("iid", K_DEFAULT, eb).mean(), go("noniid", K_DEFAULT, eb).mean()
        print(
            f"- [{'x' if a >= b else ' '}] eps_bar={eb if eb else 'inf'}: IID >= non-IID "
            f"({100 * a:.1f} vs {100 * b:.1f})"
        )
    for split in ("iid", "noniid"):
        v = [go(split, K, 20.0).mean() for K in Ks]
        ok = all(v[i] <= v[i + 1] for i in range(len(v) - 1))
        print(
            f"- [{'x' if ok else ' '}] {split}, eps_bar=20: larger K better "
            f"({' <= '.join(f'{100 * a:.1f}' for a in v)})"
        )
    print(
        "\nper-entry std of the DP noise in the server's mean W at eps_bar=20 (mean over rounds and seeds; "
        "eq. 32 gives eps ~ 1/sqrt(K), so sigma/sqrt(K) does not depend on K):"
    )
    for split in ("iid", "noniid"):
        print(f"- {split}: " + ", ".join(f"K={K}: {np.mean(noise[(split, K)]):.3g}" for K in Ks))


def timing(X, y, G, R_full, reps, quick=False):
    """One vectorized round vs the per-client loop of the same round, and a full run."""
    k, K, seed = 10, K_DEFAULT, 0
    client = partition(y, "iid", seed)
    H = stream(seed, "init_h").random((X.shape[0], k))
    rng = np.random.default_rng(0)
    out = []
    # a low-dimensional mixture (m = 10) where per-client work is tiny and Python overhead dominates
    small = gaussian_mixture(10000, 10, 10, separation=6.0, seed=0)
    Xsmall = small.X.astype(np.float64) + 10.0
    configs = (
        [("mnist", 100, 5)]
        if quick
        else [("mnist", 100, 5), ("mnist", 100, 11), ("mnist", 1000, 5), ("mnist", 5000, 5), ("mixture m=10", 1000, 5)]
    )
    for data, N, Q2 in configs:
        XX = X if data == "mnist" else Xsmall
        cl = client if N == N_CLIENTS else iid(y.size, N, seed=seed).client
        C = initial_centroids(XX, k, seed)
        rho, mu_h = dp_fedc.penalty_params(XX, N)
        lay = SegmentLayout(cl, N)
        Xs = np.ascontiguousarray(XX[lay.order])
        Kr = K if N == N_CLIENTS else 300
        S = sample_clients(rng, N, Kr)
        local, mask, bi = dp_fedc.draw_minibatches(rng, lay.sizes[S], Q2, B)
        noise = rng.standard_normal((Kr, k, XX.shape[1]))
        rin = dp_fedc.RoundInput(
            S, local + lay.offsets[S][:, None, None], mask, bi, Q2, noise, lambda eta, q2: 0.01 * q2 / eta
        )
        rs = dp_fedc.RoundSettings(
            Q1=10,
            rho=rho,
            mu_h=mu_h,
            mu_w=0.0,
            h_rule="stable",
            alpha_1=1.0,
            eta_rule="per_client",
            alpha_2=5.0,
            G=G,
            literal_2rho=False,
            all_clients_update_H=True,
        )
        with dp_fedc._blas_threads(1):
            dp_fedc.round_vectorized(Xs, lay.sizes, lay.offsets, H, C, rin, rs)  # warm-up (caches, allocator)
            dp_fedc.round_loop(Xs, lay.sizes, lay.offsets, H, C, rin, rs)
            res: dict = {}
            med = bench.interleaved(
                {
                    "vec": lambda: dp_fedc.round_vectorized(Xs, lay.sizes, lay.offsets, H, C, rin, rs),
                    "loop": lambda: dp_fedc.round_loop(Xs, lay.sizes, lay.offsets, H, C, rin, rs),
                    "textbook": lambda: dp_fedc.round_loop(
                        Xs, lay.sizes, lay.offsets, H, C, rin, rs, h_grad_form="textbook"
                    ),
                },
                reps,
                results=res,
            )
        (H1, C1, _), (H2, C2, _), (H3, C3, _) = res["vec"], res["loop"], res["textbook"]
        err = max(np.abs(H1 - H2).max(), np.abs(C1 - C2).max(), np.abs(H1 - H3).max(), np.abs(C1 - C3).max())
        out.append((data, N, Kr, Q2, med["vec"], med["loop"], med["textbook"], err))
    print(
        f"\n## 3. Wall time of one round (n=10000, k=10, Q1=10, b={B}, DP noise on, 1 BLAS thread, median of {reps})\n"
    )
    print(
        "loop A = per-client loop with W'X_i computed once per round (as the vectorized round); loop B = "
        "per-client loop with eq. (80) evaluated at every H step, as written in the paper\n"
    )
    print(
        "| data | N clients (n_i) | K | Q2 | vectorized (ms) | loop A (ms) | speed-up | loop B (ms) | speed-up "
        "| max abs diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for data, N, Kr, Q2, a, b, c, e in out:
        print(
            f"| {data} | {N} ({y.size // N}) | {Kr} | {Q2} | {1e3 * a:.1f} | {1e3 * b:.1f} | {b / a:.1f}x | "
            f"{1e3 * c:.1f} | {c / a:.1f}x | {e:.1e} |"
        )
    for q2, eb in ((5, 20.0),) if quick else ((5, 20.0), ("diminishing", 20.0), (5, None)):  # N=100, K=30
        r, dt = bench.timed(
            dp_fedc.run,
            X,
            client,
            k,
            rounds=R_full,
            clients_per_round=K,
            seed=seed,
            q2=q2,
            G=G if eb else None,
            eps_bar=eb,
            clip=float(np.sqrt(X.shape[1])) if eb else None,
            y=y,
        )
        print(
            f"- full run, R={R_full}, Q2={q2}, eps_bar={eb if eb else 'inf'} (ACC/NMI logged every round): "
            f"{dt:.1f} s (final ACC {100 * r.history['ACC'][-1]:.1f} %)"
        )


def privacy_cost(X, y, seeds, R, Gs, clip, eps_bar=20.0, N=N_CLIENTS, K=K_DEFAULT, q2=5, rho_factor=1e-2, alpha_2=None):
    """ACC of DP-FedC (IID): the paper's non-private run (rho_factor 1e-2), the private mechanism with
    its noise off, and the private run at eps_bar, for each gradient clip G."""
    from fedclust.privacy.accountants import epsilon as accounted

    k = int(np.unique(y).size)
    print(
        f"\n## 4. What privacy costs (DP-FedC, IID, N={N}, K={K}, Q2={q2}, R={R}, clip={clip:g}, delta={DELTA}, "
        f"{len(seeds)} seed(s); final ACC %, mean ± std)\n"
    )
    base = []
    for seed in seeds:
        client = iid(y.size, N, seed=seed).client
        r = dp_fedc.run(X, client, k, rounds=R, clients_per_round=K, seed=seed, q2=q2)  # the paper's choices
        base.append(clustering_accuracy(y, r.labels))
    print(
        f"non-private, the paper's W^0 (k data rows) and data-dependent constants, no clipping, rho_factor=1e-2: "
        f"{ms(base)}\n"
    )
    print(f"public constants with rho_factor={rho_factor:g}, alpha_2={alpha_2 or dp_fedc.ALPHA_2['public']:g}:\n")
    print(
        f"| G | noise off (public W^0, clip, constants) | eps_bar = {eps_bar:g} | accountant epsilon (worst client) |"
    )
    print("|---|---|---|---|")
    for G in Gs:
        off, on, eps = [], [], []
        for seed in seeds:
            client = iid(y.size, N, seed=seed).client
            kw = dict(
                rounds=R,
                clients_per_round=K,
                seed=seed,
                q2=q2,
                G=G,
                clip=clip,
                delta=DELTA,
                rho_factor=rho_factor,
                alpha_2=alpha_2,
            )
            r0 = dp_fedc.run(X, client, k, eps_bar=None, init="uniform_box", constants="public", **kw)
            r1 = dp_fedc.run(X, client, k, eps_bar=eps_bar, **kw)
            off.append(clustering_accuracy(y, r0.labels))
            on.append(clustering_accuracy(y, r1.labels))
            eps.append(accounted(r1.dp_events, DELTA))
        print(f"| {G:g} | {ms(off)} | {ms(on)} | {np.mean(eps):.3g} |")


def main():
    ap = bench.parser(__doc__, quick="1 seed, R = 4, K in {10, 30}, short timings (< 1 minute)")
    ap.add_argument("--data", default=str(bench.MNIST_DIR), help="MNIST folder (default ../shared/data/mnist)")
    ap.add_argument(
        "--G",
        type=float,
        default=0.03,
        help="DP-FedC gradient clip bound for the private runs (non-private runs are unclipped)",
    )
    ap.add_argument(
        "--rho-variant",
        type=float,
        default=1e-7,
        help="second rho_factor (besides our stronger default 1e-2; 1e-7 is the paper's) for the "
        "claims and Table I; 0 = skip",
    )
    ap.add_argument(
        "--clip",
        type=float,
        default=None,
        help="public L2 bound on every sample in private runs (default sqrt(m) = 28 for MNIST)",
    )
    ap.add_argument("--cost-G", default="0.03,0.3,3", help="gradient clips G for section 4 (comma list)")
    ap.add_argument("--cost-rounds", type=int, default=None, help="rounds for section 4 (default: as the others)")
    ap.add_argument("--cost-seeds", type=int, default=3, help="seeds for section 4")
    ap.add_argument("--cost-rho", type=float, default=1e-2, help="rho_factor of the public runs of section 4")
    ap.add_argument("--cost-eps-bar", type=float, default=20.0, help="the paper budget eps_bar of section 4")
    ap.add_argument(
        "--cost-alpha2",
        type=float,
        default=None,
        help="alpha_2 of the public runs of section 4 (default: the run's, 1.25 with public constants)",
    )
    ap.add_argument(
        "--digits",
        action="store_true",
        help="use sklearn's digits (1797 x 64, pixels / 16) instead of MNIST, N = 20 clients, K = 10",
    )
    ap.add_argument("--skip", default="", help="comma list of sections to skip: table,claims,timing,cost")
    a = ap.parse_args()
    with bench.session(a):
        run(a)


def run(a):
    global N_CLIENTS, K_DEFAULT
    if a.digits:
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = X.astype(np.float64) / 16.0
        N_CLIENTS, K_DEFAULT = 20, 10
    else:
        X, y, _ = bench.mnist_test(a.data)
    seeds = [0] if a.quick else [0, 1, 2, 3, 4]
    R = 4 if a.quick else 100
    clip = float(a.clip) if a.clip else float(np.sqrt(X.shape[1]))
    skip = set(a.skip.split(","))
    if a.digits:
        skip.add("timing")  # the timing configurations are MNIST-sized (100 to 5000 clients)
    t0 = time.perf_counter()
    from sklearn.cluster import KMeans

    km = KMeans(10, n_init=1 if a.quick else 10, random_state=0).fit(X)
    print(
        f"# DP-FedC benchmark ({'quick' if a.quick else 'full'}): {'digits' if a.digits else 'MNIST test set'} {X.shape}, "
        f"centralized sklearn KMeans(n_init={km.n_init}) ACC {100 * clustering_accuracy(y, km.labels_):.1f} %"
    )
    if "table" not in skip:
        table1(X, y, seeds, R, a.G, a.rho_variant or 1e-7, clip)
    if "claims" not in skip:
        for rf in (1e-2, a.rho_variant) if a.rho_variant else (1e-2,):
            Ks = ([5, 10] if a.quick else [5, 10, 20]) if a.digits else ([10, 30] if a.quick else [10, 30, 100])
            claims(X, y, seeds, R, a.G, Ks, rf, clip)
    if "timing" not in skip:
        timing(X, y, a.G, 10 if a.quick else 100, 1 if a.quick else 5, a.quick)
    if "cost" not in skip:
        privacy_cost(
            X,
            y,
            list(range(a.cost_seeds)),
            a.cost_rounds or R,
            [float(g) for g in a.cost_G.split(",")],
            clip,
            eps_bar=a.cost_eps_bar,
            N=N_CLIENTS,
            K=K_DEFAULT,
            rho_factor=a.cost_rho,
            alpha_2=a.cost_alpha2,
        )
    print(f"\ntotal benchmark time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
