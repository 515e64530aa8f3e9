"""One federated round across Ray workers: scaling with workers and a projection for a cluster.

Self-contained (synthetic MNIST-sized data: 30 training samples of 784 features per client, 10
classes): IFCA with k = 4, MLP 784-200-10, 10 local SGD steps of batch 10, lr 0.1, S clients per round
out of N = S clients, chunks of ``--chunk-mb`` (the engine's ``max_chunk_mb``). Per setting, one
warm-up round (Ray workers start, the model reaches the object store) and ``--rounds`` timed rounds:

* ``serial``: the engine's own chunked round in this process (1 thread);
* ``ray W``: the same round with ``chunk_runner=RayChunkRunner(num_cpus=W)``: the cluster estimate
  and the local training of every chunk are Ray tasks (1 CPU, 1 torch thread each); the driver draws
  the minibatch keys, gathers the chunks' data and folds the results in order;
* ``processes W`` (``--backend processes``): the same protocol on W local worker processes
  (``ProcessChunkRunner``), for machines without Ray.

Every Ray run is checked against the serial run: the final models must be equal bit for bit.
The projection for a cluster: the time of one round of ``--project`` clients on ``--cluster-cpus``
CPUs = the driver's serial share (measured per client: gathering, aggregation, draws) x clients +
the workers' share (measured CPU-seconds per client in the tasks) x clients / CPUs.

    python benchmarks/bench_ray_round.py --clients 2000 --workers 1,2 --rounds 1
    python benchmarks/bench_ray_round.py --clients 20000 --workers 1,2,4,8,16   # a 16-core machine
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from bench_gpu import synthetic as gpu_data  # a sibling script: benchmarks/ is on sys.path
from fedclust import bench
from fedclust.clustered_fl import MLP, ClusteredFLEngine, FederatedTensors
from fedclust.clustered_fl.engine import ProcessChunkRunner, RayChunkRunner

D, N_TRAIN, N_TEST, K = 784, 30, 2, 4


def synthetic(n_clients: int, seed: int = 0) -> FederatedTensors:
    """bench_gpu's MNIST-sized random clients, with N_TEST test samples each."""
    return gpu_data(n_clients, seed, n_test=N_TEST)


def one(data, S, rounds, chunk_mb, runner):
    eng = ClusteredFLEngine(
        data,
        MLP(D, 200, 10),
        K,
        rounds=rounds + 1,
        lr=0.1,
        local_steps=10,
        batch_size=10,
        clients_per_round=S,
        eval_every=0,
        seed=0,
        device="cpu",
        method="ifca",
        max_chunk_mb=chunk_mb,
        chunk_runner=runner,
    )
    st = eng.init_state()
    st, _, _ = eng.step(st)  # warm-up
    t0 = time.perf_counter()
    for _ in range(rounds):
        st, _, _ = eng.step(st)
    dt = (time.perf_counter() - t0) / rounds
    return dt, st.params, -(-S // eng.chunk_clients)


def main():
    ap = bench.parser(__doc__, threads=1)
    ap.add_argument("--clients", type=int, default=2000, help="clients per round (and in the population)")
    ap.add_argument("--workers", default="1,2", help="Ray CPU counts to try, comma separated")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--chunk-mb", type=float, default=128.0)
    ap.add_argument("--project", type=int, default=100_000, help="clients per round of the projection")
    ap.add_argument("--cluster-cpus", default="64,256,1024", help="CPU counts of the projection")
    ap.add_argument(
        "--backend",
        choices=("ray", "processes"),
        default="ray",
        help="ray (RayChunkRunner) or processes (ProcessChunkRunner: local processes, no Ray)",
    )
    a = ap.parse_args()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if a.backend == "ray":
        import ray  # optional dependency, imported only by this script's Ray runs

    with bench.session(a):
        S = a.clients
        data = synthetic(S)
        serial_s, ref, chunks = one(data, S, a.rounds, a.chunk_mb, None)
        rows = [["serial (this process)", 1, chunks, f"{serial_s:.2f}", f"{S / serial_s:.0f}", "1.00", "reference"]]
        print(f"serial: {serial_s:.2f} s/round, {S / serial_s:.0f} updates/s, {chunks} chunks", flush=True)
        fits = []
        for W in (int(w) for w in a.workers.split(",")):
            if a.backend == "ray":
                ray.shutdown()
                ray.init(num_cpus=W, include_dashboard=False, log_to_driver=False)
                runner = RayChunkRunner(max_in_flight=2 * W)
            else:
                runner = ProcessChunkRunner(W)
            dt, params, _ = one(data, S, a.rounds, a.chunk_mb, runner)
            if a.backend == "processes":
                runner.close()
            same = all(torch.equal(params[n], ref[n]) for n in ref)
            rows.append(
                [
                    f"{a.backend}, {W} CPUs",
                    W,
                    chunks,
                    f"{dt:.2f}",
                    f"{S / dt:.0f}",
                    f"{serial_s / dt:.2f}",
                    "bit-identical" if same else "DIFFERENT",
                ]
            )
            print(
                f"{a.backend} {W}: {dt:.2f} s/round, {S / dt:.0f} updates/s, {'bit-identical' if same else 'DIFFERENT'}",
                flush=True,
            )
            fits.append((W, dt))
        if a.backend == "ray":
            ray.shutdown()
        bench.table(
            ["run", "CPUs", "chunks/round", "s/round", "updates/s", "speed-up vs serial", "final models"],
            rows,
            title=f"One IFCA round (k={K}, MLP 784-200-10, 10 steps of batch 10), {S} clients/round, "
            f"chunks of {a.chunk_mb:g} MB",
        )
        if len(fits) >= 2:
            # t(W) = a + b / W: driver (serial) seconds a, worker CPU-seconds b, least squares over the runs
            A = np.array([[1.0, 1.0 / w] for w, _ in fits])
            (drv, work), *_ = np.linalg.lstsq(A, np.array([t for _, t in fits]), rcond=None)
            drv, work = max(drv, 0.0), max(work, 0.0)
            prow = []
            for c in (int(v) for v in a.cluster_cpus.split(",")):
                t = (drv + work / c) * a.project / S
                prow.append([a.project, c, f"{t:.1f}", f"{a.project / t:.0f}"])
            bench.table(
                ["clients/round", "cluster CPUs", "projected s/round", "projected updates/s"],
                prow,
                title=f"Projection from t(W) = driver + work/W fitted to the {a.backend} runs: driver "
                f"{1e3 * drv / S:.2f} ms/client (serial), work {1e3 * work / S:.2f} CPU-ms/client; "
                f"same CPU per core as here, network not modelled",
            )


if __name__ == "__main__":
    main()
