"""Table I baselines of DP-FedC (spec 000, 2.4; our reimplementations): FZKM, DK++, DKM."""

import math

import numpy as np
import pytest
from sklearn.cluster import kmeans_plusplus

from fedclust.clustering import dk_pp, dkm, fkm, fzkm
from fedclust.clustering._common import baseline_noise_multiplier, server_kmeans, weighted_lloyd
from fedclust.data.synthetic import gaussian_mixture
from fedclust.metrics import clustering_accuracy
from fedclust.partition.iid import iid
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.privacy.mechanisms import analytic_sigma, classical_sigma
from fedclust.privacy.report import privacy_report

MODULES = [fzkm, dk_pp, dkm]


@pytest.fixture(scope="module")
def mixture():
    ds = gaussian_mixture(900, 5, 4, separation=8.0, seed=11)
    return ds.X.astype(np.float64), ds.y, iid(900, 9, seed=11).client


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_clusters_a_separable_mixture(mod, mixture):
    X, y, client = mixture
    W0, _ = kmeans_plusplus(X, 4, random_state=1)
    r = mod.run(X, client, 4, rounds=8, clients_per_round=4, seed=0, init_centroids=W0, y=y)
    assert clustering_accuracy(y, r.labels) >= 0.99
    assert r.history["ACC"][-1] >= 0.99
    assert len(r.history["objective"]) == 8
    assert r.centroids.shape == (4, 5) and r.dp_events == [] and r.uploaded_reals > 0


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_recovers_from_a_bad_shared_init(mod, mixture):
    # Two initial centres in the same true cluster: the server's k-means restarts (FZKM, DKM) and
    # the k-means|| seeding (DK++) must still find the four clusters.
    X, y, client = mixture
    first = np.flatnonzero(y == 0)[:2]
    W0 = np.vstack([X[first], X[np.flatnonzero(y == 1)[0]], X[np.flatnonzero(y == 2)[0]]])
    r = mod.run(X, client, 4, rounds=10, clients_per_round=4, seed=0, init_centroids=W0)
    assert clustering_accuracy(y, r.labels) >= 0.99


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_same_seed_same_result_and_noise_changes_it(mod, mixture):
    X, y, client = mixture
    kw = dict(rounds=7, clients_per_round=3, noise_multiplier=0.5, clip=12.0)
    a = mod.run(X, client, 4, seed=3, **kw)
    b = mod.run(X, client, 4, seed=3, **kw)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    assert a.history == b.history
    plain = mod.run(X, client, 4, seed=3, rounds=7, clients_per_round=3)
    assert not np.allclose(a.centroids, plain.centroids)
    gauss = [e for e in a.dp_events if e.is_private]
    assert gauss and all(e.noise_multipliers[0] == 0.5 for e in gauss)
    # every DP round is a release (conservative); DK++'s 5 seeding rounds are a non-DP step
    assert sum(e.count for e in gauss) == (2 if mod is dk_pp else 7)
    assert a.info["init"] == "uniform_box" and plain.info["init"] == "data"


def test_epsilon_calibrates_the_noise_multiplier():
    assert baseline_noise_multiplier(0.0, 0.5, 1e-4, "classical") == pytest.approx(
        math.sqrt(2 * math.log(1.25 / 1e-4)) / 0.5
    )
    assert baseline_noise_multiplier(0.0, 2.0, 1e-5, "analytic") == pytest.approx(analytic_sigma(2.0, 1e-5))
    assert baseline_noise_multiplier(0.7, None, 1e-4, "classical") == 0.7
    with pytest.raises(ValueError, match="either"):
        baseline_noise_multiplier(0.7, 1.0, 1e-4, "classical")
    with pytest.raises(ValueError, match="mechanism"):
        baseline_noise_multiplier(0.0, 1.0, 1e-4, "laplace")


def test_fzkm_noise_std_is_z_times_the_sensitivity(mixture):
    X, y, client = mixture
    r = fzkm.run(X, client, 4, rounds=2, clients_per_round=3, seed=0, epsilon=0.5, delta=1e-4, clip=3.0)
    z = classical_sigma(0.5, 1e-4)
    assert r.info["noise_multiplier"] == pytest.approx(z)
    assert r.info["noise_std"] == pytest.approx(z * math.sqrt(3.0**2 + 1))  # add/remove (S_i, M_i)
    assert r.info["dp_exact"] is True


def test_fcm_memberships_by_hand():
    d2 = np.array([[1.0, 4.0, 4.0], [0.0, 2.0, 5.0]])
    u = fzkm.fcm_memberships(d2, 2.0)  # f = 2: u_l proportional to 1/d2_l
    np.testing.assert_allclose(u[0], np.array([1, 0.25, 0.25]) / 1.5)
    np.testing.assert_allclose(u[1], [1.0, 0.0, 0.0])  # a point on a centre belongs to it
    np.testing.assert_allclose(fzkm.fcm_memberships(d2 + 1, 3.0).sum(1), 1.0)


def test_dk_pp_seeding_oversamples_candidates(mixture):
    X, y, client = mixture
    r = dk_pp.run(X, client, 4, rounds=8, clients_per_round=3, seed=0, seeding_rounds=3, oversampling=8)
    assert r.info["n_candidates"] > 4 + 3  # k initial + new candidates in each seeding round
    with pytest.raises(ValueError, match="rounds"):
        dk_pp.run(X, client, 4, rounds=3, seeding_rounds=3)


def test_dkm_local_kmeans_is_a_lloyd_fixed_point():
    rng = np.random.default_rng(0)
    Xp = rng.random((3, 20, 2))
    mask = np.ones((3, 20), dtype=bool)
    mask[2, 12:] = False
    B, dmin, sizes = dkm.local_kmeans(Xp * mask[..., None], mask, 3, 60, rng)
    np.testing.assert_array_equal(sizes.sum(1), [20, 20, 12])
    assert (dmin[2, 12:] == 0).all()
    # Lloyd fixed point: every local centre is the mean of its points
    d2 = ((Xp[0][:, None, :] - B[0][None]) ** 2).sum(-1)
    lab = d2.argmin(1)
    for j in range(3):
        if (lab == j).any():
            np.testing.assert_allclose(B[0, j], Xp[0][lab == j].mean(0), atol=1e-12)


def test_weighted_lloyd_and_server_kmeans():
    P = np.array([[0.0], [1.0], [10.0], [11.0]])
    w = np.array([1.0, 3.0, 1.0, 1.0])
    C = weighted_lloyd(P, w, np.array([[0.0], [10.0]]))
    np.testing.assert_allclose(np.sort(C.ravel()), [0.75, 10.5])
    bad = np.array([[10.0], [11.0]])  # both centres in one group: warm start is stuck, restarts fix it
    C = server_kmeans(P, w, bad, np.random.default_rng(0), n_init=3)
    np.testing.assert_allclose(np.sort(C.ravel()), [0.75, 10.5])


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_bad_parameters_raise(mod, mixture):
    X, y, client = mixture
    with pytest.raises(ValueError, match="clients_per_round"):
        mod.run(X, client, 4, rounds=6, clients_per_round=20)
    with pytest.raises(ValueError, match="noise_multiplier"):
        mod.run(X, client, 4, rounds=6, clients_per_round=2, noise_multiplier=-1.0)
    with pytest.raises(ValueError, match="init_centroids"):
        mod.run(X, client, 4, rounds=6, clients_per_round=2, init_centroids=np.zeros((3, 5)))


# ---- issue 13: initialisation, public clip, non-DP steps reported as epsilon = inf ----------------

ALL_KMEANS = [fkm, fzkm, dk_pp, dkm]
_ids = lambda m: m.__name__.rsplit(".", 1)[-1]  # noqa: E731


def _dp_kw(mod):
    """A private configuration that is DP where the method has a DP variant."""
    return {
        "rounds": 3,
        "clients_per_round": 3,
        "noise_multiplier": 50.0,
        "clip": 12.0,
        **({"seeding_rounds": 0} if mod is dk_pp else {}),
    }


@pytest.mark.parametrize("mod", ALL_KMEANS, ids=_ids)
def test_private_initial_centroids_do_not_depend_on_the_data(mod, mixture, monkeypatch):
    # Issue 13, point 1: a private run's W^0 must be data-independent. Old code: k data rows, so
    # changing X changed W^0 (and an empty cluster could then publish a raw row).
    import fedclust.clustering._common as common

    X, y, client = mixture
    seen = []
    original = common.initial_centroids

    def spy(*args, **kwargs):
        seen.append(original(*args, **kwargs))
        return seen[-1]

    # the method's own import, or the shared setup (_common.baseline_setup) that calls it
    monkeypatch.setattr(mod, "initial_centroids", spy, raising=False)
    monkeypatch.setattr(common, "initial_centroids", spy)
    kw = {**_dp_kw(mod), "rounds": 1}
    a = mod.run(X, client, 4, seed=5, **kw)
    b = mod.run(X[::-1] + 3.0, client, 4, seed=5, **kw)
    assert a.info["init"] == b.info["init"] == "uniform_box"
    assert len(seen) == 2
    np.testing.assert_array_equal(seen[0], seen[1])
    assert np.linalg.norm(seen[0], axis=1).max() <= 12.0 + 1e-9  # inside the clip ball
    for row in seen[0]:  # none of the initial centroids is a data row
        assert np.min(np.linalg.norm(X - row, axis=1)) > 1e-6


def test_fkm_private_run_never_publishes_a_raw_row():
    # One noisy round: a cluster whose noisy count is < 1 keeps its initial centroid. Under the old
    # code (W^0 = k data rows) that centroid is a raw private row in most of these runs; with the
    # public default init no released centroid is ever a data row.
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (12, 3))
    client = np.repeat(np.arange(3), 4)
    hits = 0
    for seed in range(20):
        r = fkm.run(X, client, 4, rounds=1, seed=seed, noise_multiplier=5.0, clip=1.0)
        d = np.linalg.norm(r.centroids[:, None, :] - X[None], axis=-1)
        hits += int((d < 1e-12).any())
    assert hits == 0


@pytest.mark.parametrize("mod", ALL_KMEANS, ids=_ids)
def test_private_init_data_reports_infinite_epsilon_and_names_the_step(mod, mixture):
    X, y, client = mixture
    r = mod.run(X, client, 4, seed=0, init="data", **_dp_kw(mod))
    assert r.info["init"] == "data"
    rep = privacy_report(r.dp_events, 1e-5, method=mod.__name__, mechanism="gaussian")
    assert rep["epsilon"] == "inf" and not rep["private"]
    assert any("private data rows" in n for n in rep["notes"])
    ok = mod.run(X, client, 4, seed=0, **_dp_kw(mod))  # default: uniform_box
    if mod is not dkm:
        assert math.isfinite(accounted(ok.dp_events, 1e-5))


@pytest.mark.parametrize(
    "mod, kw, step",
    [
        (fzkm, {"local_iters": 3}, "local_iters=3"),
        (dk_pp, {"seeding_rounds": 2}, "k-means|| seeding"),
        (dkm, {}, "coreset"),
    ],
    ids=["fzkm_local_iters", "dk_pp_seeding", "dkm_coreset"],
)
def test_heuristic_steps_report_infinite_epsilon_and_name_the_step(mod, kw, step, mixture):
    # Issue 13, point 5: old code gave these runs a finite epsilon.
    X, y, client = mixture
    r = mod.run(X, client, 4, seed=0, **{**_dp_kw(mod), **kw})
    assert math.isinf(accounted(r.dp_events, 1e-5))
    rep = privacy_report(r.dp_events, 1e-5, method="m", mechanism="gaussian")
    assert rep["epsilon"] == "inf" and any(step in n for n in rep["notes"])
    assert r.info["dp_exact"] is False


@pytest.mark.parametrize("mod", [fzkm, dk_pp, dkm], ids=_ids)
def test_private_run_needs_a_public_clip(mod, mixture):
    # The old default (clip = largest row norm of X) is a sensitivity read off the private data.
    X, y, client = mixture
    with pytest.raises(ValueError, match="clip"):
        mod.run(X, client, 4, rounds=7, clients_per_round=3, noise_multiplier=1.0)


def _node_inputs(mixture):
    from types import SimpleNamespace

    X, y, client = mixture
    return SimpleNamespace(X=X, y=y, n_classes=4), SimpleNamespace(client=client)


@pytest.mark.parametrize(
    "method, extra, dp",
    [
        ("fzkm", {"local_iters": 1}, True),
        ("fzkm", {"local_iters": 2}, False),
        ("dk_pp", {"seeding_rounds": 0}, True),
        ("dk_pp", {"seeding_rounds": 2}, False),
        ("dkm", {}, False),
        ("fzkm", {"local_iters": 1, "init": "data"}, False),
    ],
)
def test_pipeline_nodes_never_claim_a_finite_epsilon_for_a_non_dp_run(method, extra, dp, mixture, caplog):
    # calibrate -> train -> report_privacy, as the kedro pipeline wires them (privacy.json content)
    from fedclust.pipelines.methods import node_functions as nodes_for
    from fedclust.pipelines.privacy.nodes import report_privacy

    dataset, partition = _node_inputs(mixture)
    cal, tr = nodes_for(method)
    privacy = {"epsilon": 2.0, "delta": 1e-5}
    train = {
        "k": 4,
        "rounds": 7,
        "clients_per_round": 3,
        "clip": 12.0,
        "mechanism": "classical",
        "init": None,
        "init_domain": None,
        **extra,
    }
    with caplog.at_level("WARNING"):
        noise = cal(privacy, train, dataset, partition)
    result = tr(dataset, partition, noise, train, 0)
    rep = report_privacy(result, noise, privacy, method)
    if dp:
        assert rep["private"] and rep["epsilon"] == pytest.approx(2.0, rel=0.01)
        assert not [r for r in caplog.records if "NOT differentially private" in r.getMessage()]
    else:
        assert rep["epsilon"] == "inf" and not rep["private"]
        assert any("NOT differentially private" in n for n in rep["notes"])  # the calibration's note
        assert any("not a DP mechanism" in n for n in rep["notes"])  # the step the run recorded
        assert any("NOT differentially private" in r.getMessage() for r in caplog.records)
    assert result.info["init"] == extra.get("init", "uniform_box")


def test_fkm_pipeline_nodes_flag_a_private_data_row_init(mixture, caplog):
    from fedclust.pipelines.methods import node_functions
    from fedclust.pipelines.privacy.nodes import report_privacy

    dataset, partition = _node_inputs(mixture)
    calibrate, train_node = node_functions("fkm")
    privacy = {"epsilon": 2.0, "delta": 1e-5}
    for init, finite in ((None, True), ("uniform_ball", True), ("data", False)):
        train = {"k": 4, "rounds": 5, "clients_per_round": None, "clip": 12.0, "init": init, "init_domain": None}
        noise = calibrate(privacy, train, dataset, partition)
        result = train_node(dataset, partition, noise, train, 0)
        rep = report_privacy(result, noise, privacy, "fkm")
        assert result.info["init"] == (init or "uniform_box")
        if finite:
            assert rep["epsilon"] == pytest.approx(2.0, rel=0.01)
        else:
            assert rep["epsilon"] == "inf" and any("private data rows" in n for n in rep["notes"])


@pytest.mark.parametrize("mod", ALL_KMEANS, ids=_ids)
@pytest.mark.parametrize(
    "kw, match",
    [
        ({"init": "kmeans++"}, "init must be one of"),
        ({"init": "uniform_box", "init_domain": [1.0, 0.0]}, "init_domain"),
    ],
)
def test_bad_init_parameters_name_the_parameter(mod, kw, match, mixture):
    X, y, client = mixture
    with pytest.raises(ValueError, match=match):
        mod.run(X, client, 4, rounds=7, clients_per_round=3, **kw)
