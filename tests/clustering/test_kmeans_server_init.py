"""The k-means family (FKM, FZKM, DK++, DKM) started from the server's public points (init="server")."""

from types import SimpleNamespace

import numpy as np
import pytest

from fedclust.clustering import _common, dk_pp, dkm, fkm, fzkm
from fedclust.clustering._common import nearest, server_centroids
from fedclust.clustering.fed_dp_kmeans import holdout_rows
from fedclust.params_check import ParameterError
from fedclust.privacy.mechanisms import clip_rows
from fedclust.registry import REGISTRY

METHODS = {
    "fkm": (fkm, {}),
    "fzkm": (fzkm, {"blas_threads": None}),
    "dk_pp": (dk_pp, {"seeding_rounds": 0, "blas_threads": None}),
    "dkm": (dkm, {"blas_threads": None}),
}
K = 10
CLIP = 3.0


@pytest.fixture(scope="module")
def held(digits_iid):
    """Digits on 10 iid clients and a 5 % held-out server sample (every client keeps rows)."""
    X, y, client = digits_iid
    rows = holdout_rows(X.shape[0], 0.05, 0)
    keep = np.ones(X.shape[0], dtype=bool)
    keep[rows] = False
    assert np.unique(client[keep]).size == 10
    return X, y, client, rows, keep


def _run(name, X, client, **kw):
    mod, extra = METHODS[name]
    return mod.run(X, client, K, rounds=2, clients_per_round=10, seed=3, clip=CLIP, **extra, **kw)


def _capture_w0(monkeypatch, name) -> list:
    """Record the W^0 the run starts from (FKM calls initial_centroids itself, the others through
    the shared baseline set-up)."""
    seen = []
    target = fkm if name == "fkm" else _common
    original = target.initial_centroids

    def tap(*args, **kwargs):
        C = original(*args, **kwargs)
        seen.append(np.array(C, copy=True))
        return C

    monkeypatch.setattr(target, "initial_centroids", tap)
    return seen


@pytest.mark.parametrize("name", sorted(METHODS))
def test_server_init_is_kmeans_on_exactly_the_server_rows(monkeypatch, held, name):
    X, _, client, rows, keep = held
    seen = _capture_w0(monkeypatch, name)
    res = _run(name, X, client, server_rows=rows, noise_multiplier=0.5)
    W0 = seen[0]
    assert res.info["init"] == "server"  # the default once the server holds points
    # the same k-means on the server's (clipped, as the clients clip) rows, from the same seed
    P = clip_rows(X[rows], CLIP)[0]
    np.testing.assert_array_equal(W0, server_centroids(X[rows], K, 3, CLIP))
    # and it is k-means on exactly those points: Lloyd's fixed point there (every centre is the mean
    # of the server points nearest to it), which the other rows do not satisfy
    lab, _ = nearest(P, W0)
    assert np.unique(lab).size == K
    means = np.stack([P[lab == j].mean(0) for j in range(K)])
    np.testing.assert_allclose(W0, means, atol=1e-10)
    Q = clip_rows(X[keep][: rows.size], CLIP)[0]
    lab_q, _ = nearest(Q, W0)
    moved = [np.abs(Q[lab_q == j].mean(0) - W0[j]).max() for j in range(K) if (lab_q == j).any()]
    assert max(moved) > 1e-3


@pytest.mark.parametrize("name", sorted(METHODS))
def test_held_out_rows_take_no_part_in_any_client_release(held, name):
    # With the noise on, a run whose server holds rows R of X equals, release for release, a run on
    # the clients' rows alone with X[R] handed to the server as a separate array: the rows R reach
    # nothing but W^0 (same streams, so the same noise draws).
    X, _, client, rows, keep = held
    a = _run(name, X, client, server_rows=rows, noise_multiplier=0.5)
    b = _run(name, X[keep], client[keep], server_data=X[rows], noise_multiplier=0.5)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    np.testing.assert_array_equal(a.labels[keep], b.labels)
    assert a.uploaded_reals == b.uploaded_reals
    assert a.dp_events == b.dp_events
    assert a.labels.shape == (X.shape[0],)  # the run is scored on every row, the server's too
    assert (a.info["server_data"], a.info["n_server_points"]) == ("holdout", rows.size)
    assert (b.info["server_data"], b.info["n_server_points"]) == ("array", rows.size)
    # and the held-out rows do move W^0: a run whose server has other rows differs
    other = _run(name, X, client, server_rows=np.sort(np.flatnonzero(keep)[: rows.size]), noise_multiplier=0.5)
    assert not np.allclose(other.centroids, a.centroids)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_server_init_needs_server_points_and_costs_no_privacy(held, name):
    X, _, client, rows, _ = held
    with pytest.raises((ValueError, ParameterError), match="server"):
        _run(name, X, client, init="server")
    with pytest.raises((ValueError, ParameterError), match="not both"):
        _run(name, X, client, server_rows=rows, server_data=X[rows])
    plain = _run(name, X, client, noise_multiplier=0.5)
    assert plain.info["server_data"] is None and plain.info["init"] == "uniform_box"
    # init=server adds no release: the same events as a run from public uniform_box centres
    served = _run(name, X, client, server_rows=rows, noise_multiplier=0.5)
    assert served.dp_events == plain.dp_events
    # an explicit init still wins over the server's points (which stay out of the clients' data)
    boxed = _run(name, X, client, server_rows=rows, init="uniform_box", noise_multiplier=0.5)
    assert boxed.info["init"] == "uniform_box" and boxed.info["server_data"] == "holdout"


@pytest.mark.parametrize("method", ["fkm", "fzkm", "dk_pp", "dkm"])
def test_registry_holdout_is_fed_dp_kmeans_s_rows_and_init_server_needs_it(digits_iid, method):
    X, y, client = digits_iid
    spec = REGISTRY[method]
    dataset = SimpleNamespace(name="digits", X=X, y=y, n_classes=10, images=None)
    partition = SimpleNamespace(client=client)
    cfg = spec.config_from({"server_data": "holdout", "rounds": 3})
    noise = spec.calibrate({"epsilon": None, "delta": 1e-5}, cfg, dataset, partition)
    res = spec.run(dataset, partition, noise, cfg, 1)
    assert res.info["init"] == "server" and res.info["server_data"] == "holdout"
    assert res.info["n_server_points"] == holdout_rows(X.shape[0], 0.05, 1).size == 90
    mod, extra = METHODS[method]
    kw = {"seeding_rounds": cfg.seeding_for(False)} if method == "dk_pp" else {}
    direct = mod.run(
        X, client, 10, rounds=3, clients_per_round=10, seed=1, server_rows=holdout_rows(X.shape[0], 0.05, 1), **kw
    )
    np.testing.assert_array_equal(res.centroids, direct.centroids)
    assert spec.config_from({}).server_data == "none"  # the papers' init stays the default
    with pytest.raises(ParameterError, match="server_data=holdout"):
        spec.config_from({"init": "server"})
