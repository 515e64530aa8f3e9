import itertools

import numpy as np
import pytest

from fedclust import metrics


def brute_force_acc(y, p):
    classes, clusters = np.unique(y), np.unique(p)
    best = 0
    # every injective map from clusters to classes (pad classes with "no class")
    pad = list(classes) + [None] * max(0, len(clusters) - len(classes))
    for perm in itertools.permutations(pad, len(clusters)):
        mapping = dict(zip(clusters, perm))
        best = max(best, sum(mapping[pi] == yi for yi, pi in zip(y, p)))
    return best / len(y)


@pytest.mark.parametrize("seed", range(8))
def test_acc_equals_brute_force_on_small_cases(seed):
    rng = np.random.default_rng(seed)
    n_cls, n_clu = rng.integers(2, 5), rng.integers(2, 5)
    y = rng.integers(0, n_cls, size=25)
    p = rng.integers(0, n_clu, size=25)
    assert metrics.clustering_accuracy(y, p) == pytest.approx(brute_force_acc(y, p))


def test_acc_is_invariant_to_relabelling_and_perfect_for_a_permutation():
    y = np.array([0, 0, 1, 1, 2, 2, 2])
    p = np.array([5, 5, 9, 9, 1, 1, 1])
    assert metrics.clustering_accuracy(y, p) == 1.0
    assert metrics.clustering_accuracy(y, np.array([0, 1, 0, 1, 0, 1, 0])) == pytest.approx(
        3 / 7
    )  # clusters -> classes 2 and 0


def test_nmi_ari_known_values():
    y = np.array([0, 0, 1, 1])
    assert metrics.nmi(y, np.array([1, 1, 0, 0])) == pytest.approx(1.0)
    assert metrics.ari(y, np.array([1, 1, 0, 0])) == pytest.approx(1.0)
    # independent labelling: NMI 0, ARI negative (-0.5 for this 2x2 case)
    assert metrics.nmi(y, np.array([0, 1, 0, 1])) == pytest.approx(0.0, abs=1e-12)
    assert metrics.ari(y, np.array([0, 1, 0, 1])) == pytest.approx(-0.5)


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="differ in length"):
        metrics.clustering_accuracy([0, 1], [0, 1, 1])


def test_client_clustering_scores_and_pooled_accuracy():
    s = metrics.client_clustering_scores([0, 0, 1, 1], [3, 3, 2, 2])
    assert s == {"client_ACC": 1.0, "client_NMI": pytest.approx(1.0)}
    losses = np.array([[0.5, 0.5], [2.0, 1.0], [0.1, 3.0]])  # client 0 ties -> model 0
    correct = np.array([[8, 0], [1, 9], [10, 0]])
    counts = np.array([10, 10, 10])
    assert list(metrics.lowest_loss_choice(losses)) == [0, 1, 0]
    assert metrics.pooled_accuracy(losses, correct, counts) == pytest.approx(27 / 30)


def test_the_reference_objective_is_that_of_the_centralized_kmeans_reference_and_scores_relate_to_it():
    # the same k-means the single runs' evaluation compared with before it moved here (same seed rule)
    from fedclust.clustering.fedsc import centralized_kmeans

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.3, size=(40, 2)) for c in ([0, 0], [4, 0], [0, 4])])
    ref = centralized_kmeans(X, 3, seed=0, n_init=metrics.REFERENCE_RESTARTS)
    base = metrics.reference_kmeans_objective(X, 3)
    assert base == metrics.kmeans_objective(X, centers=ref.centroids)
    same = metrics.objective_scores(X, centers=ref.centroids, labels=ref.labels)
    assert same == {"objective": base, "objective_kmeans": base, "objective_ratio": 1.0}
    # without centres (a method that returns labels only): the clusters' means, k from the labels
    by_labels = metrics.objective_scores(X, labels=ref.labels, reference=2 * base)
    assert by_labels["objective_ratio"] == pytest.approx(0.5) and by_labels["objective_kmeans"] == 2 * base
    # one centre at the data mean: the objective is the total variance
    one = metrics.objective_scores(X, centers=X.mean(axis=0, keepdims=True), reference=base)
    assert one["objective"] == pytest.approx(X.var(axis=0).sum()) and one["objective_ratio"] > 5
    with pytest.raises(ValueError, match="centres with X's columns or labels"):
        metrics.objective_scores(X, centers=np.zeros((3, 5)))
