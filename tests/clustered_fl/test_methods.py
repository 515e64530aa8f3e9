"""End-to-end checks of CFL-MGD (Options I and II), IFCA and FedAvg."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

from fedclust.clustered_fl import MLP, FederatedTensors, LinearRegression, cfl_mgd, fedavg, ifca
from fedclust.partition.rotation import rotation


def _mixed_regression(seed=0, P=4, per=20, n=40, d=10, sep=5.0, noise=0.1):
    """IFCA-style mixed linear regression (spec 004, 3.6, "extra, not in paper"): y = <x, w_p*> + noise."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(P, d))
    W = sep * W / np.linalg.norm(W, axis=1, keepdims=True)
    m = P * per
    group = np.repeat(np.arange(P), per)
    client = np.repeat(np.arange(m), n)
    X = rng.normal(size=(m * n, d))
    y = (X * W[group[client]]).sum(1) + noise * rng.normal(size=m * n)
    Xt = rng.normal(size=(m * n, d))
    yt = (Xt * W[group[client]]).sum(1) + noise * rng.normal(size=m * n)
    return FederatedTensors.from_arrays(X, y, client, Xt, yt, client, group), W


def _theory_ball_init(W, seed=0):
    """Spec 004 Assumption 4: ||chi_p(0) - chi_p*|| <= (1/4) sqrt(mu/L) Delta (mu = L = 1 for N(0, I) inputs).
    Models are listed in a shuffled order so that the recovered labels are a permutation of the groups."""
    rng = np.random.default_rng(seed)
    P, d = W.shape
    delta = min(np.linalg.norm(W[a] - W[b]) for a in range(P) for b in range(a + 1, P))
    dirs = rng.normal(size=(P, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    init = W + 0.2 * delta * dirs
    init = init[rng.permutation(P)]
    return {"weight": torch.as_tensor(init, dtype=torch.float32).unsqueeze(1)}


@pytest.mark.parametrize("method", ["ifca", "cfl_mgd_II", "cfl_mgd_I"])
def test_mixed_linear_regression_recovers_groups_and_parameters(method):
    data, W = _mixed_regression()
    init = _theory_ball_init(W)
    model = LinearRegression(10)
    common = dict(participation=1.0, init_params=init, eval_every=0, seed=0)
    if method == "ifca":
        res = ifca.run(data, model, 4, lr=0.1, local_steps=5, rounds=30, **common)
    elif method == "cfl_mgd_II":
        res = cfl_mgd.run(data, model, 4, option="II", beta=0.5, lr=0.1, local_steps=5, rounds=30, **common)
    else:  # Option I with eta = 1/L = 1 and the spec's 1/m normalization
        res = cfl_mgd.run(data, model, 4, option="I", beta=0.5, lr=1.0, rounds=80, **common)
    assert res.info["final"]["client_ACC"] == 1.0
    assert res.info["final"]["client_NMI"] == pytest.approx(1.0)
    est = res.params["weight"][:, 0].numpy()
    # the cluster that holds group p's clients must hold w_p*
    for p in range(4):
        j = np.bincount(res.assignment[data.group == p]).argmax()
        assert np.linalg.norm(est[j] - W[p]) < 0.05
    assert res.info["final"]["train_loss"] < 0.01  # ~ noise^2 / 2 = 0.005
    assert res.dp_events == []


def test_momentum_speeds_up_option_one_on_regression():
    data, W = _mixed_regression(seed=1)
    init = _theory_ball_init(W, seed=1)
    kw = dict(option="I", lr=1.0, rounds=6, participation=1.0, init_params=init, eval_every=1, seed=0)
    plain = cfl_mgd.run(data, LinearRegression(10), 4, beta=0.0, **kw)
    mom = cfl_mgd.run(data, LinearRegression(10), 4, beta=0.5, **kw)

    def err(r):
        C = np.linalg.norm(r.params["weight"][:, 0].numpy()[:, None] - W[None], axis=2)
        rows, cols = linear_sum_assignment(C)
        return C[rows, cols].max()

    # effective step lr*|S_p|/m = 1/4: plain GD contracts by 3/4 per round, heavy ball faster
    assert err(mom) < 0.7 * err(plain)
    assert mom.history["train_loss"][-1] < plain.history["train_loss"][-1]


@pytest.fixture(scope="module")
def rotated_digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    rd = rotation(
        d.images / 16.0, d.target, n_groups=2, n_clients=40, samples_per_client=30, test_per_client=10, seed=0
    )
    return FederatedTensors.from_rotated(rd)


def test_rotated_digits_clustered_methods_beat_fedavg(rotated_digits):
    data = rotated_digits
    common = dict(rounds=40, lr=0.1, participation=0.5, seed=0)
    mgd = cfl_mgd.run(data, MLP(64, 32, 10), 2, init_min_fraction=0.35, **common)
    ifc = ifca.run(data, MLP(64, 32, 10), 2, init_min_fraction=0.35, **common)
    avg = fedavg.run(data, MLP(64, 32, 10), **common)
    for r in (mgd, ifc):
        assert r.info["final"]["client_ACC"] == 1.0
        assert r.info["final"]["test_accuracy"] > avg.info["final"]["test_accuracy"] + 0.03
        assert r.info["init"] == "random+ifca_restart"
    assert mgd.info["final"]["train_loss"] < ifc.info["final"]["train_loss"]  # momentum: faster descent
    assert avg.info["final"]["client_ACC"] == 0.5 and avg.params["0.weight"].shape[0] == 1
    # history layout
    for key in ("train_loss", "test_accuracy", "client_ACC", "client_NMI", "cluster_sizes"):
        assert len(mgd.history[key]) == 40
    assert all(sum(s) == 20 and len(s) == 2 for s in mgd.history["cluster_sizes"])
    assert mgd.history["train_loss"][-1] < mgd.history["train_loss"][0]
    assert mgd.assignment.shape == (40,) and len(mgd.state_dicts()) == 2


def test_same_seed_same_numbers_and_eval_every(rotated_digits):
    kw = dict(rounds=6, lr=0.1, participation=0.5, seed=3)
    a = cfl_mgd.run(rotated_digits, MLP(64, 16, 10), 2, eval_every=3, **kw)
    b = cfl_mgd.run(rotated_digits, MLP(64, 16, 10), 2, eval_every=3, train_eval="all", **kw)
    for k in a.params:
        assert torch.equal(a.params[k], b.params[k])
    assert a.history["round"] == [3, 6]
    assert b.history["train_loss"][-1] == pytest.approx(b.info["final"]["train_loss"])


def test_method_parameter_errors(rotated_digits):
    with pytest.raises(ValueError, match="option"):
        cfl_mgd.run(rotated_digits, MLP(64, 8, 10), 2, option="III", rounds=1)
    with pytest.raises(ValueError, match="beta"):
        ifca.run(rotated_digits, MLP(64, 8, 10), 2, beta=0.9, rounds=1)
    with pytest.raises(ValueError, match="aggregation"):
        ifca.run(rotated_digits, MLP(64, 8, 10), 2, aggregation="median", rounds=1)
