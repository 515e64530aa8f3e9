"""fedclust.threads: one place sets torch and BLAS/OpenMP threads together, and restores them."""

import os
import subprocess
import sys

import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from fedclust.threads import apply_thread_setting, check_threads, current_threads, thread_limits


def blas_threads():
    counts = {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}
    assert len(counts) == 1, counts  # numpy's OpenBLAS at least
    return counts.pop()


@pytest.fixture
def at_one_thread():
    """Start every test from 1 torch thread and 1 BLAS thread, and restore what was there."""
    old = torch.get_num_threads()
    with threadpool_limits(limits=1):
        torch.set_num_threads(1)
        yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("n", [2, 3])
def test_thread_limits_sets_and_restores_torch_and_blas(at_one_thread, n):
    assert (torch.get_num_threads(), blas_threads()) == (1, 1)
    with thread_limits(n) as got:
        assert got == n
        assert torch.get_num_threads() == n
        assert blas_threads() == n
        assert current_threads()["torch"] == n and current_threads()["blas"] == n
    assert (torch.get_num_threads(), blas_threads()) == (1, 1)


def test_thread_limits_restores_after_an_exception(at_one_thread):
    with pytest.raises(RuntimeError, match="boom"):
        with thread_limits(2):
            assert torch.get_num_threads() == 2
            raise RuntimeError("boom")
    assert (torch.get_num_threads(), blas_threads()) == (1, 1)


def test_thread_limits_none_leaves_everything(at_one_thread):
    with thread_limits(None) as got:
        assert got is None
        assert (torch.get_num_threads(), blas_threads()) == (1, 1)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_invalid_thread_counts_name_the_key(bad):
    with pytest.raises(ValueError, match=r"compute\.threads must be null"):
        apply_thread_setting(bad)
    with pytest.raises(ValueError, match=r"^threads must be null"):
        check_threads(bad)


def test_legacy_helpers_go_through_thread_limits(at_one_thread):
    """blas_limit (k-means family and DP-FedC) and fedc_mf's helper set torch with BLAS."""
    from fedclust.clustering._common import blas_limit
    from fedclust.clustering.fedc_mf import _blas_limit

    for ctx in (blas_limit(2), _blas_limit(2)):
        with ctx:
            assert (torch.get_num_threads(), blas_threads()) == (2, 2)
        assert (torch.get_num_threads(), blas_threads()) == (1, 1)
    with pytest.raises(ValueError, match="blas_threads must be null"):
        blas_limit(0).__enter__()


def test_apply_thread_setting_sets_pools_and_environment(at_one_thread, monkeypatch):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    with threadpool_limits(limits=1):  # restores the BLAS pool apply_thread_setting leaves set
        out = apply_thread_setting(2)
        assert out["threads"] == 2 and out["torch"] == 2 and out["blas"] == 2
        assert torch.get_num_threads() == 2 and blas_threads() == 2
        assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "2"
        assert os.environ["OPENBLAS_NUM_THREADS"] == "2"
    assert apply_thread_setting(None)["threads"] is None


def test_apply_before_torch_import_reaches_torch():
    """Set before torch is imported, the environment gives torch that many threads (no torch import in
    fedclust.threads)."""
    code = (
        "import sys; from fedclust.threads import apply_thread_setting; apply_thread_setting(1); "
        "assert 'torch' not in sys.modules; import torch; print(torch.get_num_threads())"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
