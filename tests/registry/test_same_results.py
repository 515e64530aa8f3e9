"""A method run through the registry (config class + adapter) equals its library run called directly
with the same settings and seed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fedclust.registry import REGISTRY


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    X = np.clip(np.concatenate([rng.normal(c, 0.08, size=(40, 5)) for c in (0.2, 0.5, 0.8)]), 0, 1)
    y = np.repeat(np.arange(3), 40)
    return SimpleNamespace(X=X, y=y, n_classes=3, images=None), SimpleNamespace(
        client=rng.permutation(np.arange(120) % 4)
    )


def test_fedc_avg_q_hat_zero_and_continuation_none_are_the_library_defaults(blobs):
    from fedclust.clustering import fedc_mf

    ds, part = blobs
    spec = REGISTRY["fedc_avg"]
    cfg = spec.config_from({"rounds": 6, "q_hat": 0, "continuation": "none", "Q2": 2})
    res = spec.run(ds, part, spec.calibrate({"epsilon": None}, cfg, ds, part), cfg, 5)
    ref = fedc_mf.run_fedcavg(
        ds.X,
        part.client,
        3,
        rounds=6,
        Q1=10,
        Q2=2,
        q_hat=None,
        continuation=None,
        gamma=1.1,
        step_rule="lipschitz",
        rho=1e-8,
        nu=1e-10,
        rho_tol=8e-5,
        seed=5,
        y=ds.y,
    )
    np.testing.assert_array_equal(res.labels, ref.labels)
    assert res.history["objective"] == ref.history["objective"]


def test_private_dk_pp_through_the_registry_equals_the_library_run(blobs):
    from fedclust.clustering import dk_pp
    from fedclust.privacy.accountants import calibrate_noise_multiplier

    ds, part = blobs
    spec = REGISTRY["dk_pp"]
    cfg = spec.config_from({"rounds": 6, "private_rounds": 6, "seeding_rounds": 0, "clip": 2.0})
    noise = spec.calibrate({"epsilon": 3.0, "delta": 1e-5}, cfg, ds, part)
    z = calibrate_noise_multiplier(3.0, 1e-5, steps=6, sampling="none", n_mechanisms=1)
    assert noise["noise_multiplier"] == z and noise["dp"] is True
    res = spec.run(ds, part, noise, cfg, 2)
    ref = dk_pp.run(
        ds.X,
        part.client,
        3,
        rounds=6,
        clients_per_round=4,
        seeding_rounds=0,
        mechanism="classical",
        noise_multiplier=z,
        clip=2.0,
        seed=2,
        y=ds.y,
    )
    np.testing.assert_array_equal(res.labels, ref.labels)


def test_rr_cluster_through_the_registry_equals_the_library_run():
    from fedclust.clustered_fl import FederatedTensors, rr_cluster
    from fedclust.clustered_fl.models import MLP
    from fedclust.data.registry import prepare_dataset
    from fedclust.partition import rotation

    ds = prepare_dataset("digits", seed=0, n_per_class=20)
    rot = rotation(ds.images, ds.y, n_clients=16, samples_per_client=8, test_per_client=2, seed=1, n_groups=2)
    spec = REGISTRY["rr_cluster"]
    cfg = spec.config_from({"rounds": 3, "B": 2, "participation": 0.5, "model": {"type": "mlp", "hidden": 8}})
    noise = spec.calibrate({"epsilon": 4.0, "delta": 1e-3}, cfg, rot)
    res = spec.run(rot, noise, cfg, 7)
    ss, st = rr_cluster.calibrate(4.0, 1e-3, 0.5, 3, 16, 0.5, bound="accountant")
    assert (noise["sigma_s"], noise["sigma_theta"]) == (ss, st)
    data = FederatedTensors.from_rotated(rot)
    ref = rr_cluster.run(
        data,
        MLP(d_in=data.d, hidden=8, n_classes=10),
        2,
        base="ifca",
        B=2,
        sigma_s=ss,
        sigma_theta=st,
        clip=0.3,
        C_s=0.1,
        server_lr=1.0,
        lr=0.1,
        local_steps=5,
        rounds=3,
        participation=0.5,
        eval_every=5,
        seed=7,
    )
    assert res.info["final"]["test_accuracy"] == ref.info["final"]["test_accuracy"]
    assert res.history["n_moved"] == ref.history["n_moved"]
    assert res.dp_events == ref.dp_events
