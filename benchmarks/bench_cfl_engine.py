"""Benchmark A: vectorized clustered-FL engine vs a per-client-loop engine, many small clients.

Workload: rotated 8x8 digits (scikit-learn), P = 4 rotations (0/90/180/270), 1200 clients
(300 per rotation) with 16 training and 4 test images each, MLP 64-32-10, k = 4 cluster models,
participation 0.2 (240 clients per round), CFL-MGD Option II with H = 10 full-batch heavy-ball steps
(lr 0.1, beta 0.9). The digits are first split into a 1,497-image training pool and a 300-image test
pool; each pool is tiled 4x so that 1200 clients of 16 images fit under ``fedclust.partition.rotation``
(every rotation group draws its own permutation of the tiled pool).

Engines, on the same rounds (same init, same sampled clients):

* ``vectorized (bmm)``: :class:`fedclust.clustered_fl.ClusteredFLEngine` with the hand-batched MLP;
* ``vectorized (vmap)``: the same engine with ``torch.func.vmap(functional_call)`` + autograd;
* ``per-client loop``: one ``nn.Module`` and one ``torch.optim.SGD(momentum=beta)`` per sampled client
  (buffer injected from the server's per-cluster momentum), Python loops over clients and clusters.

Prints rounds/s of each (training rounds only; evaluation excluded for all), the speed-up, and the
largest parameter difference between the loop and the vectorized engine after the common rounds.
Then a full vectorized run reports test accuracy / client ACC.

    .venv/bin/python benchmarks/bench_cfl_engine.py [--quick] [--threads 1]
"""

from __future__ import annotations

import copy
import sys

import numpy as np
import torch
import torch.nn.functional as F

from fedclust import bench
from fedclust.clustered_fl import MLP, ClusteredFLEngine, EngineConfig, FederatedTensors, ServerState


def build_data(n_clients=1200, n=16, n_test=4, seed=0, tile=4) -> FederatedTensors:
    from sklearn.datasets import load_digits

    d = load_digits()
    images, y = d.images / 16.0, d.target
    perm = np.random.default_rng(seed).permutation(len(y))
    te, tr = perm[:300], perm[300:]
    return bench.rotated(
        np.tile(images[tr], (tile, 1, 1)),
        np.tile(y[tr], tile),
        n_clients=n_clients,
        n=n,
        n_test=n_test,
        seed=seed,
        images_test=np.tile(images[te], (tile, 1, 1)),
        y_test=np.tile(y[te], tile),
    )


class LoopEngine:
    """The naive reference: the same algorithm with Python loops over clients (and clusters)."""

    def __init__(self, engine: ClusteredFLEngine):
        self.e = engine

    def step(self, state: ServerState) -> ServerState:
        e, d = self.e, self.e.data
        t = state.round + 1
        lr = e.lr_at(t)
        clients = e.sample_clients()
        models = []
        for j in range(e.k):
            mod = e.model.module()
            mod.load_state_dict({name: v[j] for name, v in state.params.items()})
            models.append(mod)
        sums = [{name: torch.zeros_like(v[0]) for name, v in state.params.items()} for _ in range(e.k)]
        msums = [{name: torch.zeros_like(v[0]) for name, v in state.params.items()} for _ in range(e.k)]
        counts = [0] * e.k
        for i in clients:  # the per-client loop the vectorized engine replaces
            ni = int(d.n_train[i])
            x, y = d.X_train[i, :ni], d.y_train[i, :ni]
            with torch.no_grad():
                losses = [F.cross_entropy(models[j](x), y).item() for j in range(e.k)]
            j = int(np.argmin(losses))
            mod = copy.deepcopy(models[j])
            opt = torch.optim.SGD(mod.parameters(), lr=lr, momentum=e.beta)
            if e.beta > 0:
                for name, p in mod.named_parameters():
                    opt.state[p]["momentum_buffer"] = state.momentum[name][j].clone()
            for _ in range(e.local_steps):
                opt.zero_grad()
                F.cross_entropy(mod(x), y).backward()
                opt.step()
            counts[j] += 1
            for name, p in mod.named_parameters():
                sums[j][name] += p.detach()
                if e.beta > 0:
                    msums[j][name] += opt.state[p]["momentum_buffer"]
        params = {name: v.clone() for name, v in state.params.items()}
        mom = {name: v.clone() for name, v in state.momentum.items()}
        for j in range(e.k):
            if counts[j]:
                for name in params:
                    params[name][j] = sums[j][name] / counts[j]
                    if e.beta > 0:
                        mom[name][j] = msums[j][name] / counts[j]
        return ServerState(params=params, momentum=mom, round=t)


def time_rounds(step, state, rounds):
    def go():
        nonlocal state
        for _ in range(rounds):
            state = step(state)
        return state

    return bench.timed(go)


def main(argv=None):
    # --threads 1 suits these tiny per-client tensors on a shared 2-core machine
    ap = bench.parser(__doc__, quick="fewer rounds (< 1 minute)", threads=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    with bench.session(args):
        return run(args)


def run(args):
    data = build_data(seed=args.seed)
    loop_rounds, vec_rounds, full_rounds = (2, 20, 60) if args.quick else (5, 100, 300)
    cfg = dict(rounds=full_rounds, lr=0.1, beta=0.9, local_steps=10, participation=0.2, seed=args.seed, eval_every=0)
    print(
        f"rotated digits 8x8: {data.n_clients} clients x {int(data.n_train[0])} train / {int(data.n_test[0])} "
        f"test images, P=4, MLP 64-32-10, k=4, q=0.2 ({int(round(0.2 * data.n_clients))} clients/round), "
        f"H=10 full-batch heavy-ball steps, threads={torch.get_num_threads()}\n"
    )

    rows = []
    engines = {}
    for impl in ("bmm", "vmap"):
        eng = ClusteredFLEngine(data, MLP(64, 32, 10, impl=impl), EngineConfig(k=4, **cfg))
        st0 = eng.init_state()
        eng.step(st0)  # warm-up (not timed), then reset the streams for a fair comparison
        eng = ClusteredFLEngine(data, MLP(64, 32, 10, impl=impl), EngineConfig(k=4, **cfg))
        st0 = eng.init_state()
        st_common, dt_common = time_rounds(lambda s: eng.step(s)[0], st0, loop_rounds)
        _, dt = time_rounds(lambda s: eng.step(s)[0], st_common, vec_rounds - loop_rounds)
        rows.append((f"vectorized ({impl})", vec_rounds, dt_common + dt))
        engines[impl] = st_common

    ref = ClusteredFLEngine(data, MLP(64, 32, 10), EngineConfig(k=4, **cfg))
    loop = LoopEngine(ref)
    st_loop, dt_loop = time_rounds(loop.step, ref.init_state(), loop_rounds)
    rows.append(("per-client loop", loop_rounds, dt_loop))
    loop_rate = loop_rounds / dt_loop

    bench.table(
        ["engine", "rounds timed", "wall (s)", "rounds/s", "speed-up vs loop"],
        [(name, r, f"{dt:.2f}", f"{r / dt:.2f}", f"{r / dt / loop_rate:.1f}x") for name, r, dt in rows],
    )
    for impl, st in engines.items():
        diff = max(float((st.params[k] - st_loop.params[k]).abs().max()) for k in st.params)
        mdiff = max(float((st.momentum[k] - st_loop.momentum[k]).abs().max()) for k in st.momentum)
        print(
            f"max |param diff| loop vs vectorized ({impl}) after {loop_rounds} common rounds: {diff:.2e} "
            f"(momentum {mdiff:.2e})"
        )
    speed = rows[0][1] / rows[0][2] / loop_rate
    print(
        f"vectorized (bmm) is {speed:.1f}x faster than the per-client loop (target >= 10x): "
        f"{'yes' if speed >= 10 else 'NO'}"
    )

    res, wall = bench.timed(
        ClusteredFLEngine(data, MLP(64, 32, 10), EngineConfig(k=4, **{**cfg, "test_select": "train"})).run
    )
    fin = res.info["final"]
    print(
        f"\nfull vectorized CFL-MGD run, {full_rounds} rounds incl. final evaluation: "
        f"{wall:.1f} s; test accuracy {fin['test_accuracy']:.4f} (each client picks its "
        f"model by its training loss), client ACC {fin['client_ACC']:.3f}, NMI {fin['client_NMI']:.3f}, "
        f"final cluster sizes {np.bincount(res.assignment, minlength=4).tolist()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
