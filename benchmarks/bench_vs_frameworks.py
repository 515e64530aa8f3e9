"""fedclust's clustered-FL engine side by side with a per-client torch loop and Flower's simulation.

Workload: rotated MNIST built from the 10,000-image MNIST test set (``../shared/data/mnist``),
P = 4 rotations (0/90/180/270), 320 clients (80 per rotation) of 30 training images each, plus 25 held-out
test images per client with the same rotation (``fedclust.bench.rotated``, as ``bench_cfl_mgd.py``), MLP 784-200-10, 10 local
SGD steps with minibatches of 10 (drawn without replacement per step), lr 0.1, 32 clients per round,
FedAvg (k = 1) and IFCA (k = 4, model averaging). Every system starts from the same initial models.

Systems (same math: cross-entropy, plain SGD, per-cluster mean of the trained models, empty clusters
keep their model):

* ``engine``: :class:`fedclust.clustered_fl.ClusteredFLEngine` (what ``ifca.run`` / ``fedavg.run``
  build), all sampled clients trained at once (batched MLP with the hand-written backward, the first
  layer's updates deferred: its default; ``--step-by-step`` runs it with ``defer_updates=False``);
* ``loop``: a plain per-client loop: one ``nn.Sequential`` + ``torch.optim.SGD`` per sampled client
  (:func:`client_update`, also the body of the Flower client);
* ``flower``: Flower's simulation engine (``flwr.simulation.run_simulation``, Ray backend) with a
  ``ClientApp`` running :func:`client_update` and a ``ServerApp``: FedAvg is Flower's own ``FedAvg``
  strategy; IFCA is a small custom strategy (:class:`_IFCAStrategy`, built in :func:`_flower_apps`): the
  server sends all k models, the client trains the lowest-loss one and returns it with its cluster id,
  the server averages per cluster.

Threads: ``--threads 1 2`` runs every system under each setting (``fedclust.threads.thread_limits``:
torch intra-op and BLAS/OpenMP threads together). For Flower, ``threads = T`` means Ray gets ``T``
CPUs and runs ``T`` client actors at once, each with 1 torch/BLAS thread (Flower's way of using T
cores); the server thread in the driver runs under ``thread_limits(T)``.

Measured per (threads, algorithm, system), systems interleaved within each repeat (order rotated from
repeat to repeat): client updates/s over rounds 2..R (round 1 is a warm-up: Ray actors start, torch
warms up; it is excluded for every system, and so is Flower's start-up, reported separately), CPU-ms
per client update = CPU time (user + system) of this process AND all its descendants (Ray's GCS,
raylet and worker processes; read from /proc over the timed rounds) / client updates, and test
accuracy after R rounds with the same evaluation for every system (every test client uses its
lowest-loss model on its own test images; ``fedclust.clustered_fl.engine.evaluate``). Medians over
repeats. Then the ratios engine/Flower and engine/loop, and the FLOP rate of local training (engine:
its ``timing["local"]``; loop: the time inside the training steps) next to ``torch.mm`` and
``torch.bmm`` of the same total shapes (the first layer of one local step of all sampled clients).

Targets printed at the end: engine / Flower >= 15x and engine / loop >= 3x client updates/s.

    python benchmarks/bench_vs_frameworks.py [--rounds 10] [--rounds-mt 3] [--repeats 3] [--quick] \
        [--systems engine loop flower] [--algos FedAvg IFCA] [--threads 1 2] [--step-by-step] \
        [--json out.json]

Flower comes with the project's ``deploy`` extra (which ``make test`` installs; the Flower backend of
FedDP-KMeans and FKM uses it): ``pip install -c constraints.txt -e ".[deploy]"``.
Without Flower the script runs ``engine`` and ``loop`` and says how to install it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedclust.threads import apply_thread_setting, thread_limits

# The Flower client imports this module in every Ray worker: it needs only torch and numpy, so the
# engine, the data loaders and bench_cfl_mgd are imported inside the functions that use them.

N_CLIENTS, N_TRAIN, N_TEST, S = 320, 30, 25, 32
STEPS, BATCH, LR = 10, 10, 0.1
SIZES = (784, 200, 10)
ALGOS = {"FedAvg": 1, "IFCA": 4}
SYSTEMS = ("engine", "loop", "flower")
TARGETS = {"flower": 15, "loop": 3}  # engine / system, client updates/s
INSTALL_HINT = 'pip install -c constraints.txt -e ".[deploy]"  (Flower with its Ray simulation extra)'


# ================================================================================================
# CPU time of this process and its descendants (Ray's processes are children of the driver)
# ================================================================================================
def tree_cpu() -> float:
    """User + system CPU seconds of this process and every live descendant (Linux /proc); elsewhere
    only this process (``time.process_time``)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        parent, cpu = {}, {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(d)
            parent[pid] = int(fields[1])
            cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
        me, total = os.getpid(), 0.0
        for pid in cpu:
            p = pid
            while p > 1 and p != me:
                p = parent.get(p, 0)
            if p == me:
                total += cpu[pid]
        return total
    except (OSError, ValueError):
        return time.process_time()


class RoundClock:
    """Wall and tree-CPU stamps taken before round 1 and after every round."""

    def __init__(self):
        self.wall, self.cpu = [], []

    def stamp(self):
        self.wall.append(time.perf_counter())
        self.cpu.append(tree_cpu())

    def timed(self, skip: int = 1) -> tuple[float, float, int]:
        """(wall s, CPU s, rounds) over rounds skip+1..R."""
        return self.wall[-1] - self.wall[skip], self.cpu[-1] - self.cpu[skip], len(self.wall) - 1 - skip


# ================================================================================================
# The per-client update: the plain torch loop and the body of the Flower client
# ================================================================================================
def make_module() -> torch.nn.Module:
    """The plain torch model of a client: the same layers and parameter names ("0.weight", ...) as
    ``fedclust.clustered_fl.MLP(784, 200, 10).module()``."""
    return torch.nn.Sequential(
        torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.ReLU(), torch.nn.Linear(SIZES[1], SIZES[2])
    )


def client_update(
    models: list[dict[str, torch.Tensor]],
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    lr: float,
    steps: int,
    batch: int,
    gen: torch.Generator,
    module: torch.nn.Module | None = None,
):
    """One client of IFCA (FedAvg when ``len(models) == 1``): pick the model with the lowest loss on the
    client's data (ties: lowest index), run ``steps`` SGD steps on minibatches of ``batch`` samples drawn
    without replacement per step, return ``(cluster, trained state dict, seconds in the SGD steps)``."""
    mod = make_module() if module is None else module
    if len(models) == 1:
        j = 0
    else:
        with torch.no_grad():
            losses = []
            for m in models:
                mod.load_state_dict(m)
                losses.append(F.cross_entropy(mod(X), y).item())
        j = int(np.argmin(losses))
    mod.load_state_dict(models[j])
    opt = torch.optim.SGD(mod.parameters(), lr=lr)
    t0 = time.perf_counter()
    n = X.shape[0]
    for _ in range(steps):
        idx = torch.randperm(n, generator=gen)[:batch]
        opt.zero_grad()
        F.cross_entropy(mod(X[idx]), y[idx]).backward()
        opt.step()
    dt = time.perf_counter() - t0
    return j, {name: p.detach().clone() for name, p in mod.state_dict().items()}, dt


def average(state: dict[str, torch.Tensor], results: list[tuple[int, dict]], k: int) -> dict[str, torch.Tensor]:
    """Per-cluster mean of the trained models; an empty cluster keeps its model."""
    new = {name: v.clone() for name, v in state.items()}
    for j in range(k):
        got = [sd for c, sd in results if c == j]
        if got:
            for name in new:
                new[name][j] = torch.stack([sd[name] for sd in got]).mean(0)
    return new


# ================================================================================================
# Systems
# ================================================================================================
#: the engine's deferred first-layer local training (its default); ``--step-by-step`` sets it False
DEFER_UPDATES = True


def make_engine(data, k: int, init: dict, rounds: int, seed: int):
    from fedclust.clustered_fl import MLP, ClusteredFLEngine, EngineConfig
    from fedclust.clustered_fl.engine import ModelAveraging

    return ClusteredFLEngine(
        data,
        MLP(*SIZES),
        EngineConfig(
            k=k,
            rounds=rounds,
            lr=LR,
            beta=0.0,
            local_update="model",
            local_steps=STEPS,
            batch_size=BATCH,
            clients_per_round=S,
            aggregator=ModelAveraging(),
            seed=seed,
            init_params=init,
            eval_every=0,
            defer_updates=DEFER_UPDATES,
            method="ifca" if k > 1 else "fedavg",
        ),
    )


def run_engine(data, k: int, init: dict, rounds: int, seed: int) -> dict:
    eng = make_engine(data, k, init, rounds, seed)
    st = eng.init_state()
    clock = RoundClock()
    clock.stamp()
    local0 = 0.0
    for t in range(rounds):
        st, _, _ = eng.step(st)
        clock.stamp()
        if t == 0:
            local0 = eng.timing["local"]
    return {"params": st.params, "clock": clock, "local_s": eng.timing["local"] - local0}


def as_run(system: str, data, k: int, init: dict, rounds: int, seed: int) -> float:
    """Wall seconds of a whole run as a user runs it: every round (the first included) and the
    end-of-run evaluation (train and test clients). The engine: ``ClusteredFLEngine.run`` (what
    ``ifca.run`` / ``fedavg.run`` call); the loop: its rounds, then the same evaluation."""
    from fedclust.clustered_fl import MLP
    from fedclust.clustered_fl.engine import evaluate

    t0 = time.perf_counter()
    if system == "engine":
        make_engine(data, k, init, rounds, seed).run()
    else:
        params = run_loop(data, k, init, rounds, seed)["params"]
        evaluate(MLP(*SIZES), params, data, train=True, test=True)
    return time.perf_counter() - t0


def run_loop(data, k: int, init: dict, rounds: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, 16, 1])
    gen = torch.Generator().manual_seed(seed)
    params = {name: v.clone() for name, v in init.items()}
    mod = make_module()
    clock = RoundClock()
    clock.stamp()
    local = 0.0
    for t in range(rounds):
        clients = np.sort(rng.choice(data.n_clients, S, replace=False))
        models = [{name: v[j] for name, v in params.items()} for j in range(k)]
        results, lt = [], 0.0
        for i in clients:  # the per-client loop
            ni = int(data.n_train[i])
            j, sd, dt = client_update(
                models, data.X_train[i, :ni], data.y_train[i, :ni], lr=LR, steps=STEPS, batch=BATCH, gen=gen, module=mod
            )
            results.append((j, sd))
            lt += dt
        params = average(params, results, k)
        clock.stamp()
        if t > 0:
            local += lt
    return {"params": params, "clock": clock, "local_s": local}


# ---------------------------------------------------------------------------------------------- Flower
_DATA: dict = {}


def _client_data(path: str):
    """The clients' padded data, loaded once per Ray worker process."""
    if path not in _DATA:
        _DATA.clear()
        _DATA[path] = torch.load(path)
        apply_thread_setting(1)  # one torch/BLAS thread per client actor
    return _DATA[path]


def _flower_apps(jobs: list[tuple[str, int, dict]], rounds: int, data_path: str, seed: int, out: dict, threads: int):
    """The ClientApp and ServerApp of one Flower simulation that runs every job ``(algorithm, k, initial
    stacked models)`` in turn, ``rounds`` rounds each, on the same Ray actors; ``out[algorithm]`` receives
    the final models and the round clock."""
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        cfg = msg.content["config"]
        X, y, n = _client_data(cfg["data"])
        i = int(context.node_config["partition-id"])
        arrays = msg.content["arrays"].to_torch_state_dict()
        kk = int(cfg["k"])
        models = [
            {name.split("/", 1)[1]: v for name, v in arrays.items() if name.startswith(f"c{j}/")} for j in range(kk)
        ]
        gen = torch.Generator().manual_seed(int(cfg["seed"]) * 1_000_003 + int(cfg["server-round"]) * 1009 + i)
        ni = int(n[i])
        j, sd, _ = client_update(
            models, X[i, :ni], y[i, :ni], lr=float(cfg["lr"]), steps=int(cfg["steps"]), batch=int(cfg["batch"]), gen=gen
        )
        reply = RecordDict(
            {
                "arrays": ArrayRecord({f"c{j}/{name}": v for name, v in sd.items()}),
                "metrics": MetricRecord({"num-examples": ni, "cluster": j}),
            }
        )
        return Message(content=reply, reply_to=msg)

    class _IFCAStrategy(FedAvg):
        """IFCA on Flower: all k models go out (keys ``c{j}/<name>``), each client returns the model it
        trained under its cluster's keys, the server averages per cluster (weighted by examples; equal
        here) and keeps the model of a cluster nobody chose."""

        def __init__(self, k: int, **kwargs):
            super().__init__(**kwargs)
            self.k = k

        def configure_train(self, server_round, arrays, config, grid):
            self._current = arrays
            return super().configure_train(server_round, arrays, config, grid)

        def aggregate_train(self, server_round, replies):
            replies = [r for r in replies if not r.has_error()]
            new = ArrayRecord({name: a for name, a in self._current.items()})
            for j in range(self.k):
                mine = [r.content for r in replies if int(r.content["metrics"]["cluster"]) == j]
                if mine:
                    for name, a in aggregate_arrayrecords(mine, self.weighted_by_key).items():
                        new[name] = a
            return new, None

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        with thread_limits(threads):
            for algo, k, init in jobs:
                kw = dict(
                    fraction_train=S / N_CLIENTS,
                    fraction_evaluate=0.0,
                    min_train_nodes=S,
                    min_available_nodes=N_CLIENTS,
                )
                strategy = _IFCAStrategy(k, **kw) if k > 1 else FedAvg(**kw)
                start = ArrayRecord({f"c{j}/{name}": v[j].clone() for j in range(k) for name, v in init.items()})
                clock = RoundClock()

                def stamp(server_round, arrays, clock=clock):
                    clock.stamp()  # called before round 1 and after every round
                    return None

                cfg = ConfigRecord({"data": data_path, "k": k, "lr": LR, "steps": STEPS, "batch": BATCH, "seed": seed})
                res = strategy.start(
                    grid=grid, initial_arrays=start, num_rounds=rounds, train_config=cfg, evaluate_fn=stamp
                )
                sd = res.arrays.to_torch_state_dict()
                out[algo] = {
                    "clock": clock,
                    "params": {name: torch.stack([sd[f"c{j}/{name}"] for j in range(k)]) for name in init},
                }

    return client_app, server_app


def run_flower(data, jobs: list[tuple[str, int, dict]], rounds: int, seed: int, threads: int, workdir: str) -> dict:
    """One Flower simulation running every job in turn; returns ``{algorithm: result}``."""
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.ERROR)  # per-round INFO and the run_simulation deprecation

    import bench_vs_frameworks as me  # the apps must be importable by Ray workers (not __main__)

    path = os.path.join(workdir, "clients.pt")
    if not os.path.exists(path):
        torch.save((data.X_train, data.y_train, data.n_train), path)
    out: dict = {}
    client_app, server_app = me._flower_apps(jobs, rounds, path, seed, out, threads)
    old_pp = os.environ.get("PYTHONPATH")
    try:
        run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=N_CLIENTS,
            backend_config={
                "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                "init_args": {"num_cpus": int(threads), "log_to_driver": False, "object_store_memory": 256 * 2**20},
            },
        )
    finally:
        if old_pp is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_pp
    missing = [algo for algo, _, _ in jobs if algo not in out]
    if missing:
        raise RuntimeError(f"the Flower run returned no models for {missing} (see the log above)")
    return {algo: out[algo] for algo, _, _ in jobs}


def load() -> str:
    """The 1-minute load average (a shared machine: read the timings with it)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "n/a"


def flower_available() -> bool:
    try:
        import flwr  # noqa: F401
        import flwr.simulation  # noqa: F401
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


# ================================================================================================
# Main
# ================================================================================================
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rounds", type=int, default=None, help="rounds per run at the first --threads setting (default 10; --quick 4)"
    )
    ap.add_argument(
        "--rounds-mt",
        type=int,
        default=3,
        help="rounds per run at the other --threads settings (default 3: their timings only; the "
        "math, hence the accuracy, does not depend on the threads)",
    )
    ap.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 3; --quick 1)")
    ap.add_argument("--quick", action="store_true", help="4 rounds, 1 repeat, threads 1 only (a smoke run)")
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    ap.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    ap.add_argument(
        "--threads", nargs="+", type=int, default=None, help="thread settings to compare (default 1 2; --quick 1)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write every measurement and the summary to this file")
    ap.add_argument(
        "--step-by-step",
        action="store_true",
        help="engine with defer_updates=False (every local step in turn; by default the first layer's "
        "updates are deferred)",
    )
    ap.add_argument(
        "--as-run",
        action="store_true",
        help="also time each engine and loop run as a user runs it (every round and the end-of-run "
        "evaluation), interleaved; prints engine / loop on whole runs",
    )
    args = ap.parse_args(argv)
    global DEFER_UPDATES
    DEFER_UPDATES = not args.step_by_step
    from fedclust import bench
    from fedclust.bench import mm_rate
    from fedclust.clustered_fl import MLP
    from fedclust.clustered_fl.engine import evaluate

    ref = MLP(*SIZES).module().state_dict()
    assert {n: v.shape for n, v in make_module().state_dict().items()} == {n: v.shape for n, v in ref.items()}
    rounds = args.rounds or (4 if args.quick else 10)
    rounds_mt = args.rounds_mt
    repeats = args.repeats or (1 if args.quick else 3)
    threads_list = args.threads or ([1] if args.quick else [1, 2])
    if rounds < 2 or rounds_mt < 2:
        ap.error("--rounds and --rounds-mt must be >= 2 (round 1 is a warm-up)")
    systems = list(args.systems)
    if "flower" in systems and not flower_available():
        print(
            f"Flower is not installed: running {', '.join(s for s in systems if s != 'flower')} only. "
            f"Install the optional extra with\n    {INSTALL_HINT}\n"
        )
        systems.remove("flower")
    if "flower" in systems:
        os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

    _, y, images = bench.mnist_test()
    data = bench.rotated(images, y, n_clients=N_CLIENTS, n=N_TRAIN, n_test=N_TEST, seed=args.seed)
    print(
        f"rotated MNIST (test set): {data.n_clients} clients x {N_TRAIN} train / {N_TEST} test images, 4 rotations, "
        f"MLP {'-'.join(map(str, SIZES))}, {STEPS} SGD steps of batch {BATCH}, lr {LR}, {S} clients/round, "
        f"{rounds} rounds at threads {threads_list[0]} and {rounds_mt} at other settings (round 1 = warm-up, not "
        f"timed), {repeats} repeats, threads {threads_list}, "
        f"systems {systems}, engine defer_updates={DEFER_UPDATES}, load average {load()}\n",
        flush=True,
    )

    runs = []
    workdir = tempfile.mkdtemp(prefix="fedclust_bench_")
    for rep in range(repeats):
        order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
        seed = args.seed + rep  # a new init, client sample and minibatch stream per repeat, shared by all systems
        inits = {name: MLP(*SIZES).init(k, seed) for name, k in ALGOS.items()}
        for threads in threads_list:
            R = rounds if threads == threads_list[0] else rounds_mt
            for system in order:
                t_run = time.perf_counter()
                if system == "flower":  # one simulation (one Ray start) runs every algorithm in turn
                    res = run_flower(data, [(a, ALGOS[a], inits[a]) for a in args.algos], R, seed, threads, workdir)
                    t_run = (time.perf_counter() - t_run) / len(args.algos)
                for algo in args.algos:
                    k = ALGOS[algo]
                    refs = {}
                    if system == "engine":  # the torch.mm references, measured next to every engine run
                        with thread_limits(threads):
                            refs = {
                                "torch_mm_gflops": mm_rate(S * BATCH, SIZES[0], SIZES[1]),
                                "torch_bmm_gflops": mm_rate(S * BATCH, SIZES[0], SIZES[1], batch=S),
                                "torch_mm_one_client_gflops": mm_rate(BATCH, SIZES[0], SIZES[1], reps=200),
                            }
                    if system != "flower":
                        t_run = time.perf_counter()
                        with thread_limits(threads):
                            r = (run_engine if system == "engine" else run_loop)(data, k, inits[algo], R, seed)
                        t_run = time.perf_counter() - t_run
                    whole = None
                    if args.as_run and system != "flower":
                        with thread_limits(threads):
                            whole = as_run(system, data, k, inits[algo], R, seed)
                    else:
                        r = res[algo]
                    ev = evaluate(MLP(*SIZES), r["params"], data, train=False, test=True)
                    wall, cpu, nr = r["clock"].timed()
                    upd = S * nr
                    rec = {
                        "repeat": rep,
                        "seed": seed,
                        "threads": threads,
                        "algo": algo,
                        "system": system,
                        "rounds": R,
                        "timed_rounds": nr,
                        "wall_s": wall,
                        "cpu_s": cpu,
                        "updates_per_s": upd / wall,
                        "cpu_ms_per_update": 1e3 * cpu / upd,
                        "test_accuracy": float(ev["test_accuracy"]),
                        "first_round_s": r["clock"].wall[1] - r["clock"].wall[0],
                        "local_s": r.get("local_s"),
                        "run_wall_s": t_run,
                        "as_run_s": whole,
                        **refs,
                    }
                    runs.append(rec)
                    print(
                        f"  rep {rep} threads {threads} {algo:6s} {system:6s}: {rec['updates_per_s']:8.1f} updates/s, "
                        f"{rec['cpu_ms_per_update']:7.2f} CPU-ms/update, test acc {rec['test_accuracy']:.4f} after {R} "
                        f"rounds (round 1: {rec['first_round_s']:.1f} s" + ")",
                        flush=True,
                    )

    # ------------------------------------------------------------------------------------ summary
    fps = MLP(*SIZES).flops_per_sample()
    flops_local = STEPS * BATCH * fps["train_step"]
    flops_assign = lambda k: k * N_TRAIN * fps["forward"] if k > 1 else 0.0  # noqa: E731
    summary = []
    for threads in threads_list:
        for algo in args.algos:
            row = {"threads": threads, "algo": algo}
            if "engine" in systems:
                for key in ("torch_mm_gflops", "torch_bmm_gflops", "torch_mm_one_client_gflops"):
                    row[key] = statistics.median(
                        r[key]
                        for r in runs
                        if r["threads"] == threads and r["algo"] == algo and r["system"] == "engine"
                    )
            for system in systems:
                rs = [r for r in runs if r["threads"] == threads and r["algo"] == algo and r["system"] == system]
                med = lambda key: statistics.median(r[key] for r in rs)  # noqa: E731
                row[system] = {
                    "updates_per_s": med("updates_per_s"),
                    "cpu_ms_per_update": med("cpu_ms_per_update"),
                    "rounds": rs[0]["rounds"],
                    "first_round_s": med("first_round_s"),
                    "test_accuracy": med("test_accuracy"),
                    "test_accuracy_all": [r["test_accuracy"] for r in rs],
                }
                if system in ("engine", "loop") and args.as_run:
                    row[system]["as_run_s"] = med("as_run_s")
                if system in ("engine", "loop"):
                    row[system]["local_gflops"] = statistics.median(
                        S * r["timed_rounds"] * flops_local / r["local_s"] / 1e9 for r in rs
                    )
            summary.append(row)

    print(
        "\n| threads | algorithm | system | rounds | client updates/s | CPU-ms / update | round 1 (s) | "
        "test accuracy (median; all repeats) | engine speed-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in summary:
        for system in systems:
            s = row[system]
            sp = row["engine"]["updates_per_s"] / s["updates_per_s"] if "engine" in systems else float("nan")
            accs = ", ".join(f"{a:.3f}" for a in s["test_accuracy_all"])
            print(
                f"| {row['threads']} | {row['algo']} | {system} | {s['rounds']} | {s['updates_per_s']:.0f} | "
                f"{s['cpu_ms_per_update']:.2f} | {s['first_round_s']:.1f} | {s['test_accuracy']:.3f} ({accs}) | "
                f"{'' if system == 'engine' else f'{sp:.1f}x'} |"
            )
    if "flower" in systems:
        print("\nround 1 (not in the rates): Flower's includes starting Ray and its client actors.")
    if "engine" in systems:
        print(
            f"\nFLOP rates (GFLOP/s). Local training: {flops_local / 1e6:.0f} MFLOP per client update step by "
            f"step (the nominal count of every rate here; the engine's deferred first layer does less "
            f"arithmetic, see bench_local_rate.py); IFCA's "
            f"cluster estimate adds k x {N_TRAIN} forward passes ({flops_assign(4) / 1e6:.0f} MFLOP at k=4). "
            f"torch.mm: {S * BATCH}x{SIZES[0]} @ {SIZES[0]}x{SIZES[1]} (the first layer of one local step of all "
            f"{S} clients, one shared weight); torch.bmm: {S} x ({BATCH}x{SIZES[0]} @ {SIZES[0]}x{SIZES[1]}) "
            f"(one weight per client, as in the engine); one client: {BATCH}x{SIZES[0]} @ {SIZES[0]}x{SIZES[1]}; "
            f"all measured next to every engine run (medians). "
            f"'ceiling' = client updates/s if every FLOP of a round ran at the torch.mm rate."
        )
        print(
            "| threads | algorithm | engine local | engine whole round | torch.mm | torch.bmm | local / mm | "
            "local / bmm | ceiling updates/s | ceiling / Flower | loop local | mm of one client |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for row in summary:
            e, mm, bmm = row["engine"]["local_gflops"], row["torch_mm_gflops"], row["torch_bmm_gflops"]
            f_upd = flops_local + flops_assign(ALGOS[row["algo"]])
            whole = row["engine"]["updates_per_s"] * f_upd / 1e9
            ceil = mm * 1e9 / f_upd
            fl = row["flower"]["updates_per_s"] if "flower" in systems else float("nan")
            lp = row["loop"]["local_gflops"] if "loop" in systems else float("nan")
            row["engine"]["round_gflops"], row["ceiling_updates_per_s"] = whole, ceil
            print(
                f"| {row['threads']} | {row['algo']} | {e:.1f} | {whole:.1f} | {mm:.1f} | {bmm:.1f} | {e / mm:.2f} | "
                f"{e / bmm:.2f} | {ceil:.0f} | {(f'{ceil / fl:.1f}x' if fl == fl else '-')} | {lp:.1f} | {row['torch_mm_one_client_gflops']:.1f} |"
            )
        print()
        for row in summary:
            for other in ("flower", "loop"):
                if other in systems:
                    sp = row["engine"]["updates_per_s"] / row[other]["updates_per_s"]
                    cpu = row[other]["cpu_ms_per_update"] / row["engine"]["cpu_ms_per_update"]
                    print(
                        f"threads {row['threads']} {row['algo']}: engine / {other} = {sp:.1f}x updates/s, "
                        f"{cpu:.1f}x less CPU per update"
                        + f" (target >= {TARGETS[other]}x: {'yes' if sp >= TARGETS[other] else 'NO'})"
                    )
    if args.as_run and {"engine", "loop"} <= set(systems):
        print("\nWhole runs as a user runs them (every round, the first included, and the end-of-run evaluation):")
        for row in summary:
            e, lp = row["engine"]["as_run_s"], row["loop"]["as_run_s"]
            print(
                f"threads {row['threads']} {row['algo']}: engine {e:.2f} s, loop {lp:.2f} s, engine / loop = "
                f"{lp / e:.1f}x (target >= 6x: {'yes' if lp / e >= 6 else 'NO'})"
            )
    print(
        "\nTimings on a shared machine: compare within this run only (systems interleaved per repeat); "
        f"load average at the end {load()}."
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "config": {
                        "rounds": rounds,
                        "rounds_mt": rounds_mt,
                        "repeats": repeats,
                        "threads": threads_list,
                        "systems": systems,
                        "seed": args.seed,
                    },
                    "runs": runs,
                    "summary": summary,
                },
                indent=1,
            )
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
