"""FedSC's private path against its non-private twin: the same rows (projected onto the declared
domain and clipped to the same clip_tau), the same seed (so the same dictionary init and client
split) and the same kernel constants; the only difference is the perturbed-data noise."""

import numpy as np
import pytest

from fedclust.clustering import fedsc
from fedclust.data.registry import prepare_dataset
from fedclust.partition.iid import iid
from fedclust.registry import REGISTRY

SPEC = REGISTRY["fedsc"]
TRAIN = {"d_max": 100, "n_init": 10}


def _mixture():
    """Three Gaussian clusters in the plane, centres 8 cluster stds apart, min-max scaled to [0, 1]^2."""
    opts = {"n_samples": 300, "n_features": 2, "k": 3, "separation": 8.0}
    return prepare_dataset("gaussian_mixture", seed=0, scale="minmax", options=opts)


def _twin(ds, part, noise, seed):
    """The non-private run with the private run's clip, domain and (rule-estimated) constants."""
    return fedsc.run(
        ds.X,
        part.client,
        int(ds.y.max()) + 1,
        seed=seed,
        y=ds.y,
        clip_tau=noise["clip_tau"],
        data_domain=noise["data_domain"],
        **TRAIN,
    )


def test_private_path_with_zero_noise_gives_the_non_private_twin_labels():
    """The registry's private path (calibrate at epsilon = 256, then run) with its noise set to zero
    returns exactly the labels (and r, d) of the non-private run on the same bounded rows."""
    ds = _mixture()
    part = iid(ds.X.shape[0], 10, seed=0)
    cfg = SPEC.config_from(TRAIN)
    noise = SPEC.calibrate({"epsilon": 256.0, "delta": 1e-5}, cfg, ds, part)
    assert noise["private"] and noise["data_noise_std"] > 0 and noise["trust_model"] == "local"
    # the public clip rule: half the largest norm of [0, 1]^2
    assert noise["clip_tau"] == pytest.approx(np.sqrt(2) / 2)
    for seed in (0, 1):
        priv = SPEC.run(ds, part, dict(noise, data_noise_std=0.0), cfg, seed)
        twin = _twin(ds, part, noise, seed)
        np.testing.assert_array_equal(priv.labels, twin.labels)
        assert (priv.info["r"], priv.info["d"]) == (twin.info["r"], twin.info["d"])
    noisy = SPEC.run(ds, part, noise, cfg, 0)
    assert noisy.info["trust_model"] == "local"
    assert all(ev.extra["trust_model"] == "local" for ev in noisy.dp_events)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_private_run_at_epsilon_256_stays_within_0_03_acc_of_its_twin(seed):
    """At epsilon = 256 the perturbed-data noise (std about 0.054 per coordinate on [0, 1]^2, sensitivity
    sqrt(2) clip_tau = 1) is small next to clusters 8 stds apart (about 0.07 per coordinate after min-max
    scaling), so the private run loses at most 0.03 ACC against its twin. Measured: private 0.977,
    0.963, 0.977 against twins 0.993, 0.950, 0.923 (seeds 0, 1, 2). On digits (64 features) the same
    budget leaves a much larger gap (docs/methods/fedsc.md): the noise, not the pipeline, sets it."""
    ds = _mixture()
    part = iid(ds.X.shape[0], 10, seed=seed)
    cfg = SPEC.config_from(TRAIN)
    noise = SPEC.calibrate({"epsilon": 256.0, "delta": 1e-5}, cfg, ds, part)
    priv = SPEC.run(ds, part, noise, cfg, seed)
    twin = _twin(ds, part, noise, seed)
    assert priv.info["ACC"] >= twin.info["ACC"] - 0.03, (priv.info["ACC"], twin.info["ACC"])
