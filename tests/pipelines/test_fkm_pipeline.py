"""The foundation's chain end to end through a KedroSession:
load -> partition -> calibrate -> train -> evaluate -> privacy report -> MLflow."""

import pytest

TINY = {
    "dataset": {"name": "digits", "n_per_class": 30},
    "partition": {"scheme": "iid", "n_clients": 6},
    "fkm": {"train": {"rounds": 6}},
}


def test_fkm_pipeline_writes_metrics_privacy_and_mlflow(run_pipeline, mlflow_runs, read_versioned_json, kedro_project):
    run_pipeline("fkm", TINY)

    metrics = read_versioned_json("data/08_reporting/fkm/metrics.json")
    assert set(metrics) >= {"ACC", "NMI", "ARI", "uploaded_reals"}
    assert metrics["ACC"] > 0.6  # k-means on 300 digits is ~0.7-0.8; chance is 0.1
    privacy = read_versioned_json("data/08_reporting/fkm/privacy.json")
    assert privacy["epsilon_accountant"] == "inf"  # a non-private run says so explicitly

    client, runs = mlflow_runs()
    run = runs[0]
    assert run.data.tags["method"] == "fkm"
    assert run.data.tags["pipeline"] == "fkm"  # Kedro 1.x passes pipeline_names, not pipeline_name
    assert run.data.tags["dataset"] == "digits"
    assert "dp_scope" not in run.data.tags  # not private: no guarantee to scope
    assert run.data.params["fkm.train.rounds"] == "6"
    assert run.data.params["partition.scheme"] == "iid"
    assert run.data.metrics["fkm.ACC"] == pytest.approx(metrics["ACC"])
    assert run.data.metrics["fkm.private"] == 0.0 and "fkm.epsilon" not in run.data.metrics
    assert run.data.tags["epsilon"] == "inf"
    history = client.get_metric_history(run.info.run_id, "fkm.round.objective")
    assert [m.step for m in history] == list(range(1, 7))
    objective = [m.value for m in sorted(history, key=lambda m: m.step)]
    assert all(b <= a + 1e-9 for a, b in zip(objective, objective[1:]))  # Lloyd never increases it
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "partition")}
    assert {"partition/stats.json", "partition/heatmap.png"} <= artifacts
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "fkm")) == ["fkm/centroids.png", "fkm/history.png"]


def test_private_fkm_run_spends_about_the_target_epsilon(run_pipeline, read_versioned_json):
    params = {**TINY, "privacy": {"epsilon": 4.0, "delta": 1e-5}}
    run_pipeline("fkm", params)
    privacy = read_versioned_json("data/08_reporting/fkm/privacy.json")
    assert privacy["epsilon_accountant"] == pytest.approx(4.0, rel=0.01)
    # amendment A-1: the report says what epsilon covers and that the metrics are outside it
    assert privacy["covered_by_guarantee"] and any("ACC" in o for o in privacy["outside_guarantee"])
    noise = read_versioned_json("data/05_model_input/fkm/noise.json")
    assert noise["private"] and noise["noise_multiplier"] > 0


def test_bad_partition_parameter_stops_the_run_with_its_name(run_pipeline):
    params = {**TINY, "partition": {"scheme": "dirichlet", "n_clients": 6, "options": {"alpha": -1.0}}}
    with pytest.raises(Exception, match="alpha"):
        run_pipeline("fkm", params)
