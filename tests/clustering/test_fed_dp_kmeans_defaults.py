"""FedDP-KMeans's public default rules (fedclust.clustering.defaults), the consistent matching of
clipped rows, and the defaults on data they were not tuned on (wine and breast cancer standardized)."""

from statistics import NormalDist

import numpy as np
import pytest
from sklearn.cluster import KMeans

from fedclust.clustering import defaults as D
from fedclust.clustering import fed_dp_kmeans as F
from fedclust.data.registry import prepare_dataset
from fedclust.metrics import clustering_scores

DELTA = 1e-5
SEEDS = (0, 1, 2)  # fixed before looking


def test_the_clip_is_the_median_row_norm_of_the_servers_points(digits_iid):
    X, y, client = digits_iid
    rows = F.holdout_rows(len(y), 0.05, 0)
    res = F.run(X, client, 10, server_rows=rows, steps=1, noise=None, seed=0)
    assert res.info["clip"] == pytest.approx(float(np.median(np.linalg.norm(X[rows], axis=1))))
    assert "server" in res.info["clip_rule"]
    # a given clip wins; without server points the scaling's declared bound sqrt(m)
    assert D.resolve_clip(2.5, X[rows]) == (2.5, "given")
    assert D.resolve_clip(None, None, 64, "minmax")[0] == pytest.approx(8.0)
    with pytest.raises(ValueError, match="declare no bound"):
        D.resolve_clip(None, None, 64, "none")


def test_the_weight_threshold_keeps_one_empty_point_on_average():
    for n in (2, 9, 90, 1000):
        t = D.weight_threshold(n)
        assert t == pytest.approx(NormalDist().inv_cdf(1 - 1 / n))
        # an empty point's noisy weight N(0, 1) passes with probability 1/n
        assert 1 - NormalDist().cdf(t) == pytest.approx(1 / n)
    assert D.weight_threshold(1) == 0.0


def test_the_projection_rule_reads_only_server_size_dimension_and_k():
    assert D.projection_rule(1000, 100, 10) == "server_pca"  # 1000 >= 4 * 100
    assert D.projection_rule(399, 100, 10) == "none"
    assert D.projection_rule(90, 64, 10) == "none"  # digits' 5 % holdout
    assert D.projection_rule(100, 3, 3) == "none"  # k = m: nothing to project away
    assert D.projection_rule(None, 100, 10) == "none"


def test_clipped_client_rows_meet_clipped_server_points(digits_iid):
    # A clip far below every row norm (digits: 3.4-4.3): matching the clipped client rows to
    # unclipped server points sends every sample to the shortest server points (a handful get any
    # weight); matched consistently, the clip only rescales the rows and nearly every point is used.
    X, y, client = digits_iid
    rows = F.holdout_rows(len(y), 0.05, 0)
    res = F.run(X, client, 10, server_rows=rows, steps=0, projection="none", clip=1.0, noise=None, seed=0)
    assert res.info["server_points_kept"] >= 0.8 * len(rows)
    # and the labels are those of the clipped rows: scaling every row by the same factor changes nothing
    same = F.run(X * 2.0, client, 10, server_rows=rows, steps=1, projection="none", clip=1.0, noise=None, seed=0)
    ref = F.run(X, client, 10, server_rows=rows, steps=1, projection="none", clip=1.0, noise=None, seed=0)
    assert np.array_equal(same.labels, ref.labels)


def test_server_pca_releases_nothing_and_projects_on_the_servers_directions(digits_iid):
    X, y, client = digits_iid
    public = X[:400]  # 400 >= 4 * 64 points: the rule picks server_pca
    z = F.noise_multipliers(4.0, DELTA, projection=None, steps=1)
    assert set(z) == {"weighting", "step_sums", "step_counts"}  # no projection release
    res = F.run(X[400:], client[400:], 10, server_data=public, noise=z, seed=0, y=y[400:])
    assert res.info["projection"] == "server_pca"
    assert clustering_scores(y[400:], res.labels)["ACC"] > 0.5  # measured 0.68; chance 0.14


@pytest.mark.parametrize("name", ["wine", "breast_cancer"])
def test_defaults_at_eps_1_stay_near_kmeans_on_data_they_were_not_tuned_on(name):
    # Standardized wine (178 x 13, a 9-point server sample) and breast cancer (569 x 30): the defaults
    # (clip from the server's median norm, weight threshold z_{1-1/n_s}) at eps = 1 must stay within
    # 0.10 ACC of centralized k-means (measured: wine 0.918 vs 0.966, breast cancer 0.920 vs 0.907;
    # the digits-era defaults, clip 3 and a 3-sigma threshold, gave wine 0.73).
    ds = prepare_dataset(name, scale="standardize")
    X, y = ds.X.astype(np.float64), ds.y
    k = int(y.max()) + 1
    km = clustering_scores(y, KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(X))["ACC"]
    z = F.noise_multipliers(1.0, DELTA, projection=None, steps=1, accountant="rdp")
    accs = []
    for seed in SEEDS:
        client = np.random.default_rng(seed).permutation(np.arange(len(y)) % 10)
        rows = F.holdout_rows(len(y), 0.05, seed)
        res = F.run(X, client, k, server_rows=rows, noise=z, seed=seed)
        accs.append(clustering_scores(y, res.labels)["ACC"])
    assert np.mean(accs) >= km - 0.10, (accs, km)
