"""The k-means family's clip default: a public rule, never a number read off one data set."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.clustering.defaults import DP_CLIP_LABEL, DP_CLIP_RULE, norm_grid
from fedclust.clustering.fed_dp_kmeans import holdout_rows
from fedclust.data.registry import prepare_dataset
from fedclust.partition import make_partition
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.registry import REGISTRY

PRIVATE = {"epsilon": 4.0, "delta": 1e-5, "accountant": "rdp"}


def _run(method, ds, settings, seed=0):
    spec = REGISTRY[method]
    cfg = spec.config_from({"rounds": 2, "private_rounds": 2, **settings})
    part = make_partition("iid", y=ds.y, n_clients=4, seed=seed)
    noise = spec.calibrate(PRIVATE, cfg, ds, part)
    return noise, spec.run(ds, part, noise, cfg, seed)


@pytest.fixture(scope="module")
def iris():
    return prepare_dataset("iris", scale="minmax")


@pytest.mark.parametrize("method", ["fkm", "fzkm", "dk_pp"])
def test_without_server_data_the_clip_is_a_dp_median_that_the_budget_accounts_for(method, iris):
    noise, res = _run(method, iris, {})
    assert noise["clip"] == DP_CLIP_RULE and noise["extra_releases"] == 1  # the calibration names the rule
    assert res.info["clip_rule"] == DP_CLIP_RULE
    # the estimate is an edge of the public grid next to the data's median norm (iris: 4 features)
    median = float(np.median(np.linalg.norm(iris.X, axis=1)))
    assert res.info["clip"] in set(norm_grid()) and median / 1.5 < res.info["clip"] < median * 1.5
    # its release is among the run's events, and every release together spends the target epsilon
    assert res.dp_events[0].label == DP_CLIP_LABEL
    assert res.dp_events[0].noise_multipliers == (noise["noise_multiplier"],)
    assert accounted(res.dp_events, PRIVATE["delta"]) == pytest.approx(PRIVATE["epsilon"], rel=0.01)
    cfg = REGISTRY[method].config_from({"rounds": 2, "private_rounds": 2, "clip": 1.0})
    given = REGISTRY[method].calibrate(PRIVATE, cfg, iris, make_partition("iid", y=iris.y, n_clients=4, seed=0))
    assert given["noise_multiplier"] < noise["noise_multiplier"]  # the estimate costs budget


@pytest.mark.parametrize("method", ["fkm", "fzkm", "dk_pp"])
def test_with_a_server_sample_the_clip_is_its_median_row_norm(method, iris):
    seed = 1
    _, res = _run(method, iris, {"server_data": "holdout"}, seed=seed)
    rows = holdout_rows(iris.n_samples, 0.05, seed)
    want = float(np.median(np.linalg.norm(iris.X[rows], axis=1)))
    assert res.info["clip"] == pytest.approx(want) and "median" in res.info["clip_rule"]


def test_a_given_clip_is_used_as_given(iris):
    _, res = _run("fkm", iris, {"clip": 0.7})
    assert res.info["clip"] == 0.7 and res.info["clip_rule"] == "given"


def test_unscaled_data_get_a_dp_clip_too():
    ds = prepare_dataset("iris", scale="none")  # no declared bound: the DP estimate needs none
    _, res = _run("fkm", ds, {})
    median = float(np.median(np.linalg.norm(ds.X, axis=1)))
    assert median / 1.5 < res.info["clip"] < median * 1.5


def _fed_dp_kmeans(ds, settings, seed=0, privacy=PRIVATE):
    spec = REGISTRY["fed_dp_kmeans"]
    cfg = spec.config_from({"server_data": "none", **settings})
    part = make_partition("iid", y=ds.y, n_clients=4, seed=seed)
    noise = spec.calibrate(privacy, cfg, ds, part)
    return noise, spec.run(ds, part, noise, cfg, seed)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("scale", ["minmax", "none"])
def test_fed_dp_kmeans_without_server_data_releases_a_dp_clip_that_its_budget_split_accounts_for(scale, accountant):
    ds = prepare_dataset("iris", scale=scale)  # unscaled: no declared bound, the estimate needs none
    privacy = {**PRIVATE, "accountant": accountant}
    noise, res = _fed_dp_kmeans(ds, {}, privacy=privacy)
    assert noise["clip"] == DP_CLIP_RULE and "clip" in noise["noise_multipliers"]
    assert any("DP median" in note for note in noise["notes"])
    assert res.info["clip_rule"] == DP_CLIP_RULE
    median = float(np.median(np.linalg.norm(ds.X, axis=1)))
    assert res.info["clip"] in set(norm_grid()) and median / 1.5 < res.info["clip"] < median * 1.5
    # the clip release is among the run's events at its multiplier, and all of them spend the target
    clip_events = [e for e in res.dp_events if e.label == "fed_dp_kmeans clip"]
    assert [e.noise_multipliers for e in clip_events] == [(noise["noise_multipliers"]["clip"],)]
    assert accounted(res.dp_events, PRIVATE["delta"], accountant) == pytest.approx(PRIVATE["epsilon"], rel=0.01)


def test_fed_dp_kmeans_given_clip_and_server_sample_keep_their_rules(iris):
    noise, res = _fed_dp_kmeans(iris, {"clip": 0.7})
    assert "clip" not in noise["noise_multipliers"] and noise["clip"] == 0.7
    assert (res.info["clip"], res.info["clip_rule"]) == (0.7, "given")
    assert accounted(res.dp_events, PRIVATE["delta"]) == pytest.approx(PRIVATE["epsilon"], rel=0.01)
    noise, res = _fed_dp_kmeans(iris, {"server_data": "holdout"}, seed=1)
    assert "clip" not in noise["noise_multipliers"] and "median" in res.info["clip_rule"]
    rows = holdout_rows(iris.n_samples, 0.05, 1)
    assert res.info["clip"] == pytest.approx(float(np.median(np.linalg.norm(iris.X[rows], axis=1))))
