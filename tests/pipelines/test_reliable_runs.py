"""Reliable runs (issue 15): concurrent runs keep their own results, bad parameters stop the run
before any work with one line, interrupted runs are marked KILLED, the --params examples and run config files of the README and the docs work,
and the MLflow tags say what a run ran on.

The subprocess tests run ``kedro run`` as a user would, in a throw-away project copy.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedclust.params_check import ParameterError, check_params

PROJECT_ROOT = Path(__file__).resolve().parents[2]
KEDRO = str(Path(sys.executable).parent / "kedro")
TINY = "dataset.n_per_class=30,partition.n_clients=6,fkm.train.rounds=6"


def base_params() -> dict:
    params: dict = {}
    for f in sorted((PROJECT_ROOT / "conf" / "base").glob("parameters*.yml")):
        params.update(yaml.safe_load(f.read_text()) or {})
    return params


def kedro_run(project: Path, *args: str, **popen) -> subprocess.Popen:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "KEDRO_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "1",
        "MPLBACKEND": "Agg",
    }
    env.pop("FEDCLUST_DEBUG", None)
    return subprocess.Popen(
        [KEDRO, "run", *args],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def init_store(project: Path) -> None:
    """Create the MLflow store and experiment once: two first runs racing to create (migrate) the
    same SQLite store is a separate problem from the one under test."""
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    client.create_experiment("fedclust", artifact_location=(project / "mlruns").as_uri())


def runs_of(project: Path):
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    exps = [e for e in client.search_experiments() if e.name == "fedclust"]
    return client, (client.search_runs([exps[0].experiment_id]) if exps else [])


# ---- 2. unknown keys, zeros, wrong types ----------------------------------------------------------


@pytest.mark.parametrize(
    "given, message",
    [
        ({"fkm": {"train": {"roundz": 5}}}, "unknown parameter 'fkm.train.roundz'; did you mean 'fkm.train.rounds'?"),
        ({"privacyy": {"epsilon": 1}}, "unknown parameter 'privacyy'; did you mean 'privacy'?"),
        ({"dataset": {"nam": "iris"}}, "did you mean 'dataset.name'?"),
        ({"partition": {"n_client": 3}}, "did you mean 'partition.n_clients'?"),
        ({"fkm": {"train": {"k": 0}}}, "fkm.train.k must be null (the default) or an integer >= 1, got 0"),
        ({"fkm": {"train": {"clients_per_round": 0}}}, "fkm.train.clients_per_round must be null"),
        (
            {"fkm": {"train": {"count_threshold": True}}},
            "fkm.train.count_threshold must be a number (default 3.0), got true",
        ),
        ({"fkm": {"train": {"rounds": "ten"}}}, "fkm.train.rounds must be a number"),
        ({"clustered_fl": {"data": {"reuse": 1}}}, "clustered_fl.data.reuse must be true or false"),
    ],
)
def test_bad_parameters_are_named_with_the_nearest_valid_key(given, message):
    problems = check_params(given, base_params())
    assert len(problems) == 1 and message in problems[0]


def test_valid_overrides_and_free_form_options_pass():
    given = {
        "seed": 3,
        "dataset": {"name": "gaussian_mixture", "options": {"n_samples": 300, "k": 3}},
        "partition": {"scheme": "dirichlet", "options": {"alpha": 0.5}},
        "privacy": {"epsilon": 2},
        "fkm": {"train": {"k": None, "rounds": 5, "clip": 2, "init_domain": [0, 1]}},
        "cfl_mgd": {"train": {"model": {"type": "cnn"}}},
    }
    assert check_params(given, base_params()) == []


def test_option_for_a_scheme_without_options_is_a_clear_error():
    from fedclust.partition import make_partition

    with pytest.raises(ValueError, match="partition scheme 'iid' takes no options, got partition.options.alpha"):
        make_partition("iid", y=np.zeros(20, int), n_clients=2, alpha=0.5)
    with pytest.raises(ValueError, match="did you mean 'alpha'"):
        make_partition("dirichlet", y=np.zeros(20, int), n_clients=2, alfa=0.5)


def test_nan_label_is_an_error_not_a_class():
    from fedclust.data.base import Dataset

    with pytest.raises(ValueError, match="1 missing \\(NaN\\) or infinite label"):
        Dataset(X=np.zeros((3, 2)), y=np.array([0.0, 1.0, np.nan]))
    assert Dataset(X=np.zeros((2, 2)), y=np.array([0.0, 1.0])).y.dtype == np.int64


# ---- 6. the --params examples of the README and the docs parse and name real parameters ----------

#: what a reader runs commands from: the README and every page of the docs site
DOC_FILES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]


def parse_run(args: list[str]) -> dict:
    """What `kedro run <args>` passes on, parsed by Kedro's own command (nothing runs)."""
    from kedro.framework.cli.project import run

    return run.make_context("run", args).params


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_docs_params_examples_parse_and_name_real_parameters(path):
    text = path.read_text()
    examples = re.findall(r'--params="([^"]*)"', text)  # in commands, tables and prose alike
    if path.name == "README.md" and path.parent == PROJECT_ROOT:
        assert len(examples) >= 3
    for example in examples:
        parsed = parse_run([f"--params={example}"])  # a comma inside a list fails here (UsageError)
        assert parsed["params"], example
        assert check_params(parsed["params"], base_params()) == [], example
    for command in re.findall(r"^kedro run (.*?)\s*(?:#.*)?$", text, re.M):
        assert "--pipeline=" not in command, "Kedro 1.x spells it --pipelines"


def test_readme_list_parameters_syntax_works(tmp_path):
    """Lists cannot go through --params (Kedro splits it at every comma): the README shows a
    --config file instead, whose params reach the run as nested parameters."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n# (\S+\.yml).*?\n(.*?)```", readme, re.S)
    assert block, "README shows no run config file for list parameters"
    config = tmp_path / block.group(1)
    config.write_text(block.group(2))
    parsed = parse_run([f"--config={config}"])
    assert parsed["pipelines"] == ["benchmark"]
    assert parsed["params"]["benchmark"]["config"]["methods"] == ["fkm", "dp_fedc"]
    assert check_params(parsed["params"], base_params()) == []


def test_docs_run_config_files_name_real_parameters(tmp_path):
    """Every run config file the docs show (a yaml block opening with ``# <name>.yml``) is read by
    ``kedro run --config`` and names only real parameters."""
    blocks = [
        (path, name, body)
        for path in DOC_FILES
        for name, body in re.findall(r"```yaml\n# (\S+\.yml).*?\n(.*?)```", path.read_text(), re.S)
    ]
    assert len(blocks) >= 3, blocks
    for path, name, body in blocks:
        config = tmp_path / name
        config.write_text(body)
        parsed = parse_run([f"--config={config}"])
        assert parsed["pipelines"], (path, name)
        assert check_params(parsed["params"], base_params()) == [], (path, name)


# ---- 1. concurrent runs in one folder each report their own numbers -------------------------------


def test_concurrent_runs_read_only_what_they_wrote(tmp_path, project_copy):
    project = project_copy(tmp_path / "p")
    # a "newer" metrics/privacy version, as another run saving at the same time would leave it:
    # a run that reads back the newest file instead of its own logs these numbers
    for name, planted in (
        ("metrics", {"ACC": -1.0, "NMI": -1.0, "ARI": -1.0, "uploaded_reals": 0}),
        ("privacy", {"epsilon_accountant": "planted"}),
    ):
        folder = project / "data" / "08_reporting" / "fkm" / f"{name}.json" / "9999-01-01T00.00.00.000Z"
        folder.mkdir(parents=True)
        (folder / f"{name}.json").write_text(json.dumps(planted))
    init_store(project)
    procs = {}
    for seed in (1, 2):  # overlapping runs, 0.3 s apart so that their save versions (Kedro's millisecond
        # timestamps) differ: two runs that start in the same millisecond would collide on every file
        procs[seed] = kedro_run(project, "--pipelines=fkm", f"--params={TINY},seed={seed}")
        time.sleep(0.3)
    for proc in procs.values():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
    client, runs = runs_of(project)
    assert sorted(r.data.params["seed"] for r in runs) == ["1", "2"]
    for run in runs:
        own = project / "data/08_reporting/fkm/metrics.json" / run.data.tags["kedro_session_id"] / "metrics.json"
        assert run.data.metrics["ACC"] == pytest.approx(json.loads(own.read_text())["ACC"])
        assert run.data.metrics["ACC"] > 0.3
        assert run.data.tags["partition"] == "iid" and run.data.tags["n_clients"] == "6"


# ---- 2/3. a bad parameter stops the run before any work, with one line ----------------------------


def test_typo_stops_the_run_before_any_node_with_one_line(tmp_path, project_copy):
    project = project_copy(tmp_path / "p")
    proc = kedro_run(project, "--pipelines=fkm", f"--params={TINY},fkm.train.roundz=5")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert (
        "fedclust: error: invalid parameter: unknown parameter 'fkm.train.roundz'; did you mean 'fkm.train.rounds'?"
    ) in out
    assert "Traceback" not in out and "Running node" not in out
    assert not (project / "data/08_reporting/partition").exists()  # no node ran
    assert runs_of(project)[1] == []  # and no MLflow run was opened


def test_bad_parameter_in_session_raises_parameter_error(run_pipeline, kedro_project):
    with pytest.raises(ParameterError, match="fkm.train.clients_per_round must be null"):
        run_pipeline("fkm", {"fkm": {"train": {"clients_per_round": 0}}})
    with pytest.raises(ParameterError, match="privacy.epsilon must be > 0"):  # the budget, before any node
        run_pipeline("fkm", {"privacy": {"epsilon": -1.0}})
    with pytest.raises(ParameterError, match="partition scheme 'iid' takes no options"):
        run_pipeline("fkm", {"partition": {"options": {"alpha": 0.5}}})
    assert not (kedro_project / "data/08_reporting/partition").exists()


# ---- 4. an interrupted run is KILLED, not FINISHED or RUNNING -------------------------------------


def test_interrupted_runs_are_marked_killed(tmp_path, project_copy):
    project = project_copy(tmp_path / "p")
    init_store(project)
    long = "dataset.n_per_class=30,partition.n_clients=6,fkm.train.rounds=1000000"
    # SIGINT as from a terminal: a child of a background job would inherit "ignore SIGINT"
    procs = {
        sig: kedro_run(
            project,
            "--pipelines=fkm",
            f"--params={long},seed={i}",
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        for i, sig in enumerate((signal.SIGINT, signal.SIGTERM))
    }
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            _, runs = runs_of(project) if (project / "mlflow.db").exists() else (None, [])
            if len([r for r in runs if r.info.status == "RUNNING"]) == 2:
                break
            assert all(p.poll() is None for p in procs.values()), [p.communicate()[0][-2000:] for p in procs.values()]
            time.sleep(1)
        time.sleep(3)  # well inside the training node
        for sig, proc in procs.items():
            proc.send_signal(sig)
        for proc in procs.values():
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode != 0, out[-2000:]
    finally:  # a failed test must not leave a million-round run behind
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    _, runs = runs_of(project)
    assert sorted(r.info.status for r in runs) == ["KILLED", "KILLED"]


# ---- 7. tags say what a clustered-FL run ran on ---------------------------------------------------


def test_clustered_fl_run_is_tagged_with_the_rotation_split():
    from kedro.pipeline import Pipeline, node

    from fedclust.hooks import RunTagsHook

    class Catalog:
        def load(self, name):
            return {
                "seed": 0,
                "dataset": {"name": "digits"},
                "partition": {"scheme": "iid", "n_clients": 10},
                "privacy": {"epsilon": None},
                "clustered_fl": {"data": {"n_clients": 40}},
            }

    pipe = Pipeline(
        [
            node(lambda d: d, "dataset", "rotated_data", name="rotate", namespace="clustered_fl"),
            node(lambda d: d, "rotated_data", "ifca.result", name="train", namespace="ifca"),
        ]
    )
    hook = RunTagsHook()
    hook.before_pipeline_run({"pipeline_names": ["ifca"]}, pipe, Catalog())
    assert hook._tags["partition"] == "rotation" and hook._tags["n_clients"] == "40"
    assert hook._tags["pipeline"] == "ifca" and hook._tags["method"] == "ifca"


def test_a_server_data_file_spec_passes_the_pre_run_check_and_other_groups_do_not():
    spec = {"name": "csv", "path": "tests/data/wine.csv", "options": {"label": "label"}}
    assert check_params({"fed_dp_kmeans": {"train": {"server_data": spec}}}, base_params()) == []
    assert check_params({"fkm": {"train": {"server_data": spec}}}, base_params()) == []
    (problem,) = check_params({"fkm": {"train": {"trust_model": spec}}}, base_params())
    assert "fkm.train.trust_model takes a value" in problem
