"""Clustered FL end to end: rotation stage -> CFL-MGD / FedAvg -> metrics.json and MLflow."""

TINY = {
    "dataset": {"name": "digits"},
    "clustered_fl": {"data": {"n_groups": 2, "n_clients": 16, "samples_per_client": 60, "test_per_client": 10}},
    "cfl_mgd": {"train": {"rounds": 25, "participation": 0.5, "eval_every": 5, "model": {"type": "mlp", "hidden": 32}}},
    "fedavg": {"train": {"rounds": 25, "participation": 0.5, "eval_every": 5, "model": {"type": "mlp", "hidden": 32}}},
}


def test_cfl_mgd_separates_rotation_groups_and_beats_fedavg(run_pipeline, read_versioned_json, mlflow_runs):
    run_pipeline("cfl_mgd", TINY)
    ours = read_versioned_json("data/08_reporting/cfl_mgd/metrics.json")
    run_pipeline("fedavg", TINY)
    ref = read_versioned_json("data/08_reporting/fedavg/metrics.json")
    assert ours["client_ACC"] == 1.0  # 0 vs 180 degrees: every client finds its group
    assert ref["client_ACC"] == 0.5  # one model: the assignment is one cluster for two equal groups
    assert ours["test_accuracy"] > ref["test_accuracy"] + 0.03
    privacy = read_versioned_json("data/08_reporting/cfl_mgd/privacy.json")
    assert privacy["epsilon_accountant"] == "inf"

    client, runs = mlflow_runs()
    cfl_run = next(r for r in runs if r.data.tags.get("method") == "cfl_mgd")
    hist = client.get_metric_history(cfl_run.info.run_id, "round.test_accuracy")
    assert sorted(m.step for m in hist) == [5, 10, 15, 20, 25]  # the engine's evaluation rounds


def test_rr_cluster_pipeline_reports_replace_one_epsilon(run_pipeline, read_versioned_json):
    """privacy.json of a private RR-Cluster run: client-level, replace-one, fixed-size sampling (amendment A-2);
    the accountant's epsilon meets the target, and the paper's formula is reported next to it."""
    params = {
        "dataset": {"name": "digits"},
        "clustered_fl": {"data": {"n_groups": 2, "n_clients": 16, "samples_per_client": 20, "test_per_client": 5}},
        "privacy": {"epsilon": 4.0, "delta": 1e-3},
        "rr_cluster": {
            "train": {
                "method": "rr_cluster",
                "B": 2,
                "rounds": 3,
                "participation": 0.5,
                "eval_every": 0,
                "clip": 0.3,
                "model": {"type": "mlp", "hidden": 8},
            }
        },
    }
    run_pipeline("rr_cluster", params)
    privacy = read_versioned_json("data/08_reporting/rr_cluster/privacy.json")
    assert privacy["unit"] == "client-level" and privacy["neighbouring"] == "replace_one"
    (rel,) = privacy["releases"]
    assert rel["sampling"] == "without_replacement" and (rel["population"], rel["sample_size"]) == (16, 8)
    assert 3.9 <= privacy["epsilon_accountant"] <= 4.0
    assert privacy["epsilon_paper"] > privacy["epsilon_accountant"]  # Thm 4.2 + eq. (9) is the looser bound
    assert any("replace-one" in n for n in privacy["notes"])
    assert privacy["calibration"]["noise_calibration"] == "replace_one"
