"""Tests of the vectorized clustered-FL engine (fedclust.clustered_fl.engine / models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from cfl_synthetic import two_group_clients

from fedclust.clustered_fl import (
    MLP,
    Aggregator,
    ClientUpdates,
    ClusteredFLEngine,
    DeltaAveraging,
    EngineConfig,
    FederatedTensors,
    GradientAveraging,
    LinearRegression,
    LocalTraining,
    ModelAveraging,
    RoundContext,
    ServerState,
    assign_clusters,
    cfl_mgd,
    client_model_losses,
    evaluate,
    ifca_cnn,
    local_gradient,
    local_train,
)
from fedclust.clustered_fl.engine import _Batcher


def _padded_classification(B=5, n_max=9, d=12, n_classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, n_max, d, generator=g)
    y = torch.randint(0, n_classes, (B, n_max), generator=g)
    n = torch.tensor([9, 4, 7, 1, 9][:B])
    for b in range(B):  # padding rows are garbage that must never matter
        X[b, n[b] :] = 1e3
    return X, y, n


def _loop_local_train(model, params, momentum, X, y, n, steps, lr, beta, input_shape=None, penalty=None):
    """Reference: one nn.Module + torch.optim.SGD(momentum=beta) per client, buffer injected."""
    out = {k: [] for k in params}
    mom = {k: [] for k in params}
    for b in range(X.shape[0]):  # the per-client loop the engine replaces
        mod = model.module()
        mod.load_state_dict({k: v[b].clone() for k, v in params.items()})
        opt = torch.optim.SGD(mod.parameters(), lr=lr, momentum=beta)
        if beta > 0:
            for name, p in mod.named_parameters():
                opt.state[p]["momentum_buffer"] = momentum[name][b].clone()
        xb, yb = X[b, : n[b]], y[b, : n[b]]
        if input_shape is not None:
            xb = xb.reshape(-1, *input_shape)
        for _ in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(mod(xb), yb)
            if penalty is not None:
                loss = loss + penalty(dict(mod.named_parameters()))
            loss.backward()
            opt.step()
        for name, p in mod.named_parameters():
            out[name].append(p.detach().clone())
            if beta > 0:
                mom[name].append(opt.state[p]["momentum_buffer"].clone())
    return (
        {k: torch.stack(v) for k, v in out.items()},
        {k: torch.stack(v) for k, v in mom.items()} if beta > 0 else None,
    )


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", ["bmm", "vmap"])
@pytest.mark.parametrize("beta", [0.0, 0.9])
@pytest.mark.parametrize("client_block", [None, 2])
def test_batched_local_train_equals_per_client_loop_mlp(impl, beta, client_block):
    X, y, n = _padded_classification()
    model = MLP(12, (8, 6), 4, impl=impl)
    B = X.shape[0]
    params = model.init(B, seed=3)
    mom = {k: 0.1 * torch.randn_like(v) for k, v in params.items()}
    got_p, got_u = local_train(
        model, params, mom, X, y, n, LocalTraining(steps=3, lr=0.2, beta=beta, client_block=client_block)
    )
    ref_p, ref_u = _loop_local_train(model, params, mom, X, y, n, steps=3, lr=0.2, beta=beta)
    for k in params:
        assert torch.allclose(got_p[k], ref_p[k], atol=1e-6, rtol=0), k
        assert not torch.equal(got_p[k], params[k])  # it did train
        if beta > 0:
            assert torch.allclose(got_u[k], ref_u[k], atol=1e-6, rtol=0), k
    assert (got_u is None) == (beta == 0)


def test_batched_local_train_equals_loop_cnn_with_penalty():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(3, 5, 1 * 8 * 8, generator=g)
    y = torch.randint(0, 10, (3, 5), generator=g)
    n = torch.tensor([5, 3, 4])
    model = ifca_cnn(in_channels=1, image_size=8, weight_decay=0.004)
    params = model.init(3, seed=0)
    mom = {k: 0.01 * torch.randn_like(v) for k, v in params.items()}
    got_p, got_u = local_train(model, params, mom, X, y, n, LocalTraining(steps=2, lr=0.05, beta=0.9))

    def pen(p):
        return 0.5 * 0.004 * ((p["fc1.weight"] ** 2).sum() + (p["fc2.weight"] ** 2).sum())

    ref_p, ref_u = _loop_local_train(model, params, mom, X, y, n, 2, 0.05, 0.9, input_shape=(1, 8, 8), penalty=pen)
    for k in params:
        assert torch.allclose(got_p[k], ref_p[k], atol=1e-6, rtol=0), k
        assert torch.allclose(got_u[k], ref_u[k], atol=1e-6, rtol=0), k


def test_cnn_shapes_follow_spec():
    m = ifca_cnn()  # 24x24x3 input -> 6*6*64 = 2304 features after two SAME 3/2 max-pools
    assert m._mod.flat == 2304
    p = m.init(2, seed=0)
    assert p["fc1.weight"].shape == (2, 384, 2304) and p["fc3.weight"].shape == (2, 10, 192)
    assert torch.all(p["fc1.bias"] == 0.1) and torch.all(p["conv2.bias"] == 0.1) and torch.all(p["conv1.bias"] == 0)
    assert p["fc1.weight"].abs().max() <= 2 * 0.04 + 1e-7  # truncated at 2 std
    out = m.forward_shared(p, torch.randn(4, 3 * 24 * 24))
    assert out.shape == (2, 4, 10)


def test_independent_inits_differ_and_are_reproducible():
    m = MLP(10, 5, 3)
    a, b = m.init(3, seed=7), m.init(3, seed=7)
    for k in a:
        assert torch.equal(a[k], b[k])
    assert not torch.allclose(a["0.weight"][0], a["0.weight"][1])


def test_forward_shared_bmm_and_vmap_agree():
    X = torch.randn(20, 12)
    m1, m2 = MLP(12, (7, 5), 4, impl="bmm"), MLP(12, (7, 5), 4, impl="vmap")
    p = m1.init(3, seed=1)
    assert torch.allclose(m1.forward_shared(p, X), m2.forward_shared(p, X), atol=1e-6)


def test_hand_written_mlp_gradient_matches_autograd():
    X, y, n = _padded_classification()
    m = MLP(12, (8, 6), 4)
    p = m.init(5, seed=2)
    mask = (torch.arange(9)[None] < n[:, None]).float()
    l1, g1 = m.loss_and_grad(p, X, y, mask, n)
    l2, g2 = MLP(12, (8, 6), 4, impl="vmap").loss_and_grad(p, X, y, mask, n)
    assert torch.allclose(l1, l2, atol=1e-6)
    for k in g1:
        assert g1[k].is_contiguous()
        assert torch.allclose(g1[k], g2[k], atol=1e-6), k


# ---------------------------------------------------------------------------------------------
def _one_client_data(seed=0, n=20, d=6, classes=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, classes, n)
    return FederatedTensors.from_arrays(X, y, np.zeros(n, dtype=int), group=np.zeros(1, dtype=int))


def test_heavy_ball_across_rounds_equals_torch_sgd_momentum():
    """k = 1, one client: H heavy-ball steps per round with the momentum carried through the server
    equals torch.optim.SGD(momentum=beta) run for rounds*H steps (lr decayed per round)."""
    data = _one_client_data()
    model = MLP(6, 5, 3)
    init = model.init(1, seed=4)
    H, R, lr, beta, decay = 4, 3, 0.3, 0.9, 0.8
    res = cfl_mgd.run(
        data,
        model,
        1,
        option="II",
        beta=beta,
        lr=lr,
        lr_decay=decay,
        local_steps=H,
        rounds=R,
        participation=1.0,
        init_params=init,
        eval_every=0,
    )
    mod = model.module()
    mod.load_state_dict({k: v[0] for k, v in init.items()})
    opt = torch.optim.SGD(mod.parameters(), lr=lr, momentum=beta, dampening=0, nesterov=False)
    X, y = data.X_train[0], data.y_train[0]
    for t in range(R):
        for gr in opt.param_groups:
            gr["lr"] = lr * decay**t
        for _ in range(H):
            opt.zero_grad()
            F.cross_entropy(mod(X), y).backward()
            opt.step()
    for name, p in mod.named_parameters():
        assert torch.allclose(res.params[name][0], p.detach(), atol=1e-6), name
        assert torch.allclose(res.momentum[name][0], opt.state[p]["momentum_buffer"], atol=1e-6), name


def test_option_one_is_cluster_level_heavy_ball_eq32():
    """Option I, k=1, full participation: chi(t+1) = chi(t) - (lr/m) sum_i g_i(t) + beta (chi(t) - chi(t-1))."""
    rng = np.random.default_rng(0)
    m, n, d = 4, 10, 5
    X = rng.normal(size=(m * n, d))
    yv = X @ rng.normal(size=d)
    client = np.repeat(np.arange(m), n)
    data = FederatedTensors.from_arrays(X, yv, client, group=np.zeros(m, dtype=int))
    model = LinearRegression(d)
    lr, beta = 0.5, 0.7
    eng = ClusteredFLEngine(
        data,
        model,
        EngineConfig(k=1, rounds=5, lr=lr, beta=beta, local_update="gradient", participation=1.0, eval_every=0, seed=1),
    )
    st = eng.init_state()
    chis = [st.params["weight"][0, 0].clone()]
    for _ in range(4):
        st, _, _ = eng.step(st)
        chis.append(st.params["weight"][0, 0].clone())
    Xt, yt = data.X_train, data.y_train

    def grad_sum(w):  # sum over clients of the gradient of 1/2 mean squared error
        r = Xt @ w - yt  # (m, n)
        return ((r.unsqueeze(-1) * Xt).mean(1)).sum(0)

    exp1 = chis[0] - lr / m * grad_sum(chis[0])  # u starts at 0
    assert torch.allclose(chis[1], exp1, atol=1e-5)
    for t in range(1, 4):
        exp = chis[t] - lr / m * grad_sum(chis[t]) + beta * (chis[t] - chis[t - 1])
        assert torch.allclose(chis[t + 1], exp, atol=1e-5), t


# ---------------------------------------------------------------------------------------------
def test_argmin_ties_go_to_lowest_index():
    losses = torch.tensor([[1.0, 0.5, 0.5], [2.0, 2.0, 2.0], [3.0, 1.0, 0.2]])
    assert assign_clusters(losses).tolist() == [1, 0, 2]


def _zero_target_regression(m=6, n=5, d=3):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(m * n, d))
    return FederatedTensors.from_arrays(X, np.zeros(m * n), np.repeat(np.arange(m), n), group=np.zeros(m, dtype=int))


def test_engine_assignment_ties_with_identical_models():
    data = _zero_target_regression()
    w = torch.zeros(3, 1, 3)
    w[0] = 5.0  # model 0 is bad; models 1 and 2 are identical and perfect
    eng = ClusteredFLEngine(
        data,
        LinearRegression(3),
        EngineConfig(k=3, rounds=1, participation=1.0, init_params={"weight": w}, eval_every=0),
    )
    upd = eng.client_round(eng.init_state(), np.arange(6), lr=0.1)
    assert upd.chosen.tolist() == [1] * 6
    eng2 = ClusteredFLEngine(
        data,
        LinearRegression(3),
        EngineConfig(k=3, rounds=1, participation=1.0, init_params={"weight": torch.ones(3, 1, 3)}, eval_every=0),
    )
    assert eng2.client_round(eng2.init_state(), np.arange(6), lr=0.1).chosen.tolist() == [0] * 6


@pytest.mark.parametrize("option", ["I", "II"])
def test_empty_cluster_keeps_model_and_momentum(option):
    data = _zero_target_regression()
    w = torch.randn(3, 1, 3, generator=torch.Generator().manual_seed(0)) * 0.1
    w[2] = 100.0  # nobody will pick cluster 2
    u = torch.full((3, 1, 3), 0.5)
    eng = ClusteredFLEngine(
        data,
        LinearRegression(3),
        EngineConfig(
            k=3,
            rounds=1,
            participation=1.0,
            beta=0.9,
            lr=0.1,
            local_update="gradient" if option == "I" else "model",
            local_steps=2,
            init_params={"weight": w},
            init_momentum={"weight": u},
            eval_every=0,
        ),
    )
    st0 = eng.init_state()
    st1, upd, agg = eng.step(st0)
    assert agg.cluster_sizes[2] == 0
    assert torch.equal(st1.params["weight"][2], w[2]) and torch.equal(st1.momentum["weight"][2], u[2])
    used = [j for j in range(2) if agg.cluster_sizes[j] > 0]
    assert used
    for j in used:
        assert not torch.equal(st1.params["weight"][j], w[j])
        assert not torch.equal(st1.momentum["weight"][j], u[j])


# ---------------------------------------------------------------------------------------------
def _ctx(k, lr=0.1, n_clients=10, n_sampled=3):
    return RoundContext(round=1, lr=lr, k=k, n_clients=n_clients, n_sampled=n_sampled, beta=0.5, rngs={}, dp_events=[])


def _updates(chosen, start, local, mom):
    S = len(chosen)
    return ClientUpdates(
        clients=np.arange(S),
        chosen=torch.tensor(chosen),
        losses=torch.zeros(S, 3),
        start_params={"w": start},
        params={"w": local},
        momentum=None if mom is None else {"w": mom},
        n_samples=torch.ones(S, dtype=torch.long),
    )


def test_model_and_gradient_averaging_by_hand():
    old = torch.tensor([[0.0, 0.0], [10.0, 10.0], [7.0, 7.0]])
    old_u = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    state = ServerState(params={"w": old}, momentum={"w": old_u})
    chosen = [0, 1, 0]
    local = torch.tensor([[1.0, 2.0], [4.0, 4.0], [3.0, 6.0]])
    mom = torch.tensor([[1.0, 0.0], [2.0, 2.0], [3.0, 0.0]])
    upd = _updates(chosen, old[chosen], local, mom)
    agg = ModelAveraging()(state, upd, _ctx(3))
    assert torch.allclose(agg.params["w"], torch.tensor([[2.0, 4.0], [4.0, 4.0], [7.0, 7.0]]))
    assert torch.allclose(agg.momentum["w"], torch.tensor([[2.0, 0.0], [2.0, 2.0], [3.0, 3.0]]))
    assert agg.cluster_sizes.tolist() == [2, 1, 0]
    # Option I: chi_p - (lr/m) sum u_i, m = TOTAL clients (10), not |S_p| or |M_t|
    agg1 = GradientAveraging()(state, upd, _ctx(3, lr=0.5, n_clients=10))
    assert torch.allclose(agg1.params["w"], old - 0.05 * torch.tensor([[4.0, 0.0], [2.0, 2.0], [0.0, 0.0]]))
    assert torch.allclose(agg1.momentum["w"], agg.momentum["w"])
    agg2 = GradientAveraging("sampled")(state, upd, _ctx(3, lr=0.5, n_clients=10, n_sampled=3))
    assert torch.allclose(agg2.params["w"], old - 0.5 / 3 * torch.tensor([[4.0, 0.0], [2.0, 2.0], [0.0, 0.0]]))


def test_delta_averaging_default_equals_model_averaging_and_groups_hook_moves_updates():
    old = torch.tensor([[0.0], [10.0]])
    state = ServerState(params={"w": old}, momentum={"w": torch.zeros(2, 1)})
    chosen = [0, 0, 1]
    upd = _updates(chosen, old[chosen], torch.tensor([[1.0], [3.0], [14.0]]), None)
    a = ModelAveraging()(state, upd, _ctx(2))
    b = DeltaAveraging()(state, upd, _ctx(2))
    assert torch.allclose(a.params["w"], b.params["w"])

    class MoveFirstToOne(DeltaAveraging):  # an RR-style reassignment: the delta is moved, not recomputed
        def groups(self, updates, ctx):
            g = updates.chosen.clone()
            g[0] = 1
            return g

    c = MoveFirstToOne()(state, upd, _ctx(2))
    # cluster 0: delta 3 alone; cluster 1: deltas 1 (trained from chi_0) and 4
    assert torch.allclose(c.params["w"], torch.tensor([[3.0], [10.0 + 2.5]]))
    assert c.cluster_sizes.tolist() == [1, 2]


def test_custom_aggregator_plugs_in_and_records_dp_events():
    data = _zero_target_regression()

    class Noisy(ModelAveraging):
        name = "noisy"

        def __call__(self, state, updates, ctx):
            agg = super().__call__(state, updates, ctx)
            noise = torch.as_tensor(ctx.rngs["noise"].normal(size=agg.params["weight"].shape), dtype=torch.float32)
            agg.params = {"weight": agg.params["weight"] + 0.0 * noise}
            agg.info["noise_draws"] = noise.numel()
            return agg

        def finish(self, rounds, n_clients, n_sampled):
            return [("release", rounds, n_sampled)]

    res = ClusteredFLEngine(
        data, LinearRegression(3), EngineConfig(k=2, rounds=3, participation=0.5, aggregator=Noisy(), eval_every=1)
    ).run()
    assert res.dp_events == [("release", 3, 3)]
    assert res.history["noise_draws"] == [6.0, 6.0, 6.0]
    assert res.info["aggregator"] == "noisy"


# ---------------------------------------------------------------------------------------------
def test_from_arrays_pads_by_client_and_drops_unused():
    X = np.arange(14, dtype=float).reshape(7, 2)
    y = np.array([0, 1, 2, 0, 1, 2, 0])
    client = np.array([1, 0, 1, -1, 2, 1, 0])
    ft = FederatedTensors.from_arrays(X, y, client, X[:3], y[:3], np.array([0, 1, 1]), group=np.array([0, 1, 1]))
    assert ft.n_train.tolist() == [2, 3, 1]
    assert ft.X_train.shape == (3, 3, 2)
    assert ft.X_train[1, :3, 0].tolist() == [0.0, 4.0, 10.0]  # rows 0, 2, 5 in original order
    assert ft.y_train[0, :2].tolist() == [1, 0]
    assert ft.X_test.shape == (2, 2, 2) and ft.n_test.tolist() == [1, 2]
    assert ft.y_train.dtype == torch.long
    reg = FederatedTensors.from_arrays(X, y.astype(float), np.where(client < 0, 0, client))
    assert reg.y_train.dtype == torch.float32


def test_from_arrays_and_engine_errors_name_the_parameter():
    data = _zero_target_regression()
    with pytest.raises(ValueError, match="n_clients"):
        FederatedTensors.from_arrays(np.zeros((4, 2)), np.zeros(4), np.array([0, 0, 1, 1]), group=np.zeros(1))
    with pytest.raises(ValueError, match="group"):
        FederatedTensors(torch.zeros(2, 3, 1), torch.zeros(2, 3), torch.tensor([3, 3]), group=np.zeros(3))
    m = LinearRegression(3)
    for kw, name in [
        ({"lr": 0}, "lr"),
        ({"beta": 1.0}, "beta"),
        ({"participation": 0}, "participation"),
        ({"local_update": "sgd"}, "local_update"),
        ({"local_steps": 0}, "local_steps"),
        ({"lr_decay": 1.5}, "lr_decay"),
        ({"batch_size": 0}, "batch_size"),
        ({"init_min_fraction": 0.6}, "init_min_fraction"),
        ({"train_eval": "x"}, "train_eval"),
    ]:
        with pytest.raises(ValueError, match=name):
            ClusteredFLEngine(data, m, EngineConfig(k=2, **kw))
    with pytest.raises(ValueError, match="k"):
        ClusteredFLEngine(data, m, EngineConfig(k=0))
    with pytest.raises(ValueError, match="input features"):
        ClusteredFLEngine(data, LinearRegression(4), EngineConfig(k=2))
    with pytest.raises(ValueError, match="init_params"):
        ClusteredFLEngine(data, m, EngineConfig(k=2, init_params={"weight": torch.zeros(3, 1, 3)})).init_state()


def test_minibatches_are_within_client_and_epochs_cover_each_sample_once():
    X, y, n = _padded_classification()
    Xi = torch.arange(X.shape[1], dtype=torch.float32).reshape(1, -1, 1).expand(X.shape[0], -1, 1).clone()
    gen = np.random.default_rng(0)
    bt = _Batcher(Xi, y, n, batch_size=4, epochs=None, gen=gen)
    for s in range(5):
        Xb, _, mb, nb = bt(s)
        for b in range(X.shape[0]):
            idx = Xb[b, : nb[b], 0].long()
            assert len(set(idx.tolist())) == nb[b] == min(4, int(n[b]))
            assert idx.max() < n[b]
            assert mb[b].sum() == nb[b]
    bt = _Batcher(Xi, y, n, batch_size=4, epochs=2, gen=gen)
    seen = [[] for _ in range(X.shape[0])]
    for s in range(3):  # one epoch = ceil(9/4) = 3 steps
        Xb, _, mb, nb = bt(s)
        for b in range(X.shape[0]):
            seen[b] += Xb[b, : nb[b], 0].long().tolist()
    for b in range(X.shape[0]):
        assert sorted(seen[b]) == list(range(int(n[b])))


def test_minibatch_local_gradient_uses_the_batch():
    X, y, n = _padded_classification()
    m = MLP(12, 8, 4)
    p = m.init(5, seed=0)
    full = local_gradient(m, p, None, X, y, n)
    mask = (torch.arange(9)[None] < n[:, None]).float()
    _, ref = m.loss_and_grad(p, X, y, mask, n)
    for k in p:
        assert torch.allclose(full[k], ref[k])
    u = {k: torch.ones_like(v) for k, v in p.items()}
    mg = local_gradient(m, p, u, X, y, n, beta=0.5)
    for k in p:
        assert torch.allclose(mg[k], 0.5 + ref[k])


def test_evaluate_matches_per_client_lowest_loss_loop():
    rng = np.random.default_rng(0)
    Xtr = rng.normal(size=(60, 5)).astype(np.float32)
    ytr = rng.integers(0, 3, 60)
    ctr = np.repeat(np.arange(6), 10)
    Xte = rng.normal(size=(36, 5)).astype(np.float32)
    yte = rng.integers(0, 3, 36)
    cte = rng.permutation(np.repeat(np.arange(6), [9, 3, 6, 6, 6, 6]))  # unequal test sizes
    data = FederatedTensors.from_arrays(Xtr, ytr, ctr, Xte, yte, cte, group=np.array([0, 0, 0, 1, 1, 1]))
    model = MLP(5, 4, 3)
    p = model.init(2, seed=1)
    ev = evaluate(model, p, data, max_rows=7)  # small chunks on purpose
    right = total = 0
    tr_min = []
    for c in range(6):
        xs, ys = torch.as_tensor(Xte[cte == c]), torch.as_tensor(yte[cte == c])
        mods = []
        for j in range(2):
            mod = model.module()
            mod.load_state_dict({k: v[j] for k, v in p.items()})
            mods.append(mod)
        with torch.no_grad():
            ls = [F.cross_entropy(mod(xs), ys).item() for mod in mods]
            best = int(np.argmin(ls))
            right += (mods[best](xs).argmax(1) == ys).sum().item()
            total += len(ys)
            xt, yt = torch.as_tensor(Xtr[ctr == c]), torch.as_tensor(ytr[ctr == c])
            tr_min.append(min(F.cross_entropy(mod(xt), yt).item() for mod in mods))
    assert ev["test_accuracy"] == pytest.approx(right / total)
    assert ev["train_loss"] == pytest.approx(np.mean(tr_min), abs=1e-6)
    losses, correct = client_model_losses(model, p, data.X_test, data.y_test, data.n_test, with_correct=True)
    assert (correct <= data.n_test[:, None]).all() and losses.shape == (6, 2)


def test_ifca_restart_heuristic_reaches_min_fraction():
    rng = np.random.default_rng(0)
    m, n, d = 40, 8, 4
    W = np.array([[3, 0, 0, 0], [0, 3, 0, 0], [0, 0, 3, 0], [0, 0, 0, 3.0]])
    group = np.repeat(np.arange(4), m // 4)
    X = rng.normal(size=(m * n, d))
    client = np.repeat(np.arange(m), n)
    yv = (X * W[group[client]]).sum(1)
    data = FederatedTensors.from_arrays(X, yv, client, group=group)
    eng = ClusteredFLEngine(
        data,
        LinearRegression(d),
        EngineConfig(k=4, rounds=1, participation=0.5, init_min_fraction=0.1, init_max_restarts=200, seed=0),
    )
    st = eng.init_state()
    assert eng.init_info["init_min_fraction_reached"] >= 0.1
    assert isinstance(st, ServerState) and isinstance(ModelAveraging(), Aggregator)


def test_poisson_sampling_varies_and_empty_round_changes_nothing():
    data = _zero_target_regression(m=6)
    eng = ClusteredFLEngine(
        data, LinearRegression(3), EngineConfig(k=2, rounds=1, participation=0.3, sampling="poisson", seed=0)
    )
    sizes = [len(eng.sample_clients()) for _ in range(200)]
    assert min(sizes) == 0 and max(sizes) >= 4
    assert np.mean(sizes) == pytest.approx(0.3 * 6, abs=0.3)
    eng.sample_clients = lambda: np.zeros(0, dtype=np.int64)
    st = eng.init_state()
    st1, upd, agg = eng.step(st)
    assert st1.round == 1 and torch.equal(st1.params["weight"], st.params["weight"])
    assert agg.cluster_sizes.tolist() == [0, 0]


def test_client_norms_over_all_parameters():
    from fedclust.clustered_fl import client_norms

    v = {"a": torch.tensor([[3.0, 0.0], [0.0, 0.0]]), "b": torch.tensor([[[4.0]], [[2.0]]])}
    assert client_norms(v).tolist() == [5.0, 2.0]


@pytest.mark.parametrize("train_eval", ["sampled", "all"])
@pytest.mark.parametrize("eval_every", [0, 1])
def test_final_model_is_evaluated_once_with_the_numbers_of_two_evaluations(train_eval, eval_every):
    """The last round's record and ``info["final"]`` come from ONE evaluation of the final models, and
    the numbers are those of the two separate evaluations the engine used to make: the record's (test
    side only unless ``train_eval="all"``) and the final one (training and test clients)."""
    data = two_group_clients(2, 24, 8, 6, 3, 4)
    calls = []

    def counting(model, params, data, **kw):
        calls.append({n: v.clone() for n, v in params.items()})
        return evaluate(model, params, data, **kw)

    kw = {"rounds": 3, "lr": 0.3, "local_steps": 2, "participation": 0.5, "seed": 1, "device": "cpu"}
    eng = ClusteredFLEngine(
        data, MLP(6, 5, 3), EngineConfig(k=2, eval_every=eval_every, train_eval=train_eval, evaluator=counting, **kw)
    )
    res = eng.run()
    assert len(calls) == (3 if eval_every else 1)
    final_calls = [p for p in calls if all(torch.equal(p[n], res.params[n]) for n in p)]
    assert len(final_calls) == 1  # the final models: evaluated once
    model = MLP(6, 5, 3)
    record = evaluate(model, res.params, data, train=train_eval == "all", test=True)  # what the record used
    final = evaluate(model, res.params, data, train=True, test=True)  # what the final evaluation used
    for key in ("test_accuracy", "test_loss"):
        assert res.history[key][-1] == record[key], key
    if train_eval == "all":
        assert res.history["train_loss"][-1] == record["train_loss"]
        assert res.history["client_ACC"][-1] == record["client_ACC"]
    assert res.info["final"] == {k: v for k, v in final.items() if not isinstance(v, np.ndarray)}
    np.testing.assert_array_equal(res.assignment, final["assignment"])
    np.testing.assert_array_equal(res.test_assignment, final["test_assignment"])
    assert res.info["timing"]["final_eval"] > 0


def test_evaluator_is_validated():
    X, y, n = _padded_classification()
    data = FederatedTensors(X, y, n)
    with pytest.raises(ValueError, match="evaluator"):
        ClusteredFLEngine(data, MLP(12, 4, 4), EngineConfig(k=2, evaluator="evaluate"))
