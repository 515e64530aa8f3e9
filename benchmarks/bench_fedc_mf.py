"""Benchmark: FedCAvg / FedCGds / centralized SNCP / K-means++ (the paper's Figs. 1, 4, 6).

Run from the project root::

    .venv/bin/python benchmarks/bench_fedc_mf.py            # full: M=2000, N=10000, K=20, P=100 + MNIST
    .venv/bin/python benchmarks/bench_fedc_mf.py --quick    # small sizes, < 1 minute

Tables printed (Markdown):

1. Convergence on syn_unf vs syn_noniid (Fig. 4): relative objective gap (F - F*)/F* after some rounds,
   F* = the lowest F any method reached on that split. FedCGds should be about as good on both splits,
   FedCAvg worse on syn_noniid.
2. FedCAvg vs Q2 on syn_noniid and syn_unf (Fig. 1 b, c): diminishing Q2 (Q_hat) vs constant Q2.
3. Clustering ACC with SNCP continuation (Fig. 6) on syn_noniid, MNIST_bals, MNIST_ubls: FedCGds,
   FedCAvg, centralized SNCP, K-means++ (mean +- std over common random initializations).
4. Wall time of the full synthetic run (100 rounds) and of one round, vectorized vs a naive
   per-client Python loop (same numbers, checked).
5. The rho trigger: FedCGds with m = P/10 under SNCP on syn_noniid, one hypothesis per row: the paper's
   per-round rho test (``rho_trigger="round"``) with a short and a long round budget, with the
   running sums recomputed (partial sums), with other step sizes (gamma), and the test over
   ceil(P/m) rounds (``rho_trigger="epoch"``); ACC mean +- std over ``--trials5`` seeds (default 10),
   rounds run, rho updates, final rho, stop reasons and uploads. Only this section:
   ``--skip time,conv,clust`` (quick: about a minute; full size: about an hour per 10 seeds and row).

MNIST is read from ``../shared/data/mnist`` (test set, pixels / 255); it is skipped when missing.
"""

from __future__ import annotations

import time

import numpy as np

from fedclust import bench
from fedclust.bench import fmt, table, timed
from fedclust.clustering import fedc_mf as F
from fedclust.data.synthetic import linear_model
from fedclust.metrics import clustering_accuracy
from fedclust.partition.iid import iid
from fedclust.partition.kmeans_split import kmeans_split
from fedclust.partition.power_law import power_law
from fedclust.partition.shards import shards


# --------------------------------------------------------------------------- data
def synthetic(quick: bool, seed: int = 0):
    if quick:
        ds = linear_model(n_samples=1500, n_features=200, k=10, snr_db=-3.0, seed=seed)
        P = 20
    else:
        ds = linear_model(n_samples=10000, n_features=2000, k=20, snr_db=-3.0, seed=seed)
        P = 100
    X = ds.X.astype(np.float64)
    unf = iid(X.shape[0], P, seed=seed).client
    noniid = kmeans_split(X, P, seed=seed, n_init=1).client
    return X, ds.y, {"syn_unf": unf, "syn_noniid": noniid}


def mnist(quick: bool, seed: int = 0):
    if not bench.have_mnist():
        return None
    X, y, _ = bench.mnist_test()
    if quick:
        idx = np.random.default_rng(seed).choice(X.shape[0], 1000, replace=False)
        X, y = X[idx], y[idx]
        P = 20
    else:
        P = 100
    bals = shards(y, P, labels_per_client=2, seed=seed, pairing="cyclic").client
    ubls = power_law(y, P, labels_per_client=2, seed=seed).client
    parts = {}
    for name, c in (("MNIST_bals", bals), ("MNIST_ubls", ubls)):
        keep = c >= 0
        parts[name] = (keep, c[keep])
    return X, y, parts


# --------------------------------------------------------------------------- per-client loop references
def gds_round_loop(X, client, W, H, G1, G2, Q1, Q2, gamma, rho, nu):
    """One FedCGds round, all clients, written as a Python loop over clients (the naive simulation)."""
    N, K = X.shape[0], W.shape[1]
    lo, hi = X.min(), X.max()
    H = H.copy()
    G1, G2 = G1.copy(), G2.copy()
    for p in np.unique(client):
        idx = np.flatnonzero(client == p)
        Xp, Hp = X[idx].T, H[:, idx]
        Np = idx.size
        hess = (2 / Np) * W.T @ W + (N / Np) * (rho * np.ones((K, K)) + (nu - rho) * np.eye(K))
        c = 0.5 * gamma * np.abs(np.linalg.eigvalsh(hess)).max()
        H0 = Hp.copy()
        for _ in range(Q1):  # (70) on the local objective F_p
            g = (2 / Np) * W.T @ (W @ Hp - Xp) + (N / Np) * (rho * Hp.sum(0) + (nu - rho) * Hp)
            Hp = np.maximum(Hp - g / c, 0)
        G1 += (2 / N) * (Hp @ Hp.T - H0 @ H0.T)  # U_p
        G2 += (2 / N) * (Xp @ Hp.T - Xp @ H0.T)  # V_p
        H[:, idx] = Hp
    d = 0.5 * gamma * np.linalg.eigvalsh(G1)[-1]
    for _ in range(Q2):
        W = np.clip(W - (W @ G1 - G2) / d, lo, hi)
    return W, H


def avg_round_loop(X, client, W, H, Q1, Q2, gamma, rho, nu):
    """One FedCAvg round (lw="clients", d = gamma L_W), as a Python loop over clients."""
    N, K = X.shape[0], W.shape[1]
    lo, hi = X.min(), X.max()
    ids = np.unique(client)
    H = H.copy()
    for p in ids:
        idx = np.flatnonzero(client == p)
        Xp, Hp, Np = X[idx].T, H[:, idx], idx.size
        hess = (2 / Np) * W.T @ W + (N / Np) * (rho * np.ones((K, K)) + (nu - rho) * np.eye(K))
        c = 0.5 * gamma * np.abs(np.linalg.eigvalsh(hess)).max()
        for _ in range(Q1):
            g = (2 / Np) * W.T @ (W @ Hp - Xp) + (N / Np) * (rho * Hp.sum(0) + (nu - rho) * Hp)
            Hp = np.maximum(Hp - g / c, 0)
        H[:, idx] = Hp
    L = []
    for p in ids:
        Hp = H[:, client == p]
        L.append((Hp.shape[1] / N, (2 / Hp.shape[1]) * np.linalg.eigvalsh(Hp @ Hp.T)[-1]))
    d = gamma * np.sqrt(sum(w * l**2 for w, l in L))
    avg = np.zeros_like(W)
    for p in ids:
        idx = np.flatnonzero(client == p)
        Xp, Hp, Np, Wp = X[idx].T, H[:, idx], idx.size, W.copy()
        S, T = Hp @ Hp.T, Xp @ Hp.T
        for _ in range(Q2):  # (12), unprojected
            Wp = Wp - (2 / Np) * (Wp @ S - T) / d
        avg += Np / N * Wp
    return np.clip(avg, lo, hi), H


# --------------------------------------------------------------------------- sections
def convergence(X, y, parts, rounds, checkpoints, quick):
    P = len(np.unique(parts["syn_unf"]))
    k = int(y.max()) + 1
    init = F.make_init(X, k, 0)
    m_small = max(1, P // 10)
    methods = {
        "FedCAvg Q1=10, Q_hat": lambda split: F.run_fedcavg(
            X, parts[split], k, rounds=rounds, Q1=10, q_hat=400 if split == "syn_unf" else 10, init=init
        ),
        f"FedCGds m={P}, Q1=10, Q2=100": lambda split: F.run_fedcgds(
            X, parts[split], k, rounds=rounds, Q1=10, Q2=100, init=init
        ),
        f"FedCGds m={m_small}, Q1=100, Q2=100": lambda split: F.run_fedcgds(
            X, parts[split], k, rounds=rounds, Q1=100, Q2=100, clients_per_round=m_small, init=init
        ),
    }
    q2_methods = {
        "FedCAvg Q1=10, Q2=1": dict(Q2=1),
        "FedCAvg Q1=10, Q2=10": dict(Q2=10),
        "FedCAvg Q1=10, Q2=100": dict(Q2=100),
        "FedCAvg Q1=10, Q_hat": None,
    }
    runs = {}
    for split in ("syn_unf", "syn_noniid"):
        for name, fn in methods.items():
            runs[(split, name)] = timed(fn, split)
        for name, kw in q2_methods.items():
            if kw is not None:
                runs[(split, name)] = timed(F.run_fedcavg, X, parts[split], k, rounds=rounds, Q1=10, init=init, **kw)
    best = {
        s: min(min(r.history["objective"]) for (sp, _), (r, _) in runs.items() if sp == s)
        for s in ("syn_unf", "syn_noniid")
    }

    def gaps(r, split):
        f = np.asarray(r.history["objective"])
        return [fmt((f[c - 1] - best[split]) / best[split]) for c in checkpoints]

    print(
        f"## 1. Convergence (Fig. 4): (F - F*)/F* after s rounds; F* = lowest F on the split; "
        f"{'quick sizes' if quick else 'M=2000, N=10000, K=20, P=100'}\n"
    )
    rows = []
    for name in methods:
        for split in ("syn_unf", "syn_noniid"):
            r, t = runs[(split, name)]
            rows.append([name, split, *gaps(r, split), fmt(float(r.history["comm_reals"][-1])), fmt(t, 1)])
    table(["method", "split", *[f"s={c}" for c in checkpoints], "comm reals", "time s"], rows)

    print("## 2. FedCAvg vs Q2 (Fig. 1 b, c): (F - F*)/F*; Q_hat = 400 (syn_unf) / 10 (syn_noniid)\n")
    rows = []
    for split in ("syn_unf", "syn_noniid"):
        for name in q2_methods:
            r, t = runs[(split, name)]
            rows.append([name, split, *gaps(r, split), fmt(t, 1)])
    table(["method", "split", *[f"s={c}" for c in checkpoints], "time s"], rows)
    last = {key: (r.history["objective"][-1] - best[key[0]]) / best[key[0]] for key, (r, _) in runs.items()}
    gds, avg = f"FedCGds m={P}, Q1=10, Q2=100", "FedCAvg Q1=10, Q_hat"
    return {
        "FedCAvg gap grows on non-iid (gap noniid / gap unf)": last[("syn_noniid", avg)]
        / max(last[("syn_unf", avg)], 1e-300),
        "FedCGds gap on non-iid minus gap on iid (robust: ~0)": last[("syn_noniid", gds)] - last[("syn_unf", gds)],
        "non-iid: FedCAvg diminishing Q2 gap < constant Q2=100 gap": last[("syn_noniid", avg)]
        < last[("syn_noniid", "FedCAvg Q1=10, Q2=100")],
    }


def clustering(datasets, trials, rounds, sncp_rounds, quick):
    print(
        f"## 3. Clustering ACC with SNCP continuation (Fig. 6); mean +- std over {trials} common inits; "
        f"tau_rho = {sorted({v[3] for v in datasets.values()})}\n"
    )
    rows = []
    summary = {}
    for dname, (X, y, client, rho_tol) in datasets.items():
        k = int(y.max()) + 1
        P = len(np.unique(client))
        m_small = max(1, P // 10)
        res: dict[str, list] = {}
        for t in range(trials):
            init = F.make_init(X, k, t)
            common = dict(continuation="sncp", rho_tol=rho_tol, init=init, seed=t)
            for name, fn in (
                (
                    f"FedCGds m={P}, Q1=Q2=100",
                    lambda: F.run_fedcgds(X, client, k, rounds=rounds, Q1=100, Q2=100, **common),
                ),
                # m = P/10 moves each client's H about P/m times less per round (Thm 3): a 400-round
                # cap stops every run mid-continuation (table 5), so it gets 4x the rounds
                (
                    f"FedCGds m={m_small}, Q1=Q2=100, {4 * rounds} rounds",
                    lambda: F.run_fedcgds(
                        X, client, k, rounds=4 * rounds, Q1=100, Q2=100, clients_per_round=m_small, **common
                    ),
                ),
                (
                    "FedCAvg Q1=10, Q_hat=10",
                    lambda: F.run_fedcavg(X, client, k, rounds=rounds, Q1=10, q_hat=10, **common),
                ),
                ("central SNCP (Q1=Q2=10)", lambda: F.run_sncp(X, k, rounds=sncp_rounds, Q1=10, Q2=10, **common)),
                ("K-means++ (pooled)", lambda: F.run_kmeanspp(X, k, seed=t)),
            ):
                r, sec = timed(fn)
                acc = clustering_accuracy(y, r.labels)
                res.setdefault(name, []).append((acc, r.info.get("rounds_run", 0), r.uploaded_reals, sec))
        accs = {name: float(np.mean([v[0] for v in vals])) for name, vals in res.items()}
        gds = accs[f"FedCGds m={P}, Q1=Q2=100"]
        summary[f"{dname}: ACC FedCGds(m=P) - central SNCP"] = gds - accs["central SNCP (Q1=Q2=10)"]
        summary[f"{dname}: ACC FedCGds(m=P) - K-means++"] = gds - accs["K-means++ (pooled)"]
        summary[f"{dname}: ACC FedCGds(m=P) - FedCAvg"] = gds - accs["FedCAvg Q1=10, Q_hat=10"]
        for name, v in res.items():
            a = np.array(v, dtype=float)
            rows.append(
                [
                    dname,
                    name,
                    f"{a[:, 0].mean():.4f} +- {a[:, 0].std():.4f}",
                    fmt(a[:, 1].mean(), 0),
                    fmt(a[:, 2].mean()),
                    fmt(a[:, 3].mean(), 1),
                ]
            )
    table(["data", "method", "ACC", "rounds", "comm reals", "time s/run"], rows)
    return summary


def timing(X, y, client, quick):
    k = int(y.max()) + 1
    P = len(np.unique(client))
    print(f"## 4. Wall time (N={X.shape[0]}, M={X.shape[1]}, K={k}, P={P})\n")
    init = F.make_init(X, k, 0)
    rows = []
    r, t = timed(F.run_fedcgds, X, client, k, rounds=100, Q1=10, Q2=100, init=init, y=y)
    rows.append(
        ["FedCGds m=P, Q1=10, Q2=100: 100 rounds (with per-round ACC/NMI)", fmt(t, 2), fmt(r.history["ACC"][-1])]
    )
    r, t = timed(
        F.run_fedcgds, X, client, k, rounds=100, Q1=100, Q2=100, clients_per_round=max(1, P // 10), init=init, y=y
    )
    rows.append([f"FedCGds m={max(1, P // 10)}, Q1=100, Q2=100: 100 rounds", fmt(t, 2), fmt(r.history["ACC"][-1])])
    r, t = timed(F.run_fedcavg, X, client, k, rounds=100, Q1=10, q_hat=400, init=init, y=y)
    rows.append(["FedCAvg Q1=10, Q_hat=400: 100 rounds", fmt(t, 2), fmt(r.history["ACC"][-1])])

    # one round, vectorized engine vs the per-client loop (same inputs, results compared)
    data = F._Data(X, client, k)
    W0, H0 = F._resolve_init(init, X, data, 0)
    Xs, cs = data.X, data.cid
    gamma, rho, nu = 1.1, 1e-8, 1e-10
    eng = F._GdsEngine(
        data,
        W0.copy(),
        H0.copy(),
        rho,
        nu,
        steps=F._Steps(Q1=10, Q2=100, gamma=gamma, step_rule="lipschitz"),
        m=data.P,
        rng=np.random.default_rng(0),
        recompute_stats=False,
        central=False,
    )
    G1, G2 = eng.G1.copy(), eng.G2.copy()
    # both under the solvers' BLAS policy (small products on one thread; see fedc_mf._one_blas_thread)
    with F._one_blas_thread():
        _, tv = timed(eng.round, 1)
        (Wl, Hl), tl = timed(gds_round_loop, Xs, cs, W0.copy(), H0.copy(), G1, G2, 10, 100, gamma, rho, nu)
    err = np.abs(Wl - eng.W).max() / np.abs(Wl).max()
    rows.append(["FedCGds one round (Q1=10, Q2=100): vectorized", fmt(tv, 3), ""])
    rows.append([f"FedCGds one round: per-client loop (max rel diff {err:.1e})", fmt(tl, 3), ""])
    eng = F._AvgEngine(
        data,
        W0.copy(),
        H0.copy(),
        rho,
        nu,
        steps=F._Steps(Q1=10, Q2=10, gamma=gamma, step_rule="lipschitz"),
        q_hat=None,
        q_hat_restart=False,
        lw="clients",
        d_schedule="thm2",
    )
    with F._one_blas_thread():
        _, tv = timed(eng.round, 1)
        (Wl, Hl), tl = timed(avg_round_loop, Xs, cs, W0.copy(), H0.copy(), 10, 10, gamma, rho, nu)
    err = np.abs(Wl - eng.W).max() / np.abs(Wl).max()
    rows.append(["FedCAvg one round (Q1=10, Q2=10): vectorized", fmt(tv, 3), ""])
    rows.append([f"FedCAvg one round: per-client loop (max rel diff {err:.1e})", fmt(tl, 3), ""])
    table(["run", "wall s", "final ACC"], rows)


def rho_trigger_study(X, y, client, trials, quick):
    """Table 5: what makes FedCGds with m = P/10 unstable under SNCP."""
    k = int(y.max()) + 1
    P = len(np.unique(client))
    m = max(1, P // 10)
    tau = 1e-3 if quick else F.SNCP_RHO_TOL["synthetic"]
    R = 150 if quick else 400  # the round cap of table 3
    R_long = 1500 if quick else 4000
    E = -(-P // m)
    rows_spec = [
        (f"m={P}, round (reference)", dict(), R),
        (f"m={m}, round (paper), {R} rounds", dict(clients_per_round=m, rho_trigger="round"), R),
        (f"m={m}, round (paper), {R_long} rounds", dict(clients_per_round=m, rho_trigger="round"), R_long),
        (
            f"m={m}, round, recomputed G1/G2",
            dict(clients_per_round=m, rho_trigger="round", recompute_stats=True),
            R_long,
        ),
        (f"m={m}, round, gamma=2", dict(clients_per_round=m, rho_trigger="round", gamma=2.0), R_long),
        (f"m={m}, round, gamma=1.01", dict(clients_per_round=m, rho_trigger="round", gamma=1.01), R_long),
        (f"m={m}, epoch (E={E}), {R_long} rounds", dict(clients_per_round=m, rho_trigger="epoch"), R_long),
    ]
    print(
        f"## 5. The rho trigger: FedCGds m = P/10 under SNCP on syn_noniid (Q1 = Q2 = 100, tau_rho = {tau}); "
        f"mean +- std over {trials} seeds (common init = seed)\n"
    )
    rows = []
    for name, kw, rounds in rows_spec:
        v = []
        for t in range(trials):
            r, sec = timed(
                F.run_fedcgds,
                X,
                client,
                k,
                rounds=rounds,
                Q1=100,
                Q2=100,
                continuation="sncp",
                rho_tol=tau,
                init=F.make_init(X, k, t),
                seed=t,
                **kw,
            )
            v.append(
                (
                    clustering_accuracy(y, r.labels),
                    r.info["rounds_run"],
                    r.info["n_rho_updates"],
                    np.log10(r.info["rho_final"]),
                    r.info["stop_reason"] == "converged",
                    r.uploaded_reals,
                    sec,
                )
            )
        a = np.array(v, dtype=float)
        rows.append(
            [
                name,
                f"{a[:, 0].mean():.4f} +- {a[:, 0].std():.4f}",
                f"{a[:, 0].min():.3f}",
                fmt(a[:, 1].mean(), 0),
                fmt(a[:, 2].mean(), 1),
                f"{a[:, 3].mean():.1f}",
                f"{int(a[:, 4].sum())}/{trials}",
                fmt(a[:, 5].mean()),
                fmt(a[:, 6].mean(), 1),
            ]
        )
    table(
        ["variant", "ACC", "min ACC", "rounds", "rho updates", "log10 rho end", "converged", "uploads", "time s/run"],
        rows,
    )


def main():
    ap = bench.parser(__doc__, quick="small sizes, < 1 minute")
    ap.add_argument("--trials", type=int, default=None, help="common random initializations for table 3")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: conv,clust,mnist,time,rho")
    ap.add_argument("--trials5", type=int, default=10, help="seeds for table 5 (rho trigger)")
    args = ap.parse_args()
    with bench.session(args):
        run(args)


def run(args):
    quick = args.quick
    skip = set(filter(None, args.skip.split(",")))
    t0 = time.perf_counter()
    trials = args.trials or (1 if quick else 2)
    X, y, parts = synthetic(quick)
    print(
        f"synthetic X = WH + E at -3 dB: N={X.shape[0]}, M={X.shape[1]}, K={int(y.max()) + 1}, "
        f"P={len(np.unique(parts['syn_unf']))}; syn_noniid client sizes min/median/max = "
        f"{np.bincount(parts['syn_noniid']).min()}/{int(np.median(np.bincount(parts['syn_noniid'])))}/"
        f"{np.bincount(parts['syn_noniid']).max()}\n"
    )
    if "time" not in skip:
        timing(X, y, parts["syn_unf"], quick)
    findings = {}
    if "conv" not in skip:
        rounds = 30 if quick else 100
        findings.update(convergence(X, y, parts, rounds, [5, 15, 30] if quick else [10, 50, 100], quick))
    if "clust" not in skip:
        # --quick raises tau_rho so that the continuation reaches hard assignments in few rounds
        tau_syn, tau_mnist = (1e-3, 1e-3) if quick else (F.SNCP_RHO_TOL["synthetic"], F.SNCP_RHO_TOL["mnist"])
        datasets = {"syn_noniid": (X, y, parts["syn_noniid"], tau_syn)}
        mn = None if "mnist" in skip else mnist(quick)
        if mn is None and "mnist" not in skip:
            print(f"(MNIST skipped: {bench.MNIST_DIR} not found)\n")
        elif mn is not None:
            Xm, ym, mparts = mn
            for name, (keep, c) in mparts.items():
                if quick and name == "MNIST_ubls":
                    continue
                datasets[name] = (Xm[keep], ym[keep], c, tau_mnist)
        findings.update(
            clustering(datasets, trials, rounds=150 if quick else 400, sncp_rounds=300 if quick else 800, quick=quick)
        )
    if "rho" not in skip:
        rho_trigger_study(X, y, parts["syn_noniid"], args.trials5, quick)
    if findings:
        print("## Summary of the paper's qualitative claims (measured)\n")
        table(
            ["quantity", "value"],
            [[k, fmt(v) if not isinstance(v, (bool, np.bool_)) else str(bool(v))] for k, v in findings.items()],
        )
    print(f"total benchmark time: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
