"""DP-FedC's pipeline nodes: by default privacy.epsilon is the accounted (worst-client) epsilon, the
same budget every other method is calibrated to; budget: paper keeps the paper's eps_bar."""

from types import SimpleNamespace

import numpy as np
import pytest

from fedclust.data.preprocess import preprocess
from fedclust.data.registry import load_dataset
from fedclust.pipelines.methods import node_functions
from fedclust.pipelines.privacy.nodes import report_privacy

calibrate, train = node_functions("dp_fedc")

TRAIN = {"rounds": 4, "clients_per_round": 3, "Q1": 2, "q2": 2, "Qhat": 10, "b": 20, "G": 0.03, "clip": 4.0}


@pytest.fixture(scope="module")
def digits_parts():
    ds = preprocess(load_dataset("digits"), "minmax")
    idx = np.random.default_rng(0).choice(ds.X.shape[0], 300, replace=False)
    from dataclasses import replace

    ds = replace(ds, X=ds.X[idx], y=ds.y[idx], images=None)
    # unequal client sizes (30, 50, 70, 70, 80): the clients differ in q_i and sigma_i
    client = np.repeat(np.arange(5), [30, 50, 70, 70, 80])
    return ds, SimpleNamespace(client=np.random.default_rng(1).permutation(client))


def _run(ds, part, budget, eps=4.0):
    privacy = {"epsilon": eps, "delta": 1e-5}
    tr = {**TRAIN, "budget": budget}
    noise = calibrate(privacy, tr, ds, part)
    res = train(ds, part, noise, tr, 0)
    return noise, report_privacy(res, noise, privacy, method="dp_fedc")


def test_default_budget_is_the_accounted_epsilon_of_the_worst_client(digits_parts):
    ds, part = digits_parts
    assert len(set(np.bincount(part.client))) > 1
    noise, rep = _run(ds, part, "accountant")
    assert rep["private"] and 4.0 * 0.99 <= rep["epsilon"] <= 4.0 * (1 + 1e-9)
    assert noise["eps_bar"] != pytest.approx(4.0, rel=0.05)  # eps_bar is solved for, not the target


def test_paper_budget_takes_epsilon_as_eps_bar_and_reports_the_accounted_one(digits_parts):
    ds, part = digits_parts
    noise, rep = _run(ds, part, "paper")
    assert noise["eps_bar"] == 4.0 and rep["epsilon_paper"] == 4.0
    assert rep["epsilon"] != pytest.approx(4.0, rel=0.05)  # the paper's figure is not the accountant's


def test_unknown_budget_is_refused(digits_parts):
    ds, part = digits_parts
    with pytest.raises(ValueError, match="budget"):
        calibrate({"epsilon": 1.0}, {**TRAIN, "budget": "papr"}, ds, part)
