"""Benchmark: memory of the clustered-FL engine against the clients per round.

Workload: rotated MNIST test set (``../shared/data/mnist``, the official 10,000 test images, scaled to
[0, 1]): the images are split into an 8,000-image training pool and a 2,000-image test pool, each
rotated by 0/90/180/270 degrees; client c belongs to rotation group c mod 4 and holds 30 training and
10 test images of its group (consecutive entries of one random permutation of the pool from a random
offset, so no image repeats within a client; clients share images, as ``rotation(reuse=True)`` does).
MLP 784-200-10, IFCA with k = 4 (model averaging, no momentum; ``--methods`` adds FedAvg, RR-Cluster, DP-IFCA and the
DP single-model baselines, see ``METHODS``), 10 local SGD steps of batch 10,
lr 0.1, fixed-size sampling of S clients per round out of N = max(320, S) clients. The padded data
tensor is built directly in float32 (N x 30 x 784 floats: 0.94 GB at N = 10,000).

Every setting runs in its own process (one torch thread by default) and reports:

* ``data MB``: resident memory after the data are built (the data themselves, torch, Python);
* ``peak MB``: the process's peak resident memory during training (VmHWM, reset after the data are
  built via ``/proc/self/clear_refs``; ``ru_maxrss`` where that is unavailable) and ``round MB`` =
  peak - data, the working memory of the rounds;
* ``updates/s``: client updates (cluster estimate + local training + aggregation) per second of
  training time (the engine's phase timers; the final evaluation is excluded);
* ``chunk``: clients per chunk (``max_chunk_mb``) and chunks per round.

``unchunked`` runs use ``max_chunk_mb=1e9`` (one chunk per round: the engine without chunking); they are
skipped above ``--unchunked-up-to`` clients per round (3,200 unchunked needs about 9 GB). Where both
ran, the largest parameter difference between the chunked and unchunked final models is printed.

    .venv/bin/python benchmarks/bench_cfl_memory.py                      # 32, 320, 3200, 10000
    .venv/bin/python benchmarks/bench_cfl_memory.py --methods ifca,fedavg,rr_cluster,dp_ifca
    .venv/bin/python benchmarks/bench_cfl_memory.py --sizes 32,320 --max-chunk-mb 256
    .venv/bin/python benchmarks/bench_cfl_memory.py --data-clustering 1,10   # DP-FedC, FedC-MF, FedSC

The data-clustering mode runs each method for ``--dc-rounds`` rounds at 1x and 10x today's largest
benchmark setting (see :func:`dc_worker`) and reports the same peak / data memory.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from fedclust import bench

N_TRAIN, N_TEST, K = 30, 10, 4


def build_data(n_clients: int, seed: int = 0):
    import torch

    from fedclust.clustered_fl import FederatedTensors

    _, labels, images = bench.mnist_test()
    images = images.astype(np.float32)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(labels))
    pools = {"train": perm[:8000], "test": perm[8000:]}
    group = np.arange(n_clients) % K
    out = {}
    for split, per in (("train", N_TRAIN), ("test", N_TEST)):
        pool = pools[split]
        rot = np.stack([np.rot90(images[pool], r, axes=(1, 2)).reshape(len(pool), -1) for r in range(K)])
        order = rng.permutation(len(pool))
        offs = rng.integers(0, len(pool), n_clients)
        idx = order[(offs[:, None] + np.arange(per)[None, :]) % len(pool)]  # (N, per), distinct per client
        out[split] = (
            torch.from_numpy(rot[group[:, None], idx]),  # (N, per, 784) float32
            torch.from_numpy(labels[pool][idx]),
            torch.full((n_clients,), per),
        )
        del rot
    (Xtr, ytr, ntr), (Xte, yte, nte) = out["train"], out["test"]
    return FederatedTensors(X_train=Xtr, y_train=ytr, n_train=ntr, X_test=Xte, y_test=yte, n_test=nte, group=group)


#: Methods measured (``--methods``): the engine's IFCA and FedAvg, RR-Cluster(IFCA) with B = 8 and DP-IFCA
#: (B = 0), both private (sigma_s = sigma_theta = 1, C_theta = 1), plus the single-model DP baselines.
METHODS = ("ifca", "fedavg", "rr_cluster", "dp_ifca", "dp_fedavg", "dp_fedprox", "dp_fedper")


def build_engine(method: str, data, S: int, rounds: int, chunk_mb: float):
    """A configured engine of ``method`` on the benchmark workload (same local training for all)."""
    from fedclust.clustered_fl import MLP, ClusteredFLEngine, EngineConfig, rr_cluster
    from fedclust.clustered_fl import dp_baselines as dpb

    model = MLP(784, 200, 10)
    common = dict(
        rounds=rounds,
        lr=0.1,
        local_steps=10,
        batch_size=10,
        clients_per_round=S,
        eval_every=0,
        seed=0,
        max_chunk_mb=chunk_mb,
    )
    if method in ("ifca", "fedavg"):
        return ClusteredFLEngine(data, model, EngineConfig(k=K if method == "ifca" else 1, method=method, **common))
    if method in ("rr_cluster", "dp_ifca"):
        release = rr_cluster.ReleaseSettings(sigma_s=1.0, sigma_theta=1.0, clip=1.0)
        B = 8 if method == "rr_cluster" else 0
        return rr_cluster.build_engine(data, model, EngineConfig(k=K, **common), release, B=B)
    single = EngineConfig(k=1, **common)
    release = rr_cluster.ReleaseSettings(sigma_s=None, sigma_theta=1.0, clip=1.0)
    if method == "dp_fedavg":
        return rr_cluster.build_engine(data, model, single, release, B=0)
    if method == "dp_fedprox":
        prox = dpb.ProximalModel(model, 0.01)
        return rr_cluster.build_engine(data, prox, single, release, B=0, engine_cls=dpb._ProxEngine)
    if method == "dp_fedper":
        keys = dpb.last_layer_keys(model.init(1, 0))

        class _Eng(dpb.FedPerEngine):
            def __init__(self, data, model, config):
                super().__init__(data, model, config, head_keys=keys)

        frozen = {"frozen_keys": keys}
        return rr_cluster.build_engine(data, model, single, release, B=0, engine_cls=_Eng, aggregator_kwargs=frozen)
    raise ValueError(f"unknown method {method!r}; one of {METHODS}")


def worker(S: int, chunk_mb: float, rounds: int, threads: int, save: str | None, method: str = "ifca") -> dict:
    import torch

    bench.set_threads(threads)
    N = max(320, S)
    data = build_data(N)
    gc.collect()
    data_mb = bench.rss_mb()
    reset_ok = bench.reset_peak_rss()
    eng = build_engine(method, data, S, rounds, chunk_mb)
    res, wall = bench.timed(eng.run)
    peak = bench.peak_rss_mb(reset_ok)
    train_s = sum(res.info["timing"][p] for p in ("assign", "local", "aggregate"))
    if save:
        torch.save(res.params, save)
    return {
        "method": method,
        "S": S,
        "N": N,
        "rounds": rounds,
        "data_mb": data_mb,
        "peak_mb": peak,
        "round_mb": peak - data_mb,
        "updates_per_s": S * rounds / train_s,
        "train_s": train_s,
        "wall_s": wall,
        "chunk": res.info["chunk_clients"],
        "chunks": res.info["chunks_per_round"],
        "test_acc": res.info["final"].get("test_accuracy"),
        "peak_reset": reset_ok,
    }


def main():
    ap = bench.parser(__doc__, threads=1)
    ap.add_argument("--sizes", default="32,320,3200,10000", help="clients per round, comma separated")
    ap.add_argument("--methods", default="ifca", help=f"comma separated, of {','.join(METHODS)} (or 'all')")
    ap.add_argument("--max-chunk-mb", type=float, default=None, help="chunk budget (default: the engine's)")
    ap.add_argument("--unchunked-up-to", type=int, default=3200, help="largest S also run unchunked")
    ap.add_argument("--rounds", default=None, help="rounds per size (default: 10 below 3,200, else 1)")
    ap.add_argument(
        "--data-clustering",
        default=None,
        metavar="SCALES",
        help="instead: peak memory of DP-FedC, FedCAvg/FedCGds and FedSC at these multiples of "
        "today's largest benchmark setting, e.g. 1,10",
    )
    ap.add_argument("--dc-rounds", type=int, default=2)
    ap.add_argument("--dc-timeout", type=int, default=600, help="seconds per data-clustering run")
    ap.add_argument("--worker", nargs=5, metavar=("METHOD", "S", "CHUNK_MB", "ROUNDS", "SAVE"), help=argparse.SUPPRESS)
    ap.add_argument("--dc-worker", nargs=3, metavar=("METHOD", "SCALE", "ROUNDS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dc_worker or a.worker:  # a child process: one JSON line on stdout
        worker_main(a)
        return
    with bench.session(a):
        run(a)


def worker_main(a):
    if a.dc_worker:
        m, sc, R = a.dc_worker
        print(json.dumps(dc_worker(m, int(sc), int(R), a.threads)))
    else:
        method, S, mb, R, save = a.worker
        print(json.dumps(worker(int(S), float(mb), int(R), a.threads, save or None, method)))


def run(a):
    if a.data_clustering:
        dc_main([int(s) for s in a.data_clustering.split(",")], a.dc_rounds, a.threads, a.dc_timeout)
        return
    from fedclust.clustered_fl.engine import DEFAULT_CHUNK_MB

    budget = a.max_chunk_mb or DEFAULT_CHUNK_MB
    sizes = [int(s) for s in a.sizes.split(",")]
    methods = METHODS if a.methods == "all" else tuple(a.methods.split(","))
    rows, diffs = [], {}
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
    with tempfile.TemporaryDirectory() as tmp:
        for method in methods:
            for S in sizes:
                R = int(a.rounds) if a.rounds else (10 if S < 3200 else 1)
                modes = [("chunked", budget)] + ([("unchunked", 1e9)] if S <= a.unchunked_up_to else [])
                for mode, mb in modes:
                    save = os.path.join(tmp, f"{method}_{S}_{mode}.pt")
                    cmd = [
                        sys.executable,
                        __file__,
                        "--threads",
                        str(a.threads),
                        "--worker",
                        method,
                        str(S),
                        str(mb),
                        str(R),
                        save,
                    ]
                    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    if p.returncode != 0:
                        print(f"{method} S={S} {mode}: failed (rc {p.returncode})\n{p.stderr[-2000:]}", flush=True)
                        continue
                    r = json.loads(p.stdout.strip().splitlines()[-1])
                    r["mode"] = mode
                    rows.append(r)
                    print(
                        f"  {method:>10} S={S:>6} {mode:>9}: peak {r['peak_mb']:8.0f} MB (data {r['data_mb']:6.0f}), "
                        f"{r['updates_per_s']:7.1f} updates/s, {r['chunks']} chunk(s)",
                        flush=True,
                    )
                paths = [os.path.join(tmp, f"{method}_{S}_{m}.pt") for m, _ in modes]
                if len(modes) == 2 and all(os.path.exists(x) for x in paths):
                    import torch

                    pa, pb = torch.load(paths[0]), torch.load(paths[1])
                    diffs[method, S] = max(float((pa[n] - pb[n]).abs().max()) for n in pa)
    print(
        f"\nk={K} (FedAvg and the DP single-model baselines: 1), MLP 784-200-10, 10 local steps of batch 10, "
        f"rotated MNIST test set, {a.threads} thread(s), max_chunk_mb={budget:g}"
    )
    print(
        "| method | clients/round | clients | mode | rounds | chunk x chunks | data MB | peak MB "
        "| round MB (peak-data) | updates/s | max abs diff chunked vs unchunked |"
    )
    print("|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        d = diffs.get((r["method"], r["S"]))
        dtxt = f"{d:.1e}" if (d is not None and r["mode"] == "chunked") else ""
        chunk = "all" if r["chunk"] >= r["S"] else r["chunk"]
        print(
            f"| {r['method']} | {r['S']} | {r['N']} | {r['mode']} | {r['rounds']} | {chunk} x {r['chunks']} "
            f"| {r['data_mb']:.0f} | {r['peak_mb']:.0f} | {r['round_mb']:.0f} | {r['updates_per_s']:.1f} | {dtxt} |"
        )


# ------------------------------------------------------------------------------------------------
# Data-clustering methods that stack per-client state
# ------------------------------------------------------------------------------------------------
DC_METHODS = ("dp_fedc", "fedcavg", "fedcgds", "fedsc")


def dc_worker(method: str, scale: int, rounds: int, threads: int) -> dict:
    """Peak memory of one data-clustering method at ``scale`` x today's largest benchmark setting:
    DP-FedC: MNIST test set tiled ``scale`` times, N = 100*scale iid clients, K = 30*scale per round,
    k = 10; FedCAvg/FedCGds: synthetic linear model M = 2000, n = 10,000*scale, k = 20, P = 100*scale;
    FedSC: MNIST tiled, P = 8*scale clients, d = 100, Stage I only (``cluster=False``; Stage II is
    centralized spectral clustering on the server)."""
    bench.set_threads(threads)
    from fedclust.partition.iid import iid

    rng = np.random.default_rng(0)
    if method in ("dp_fedc", "fedsc"):
        X = np.tile(bench.mnist_test()[0], (scale, 1))
        X += 1e-3 * rng.standard_normal(X.shape)  # tiled copies are not exact duplicates
    else:
        from fedclust.data.synthetic import linear_model

        X = linear_model(n_samples=10000 * scale, n_features=2000, k=20, snr_db=-3.0, seed=0).X.astype(np.float64)
    P = {"dp_fedc": 100, "fedcavg": 100, "fedcgds": 100, "fedsc": 8}[method] * scale
    client = iid(X.shape[0], P, seed=0).client
    gc.collect()
    data_mb = bench.rss_mb()
    reset_ok = bench.reset_peak_rss()
    if method == "dp_fedc":
        from fedclust.clustering import dp_fedc

        _, wall = bench.timed(dp_fedc.run, X, client, 10, rounds=rounds, clients_per_round=30 * scale, seed=0)
    elif method in ("fedcavg", "fedcgds"):
        from fedclust.clustering import fedc_mf

        fn = fedc_mf.run_fedcavg if method == "fedcavg" else fedc_mf.run_fedcgds
        _, wall = bench.timed(fn, X, client, 20, rounds=rounds, seed=0)
    else:
        from fedclust.clustering import fedsc

        _, wall = bench.timed(fedsc.run, X, client, 10, rounds=rounds, d=100, seed=0, cluster=False)
    peak = bench.peak_rss_mb(reset_ok)
    return {
        "method": method,
        "scale": scale,
        "n": int(X.shape[0]),
        "clients": P,
        "rounds": rounds,
        "data_mb": data_mb,
        "peak_mb": peak,
        "round_mb": peak - data_mb,
        "wall_s": wall,
    }


def dc_main(scales, rounds: int, threads: int, timeout: int):
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    rows = []
    for method in DC_METHODS:
        for scale in scales:
            cmd = [sys.executable, __file__, "--threads", str(threads), "--dc-worker", method, str(scale), str(rounds)]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
            except subprocess.TimeoutExpired:
                print(f"  {method} x{scale}: over {timeout} s, skipped", flush=True)
                continue
            if p.returncode != 0:
                print(f"  {method} x{scale}: failed (rc {p.returncode})\n{p.stderr[-1500:]}", flush=True)
                continue
            r = json.loads(p.stdout.strip().splitlines()[-1])
            rows.append(r)
            print(
                f"  {method} x{scale}: peak {r['peak_mb']:.0f} MB (data {r['data_mb']:.0f}), {r['wall_s']:.1f} s",
                flush=True,
            )
    print(f"\nData-clustering methods, {rounds} round(s), {threads} thread(s); x1 = today's largest benchmark setting")
    print("| method | scale | samples | clients | data MB | peak MB | run MB (peak-data) | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['method']} | x{r['scale']} | {r['n']} | {r['clients']} | {r['data_mb']:.0f} | {r['peak_mb']:.0f} "
            f"| {r['round_mb']:.0f} | {r['wall_s']:.1f} |"
        )


if __name__ == "__main__":
    main()
