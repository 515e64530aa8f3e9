"""Fixtures shared by the clustering tests: the FedSC .mat data sets in ../shared/data/fedsc."""

import pytest


def _fedsc_mat(shared_data, name):
    """(X rows = samples, labels) of one of the FedSC .mat files; skip when it is missing."""
    p = shared_data / "fedsc" / name
    if not p.exists():
        pytest.skip(f"FedSC data file not found at {p}")
    import scipy.io

    m = scipy.io.loadmat(p)
    return m["X"].T.astype(float), m["Label"].ravel()


@pytest.fixture(scope="session")
def iris(shared_data):
    return _fedsc_mat(shared_data, "Iris_tsne.mat")


@pytest.fixture(scope="session")
def circles(shared_data):
    return _fedsc_mat(shared_data, "Concentric_Circles.mat")


@pytest.fixture(scope="session")
def coil20(shared_data):
    return _fedsc_mat(shared_data, "COIL20_tsne.mat")
