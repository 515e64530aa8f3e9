"""The Flower backend's server, release and client code with SecAgg+'s arithmetic in one process
(fedclust.deploy.local): same results as the simulation backend without noise, and distributed noise
that the accounting follows when clients drop out."""

import math

import numpy as np
import pytest

from fedclust.clustering import fed_dp_kmeans, fkm
from fedclust.clustering._common import clip_data
from fedclust.deploy import digits, local
from fedclust.deploy.server_app import SecAggFailure
from fedclust.privacy.observe import observe

K = 10


@pytest.fixture(scope="module")
def data():
    X, y = digits.scaled()
    return X, y, np.arange(X.shape[0]) % 10


@pytest.mark.parametrize("server", [True, False], ids=["server_rows", "dp_candidates"])
def test_without_noise_every_stage_matches_the_simulation_within_the_quantization_error(data, server):
    X, y, client = data
    kw = dict(projection="dp_pca", steps=2, clip=2.5, seed=3)  # projection, weighting, lift and two steps
    if server:
        kw["server_rows"] = fed_dp_kmeans.holdout_rows(X.shape[0], 0.05, 0)
    sim = fed_dp_kmeans.run(X, client, K, y=y, **kw)
    fl = local.run("fed_dp_kmeans", X, client, K, y=y, **kw)
    stages = [r["stage"] for r in fl.info["aggregation"]["releases"]]
    assert stages == ["projection", "weighting", "lift", "step", "step"]
    # a centre is a released sum over a released count >= 1; counts are carried exactly, so a centre
    # moves by at most the sums' quantization error
    bound = max(r["max_quantization_error"].get("sums", 0.0) for r in fl.info["aggregation"]["releases"])
    assert 0 < np.abs(fl.centroids - sim.centroids).max() <= bound
    assert abs(fl.history["ACC"][-1] - sim.history["ACC"][-1]) <= 0.01


def _noise_on_the_sum(X, client, survivors, seen, clip, C0):
    """The released totals minus the survivors' true totals under the broadcast centres."""
    sums, counts = seen
    true = [fkm.client_statistic(X[client == i], clip_data(X[client == i], clip), C0) for i in survivors]
    return np.concatenate([(sums - sum(t["sums"] for t in true)).ravel(), counts - sum(t["counts"] for t in true)])


@pytest.mark.parametrize("threshold, drop", [(0.5, ()), (0.8, (3, 7))], ids=["all_of_10_t5", "down_to_t8"])
def test_the_sum_carries_the_shares_that_reached_it_and_the_accounting_follows(data, threshold, drop):
    X, y, client = data
    z, clip = 1.0, 1.0
    kw = dict(rounds=1, seed=2, clip=clip, noise_multiplier=z, init="uniform_box")
    C0 = fkm.plan_run(X, client, K, fkm.FKMOptions.build(None, kw)).C0
    with observe("lloyd_totals") as seen:
        res = local.run("fkm", X, client, K, y=y, threshold=threshold, drop=drop, **kw)
    t, s = math.ceil(threshold * 10), 10 - len(drop)
    agg = res.info["aggregation"]
    assert (agg["threshold_t"], agg["fewest_clients_in_sum"]) == (t, s)
    noise = _noise_on_the_sum(X, client, [i for i in range(10) if i not in drop], seen[0], clip, C0)
    sigma = z * math.sqrt(clip**2 + 1)  # the accounted std of the sum (secure aggregation)
    # s shares of variance sigma^2 / t: std sigma sqrt(s / t) >= sigma; 650 entries, relative SE 2.8%
    assert noise.std() == pytest.approx(sigma * math.sqrt(s / t), rel=0.1)
    assert noise.std() >= 0.9 * sigma
    # epsilon is accounted for the noise present: multiplier z sqrt(s / t)
    assert res.dp_events[-1].noise_multipliers[0] == pytest.approx(z * math.sqrt(s / t))


def test_a_dropout_below_t_fails_the_round_with_one_line(data):
    X, y, client = data
    with pytest.raises(SecAggFailure) as err:
        local.run("fkm", X, client, K, threshold=0.8, drop=(0, 1, 2), rounds=1, clip=1.0, noise_multiplier=1.0)
    msg = str(err.value)
    assert "\n" not in msg and "t=8" in msg and "of the 10 sampled clients" in msg


def test_without_clip_and_server_data_the_clip_stage_goes_through_secagg_first(data):
    # no clip, no server data: the clients' norm histogram is the first sum; without noise its counts
    # arrive exactly, so the clip (and with it every later stage) is the simulation's
    X, y, client = data
    kw = dict(projection="dp_pca", steps=1, seed=3)
    sim = fed_dp_kmeans.run(X, client, K, y=y, **kw)
    fl = local.run("fed_dp_kmeans", X, client, K, y=y, **kw)
    stages = [r["stage"] for r in fl.info["aggregation"]["releases"]]
    assert stages == ["clip", "projection", "weighting", "lift", "step"]
    assert fl.info["clip"] == sim.info["clip"] and fl.info["clip_rule"] == fed_dp_kmeans.NOISELESS_CLIP_RULE
    # private: the clip release is accounted at the multiplier of its budget share (all 10 clients reached it)
    z = fed_dp_kmeans.noise_multipliers(4.0, 1e-5, has_server_data=False, clip_stage=True)
    priv = local.run("fed_dp_kmeans", X, client, K, y=y, noise=z, **kw)
    assert priv.dp_events[0].label == "fed_dp_kmeans clip"
    assert priv.dp_events[0].noise_multipliers[0] == pytest.approx(z["clip"] * math.sqrt(10 / 8))
    assert priv.info["clip_rule"] == fed_dp_kmeans.DP_CLIP_RULE
