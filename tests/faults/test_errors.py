"""User mistakes and environment faults end in one line that says what to do."""

from __future__ import annotations

import errno
import logging
import sqlite3

import numpy as np
import pytest
import scipy.io

from fedclust.cli import merge_params
from fedclust.data.base import Dataset
from fedclust.data.registry import NO_FILE_NAMES, prepare_dataset
from fedclust.errors import DataError, RepeatedUserErrorFilter, user_message
from fedclust.memory import MemoryEstimateError, human, require_memory
from fedclust.partition.base import Partition
from fedclust.registry import REGISTRY, method_problems
from fedclust.registry.privacy import check_privacy_params
from fedclust.registry.spec import estimate_work


@pytest.mark.parametrize("eps", [1e9, 1e-9])
def test_an_epsilon_outside_the_range_names_the_range(eps):
    with pytest.raises(ValueError) as err:
        check_privacy_params({"epsilon": eps}, "dp_fedc")
    assert str(err.value).startswith(
        f"privacy.epsilon = {eps:g} is outside the supported range for dp_fedc, [0.001, 1000]"
    )
    assert check_privacy_params({"epsilon": 4.0}, "dp_fedc") == (4.0, 1e-5)


def test_an_empty_data_set_is_a_data_error(tmp_path):
    scipy.io.savemat(tmp_path / "e.mat", {"X": np.zeros((3, 0)), "Label": np.zeros((0, 1))})
    with pytest.raises(DataError) as err:
        prepare_dataset("mat", path=tmp_path / "e.mat")
    assert user_message(err.value).startswith(f"dataset 'mat' read from {tmp_path / 'e.mat'} has no samples")


class _Wrapped(Exception):
    """Stands for Kedro's DatasetError around the OS error of a failed save."""


def test_a_read_only_or_full_output_folder_is_explained_through_wrappers():
    for code, words in (
        (errno.EROFS, "the file system is read-only"),
        (errno.EACCES, "permission denied"),
        (errno.ENOSPC, "no space left on the device"),
    ):
        try:
            try:
                raise OSError(code, "os says no", "data/08_reporting/x.png")
            except OSError as exc:
                raise _Wrapped("Failed while saving data to dataset") from exc
        except _Wrapped as exc:
            msg = user_message(exc)
        assert msg.startswith(f"cannot write data/08_reporting/x.png: {words}")
    assert user_message(RuntimeError("a bug")) is None  # a bug keeps its traceback


def test_a_file_in_the_way_of_a_folder_and_an_unwritable_mlflow_store_are_explained():
    assert user_message(NotADirectoryError(errno.ENOTDIR, "Not a directory", "data/08_reporting/x")).startswith(
        "cannot write data/08_reporting/x: a file is in the way of a folder on that path"
    )
    try:
        try:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        except sqlite3.OperationalError as exc:
            raise RuntimeError("the tracking store said no") from exc
    except RuntimeError as exc:
        msg = user_message(exc)
    assert msg.startswith("the MLflow store cannot be written (readonly database): its folder was moved or deleted")
    assert user_message(sqlite3.OperationalError("no such column: x")) is None  # a bug, not the environment


def _record(name: str, level=logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, "Node failed with error: %s", ("x",), None)


def test_kedro_lines_about_a_user_error_are_dropped_while_it_propagates(monkeypatch):
    monkeypatch.delenv("FEDCLUST_TRACEBACK", raising=False)
    monkeypatch.delenv("FEDCLUST_DEBUG", raising=False)
    quiet = RepeatedUserErrorFilter()
    node, ours = _record("kedro.pipeline.node", logging.ERROR), _record("fedclust.hooks")
    assert quiet.filter(node)  # no error being handled: kept
    try:
        raise DataError("dataset 'mat' has no samples")
    except DataError:
        assert not quiet.filter(node)  # the CLI prints this one once
        assert quiet.filter(_record("kedro.runner", logging.INFO))  # information is kept
        assert quiet.filter(ours)  # our own warnings are kept
        monkeypatch.setenv("FEDCLUST_TRACEBACK", "1")
        assert quiet.filter(node)  # -v keeps everything
    monkeypatch.delenv("FEDCLUST_TRACEBACK")
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        assert quiet.filter(node)  # a bug keeps Kedro's lines and its traceback


def test_config_file_params_and_command_line_params_merge_key_by_key():
    from_file = {"dataset": {"n_per_class": 20, "scale": "none"}, "fkm": {"train": {"rounds": 3, "k": 4}}}
    given = {"fkm": {"train": {"rounds": 2}}, "seed": 7}
    assert merge_params(from_file, given) == {
        "dataset": {"n_per_class": 20, "scale": "none"},
        "fkm": {"train": {"rounds": 2, "k": 4}},
        "seed": 7,
    }
    assert from_file["fkm"]["train"]["rounds"] == 3  # inputs left as they were


def test_memory_beyond_what_is_available_is_refused_with_the_estimate():
    parts = {"models": 3 * 2**40, "data": 2**30}
    with pytest.raises(MemoryEstimateError) as err:
        require_memory("ifca with these settings", parts, "use a smaller model", available=16 * 2**30)
    assert str(err.value) == (
        "ifca with these settings would need about 3.0 TiB of memory (models: 3.0 TiB), more "
        "than this machine has available (16.0 GiB): use a smaller model"
    )
    assert user_message(err.value) == str(err.value)
    assert require_memory("small", {"a": 2**20}, "", available=16 * 2**30) == 2**20
    assert human(512) == "512 B" and human(1.5 * 2**30) == "1.5 GiB"


def test_a_method_whose_arrays_cannot_fit_is_refused_before_it_starts(monkeypatch):
    rng = np.random.default_rng(0)
    ds = Dataset(X=rng.random((60, 5)), y=np.repeat(np.arange(3), 20), name="toy")
    part = Partition(client=np.repeat(np.arange(6), 10), n_clients=6)
    spec, cfg = REGISTRY["fkm"], REGISTRY["fkm"].config_from({"k": 3})
    monkeypatch.setattr("fedclust.memory.available_bytes", lambda: 2**30)
    assert estimate_work(spec, cfg, ds, part) > 0  # fits: the usual work estimate
    # 3 copies of the 60 x 5 data (7200 B) and 4 of the 6 clients' 3 x 5 centres (2880 B), in 4 KiB
    monkeypatch.setattr("fedclust.memory.available_bytes", lambda: 4096)
    with pytest.raises(MemoryEstimateError) as err:
        estimate_work(spec, cfg, ds, part)
    assert str(err.value).startswith(
        "fkm with these settings would need about 9.8 KiB of memory (working copies "
        "of the data (3 x n x m): 7.0 KiB), more than this machine has available (4.0 KiB)"
    )


def test_dk_pp_rounds_that_leave_no_room_for_seeding_say_what_to_set():
    problems = method_problems(
        {"dk_pp": {"train": {"rounds": 3, "seeding_rounds": 5}}, "privacy": {"epsilon": None}}, ["params:dk_pp.train"]
    )
    assert problems == [
        "dk_pp.train.rounds = 3 is too few for DK++, which spends 5 k-means|| seeding round(s) and 1 "
        "weighting round before its Lloyd rounds: set dk_pp.train.rounds >= 6, or lower "
        "dk_pp.train.seeding_rounds (0 is the DP variant)"
    ]
    private = {
        "dk_pp": {"train": {"rounds": 20, "private_rounds": 5, "seeding_rounds": 5}},
        "privacy": {"epsilon": 1.0},
    }
    assert "dk_pp.train.private_rounds = 5 is too few" in method_problems(private, ["params:dk_pp.train"])[0]
    assert method_problems({"dk_pp": {"train": {"rounds": 6}}}, ["params:dk_pp.train"]) == []
    # the default seeding (null) fits the rounds: at most rounds - 2 without DP, none with DP
    assert method_problems({"dk_pp": {"train": {"rounds": 3}}}, ["params:dk_pp.train"]) == []


@pytest.mark.parametrize("name", NO_FILE_NAMES)
def test_a_path_given_to_a_data_set_that_reads_no_file_is_an_error(name):
    with pytest.raises(ValueError, match=f"dataset '{name}' reads no file, but a path was given"):
        prepare_dataset(name, path="some/file.mat")


def test_a_run_beyond_the_work_limit_is_refused_before_it_starts():
    """A huge ``rounds`` no longer only warns: above compute.max_work the run is refused with the
    estimate and what to change; null lifts the limit, and a bad limit is a parameter error."""
    from fedclust.errors import user_message
    from fedclust.registry import helpers

    try:
        helpers.set_work_limit(1e6)
        with pytest.raises(helpers.WorkLimitError) as err:
            helpers.log_work("fkm", 10**9, 10, 960.0, "ops")
        assert user_message(err.value).startswith("fkm: the work estimate, 1000000000 rounds x 10 clients")
        assert "raise compute.max_work (null: no limit)" in str(err.value)
        assert helpers.log_work("fkm", 10, 10, 960.0, "ops") == 96000.0  # under the limit: runs
        helpers.set_work_limit(None)
        assert helpers.log_work("fkm", 10**9, 10, 960.0, "ops") == 9.6e12
        with pytest.raises(helpers.ParameterError, match="compute.max_work must be null"):
            helpers.set_work_limit(0)
    finally:
        helpers.set_work_limit(helpers.WORK_LIMIT_DEFAULT)
