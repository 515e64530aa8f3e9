"""FedSC benchmark (the paper's experimental protocol): K-means / SC / DSC / FedSC / attack on C / FedSC P=1.

Run from the project root:

    .venv/bin/python benchmarks/bench_fedsc.py            # full: Iris, Bank, COIL20 x {clean, beta=0.3}, 3 trials, MNIST
    .venv/bin/python benchmarks/bench_fedsc.py --quick    # < 1 minute: clean data, 1 trial, no MNIST
    .venv/bin/python benchmarks/bench_fedsc.py --diagnose # COIL20: where a FedSC-SC gap comes from (exact / rank-d K)
    .venv/bin/python benchmarks/bench_fedsc.py --make-extra data/01_raw/fedsc_extra   # two more .mat files
    .venv/bin/python benchmarks/bench_fedsc.py --graphs --seeds 5 \
        --files '../shared/data/fedsc/*.mat' 'data/01_raw/fedsc_extra/*.mat'       # Stage II kNN graph choices
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fedsc.py --six-files --seeds 5   # the six-files table:
        # k-means, SC, FedSC paper rule / new default on the six files (writes the two extra files if missing)
    .venv/bin/python benchmarks/bench_fedsc.py --diagnose-digits --seeds 5  # the digits gap, one knob at a time

``--files`` takes any list of ``.mat`` files or glob patterns (samples as columns of ``X``, labels in
``Label``; each labelled by its file name) and ``--scale`` their preprocessing (none | minmax |
standardize), for the comparison table and ``--graphs``.

Per trial (seed = trial): X~ = X + beta*std(X)*N(0,1); random equal split into P = 8 clients; r (eq. 40)
and d (eq. 43) estimated once on X~ and shared by SC, FedSC and FedSC P=1 (the paper uses the same r
for SC and FedSC). Prints mean +- std (ddof=1) of ACC, NMI and the paper-compatible NMI (fedsc.nmi_paper),
the mean wall time of each method, the wall time of COIL20 FedSC end to end (target < 20 s), a
side-by-side timing of the vectorized C-step / Z-step against a per-client loop, and the MNIST test set
(n = 10,000) end to end in a fresh subprocess with its peak RSS (target < 3 min, < 8 GB).
Data: ../shared/data/fedsc/*.mat and ../shared/data/mnist (relative to the project root).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from fedclust.clustering import dsc, fedsc, spectral
from fedclust.metrics import clustering_accuracy, nmi
from fedclust.rng import stream

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT.parent / "shared" / "data"
FILES = {"Iris": "Iris_tsne.mat", "Bank": "Bank_tsne.mat", "COIL20": "COIL20_tsne.mat"}
METHODS = ["K-means", "SC", "DSC", "FedSC", "Attack on C", "FedSC P=1"]
#: name -> path of the files in use (the paper's three by default; ``--files`` replaces them)
PATHS = {name: DATA / "fedsc" / fn for name, fn in FILES.items()}
SCALE = "none"


def resolve_files(patterns) -> dict:
    """Any list of ``.mat`` paths or glob patterns (relative to the working directory) -> {stem: path}."""
    import glob

    out = {}
    for pat in patterns:
        hits = sorted(glob.glob(pat)) if any(ch in pat for ch in "*?[") else [pat]
        if not hits:
            raise SystemExit(f"--files: no file matches {pat!r}")
        for h in hits:
            p = Path(h)
            if not p.is_file():
                raise SystemExit(f"--files: {p} is not a file")
            out[p.stem] = p
    return out


def load(name):
    from fedclust.data.files import load_mat
    from fedclust.data.preprocess import preprocess

    ds = preprocess(load_mat(PATHS[name]), scale=SCALE)
    return np.asarray(ds.X, dtype=np.float64), np.asarray(ds.y)


def make_extra(folder):
    """Two data sets the project was never tuned on, written as FedSC-style ``.mat`` files (X features x
    samples, Label): scikit-learn's digits (64 features, 10 classes, n = 1797) and ``Subclusters``
    (9 features, 8 classes, each class 10 tight groups of 15 samples around a class centre, n = 1200:
    the kNN graph with k = ceil(ln n) falls apart into the groups, as on the issue's files)."""
    import scipy.io
    from sklearn.datasets import load_digits

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dg = load_digits()
    scipy.io.savemat(folder / "Digits.mat", {"X": dg.data.T.astype(np.float64), "Label": dg.target[:, None] + 1})
    rng = np.random.default_rng(2026)
    X, y = [], []
    for c in range(8):
        centre = 6.0 * rng.standard_normal(9)
        for _ in range(10):
            X.append(centre + 1.5 * rng.standard_normal(9) + 0.15 * rng.standard_normal((15, 9)))
            y += [c] * 15
    scipy.io.savemat(folder / "Subclusters.mat", {"X": np.vstack(X).T, "Label": np.array(y)[:, None] + 1})
    print(f"wrote {folder / 'Digits.mat'} and {folder / 'Subclusters.mat'}")


GRAPH_COLS = [
    "K-means",
    "SC paper",
    "SC min_connected_k",
    "SC mst",
    "FedSC paper",
    "FedSC min_connected_k",
    "FedSC mst",
]


def graph_table(names, seeds, P=8):
    """The graph comparison: k-means, SC and FedSC with each Stage II graph (paper kNN, min_connected_k, mst) on every
    file, ``seeds`` seeds (seed = trial; FedSC's Stage I is run once per seed and shared by the graphs)."""
    import warnings

    from fedclust.clustering.spectral import GRAPHS

    rows = []
    for name in names:
        X, y = load(name)
        k, n = int(len(np.unique(y))), len(y)
        per = {c: {"ACC": [], "NMI": []} for c in GRAPH_COLS}
        comps, ks, t_g = {g: [] for g in GRAPHS}, {g: [] for g in GRAPHS}, {g: [] for g in GRAPHS}
        for t in range(seeds):
            r = spectral.mean_pairwise_distance(X, rng=stream(t, "data"))
            d = spectral.eigen_rank(X, r, rng=stream(t, "data"))
            d = min(d, 500)
            out = {"K-means": fedsc.centralized_kmeans(X, k, seed=t).labels}
            fs = fedsc.run(X, equal_split(n, P, t), k, seed=t, r=r, d=d, cluster=False, return_factors=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for g in GRAPHS:
                    sc = spectral.spectral_clustering(X, k, seed=t, r=r, graph=g)
                    out[f"SC {g}"] = sc.labels
                    gi = {}
                    (lab, _), tg = timed(
                        lambda: fedsc.reconstruct_and_cluster(
                            fs.info["Z"], fs.info["C"], k, r, seed=t, graph=g, graph_info=gi
                        )
                    )
                    out[f"FedSC {g}"] = lab
                    comps[g].append((sc.info["graph_components"], gi["components"]))
                    ks[g].append((sc.info["knn_k"], gi["knn_k"]))
                    t_g[g].append(tg)
            for c in GRAPH_COLS:
                sc_ = scores(y, out[c])
                per[c]["ACC"].append(sc_["ACC"])
                per[c]["NMI"].append(sc_["NMI"])
            print(
                f"  {name} seed {t}: "
                + ", ".join(f"{c} {per[c]['ACC'][-1]:.3f}" for c in GRAPH_COLS)
                + f" | components (SC, FedSC) paper {comps['paper'][-1]}, k used min_connected_k {ks['min_connected_k'][-1]}",
                flush=True,
            )
        rows.append((name, n, k, per, comps, ks, t_g))
    for key in ("ACC", "NMI"):
        print(f"\n### {key}, mean ± std over {seeds} seed(s), P = {P} iid clients, scale = {SCALE}\n")
        print("| data | n | k | " + " | ".join(GRAPH_COLS) + " |")
        print("|---|---|---|" + "---|" * len(GRAPH_COLS))
        for name, n, k, per, *_ in rows:
            print(f"| {name} | {n} | {k} | " + " | ".join(fmt(per[c][key]) for c in GRAPH_COLS) + " |")
    print("\n### FedSC - SC (same graph), mean ACC difference; graph facts (seed 0: SC / FedSC)\n")
    print(
        "| data | Δ paper | Δ min_connected_k | Δ mst | components (paper kNN) | k of min_connected_k | Stage II s (paper / mck / mst) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, _n, _k, per, comps, ks, t_g in rows:
        dl = [np.mean(per[f"FedSC {g}"]["ACC"]) - np.mean(per[f"SC {g}"]["ACC"]) for g in GRAPHS]
        print(
            f"| {name} | "
            + " | ".join(f"{v:+.3f}" for v in dl)
            + f" | {comps['paper'][0][0]} / {comps['paper'][0][1]} | "
            f"{ks['min_connected_k'][0][0]} / {ks['min_connected_k'][0][1]} | "
            + " / ".join(f"{np.mean(t_g[g]):.2f}" for g in GRAPHS)
            + " |"
        )


SIX_FILES = ["../shared/data/fedsc/*.mat", "data/01_raw/fedsc_extra/*.mat"]
SIX_FILES_COLS = ["K-means", "SC paper", "SC", "FedSC paper", "FedSC final_c=paper", "FedSC"]
#: FedSC settings of the columns: the paper rule (kNN graph of eq. 25, final C with the Stage I ridge lam),
#: the paper's final C on the default graph, and the defaults (graph min_connected_k, final_c projection)
SIX_FILES_FEDSC = {
    "FedSC paper": {"graph": "paper", "final_c": "paper"},
    "FedSC final_c=paper": {"final_c": "paper"},
    "FedSC": {},
}


def six_files_table(names, seeds, P=8):
    """The six-files table: k-means, SC (paper kNN graph / default graph), FedSC with the paper rule and with the
    defaults, ACC and NMI (mean ± std over ``seeds`` seeds, seed = trial), and FedSC - SC per file."""
    import logging
    import warnings

    logging.getLogger("fedclust.clustering.spectral").setLevel(logging.ERROR)  # the paper graph's component warnings
    rows = []
    for name in names:
        X, y = load(name)
        k, n = int(len(np.unique(y))), len(y)
        per = {c: {"ACC": [], "NMI": []} for c in SIX_FILES_COLS}
        t0 = time.perf_counter()
        for t in range(seeds):
            r = spectral.mean_pairwise_distance(X, rng=stream(t, "data"))
            d = min(spectral.eigen_rank(X, r, rng=stream(t, "data")), 500)
            client = equal_split(n, P, t)
            out = {"K-means": fedsc.centralized_kmeans(X, k, seed=t).labels}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out["SC paper"] = spectral.spectral_clustering(X, k, seed=t, r=r, graph="paper").labels
                out["SC"] = spectral.spectral_clustering(X, k, seed=t, r=r).labels
                for col, kw in SIX_FILES_FEDSC.items():
                    out[col] = fedsc.run(X, client, k, seed=t, r=r, d=d, track_reconstruction=False, **kw).labels
            for c in SIX_FILES_COLS:
                sc_ = scores(y, out[c])
                per[c]["ACC"].append(sc_["ACC"])
                per[c]["NMI"].append(sc_["NMI"])
            print(
                f"  {name} seed {t} (d={d}): " + ", ".join(f"{c} {per[c]['ACC'][-1]:.3f}" for c in SIX_FILES_COLS),
                flush=True,
            )
        rows.append((name, n, k, per, time.perf_counter() - t0))
    for key in ("ACC", "NMI"):
        print(f"\n### {key}, mean ± std over {seeds} seed(s), P = {P} iid clients, scale = {SCALE}\n")
        print(
            "| data | n | k | " + " | ".join(SIX_FILES_COLS) + " | FedSC paper − SC paper | FedSC − SC |"
        )  # same graph
        print("|---|---|---|" + "---|" * (len(SIX_FILES_COLS) + 2))
        for name, n, k, per, _ in rows:
            dp = np.mean(per["FedSC paper"][key]) - np.mean(per["SC paper"][key])
            dd = np.mean(per["FedSC"][key]) - np.mean(per["SC"][key])
            print(
                f"| {name} | {n} | {k} | "
                + " | ".join(fmt(per[c][key]) for c in SIX_FILES_COLS)
                + f" | {dp:+.3f} | {dd:+.3f} |"
            )
    worst = min(np.mean(per["FedSC"]["ACC"]) - np.mean(per["SC"]["ACC"]) for _, _, _, per, _ in rows)
    print(
        f"\nworst FedSC − SC (ACC, defaults): {worst:+.3f} ({'within' if worst >= -0.03 else 'NOT within'} 0.03); "
        f"wall time per file [s]: " + ", ".join(f"{name} {t:.0f}" for name, _, _, _, t in rows)
    )


DIAG_HYPOTHESES = [
    # (label, fedsc.run keyword overrides, z_init of the patched init_dictionaries)
    ("paper rule (Z0 ~ N(0,1), lam 1e-3, S 20, d rule)", {"final_c": "paper"}, None),
    ("Z0 scaled to the kernel width: N(0, r^2 P/(2m))", {"final_c": "paper"}, "kernel_scale"),
    ("Z0 = client mean + std * N(0,1) per feature", {"final_c": "paper"}, "data_scale"),
    ("Z0 = d random rows of the client", {"final_c": "paper"}, "rows"),
    ("rounds S = 50", {"final_c": "paper", "rounds": 50}, None),
    ("d = 500 (rule gives ~287)", {"final_c": "paper", "d": 500}, None),
    ("lam = 1e-2 (paper)", {"final_c": "paper", "lam": 1e-2}, None),
    ("lam = 1e-5 (Stage I and final C)", {"final_c": "paper", "lam": 1e-5}, None),
    ("lam = 1e-6 (Stage I and final C)", {"final_c": "paper", "lam": 1e-6}, None),
    ("P = 1 client (no federation)", {"final_c": "paper", "P": 1}, None),
    ("final_c = projection (new default; Stage I lam 1e-3)", {}, None),
]


def digits_diagnostic(seeds, name="Digits", P=8):
    """The FedSC - SC gap on digits, one knob at a time (``seeds`` seeds each, shared r and d rule), with
    the kNN-set overlap of K_hat with K (k = ceil(ln n)) and how SC itself moves when the data or its k move."""
    import math
    import warnings

    X, y = load(name)
    k, n = int(len(np.unique(y))), len(y)
    kk = spectral.knn_k(n)
    orig_init = fedsc.init_dictionaries
    ctx = {}

    def patched_init(rng, n_part, d, m):
        E = orig_init(rng, n_part, d, m)
        mode, Xc, cl, r = ctx["mode"], ctx["X"], ctx["client"], ctx["r"]
        parts = np.unique(cl)[:n_part]
        if mode == "kernel_scale":
            return E * r * math.sqrt(n_part / (2.0 * m))
        if mode == "data_scale":
            return np.stack([Xc[cl == p].mean(0) + Xc[cl == p].std(0) * E[i] for i, p in enumerate(parts)])
        if mode == "rows":
            return np.stack(
                [Xc[cl == p][rng.choice(int(np.sum(cl == p)), d, replace=int(np.sum(cl == p)) < d)] for p in parts]
            )
        return E

    def overlap(K, Kh):
        a, b = np.argsort(-K, axis=1)[:, :kk], np.argsort(-Kh, axis=1)[:, :kk]
        return float(np.mean([len(np.intersect1d(u, v)) / kk for u, v in zip(a, b)]))

    setup = []
    for t in range(seeds):
        r = spectral.mean_pairwise_distance(X, rng=stream(t, "data"))
        d = min(spectral.eigen_rank(X, r, rng=stream(t, "data")), 500)
        setup.append((r, d, spectral.gaussian_kernel(X, X, r), spectral.spectral_clustering(X, k, seed=t, r=r).labels))
    sc_acc = [clustering_accuracy(y, s[3]) for s in setup]
    print(f"\n### {name}: FedSC - SC gap, one knob at a time ({seeds} seeds; SC {np.mean(sc_acc):.3f})\n")
    print("| hypothesis | FedSC ACC | FedSC − SC | per seed | rel. error ‖K̂−K‖/‖K‖ | kNN overlap with K |")
    print("|---|---|---|---|---|---|")
    fedsc.init_dictionaries = patched_init
    try:
        for label, kw, mode in DIAG_HYPOTHESES:
            accs, errs, ovs = [], [], []
            for t, (r, d, K, _) in enumerate(setup):
                kw2 = dict(kw)
                client = equal_split(n, kw2.pop("P", P), t)
                ctx.update(mode=mode, X=X, client=client, r=r)
                kw2.setdefault("d", d)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = fedsc.run(X, client, k, seed=t, r=r, track_reconstruction=False, return_factors=True, **kw2)
                Z, C = res.info["Z"], res.info["C"]
                accs.append(clustering_accuracy(y, res.labels))
                errs.append(res.info["reconstruction_error"])
                ovs.append(overlap(K, C.T @ (spectral.gaussian_kernel(Z, Z, r) @ C)))
            print(
                f"| {label} | {fmt(accs)} | {np.mean(accs) - np.mean(sc_acc):+.3f} | "
                + " ".join(f"{a:.3f}" for a in accs)
                + f" | {np.mean(errs):.4f} | {np.mean(ovs):.3f} |",
                flush=True,
            )
    finally:
        fedsc.init_dictionaries = orig_init
    # references: the best rank-d K, and SC itself under small changes of its input
    r, d, K, _ = setup[0]
    w, V = np.linalg.eigh(K)
    Kd = (V[:, -d:] * w[-d:]) @ V[:, -d:].T
    print(
        f"\nbest rank-d K (seed 0, d={d}): rel. error {np.linalg.norm(K - Kd) / np.linalg.norm(K):.4f}, "
        f"kNN overlap {overlap(K, Kd):.3f}"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for eps in (0.1, 0.3):
            accs = [
                clustering_accuracy(
                    y,
                    spectral.spectral_clustering(
                        X + eps * stream(t, "noise").standard_normal(X.shape), k, seed=t, r=setup[t][0]
                    ).labels,
                )
                for t in range(seeds)
            ]
            print(f"SC on X + N(0, {eps}^2) (pixel values 0..16): " + " ".join(f"{a:.3f}" for a in accs))
        print(
            "SC with kNN k = "
            + ", ".join(
                f"{kn}: {clustering_accuracy(y, spectral.spectral_clustering(X, k, seed=0, r=r, knn=kn).labels):.3f}"
                for kn in (6, 7, 8, 10, 12, 15)
            )
        )


def equal_split(n, P, seed):
    """CODE splitData2Clients(n, P, 'equal'): random permutation, P contiguous near-equal chunks."""
    perm = stream(seed, "partition").permutation(n)
    bounds = np.round(np.linspace(0, n, P + 1)).astype(int)
    client = np.empty(n, dtype=np.int64)
    for p in range(P):
        client[perm[bounds[p] : bounds[p + 1]]] = p
    return client


def scores(y, labels):
    return {"ACC": clustering_accuracy(y, labels), "NMI": nmi(y, labels), "NMIp": fedsc.nmi_paper(y, labels)}


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def one_trial(X0, y, k, beta, seed, P=8):
    X = X0 + beta * X0.std() * stream(seed, "noise").standard_normal(X0.shape) if beta > 0 else X0
    n = X.shape[0]
    client = equal_split(n, P, seed)
    (r, d), t_rd = timed(
        lambda: (lambda r: (r, spectral.eigen_rank(X, r, rng=stream(seed, "data"))))(
            spectral.mean_pairwise_distance(X, rng=stream(seed, "data"))
        )
    )
    res, times = {}, {}
    km, times["K-means"] = timed(lambda: fedsc.centralized_kmeans(X, k, seed=seed))
    res["K-means"] = scores(y, km.labels)
    sc, times["SC"] = timed(lambda: spectral.spectral_clustering(X, k, seed=seed, r=r))
    res["SC"] = scores(y, sc.labels)
    ds, times["DSC"] = timed(lambda: dsc.run(X, client, k, seed=seed))
    res["DSC"] = scores(y, ds.labels)
    fs, times["FedSC"] = timed(lambda: fedsc.run(X, client, k, seed=seed, r=r, d=d, attack=True))
    res["FedSC"] = scores(y, fs.labels)
    res["Attack on C"] = scores(y, fs.info["attack_on_c_labels"])
    f1, times["FedSC P=1"] = timed(lambda: fedsc.run(X, np.zeros(n, dtype=np.int64), k, seed=seed, r=r, d=d))
    res["FedSC P=1"] = scores(y, f1.labels)
    return res, times, {"r": r, "d": d, "t_rd": t_rd, "rec_err": fs.info["reconstruction_error"]}


def fmt(vals):
    vals = np.asarray(vals, dtype=float)
    sd = vals.std(ddof=1) if len(vals) > 1 else 0.0
    return f"{vals.mean():.3f}±{sd:.3f}"


def comparison_table(datasets, betas, trials):
    rows, timing, extra = [], {}, {}
    for name in datasets:
        X0, y = load(name)
        k = int(len(np.unique(y)))
        for beta in betas:
            per = {m: {"ACC": [], "NMI": [], "NMIp": []} for m in METHODS}
            tt = {m: [] for m in METHODS}
            ex = []
            for t in range(trials):
                res, times, info = one_trial(X0, y, k, beta, seed=t)
                for m in METHODS:
                    for key in ("ACC", "NMI", "NMIp"):
                        per[m][key].append(res[m][key])
                    if m in times:
                        tt[m].append(times[m])
                ex.append(info)
                print(
                    f"  {name} beta={beta} trial {t}: "
                    + ", ".join(f"{m} {res[m]['ACC']:.3f}" for m in METHODS)
                    + f" (d={info['d']}, r={info['r']:.3f}, rec.err={info['rec_err']:.4f})",
                    flush=True,
                )
            rows.append((name, beta, per))
            timing[(name, beta)] = {m: float(np.mean(v)) for m, v in tt.items() if v}
            extra[(name, beta)] = {
                "d": [e["d"] for e in ex],
                "rec_err": float(np.mean([e["rec_err"] for e in ex])),
                "t_rd": float(np.mean([e["t_rd"] for e in ex])),
            }
    for key, title in (("ACC", "ACC"), ("NMI", "NMI (standard)"), ("NMIp", "NMI (paper-compatible, label 0 dropped)")):
        print(f"\n### {title}, mean ± std over {trials} trial(s), P = 8 iid clients\n")
        print("| data | β | " + " | ".join(METHODS) + " |")
        print("|---|---|" + "---|" * len(METHODS))
        for name, beta, per in rows:
            print(f"| {name} | {beta} | " + " | ".join(fmt(per[m][key]) for m in METHODS) + " |")
    print("\n### Mean wall time per run [s] (FedSC: r and d given; 'r,d rules' = their one-off cost)\n")
    print(
        "| data | β | d | rec. err. FedSC | r,d rules | " + " | ".join(m for m in METHODS if m != "Attack on C") + " |"
    )
    print("|---|---|---|---|---|" + "---|" * (len(METHODS) - 1))
    for (name, beta), tm in timing.items():
        e = extra[(name, beta)]
        print(
            f"| {name} | {beta} | {sorted(set(e['d']))} | {e['rec_err']:.4f} | {e['t_rd']:.2f} | "
            + " | ".join(f"{tm[m]:.2f}" for m in METHODS if m != "Attack on C")
            + " |"
        )


def coil20_end_to_end():
    X, y = load("COIL20")
    client = equal_split(len(y), 8, 0)
    res, t = timed(lambda: fedsc.run(X, client, 20, seed=0, rounds=20, y=y))
    print(
        f"\nCOIL20 FedSC end to end (r and d rules, 20 rounds, Stage II): {t:.2f} s (target < 20 s); "
        f"d={res.info['d']}, ACC={res.info['ACC']:.3f}, NMI={res.info['NMI']:.3f}, "
        f"rec.err={res.info['reconstruction_error']:.4f}"
    )


def gap_diagnostic(name="COIL20", trials=5, beta=0.0):
    """Where does a FedSC - SC gap come from? Per trial (bench protocol, shared r and d): SC with the
    sparse (ARPACK, deflated) and the dense eigensolver; the exact K pushed through FedSC's Stage II
    (min-max + kNN + NJW: zero reconstruction error); the best rank-d approximation of K (the floor of
    any d-atom factorization) through the same Stage II; FedSC; its ||K_hat - K||_F / ||K||_F and the
    overlap of its kNN sets with those of K."""
    X0, y = load(name)
    k = int(len(np.unique(y)))
    n = len(y)
    kk = spectral.knn_k(n)
    cols = [
        "SC",
        "SC dense eig",
        "exact K, FedSC Stage II",
        "best rank-d K, Stage II",
        "FedSC",
        "rec.err",
        "kNN overlap",
    ]
    vals = []
    for t in range(trials):
        X = X0 + beta * X0.std() * stream(t, "noise").standard_normal(X0.shape) if beta > 0 else X0
        r = spectral.mean_pairwise_distance(X, rng=stream(t, "data"))
        d = spectral.eigen_rank(X, r, rng=stream(t, "data"))
        K = spectral.gaussian_kernel(X, X, r)
        w, V = np.linalg.eigh(K)
        Kd = (V[:, -d:] * w[-d:]) @ V[:, -d:].T
        del V

        def stage2(M):
            return spectral.njw(spectral.knn_graph(lambda s, e: M[s:e], n, kk, minmax=True), k, seed=t)

        fs = fedsc.run(X, equal_split(n, 8, t), k, seed=t, r=r, d=d, return_factors=True)
        Kh = fs.info["C"].T @ (spectral.gaussian_kernel(fs.info["Z"], fs.info["Z"], r) @ fs.info["C"])
        top_k = np.argpartition(-K, kk - 1, axis=1)[:, :kk]
        top_h = np.argpartition(-Kh, kk - 1, axis=1)[:, :kk]
        overlap = np.mean([len(np.intersect1d(a, b)) / kk for a, b in zip(top_k, top_h)])
        vals.append(
            [
                clustering_accuracy(y, spectral.spectral_clustering(X, k, seed=t, r=r).labels),
                clustering_accuracy(y, spectral.spectral_clustering(X, k, seed=t, r=r, solver="dense").labels),
                clustering_accuracy(y, stage2(K)),
                clustering_accuracy(y, stage2(Kd)),
                clustering_accuracy(y, fs.labels),
                fs.info["reconstruction_error"],
                overlap,
            ]
        )
    vals = np.asarray(vals)
    print(f"\n### Gap diagnostic, {name} β={beta}, {trials} trials (ACC unless noted; d={d})\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    print("| " + " | ".join(fmt(vals[:, j]) for j in range(len(cols))) + " |")


def client_step_timing(n, m, d, P, reps, seed=0):
    """Vectorized C-step (one Cholesky, all clients' right-hand sides) and batched Z-step versus the
    official code's per-client loop (factor + solve per client, one Z-step per client)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, m))
    client = np.arange(n) % P
    r = spectral.mean_pairwise_distance(X[:2000])
    Z = X[rng.choice(n, d, replace=False)] + 0.01 * rng.standard_normal((d, m))
    Kzz = spectral.gaussian_kernel(Z, Z, r)
    Kzx = spectral.gaussian_kernel(Z, X, r)
    lam = 1e-3

    def c_vec():
        return fedsc.ridge_coefficients(Kzz, Kzx, lam)

    def c_loop():
        C = np.empty((d, n))
        for p in range(P):
            idx = client == p
            C[:, idx] = np.linalg.solve(Kzz + lam * np.eye(d), Kzx[:, idx])
        return C

    C1, t_vec = timed(lambda: [c_vec() for _ in range(reps)][-1])
    C2, t_loop = timed(lambda: [c_loop() for _ in range(reps)][-1])
    # Z-step: batched padded layout vs a per-client loop
    sizes = np.bincount(client, minlength=P)
    Nmax = sizes.max()
    Xpad = np.zeros((P, Nmax, m))
    Cpad = np.zeros((P, Nmax, d))
    Kxz = np.zeros((P, Nmax, d))
    for p in range(P):  # layout built once, outside the timed region
        idx = np.flatnonzero(client == p)
        Xpad[p, : len(idx)] = X[idx]
        Cpad[p, : len(idx)] = C1[:, idx].T
        Kxz[p, : len(idx)] = Kzx[:, idx].T

    def z_vec():
        return fedsc.official_z_steps(Z, Xpad, Cpad, Kxz, Kzz, r * r)

    def z_loop():
        out = np.empty((P, d, m))
        for p in range(P):
            idx = client == p
            Cp, Xp = C1[:, idx], X[idx]
            W = -Cp.T * Kzx[:, idx].T
            Q = 0.5 * (Cp @ Cp.T) * Kzz
            G = (W.T @ Xp - W.sum(0)[:, None] * Z) / r**2 + 2 * (Q @ Z - Q.sum(1)[:, None] * Z) / r**2
            tau = (2 * Q - np.diag(W.sum(0) + 2 * Q.sum(1))) / r**2
            out[p] = Z - np.linalg.solve(tau, G)
        return out

    Z1, tz_vec = timed(lambda: [z_vec() for _ in range(reps)][-1])
    Z2, tz_loop = timed(lambda: [z_loop() for _ in range(reps)][-1])
    return {
        "n": n,
        "m": m,
        "d": d,
        "P": P,
        "c_vec": t_vec / reps,
        "c_loop": t_loop / reps,
        "c_diff": float(np.abs(C1 - C2).max()),
        "z_vec": tz_vec / reps,
        "z_loop": tz_loop / reps,
        "z_diff": float(np.abs(Z1 - Z2).max() / np.abs(Z2).max()),
    }


def print_step_timing(quick):
    cases = [(1440, 400, 194, 8, 5), (1440, 400, 194, 64, 5), (2000, 20, 10, 500, 5)]
    if not quick:
        cases.append((10000, 784, 500, 8, 2))
        cases.append((10000, 784, 500, 100, 1))
    print("\n### One round's client computations: vectorized vs per-client loop [s per call]\n")
    print(
        "| n | m | d | P | C-step vectorized | C-step loop | max |ΔC| | Z-step batched | Z-step loop | rel. max |ΔZ| |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, m, d, P, reps in cases:
        t = client_step_timing(n, m, d, P, reps)
        print(
            f"| {n} | {m} | {d} | {P} | {t['c_vec']:.4f} | {t['c_loop']:.4f} | {t['c_diff']:.1e} | "
            f"{t['z_vec']:.4f} | {t['z_loop']:.4f} | {t['z_diff']:.1e} |",
            flush=True,
        )


def mnist_child(d_max):
    from fedclust.data.files import load_mnist_folder

    t0 = time.perf_counter()
    ds = load_mnist_folder(DATA / "mnist", "test")
    X = np.asarray(ds.X, dtype=np.float64) / 255.0  # pixels/255 as the official code
    y = np.asarray(ds.y)
    client = equal_split(len(y), 8, 0)
    t_load = time.perf_counter() - t0
    # the same steps as fedsc.run(X, client, 10, seed=0, d_max=d_max), with r and d timed separately
    t1 = time.perf_counter()
    r = spectral.mean_pairwise_distance(X, rng=stream(0, "data"))
    d_rule = spectral.eigen_rank(X, r, rng=stream(0, "data"))
    d = min(d_rule, d_max) if d_max else d_rule
    t_rd = time.perf_counter() - t1
    stage1_end = []
    res = fedsc.run(
        X,
        client,
        10,
        seed=0,
        rounds=20,
        r=r,
        d=d,
        y=y,
        progress=lambda s, v: stage1_end.append(time.perf_counter()) if s == 20 else None,
    )
    t = time.perf_counter() - t0
    t_stage1 = stage1_end[0] - t1 - t_rd
    t_stage2 = time.perf_counter() - stage1_end[0]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB on Linux
    print(
        json.dumps(
            {
                "wall_s": t,
                "t_load": t_load,
                "t_rd": t_rd,
                "t_stage1": t_stage1,
                "t_stage2": t_stage2,
                "peak_rss_gib": peak,
                "d": res.info["d"],
                "d_rule": d_rule,
                "r": res.info["r"],
                "ACC": res.info["ACC"],
                "NMI": res.info["NMI"],
                "NMI_paper": res.info["NMI_paper"],
                "rec_err": res.info["reconstruction_error"],
            }
        )
    )


def mnist(d_max, threads):
    if not (DATA / "mnist" / "t10k-images-idx3-ubyte.gz").exists():
        print("\nMNIST: skipped (../shared/data/mnist not found)")
        return
    cmd = [sys.executable, __file__, "--mnist-child", "--threads", str(threads)]
    if d_max:
        cmd += ["--mnist-d-max", str(d_max)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        print("\nMNIST run failed:\n" + out.stderr[-2000:])
        return
    o = json.loads(out.stdout.strip().splitlines()[-1])
    cap = f"d capped at {d_max} (rule: {o['d_rule']})" if d_max else f"d by the 0.99 rule = {o['d']}"
    print(
        f"\nMNIST test set (n=10000, P=8, 20 rounds, {cap}), end to end incl. loading, r/d rules, Stage I, "
        f"Stage II: {o['wall_s']:.1f} s (target < 180 s) [load {o['t_load']:.1f} s, r and d rules "
        f"{o['t_rd']:.1f} s, Stage I {o['t_stage1']:.1f} s, Stage II {o['t_stage2']:.1f} s], peak RSS {o['peak_rss_gib']:.2f} GiB (target < 8 GB); "
        f"ACC={o['ACC']:.3f} NMI={o['NMI']:.3f} NMI_paper={o['NMI_paper']:.3f} rec.err={o['rec_err']:.4f}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="clean data, 1 trial, no MNIST (< 1 minute)")
    ap.add_argument("--trials", type=int, default=None, help="trials per setting (default 3; 1 with --quick)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="BLAS/OpenMP threads (default 1: the shared build machine oversubscribes badly with more)",
    )
    ap.add_argument(
        "--mnist-d-max",
        type=int,
        default=500,
        help="cap on d for MNIST (0 = the 0.99 rule, d = 2703: about 5 min on one core)",
    )
    ap.add_argument("--skip-mnist", action="store_true")
    ap.add_argument(
        "--diagnose",
        action="store_true",
        help="only the FedSC-vs-SC gap diagnostic on COIL20 (exact K / best rank-d K through Stage II)",
    )
    ap.add_argument(
        "--files",
        nargs="+",
        default=None,
        help="any .mat files or glob patterns (default: the paper's Iris, Bank, COIL20); label = file name",
    )
    ap.add_argument(
        "--scale",
        choices=["none", "minmax", "standardize"],
        default="none",
        help="preprocessing of the files (default none: the paper's code uses the files as they are)",
    )
    ap.add_argument("--graphs", action="store_true", help="only the Stage II kNN-graph comparison on the files")
    ap.add_argument(
        "--six-files",
        dest="six_files",
        action="store_true",
        help="the table on the six files (or --files): k-means, SC, FedSC paper rule / defaults",
    )
    ap.add_argument(
        "--diagnose-digits",
        action="store_true",
        help="the FedSC-SC gap on digits, one Stage I knob at a time (writes the extra files if missing)",
    )
    ap.add_argument(
        "--seeds", type=int, default=5, help="seeds of --graphs, --six-files, --diagnose-digits (default 5)"
    )
    ap.add_argument(
        "--make-extra", metavar="DIR", default=None, help="write Digits.mat and Subclusters.mat to DIR and exit"
    )
    ap.add_argument("--mnist-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    global SCALE
    SCALE = a.scale
    if a.make_extra:
        make_extra(a.make_extra)
        return
    if (a.six_files or a.diagnose_digits) and not (ROOT / "data/01_raw/fedsc_extra/Digits.mat").is_file():
        make_extra(ROOT / "data/01_raw/fedsc_extra")
    patterns = a.files or ([str(ROOT / f) for f in SIX_FILES] if (a.six_files or a.diagnose_digits) else None)
    if patterns:
        PATHS.clear()
        PATHS.update(resolve_files(patterns))
    with threadpool_limits(a.threads):
        if a.mnist_child:
            mnist_child(a.mnist_d_max or None)
            return
        if not patterns and not (DATA / "fedsc").is_dir():
            print("FedSC data not found under ../shared/data/fedsc; nothing to benchmark")
            return
        if a.graphs:
            graph_table(list(PATHS), a.seeds)
            return
        if a.six_files:
            six_files_table(list(PATHS), a.seeds)
            return
        if a.diagnose_digits:
            digits_diagnostic(a.seeds)
            return
        if a.diagnose:
            gap_diagnostic("COIL20", trials=a.trials or 5)
            return
        trials = a.trials or (1 if a.quick else 3)
        betas = [0.0] if a.quick else [0.0, 0.3]
        t0 = time.perf_counter()
        print(f"FedSC benchmark: trials={trials}, betas={betas}, threads={a.threads}")
        comparison_table(list(PATHS), betas, trials)
        if "COIL20" in PATHS:
            coil20_end_to_end()
        print_step_timing(a.quick)
        if not (a.quick or a.skip_mnist):
            mnist(a.mnist_d_max, a.threads)
        print(f"\ntotal benchmark time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
