"""Local training of the clustered-FL engine against the small-GEMM rate and a per-client loop.

Workload: the local update of the rotated-MNIST comparison (``bench_vs_frameworks.py``): S clients
(default 32) of 30 samples with 784 features, MLP 784-200-10, 10 SGD steps of minibatches of 10 drawn
without replacement per step, lr 0.1. Random inputs: the FLOP rate does not depend on the pixels.
As in a round of IFCA, the clients start from ``--k`` cluster models (default 4; each client's copy
gathered from the one it chose, at random); ``--k 0`` gives every client a model of its own.

Cases, interleaved in every repeat (``fedclust.bench.interleaved``; medians over ``--repeats``):

* ``mm 10x784 @ 784x200``: the reference, one client's first-layer product of one step (torch.mm),
  repeated; ``mm 30x784 @ 784x200``: the product of the deferred kernel's own shape (the first layer
  over a client's 30 samples, which the ``"samples"`` plan computes), repeated;
* ``engine (default)``: :func:`fedclust.clustered_fl.engine.local_train` of all S clients at once as
  the engine runs it: the first layer's updates deferred (:meth:`MLP.deferred_steps_`, the way
  :meth:`MLP.deferred_plan` picks: here over each client's 30 samples), told which cluster model each
  client starts from (its start models as ``GatheredParams(models, index)``, as the engine passes
  them), so that every start matrix is read once and the clients' copies are not made;
* ``engine, deferred, per-client starts``: the same from the clients' own copies: every client's first product
  and final update read its own copy of the start weights (the kernel before shared starts);
* ``engine, deferred, blocks of b``: the same with ``client_block=b`` (client-major blocks);
* ``engine, step by step``: ``defer_updates=False``, every step in turn (also with blocks);
* ``loop``: one ``nn.Sequential`` + ``torch.optim.SGD`` per client, the per-client loop.

Two FLOP rates: ``GFLOP/s (nominal)`` counts the FLOPs of the step-by-step local update (forward +
the backward it needs: ``MLP.flops_per_sample()["train_step"]`` x 10 samples x 10 steps per client),
for every case alike: the rate at which the local update gets done. ``GFLOP/s (done)`` counts the
arithmetic a case actually performs (the deferred ways do less: one product over a client's samples
replaces one per step); its ratio to the references (``done / mm``: the 10-row product; ``done / mm own``: the 30-row
product) says how close the kernels run to the machine's small-GEMM rate. The deferred update also
has to write every trained first-layer matrix (20 MB) and, without shared starts, read every start
copy: ``floor / time`` sets the time at the mm rate plus one copy of the first-layer weights
(measured in the same repeats) against the measured time. Every case is compared with the per-client loop (largest difference of any
parameter: float rounding only).

    python benchmarks/bench_local_rate.py [--clients 32] [--blocks 1,4,8] [--repeats 5] [--threads 1]

Measured on the shared 2-core development machine at load 2.3 (``OMP_NUM_THREADS=1 python
benchmarks/bench_local_rate.py --repeats 5 --blocks 8``, three runs): the engine's default (deferred,
``"samples"`` plan, 32 clients from 4 start models) took 11.9, 11.9 and 15.7 ms (the last while
the references slowed too), its arithmetic at 0.80-0.84 of the 10-row product and 0.63-0.64 of the
product of its own shape (30 rows, 72-97 GFLOP/s); floor / time 0.87-0.93. The same kernel reading
every client's copy of the start weights, in the same runs: 0.57-0.59 of the own-shape product in
the first two (12.7 and 13.3 ms), 0.42 in the third (before shared starts: 0.55 at load 0.75).
The results are the same bits either way. Where the rest goes, timed alone (warm caches, load 2):
the first products 3.0-3.3 ms, ``X X^T`` 0.85 ms, the ten steps 2.5-2.7 ms (small batched
products of the layers above the first: ``(10x200) @ (200x10)`` per client, a softmax over 10
classes, ...), the final ``W0 - lr E^T X`` 3.4 ms (a 30-deep product that writes 20 MB), so the
kernel stays under 0.7 of the 30-row product that keeps one weight matrix in cache: the first
products and the final update run at 0.9-1.0 of its rate, the steps and ``X X^T`` far below it.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F

from fedclust import bench
from fedclust.clustered_fl import MLP
from fedclust.clustered_fl.engine import GatheredParams, LocalTraining, local_train

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
    ap.add_argument("--k", type=int, default=4, help="distinct start models (IFCA's k); 0: one per client")
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
        if a.k > 0:  # a round of IFCA: every client starts from the cluster model it chose
            models = model.init(a.k, 0)
            index = torch.as_tensor(np.random.default_rng(1).integers(0, a.k, S))
            params = {name: v.index_select(0, index) for name, v in models.items()}
            starts = (models, index)
        else:
            params, starts = model.init(S, 0), None
        A, W = torch.randn(BATCH, SIZES[0]), torch.randn(SIZES[0], SIZES[1])
        A_own = torch.randn(N, SIZES[0])
        flops = S * STEPS * BATCH * model.flops_per_sample()["train_step"]
        mm_flops = a.mm_reps * 2.0 * BATCH * SIZES[0] * SIZES[1]

        def mm():
            for _ in range(a.mm_reps):
                torch.mm(A, W)

        def mm_own():
            for _ in range(a.mm_reps):
                torch.mm(A_own, W)

        def engine(block, defer=False, shared=True):  # defer=True: the default of the engine
            return lambda: local_train(
                model,
                GatheredParams(*starts) if shared and starts is not None else params,
                None,
                X,
                y,
                n,
                LocalTraining(steps=STEPS, lr=LR, batch_size=BATCH, client_block=block, defer_updates=defer),
                gen=np.random.default_rng(7),
            )[0]

        W_all = params["0.weight"]
        cases = {
            "mm 10x784 @ 784x200": mm,
            "mm 30x784 @ 784x200": mm_own,
            "copy of the first-layer weights": lambda: W_all.clone(),
            "engine (default)": engine(None, True),
        }
        if starts is not None:
            cases["engine, deferred, per-client starts"] = engine(None, True, shared=False)
        blocks = [int(v) for v in a.blocks.split(",") if v]
        for b in blocks:
            cases[f"engine, deferred, blocks of {b}"] = engine(b, True)
        cases["engine, step by step"] = engine(None)
        for b in blocks:
            cases[f"engine, step by step, blocks of {b}"] = engine(b)
        cases["loop"] = lambda: loop_train(model, params, X, y, engine_draws(S, 7))
        results: dict = {}
        med = bench.interleaved(cases, repeats=a.repeats, warmup=True, results=results)
        ref = results["loop"]
        plan = model.deferred_plan(N, STEPS * BATCH)
        done = {True: S * deferred_flops(model, plan, N, STEPS, BATCH), False: flops}
        rows = []
        mm_rate = mm_flops / med["mm 10x784 @ 784x200"] / 1e9
        own_rate = mm_flops * N / BATCH / med["mm 30x784 @ 784x200"] / 1e9
        copy_name = "copy of the first-layer weights"
        for name, sec in med.items():
            if name.startswith("mm"):
                r = mm_rate if name.startswith("mm 10") else own_rate
                rows.append(
                    [
                        name,
                        bench.fmt(sec * 1e3, 4),
                        f"{r:.1f}",
                        f"{r / mm_rate:.2f}",
                        f"{r:.1f}",
                        f"{r / mm_rate:.2f}",
                        f"{r / own_rate:.2f}",
                        "",
                        "",
                        "",
                    ]
                )
                continue
            if name.startswith("copy"):
                rows.append([name, bench.fmt(sec * 1e3, 4), "", "", "", "", "", "", "", ""])
                continue
            rate = flops / sec / 1e9
            real = done[name != "loop" and "step by step" not in name] / sec / 1e9
            r = results[name]
            diff = max(float((r[k] - ref[k]).abs().max()) for k in ref)
            # the machine's floor: the arithmetic done at the mm rate plus one read of every client's start
            # weights and one write of its trained weights (the copy's traffic)
            floor = done[name != "loop" and "step by step" not in name] / (mm_rate * 1e9) + med[copy_name]
            rows.append(
                [
                    name,
                    bench.fmt(sec * 1e3, 4),
                    f"{rate:.1f}",
                    f"{rate / mm_rate:.2f}",
                    f"{real:.1f}",
                    f"{real / mm_rate:.2f}",
                    f"{real / own_rate:.2f}",
                    f"{floor / sec:.2f}",
                    f"{med['loop'] / sec:.1f}x",
                    f"{diff:.1e}",
                ]
            )
        bench.table(
            [
                "case",
                "ms (median)",
                "GFLOP/s (nominal)",
                "nominal / mm",
                "GFLOP/s (done)",
                "done / mm",
                "done / mm own",
                "floor / time",
                "speed-up vs loop",
                "max diff vs loop",
            ],
            rows,
            title=f"Local training, {S} clients ({starts_text(a.k)}) x {STEPS} steps of batch {BATCH}, MLP "
            f"{'-'.join(map(str, SIZES))}, {torch.get_num_threads()} thread(s), "
            f"{a.repeats} interleaved repeats; deferred plan: {plan}; load average {load()}",
        )
        print(
            f"nominal: {flops / S / 1e6:.1f} MFLOP per client update (step by step); done by the deferred plan: "
            f"{done[True] / S / 1e6:.1f} MFLOP. floor / time: (FLOPs done at the mm rate + one copy of the "
            f"{S} clients' first-layer weights, {W_all.numel() * W_all.element_size() / 2**20:.0f} MB) / time: "
            f"1.00 = as fast as this machine's small GEMM and memory allow."
        )


def starts_text(k: int) -> str:
    return f"starting from {k} models" if k > 0 else "each from its own model"


def load() -> str:
    """The 1-minute load average (a shared machine: read the timings with it)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "n/a"


def deferred_flops(model: MLP, plan: str | None, n: int, steps: int, batch: int) -> float:
    """FLOPs of one client's local update as :meth:`MLP.deferred_steps_` runs it with ``plan`` (equal
    batches of ``batch`` rows): the first layer's products of that plan, and the later layers step by
    step (forward, weight gradients, input gradients)."""
    d, h = model.sizes[0], model.sizes[1]
    R = steps * batch
    later = 6.0 * sum(a * b for a, b in zip(model.sizes[1:-1], model.sizes[2:])) * R
    if plan == "samples":  # X W0^T and E^T X over the n samples, X X^T, step t's (b x n) @ (n x h)
        first = 4.0 * n * d * h + (2.0 * n * n * d if steps > 1 else 0.0) + 2.0 * (R - batch) * n * h
    elif plan == "rows":  # the same over the R stacked rows; step t's Gram block and correction
        first = 4.0 * R * d * h + 2.0 * (d + h) * batch * batch * steps * (steps - 1) / 2
    else:
        return model.flops_per_sample()["train_step"] * R
    return first + later + 2.0 * R * h  # + the bias updates (sums of the errors)


if __name__ == "__main__":
    main()
