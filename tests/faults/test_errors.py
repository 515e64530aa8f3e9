"""User mistakes and environment faults end in one line that says what to do."""

from __future__ import annotations

import errno

import numpy as np
import pytest
import scipy.io

from fedclust.data.registry import prepare_dataset
from fedclust.errors import DataError, user_message
from fedclust.registry.privacy import check_privacy_params


@pytest.mark.parametrize("eps", [1e9, 1e-9])
def test_an_epsilon_outside_the_range_names_the_range(eps):
    with pytest.raises(ValueError) as err:
        check_privacy_params({"epsilon": eps}, "dp_fedc")
    assert str(err.value).startswith(f"privacy.epsilon = {eps:g} is outside the supported range for dp_fedc, [0.001, 1000]")
    assert check_privacy_params({"epsilon": 4.0}, "dp_fedc") == (4.0, 1e-5)


def test_an_empty_data_set_is_a_data_error(tmp_path):
    scipy.io.savemat(tmp_path / "e.mat", {"X": np.zeros((3, 0)), "Label": np.zeros((0, 1))})
    with pytest.raises(DataError) as err:
        prepare_dataset("mat", path=tmp_path / "e.mat")
    assert user_message(err.value).startswith(f"dataset 'mat' read from {tmp_path / 'e.mat'} has no samples")


class _Wrapped(Exception):
    """Stands for Kedro's DatasetError around the OS error of a failed save."""


def test_a_read_only_or_full_output_folder_is_explained_through_wrappers():
    for code, words in ((errno.EROFS, "the file system is read-only"), (errno.EACCES, "permission denied"),
                        (errno.ENOSPC, "no space left on the device")):
        try:
            try:
                raise OSError(code, "os says no", "data/08_reporting/x.png")
            except OSError as exc:
                raise _Wrapped("Failed while saving data to dataset") from exc
        except _Wrapped as exc:
            msg = user_message(exc)
        assert msg.startswith(f"cannot write data/08_reporting/x.png: {words}")
    assert user_message(RuntimeError("a bug")) is None  # a bug keeps its traceback
