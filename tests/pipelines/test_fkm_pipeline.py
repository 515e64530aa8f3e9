"""The foundation's chain end to end through a KedroSession:
load -> partition -> calibrate -> train -> evaluate -> privacy report -> MLflow."""

import json
import math

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
    # one metric schema (shared with grid cells): no method prefix; the method is the tag
    assert run.data.metrics["ACC"] == pytest.approx(metrics["ACC"])
    assert not any(k.startswith("fkm.") for k in run.data.metrics)
    # not private: private = 0 and epsilon = inf, which MLflow stores as the largest double
    assert run.data.metrics["private"] == 0.0 and "epsilon" not in run.data.metrics  # no 1.8e308 in charts
    assert run.data.tags["epsilon"] == "inf"
    assert run.data.metrics["wall_time_s"] == pytest.approx(metrics["wall_time_s"])  # the method's compute time
    assert run.data.tags["epsilon"] == "inf"
    # the UI opens the experiment on the runs table, not the GenAI view
    assert client.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    assert run.info.run_name == "fkm · digits/iid · ε=inf · seed 0"
    # Kedro's session id is not an MLflow run id; no tag holds a Python repr
    assert "run_id" not in run.data.tags and run.data.tags["kedro_session_id"]
    assert run.data.tags["pipeline_names"] == "fkm"
    assert not any(v.startswith(("<", "[", "(")) for v in run.data.tags.values())
    # the effective settings, defaults resolved (k: null -> 10 classes; clients_per_round: null -> all)
    assert run.data.params["k"] == "10" and run.data.params["clients_per_round"] == "6"
    history = client.get_metric_history(run.info.run_id, "round.objective")
    assert [m.step for m in history] == list(range(1, 7))
    objective = [m.value for m in sorted(history, key=lambda m: m.step)]
    assert all(b <= a + 1e-9 for a, b in zip(objective, objective[1:]))  # Lloyd never increases it
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "partition")}
    assert {"partition/stats.json", "partition/heatmap.png"} <= artifacts
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "fkm")) == [
        "fkm/centroids.png",
        "fkm/history.png",
        "fkm/metrics.json",
        "fkm/privacy.json",
    ]
    logged = client.download_artifacts(run.info.run_id, "fkm/privacy.json")
    assert json.loads(open(logged).read())["epsilon_accountant"] == "inf"


def test_private_fkm_run_spends_about_the_target_epsilon(run_pipeline, read_versioned_json, mlflow_runs):
    params = {**TINY, "privacy": {"epsilon": 4.0, "delta": 1e-5}}
    run_pipeline("fkm", params)
    privacy = read_versioned_json("data/08_reporting/fkm/privacy.json")
    assert privacy["epsilon_accountant"] == pytest.approx(4.0, rel=0.01)
    client, runs = mlflow_runs()
    run = runs[0]
    assert run.data.metrics["epsilon"] == pytest.approx(privacy["epsilon_accountant"])
    assert run.data.metrics["private"] == 1.0 and run.data.tags["epsilon"] == "4"
    assert run.info.run_name == "fkm · digits/iid · ε=4 · seed 0"
    # no server data, no clip: a DP median of the row norms, on its public grid of quarter octaves,
    # spent from the same budget (the accounted epsilon above includes its release)
    assert math.log2(float(run.data.params["clip"])) * 4 == pytest.approx(
        round(math.log2(float(run.data.params["clip"])) * 4)
    )
    assert 2.0 < float(run.data.params["clip"]) < 8.0
    # the trust model stands beside epsilon: in the MLflow tags and in privacy.json
    assert run.data.tags["trust_model"] == "secure_aggregation" == privacy["trust_model"]
    assert "sum" in privacy["trust_model_meaning"]
    # amendment A-1: the report says what epsilon covers and that the metrics are outside it
    assert privacy["covered_by_guarantee"] and any("ACC" in o for o in privacy["outside_guarantee"])
    noise = read_versioned_json("data/05_model_input/fkm/noise.json")
    assert noise["private"] and noise["noise_multiplier"] > 0


def test_bad_partition_parameter_stops_the_run_with_its_name(run_pipeline):
    params = {**TINY, "partition": {"scheme": "dirichlet", "n_clients": 6, "options": {"alpha": -1.0}}}
    with pytest.raises(Exception, match="alpha"):
        run_pipeline("fkm", params)


def test_compute_threads_is_applied_once_at_the_start_of_a_run(run_pipeline):
    """``compute.threads`` sets torch's and BLAS's threads for the run (fedclust.threads), in one
    place, before the first node."""
    import torch
    from threadpoolctl import threadpool_info

    from fedclust.threads import thread_limits

    with thread_limits(1):  # restores this process's settings afterwards
        run_pipeline(
            "fkm",
            {
                "compute": {"threads": 2},
                "dataset": {"n_per_class": 10},
                "partition": {"n_clients": 4},
                "fkm": {"train": {"rounds": 2}},
            },
        )
        assert torch.get_num_threads() == 2
        assert {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"} <= {2}
