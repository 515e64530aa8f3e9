"""Benchmark: RR-Cluster vs its DP baselines on rotated MNIST (the paper's Table 1 and Table 4 layouts).

Data (a smaller version of the paper's FMNIST rotations, from the 10,000-image MNIST test set in
``../shared/data/mnist``): images centre-cropped to 20x20 and 2x2 average-pooled to 10x10 (d = 100, so
that the client-level DP noise, whose norm grows with sqrt(#parameters), leaves something to learn on
one CPU); M = 1000 clients, each with 8 training and 2 test images, built like RR-Cluster's data
("divide the whole data set into clients, then group the clients": ``rotation(reuse=False)``):

* balanced: 4 groups of 250 clients at 0/90/180/270 degrees, k = 4;
* imbalanced: 500/250/250 clients (2:1:1) at 0/90/180 degrees, k = 3 (the true number; the paper
  tunes k in {2, 4}).

Training (the same for every method): fixed-size sampling of qM = 100 clients per round (q = 0.1, so
qM/k = 25 balanced, 33 imbalanced, and B in {4, 8, 12} is allowed), T = 30 rounds, local training 5
full-batch GD steps with lr 0.1, server step gamma = 1, softmax-regression model (100 -> 10, 1010
parameters; DP-FedPer alone uses a 100-16-10 ReLU MLP, because with one layer its personal last layer
would be the whole model). Privacy (one neighbour relation, true sensitivities): client-level
(eps, delta = 1e-3) under replace-one neighbours with fixed-size sampling for EVERY method, calibrated
by the project's accountant (dp-accounting, WBK19 Thm 27), each method's noise set for its replace-one
sensitivity: 2 C_theta on every clipped sum (RR-Cluster and the baselines alike: the rebalancing is
post-processing of the noisy identifiers) and sqrt(2) C_s on the identifiers. Budget split rho_s = 0.5
(sigma_s = sigma_theta) for the clustering methods, three equal shares for FedCAM, the whole budget on
one Gaussian for DP-FedAvg/FedProx/FedPer; the accounted epsilon of every run is printed next to the
table. C_s = 0.1. C_theta is tuned per (method, setting, eps) from {0.1, 0.3, 1.0} on a separate tuning
seed (another partition, init and sampling); reported numbers are means (+- std) over the evaluation
seeds. RR-Cluster uses B = 8 in the Table-1 layout. (The earlier "DP-IFCA (2C)" row is gone: under one
relation DP-IFCA already pays 2 C_theta, and noise calibrated for C_theta alone is not DP
at the target epsilon.)

Test accuracy: each test client uses the model with the lowest loss on its own test data (IFCA
protocol; FedPer: its own head). Clustering accuracy: the final noise-free argmin-loss assignment of all
1000 training clients against the true rotation, best permutation (Hungarian).

Extra sections: "when does RR act": per setting and eps, the chance p that a noisy identifier
keeps the client's cluster, the expected size m(1-p)/(k-1) of a cluster no client chose, the observed
smallest noisy cluster, how often B = 8 moves anything, and the test-accuracy difference RR - DP-IFCA
(0 exactly when nothing moves: both add the same noise). Also: the rebalancing with B up to 20 and
rho_s in {0.5, 0.9};
a few-clients-per-round variant (q = 0.03, m = 30, as for Shakespeare in the paper) where qM/k = 7.5
and RR does move updates (C_theta tuned per row there too);
the synthetic 1-D regression of App. D.3 (IFCA's untrained model vs RR). Also: the vectorized engine vs a
per-client-loop reference of DP-IFCA on the same draws (wall time and
max parameter difference).

    .venv/bin/python benchmarks/bench_rr_cluster.py [--quick] [--seeds 5] [--threads 1] [--no-extras]
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from fedclust import bench
from fedclust.clustered_fl import MLP, FederatedTensors, rr_cluster
from fedclust.clustered_fl import dp_baselines as dpb
from fedclust.clustered_fl.engine import LocalTraining, client_model_losses, local_train
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.rng import stream

DELTA, Q, C_S = 1e-3, 0.1, 0.1
TUNE_SEED = 100
CLIPS = (0.1, 0.3, 1.0)


def load_images():
    ds = bench.mnist_raw()
    img = ds.images.astype(np.float32)[:, 4:24, 4:24] / 255.0
    return img.reshape(-1, 10, 2, 10, 2).mean((2, 4)), ds.y


def build(images, y, setting: str, seed: int, M: int):
    ratios = None if setting == "balanced" else (2, 1, 1)
    G = 4 if setting == "balanced" else 3
    return bench.rotated(images, y, n_groups=G, ratios=ratios, n_clients=M, n=8, n_test=2, seed=seed, reuse=False), G


# (label, kind, B, noise calibration): every method replace-one
METHODS = [
    ("DP-FedAvg", "fedavg", 0, "replace_one"),
    ("DP-FedProx (mu=0.1)", "fedprox", 0, "replace_one"),
    ("DP-FedPer", "fedper", 0, "replace_one"),
    ("DP-IFCA", "ifca", 0, "replace_one"),
    ("DP-FeSEM", "fesem", 0, "replace_one"),
    ("DP-FedCAM", "fedcam", 0, "replace_one"),
    ("RR-Cluster (IFCA)", "ifca", 8, "replace_one"),
    ("RR-Cluster (FeSEM)", "fesem", 8, "replace_one"),
    ("RR-Cluster (FedCAM)", "fedcam", 8, "replace_one"),
]


def run_one(data, k, kind, B, calib, eps, clip, seed, T, M):
    # FedPer needs a shared base under the personal last layer: 100-16-10 (every other method: 100 -> 10)
    model = MLP(data.d, 16 if kind == "fedper" else (), 10)
    common = dict(lr=0.1, local_steps=5, rounds=T, participation=Q, seed=seed, eval_every=0)
    private = not math.isinf(eps)
    clip = clip if private else None
    if kind in ("fedavg", "fedprox", "fedper"):
        sigma = rr_cluster.calibrate(eps, DELTA, Q, T, M, 0.0)[1]
        f = {
            "fedavg": dpb.dp_fedavg,
            "fedper": dpb.dp_fedper,
            "fedprox": lambda *a, **kw: dpb.dp_fedprox(*a, mu=0.1, **kw),
        }[kind]
        return f(data, model, sigma=sigma, clip=clip, **common)
    if kind == "fedcam":
        ss, sg, st = rr_cluster.calibrate_fedcam(eps, DELTA, Q, T, M)
    else:
        (ss, st), sg = rr_cluster.calibrate(eps, DELTA, Q, T, M, 0.5), None
    return rr_cluster.run(
        data,
        model,
        k,
        base=kind,
        B=B,
        sigma_s=ss,
        sigma_theta=st,
        sigma_g=sg,
        clip=clip,
        C_s=C_S,
        noise_calibration=calib,
        **common,
    )


def fmt(vals, pct=True):
    v = np.asarray(vals, dtype=float) * (100 if pct else 1)
    return bench.mean_std(v, nd=1, width=5) if v.size > 1 else f"{v.mean():5.1f}"


# ------------------------------------------------------------------------------------------------
def loop_reference(data, model, k, *, T, S, lr, H, C, ss, st, f, seed):
    """DP-IFCA with a Python loop over the sampled clients and clusters (same streams as the engine)."""
    rs = {n: stream(seed, n) for n in ("init", "sampling", "noise")}
    params = model.init(k, rs["init"])
    for _ in range(T):
        clients = np.sort(rs["sampling"].choice(data.n_clients, S, replace=False))
        chosen, deltas = [], []
        for i in clients:  # the per-client loop the engine replaces
            X, y, n = data.X_train[i : i + 1], data.y_train[i : i + 1], data.n_train[i : i + 1]
            j = int(torch.argmin(client_model_losses(model, params, X, y, n)[0][0]))
            start = {nm: v[j : j + 1] for nm, v in params.items()}
            w, _ = local_train(model, start, None, X, y, n, LocalTraining(steps=H, lr=lr))
            chosen.append(j)
            deltas.append({nm: (w[nm] - start[nm])[0] for nm in params})
        s = np.zeros((S, k))
        s[np.arange(S), chosen] = C_S
        groups = (s + rs["noise"].standard_normal((S, k)) * math.sqrt(2) * C_S * ss).argmax(1)  # sqrt(2) C_s
        new = {}
        for nm, old in params.items():
            sums = torch.zeros_like(old)
            for dl, g in zip(deltas, groups):
                norm = math.sqrt(sum(float(v.pow(2).sum()) for v in dl.values()))
                sums[g] += dl[nm] * min(1.0, C / norm)
            sums += torch.as_tensor(rs["noise"].standard_normal(tuple(old.shape)) * f * C * st, dtype=old.dtype)
            cnt = np.bincount(groups, minlength=k)
            new[nm] = torch.stack([old[j] + sums[j] / cnt[j] if cnt[j] else old[j] for j in range(k)])
        params = new
    return params


def engine_vs_loop(images, y, M, T):
    data, k = build(images, y, "balanced", 0, M)
    model = MLP(data.d, (), 10)
    ss, st = rr_cluster.calibrate(4, DELTA, Q, T, M, 0.5)
    res, t_all = bench.timed(
        rr_cluster.run,
        data,
        model,
        k,
        B=0,
        sigma_s=ss,
        sigma_theta=st,
        clip=0.3,
        lr=0.1,
        local_steps=5,
        rounds=T,
        participation=Q,
        seed=0,
        eval_every=0,
    )
    t_vec = res.info["timing"]["assign"] + res.info["timing"]["local"] + res.info["timing"]["aggregate"]
    ref, t_loop = bench.timed(
        loop_reference, data, model, k, T=T, S=int(Q * M), lr=0.1, H=5, C=0.3, ss=ss, st=st, f=2, seed=0
    )
    diff = max(float((res.params[n] - ref[n]).abs().max()) for n in ref)
    print(
        f"\n## Vectorized engine vs per-client loop (DP-IFCA, eps=4, balanced, {T} rounds, {int(Q * M)} clients/round)\n"
    )
    print("| implementation | training wall (s) | rounds/s |")
    print("|---|---|---|")
    print(f"| vectorized engine (training only; run incl. final eval {t_all:.2f} s) | {t_vec:.2f} | {T / t_vec:.1f} |")
    print(f"| per-client loop reference | {t_loop:.2f} | {T / t_loop:.1f} |")
    print(f"\nspeed-up {t_loop / t_vec:.1f}x; max |parameter difference| after {T} rounds = {diff:.2e}")


# ------------------------------------------------------------------------------------------------
def synthetic_collapse(n_seeds: int):
    """Spec appendix D.3 (non-private): IFCA vs RR-Cluster on the 1-D mixed regression, k = 4."""
    from fedclust.clustered_fl import LinearRegression
    from fedclust.data.synthetic import mixed_regression_1d

    print(
        "\n## Synthetic 1-D mixed regression (spec App. D.3; non-private, k=4, 100 clients x 50 points, "
        f"full participation, T=40, {n_seeds} seeds)\n"
    )
    print(
        "| scenario | method | runs with an untrained model | models untrained (mean) | true lines recovered "
        "(of 4, mean) |"
    )
    print("|---|---|---|---|---|")
    for scen in ("balanced", "imbalanced"):
        for diff in ("easy", "hard"):
            for label, B in (("IFCA", 0), ("RR-Cluster B=8", 8)):
                untrained, recovered, runs_u = [], [], 0
                for seed in range(n_seeds):
                    rd = mixed_regression_1d(scen, diff, seed=seed)
                    data = FederatedTensors.from_arrays(rd.X, rd.target, rd.client, group=rd.client_group)
                    r = rr_cluster.run(
                        data,
                        LinearRegression(1, bias=True),
                        4,
                        B=B,
                        rounds=40,
                        lr=0.1,
                        local_steps=5,
                        participation=1.0,
                        seed=seed,
                        eval_every=0,
                    )
                    after = np.asarray(r.history["sizes_after_rr"])  # what each model was trained on
                    u = int((after.sum(0) == 0).sum())
                    untrained.append(u)
                    runs_u += u > 0
                    fit = np.stack([r.params["weight"][:, 0, 0].numpy(), r.params["bias"][:, 0].numpy()], 1)
                    err = np.abs(rd.true_params[:, None, :] - fit[None]).max(-1)  # (4 true, 4 fitted)
                    recovered.append(int((err.min(1) < 0.25).sum()))
                print(
                    f"| {scen}/{diff} | {label} | {runs_u}/{n_seeds} | {np.mean(untrained):.2f} | "
                    f"{np.mean(recovered):.2f} |"
                )


# ------------------------------------------------------------------------------------------------
def why_rr(res, t4, datasets, epss, seeds, T, M, quick):
    """When does RR act at q = 0.1 (RR B = 8)? The identifier noise alone puts ~m(1-p)/(k-1) updates in
    every cluster (p = chance the noisy argmax keeps the client's own cluster), so B <= 12 rarely moves
    anything. RR-Cluster and DP-IFCA add the same replace-one noise, so RR - DP-IFCA is 0 exactly when
    nothing moves."""
    from fedclust.clustered_fl.rebalance import identifier_keep_probability

    m = int(round(Q * M))
    print(f"\n## When does RR act at q={Q} (m={m}); test-accuracy points, mean over seeds\n")
    print(
        "| setting | eps | sigma_s (std sqrt2 C_s sigma_s) | P(noisy id kept) | expected size of an unchosen cluster "
        "m(1-p)/(k-1) | observed min noisy cluster (mean over rounds) | rounds with a move (B=8) | moved/round (B=8) "
        "| RR (B=8) - DP-IFCA |"
    )
    print("|---" * 9 + "|")
    for setting in ("balanced", "imbalanced"):
        k = datasets[setting, seeds[0]][1]
        for e in epss:
            ss, _ = rr_cluster.calibrate(e, DELTA, Q, T, M, 0.5)
            p = identifier_keep_probability(math.sqrt(2) * ss, k)
            rr = [res[setting, "RR-Cluster (IFCA)", e, s] for s in seeds]
            mins = [min(z) for r in rr for z in r.history["sizes_before_rr"]]
            moved = [n for r in rr for n in r.history["n_moved"]]
            acc = {
                lab: np.mean([res[setting, lab, e, s].info["final"]["test_accuracy"] for s in seeds])
                for lab in ("DP-IFCA", "RR-Cluster (IFCA)")
            }
            print(
                f"| {setting} (k={k}) | {e:g} | {ss:.2f} | {p:.3f} | "
                f"{m * (1 - p) / (k - 1) if k > 1 else m:.1f} | "
                f"{np.mean(mins):.1f} | {np.mean(np.asarray(moved) > 0):.2f} | {np.mean(moved):.2f} | "
                f"{100 * (acc['RR-Cluster (IFCA)'] - acc['DP-IFCA']):+.1f} |"
            )


def few_clients(datasets, seeds, epss, M, quick):
    """q = 0.03 (m = 30, m/k = 7.5; like Shakespeare's 30 clients per round): noisy clusters do fall
    below B, RR moves updates every round. C_theta tuned per row and eps on the tuning seed."""
    q_s, T_s = 0.03, (30 if quick else 60)
    m_s = int(round(q_s * M))
    rows_s = [("DP-IFCA", 0, "replace_one")] + [(f"RR-Cluster (IFCA) B={B}", B, "replace_one") for B in (2, 4, 7)]
    eps_s = epss + [math.inf]
    clips = (0.3,) if quick else (0.1, 0.3, 1.0)

    def one(label, B, f, e, clip, s):
        ss, st = rr_cluster.calibrate(e, DELTA, q_s, T_s, M, 0.5)
        return rr_cluster.run(
            datasets["balanced", s][0],
            MLP(100, (), 10),
            4,
            B=B,
            sigma_s=ss,
            sigma_theta=st,
            clip=None if math.isinf(e) else clip,
            C_s=C_S,
            noise_calibration=f,
            lr=0.1,
            local_steps=5,
            rounds=T_s,
            participation=q_s,
            seed=s,
            eval_every=0,
        )

    out_s: dict = {}
    best: dict = {}
    for label, B, f in rows_s:
        for e in eps_s:
            if math.isinf(e) or len(clips) == 1:
                best[label, e] = clips[0] if not math.isinf(e) else None
            else:
                accs = [one(label, B, f, e, c, TUNE_SEED).info["final"]["test_accuracy"] for c in clips]
                best[label, e] = clips[int(np.argmax(accs))]
            out_s[label, e] = [one(label, B, f, e, best[label, e], s) for s in seeds]
    print(
        f"\n## Few clients per round: balanced, k=4, q={q_s} (m={m_s}, qM/k={m_s / 4:g}, so B <= 7), T={T_s}, "
        f"C_theta tuned per row from {clips} on the tuning seed; mean ± std over seeds\n"
    )
    for title, key in (("test accuracy (%)", "test_accuracy"), ("clustering accuracy (%)", "client_ACC")):
        print(f"\n{title}:\n")
        print("| method | " + " | ".join(f"eps={e:g}" for e in eps_s) + " |")
        print("|---" * (len(eps_s) + 1) + "|")
        for label, _B, _f in rows_s:
            print(
                f"| {label} | " + " | ".join(fmt([r.info["final"][key] for r in out_s[label, e]]) for e in eps_s) + " |"
            )
    print("\nmoved updates per round / mean smallest noisy cluster before RR / C_theta chosen:\n")
    print("| method | " + " | ".join(f"eps={e:g}" for e in eps_s) + " |")
    print("|---" * (len(eps_s) + 1) + "|")
    for label, _B, _f in rows_s:
        cells = [
            f"{np.mean([np.mean(r.history['n_moved']) for r in out_s[label, e]]):.1f} / "
            f"{np.mean([min(z) for r in out_s[label, e] for z in r.history['sizes_before_rr']]):.1f} / "
            f"{best[label, e]}"
            for e in eps_s
        ]
        print(f"| {label} | " + " | ".join(cells) + " |")


def main():
    ap = bench.parser(__doc__, quick="1 seed, eps in {4, inf}, T=15, fixed C (< 1 min)", seeds=5, threads=1)
    ap.add_argument(
        "--no-extras",
        action="store_true",
        help="only the Table 1 and Table 4 layouts (skip the larger-B, few-clients, synthetic and "
        "engine-vs-loop sections)",
    )
    args = ap.parse_args()
    with bench.session(args):
        run(args)


def run(args):
    if not bench.have_mnist():
        print(f"MNIST not found in {bench.MNIST_DIR}; nothing to do")
        return
    M = 1000
    if args.quick:
        T, seeds, epss, clips = 15, [0], [4.0], (0.3,)
    else:
        T, seeds, epss, clips = 30, list(range(args.seeds)), [2.0, 4.0, 8.0], CLIPS
    wall0 = time.perf_counter()
    images, y = load_images()
    datasets = {}
    for setting in ("balanced", "imbalanced"):
        for s in seeds + ([TUNE_SEED] if len(clips) > 1 else []):
            datasets[setting, s] = build(images, y, setting, s, M)
    print(
        f"# RR-Cluster benchmark: rotated MNIST (10x10), M={M} clients, q={Q}, T={T}, delta={DELTA}, "
        f"seeds={seeds}, torch threads={args.threads}\n"
    )
    for e in epss:
        ss, st = rr_cluster.calibrate(e, DELTA, Q, T, M, 0.5)
        sf = rr_cluster.calibrate(e, DELTA, Q, T, M, 0.0)[1]
        sc = rr_cluster.calibrate_fedcam(e, DELTA, Q, T, M)
        print(
            f"eps={e:g}: clustering sigma_s = sigma_theta = {st:.3f}; FedAvg/FedPer/FedProx sigma = {sf:.3f}; "
            f"FedCAM (sigma_s, sigma_g, sigma_theta) = ({sc[0]:.3f}, {sc[1]:.3f}, {sc[2]:.3f})"
        )

    # ---- C_theta tuning on the tuning seed --------------------------------------------------------
    best_clip: dict = {}
    tune_wall = time.perf_counter()
    for setting in ("balanced", "imbalanced"):
        for label, kind, B, f in METHODS:
            for e in epss:
                if len(clips) == 1:
                    best_clip[setting, label, e] = clips[0]
                    continue
                data, k = datasets[setting, TUNE_SEED]
                accs = [
                    run_one(data, k, kind, B, f, e, c, TUNE_SEED, T, M).info["final"]["test_accuracy"] for c in clips
                ]
                best_clip[setting, label, e] = clips[int(np.argmax(accs))]
    tune_wall = time.perf_counter() - tune_wall

    # ---- Table 1 layout ---------------------------------------------------------------------------
    res: dict = {}
    walls: dict = {}
    for setting in ("balanced", "imbalanced"):
        for label, kind, B, f in METHODS:
            for e in epss + [math.inf]:
                if math.isinf(e) and setting == "imbalanced":
                    continue
                for s in seeds:
                    data, k = datasets[setting, s]
                    t0 = time.perf_counter()
                    r = run_one(data, k, kind, B, f, e, best_clip.get((setting, label, e), None), s, T, M)
                    walls.setdefault(label, []).append(time.perf_counter() - t0)
                    res[setting, label, e, s] = r
    cols = [(st_, e) for st_ in ("balanced", "imbalanced") for e in epss] + [("balanced", math.inf)]
    print("\n## Table 1 layout: test accuracy (%), mean ± std over seeds\n")
    print(
        "| method | "
        + " | ".join(f"{'Bal' if s_ == 'balanced' else 'Imbal'} eps={e:g}" for s_, e in cols)
        + " | wall/run (s) |"
    )
    print("|---" * (len(cols) + 2) + "|")
    for label, *_ in METHODS:
        row = [fmt([res[s_, label, e, s].info["final"]["test_accuracy"] for s in seeds]) for s_, e in cols]
        print(f"| {label} | " + " | ".join(row) + f" | {np.mean(walls[label]):.2f} |")
    print("\nepsilon accounted (dp-accounting RDP, replace-one, fixed-size sampling; max over the runs of a cell):\n")
    print("| method | " + " | ".join(f"{'Bal' if s_ == 'balanced' else 'Imbal'} eps={e:g}" for s_, e in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for label, *_ in METHODS:
        cells = []
        for s_, e in cols:
            accs = [
                accounted(res[s_, label, e, s].dp_events, DELTA) if res[s_, label, e, s].dp_events else math.inf
                for s in seeds
            ]  # no release: a non-private run (epsilon = inf)
            cells.append(f"{max(accs):.3f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    rel = res["balanced", METHODS[-1][0], epss[0], seeds[0]].dp_events[0]
    print(
        f"\n(release of a run: neighbouring={rel.neighbouring}, sampling={rel.sampling}, "
        f"{rel.sample_size} of {rel.population} clients, {rel.count} rounds, multipliers "
        f"{tuple(round(v, 3) for v in rel.noise_multipliers)})"
    )
    print("\nC_theta chosen on the tuning seed (balanced / imbalanced), per eps:")
    for label, *_ in METHODS:
        print(
            f"  {label}: "
            + ", ".join(
                f"eps={e:g}: {best_clip['balanced', label, e]}/{best_clip['imbalanced', label, e]}" for e in epss
            )
        )

    # ---- Table 4 layout: clustering accuracy, balanced, eps x B -----------------------------------
    rows = [("DP-IFCA", 0, "replace_one"), ("DP-FeSEM", 0, "replace_one")] + [
        (f"RR-Cluster (IFCA) B={B}", B, "replace_one") for B in (4, 8, 12)
    ]
    eps4 = epss + ([16.0] if not args.quick else []) + [math.inf]
    t4: dict = {}
    for label, B, f in rows:
        key = "RR-Cluster (IFCA)" if label.startswith("RR-Cluster") else label
        for e in eps4:
            for s in seeds:
                if ("balanced", label, e, s) in res or (
                    label == "RR-Cluster (IFCA) B=8" and ("balanced", key, e, s) in res
                ):
                    t4[label, e, s] = res["balanced", key if B == 8 else label, e, s]
                    continue
                data, k = datasets["balanced", s]
                clip = best_clip.get(("balanced", key, e), 0.3)  # eps=16: not tuned, C = 0.3
                kind = "fesem" if label == "DP-FeSEM" else "ifca"
                t4[label, e, s] = run_one(data, k, kind, B, f, e, clip, s, T, M)
    for title, what, pct in (
        ("clustering accuracy (%)", "client_ACC", True),
        ("test accuracy (%)", "test_accuracy", True),
        ("moved updates per round (RR)", "moved", False),
    ):
        print(f"\n## Table 4 layout (balanced, k=4): {title}, mean ± std over seeds\n")
        print("| method | " + " | ".join(f"eps={e:g}" for e in eps4) + " |")
        print("|---" * (len(eps4) + 1) + "|")
        for label, B, _f in rows:
            if what == "moved":
                if not B:
                    continue
                vals = [[np.mean(t4[label, e, s].history["n_moved"]) for s in seeds] for e in eps4]
            else:
                vals = [[t4[label, e, s].info["final"][what] for s in seeds] for e in eps4]
            print(f"| {label} | " + " | ".join(fmt(v, pct) for v in vals) + " |")
    # how often RR could act: share of rounds where the smallest noisy cluster was below B
    print("\nShare of rounds in which the smallest noisy cluster (before RR) was < B (balanced, RR-Cluster(IFCA)):")
    for B in (4, 8, 12):
        lab = f"RR-Cluster (IFCA) B={B}"
        parts = []
        for e in eps4:
            mins = [min(sz) for s in seeds for sz in t4[lab, e, s].history["sizes_before_rr"]]
            parts.append(f"eps={e:g}: {np.mean(np.asarray(mins) < B):.2f}")
        print(f"  B={B}: " + ", ".join(parts))

    # ---- the rebalancing with larger B and identifier share rho_s ------------------------------------
    if not (args.quick or args.no_extras):
        print(
            "\n## The rebalancing with larger B (balanced, k=4, replace-one noise 2 C_theta, C_theta = 0.3): "
            "test acc % / clustering acc % / moved per round\n"
        )
        Bs = (0, 12, 20)
        print("| eps | rho_s | (sigma_s, sigma_theta) | " + " | ".join(f"B={B}" for B in Bs) + " |")
        print("|---" * (len(Bs) + 3) + "|")
        for e in (8.0, 16.0):
            for rho in (0.5, 0.9):
                ss, st = rr_cluster.calibrate(e, DELTA, Q, T, M, rho)
                cells = []
                for B in Bs:
                    rs_ = [
                        rr_cluster.run(
                            datasets["balanced", s][0],
                            MLP(100, (), 10),
                            4,
                            B=B,
                            sigma_s=ss,
                            sigma_theta=st,
                            clip=0.3,
                            C_s=C_S,
                            lr=0.1,
                            local_steps=5,
                            rounds=T,
                            participation=Q,
                            seed=s,
                            eval_every=0,
                        )
                        for s in seeds
                    ]
                    cells.append(
                        f"{100 * np.mean([r.info['final']['test_accuracy'] for r in rs_]):.1f} / "
                        f"{100 * np.mean([r.info['final']['client_ACC'] for r in rs_]):.1f} / "
                        f"{np.mean([np.mean(r.history['n_moved']) for r in rs_]):.1f}"
                    )
                print(f"| {e:g} | {rho} | ({ss:.2f}, {st:.2f}) | " + " | ".join(cells) + " |")

    # ---- why RR-Cluster(IFCA) is not above DP-IFCA at q = 0.1: decomposition of the gap ---------------
    why_rr(res, t4, datasets, epss, seeds, T, M, args.quick)

    # ---- few clients per round (Shakespeare-like m/k): where the rebalancing acts -----------------
    if not args.no_extras:
        few_clients(datasets, seeds, epss, M, args.quick)
        synthetic_collapse(3 if args.quick else 10)
        engine_vs_loop(images, y, M, 5 if args.quick else 10)
    print(f"\nC tuning wall {tune_wall:.1f} s; total wall {time.perf_counter() - wall0:.1f} s")


if __name__ == "__main__":
    main()
