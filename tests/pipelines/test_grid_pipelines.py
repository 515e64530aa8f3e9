"""Grid pipelines through a KedroSession: every cell is a nested MLflow run, and the summary
tables land in data/08_reporting/<grid>/ and in MLflow."""

import pandas as pd


def test_dp_fedc_grid_logs_child_runs_and_writes_tables(run_pipeline, mlflow_runs, kedro_project):
    config = {
        "dataset": "iris", "n_clients": 5, "rounds": 4, "seeds": 2, "parts": ["table1", "sweep"],
        "table1_K": 5, "table1_methods": ["fkm", "dp_fedc"], "splits": ["iid"], "Ks": [5], "eps_bars": [None, 20.0],
    }
    run_pipeline("dp_fedc_grid", {"dp_fedc_grid": {"config": config}})

    summary = pd.read_csv(kedro_project / "data/08_reporting/dp_fedc_grid/summary.csv")
    t1 = summary[summary["table"] == "table1"]
    assert set(t1["method"]) == {"fkm", "dp_fedc"} and set(t1["n"]) == {2}
    md = (kedro_project / "data/08_reporting/dp_fedc_grid/summary.md").read_text()
    assert "### table1" in md and "### sweep" in md

    client, runs = mlflow_runs()
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    # table1: 2 methods x 2 budgets x 2 seeds; sweep: 1 split x 1 K x 2 budgets x 2 seeds
    assert len(children) == 8 + 4
    private = [r for r in children if r.data.tags["epsilon"] == "20"]
    assert private and all(0 < r.data.metrics["epsilon_accountant"] < 1e6 for r in private)
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags][0]
    arts = {a.path for a in client.list_artifacts(parent.info.run_id, "dp_fedc_grid")}
    assert {"dp_fedc_grid/summary.csv", "dp_fedc_grid/summary.md", "dp_fedc_grid/curves.png"} <= arts
