"""`fed_dp_kmeans.train.backend=flower` through a KedroSession: the run is tracked like every run
(the same metrics file and MLflow run, with the backend's tags), and privacy.json names SecAgg+,
its threshold, the clients whose shares reached every sum and the epsilon of the noise present."""

import math

import pytest

from fedclust.privacy.accountants import epsilon as accounted
from fedclust.privacy.events import GaussianRelease

TINY = {
    "dataset": {"name": "digits", "n_per_class": 30},
    "partition": {"scheme": "iid", "n_clients": 6},
    "privacy": {"epsilon": 4.0},
}


@pytest.mark.slow
def test_a_flower_run_is_tracked_like_a_simulation_run_and_names_secagg(run_pipeline, read_versioned_json, mlflow_runs):
    run_pipeline("fed_dp_kmeans", TINY)
    sim = read_versioned_json("data/08_reporting/fed_dp_kmeans/metrics.json")
    run_pipeline("fed_dp_kmeans", {**TINY, "fed_dp_kmeans": {"train": {"backend": "flower"}}})
    fl = read_versioned_json("data/08_reporting/fed_dp_kmeans/metrics.json")
    assert set(fl) == set(sim)  # the same report rows
    privacy = read_versioned_json("data/08_reporting/fed_dp_kmeans/privacy.json")
    agg = privacy["aggregation"]
    assert privacy["aggregation_protocol"] == "SecAgg+" and privacy["trust_model"] == "secure_aggregation"
    assert (agg["threshold_t"], agg["clients"], agg["fewest_clients_in_sum"]) == (5, 6, 6)  # t = ceil(0.8 x 6)
    # 6 shares of sigma^2 / 5 on every sum: the accountant's epsilon of z sqrt(6/5), below the target
    z = privacy["calibration"]["noise_multipliers"]
    releases = [
        GaussianRelease(noise_multipliers=(v * math.sqrt(6 / 5),), count=1, label=k) for k, v in sorted(z.items())
    ]
    want = accounted(releases, privacy["delta"], privacy["accountant"])
    assert privacy["epsilon"] == pytest.approx(want, rel=1e-6) and privacy["epsilon"] < 4.0
    _, runs = mlflow_runs()
    tags = runs[0].data.tags
    assert (tags["backend"], tags["aggregation_protocol"], tags["trust_model"]) == (
        "flower",
        "SecAgg+",
        "secure_aggregation",
    )
    assert runs[1].data.tags["backend"] == "simulation" and runs[1].data.tags["aggregation_protocol"] == "simulated"
