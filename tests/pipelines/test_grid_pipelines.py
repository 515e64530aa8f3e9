"""Grid pipelines through a KedroSession: every cell is a nested MLflow run, and the summary
tables land in data/08_reporting/<grid>/ and in MLflow."""

import pandas as pd


def test_dp_fedc_grid_logs_child_runs_and_writes_tables(run_pipeline, mlflow_runs, kedro_project):
    config = {
        "dataset": "iris",
        "n_clients": 5,
        "rounds": 4,
        "seeds": 1,
        "parts": ["table1", "sweep"],
        "table1_K": 5,
        "table1_methods": ["fkm", "dp_fedc"],
        "splits": ["iid"],
        "Ks": [5],
        "eps_bars": [None, 20.0],
        "rho_factors": [1e-2, 1e-7],
    }
    run_pipeline("dp_fedc_grid", {"dp_fedc_grid": {"config": config}})

    summary = pd.read_csv(kedro_project / "data/08_reporting/dp_fedc_grid/summary.csv")
    t1 = summary[summary["table"] == "table1"]
    assert set(t1["method"]) == {"fkm", "dp_fedc"} and set(t1["n"]) == {1}
    # amendment A-3: DP-FedC with the default and the paper's penalty, side by side
    assert set(t1[t1["method"] == "dp_fedc"]["rho_factor"].astype(str)) == {"0.01", "1e-07"}
    assert set(t1[t1["method"] == "fkm"]["rho_factor"].astype(str)) == {"-"}
    md = (kedro_project / "data/08_reporting/dp_fedc_grid/summary.md").read_text()
    assert "### table1" in md and "### sweep" in md

    client, runs = mlflow_runs()
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    # table1: (fkm + dp_fedc x 2 penalties) x 2 budgets x 1 seed; sweep: 2 penalties x 1 split x 1 K x 2 budgets x 1 seed
    assert len(children) == 6 + 4
    private = [r for r in children if r.data.tags["epsilon"] == "20"]
    # one metric schema with single runs: epsilon (accounted), private 0/1; the method in a tag
    assert private and all(0 < r.data.metrics["epsilon"] < 1e6 and r.data.metrics["private"] == 1.0 for r in private)
    assert not any("epsilon_accountant" in r.data.metrics for r in children)
    public = [r for r in children if r.data.tags["epsilon"] == "inf"]
    assert public and all(r.data.metrics["private"] == 0.0 and "epsilon" not in r.data.metrics for r in public)
    assert all(abs(v) <= 1e300 for r in runs for v in r.data.metrics.values())
    assert all(r.data.tags["kind"] == "cell" and r.data.metrics["wall_time_s"] > 0 for r in children)
    cell_files = {a.path for a in client.list_artifacts(private[0].info.run_id)}
    assert {"metrics.json", "privacy.json"} <= cell_files
    # amendment A-1: private cells start from public centroids and clip to a public bound (sqrt(4) = 2 for iris)
    assert all(r.data.params["init"] == "uniform_box" and float(r.data.params["clip"]) == 2.0 for r in private)
    assert all(r.data.params["constants"] == "public" for r in private if r.data.tags["method"] == "dp_fedc")
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags][0]
    assert parent.info.run_name == "dp_fedc_grid · grid · 1 seed" and parent.data.tags["pipeline"] == "dp_fedc_grid"
    arts = {a.path for a in client.list_artifacts(parent.info.run_id, "dp_fedc_grid")}
    assert {"dp_fedc_grid/summary.csv", "dp_fedc_grid/summary.md", "dp_fedc_grid/curves.png"} <= arts


def test_privacy_audit_pipeline_writes_audits_and_child_runs(run_pipeline, mlflow_runs, kedro_project):
    import json

    run_pipeline(
        "privacy_audit",
        {"privacy_audit": {"config": {"methods": ["fkm"], "n_runs": 300, "workers": 1, "epsilons": [1.0]}}},
    )
    audit = json.loads((kedro_project / "data/08_reporting/privacy_audit/fkm_eps1/audit.json").read_text())
    assert audit["sound"] is True and audit["powerful"] is True
    assert audit["epsilon_audited"] <= audit["epsilon_accounted"] < audit["epsilon_audited_noise_off"]
    assert 0 < audit["tightness"] <= 1 and "caught" in audit["mutant"]
    summary = pd.read_csv(kedro_project / "data/08_reporting/privacy_audit/summary.csv")
    assert list(summary["method"]) == ["fkm"] and bool(summary["sound"].iloc[0])
    client, runs = mlflow_runs()
    child = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(child) == 1 and child[0].data.tags["method"] == "fkm"
    assert child[0].data.metrics["epsilon_audited"] <= child[0].data.metrics["epsilon"]
    assert "audit.json" in {a.path for a in client.list_artifacts(child[0].info.run_id)}


def test_grid_pipeline_shows_cells_records_tables_and_plots_as_nodes():
    # issue 14: Kedro-Viz shows data -> cells -> records -> tables -> plots, not one opaque node
    from fedclust.pipelines.grids import GRID_PIPELINES

    pipe = GRID_PIPELINES["dp_fedc_grid"]()
    edges = {n.name.split(".")[-1]: (set(n.inputs), set(n.outputs)) for n in pipe.nodes}
    assert edges["prepare_cells"] == ({"params:dp_fedc_grid.config", "params:data_paths"}, {"dp_fedc_grid.cells"})
    assert edges["run_cells"] == ({"dp_fedc_grid.cells", "dp_fedc_grid.cell_store"}, {"dp_fedc_grid.records"})
    assert edges["tabulate"][0] == {"dp_fedc_grid.records"} and "dp_fedc_grid.tables" in edges["tabulate"][1]
    assert edges["plot"] == (
        {"dp_fedc_grid.tables", "dp_fedc_grid.records"},
        {"dp_fedc_grid.sweep_plot", "dp_fedc_grid.curves_plot"},
    )
    bench = {n.name.split(".")[-1] for n in GRID_PIPELINES["benchmark"]().nodes}
    assert {"prepare_cells", "run_cells", "tabulate", "plot", "figures"} <= bench


def test_interrupted_grid_keeps_finished_cells_in_mlflow_and_on_disk_and_resumes(
    run_pipeline, mlflow_runs, kedro_project, monkeypatch
):
    # issue 15, item 4: a grid interrupted after some cells lost all of them
    import json
    import pickle

    import pytest

    from fedclust.executors import same_results
    from fedclust.grids import dp_fedc

    config = {
        "dataset": "iris",
        "n_clients": 5,
        "rounds": 3,
        "seeds": 1,
        "parts": ["table1"],
        "table1_K": 5,
        "table1_methods": ["fkm", "dkm", "dp_fedc"],
        "rho_factors": [1e-2],
    }  # 3 methods x 2 budgets = 6 cells
    real = dp_fedc.run_cell
    calls = []

    def failing(cell):
        calls.append(cell)
        if len(calls) == 3:
            raise RuntimeError("injected failure in cell 3")
        return real(cell)

    monkeypatch.setattr(dp_fedc, "run_cell", failing)
    with pytest.raises(RuntimeError, match="injected failure"):
        run_pipeline("dp_fedc_grid", {"dp_fedc_grid": {"config": config}})
    store = kedro_project / "data/08_reporting/dp_fedc_grid/cells.jsonl"
    assert len(store.read_text().splitlines()) == 2
    client, runs = mlflow_runs()
    assert len([r for r in runs if "mlflow.parentRunId" in r.data.tags]) == 2  # logged as they finished
    assert [r.info.status for r in runs if "mlflow.parentRunId" not in r.data.tags] == ["FAILED"]

    calls.clear()
    monkeypatch.setattr(dp_fedc, "run_cell", lambda cell: calls.append(cell) or real(cell))
    run_pipeline("dp_fedc_grid", {"dp_fedc_grid": {"config": config}})
    assert len(calls) == 4  # the 2 finished cells were not run again
    client, runs = mlflow_runs()
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags and r.info.status == "FINISHED")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 6 and sum(r.data.tags.get("resumed") == "true" for r in children) == 2
    (version,) = (kedro_project / "data/07_model_output/dp_fedc_grid/records.pkl").iterdir()
    records = pickle.loads((version / "records.pkl").read_bytes())
    uninterrupted = dp_fedc.run(config)
    assert len(uninterrupted) == 6 and same_results(records, uninterrupted)  # timings aside
    assert len({json.loads(x)["key"] for x in store.read_text().splitlines()}) == 6
