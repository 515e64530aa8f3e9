"""One MLflow metric schema for single runs and grid cells, run names that say what ran, and the
multi-method run (the tour) as one parent run with one nested run per method (issue 14, MLflow)."""

import json
import math

import pytest

from fedclust.pipelines.evaluation.nodes import to_mlflow_metrics
from fedclust.pipelines.mlflow_io import schema_metrics

TINY = {
    "dataset": {"name": "digits", "n_per_class": 30},
    "partition": {"scheme": "iid", "n_clients": 6},
    "fkm": {"train": {"rounds": 4}},
    "fzkm": {"train": {"rounds": 4}},
}


def test_single_runs_and_grid_cells_share_metric_names():
    # a method pipeline's metrics.json + privacy.json, and a grid record of the same run
    metrics_json = {"ACC": 0.7, "NMI": 0.6, "ARI": 0.5, "uploaded_reals": 100, "wall_time_s": 0.3}
    privacy_json = {"epsilon_accountant": 3.9, "epsilon_paper": 2.5, "delta": 1e-5}
    single = to_mlflow_metrics(metrics_json, privacy_json)
    cell = schema_metrics({**metrics_json, "epsilon_accountant": 3.9, "epsilon_paper": 2.5}, {"delta": 1e-5})
    assert single["metrics"] == cell
    assert {"ACC", "NMI", "ARI", "epsilon", "epsilon_paper", "private", "wall_time_s"} <= cell.keys()
    assert cell["epsilon"] == 3.9 and cell["private"] == 1.0 and "epsilon_accountant" not in cell
    # the JSON reports travel with the run
    assert single["artifacts"] == {"metrics.json": metrics_json, "privacy.json": privacy_json}


@pytest.mark.parametrize("eps", [None, "inf", math.inf, float("nan")])
def test_non_private_runs_log_no_epsilon_and_private_zero(eps):
    out = schema_metrics({"ACC": 0.5, "epsilon_accountant": eps})
    assert "epsilon" not in out and out["private"] == 0.0  # no infinity (1.8e308 in MLflow)
    single = to_mlflow_metrics(
        {"test_accuracy": 0.8}, {"epsilon_accountant": "inf", "epsilon_paper": None, "delta": 1e-5}
    )["metrics"]
    assert single == {"test_accuracy": 0.8, "private": 0.0}


def test_multi_method_run_is_a_parent_with_one_nested_run_per_method(kedro_project, mlflow_runs):
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    bootstrap_project(kedro_project)
    with KedroSession.create(project_path=kedro_project, runtime_params=TINY) as session:
        session.run(pipeline_names=["fkm", "fzkm"])

    client, runs = mlflow_runs()
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.run_name == "tour · digits/iid · ε=inf · seed 0"
    assert parent.data.tags["pipeline"] == "fkm,fzkm" and parent.data.tags["kind"] == "tour"
    assert not any(k in parent.data.metrics for k in ("ACC", "fkm.ACC"))  # metrics live in the method runs
    children = {r.data.tags["method"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == ["fkm", "fzkm"]
    for method, run in children.items():
        assert run.info.run_name == f"{method} · digits/iid · ε=inf · seed 0"
        assert run.info.status == "FINISHED"
        assert run.data.tags["epsilon"] == "inf" and run.data.tags["dataset"] == "digits"
        assert {"ACC", "NMI", "ARI", "private", "wall_time_s"} <= run.data.metrics.keys()
        assert "epsilon" not in run.data.metrics  # non-private: its tag says inf
        assert run.data.metrics["private"] == 0.0
        assert run.data.params["k"] == "10"  # the effective k (null -> number of classes)
        assert [m.step for m in client.get_metric_history(run.info.run_id, "round.objective")] == [1, 2, 3, 4]
        files = {a.path for a in client.list_artifacts(run.info.run_id, method)}
        assert {f"{method}/metrics.json", f"{method}/privacy.json", f"{method}/history.png"} <= files
        logged = json.loads(open(client.download_artifacts(run.info.run_id, f"{method}/metrics.json")).read())
        assert run.data.metrics["ACC"] == pytest.approx(logged["ACC"])
    # the partition report stays with the parent
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "partition")} >= {"partition/stats.json"}
    assert parent.info.status == "FINISHED"
