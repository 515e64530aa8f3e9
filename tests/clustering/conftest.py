"""Fixtures shared by the clustering tests: the FedSC .mat data sets in ../shared/data/fedsc, digits on 10 iid clients."""

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


@pytest.fixture(scope="module")
def digits_iid():
    """(X, y, client): scikit-learn digits scaled to [0, 1] on 10 iid clients (a fixed permutation)."""
    import numpy as np
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    client = np.random.default_rng(0).permutation(np.arange(len(y)) % 10)
    return X / 16.0, y, client
