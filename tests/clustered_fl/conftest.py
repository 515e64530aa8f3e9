"""Shared by the clustered-FL tests."""

import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_thread(torch_one_thread):
    yield
