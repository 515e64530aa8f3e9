"""What `kedro run` prints (issue 14, Terminal): a short log without Kedro's per-dataset lines or
third-party warnings, a final summary table (method, result, ε, wall time, MLflow run id), and no
progress bar when the output is not a terminal."""

import os
import subprocess
import sys
from pathlib import Path

from fedclust.hooks.state import RUN
from fedclust.hooks.summary import SummaryHook, _Bars, summary_rows
from fedclust.hooks.tags import tag_value

PARAMS = "dataset.name=digits,dataset.n_per_class=30,partition.n_clients=6,fkm.train.rounds=4"


def _kedro_run(project: Path, *args: str) -> subprocess.CompletedProcess:
    kedro = Path(sys.executable).with_name("kedro")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"}
    env.pop("KEDRO_LOGGING_CONFIG", None)
    return subprocess.run([str(kedro), "run", *args], cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_kedro_run_prints_a_short_log_and_the_summary(tmp_path, project_copy):
    import mlflow

    project = project_copy(tmp_path / "p")
    proc = _kedro_run(project, "--pipelines=fkm", f"--params={PARAMS}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    # Kedro's per-dataset and per-node lines and deprecation warnings are not shown (conf/logging.yml)
    assert "Loading data from" not in out and "Saving data to" not in out
    assert "Completed 1 out of" not in out and "UserWarning" not in out
    assert len(out.splitlines()) < 60, out
    # no progress bar when the output is a pipe
    assert "━" not in proc.stderr
    # the summary table: the method, its ACC, ε and the run id of its MLflow run
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    exp = next(e for e in client.search_experiments() if e.name == "fedclust")
    (run,) = client.search_runs([exp.experiment_id])
    summary = proc.stdout[proc.stdout.index("fedclust: fkm") :]
    assert "fkm" in summary and f"ACC {run.data.metrics['ACC']:.3f}" in summary
    assert run.info.run_id in summary and "inf" in summary


def test_summary_rows_name_the_utility_epsilon_and_run():
    RUN.reset()  # no nested runs left over from a pipeline run earlier in this process
    RUN.parent_id = "abc"
    summary = {
        "fkm": {"metrics": {"ACC": 0.75, "NMI": 0.7}, "privacy": {"epsilon_accountant": 4.0}, "wall_time_s": 1.25},
        "ifca": {"metrics": {"test_accuracy": 0.9}, "privacy": {"epsilon_accountant": "inf"}, "wall_time_s": 2.0},
    }
    rows = summary_rows(summary, {})
    assert rows[0] == {
        "method": "fkm",
        "result": "ACC 0.750 · NMI 0.700",
        "epsilon": "4",
        "wall_time_s": "1.2",
        "run_id": "abc",
    }
    assert rows[1]["result"] == "test acc 0.900" and rows[1]["epsilon"] == "inf"


def test_a_one_model_method_shows_its_client_clustering_as_not_applicable_never_at_chance(caplog):
    import logging

    from fedclust.pipelines.reporting.nodes import summarize_run

    RUN.reset()
    one_model = {"test_accuracy": 0.75, "client_ACC": 0.25, "client_ACC_chance": 0.25, "client_at_chance": 1.0}
    clustered = {"test_accuracy": 0.5, "client_ACC": 0.3, "client_ACC_chance": 0.29, "client_at_chance": 1.0}
    rows = summary_rows({"fedavg": {"metrics": one_model}, "ifca": {"metrics": clustered}}, {})
    assert rows[0]["result"] == "test acc 0.750 · client clustering n/a (one model)"
    assert rows[1]["result"] == "test acc 0.500 · client ACC 0.300 (chance 0.290; AT CHANCE)"  # a real fault
    with caplog.at_level(logging.INFO, logger="fedclust.pipelines.reporting.nodes"):
        summarize_run(one_model, {}, method="fedavg")
        summarize_run(clustered, {}, method="ifca")
    fedavg, ifca = (r.getMessage() for r in caplog.records[-2:])
    assert "n/a (one model)" in fedavg and "AT CHANCE" not in fedavg and "client_ACC" not in fedavg
    assert "AT CHANCE" in ifca


def test_tags_hold_no_python_repr():
    assert tag_value(["fkm", "dkm"]) == "fkm,dkm"
    assert tag_value({"b": 1, "a": None}) == '{"a": null, "b": 1}'
    assert tag_value("<kedro.runner.sequential_runner.SequentialRunner object at 0x7f00>") == "SequentialRunner"


class _FakeBar:
    """Records what the hook asks of rich's Progress."""

    def __init__(self):
        self.tasks, self.updates, self.removed = {}, [], []

    def add_task(self, description, total=None, **fields):
        self.tasks[len(self.tasks)] = (description, total, fields)
        return len(self.tasks) - 1

    def update(self, task, **kw):
        self.updates.append((task, kw))

    def remove_task(self, task):
        self.removed.append(task)


class _Node:
    def __init__(self, name, namespace, tags):
        self.name, self.namespace, self.tags = name, namespace, set(tags)


def test_training_nodes_get_a_rounds_bar_fed_by_the_library_loop():
    """During a training node the library's per-round reports move a second bar (rounds done of the
    total, for the ETA); it goes away with the node, and reports outside a node reach nobody."""
    import numpy as np

    from fedclust import progress
    from fedclust.clustering import fkm

    RUN.reset()
    hook = SummaryHook()
    bars = hook._bars = _Bars.__new__(_Bars)  # the real bars, drawing on a recording stand-in for rich
    bar = bars.bar = _FakeBar()
    bars.task, bars.rounds = bar.add_task("", total=3, unit="nodes"), None
    train = _Node("fkm.train", "fkm", ["training"])
    hook.before_node_run(train, None, {})
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    fkm.run(X, np.arange(60) % 4, 2, rounds=5, seed=0)
    rounds = [kw for task, kw in bar.updates if task == 1]
    assert [kw["completed"] for kw in rounds] == [1, 2, 3, 4, 5]
    assert all(kw["total"] == 5 and kw["description"].startswith("fkm") for kw in rounds)
    assert bar.tasks[1][2] == {"unit": "rounds"}
    hook.after_node_run(train, None, {}, {})
    assert bar.removed == [1]
    n_updates = len(bar.updates)
    progress.report("round", 1, 5)  # no node running: nobody listens
    assert len(bar.updates) == n_updates
    # a node that does not train gets no rounds bar
    hook.before_node_run(_Node("fkm.evaluate", "fkm", ["evaluation"]), None, {})
    assert len(bar.tasks) == 2
    hook._bars = None


def test_every_family_reports_its_rounds():
    """The rounds bar is fed by every kind of loop: the k-means baselines' shared round logger
    (FZKM), DP-FedC, FedCGds, FedSC's Stage I and the clustered-FL engine (IFCA)."""
    import numpy as np

    from fedclust import progress
    from fedclust.clustered_fl import FederatedTensors, ifca
    from fedclust.clustered_fl.models import MLP
    from fedclust.clustering import dp_fedc, fedc_mf, fedsc, fzkm

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.3, size=(40, 4)) for c in (0.0, 3.0)])
    y = np.repeat([0, 1], 40)
    client = np.arange(80) % 4
    seen: dict[str, list] = {}
    runs = {
        "fzkm": lambda: fzkm.run(X, client, 2, rounds=3, seed=0, clients_per_round=4),
        "dp_fedc": lambda: dp_fedc.run(X, client, 2, rounds=3, seed=0, clients_per_round=4),
        "fedc_gds": lambda: fedc_mf.run_fedcgds(X, client, 2, rounds=3, seed=0),
        "fedsc": lambda: fedsc.run(X, client, 2, rounds=3, seed=0),
    }
    for name, call in runs.items():
        with progress.listening(lambda label, done, total, name=name: seen.setdefault(name, []).append((done, total))):
            call()
    assert seen["fzkm"] == [(1, 3), (2, 3), (3, 3)]
    assert seen["dp_fedc"] == [(1, 3), (2, 3), (3, 3)]
    assert seen["fedc_gds"][0] == (1, 3) and seen["fedc_gds"][-1][0] <= 3
    assert seen["fedsc"] == [(1, 3), (2, 3), (3, 3)]
    imgs = rng.normal(size=(80, 1, 4, 4)).astype("float32")
    data = FederatedTensors.from_arrays(
        imgs.reshape(80, -1),
        y,
        client,
        X_test=imgs.reshape(80, -1),
        y_test=y,
        client_test=client,
        group=np.array([0, 0, 1, 1]),
    )
    got = []
    with progress.listening(lambda label, done, total: got.append((done, total))):
        ifca.run(data, MLP(d_in=16, hidden=8, n_classes=2), 2, rounds=2, seed=0, local_steps=1)
    assert got == [(1, 2), (2, 2)]
