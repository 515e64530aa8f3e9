"""Client updates per second of the clustered-FL engine on the CPU and, where present, on CUDA.

Self-contained (synthetic data, no data files): N = max(2,000, S) clients with 30 training and 10 test
samples of dimension 784 (MNIST-sized, random pixels, 10 classes), MLP 784-200-10, IFCA with k = 4
(model averaging), 10 local SGD steps of batch 10, lr 0.1, S clients per round. The same engine and the
same code path run on both devices (``ClusteredFLEngine(device=...)``); only the device and the chunk
budget differ (``--gpu-chunk-mb``, 8 GB by default on CUDA; the engine's 1 GB default on the CPU).

Per (device, S): ``--rounds`` rounds after one warm-up round (CUDA context, kernels, allocator), timed
with ``torch.cuda.synchronize`` around them; updates/s = S x timed rounds / seconds; the engine's
``max_chunk_mb`` default (1 GB chunks) applies. The CPU runs up to ``--cpu-up-to`` clients per round
(it is the slow side). The last table gives CUDA / CPU where both ran, and the largest difference of
the final models after the same rounds (float rounding only: the same draws, choices and order).

    python benchmarks/bench_gpu.py                  # S = 32, 1000, 10000; under 3 minutes with a GPU
    python benchmarks/bench_gpu.py --sizes 32,1000 --rounds 2 --threads 0
"""

from __future__ import annotations

import time

import numpy as np
import torch

from fedclust import bench
from fedclust.clustered_fl import MLP, ClusteredFLEngine, EngineConfig, FederatedTensors

D, N_TRAIN, N_TEST, K = 784, 30, 10, 4


def synthetic(n_clients: int, seed: int = 0, n_test: int = N_TEST) -> FederatedTensors:
    """MNIST-sized random clients: N_TRAIN training and ``n_test`` test samples of dimension D, 10
    classes, K rotation groups (also the data of benchmarks/bench_ray_round.py)."""
    g = torch.Generator().manual_seed(seed)
    return FederatedTensors(
        X_train=torch.rand(n_clients, N_TRAIN, D, generator=g),
        y_train=torch.randint(0, 10, (n_clients, N_TRAIN), generator=g),
        n_train=torch.full((n_clients,), N_TRAIN),
        X_test=torch.rand(n_clients, n_test, D, generator=g),
        y_test=torch.randint(0, 10, (n_clients, n_test), generator=g),
        n_test=torch.full((n_clients,), n_test),
        group=np.arange(n_clients) % K,
    )


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def ifca_engine(data, S: int, rounds: int, chunk_mb: float | None, **config) -> ClusteredFLEngine:
    """The IFCA engine these scripts time: k = 4, MLP D-200-10, 10 local SGD steps of batch 10, lr 0.1,
    S clients per round, ``rounds`` timed rounds after one warm-up; ``config``: more EngineConfig keys."""
    return ClusteredFLEngine(
        data,
        MLP(D, 200, 10),
        EngineConfig(
            k=K,
            rounds=rounds + 1,
            lr=0.1,
            local_steps=10,
            batch_size=10,
            clients_per_round=S,
            eval_every=0,
            seed=0,
            method="ifca",
            max_chunk_mb=chunk_mb,
            **config,
        ),
    )


def measure(data, S: int, device: str, rounds: int, chunk_mb: float | None = None) -> dict:
    eng = ifca_engine(data, S, rounds, chunk_mb, device=device)
    st = eng.init_state()
    st, _, _ = eng.step(st)  # warm-up round
    _sync(eng.device)
    t0 = time.perf_counter()
    for _ in range(rounds):
        st, _, _ = eng.step(st)
    _sync(eng.device)
    dt = time.perf_counter() - t0
    return {
        "device": eng.device.type,
        "S": S,
        "updates_per_s": S * rounds / dt,
        "s_per_round": dt / rounds,
        "chunks": -(-S // eng.chunk_clients),
        "params": {n: v.cpu() for n, v in st.params.items()},
    }


def main():
    ap = bench.parser(__doc__, threads=1)
    ap.add_argument("--sizes", default="32,1000,10000", help="clients per round, comma separated")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per setting (after 1 warm-up round)")
    ap.add_argument("--cpu-up-to", type=int, default=1000, help="largest S also run on the CPU")
    ap.add_argument(
        "--gpu-chunk-mb",
        type=float,
        default=8192.0,
        help="max_chunk_mb on CUDA (GPU memory is larger; the CPU keeps the engine's default)",
    )
    a = ap.parse_args()
    with bench.session(a):
        sizes = [int(s) for s in a.sizes.split(",")]
        cuda = torch.cuda.is_available()
        name = torch.cuda.get_device_name(0) if cuda else "none"
        print(f"torch {torch.__version__}, CUDA available: {cuda} ({name}), CPU threads {torch.get_num_threads()}")
        data = synthetic(max(2000, max(sizes)))
        rows, res = [], {}
        for S in sizes:
            for dev in (["cpu"] if S <= a.cpu_up_to else []) + (["cuda"] if cuda else []):
                r = measure(data, S, dev, a.rounds, a.gpu_chunk_mb if dev == "cuda" else None)
                res[dev, S] = r
                print(
                    f"  {dev:>4} S={S:>6}: {r['updates_per_s']:9.1f} updates/s ({r['s_per_round']:.3f} s/round, "
                    f"{r['chunks']} chunk(s))",
                    flush=True,
                )
        for S in sizes:
            c, g = res.get(("cpu", S)), res.get(("cuda", S))
            diff = max(float((c["params"][n] - g["params"][n]).abs().max()) for n in c["params"]) if c and g else None
            rows.append(
                [
                    S,
                    bench.fmt(c["updates_per_s"], 1) if c else "-",
                    bench.fmt(g["updates_per_s"], 1) if g else "-",
                    f"{g['updates_per_s'] / c['updates_per_s']:.1f}x" if c and g else "-",
                    f"{diff:.1e}" if diff is not None else "-",
                ]
            )
        bench.table(
            ["clients/round", "CPU updates/s", "CUDA updates/s", "CUDA / CPU", "max abs model diff"],
            rows,
            title=f"IFCA k={K}, MLP 784-200-10, 10 steps of batch 10, {a.rounds} timed rounds; GPU: {name}",
        )


if __name__ == "__main__":
    main()
