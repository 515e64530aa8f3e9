"""RR-Cluster (spec 002): server order, B = 0 == DP-IFCA, noise scales, IFCA's collapse vs RR, privacy."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from fedclust.clustered_fl import MLP, FederatedTensors, LinearRegression, ServerState, dp_baselines, rr_cluster
from fedclust.clustered_fl.engine import ClientUpdates, LocalTraining, RoundContext, client_model_losses, local_train
from fedclust.clustered_fl.rebalance import random_rebalance
from fedclust.data.synthetic import mixed_regression_1d
from fedclust.privacy.paper import rr_cluster as paper
from fedclust.rng import stream


def _digits_data(n_clients=24, n=12, n_test=4, seed=0):
    from sklearn.datasets import load_digits

    from fedclust.partition.rotation import rotation

    d = load_digits()
    rd = rotation(
        d.images / 16.0,
        d.target,
        n_groups=3,
        n_clients=n_clients,
        samples_per_client=n,
        test_per_client=n_test,
        seed=seed,
        reuse=False,
    )
    return FederatedTensors.from_rotated(rd)


def _reference_dp_ifca(data, model, k, *, T, S, lr, H, C, sigma_s, sigma_theta, C_s, f, gamma, seed):
    """Algorithm 2 without RR, written as loops over clients and clusters, same named streams."""
    rs = {n: stream(seed, n) for n in ("init", "sampling", "noise")}
    params = model.init(k, rs["init"])
    for _ in range(T):
        clients = np.sort(rs["sampling"].choice(data.n_clients, S, replace=False))
        chosen, deltas = [], []
        for i in clients:  # per-client loop (the reference)
            X, y, n = data.X_train[i : i + 1], data.y_train[i : i + 1], data.n_train[i : i + 1]
            losses, _ = client_model_losses(model, params, X, y, n)
            j = int(torch.argmin(losses[0]))
            start = {name: v[j : j + 1] for name, v in params.items()}
            w, _ = local_train(model, start, None, X, y, n, LocalTraining(steps=H, lr=lr))
            chosen.append(j)
            deltas.append({name: (w[name] - start[name])[0] for name in params})
        s = np.zeros((S, k))
        s[np.arange(S), chosen] = C_s  # ||onehot|| = 1 > C_s: clipped to C_s
        s = s + rs["noise"].standard_normal((S, k)) * (math.sqrt(2) * C_s * sigma_s)  # replace-one: sqrt(2) C_s
        groups = s.argmax(1)
        clipped = []
        for dl in deltas:
            norm = math.sqrt(sum(float((v.double() ** 2).sum()) for v in dl.values()))
            clipped.append({name: v * min(1.0, C / norm) for name, v in dl.items()})
        new = {}
        for name, old in params.items():
            sums = torch.zeros_like(old)
            for dl, g in zip(clipped, groups):
                sums[g] += dl[name]
            noise = rs["noise"].standard_normal(tuple(old.shape)) * (f * C * sigma_theta)
            sums = sums + torch.as_tensor(noise, dtype=old.dtype)
            upd = old.clone()
            for j in range(k):
                cnt = int((groups == j).sum())
                if cnt > 0:
                    upd[j] = old[j] + gamma * sums[j] / cnt
            new[name] = upd
        params = new
    return params


def test_b_zero_equals_reference_dp_ifca_and_dp_baseline():
    data = _digits_data()
    model = MLP(64, 8, 10)
    kw = dict(
        rounds=4,
        lr=0.3,
        local_steps=3,
        clients_per_round=12,
        clip=0.5,
        sigma_s=0.7,
        sigma_theta=0.9,
        C_s=0.1,
        server_lr=0.8,
        seed=3,
        eval_every=0,
    )
    res = rr_cluster.run(data, model, 3, B=0, **kw)
    ref = _reference_dp_ifca(
        data, model, 3, T=4, S=12, lr=0.3, H=3, C=0.5, sigma_s=0.7, sigma_theta=0.9, C_s=0.1, f=2, gamma=0.8, seed=3
    )
    for name in ref:
        torch.testing.assert_close(res.params[name], ref[name], rtol=1e-4, atol=1e-5)
    base = dp_baselines.dp_ifca(data, model, 3, **kw)  # DP-IFCA: B = 0, the same replace-one noise as RR
    for name in ref:
        assert torch.equal(base.params[name], res.params[name])
    assert res.history["n_moved"] == [0, 0, 0, 0]
    # the paper's literal baseline noise (C_theta, withdrawn A2) is a different mechanism
    res2 = rr_cluster.run(data, model, 3, B=0, noise_calibration="paper_literal", **kw)
    assert not torch.equal(res2.params["0.weight"], res.params["0.weight"])


def test_rebalancing_stream_is_separate_from_all_other_draws():
    # sigma_s = 5: near-uniform noisy sizes. With B = 1 no cluster is ever empty here, so the run must equal
    # B = 0 exactly (RR draws come from their own stream); with B = 3 the first round has no move, so
    # round 2 sees the same models, clients and identifier noise as B = 0, and moves only from there.
    data = _digits_data()
    model = MLP(64, 8, 10)
    kw = dict(
        rounds=3,
        lr=0.3,
        local_steps=2,
        clients_per_round=12,
        clip=0.5,
        sigma_s=5.0,
        sigma_theta=0.5,
        seed=1,
        eval_every=0,
    )
    r0 = rr_cluster.run(data, model, 3, B=0, **kw)
    r1 = rr_cluster.run(data, model, 3, B=1, **kw)
    assert r1.history["n_moved"] == [0, 0, 0]
    for name in r0.params:
        assert torch.equal(r0.params[name], r1.params[name])
    r3 = rr_cluster.run(data, model, 3, B=3, **kw)
    assert r3.history["n_moved"][0] == 0 and r3.history["n_moved"][1] > 0
    assert r3.history["sizes_before_rr"][:2] == r0.history["sizes_before_rr"][:2]
    assert min(min(s) for s in r3.history["sizes_after_rr"]) >= 3
    assert not torch.equal(r0.params["0.weight"], r3.params["0.weight"])


def _fake_round(S=30, k=3, shapes=((4, 5), (6,)), chosen=None, seed=0, zero=False):
    g = torch.Generator().manual_seed(seed)
    params = {f"p{i}": torch.randn((k,) + s, generator=g) for i, s in enumerate(shapes)}
    if chosen is None:
        chosen = torch.randint(0, k, (S,), generator=g)
    start = {n: v.index_select(0, chosen) for n, v in params.items()}
    trained = {n: v if zero else v + torch.randn(v.shape, generator=g) for n, v in start.items()}
    upd = ClientUpdates(
        clients=np.arange(S),
        chosen=chosen,
        losses=torch.zeros(S, k),
        start_params=start,
        params=trained,
        momentum=None,
        n_samples=torch.full((S,), 5),
    )
    rngs = {"noise": np.random.default_rng(seed + 1), "rebalance": np.random.default_rng(seed + 2)}
    ctx = RoundContext(round=1, lr=0.1, k=k, n_clients=10 * S, n_sampled=S, beta=0.0, rngs=rngs, dp_events=[])
    state = ServerState(params=params, momentum={n: torch.zeros_like(v) for n, v in params.items()})
    return state, upd, ctx


def test_one_round_follows_the_server_order_with_rebalancing():
    # cluster 2 is chosen by only 2 clients: with B = 6 it must be rebalanced after the noisy argmax
    chosen = torch.tensor([0] * 16 + [1] * 12 + [2] * 2)
    state, upd, ctx = _fake_round(chosen=chosen)
    C, ss, st, C_s, gamma, B = 0.7, 0.3, 1.3, 0.1, 0.5, 6
    agg = rr_cluster.PrivateClusterAggregator(sigma_s=ss, sigma_theta=st, clip=C, B=B, C_s=C_s, server_lr=gamma)
    noise, reb = copy.deepcopy(ctx.rngs["noise"]), copy.deepcopy(ctx.rngs["rebalance"])
    out = agg(state, upd, ctx)
    # expected: (2) identifiers, (3) argmax, (4) RR, (5) clip, (6) sums + N(0,(2 C st)^2), / |S_j|, (7) step
    s = np.zeros((30, 3))
    s[np.arange(30), chosen.numpy()] = C_s
    s += noise.standard_normal((30, 3)) * math.sqrt(2) * C_s * ss
    rr = random_rebalance(s.argmax(1), 3, B, reb)
    g = torch.as_tensor(rr.groups)
    np.testing.assert_array_equal(out.groups.numpy(), rr.groups)
    assert out.cluster_sizes.min() >= B and rr.n_moved > 0
    deltas = upd.deltas()
    norms = torch.sqrt(sum(v.reshape(30, -1).pow(2).sum(1) for v in deltas.values()))
    scale = torch.clamp(C / norms, max=1.0)
    for n, old in state.params.items():
        d = deltas[n] * scale.reshape(-1, *([1] * (old.ndim - 1)))
        sums = torch.zeros_like(old).index_add_(0, g, d)
        sums = sums + torch.as_tensor(noise.standard_normal(tuple(old.shape)) * (2 * C * st), dtype=old.dtype)
        cnt = torch.bincount(g, minlength=3).to(old.dtype).reshape(-1, *([1] * (old.ndim - 1)))
        torch.testing.assert_close(out.params[n], old + gamma * sums / cnt)
    assert agg.log["n_moved"] == [rr.n_moved] and agg.log["sizes_after_rr"][0] == rr.sizes_after.tolist()


@pytest.mark.parametrize(
    "B,calibration,expected",
    [(0, "replace_one", 2), (2, "replace_one", 2), (0, "paper_literal", 1), (3, "paper_literal", 2)],
)
def test_noise_std_on_the_cluster_sums(B, calibration, expected):
    # zero deltas: the model change times |S_j| / gamma is exactly the noise on cluster j's sum
    state, upd, ctx = _fake_round(S=40, k=2, shapes=((200, 60),), zero=True, seed=4)
    C, st, gamma = 0.3, 1.7, 2.0
    agg = rr_cluster.PrivateClusterAggregator(
        sigma_s=0.5, sigma_theta=st, clip=C, B=B, server_lr=gamma, noise_calibration=calibration
    )
    out = agg(state, upd, ctx)
    (rel,) = agg.finish(3, 400, 40)
    assert rel.neighbouring == "replace_one" and rel.sampling == "without_replacement" and rel.unit == "client"
    for j in range(2):
        noise = (out.params["p0"][j] - state.params["p0"][j]) * out.cluster_sizes[j] / gamma
        assert abs(float(noise.std()) / (expected * C * st) - 1) < 0.02  # 12000 draws: ~0.6% sd
        assert abs(float(noise.mean())) < 0.05 * expected * C * st
        # the release's model multiplier is the std actually added over the replace-one sensitivity 2 C
        assert abs(float(noise.std()) / (2 * C * rel.noise_multipliers[-1]) - 1) < 0.02


def test_noise_std_of_the_privatize_functions():
    rng = np.random.default_rng(0)
    deltas = {"w": torch.zeros(50, 300, 20)}
    groups = torch.arange(50) % 4
    sums = rr_cluster.noisy_cluster_sums(deltas, groups, 4, 2 * 0.5 * 3.0, rng)
    assert abs(float(sums["w"].std()) / 3.0 - 1) < 0.01
    chosen = torch.randint(0, 5, (40000,))
    noisy, s = rr_cluster.privatize_identifiers(chosen, 5, 2.0, 0.1, rng)
    clean = np.zeros_like(s)
    clean[np.arange(40000), chosen.numpy()] = 0.1
    assert abs((s - clean).std() / (math.sqrt(2) * 0.1 * 2.0) - 1) < 0.01  # replace-one sensitivity sqrt(2) C_s
    np.testing.assert_array_equal(noisy.numpy(), s.argmax(1))
    # the argmax keeps the true index with the probability of the spec's table (k=5 between 0.552 at k=4...)
    noisy, _ = rr_cluster.privatize_identifiers(
        torch.zeros(40000, dtype=torch.long), 4, 0.5, 0.1, rng, literal=True
    )  # the paper's std C_s sigma_s
    assert abs(float((noisy == 0).float().mean()) - 0.823) < 0.01  # spec 2.2: k=4, sigma_s=0.5 -> 0.823
    with pytest.raises(ValueError, match="C_s"):
        rr_cluster.privatize_identifiers(chosen[:3], 5, 1.0, 1.5, rng)


def _collapse_data(seed=5):
    rd = mixed_regression_1d("imbalanced", "hard", seed=seed)
    return FederatedTensors.from_arrays(rd.X, rd.target, rd.client, group=rd.client_group)


def test_ifca_leaves_a_model_untrained_rr_trains_all():
    # spec appendix D.3 (non-private): imbalanced 4:2:1:1, hard, k = 4, full participation
    seed = 5
    data = _collapse_data(seed)
    model = LinearRegression(1, bias=True)
    init = model.init(4, stream(seed, "init"))
    kw = dict(rounds=40, lr=0.1, local_steps=5, participation=1.0, seed=seed, eval_every=0)
    ifca = rr_cluster.run(data, model, 4, B=0, **kw)
    rr = rr_cluster.run(data, model, 4, B=8, **kw)
    sizes = np.array(ifca.history["sizes_after_rr"])
    idle = np.flatnonzero(sizes.sum(0) == 0)
    assert idle.size >= 1  # IFCA: a cluster model never receives an update ...
    for j in idle:  # ... and stays exactly at its random init
        assert all(torch.equal(ifca.params[n][j], init[n][j]) for n in init)
    rsz = np.array(rr.history["sizes_after_rr"])
    assert rsz.min() >= 8 and sum(rr.history["n_moved"]) > 0  # RR: every model >= B updates every round
    for j in range(4):
        assert all(not torch.equal(rr.params[n][j], init[n][j]) for n in init)
    # IFCA's untrained model also wins no client at the end: 4 lines served by 3 models
    assert np.bincount(ifca.assignment, minlength=4)[idle].sum() == 0


def test_b_larger_than_m_over_k_is_refused():
    data = _collapse_data()
    model = LinearRegression(1, bias=True)
    with pytest.raises(ValueError, match=r"B \(rebalancing threshold\).*got B=3"):
        rr_cluster.run(data, model, 4, B=3, participation=0.1, rounds=1)  # m = 10, m/k = 2.5
    with pytest.raises(ValueError, match="sampling"):
        rr_cluster.run(data, model, 4, B=1, participation=0.1, rounds=1, sampling="poisson")
    with pytest.raises(ValueError, match="sensitivity_factor"):
        rr_cluster.run(data, model, 4, B=1, participation=0.1, rounds=1, sensitivity_factor=1)
    with pytest.raises(ValueError, match="noise_calibration"):
        rr_cluster.run(data, model, 4, B=1, participation=0.1, rounds=1, noise_calibration="add_remove")
    with pytest.raises(ValueError, match=r"C_s .*\(0, 1\]"):
        rr_cluster.run(
            data, model, 4, B=1, participation=0.1, rounds=1, sigma_s=1.0, sigma_theta=1.0, clip=1.0, C_s=2.0
        )
    with pytest.raises(ValueError, match="clip"):
        rr_cluster.run(data, model, 4, B=1, participation=0.1, rounds=1, sigma_s=1.0, sigma_theta=1.0)
    with pytest.raises(ValueError, match="sigma_s must be > 0"):
        rr_cluster.run(data, model, 4, B=1, participation=0.1, rounds=1, sigma_s=None, sigma_theta=1.0, clip=1.0)
    with pytest.raises(ValueError, match="base"):
        rr_cluster.run(data, model, 4, base="kmeans", B=1, participation=0.1, rounds=1)


def test_calibration_release_and_spent_epsilon():
    from fedclust.privacy.accountants import epsilon as accounted

    # the paper's own bound (spec 3.4 reference table, autodp Thm-9 general + min): T=100, eps=4 -> 3.64
    ss, st = rr_cluster.calibrate(4, 1e-3, 0.1, 100, 1000, 0.5, bound="wang_general")
    assert ss == pytest.approx(st) and st == pytest.approx(3.64, rel=0.02)
    assert rr_cluster.calibrate(math.inf, 1e-3, 0.1, 50, 1000) == (0.0, 0.0)
    # default: the accountant (replace-one, fixed-size sampling), so the run's epsilon equals the target,
    # with less noise than the paper's looser bound
    data = _collapse_data()
    model = LinearRegression(1, bias=True)
    ss, st = rr_cluster.calibrate(4, 1e-3, 0.2, 5, data.n_clients, 0.3)
    assert 1 / ss**2 == pytest.approx(0.3 / paper.effective_sigma(ss, st) ** 2)
    res = rr_cluster.run(
        data, model, 4, B=2, sigma_s=ss, sigma_theta=st, clip=1.0, participation=0.2, rounds=5, eval_every=0
    )
    (rel,) = res.dp_events
    assert rel.noise_multipliers == pytest.approx((ss, st)) and rel.count == 5 and rel.sample_size == 20
    assert rel.population == 100 and rel.unit == "client" and rel.sampling == "without_replacement"
    assert rel.neighbouring == "replace_one"
    eps = accounted(res.dp_events, 1e-3)
    assert eps <= 4.0 and eps == pytest.approx(4.0, rel=2e-3)
    assert paper.epsilon(0.2, 5, *rel.noise_multipliers) > eps  # the paper's formula is the looser bound
    assert len(res.history["n_moved"]) == 5 and res.info["noise_calibration"] == "replace_one"
    assert any("replace-one" in n for n in res.info["privacy_notes"])
    s3 = rr_cluster.calibrate_fedcam(4, 1e-3, 0.2, 5, 100)
    cam = rr_cluster.run(
        data,
        model,
        4,
        base="fedcam",
        B=2,
        sigma_s=s3[0],
        sigma_g=s3[1],
        sigma_theta=s3[2],
        clip=1.0,
        participation=0.2,
        rounds=5,
        eval_every=0,
    )
    assert cam.dp_events[0].noise_multipliers == pytest.approx(s3)
    assert accounted(cam.dp_events, 1e-3) == pytest.approx(4.0, rel=2e-3)
    nonpriv = rr_cluster.run(data, model, 4, B=2, participation=0.2, rounds=2, eval_every=0)
    assert nonpriv.dp_events == []


def test_private_run_refuses_data_dependent_init():
    # IFCA's restart heuristic reads the clients' raw losses to pick the init (amendment A-1)
    data = _collapse_data()
    model = LinearRegression(1, bias=True)
    kw = dict(B=0, participation=0.2, rounds=1, eval_every=0, init_min_fraction=0.1)
    rr_cluster.run(data, model, 4, **kw)  # non-private: allowed
    with pytest.raises(ValueError, match="init_min_fraction"):
        rr_cluster.run(data, model, 4, sigma_s=1.0, sigma_theta=1.0, clip=1.0, **kw)


def test_full_participation_is_an_unsampled_replace_one_release():
    # q = 1: every client every round; the same replace-one sensitivities, no amplification
    from fedclust.privacy.accountants import epsilon as accounted
    from fedclust.privacy.events import GaussianRelease

    data = _collapse_data()
    ss, st = rr_cluster.calibrate(3.0, 1e-3, 1.0, 4, data.n_clients, 0.5)
    res = rr_cluster.run(
        data,
        LinearRegression(1, bias=True),
        4,
        B=8,
        sigma_s=ss,
        sigma_theta=st,
        clip=1.0,
        participation=1.0,
        rounds=4,
        eval_every=0,
    )
    (rel,) = res.dp_events
    assert rel.sample_size == rel.population == 100 and rel.neighbouring == "replace_one"
    plain = GaussianRelease((paper.effective_sigma(ss, st),), count=4)  # unsampled Gaussian, same z_eff
    assert accounted([rel], 1e-3) == pytest.approx(accounted([plain], 1e-3), rel=1e-9)
    assert accounted([rel], 1e-3) == pytest.approx(3.0, rel=2e-3)


def test_grid_rr_equals_dp_ifca_when_nothing_moves_and_literal_noise_costs_epsilon():
    """Under one relation RR-Cluster and DP-IFCA add the same noise (replace-one, 2 C_theta): when the identifier
    noise keeps every cluster >= B (nothing moves), RR-Cluster equals DP-IFCA exactly and spends the same
    epsilon; DP-IFCA with the paper's C_theta noise (withdrawn A2) reports the larger epsilon it really spends."""
    from fedclust.grids import rr as rr_grid

    recs = rr_grid.run(
        {
            "dataset": "digits",
            "n_clients": 60,
            "participation": 0.25,
            "rounds": 3,
            "epsilons": [2.0],
            "seeds": 1,
            "methods": ["dp_ifca", "dp_ifca_literal", "rr_cluster"],
            "Bs": [1],
            "settings": ["balanced"],
            "samples_per_client": 5,
            "test_per_client": 1,
            "eval_every": 0,
        }
    )
    by = {r["params"]["label"]: r["metrics"] for r in recs}
    assert set(by) == {"dp_ifca", "dp_ifca_literal", "rr_cluster(B=1)"}
    assert by["rr_cluster(B=1)"]["mean_moved"] == 0.0 and by["rr_cluster(B=1)"]["min_noisy_cluster"] >= 1
    for m in ("test_accuracy", "client_ACC", "min_noisy_cluster"):
        assert by["rr_cluster(B=1)"][m] == by["dp_ifca"][m]
    assert by["dp_ifca"]["epsilon_accountant"] == pytest.approx(2.0, rel=2e-3)
    assert by["rr_cluster(B=1)"]["epsilon_accountant"] == pytest.approx(by["dp_ifca"]["epsilon_accountant"])
    assert by["dp_ifca_literal"]["epsilon_accountant"] > 1.5 * by["dp_ifca"]["epsilon_accountant"]
    tables = rr_grid.tables(recs)
    assert {"dp_ifca", "dp_ifca_literal", "rr_cluster(B=1)"} <= set(tables["table4_client_ACC"].columns)
