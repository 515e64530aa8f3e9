"""Benchmark B: CFL-MGD vs IFCA vs FedAvg on rotated MNIST built from the MNIST test set.

Workload (the CFL-MGD paper's rotated-MNIST setup, scaled to the 10,000-image MNIST test set that is
available offline): P = 4 rotations (0/90/180/270), 320 clients (80 per rotation) with 100 training
images each and 25 held-out test images each with the same rotation (``fedclust.partition.rotation``,
reuse=True: every rotation group draws its own permutation of the 8,000-image training pool), MLP
784-200-10, participation 0.1 (32 clients per round), H = 10 full-batch local steps, lr 0.1, no decay,
beta 0.9 for CFL-MGD (Option II) and 0 for IFCA and FedAvg, 300 rounds, random independent init.

Prints per method: final test accuracy (every client picks its lowest-loss model on its own test
images; pooled), client-clustering ACC/NMI of all clients, wall time, and the FLOP rate of local
training next to the rate of a plain ``torch.mm`` (and ``torch.bmm``) of the same shapes.

    .venv/bin/python benchmarks/bench_cfl_mgd.py [--quick] [--rounds 300] [--threads 0] [--seed 0]
"""

from __future__ import annotations

import os
import sys
import time

import torch

from fedclust import bench
from fedclust.bench import mm_rate
from fedclust.clustered_fl import MLP, FederatedTensors, cfl_mgd, fedavg, ifca


def build_data(n_clients: int, n: int, n_test: int, seed: int, max_images: int | None = None) -> FederatedTensors:
    _, y, images = bench.mnist_test(max_images=max_images)
    return bench.rotated(images, y, n_clients=n_clients, n=n, n_test=n_test, seed=seed)


def main(argv=None):
    # --threads 0 = auto: 2 on an idle 2-core machine, 1 when other processes keep it busy (OpenMP
    # threads then stall on each other)
    ap = bench.parser(__doc__, quick="40 rounds on 160 clients (< 1 minute)", threads=0)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--beta", type=float, default=0.9)
    ap.add_argument("--eval-every", type=int, default=10)
    args = ap.parse_args(argv)
    if args.threads <= 0:
        cpus = os.cpu_count() or 1
        args.threads = 1 if os.getloadavg()[0] > cpus - 0.5 else min(2, cpus)
    with bench.session(args):
        return run(args)


def run(args):
    if not bench.have_mnist():
        print(f"MNIST test set not found under {bench.MNIST_DIR}; nothing to do")
        return 0
    n_clients, rounds = (160, 40) if args.quick else (320, 300)
    if args.rounds is not None:
        rounds = args.rounds
    n, n_test, H, q = 100, 25, 10, 0.1
    max_images = 5000 if args.quick else None
    data = build_data(n_clients, n, n_test, args.seed, max_images)
    S = int(round(q * n_clients))
    print(
        f"rotated MNIST (from the test set): {n_clients} clients x {n} train / {n_test} test images, P=4, "
        f"MLP 784-200-10, q={q} ({S} clients/round), H={H} full-batch steps, lr={args.lr}, rounds={rounds}, "
        f"threads={torch.get_num_threads()}, seed={args.seed}\n"
    )
    common = dict(lr=args.lr, local_steps=H, rounds=rounds, participation=q, seed=args.seed, eval_every=args.eval_every)
    methods = {
        f"CFL-MGD (II, beta={args.beta})": lambda m: cfl_mgd.run(data, m, 4, option="II", beta=args.beta, **common),
        "IFCA": lambda m: ifca.run(data, m, 4, **common),
        "FedAvg": lambda m: fedavg.run(data, m, **common),
    }
    rows = []
    flops = MLP(784, 200, 10).flops_per_sample()["train_step"]
    for name, fn in methods.items():
        ref0 = mm_rate(S * n, 784, 200)  # the machine is shared: measure the reference around each run
        t0, c0 = time.perf_counter(), time.process_time()
        res = fn(MLP(784, 200, 10))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        ref = 0.5 * (ref0 + mm_rate(S * n, 784, 200))
        fin = res.info["final"]
        tl = res.info["timing"]["local"]
        rate = res.info["local_samples"] * flops / tl / 1e9
        h = res.history
        acc50 = h["test_accuracy"][min(len(h["test_accuracy"]), max(1, 50 // args.eval_every)) - 1]
        rows.append(
            (
                name,
                fin["test_accuracy"],
                acc50,
                fin["client_ACC"],
                fin["client_NMI"],
                fin["train_loss"],
                wall,
                wall / rounds,
                tl,
                rate,
                ref,
                cpu,
            )
        )
        print(
            f"  done: {name}: test acc {fin['test_accuracy']:.4f}, client ACC {fin['client_ACC']:.3f}, {wall:.1f} s",
            flush=True,
        )
    mm = mm_rate(S * n, 784, 200)
    bmm = mm_rate(S * n, 784, 200, batch=S)
    print(
        "| method | test acc | test acc @ round ~50 | client ACC | client NMI | train loss | wall (s) | CPU (s) | "
        "s/round | local train (s) | local GFLOP/s | torch.mm GFLOP/s | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r[0]} | {r[1]:.4f} | {r[2]:.4f} | {r[3]:.4f} | {r[4]:.4f} | {r[5]:.4f} | {r[6]:.1f} | "
            f"{r[11]:.1f} | {r[7]:.3f} | {r[8]:.1f} | {r[9]:.1f} | {r[10]:.1f} | {r[9] / r[10]:.2f} |"
        )
    print(
        f"\ntorch.mm column: plain torch.mm ({S * n}x784 @ 784x200, the first layer of one local step of all "
        f"sampled clients) measured before and after each run; now: torch.mm {mm:.1f} GFLOP/s, torch.bmm "
        f"({S}x{n}x784 @ {S}x784x200) {bmm:.1f} GFLOP/s"
    )
    worst = min(r[9] / r[10] for r in rows)
    print(f"local training reaches >= {worst:.2f} of the torch.mm rate (every method; target >= 0.5)")
    order_ok = rows[0][1] >= rows[1][1] > rows[2][1]
    print(
        f"ordering CFL-MGD >= IFCA > FedAvg (test accuracy): {'yes' if order_ok else 'NO'}; "
        f"300-round projection of the slowest method: {max(r[7] for r in rows) * 300:.0f} s wall, "
        f"{max(r[11] / rounds for r in rows) * 300:.0f} s CPU (target < 300 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
