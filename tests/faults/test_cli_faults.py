"""Every known fault of a ``kedro run`` ends the same way: exit status != 0, at most five lines on
stderr whose first says what is wrong and what to do (no traceback), the MLflow run FAILED where one
was started, and the results already stored untouched. One test per case; the cases a run handles
(a tiny Dirichlet alpha, a --config file with --params) end well.

Each test is one ``kedro run`` in the module's project copy (tests/faults/conftest.py), which lies on
a non-ASCII path. Most stop before the first node (about 8 s each, the cost of starting Kedro).
"""

from __future__ import annotations

import os
import textwrap
import time

import numpy as np
import pytest
import scipy.io
from faultkit import TINY

ERROR = "fedclust: error: "


def assert_fault(outcome, first_line: str, statuses: list[str]):
    """exit != 0, <= 5 lines on stderr starting with ``first_line``, no traceback, and the MLflow
    runs this command started have ``statuses``."""
    assert outcome.code != 0, outcome.out[-2000:]
    assert outcome.first_error.startswith(ERROR + first_line), outcome.err[-3000:]
    assert len(outcome.err_lines) <= 5, outcome.err
    assert "Traceback" not in outcome.err + outcome.out
    assert sorted(status for _, status in outcome.new_runs) == statuses


# ---- the budget -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("unchanged")
def test_epsilon_1e9_names_the_supported_range(project):
    outcome = project.run("--pipelines=fkm", f"--params={TINY},privacy.epsilon=1e9")
    assert_fault(outcome, "privacy.epsilon = 1e+09 is outside the supported range for fkm, [0.001, 1000]", [])


@pytest.mark.usefixtures("unchanged")
def test_dp_fedc_at_epsilon_1e_9_names_the_supported_range(project):
    outcome = project.run("--pipelines=dp_fedc", "--params=privacy.epsilon=1e-9")
    assert_fault(outcome, "privacy.epsilon = 1e-09 is outside the supported range for dp_fedc, [0.001, 1000]", [])


@pytest.mark.parametrize("delta", ["2", "0"])
@pytest.mark.usefixtures("unchanged")
def test_delta_outside_0_1_is_refused(project, delta):
    outcome = project.run("--pipelines=fkm", f"--params={TINY},privacy.epsilon=1,privacy.delta={delta}")
    assert_fault(outcome, f"privacy.delta must be in (0, 1), got {float(delta)}", [])


# ---- the data -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("unchanged")
def test_an_empty_data_set_fails_its_run(project):
    scipy.io.savemat(project.root / "empty.mat", {"X": np.zeros((3, 0)), "Label": np.zeros((0, 1))})
    outcome = project.run("--pipelines=fkm", f"--params={TINY},dataset.name=mat,dataset.path=empty.mat")
    assert_fault(outcome, "dataset 'mat' read from empty.mat has no samples", ["FAILED"])


@pytest.mark.usefixtures("unchanged")
def test_a_missing_data_file_says_where_it_was_looked_for(project):
    outcome = project.run("--pipelines=fkm", f"--params={TINY},dataset.name=mat,dataset.path=nothere.mat")
    assert_fault(outcome, "nothere.mat: file not found", ["FAILED"])


@pytest.mark.usefixtures("unchanged")
def test_a_corrupt_data_file_says_it_cannot_be_read(project):
    (project.root / "garbage.mat").write_bytes(np.random.default_rng(0).bytes(3000))
    outcome = project.run("--pipelines=fkm", f"--params={TINY},dataset.name=mat,dataset.path=garbage.mat")
    assert_fault(outcome, "garbage.mat: cannot read as a MATLAB .mat file", ["FAILED"])


@pytest.mark.usefixtures("unchanged")
def test_a_path_given_to_a_data_set_that_reads_no_file_is_named(project):
    outcome = project.run("--pipelines=fkm", f"--params={TINY},dataset.path=mine.mat")
    assert_fault(outcome, "dataset.path = 'mine.mat' is given, but dataset 'digits' reads no file", [])


# ---- settings -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("unchanged")
def test_zero_threads_stops_the_run_before_it_starts(project):
    # checked with the parameters, before kedro-mlflow opens a run: no run is left FINISHED (or open)
    outcome = project.run("--pipelines=fkm", f"--params={TINY},compute.threads=0")
    assert_fault(outcome, "compute.threads must be null (leave threads as they are) or an int >= 1, got 0", [])


@pytest.mark.usefixtures("unchanged")
def test_huge_rounds_are_refused_before_they_run_for_hours(project):
    outcome = project.run("--pipelines=fkm", f"--params={TINY},fkm.train.rounds=1000000000")
    # refused by the pre-run check, before kedro-mlflow opens a run
    assert_fault(outcome, "fkm: the work estimate, 1000000000 rounds x 6 clients", [])
    assert "raise compute.max_work (null: no limit)" in outcome.first_error


@pytest.mark.usefixtures("unchanged")
def test_dk_pp_with_too_few_rounds_says_what_to_set(project):
    outcome = project.run("--pipelines=dk_pp", "--params=dk_pp.train.rounds=3,dk_pp.train.seeding_rounds=5")
    assert_fault(outcome, "invalid parameter: dk_pp.train.rounds = 3 is too few for DK++", [])
    assert "set dk_pp.train.rounds >= 6, or lower dk_pp.train.seeding_rounds" in outcome.first_error


@pytest.mark.usefixtures("unchanged")
def test_a_run_that_cannot_fit_in_memory_is_refused_with_the_estimate(project):
    # a clustered-FL model of 10^8 hidden units: about a TiB of models (a raw allocation error before)
    outcome = project.run("--pipelines=ifca", "--params=ifca.train.model.hidden=100000000,ifca.train.rounds=1")
    assert_fault(outcome, "ifca with these settings would need about", [])  # refused before the run opens
    assert "TiB of memory" in outcome.first_error and "more than this machine has available" in outcome.first_error


@pytest.mark.usefixtures("unchanged")
def test_verbose_shows_the_traceback(project):
    scipy.io.savemat(project.root / "empty.mat", {"X": np.zeros((3, 0)), "Label": np.zeros((0, 1))})
    outcome = project.run("-v", "--pipelines=fkm", f"--params={TINY},dataset.name=mat,dataset.path=empty.mat")
    assert outcome.code != 0 and "Traceback" in outcome.err and "DataError" in outcome.err
    assert [status for _, status in outcome.new_runs] == ["FAILED"]


# ---- the environment ------------------------------------------------------------------------------

#: loaded first by the Python of ``kedro run`` (PYTHONPATH): writes under FEDCLUST_TEST_READONLY fail
#: with the OS error FEDCLUST_TEST_ERRNO (EROFS: a read-only mount; ENOSPC: a full disk). Root ignores
#: file modes, so chmod cannot make a folder read-only for this suite, and filling a disk is no test;
#: this stands in for both at the OS boundary (open for writing, mkdir).
READ_ONLY_SHIM = textwrap.dedent("""
    import builtins, errno, os
    _root = os.path.abspath(os.environ["FEDCLUST_TEST_READONLY"])
    _errno = getattr(errno, os.environ.get("FEDCLUST_TEST_ERRNO", "EROFS"))
    _open, _mkdir = builtins.open, os.mkdir

    def _inside(path):
        try:
            return os.path.abspath(os.fsdecode(path)).startswith(_root)
        except TypeError:
            return False

    def _refuse(path):
        raise OSError(_errno, os.strerror(_errno), os.fsdecode(path))

    def open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wax+") and _inside(file):
            _refuse(file)
        return _open(file, mode, *args, **kwargs)

    def mkdir(path, *args, **kwargs):
        if _inside(path):
            _refuse(path)
        return _mkdir(path, *args, **kwargs)

    builtins.open, os.mkdir = open, mkdir
""")


@pytest.mark.parametrize(
    "error, words",
    [("EROFS", "the file system is read-only"), ("ENOSPC", "no space left on the device")],
    ids=["read_only", "full_disk"],
)
@pytest.mark.usefixtures("unchanged")
def test_a_read_only_or_full_reporting_folder_fails_the_run_in_one_line(project, tmp_path, error, words):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(READ_ONLY_SHIM)
    env = project.env(FEDCLUST_TEST_READONLY=str(project.root / "data" / "08_reporting"), FEDCLUST_TEST_ERRNO=error)
    env["PYTHONPATH"] = os.pathsep.join([str(shim), env["PYTHONPATH"]])
    outcome = project.run("--pipelines=fkm", f"--params={TINY}", env=env)
    assert_fault(outcome, f"cannot write {project.root / 'data' / '08_reporting'}", ["FAILED"])
    assert words in outcome.first_error


@pytest.mark.usefixtures("unchanged")
def test_a_file_in_the_way_of_a_reporting_folder_fails_the_run_in_one_line(project):
    blocker = project.root / "data" / "08_reporting" / "fzkm"
    blocker.write_text("not a folder")
    try:
        outcome = project.run("--pipelines=fzkm", f"--params={TINY},fzkm.train.rounds=2")
    finally:
        blocker.unlink()
    assert_fault(outcome, f"cannot write {blocker}", ["FAILED"])
    assert "a file is in the way of a folder" in outcome.first_error


def _store_env(project, name: str, folder) -> str:
    """A Kedro environment ``conf/<name>`` whose MLflow store is ``folder/mlflow.db``."""
    conf = project.root / "conf" / name
    conf.mkdir(exist_ok=True)
    text = (project.root / "conf" / "local" / "mlflow.yml").read_text()
    (conf / "mlflow.yml").write_text(text.replace(f"sqlite:///{project.store}", f"sqlite:///{folder / 'mlflow.db'}"))
    return name


@pytest.mark.usefixtures("unchanged")
def test_an_mlflow_store_whose_folder_cannot_exist_fails_in_one_line(project):
    blocker = project.root / "not_a_folder"
    blocker.write_text("a file where the store's folder should be")
    env = _store_env(project, "blocked_store", blocker)
    outcome = project.run(f"--env={env}", "--pipelines=fkm", f"--params={TINY}")
    assert_fault(outcome, f"cannot write {blocker}: a file is in the way of a folder", [])
    assert blocker.read_text().startswith("a file")


def _mlflow_runs(store):
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{store}")
    exps = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(exps) if exps else []


@pytest.mark.slow
@pytest.mark.usefixtures("unchanged")
def test_an_mlflow_store_moved_mid_run_fails_in_one_line_and_the_next_run_kills_the_stale_run(project, tmp_path):
    folder, moved = project.root / "store", project.root / "store_moved"
    folder.mkdir()
    env = _store_env(project, "moving_store", folder)
    import mlflow

    # the store exists before the run: polling it must not race the run creating its tables
    mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}").create_experiment(
        "fedclust", artifact_location=(project.root / "mlruns").as_uri()
    )
    long = "dataset.n_per_class=30,partition.n_clients=6,fkm.train.rounds=1500"
    proc = project.start(f"--env={env}", "--pipelines=fkm", f"--params={long}")
    try:
        deadline = time.monotonic() + 180
        while not [r for r in _mlflow_runs(folder / "mlflow.db") if r.info.status == "RUNNING"]:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.5)
        time.sleep(1)
        folder.rename(moved)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) <= 5, err
    assert lines[0].startswith(ERROR + "the MLflow store cannot be written"), err
    assert "Traceback" not in out + err
    # the store could not record the end of its run; back in place, the next run marks it KILLED
    moved.rename(folder)
    (stale,) = [r.info.run_id for r in _mlflow_runs(folder / "mlflow.db") if r.info.status == "RUNNING"]
    again = project.run(f"--env={env}", "--pipelines=fkm", f"--params={TINY}")
    assert again.code == 0, again.err[-3000:]
    status = {r.info.run_id: r.info.status for r in _mlflow_runs(folder / "mlflow.db")}
    assert status[stale] == "KILLED"


# ---- what a run handles (last: these runs write new results, other partitions included) ----------


def test_a_tiny_dirichlet_alpha_still_runs(project):
    outcome = project.run("--pipelines=fkm", f"--params={TINY},partition.scheme=dirichlet,partition.options.alpha=1e-6")
    assert outcome.code == 0, outcome.err[-3000:]
    assert [status for _, status in outcome.new_runs] == ["FINISHED"]


def test_config_file_and_params_are_merged_with_params_winning(project, tmp_path):
    config = tmp_path / "run.yml"
    config.write_text(
        textwrap.dedent("""
        run:
          pipelines: fkm
          params:
            dataset: {n_per_class: 20}
            partition: {n_clients: 4}
            fkm: {train: {rounds: 3}}
    """)
    )
    outcome = project.run(f"--config={config}", "--params=fkm.train.rounds=2,seed=7")
    assert outcome.code == 0, outcome.err[-3000:]
    assert [status for _, status in outcome.new_runs] == ["FINISHED"]
    params = max(_mlflow_runs(project.store), key=lambda r: r.info.start_time).data.params
    assert (params["dataset.n_per_class"], params["partition.n_clients"]) == ("20", "4")  # from the file
    assert (params["fkm.train.rounds"], params["seed"]) == ("2", "7")  # --params, over the file's rounds
