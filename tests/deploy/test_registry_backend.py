"""`<method>.train.backend` in the registry: `flower` runs the same configuration through the Flower
backend (here its in-process transport, the engine being slow), `simulation` stays the default, and a
trust model other than SecAgg+'s is refused before the run."""

from types import SimpleNamespace

import numpy as np
import pytest

from fedclust.deploy import digits, flower, local
from fedclust.registry import REGISTRY


@pytest.fixture(scope="module")
def data():
    X, y = digits.scaled()
    return SimpleNamespace(X=X, y=y, n_classes=10, images=None, meta={}), SimpleNamespace(client=np.arange(len(y)) % 10)


@pytest.mark.parametrize("method, settings", [("fed_dp_kmeans", {}), ("fkm", {"rounds": 4})])
@pytest.mark.parametrize("epsilon", [None, 4.0])
def test_the_flower_backend_runs_the_registry_s_configuration(data, monkeypatch, method, settings, epsilon):
    ds, part = data
    calls = []

    def in_process(m, X, client, k, options=None, flower=None, **kw):
        calls.append((m, flower["threshold"]))
        return local.run(m, X, client, k, options, threshold=flower["threshold"], clip_noise=flower["clip_noise"], **kw)

    monkeypatch.setattr(flower, "run", in_process)
    spec = REGISTRY[method]
    results = {}
    for backend in ("simulation", "flower"):
        cfg = spec.config_from({**settings, "backend": backend, "secagg_threshold": 0.5})
        noise = spec.calibrate({"epsilon": epsilon, "delta": 1e-5}, cfg, ds, part)
        results[backend] = spec.run(ds, part, noise, cfg, 1)
    assert calls == [(method, 0.5)]  # the simulation backend never calls Flower
    sim, fl = results["simulation"], results["flower"]
    assert "aggregation" not in sim.info and fl.info["aggregation"]["protocol"] == "SecAgg+"
    assert fl.info["aggregation"]["threshold_t"] == 5
    if epsilon is None:  # same configuration, same seed: the same centres up to SecAgg+'s grid
        assert np.abs(fl.centroids - sim.centroids).max() < 1e-4
    else:  # 10 shares over t = 5: the noise present is sqrt(2) times the planned, and accounted so
        # (private FKM without server data estimates its clip first: a release through SecAgg+ too)
        z_sim = [e.noise_multipliers[0] for e in sim.dp_events if e.noise_multipliers]
        z_fl = [e.noise_multipliers[0] for e in fl.dp_events if e.noise_multipliers]
        assert z_fl == pytest.approx([z * np.sqrt(2) for z in z_sim])


@pytest.mark.parametrize("method", ["fed_dp_kmeans", "fkm"])
def test_the_flower_backend_needs_secure_aggregation(method):
    assert REGISTRY[method].config_from({}).backend == "simulation"
    with pytest.raises(ValueError, match="backend=flower .* trust_model=secure_aggregation"):
        REGISTRY[method].config_from({"backend": "flower", "trust_model": "local"})
