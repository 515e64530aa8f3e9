"""Shared by the clustered-FL tests."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # tiny tensors: one thread avoids OpenMP oversubscription on the shared 2-core machine
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
