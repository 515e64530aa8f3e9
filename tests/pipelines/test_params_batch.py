"""The params kedro-mlflow logs node by node, written in one batch when a one-method run starts: the
same keys and values as kedro-mlflow's own hook writes, and nothing where the run has nested runs."""

from __future__ import annotations

import mlflow
import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Pipeline, node
from kedro_mlflow.framework.hooks.mlflow_hook import MlflowHook, mlflow_hook
from mlflow.tracking import MlflowClient

from fedclust.hooks import NodeParamsBatchHook
from fedclust.hooks.params_log import node_params
from fedclust.hooks.state import RUN

PARAMS = {
    "seed": 3,
    "fkm": {"train": {"rounds": 4, "k": None, "lr": 0.5}, "unused": 1},
    "dataset": {"name": "digits", "n_per_class": 30},
    "long": "x" * 10_000,  # longer than an MLflow param: kedro-mlflow's strategy decides (a tag here)
    "odd": {"a,b": 1},  # a name kedro-mlflow renames (with a warning): left to it
}


def _pipeline() -> Pipeline:
    def f(*args):
        return 0

    return Pipeline(
        [
            node(f, ["params:fkm.train", "params:seed"], "a", name="train"),
            node(f, ["a", "params:dataset", "params:seed"], "b", name="evaluate"),
            node(f, ["b", "params:long", "params:odd"], None, name="report"),
        ]
    )


def _catalog() -> DataCatalog:
    catalog = DataCatalog()
    catalog["parameters"] = MemoryDataset(PARAMS)

    def add(prefix, value):
        catalog[f"params:{prefix}"] = MemoryDataset(value)
        if isinstance(value, dict):
            for k, v in value.items():
                add(f"{prefix}.{k}", v)

    for key, value in PARAMS.items():
        add(key, value)
    return catalog


def _kedro_mlflow_calls(pipeline, catalog, monkeypatch) -> dict[str, str]:
    """What kedro-mlflow's hook logs with log_param for these nodes (flatten on, as in mlflow.yml)."""
    logged: dict[str, str] = {}
    hook = MlflowHook()
    hook.flatten, hook.recursive, hook.sep, hook.long_params_strategy = True, True, ".", "tag"
    monkeypatch.setattr(mlflow, "log_param", lambda k, v: logged.__setitem__(k, str(v)))
    monkeypatch.setattr(mlflow, "set_tag", lambda k, v: None)
    for n in pipeline.nodes:
        inputs = {name: catalog.load(name) if name.startswith("params:") else 0 for name in n.inputs}
        hook.before_node_run(n, catalog, inputs, False)
    monkeypatch.undo()
    return logged


def test_node_params_are_the_params_kedro_mlflow_logs(monkeypatch):
    pipeline, catalog = _pipeline(), _catalog()
    expected = _kedro_mlflow_calls(pipeline, catalog, monkeypatch)
    ours = {k: str(v) for k, v in node_params(pipeline, catalog).items()}
    assert ours == {k: v for k, v in expected.items() if k not in ("long", "odd.a_b")}
    assert ours == {"fkm.train.rounds": "4", "fkm.train.k": "None", "fkm.train.lr": "0.5", "seed": "3"} | {
        "dataset.name": "digits",
        "dataset.n_per_class": "30",
    }


@pytest.fixture
def tracked(fresh_mlflow_store, monkeypatch):
    """A real SQLite MLflow store with an active run that kedro-mlflow's hook object says it opened."""
    run = mlflow.start_run()
    monkeypatch.setattr(mlflow_hook, "run_id", run.info.run_id)
    monkeypatch.setattr(mlflow_hook, "_is_mlflow_enabled", True)
    monkeypatch.setattr(mlflow_hook, "flatten", True)
    RUN.reset()
    yield MlflowClient(fresh_mlflow_store), run.info.run_id
    RUN.reset()


def test_a_one_method_run_gets_its_node_params_before_the_first_node(tracked, monkeypatch):
    client, run_id = tracked
    pipeline, catalog = _pipeline(), _catalog()
    NodeParamsBatchHook().before_pipeline_run({}, pipeline, catalog)
    assert client.get_run(run_id).data.params == {k: str(v) for k, v in node_params(pipeline, catalog).items()}


def test_nothing_is_logged_for_nested_method_runs_or_another_run(tracked, monkeypatch):
    client, run_id = tracked
    pipeline, catalog = _pipeline(), _catalog()
    RUN.nested = True  # the tour: a method's node params go to whichever run is open at the node
    NodeParamsBatchHook().before_pipeline_run({}, pipeline, catalog)
    RUN.nested = False
    monkeypatch.setattr(mlflow_hook, "run_id", "another")  # kedro-mlflow tracks another run
    NodeParamsBatchHook().before_pipeline_run({}, pipeline, catalog)
    assert client.get_run(run_id).data.params == {}
