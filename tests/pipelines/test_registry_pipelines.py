"""The method pipelines built from the registry: parameters validated through the config classes
before the first node, and results equal to the library run called directly (issue 15)."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.params_check import ParameterError

TINY = {"dataset": {"n_per_class": 30}, "partition": {"n_clients": 6}}


@pytest.mark.parametrize(
    "params, message",
    [
        # B <= m/k with m = round(0.5 * 40) = 20 sampled clients and k = 4 rotation groups
        ({"rr_cluster": {"train": {"B": 6}}}, "rr_cluster.train.B=6 is infeasible"),
        ({"rr_cluster": {"train": {"method": "dp_ifka"}}}, "did you mean 'dp_ifca'?"),
    ],
)
def test_method_parameters_are_checked_by_the_config_class_before_any_node(
    run_pipeline, kedro_project, params, message
):
    with pytest.raises(ParameterError, match=message):
        run_pipeline("rr_cluster", params)
    assert not (kedro_project / "data/08_reporting/clustered_fl").exists()  # the rotation node never ran


def test_config_checks_of_unselected_methods_do_not_stop_a_run(run_pipeline, read_versioned_json):
    run_pipeline("fkm", {**TINY, "fkm": {"train": {"rounds": 3}}, "dp_fedc": {"train": {"budget": "papr"}}})
    assert read_versioned_json("data/08_reporting/fkm/metrics.json")["rounds"] == 3
    with pytest.raises(ParameterError, match="dp_fedc.train.budget must be one of"):
        run_pipeline("dp_fedc", {**TINY, "dp_fedc": {"train": {"budget": "papr"}}})


@pytest.mark.parametrize("eps", [None, 4.0])
def test_fkm_pipeline_equals_the_library_run_with_the_same_config_and_seed(run_pipeline, read_versioned_json, eps):
    from fedclust.clustering import fkm
    from fedclust.data.registry import prepare_dataset
    from fedclust.metrics import clustering_scores
    from fedclust.partition import make_partition
    from fedclust.privacy.accountants import calibrate_noise_multiplier

    run_pipeline("fkm", {**TINY, "seed": 3, "privacy": {"epsilon": eps}, "fkm": {"train": {"rounds": 5, "clip": 3.0}}})
    metrics = read_versioned_json("data/08_reporting/fkm/metrics.json")

    ds = prepare_dataset("digits", seed=3, scale="minmax", n_per_class=30)
    client = make_partition("iid", X=ds.X, y=ds.y, images=ds.images, n_clients=6, seed=3).client
    z = 0.0 if eps is None else calibrate_noise_multiplier(eps, 1e-5, steps=5, sampling="none", n_mechanisms=1)
    res = fkm.run(
        ds.X, client, ds.n_classes, rounds=5, seed=3, noise_multiplier=z, clip=None if eps is None else 3.0, y=ds.y
    )
    direct = clustering_scores(ds.y, res.labels)
    for key in ("ACC", "NMI", "ARI"):
        assert metrics[key] == pytest.approx(direct[key], abs=1e-12), key
    assert np.isfinite(metrics["ACC"])
