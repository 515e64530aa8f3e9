"""The clustered-FL pipelines' ``device`` setting reaches the engine."""

import pytest
import torch
from sklearn.datasets import load_digits

from fedclust.partition.rotation import rotation
from fedclust.registry import REGISTRY


@pytest.fixture(scope="module")
def rotated():
    d = load_digits()
    return rotation(
        d.images / 16.0, d.target, n_groups=2, n_clients=8, samples_per_client=10, test_per_client=5, seed=0
    )


def _run(rotated, **train):
    spec = REGISTRY["ifca"]
    cfg = spec.config.from_params({"rounds": 1, "participation": 0.5, **train})
    return spec.run(rotated, spec.calibrate({"epsilon": None}, cfg, rotated), cfg, 0)


def test_the_default_device_is_the_cpu(rotated):
    assert REGISTRY["ifca"].config().device == "cpu"
    assert _run(rotated).info["device"] == "cpu"


def test_cuda_runs_there_or_is_refused_with_the_reason(rotated):
    if torch.cuda.is_available():
        assert _run(rotated, device="cuda").info["device"] == "cuda"
    else:
        with pytest.raises(ValueError, match=r"torch.cuda.is_available\(\) is False"):
            _run(rotated, device="cuda")
    assert _run(rotated, device="auto").info["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
