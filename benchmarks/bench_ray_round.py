"""One federated round across Ray workers: scaling with workers and a projection for a cluster.

Self-contained (synthetic MNIST-sized data: 30 training samples of 784 features per client, 10
classes): IFCA with k = 4, MLP 784-200-10, 10 local SGD steps of batch 10, lr 0.1, S clients per round
out of N = S clients, chunks of ``--chunk-mb`` (the engine's ``max_chunk_mb``). Per setting, one
warm-up round (Ray workers start, the model reaches the object store) and ``--rounds`` timed rounds:

* ``serial``: the engine's own chunked round in this process (1 thread);
* ``ray W``: the same round with ``chunk_runner=RayChunkRunner(num_cpus=W)``: the cluster estimate
  and the local training of every chunk are Ray tasks (1 CPU, 1 torch thread each) that return the
  chunk's per-cluster sums; the driver draws the minibatch keys, sends every chunk its client ids
  (``--mmap``: the workers read the rows from the files) or rows, and adds one sum per chunk;
* ``processes W`` (``--backend processes``): the same protocol on W local worker processes
  (``ProcessChunkRunner``), for machines without Ray.

Every Ray run is checked against the serial run (with ``--no-serial``, against the first parallel
run): the final models must be equal bit for bit. ``--repeats R`` runs the worker counts R times,
interleaved, and prints the median per worker count.
The projection for a cluster: the time of one round of ``--project`` clients on ``--cluster-cpus``
CPUs = the driver's serial share (measured per client: gathering, aggregation, draws) x clients +
the workers' share (measured CPU-seconds per client in the tasks) x clients / CPUs.

**Streamed from disk** (``--mmap DIR``): a population of ``--population`` clients (default: the clients
per round) is written to ``DIR`` as ``.npy`` files, block by block (``write_client_npy``; kept and
reused by a later run with the same sizes), and opened memory-mapped (``FederatedTensors.from_npy``):
every chunk reads only its clients' rows from the file. Per run the table then also gives the peak
resident memory of the driver and of its workers (sampled every 0.2 s over the process tree: file
pages mapped from the data set, which the kernel drops under memory pressure, and the process's own
memory, ``anon``) and the CPU-seconds of the driver and of the workers during the timed rounds; the
projection then uses these CPU-seconds per client (driver serial, workers divided by the CPUs)
instead of the fit over worker counts.

    python benchmarks/bench_ray_round.py --clients 2000 --workers 1,2 --rounds 1
    python benchmarks/bench_ray_round.py --clients 20000 --workers 1,2,4,8,16   # a 16-core machine
    python benchmarks/bench_ray_round.py --clients 100000 --population 200000 --mmap /tmp/clients \
        --backend processes --workers 2 --warmup 0 --defer-updates   # 100k per round, about 20 min here

    python benchmarks/bench_ray_round.py --clients 100000 --mmap /tmp/clients --backend processes \
        --workers 1,2 --no-serial --warmup 0 --chunk-mb 1024 --defer-updates   # alternate with 2,1

Measured before the workers returned sums (the 200,000-client command above, 2,500 chunks, shared
2-core machine at load 6 to 9): serial 441 s for the round, processes on 2 workers 617 s, aggregate
bit-identical; CPU per client: driver 1.12 ms (gathering and shipping the chunks' rows, receiving and
adding every trained model), workers 3.21 ms; projected 100,000 clients per round on 64 / 256 /
1,024 CPUs: 118 / 114 / 113 s, bound by the driver.

With the workers reading their rows and returning per-cluster sums (the last command, 100,000
clients in 391 chunks of 256, four invocations alternating the order, load 1.6 to 7.5): 1 worker
135 to 442 s per round, 2 workers 84 to 321 s (2 vs 1 worker: 1.61x and 1.91x in the two pairs at
load <= 2.4, 1.37x and 0.77x at load 5 to 7), every pair bit-identical; CPU per client: driver
0.048 ms, workers 1.63 ms; projected on 64 / 256 / 1,024 CPUs: 7.3 / 5.4 / 4.9 s, of which the
driver's 4.8 s (docs/howto/ray.md has the table).

With the start models gathered only where read and the workers' large blocks kept in the heap,
``--workers 1,2 --repeats 3`` on the same command with nothing else running: 1 worker 100.9 s per
round (median), 2 workers 59.6 s, 1.69x (1.83x, 1.78x, 1.65x repeat by repeat), every run
bit-identical; CPU per client: driver 0.044 ms, workers 1.03 ms; projected on 64 / 256 / 1,024 CPUs:
6.1 / 4.9 / 4.6 s.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import torch

from bench_gpu import ifca_engine  # a sibling script: benchmarks/ is on sys.path
from bench_gpu import synthetic as gpu_data
from fedclust import bench
from fedclust.clustered_fl import FederatedTensors
from fedclust.clustered_fl.engine import ProcessChunkRunner, RayChunkRunner
from fedclust.clustered_fl.engine.data import write_client_npy

D, N_TRAIN, N_TEST, K = 784, 30, 2, 4
BLOCK = 2000  # clients per block written to the .npy files
TICK = os.sysconf("SC_CLK_TCK")


def synthetic(n_clients: int, seed: int = 0) -> FederatedTensors:
    """bench_gpu's MNIST-sized random clients, with N_TEST test samples each."""
    return gpu_data(n_clients, seed, n_test=N_TEST)


def on_disk(directory: Path, n_clients: int, seed: int = 0) -> FederatedTensors:
    """MNIST-sized random training clients (as :func:`synthetic`, without test data) in ``.npy`` files
    under ``directory``, written block by block unless already there with these sizes; opened
    memory-mapped. Block b draws from ``default_rng([seed, b])`` (other draws than :func:`synthetic`)."""
    x = directory / "X_train.npy"
    if not (x.exists() and np.load(x, mmap_mode="r").shape == (n_clients, N_TRAIN, D)):

        def blocks():
            for b, a in enumerate(range(0, n_clients, BLOCK)):
                m, rng = min(BLOCK, n_clients - a), np.random.default_rng([seed, b])
                yield {
                    "X_train": rng.random((m, N_TRAIN, D), dtype=np.float32),
                    "y_train": rng.integers(0, 10, (m, N_TRAIN)),
                    "n_train": np.full(m, N_TRAIN),
                    "group": np.arange(a, a + m) % K,
                }

        t0 = time.perf_counter()
        write_client_npy(directory, n_clients, blocks())
        gb = x.stat().st_size / 1e9
        print(f"wrote {n_clients} clients to {directory} ({gb:.1f} GB of X) in {time.perf_counter() - t0:.0f} s")
    return FederatedTensors.from_npy(directory)


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for t in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo.extend(int(c) for c in (t / "children").read_text().split())
            except OSError:
                pass
    return out


def _status(pid: int) -> dict:
    """RSS, its anonymous and file-backed parts (MB) and CPU-seconds of one process."""
    out = {"rss": 0.0, "anon": 0.0, "file": 0.0, "cpu": 0.0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file"}.get(line.split(":")[0] + ":")
            if key:
                out[key] = int(line.split()[1]) / 1024
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["cpu"] = (int(f[11]) + int(f[12])) / TICK  # utime + stime
    except (OSError, IndexError, ValueError):
        pass
    return out


class TreeMonitor:
    """Peak resident memory of this process and of its descendants (the workers), sampled every
    ``every`` seconds, and the CPU-seconds each side used between start and stop."""

    def __init__(self, every: float = 0.2):
        self.every, self._stop = every, threading.Event()
        self.peak = {"driver": {}, "workers": {}}

    def _sample(self) -> dict:
        me = os.getpid()
        st = {p: _status(p) for p in _tree(me)}
        drv = st.pop(me)
        wk = {k: sum(s[k] for s in st.values()) for k in ("rss", "anon", "file")}
        return {"driver": drv, "workers": wk, "cpu": {p: s["cpu"] for p, s in st.items()}}

    def _run(self):
        while not self._stop.wait(self.every):
            self._fold(self._sample())

    def _fold(self, s):
        for side in ("driver", "workers"):
            for k in ("rss", "anon", "file"):
                self.peak[side][k] = max(self.peak[side].get(k, 0.0), s[side][k])
        for p, c in s["cpu"].items():
            self._wcpu_last[p] = c

    def __enter__(self):
        s = self._sample()
        self._cpu0 = time.process_time()
        self._wcpu0, self._wcpu_last = dict(s["cpu"]), {}
        self._fold(s)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._fold(self._sample())
        self._stop.set()
        self._thread.join()
        self.driver_cpu = time.process_time() - self._cpu0
        self.worker_cpu = sum(c - self._wcpu0.get(p, 0.0) for p, c in self._wcpu_last.items())


def one(data, S, rounds, chunk_mb, runner, warmup=1, defer=False):
    eng = ifca_engine(data, S, rounds, chunk_mb, device="cpu", chunk_runner=runner, defer_updates=defer)
    st = eng.init_state()
    for _ in range(warmup):
        st, _, _ = eng.step(st)
    with TreeMonitor() as mon:
        t0 = time.perf_counter()
        for _ in range(rounds):
            st, _, _ = eng.step(st)
        dt = (time.perf_counter() - t0) / rounds
    return dt, st.params, -(-S // eng.chunk_clients), mon


def main():
    ap = bench.parser(__doc__, threads=1)
    ap.add_argument("--clients", type=int, default=2000, help="clients per round")
    ap.add_argument("--population", type=int, default=None, help="clients in the population (default: --clients)")
    ap.add_argument("--workers", default="1,2", help="Ray CPU counts to try, comma separated")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--repeats", type=int, default=1, help="run the worker counts this many times, interleaved (1,2,1,2,...)"
    )
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (workers start, model shipped)")
    ap.add_argument("--chunk-mb", type=float, default=128.0)
    ap.add_argument("--mmap", metavar="DIR", default=None, help="stream the clients from .npy files in DIR")
    ap.add_argument("--no-serial", action="store_true", help="skip the serial reference run")
    ap.add_argument("--defer-updates", action="store_true", help="the engine's defer_updates (every run)")
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
        P = a.population or S
        data = on_disk(Path(a.mmap), P) if a.mmap else synthetic(P)
        print(f"load before the runs: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs", flush=True)
        kw = {"warmup": a.warmup, "defer": a.defer_updates}
        rows, fits, ref = [], [], None

        def row(name, W, chunks, dt, same, mon):
            mb = lambda side: f"{mon.peak[side]['rss']:.0f} ({mon.peak[side]['anon']:.0f})"  # noqa: E731
            rows.append(
                [
                    name,
                    W,
                    chunks,
                    f"{dt:.2f}",
                    f"{S / dt:.0f}",
                    f"{serial_s / dt:.2f}" if serial_s else "-",
                    same,
                    mb("driver"),
                    mb("workers") if name.startswith(a.backend) else "-",
                    f"{mon.driver_cpu / a.rounds:.1f}",
                    f"{mon.worker_cpu / a.rounds:.1f}",
                    f"{os.getloadavg()[0]:.2f}",
                ]
            )

        serial_s = None
        if not a.no_serial:
            serial_s, ref, chunks, mon = one(data, S, a.rounds, a.chunk_mb, None, **kw)
            print(f"serial: {serial_s:.2f} s/round, {S / serial_s:.0f} updates/s, {chunks} chunks", flush=True)
            row("serial (this process)", 1, chunks, serial_s, "reference", mon)
        last, runs = None, []
        order = [int(w) for w in a.workers.split(",")] * a.repeats
        for W in order:
            if a.backend == "ray":
                ray.shutdown()
                ray.init(num_cpus=W, include_dashboard=False, log_to_driver=False)
                runner = RayChunkRunner(max_in_flight=2 * W)
            else:
                runner = ProcessChunkRunner(W)
            dt, params, chunks, mon = one(data, S, a.rounds, a.chunk_mb, runner, **kw)
            if a.backend == "processes":
                runner.close()
            if ref is None:  # no serial run: every run is compared with the first parallel one
                ref, same = params, "reference"
            else:
                same = "bit-identical" if all(torch.equal(params[n], ref[n]) for n in ref) else "DIFFERENT"
            row(f"{a.backend}, {W} CPUs", W, chunks, dt, same, mon)
            print(f"{a.backend} {W}: {dt:.2f} s/round, {S / dt:.0f} updates/s, {same}", flush=True)
            fits.append((W, dt))
            runs.append((W, dt, mon))
            last = (W, dt, mon)
        if a.backend == "ray":
            ray.shutdown()
        src = f"streamed from {P} clients in .npy files" if a.mmap else f"in memory ({P} clients)"
        bench.table(
            [
                "run",
                "CPUs",
                "chunks/round",
                "s/round",
                "updates/s",
                "speed-up vs serial",
                "final models",
                "driver peak MB (anon)",
                "workers peak MB (anon)",
                "driver CPU s/round",
                "workers CPU s/round",
                "load (1 min)",
            ],
            rows,
            title=f"One IFCA round (k={K}, MLP 784-200-10, 10 steps of batch 10), {S} clients/round, {src}, "
            f"chunks of {a.chunk_mb:g} MB, {a.warmup} warm-up round(s), defer_updates={a.defer_updates}",
        )
        by_w: dict[int, list[float]] = {}
        for W, dt, _ in runs:
            by_w.setdefault(W, []).append(dt)
        if by_w:
            w0 = min(by_w)
            base = float(np.median(by_w[w0]))
            bench.table(
                ["workers", "runs", "median s/round", "rounds/s", f"speed-up vs {w0} worker(s)"],
                [
                    [W, len(v), f"{np.median(v):.1f}", f"{1 / np.median(v):.4f}", f"{base / np.median(v):.2f}"]
                    for W, v in sorted(by_w.items())
                ],
                title=f"Per worker count, the median over the interleaved repeats ({S} clients/round)",
            )
        prow, how = [], None
        if last is not None and last[2].worker_cpu > 0:
            # CPU-seconds measured over all parallel runs: the driver's are serial, the workers' divide
            W = ",".join(str(w) for w in sorted(by_w))
            n_runs = len(runs) * a.rounds
            drv = sum(m.driver_cpu for *_, m in runs) / n_runs
            work = sum(m.worker_cpu for *_, m in runs) / n_runs
            how = (
                f"Projection from the CPU-seconds of the {a.backend} runs with {W} workers: driver "
                f"{1e3 * drv / S:.2f} ms/client (serial: sampling, draws, grouping, sending the chunks "
                f"their client ids (memory-mapped data) or rows, adding the chunks' sums), workers {1e3 * work / S:.2f} CPU-ms/client; t = (driver + "
                f"workers / CPUs) x clients; same CPU per core as here, network not modelled"
            )
        elif len(fits) >= 2:
            # t(W) = a + b / W: driver (serial) seconds a, worker CPU-seconds b, least squares over the runs
            A = np.array([[1.0, 1.0 / w] for w, _ in fits])
            (drv, work), *_ = np.linalg.lstsq(A, np.array([t for _, t in fits]), rcond=None)
            drv, work = max(drv, 0.0), max(work, 0.0)
            how = (
                f"Projection from t(W) = driver + work/W fitted to the {a.backend} runs: driver "
                f"{1e3 * drv / S:.2f} ms/client (serial), work {1e3 * work / S:.2f} CPU-ms/client; "
                f"same CPU per core as here, network not modelled"
            )
        if how:
            for c in (int(v) for v in a.cluster_cpus.split(",")):
                t = (drv + work / c) * a.project / S
                prow.append([a.project, c, f"{t:.1f}", f"{a.project / t:.0f}"])
            bench.table(["clients/round", "cluster CPUs", "projected s/round", "projected updates/s"], prow, title=how)


if __name__ == "__main__":
    main()
