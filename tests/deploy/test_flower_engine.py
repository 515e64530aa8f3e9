"""The Flower backend on Flower's simulation engine: ServerApp and ClientApps in Ray workers, every
sum through the real SecAgg+ protocol (keys, shares, masks, unmasking)."""

import math

import numpy as np
import pytest

from fedclust.clustering import fed_dp_kmeans, fkm
from fedclust.clustering._common import clip_data
from fedclust.deploy import digits, flower
from fedclust.deploy.server_app import SecAggFailure
from fedclust.privacy.observe import observe

K = 10


@pytest.mark.slow
def test_every_stage_through_secagg_matches_the_simulation_without_noise():
    X, y = digits.scaled()
    client = np.arange(X.shape[0]) % 5
    kw = dict(projection="dp_pca", steps=1, clip=2.5, seed=1, server_rows=fed_dp_kmeans.holdout_rows(len(y), 0.05, 1))
    sim = fed_dp_kmeans.run(X, client, K, y=y, **kw)
    with observe("weights") as weights:
        fl = flower.run("fed_dp_kmeans", X, client, K, y=y, **kw)
    agg = fl.info["aggregation"]
    assert [r["stage"] for r in agg["releases"]] == ["projection", "weighting", "lift", "step"]
    assert agg["protocol"] == "SecAgg+" and agg["fewest_clients_in_sum"] == 5
    # the histogram is carried exactly (integers on the grid), so the server keeps the same points
    assert weights and np.array_equal(weights[0], np.round(weights[0]))
    bound = max(r["max_quantization_error"].get("sums", 0.0) for r in agg["releases"])
    assert np.abs(fl.centroids - sim.centroids).max() <= bound
    assert abs(fl.history["ACC"][-1] - sim.history["ACC"][-1]) <= 0.01


@pytest.mark.slow
def test_clients_dropping_to_t_leave_the_accounted_noise_and_below_t_the_round_fails():
    X, _ = digits.scaled()
    X = X[:600]
    client = np.arange(X.shape[0]) % 5
    z, clip = 1.0, 1.0
    kw = dict(rounds=2, seed=1, clip=clip, noise_multiplier=z, init="uniform_box")
    C0 = fkm.plan_run(X, client, K, fkm.FKMOptions.build(None, kw)).C0

    def drop(partition, config):  # release 1: one of 5 goes offline (t = 4); release 2: two do
        return partition in {1: (0,), 2: (0, 1)}[int(config["release"])]

    with observe("lloyd_totals") as seen, pytest.raises(SecAggFailure) as err:
        flower.run("fkm", X, client, K, flower={"drop": drop, "threshold": 0.8}, **kw)
    assert "\n" not in str(err.value) and "t=4 of the 5 sampled clients" in str(err.value)
    assert len(seen) == 1  # round 1 was released, round 2 was not
    sums, counts = seen[0]
    true = [fkm.client_statistic(X[client == i], clip_data(X[client == i], clip), C0) for i in range(1, 5)]
    noise = np.concatenate([(sums - sum(t["sums"] for t in true)).ravel(), counts - sum(t["counts"] for t in true)])
    # 4 = t shares of variance sigma^2 / 4 reached the sum: std sigma (650 entries, relative SE 2.8%)
    sigma = z * math.sqrt(clip**2 + 1)
    assert noise.std() == pytest.approx(sigma, rel=0.1) and noise.std() >= 0.9 * sigma
