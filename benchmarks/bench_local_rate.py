"""Local training of the clustered-FL engine against the small-GEMM rate and a per-client loop.

Workload: the local update of the rotated-MNIST comparison (``bench_vs_frameworks.py``): S clients
(default 32) of 30 samples with 784 features, MLP 784-200-10, 10 SGD steps of minibatches of 10 drawn
without replacement per step, lr 0.1. Random inputs: the FLOP rate does not depend on the pixels.

Cases, interleaved in every repeat (``fedclust.bench.interleaved``; medians over ``--repeats``):

* ``mm 10x784 @ 784x200``: the reference, one client's first-layer product (torch.mm), repeated;
* ``engine``: :func:`fedclust.clustered_fl.engine.local_train` of all S clients at once, step by step;
* ``engine, blocks of b``: the same with ``client_block=b`` (client-major: each block of b clients
  runs all its steps before the next, so its weights stay in cache);
* ``engine, deferred first layer``: ``defer_updates=True`` (:meth:`MLP.deferred_steps_`: the first
  layer's weight updates of all steps folded into one product at the end; also with blocks);
* ``loop``: one ``nn.Sequential`` + ``torch.optim.SGD`` per client, the per-client loop.

GFLOP/s count the FLOPs of the local steps (forward + the backward the engine needs:
``MLP.flops_per_sample()["train_step"]`` x 10 samples x 10 steps per client), for the loop as well.
Every case is compared with the all-at-once engine result (bit for bit, or the largest difference:
the deferred cases and the loop differ in the last bits).

    python benchmarks/bench_local_rate.py [--clients 32] [--blocks 1,4,8] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from fedclust import bench
from fedclust.clustered_fl import MLP
from fedclust.clustered_fl.engine import local_train

SIZES, N, STEPS, BATCH, LR = (784, 200, 10), 30, 10, 10, 0.1


def loop_train(model: MLP, params, X, y, idx):
    """Per-client loop with the engine's minibatches ``idx`` (steps, S, BATCH)."""
    out = {k: [] for k in params}
    mod = model.module()
    for b in range(X.shape[0]):
        mod.load_state_dict({k: v[b] for k, v in params.items()})
        opt = torch.optim.SGD(mod.parameters(), lr=LR)
        for s in range(STEPS):
            i = idx[s][b]
            opt.zero_grad()
            F.cross_entropy(mod(X[b, i]), y[b, i]).backward()
            opt.step()
        for k, p in mod.state_dict().items():
            out[k].append(p.detach().clone())
    return {k: torch.stack(v) for k, v in out.items()}


def engine_draws(S: int, seed: int):
    """The minibatch indices the engine draws with ``gen`` seeded ``seed`` (all clients hold N samples:
    per step the first BATCH of a stable argsort of uniform keys)."""
    g = np.random.default_rng(seed)
    return [torch.as_tensor(np.argsort(g.random((S, N)), axis=1, kind="stable")[:, :BATCH]) for _ in range(STEPS)]


def main():
    ap = bench.parser(__doc__, threads=1)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--blocks", default="1,4,8", help="client_block sizes to try, comma separated")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mm-reps", type=int, default=300, help="products per timing of the mm reference")
    a = ap.parse_args()
    with bench.session(a):
        S = a.clients
        model = MLP(*SIZES)
        g = torch.Generator().manual_seed(0)
        X, y = torch.rand(S, N, SIZES[0], generator=g), torch.randint(0, 10, (S, N), generator=g)
        n = torch.full((S,), N)
        params = model.init(S, 0)
        A, W = torch.randn(BATCH, SIZES[0]), torch.randn(SIZES[0], SIZES[1])
        flops = S * STEPS * BATCH * model.flops_per_sample()["train_step"]
        mm_flops = a.mm_reps * 2.0 * BATCH * SIZES[0] * SIZES[1]

        def mm():
            for _ in range(a.mm_reps):
                torch.mm(A, W)

        def engine(block, defer=False):
            return lambda: local_train(
                model,
                params,
                None,
                X,
                y,
                n,
                steps=STEPS,
                lr=LR,
                batch_size=BATCH,
                gen=np.random.default_rng(7),
                client_block=block,
                defer_updates=defer,
            )[0]

        cases = {"mm 10x784 @ 784x200": mm, "engine": engine(None), "engine, deferred first layer": engine(None, True)}
        for b in (int(v) for v in a.blocks.split(",") if v):
            cases[f"engine, blocks of {b}"] = engine(b)
            cases[f"engine, deferred, blocks of {b}"] = engine(b, True)
        cases["loop"] = lambda: loop_train(model, params, X, y, engine_draws(S, 7))
        results: dict = {}
        med = bench.interleaved(cases, repeats=a.repeats, warmup=True, results=results)
        ref = results["engine"]
        rows = []
        mm_rate = mm_flops / med["mm 10x784 @ 784x200"] / 1e9
        for name, sec in med.items():
            if name.startswith("mm"):
                rows.append([name, bench.fmt(sec * 1e3, 4), f"{mm_rate:.1f}", "1.00", "", ""])
                continue
            rate = flops / sec / 1e9
            r = results[name]
            same = (
                "bit-identical"
                if all(torch.equal(r[k], ref[k]) for k in ref)
                else f"max diff {max(float((r[k] - ref[k]).abs().max()) for k in ref):.1e}"
            )
            rows.append(
                [
                    name,
                    bench.fmt(sec * 1e3, 4),
                    f"{rate:.1f}",
                    f"{rate / mm_rate:.2f}",
                    f"{med['loop'] / sec:.1f}x",
                    same,
                ]
            )
        bench.table(
            ["case", "ms (median)", "GFLOP/s", "/ mm reference", "speed-up vs loop", "vs engine all-at-once"],
            rows,
            title=f"Local training, {S} clients x {STEPS} steps of batch {BATCH}, MLP "
            f"{'-'.join(map(str, SIZES))}, {torch.get_num_threads()} thread(s), "
            f"{a.repeats} interleaved repeats",
        )


if __name__ == "__main__":
    main()
