"""RR-Cluster's DP baselines (spec 002, 2.4-2.6): DP-FedAvg/FedProx/FedPer, DP-FeSEM, DP-FedCAM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedclust.clustered_fl import MLP, FederatedTensors, LinearRegression, ServerState, fedavg, rr_cluster
from fedclust.clustered_fl import dp_baselines as dpb
from fedclust.clustered_fl.engine import ClientUpdates, EngineConfig, RoundContext
from fedclust.data.synthetic import mixed_regression_1d
from fedclust.rng import stream


def _digits(n_clients=40, n=24, n_test=8, groups=4, seed=0, label_shift=False):
    from sklearn.datasets import load_digits

    from fedclust.partition.rotation import rotation

    d = load_digits()
    rd = rotation(
        np.tile(d.images / 16.0, (2, 1, 1)),
        np.tile(d.target, 2),
        n_groups=groups,
        n_clients=n_clients,
        samples_per_client=n,
        test_per_client=n_test,
        seed=seed,
        reuse=False,
        angles=[0] * groups,
    )
    ytr, yte = rd.y_train.copy(), rd.y_test.copy()
    if label_shift:  # group g relabels digit c as (c + 3g) mod 10: only a personal head can fit all groups
        ytr = (ytr + 3 * rd.group[rd.client_train]) % 10
        yte = (yte + 3 * rd.group[rd.client_test]) % 10
    return FederatedTensors.from_arrays(rd.X_train, ytr, rd.client_train, rd.X_test, yte, rd.client_test, rd.group)


def test_dp_fedavg_without_noise_equals_fedavg():
    data = _digits()
    model = MLP(64, 16, 10)
    kw = dict(lr=0.2, local_steps=3, rounds=4, participation=0.25, seed=2, eval_every=0)
    a = dpb.dp_fedavg(data, model, **kw)
    b = fedavg.run(data, model, **kw)
    for n in a.params:
        torch.testing.assert_close(a.params[n], b.params[n], rtol=1e-5, atol=1e-6)
    assert a.dp_events == []
    priv = dpb.dp_fedavg(data, model, sigma=1.5, clip=0.5, **kw)
    (rel,) = priv.dp_events
    assert rel.noise_multipliers == (1.5,) and rel.count == 4 and rel.sample_size == 10 and rel.label == "dp_fedavg"
    assert rel.neighbouring == "replace_one" and rel.sampling == "without_replacement" and rel.unit == "client"
    assert priv.info["sum_noise_std"] == pytest.approx(2 * 0.5 * 1.5)  # replace-one sensitivity 2 C
    assert priv.history["n_moved"] == [0] * 4


def test_proximal_term_gradient_and_effect():
    base = MLP(64, 8, 10)
    prox = dpb.ProximalModel(base, mu=0.7)
    g = torch.Generator().manual_seed(0)
    params = base.init(3, 0)
    anchor = {n: v[:1] + 0.1 * torch.randn(v[:1].shape, generator=g) for n, v in params.items()}
    prox.anchor = anchor
    X = torch.randn(3, 6, 64, generator=g)
    y = torch.randint(0, 10, (3, 6), generator=g)
    n = torch.tensor([6, 4, 5])
    mask = (torch.arange(6).unsqueeze(0) < n.unsqueeze(1)).float()
    loss, grads = prox.loss_and_grad(params, X, y, mask, n)
    w = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    ref = base.per_client_loss(w, X, y, mask, n) + 0.35 * sum(
        (w[k] - anchor[k]).reshape(3, -1).pow(2).sum(1) for k in w
    )
    rg = torch.autograd.grad(ref.sum(), list(w.values()))
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-5, atol=1e-6)
    for k, r in zip(w, rg):
        torch.testing.assert_close(grads[k], r, rtol=1e-4, atol=1e-6)
    # in a run: mu = 0 is FedAvg; a strong proximal term keeps the model nearer the start
    data = _digits()
    kw = dict(lr=0.3, local_steps=10, rounds=3, participation=0.25, seed=1, eval_every=0)
    r0 = dpb.dp_fedprox(data, base, mu=0.0, **kw)
    ra = dpb.dp_fedavg(data, base, **kw)
    for k in r0.params:
        torch.testing.assert_close(r0.params[k], ra.params[k])
    r1 = dpb.dp_fedprox(data, base, mu=2.0, **kw)
    init = base.init(1, stream(1, "init"))
    drift = lambda r: sum(float((r.params[k] - init[k]).pow(2).sum()) for k in init)  # noqa: E731
    assert drift(r1) < 0.8 * drift(r0)


def test_fedper_head_stays_on_clients_and_personalizes():
    data = _digits(label_shift=True)
    model = MLP(64, 32, 10)
    kw = dict(lr=0.3, local_steps=10, rounds=40, participation=0.25, seed=0, eval_every=0)
    eng_init = model.init(1, stream(0, "init"))
    per = dpb.dp_fedper(data, model, **kw)
    avg = dpb.dp_fedavg(data, model, **kw)
    assert per.info["head_keys"] == ["2.weight", "2.bias"]
    for k in ("2.weight", "2.bias"):  # the server never changes (never sees) the head
        assert torch.equal(per.params[k], eng_init[k])
    assert not torch.equal(per.params["0.weight"], eng_init["0.weight"])
    # the relabelled groups need personal heads: FedPer beats one global model by a wide margin
    assert per.info["final"]["test_accuracy"] > avg.info["final"]["test_accuracy"] + 0.2
    assert per.info["final"]["test_accuracy"] > 0.6
    priv = dpb.dp_fedper(data, model, sigma=1.0, clip=0.5, **{**kw, "rounds": 2})
    assert priv.dp_events[0].noise_multipliers == (1.0,) and priv.dp_events[0].label == "dp_fedper"


def test_fesem_e_step_uses_parameter_distance_and_client_state():
    data = _digits(groups=2)
    model = MLP(64, 8, 10)
    config = EngineConfig(k=3, rounds=2, lr=0.5, local_steps=3, clients_per_round=10, seed=0)
    eng = rr_cluster.build_engine(data, model, config, rr_cluster.ReleaseSettings(), base="fesem", B=0)
    st = eng.init_state()
    clients = np.arange(10)
    up = eng.client_round(st, clients, 0.5)
    flat_c = torch.cat([v.reshape(3, -1) for v in st.params.values()], 1)
    for b in range(10):  # loop reference for the distance E-step
        w = torch.cat([up.params[n][b].reshape(-1) for n in st.params])
        d = [(w - flat_c[j]).norm() for j in range(3)]
        assert int(up.chosen[b]) == int(np.argmin(d))
    np.testing.assert_array_equal(eng.last_center[:10], up.chosen.numpy())
    assert np.all(eng.last_center[10:] == -1)
    for n in st.params:  # the delta is relative to the chosen centre
        torch.testing.assert_close(up.deltas()[n], up.params[n] - st.params[n][up.chosen])
    # second participation starts from the last centre: set a different state and check the start
    eng.last_center[:10] = 2
    st2 = ServerState(params={n: v + 1.0 for n, v in st.params.items()}, momentum=st.momentum)
    up2 = eng.client_round(st2, clients, 1e-12)  # ~no training: the trained model is the start
    for n in st.params:
        torch.testing.assert_close(up2.params[n], st2.params[n][2].expand_as(up2.params[n]), atol=1e-6, rtol=0)


def test_fesem_and_fedcam_recover_the_lines_without_noise():
    rd = mixed_regression_1d("balanced", "easy", seed=0)
    data = FederatedTensors.from_arrays(rd.X, rd.target, rd.client, group=rd.client_group)
    model = LinearRegression(1, bias=True)
    kw = dict(rounds=40, lr=0.1, local_steps=5, participation=1.0, eval_every=0)
    best = 0.0
    for seed in range(3):
        r = rr_cluster.run(data, model, 4, base="fesem", B=0, seed=seed, **kw)
        best = max(best, r.info["final"]["client_ACC"])
    assert best >= 0.95  # FeSEM finds the 4 lines from at least one of 3 random inits
    cam = rr_cluster.run(data, model, 4, base="fedcam", B=2, seed=0, **kw)
    g = [n for n in cam.params if n.startswith("g.")]
    assert g and all(torch.equal(cam.params[n][0], cam.params[n][j]) for n in g for j in range(4))
    assert cam.info["final"]["train_loss"] < 0.5  # the additive model fits (noise floor 0.005)


def test_fedcam_global_part_noise_and_release():
    k, S = 3, 30
    g = torch.Generator().manual_seed(0)
    params = {
        "g.w": torch.randn(1, 100, 50, generator=g).expand(k, 100, 50).clone(),
        "c.w": torch.randn(k, 4, generator=g),
    }
    chosen = torch.arange(S) % k
    start = {n: v.index_select(0, chosen) for n, v in params.items()}
    upd = ClientUpdates(
        clients=np.arange(S),
        chosen=chosen,
        losses=torch.zeros(S, k),
        start_params=start,
        params=start,
        momentum=None,
        n_samples=torch.full((S,), 3),
    )
    ctx = RoundContext(
        round=1,
        lr=0.1,
        k=k,
        n_clients=300,
        n_sampled=S,
        beta=0.0,
        rngs={"noise": np.random.default_rng(0), "rebalance": np.random.default_rng(1)},
        dp_events=[],
    )
    agg = rr_cluster.PrivateClusterAggregator(
        sigma_s=0.5, sigma_theta=1.0, sigma_g=2.5, clip=0.4, B=0, global_keys=("g.w",), server_lr=1.0
    )
    out = agg(ServerState(params, {n: torch.zeros_like(v) for n, v in params.items()}), upd, ctx)
    change = out.params["g.w"] - params["g.w"]
    assert all(torch.equal(change[0], change[j]) for j in range(k))  # one global model
    assert abs(float(change[0].std()) * S / (2 * 0.4 * 2.5) - 1) < 0.03  # std 2 C sigma_g / |M^t| (replace-one)
    (rel,) = agg.finish(10, 300, S)
    assert rel.noise_multipliers == pytest.approx((0.5, 2.5, 1.0)) and rel.sample_size == S
    assert rel.neighbouring == "replace_one"
    with pytest.raises(ValueError, match="sigma_g"):
        rr_cluster.PrivateClusterAggregator(sigma_s=0.5, sigma_theta=1.0, clip=0.4, global_keys=("g.w",))


def test_clustered_baselines_refuse_rebalancing():
    data = _digits()
    with pytest.raises(ValueError, match="B = 0"):
        dpb.dp_ifca(data, MLP(64, 8, 10), 2, B=2)
