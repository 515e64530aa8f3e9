"""Loop order and device of the clustered-FL engine: client-major blocks (``client_block``) give the
same models as all clients at once, and the device parameter picks where the models live."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cfl_synthetic import two_group_clients

from fedclust.clustered_fl import MLP, ClusteredFLEngine, EngineConfig, LocalTraining, local_train
from fedclust.clustered_fl import models as models_module
from fedclust.clustered_fl.engine import bytes_per_client, resolve_device
from fedclust.clustered_fl.engine.data import GatheredParams
from fedclust.clustered_fl.engine.kernels import _Batcher


def _data(n_clients=30, n_max=10, d=8, n_classes=3, seed=0):
    return two_group_clients(seed, n_clients, n_max, d, n_classes, 3, min_size=2)


@pytest.mark.parametrize(
    "kw",
    [{"beta": 0.9, "batch_size": 3}, {"beta": 0.5, "batch_size": 4, "local_epochs": 2}, {"beta": 0.0}],
    ids=["minibatch_momentum", "epochs_with_empty_batches", "full"],
)
def test_client_major_blocks_equal_all_clients_at_once(kw):
    """Blocks read the round's minibatch draws from one tape: every client gets the same batches and
    the same per-client arithmetic, so the models are equal bit for bit, and so is the next draw."""
    data = _data()
    model = MLP(8, 6, 3)
    runs = []
    for block in (None, 1, 4):
        eng = ClusteredFLEngine(
            data,
            model,
            EngineConfig(
                k=2, rounds=3, lr=0.3, local_steps=3, participation=0.5, seed=2, client_block=block, device="cpu", **kw
            ),
        )
        runs.append((eng, eng.run()))
    (e0, r0), *rest = runs
    for e, r in rest:
        for n in r0.params:
            assert torch.equal(r0.params[n], r.params[n]), n
            assert torch.equal(r0.momentum[n], r.momentum[n]), n
        assert e.rngs["minibatch"].bit_generator.state == e0.rngs["minibatch"].bit_generator.state
        assert r.history["cluster_sizes"] == r0.history["cluster_sizes"]


def test_local_train_blocks_leave_inputs_untouched_and_train_every_block():
    model = MLP(8, 5, 3)
    g = torch.Generator().manual_seed(1)
    X, y = torch.randn(7, 6, 8, generator=g), torch.randint(0, 3, (7, 6), generator=g)
    n = torch.tensor([6, 3, 5, 6, 2, 4, 6])
    params = model.init(7, 0)
    before = {k: v.clone() for k, v in params.items()}
    whole, _ = local_train(
        model, params, None, X, y, n, LocalTraining(steps=2, lr=0.5, batch_size=2), gen=np.random.default_rng(5)
    )
    blocks, _ = local_train(
        model,
        params,
        None,
        X,
        y,
        n,
        LocalTraining(steps=2, lr=0.5, batch_size=2, client_block=3),
        gen=np.random.default_rng(5),
    )
    for k in params:
        assert torch.equal(params[k], before[k])
        assert torch.equal(whole[k], blocks[k])
        assert not torch.equal(blocks[k][6], before[k][6])  # the last, partial block trained too


def test_resolve_device_and_errors():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device(None) == resolve_device("auto")
    with pytest.raises(ValueError, match="device"):
        resolve_device("tpu-ish")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="client_block"):
        ClusteredFLEngine(_data(), MLP(8, 6, 3), EngineConfig(k=2, client_block=0))


@pytest.mark.allow_skip("needs a CUDA device: runs where one is lent")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_run_matches_cpu_run():
    """Same code path on the GPU: the models agree with the CPU run up to float rounding, the
    bookkeeping (choices, sizes) exactly, and the results come back on the CPU."""
    data = _data()
    kw = {"rounds": 3, "lr": 0.3, "local_steps": 3, "participation": 0.5, "seed": 2, "beta": 0.9, "batch_size": 3}
    cpu = ClusteredFLEngine(data, MLP(8, 6, 3), EngineConfig(k=2, device="cpu", **kw)).run()
    gpu = ClusteredFLEngine(data, MLP(8, 6, 3), EngineConfig(k=2, device="cuda", **kw)).run()
    for n in cpu.params:
        assert gpu.params[n].device.type == "cpu"
        torch.testing.assert_close(gpu.params[n], cpu.params[n], atol=1e-4, rtol=1e-4)
    assert gpu.history["cluster_sizes"] == cpu.history["cluster_sizes"]
    np.testing.assert_array_equal(gpu.assignment, cpu.assignment)


def _loop_sgd(model, params, X, y, batches, lr):
    """Per-client loop reference: nn.Module + torch.optim.SGD on the given per-step index batches."""
    import torch.nn.functional as F

    out = {k: [] for k in params}
    for b in range(X.shape[0]):
        mod = model.module()
        mod.load_state_dict({k: v[b].clone() for k, v in params.items()})
        opt = torch.optim.SGD(mod.parameters(), lr=lr)
        for idx in batches[b]:
            opt.zero_grad()
            F.cross_entropy(mod(X[b, idx]), y[b, idx]).backward()
            opt.step()
        for k, p in mod.named_parameters():
            out[k].append(p.detach().clone())
    return {k: torch.stack(v) for k, v in out.items()}


def _force_plan(model, plan):
    """Make ``model`` defer with ``plan`` whatever its cost model says; returns the list of the plans
    its deferred path ran with (one entry per deferred block of clients)."""
    ran = []
    model.deferred_plan = lambda n_max, rows: plan
    inner = model.deferred_steps_

    def spy(w, X, steps, lr, starts=None):
        done = inner(w, X, steps, lr, starts=starts)
        if done:
            ran.append(plan)
        return done

    model.deferred_steps_ = spy
    return ran


@pytest.mark.parametrize("plan", ["samples", "rows"])
@pytest.mark.parametrize("batch_size", [3, None], ids=["minibatch", "full_batch"])
@pytest.mark.parametrize("hidden", [(16,), (7, 5), ()])
@pytest.mark.parametrize("client_block", [None, 2])
def test_deferred_first_layer_equals_per_client_loop(hidden, client_block, batch_size, plan):
    """``defer_updates``: the first layer's updates folded into one product (over the stacked rows of
    the steps, or over each client's own samples) give the per-client SGD loop's models (float
    rounding only), and the caller's parameters are left untouched."""
    model = MLP(12, hidden, 4)
    ran = _force_plan(model, plan)
    g = torch.Generator().manual_seed(0)
    B, n_max, steps = 5, 9, 4
    X, y = torch.randn(B, n_max, 12, generator=g), torch.randint(0, 4, (B, n_max), generator=g)
    n = torch.tensor([9, 9, 5, 9, 2])  # unequal: padding rows must not leak into the sums
    params = model.init(B, 1)
    before = {k: v.clone() for k, v in params.items()}
    got, _ = local_train(
        model,
        params,
        None,
        X,
        y,
        n,
        LocalTraining(steps=steps, lr=0.3, batch_size=batch_size, client_block=client_block),
        gen=np.random.default_rng(2),
    )
    assert ran == [plan] * (1 if client_block is None else 3)
    if batch_size is None:
        draws = [[torch.arange(int(n[b]))] * steps for b in range(B)]
    else:  # the engine's draws: per step, the first batch_size of a stable argsort (padding last)
        keys = np.random.default_rng(2)
        valid = np.arange(n_max)[None, :] < n.numpy()[:, None]
        perms = [
            np.argsort(np.where(valid, keys.random((B, n_max)), np.inf), axis=1, kind="stable") for _ in range(steps)
        ]
        draws = [[torch.as_tensor(p[b, : min(batch_size, int(n[b]))]) for p in perms] for b in range(B)]
    ref = _loop_sgd(model, params, X, y, draws, 0.3)
    for k in params:
        assert torch.equal(params[k], before[k]), k
        torch.testing.assert_close(got[k], ref[k], atol=2e-6, rtol=1e-5)
        assert not torch.equal(got[k], before[k])


def test_deferred_plan_follows_the_cost_of_each_way():
    """The cost model defers over the clients' samples when the steps draw more rows than a client
    holds, over the stacked rows when there are few of them next to the hidden width, and not at all
    when either would cost more than the steps (narrow first layer, few rows per client)."""
    wide, narrow = MLP(784, 200, 10), MLP(784, 32, 10)
    assert wide.deferred_plan(30, 100) == "samples"  # 10 steps of 10 on 30 samples (bench_vs_frameworks)
    assert narrow.deferred_plan(60, 600) == "samples"  # 10 full-batch steps on 60 samples
    assert wide.deferred_plan(1000, 100) == "rows"  # 10 steps of 10 on 1000 samples
    assert narrow.deferred_plan(1000, 100) is None
    assert MLP(784, 200, 10, impl="vmap").deferred_plan(30, 100) is None


def test_engine_defers_by_default_and_defer_updates_false_steps():
    """The engine defers by default (same models as step by step up to float rounding); with
    ``defer_updates=False`` it runs the steps one by one."""
    data = _data(n_max=10, d=8)
    kw = {"rounds": 2, "lr": 0.3, "local_steps": 4, "participation": 0.5, "seed": 2, "device": "cpu"}
    runs = {}
    for defer in (True, False, None):
        model = MLP(8, 64, 3)
        ran = _force_plan(model, "samples") if defer is not False else []
        model_kw = {} if defer is None else {"defer_updates": defer}
        eng = ClusteredFLEngine(data, model, EngineConfig(k=2, **model_kw, **kw))
        runs[defer] = (eng.run(), ran, eng.defer_updates)
    assert runs[None][2] is True and runs[False][2] is False
    assert runs[None][1] == ["samples"] * 2 and runs[False][1] == []
    for n in runs[True][0].params:
        assert torch.equal(runs[None][0].params[n], runs[True][0].params[n])
        torch.testing.assert_close(runs[True][0].params[n], runs[False][0].params[n], atol=1e-6, rtol=1e-5)


def test_deferred_path_falls_back_on_empty_batches_and_agrees_with_steps():
    """Unequal clients with local epochs have empty batches: the step-by-step path runs (on copies)."""
    data = _data()
    kw = {
        "rounds": 2,
        "lr": 0.3,
        "local_steps": 3,
        "participation": 0.5,
        "seed": 2,
        "batch_size": 4,
        "local_epochs": 2,
        "device": "cpu",
    }
    a = ClusteredFLEngine(data, MLP(8, 6, 3), EngineConfig(k=2, defer_updates=False, **kw)).run()
    model = MLP(8, 6, 3)
    ran = _force_plan(model, "samples")
    b = ClusteredFLEngine(data, model, EngineConfig(k=2, defer_updates=True, **kw)).run()
    assert ran == []
    for n in a.params:
        assert torch.equal(a.params[n], b.params[n])


@pytest.mark.parametrize("plan", ["samples", "rows"])
def test_deferred_engine_chunked_equals_whole_and_matches_step_by_step(plan):
    data = _data(seed=3)
    kw = {"rounds": 3, "lr": 0.3, "local_steps": 3, "participation": 0.5, "seed": 2, "batch_size": 3, "device": "cpu"}
    model = MLP(8, 6, 3)
    mb = 3.5 * bytes_per_client(model, model.init(1, 0), int(data.X_train.shape[1]), data.d, batch_size=3) / 2**20
    steps = ClusteredFLEngine(data, model, EngineConfig(k=2, defer_updates=False, **kw)).run()
    _force_plan(model, plan)
    whole = ClusteredFLEngine(data, model, EngineConfig(k=2, **kw)).run()
    chunked = ClusteredFLEngine(data, model, EngineConfig(k=2, max_chunk_mb=mb, **kw)).run()
    assert chunked.info["chunks_per_round"] > 1
    for n in whole.params:
        assert torch.equal(whole.params[n], chunked.params[n])
        torch.testing.assert_close(whole.params[n], steps.params[n], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("batch_size", [3, None], ids=["minibatch", "full_batch"])
def test_declined_deferral_steps_with_the_same_draws_bit_for_bit(batch_size):
    """When the cost model declines, the steps run one by one on the draws already made: the models
    equal those of ``defer_updates=False`` bit for bit, and the next draw of the stream agrees."""
    g = torch.Generator().manual_seed(4)
    B, n_max = 6, 9
    X, y = torch.randn(B, n_max, 12, generator=g), torch.randint(0, 4, (B, n_max), generator=g)
    n = torch.tensor([9, 4, 9, 2, 9, 7])
    out = {}
    for defer in (True, False):
        model = MLP(12, (16,), 4)
        ran = _force_plan(model, None)
        gen = np.random.default_rng(5)
        settings = LocalTraining(steps=4, lr=0.3, batch_size=batch_size, defer_updates=defer)
        out[defer] = (local_train(model, model.init(B, 1), None, X, y, n, settings, gen=gen)[0], gen.random())
        assert ran == []
    for k in out[True][0]:
        assert torch.equal(out[True][0][k], out[False][0][k]), k
    assert out[True][1] == out[False][1]


@pytest.mark.parametrize("plan", ["samples", "rows"])
@pytest.mark.parametrize("batch_size", [3, None], ids=["minibatch", "full_batch"])
@pytest.mark.parametrize("client_block", [None, 4])
@pytest.mark.parametrize(
    ("starts_of", "stack_rows"),
    [([2, 0, 2, 0, 1, 1, 2, 1, 0], 4096), ([2, 0, 2, 0, 1, 1, 2, 1, 0], 18), ([0] * 9, 4096)],
    ids=["three_models", "three_models_few_rows_per_product", "one_model"],
)
def test_shared_starts_multiply_each_start_once_with_the_same_bits(
    plan, batch_size, client_block, starts_of, stack_rows, monkeypatch
):
    """Clients that start from 3 models (or one; given as ``GatheredParams``, as in a round of IFCA): the deferred path
    multiplies each start matrix with the rows of the clients that share it (at most ``STACK_ROWS``
    rows at a time; a block of one client reads its own copy) and gives the models of the per-client
    copies bit for bit; nothing passed in changes."""
    model = MLP(12, (16,), 4)
    _force_plan(model, plan)
    monkeypatch.setattr(models_module, "STACK_ROWS", stack_rows)
    shared_calls, group_sizes = [], []
    inner, inner_group = models_module._start_products, models_module._group_products

    def spy(X, W0, shared):
        shared_calls.append(shared is not None)
        return inner(X, W0, shared)

    def spy_group(Xg, W):
        group_sizes.append((int(Xg.shape[0]), int(Xg.shape[1])))
        return inner_group(Xg, W)

    monkeypatch.setattr(models_module, "_start_products", spy)
    monkeypatch.setattr(models_module, "_group_products", spy_group)
    g = torch.Generator().manual_seed(0)
    B, n_max = 9, 9
    X, y = torch.randn(B, n_max, 12, generator=g), torch.randint(0, 4, (B, n_max), generator=g)
    n = torch.tensor([9, 9, 5, 9, 2, 9, 7, 9, 9])
    base = model.init(3, 1)
    index = torch.tensor(starts_of)  # three models: blocks of 4 start from {0, 2}, {1, 2}, then one client
    params = {k: v.index_select(0, index) for k, v in base.items()}
    before = {k: v.clone() for k, v in {**params, **{"base " + k: v for k, v in base.items()}}.items()}
    settings = LocalTraining(steps=4, lr=0.3, batch_size=batch_size, client_block=client_block)
    shared = GatheredParams(base, index)  # as the engine passes the clients' start models
    got, _ = local_train(model, shared, None, X, y, n, settings, gen=np.random.default_rng(2))
    ref, _ = local_train(model, params, None, X, y, n, settings, gen=np.random.default_rng(2))
    blocks = [True] if client_block is None else [True, True, False]
    assert shared_calls == blocks + [False] * len(blocks)
    assert sum(m for m, _ in group_sizes) == (B if client_block is None else 8)
    assert all(m * rows <= stack_rows or m == 1 for m, rows in group_sizes)
    for k in params:
        assert torch.equal(got[k], ref[k]), k
        assert not torch.equal(got[k], params[k]), k
    for k, v in {**params, **{"base " + k: v for k, v in base.items()}}.items():
        assert torch.equal(v, before[k]), k


def test_engine_round_passes_its_cluster_models_as_shared_starts():
    """The engine's local update tells the kernel where the start models came from: the round's k
    cluster models and the clusters the clients chose (the gathered copies equal them)."""
    data = _data(n_max=10, d=8)
    model = MLP(8, 64, 3)
    _force_plan(model, "samples")
    seen = []
    inner = model.deferred_steps_

    def spy(w, X, steps, lr, starts=None):
        models, index = starts
        seen.append((int(index.shape[0]), all(torch.equal(models[k].index_select(0, index), w[k]) for k in w)))
        return inner(w, X, steps, lr, starts=starts)

    model.deferred_steps_ = spy
    kw = {"rounds": 2, "lr": 0.3, "local_steps": 4, "participation": 0.5, "seed": 2, "device": "cpu"}
    ClusteredFLEngine(data, model, EngineConfig(k=2, **kw)).run()
    assert seen == [(15, True)] * 2


def test_all_draws_at_once_equal_the_draws_step_by_step():
    """The deferred path draws all steps' minibatches in one call of the generator: the same indices
    as one draw per step, and the generator ends in the same state."""
    g = torch.Generator().manual_seed(3)
    X, y = torch.randn(5, 9, 4, generator=g), torch.randint(0, 3, (5, 9), generator=g)
    n = torch.tensor([9, 4, 9, 6, 9])
    a, b = np.random.default_rng(8), np.random.default_rng(8)
    at_once = _Batcher(X, y, n, 3, None, a).all_indices(4)
    per_step = _Batcher(X, y, n, 3, None, b)
    for s, (idx, yb, _mask, nb) in enumerate(at_once):
        ref_idx, ref_n = per_step.indices(s)
        assert torch.equal(idx, ref_idx) and torch.equal(nb, ref_n)
        assert torch.equal(yb, y[torch.arange(5).unsqueeze(1), ref_idx])
    assert a.random() == b.random()


@pytest.mark.parametrize("agrees", [True, False], ids=["stacked_agrees", "stacked_differs"])
def test_group_products_use_the_stacked_product_only_where_it_gave_the_same_bits(agrees, monkeypatch):
    """The products of clients that share a start matrix come from one product over their stacked
    rows only after that product gave the per-client products' bits for the same shape; where it
    did not (here: made to differ in the last bit) every later call keeps the per-client products."""
    monkeypatch.setattr(models_module, "_STACKED_SAME", {})
    calls = []

    def stacked(Xg, W):  # stands in for the BLAS: the per-client bits, or one ulp off them
        calls.append(int(Xg.shape[0]))
        out = torch.bmm(Xg, W.t().expand(Xg.shape[0], *W.t().shape))
        return out if agrees else torch.nextafter(out, torch.full_like(out, float("inf")))

    monkeypatch.setattr(models_module, "_stacked_products", stacked)
    g = torch.Generator().manual_seed(5)
    W = torch.randn(24, 40, generator=g)
    for _ in range(3):
        Xg = torch.randn(4, 16, 40, generator=g)
        ref = torch.bmm(Xg, W.t().unsqueeze(0).repeat(4, 1, 1))  # every client with its own copy
        assert torch.equal(models_module._group_products(Xg, W), ref)
    assert calls == [4, 4, 4] if agrees else calls == [4]
    assert list(models_module._STACKED_SAME.values()) == [agrees]


@pytest.mark.parametrize("plan", ["samples", "rows"])
@pytest.mark.parametrize(
    "starts_of", [[2, 0, 2, 0, 1, 1, 2, 1, 0], [0] * 9, list(range(9))], ids=["three", "one", "nine"]
)
def test_start_models_are_gathered_only_where_read(plan, starts_of):
    """Start models handed over as :class:`GatheredParams` (what the engine and its workers pass): the
    deferred path with shared starts never makes the clients' copies of the first weight matrix, and
    the trained models are those of the eagerly gathered copies bit for bit. With as many models as
    clients (no shared start pays) the path reads the copies, gathered on first read."""
    model = MLP(12, (16,), 4)
    _force_plan(model, plan)
    g = torch.Generator().manual_seed(1)
    B, n_max = 9, 9
    X, y = torch.randn(B, n_max, 12, generator=g), torch.randint(0, 4, (B, n_max), generator=g)
    n = torch.tensor([9, 9, 5, 9, 2, 9, 7, 9, 9])
    index = torch.tensor(starts_of)
    base = model.init(int(index.max()) + 1, 3)
    eager = {k: v.index_select(0, index) for k, v in base.items()}
    lazy = GatheredParams(base, index)
    settings = LocalTraining(steps=4, lr=0.3, batch_size=3)
    got, _ = local_train(model, lazy, None, X, y, n, settings, gen=np.random.default_rng(2))
    ref, _ = local_train(model, eager, None, X, y, n, settings, gen=np.random.default_rng(2))
    assert list(got) == list(ref)  # the caller's order of names
    for k in ref:
        assert torch.equal(got[k], ref[k]), k
    first = model.deferred_keys()[0]
    assert lazy.is_gathered(first) == (len(set(starts_of)) == B)
    assert all(lazy.is_gathered(k) for k in ref if k != first)  # the small layers are trained copies


def test_gathered_rows_are_the_rows_of_the_gathered_copies():
    """``ClientUpdates.rows`` of lazily gathered starts: the same values as slicing eager copies, read
    or not before the slicing, and still lazy for the names not read."""
    base = {"w": torch.randn(3, 4, 5), "b": torch.randn(3, 4)}
    index = torch.tensor([2, 0, 1, 1, 2, 0])
    lazy = GatheredParams(base, index)
    _ = lazy["b"]
    part = lazy.rows(slice(1, 4))
    assert part.is_gathered("b") and not part.is_gathered("w")
    for k in base:
        assert torch.equal(part[k], base[k].index_select(0, index)[1:4]), k
    assert not lazy.is_gathered("w")
