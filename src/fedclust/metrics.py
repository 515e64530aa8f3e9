"""Evaluation metrics for both method families.

* Federated data clustering: ACC (best one-to-one matching of clusters to classes, Hungarian
  algorithm via :func:`scipy.optimize.linear_sum_assignment`), NMI (arithmetic normalization) and ARI.
* Clustered federated learning: client-clustering ACC/NMI against the true groups, and test accuracy
  where every test client uses the model with the lowest loss on its own data.
* Chance levels: the ACC and NMI that a random assignment with the same cluster sizes reaches on the
  same labels (:func:`chance_scores`, estimated by permuting the predicted labels), and a result's
  flag for being within noise of that level (:func:`is_at_chance`). ACC is never zero for a random
  clustering (a single cluster already scores the largest class share), so every reported ACC needs
  this line next to it.
* The majority baseline (:func:`majority_accuracy`): the ACC of putting every sample in one cluster,
  the share of the largest class. On imbalanced classes a clustering that puts nearly everything in
  one cluster can sit above its chance line and still score no better than this; :func:`is_collapsed`
  flags such a result (ACC above chance with NMI at chance, or ACC not above the majority baseline).
* Data without labels: the k-means objective of a clustering (:func:`kmeans_objective`) relative to
  that of non-private centralized k-means on the same data (:func:`objective_scores`), about 1 or
  more, lower is better.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import (
    adjusted_rand_score,
    mutual_info_score,
    normalized_mutual_info_score,
)

from fedclust.rng import stream, torch_seed


def _as_labels(a, name: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels, got shape {a.shape}")
    return a


def contingency(y_true, y_pred) -> np.ndarray:
    """Contingency table: rows = predicted clusters, columns = true classes (compacted ids)."""
    y_true = _as_labels(y_true, "y_true")
    y_pred = _as_labels(y_pred, "y_pred")
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred differ in length: {y_true.shape[0]} vs {y_pred.shape[0]}")
    _, t = np.unique(y_true, return_inverse=True)
    _, p = np.unique(y_pred, return_inverse=True)
    table = np.zeros((p.max(initial=-1) + 1, t.max(initial=-1) + 1), dtype=np.int64)
    np.add.at(table, (p, t), 1)
    return table


def clustering_accuracy(y_true, y_pred) -> float:
    """ACC: the fraction of samples correct under the best one-to-one cluster-to-class mapping.

    Clusters left unmatched (more clusters than classes, or the reverse) count as wrong.
    """
    return _table_accuracy(contingency(y_true, y_pred))


def _table_accuracy(table: np.ndarray) -> float:
    """ACC from a contingency table (the best one-to-one matching of its rows to its columns)."""
    if table.size == 0:
        return float("nan")
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / table.sum())


def nmi(y_true, y_pred) -> float:
    """Normalized mutual information, arithmetic normalization."""
    return float(normalized_mutual_info_score(y_true, y_pred, average_method="arithmetic"))


def ari(y_true, y_pred) -> float:
    """Adjusted Rand index."""
    return float(adjusted_rand_score(y_true, y_pred))


def clustering_scores(y_true, y_pred) -> dict[str, float]:
    """``{"ACC", "NMI", "ARI"}`` of a clustering against ground truth."""
    return {"ACC": clustering_accuracy(y_true, y_pred), "NMI": nmi(y_true, y_pred), "ARI": ari(y_true, y_pred)}


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def chance_scores(y_true, y_pred, n_permutations: int = 200, seed: int = 0) -> dict[str, float]:
    """ACC and NMI of a random assignment with the same cluster sizes as ``y_pred``.

    ``y_pred`` is shuffled ``n_permutations`` times and every shuffle is scored against ``y_true``;
    the result is the mean (``ACC_chance``, ``NMI_chance``) and the 99th percentile
    (``ACC_chance_hi``, ``NMI_chance_hi``) of those scores. A result whose ACC does not exceed
    ``ACC_chance_hi`` is indistinguishable from a random split of the same sizes (:func:`is_at_chance`).

    Every shuffle keeps both marginals, so only the contingency table is recomputed per shuffle (one
    ``bincount``); ACC comes from it by :func:`scipy.optimize.linear_sum_assignment` and NMI by
    sklearn's mutual information on the table over the two fixed entropies (arithmetic mean, the
    normalization of :func:`nmi`). The shuffles come from the run's ``chance`` stream of ``seed``.
    """
    y_true = _as_labels(y_true, "y_true")
    y_pred = _as_labels(y_pred, "y_pred")
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred differ in length: {y_true.shape[0]} vs {y_pred.shape[0]}")
    if int(n_permutations) < 1:
        raise ValueError(f"n_permutations must be >= 1, got {n_permutations}")
    if y_true.size == 0:
        nan = float("nan")
        return {"ACC_chance": nan, "ACC_chance_hi": nan, "NMI_chance": nan, "NMI_chance_hi": nan}
    _, t = np.unique(y_true, return_inverse=True)
    _, p = np.unique(y_pred, return_inverse=True)
    n_t, n_p = int(t.max()) + 1, int(p.max()) + 1
    # NMI's normalizer does not change under shuffling: both label multisets stay the same
    h_mean = 0.5 * (_entropy(np.bincount(t)) + _entropy(np.bincount(p)))
    both_single = n_t == 1 and n_p == 1  # sklearn scores two unsplit labellings as a perfect match
    rng = stream(int(seed), "chance")
    accs = np.empty(int(n_permutations))
    nmis = np.empty(int(n_permutations))
    for i in range(int(n_permutations)):
        table = np.bincount(rng.permutation(p) * n_t + t, minlength=n_p * n_t).reshape(n_p, n_t)
        accs[i] = _table_accuracy(table)
        if both_single:
            nmis[i] = 1.0
        else:
            mi = mutual_info_score(None, None, contingency=table)
            nmis[i] = mi / h_mean if mi > 0 else 0.0
    return {
        "ACC_chance": float(accs.mean()),
        "ACC_chance_hi": float(np.percentile(accs, 99)),
        "NMI_chance": float(nmis.mean()),
        "NMI_chance_hi": float(np.percentile(nmis, 99)),
    }


def data_chance_line(y_true, n_permutations: int = 200, seed: int = 0) -> dict[str, float]:
    """The chance line of a data set: :func:`chance_scores` of a random assignment with the true
    class sizes (the labels shuffled against themselves)."""
    return chance_scores(y_true, y_true, n_permutations=n_permutations, seed=seed)


#: slack on the at-chance comparison, so that a result equal to its chance level up to rounding counts
_CHANCE_TOL = 1e-9


def is_at_chance(scores: dict, chance: dict) -> bool:
    """True when ``scores["ACC"]`` is within noise of chance: not above ``chance["ACC_chance_hi"]``.

    False when either number is missing or NaN (nothing to compare).
    """
    try:
        acc, hi = float(scores["ACC"]), float(chance["ACC_chance_hi"])
    except (KeyError, TypeError, ValueError):
        return False
    if math.isnan(acc) or math.isnan(hi):
        return False
    return bool(acc <= hi + _CHANCE_TOL)


def majority_accuracy(y_true) -> float:
    """ACC of the one-cluster labelling: the share of the largest class of ``y_true`` (NaN when empty).

    A clustering whose ACC does not exceed it has done no better than calling every sample the
    majority class."""
    y_true = _as_labels(y_true, "y_true")
    if y_true.size == 0:
        return float("nan")
    _, counts = np.unique(y_true, return_counts=True)
    return float(counts.max() / y_true.size)


def _finite(d: dict, key: str) -> float | None:
    try:
        x = float(d[key])
    except (KeyError, TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def is_collapsed(scores: dict, chance: dict) -> bool:
    """True when a result's ACC says more than its NMI supports, the mark of a collapsed clustering
    (nearly every sample in one cluster) on imbalanced classes. Either of:

    * ``scores["ACC"]`` above ``chance["ACC_chance_hi"]`` (not at chance by ACC) while
      ``scores["NMI"]`` does not exceed ``chance["NMI_chance_hi"]`` (at chance by NMI);
    * ``scores["ACC"]`` not above ``chance["ACC_majority"]`` (no better than one cluster).

    Each test needs its numbers: a missing or NaN one leaves that test False.
    """
    acc = _finite(scores, "ACC")
    if acc is None:
        return False
    nmi_, acc_hi, nmi_hi = _finite(scores, "NMI"), _finite(chance, "ACC_chance_hi"), _finite(chance, "NMI_chance_hi")
    if nmi_ is not None and acc_hi is not None and nmi_hi is not None:
        if acc > acc_hi + _CHANCE_TOL and nmi_ <= nmi_hi + _CHANCE_TOL:
            return True
    majority = _finite(chance, "ACC_majority")
    return majority is not None and acc <= majority + _CHANCE_TOL


def client_clustering_scores(true_group, assigned_cluster) -> dict[str, float]:
    """ACC and NMI of a client-to-cluster assignment against the true client groups."""
    return {
        "client_ACC": clustering_accuracy(true_group, assigned_cluster),
        "client_NMI": nmi(true_group, assigned_cluster),
    }


def lowest_loss_choice(losses) -> np.ndarray:
    """Index of the lowest-loss model for every client; ties go to the lowest index.

    ``losses``: (n_clients, k) loss of every cluster model on each client's own data.
    """
    losses = np.asarray(losses, dtype=float)
    if losses.ndim != 2:
        raise ValueError(f"losses must be (n_clients, k), got shape {losses.shape}")
    return np.argmin(losses, axis=1)  # argmin returns the first minimum: ties -> lowest index


def pooled_accuracy(losses, correct, counts) -> float:
    """Pooled test accuracy where every client picks its lowest-loss model.

    ``losses`` and ``correct`` are (n_clients, k); ``counts`` is (n_clients,) test samples per client.
    """
    choice = lowest_loss_choice(losses)
    correct = np.asarray(correct, dtype=float)
    right = correct[np.arange(len(choice)), choice]
    counts = np.asarray(counts, dtype=float)
    if counts.sum() <= 0:
        raise ValueError("counts must contain at least one test sample")
    return float(right.sum() / counts.sum())


def scores_with_chance(y_true, y_pred, seed: int = 0) -> dict[str, float]:
    """:func:`clustering_scores` with the result's chance line (:func:`chance_scores`), the majority
    baseline ``ACC_majority`` (:func:`majority_accuracy`), ``at_chance`` (1.0 or 0.0,
    :func:`is_at_chance`) and ``collapsed`` (1.0 or 0.0, :func:`is_collapsed`): what every grid
    record and every single run's evaluation carries."""
    out = clustering_scores(y_true, y_pred)
    out.update(chance_scores(y_true, y_pred, seed=seed))
    out["ACC_majority"] = majority_accuracy(y_true)
    out["at_chance"] = float(is_at_chance(out, out))
    out["collapsed"] = float(is_collapsed(out, out))
    return out


def client_chance(group, assignment, client_acc: float, seed: int = 0) -> dict[str, float]:
    """The chance line of a clustered-FL run's client clustering: ``client_ACC_chance`` and
    ``client_NMI_chance`` of a random assignment with the same cluster sizes as ``assignment``, and
    ``client_at_chance`` (1.0 when ``client_acc`` is within noise of it). Empty when the shapes differ."""
    if group is None or assignment is None or np.shape(group) != np.shape(assignment):
        return {}
    chance = chance_scores(group, np.asarray(assignment), seed=seed)
    return {
        "client_ACC_chance": chance["ACC_chance"],
        "client_NMI_chance": chance["NMI_chance"],
        "client_at_chance": float(is_at_chance({"ACC": client_acc}, chance)),
    }


def rounds_to_fraction(history, fraction: float = 0.9) -> int | None:
    """The first round (1-based) whose value reaches ``fraction`` of the final one; None without a
    history or when the final value is not positive."""
    values = [float(v) for v in history or []]
    if not values or not values[-1] > 0:
        return None
    target = fraction * values[-1]
    return next(i for i, v in enumerate(values, 1) if v >= target)


def time_to_90pct(history: dict, run_time_s: float) -> dict[str, float]:
    """``rounds_to_90pct_ACC`` and ``time_to_90pct_ACC_s`` of a run with a per-round ACC history:
    the first round at 90 % of the final ACC, and the run time in proportion of its rounds (no
    per-round clock is kept). Empty without an ACC history."""
    acc = (history or {}).get("ACC") or []
    r90 = rounds_to_fraction(acc)
    if r90 is None:
        return {}
    return {"rounds_to_90pct_ACC": float(r90), "time_to_90pct_ACC_s": float(run_time_s) * r90 / len(acc)}


def kmeans_objective(X, centers=None, labels=None) -> float:
    """The k-means objective of a clustering of ``X`` (n, m): the mean over samples of the squared
    distance to the nearest centre. The centres are ``centers`` (rows that are not finite, such as
    a private method's empty cluster, are left out), or, for a method without centres, the means of
    the clusters of ``labels``. What an unlabelled data set is evaluated by."""
    X = np.asarray(X, dtype=np.float64)
    if centers is None:
        if labels is None:
            raise ValueError("kmeans_objective needs centers or labels")
        labels = _as_labels(labels, "labels")
        ids = np.unique(labels)
        centers = np.stack([X[labels == c].mean(axis=0) for c in ids])
    C = np.asarray(centers, dtype=np.float64).reshape(-1, X.shape[1])
    C = C[np.isfinite(C).all(axis=1)]
    if C.shape[0] == 0:
        return math.inf
    # |x - c|^2 = |x|^2 - 2 x.c + |c|^2, in blocks of rows to bound the memory
    cc = (C**2).sum(axis=1)
    total = 0.0
    for start in range(0, X.shape[0], 65536):
        B = X[start : start + 65536]
        d2 = (B**2).sum(axis=1)[:, None] - 2.0 * B @ C.T + cc[None, :]
        total += float(np.maximum(d2.min(axis=1), 0.0).sum())
    return total / max(X.shape[0], 1)


#: restarts of the centralized k-means that an unlabelled clustering's objective is compared with
REFERENCE_RESTARTS = 10


def fit_centralized_kmeans(X, k: int, seed: int = 0, restarts: int = REFERENCE_RESTARTS):
    """Non-private centralized k-means with ``k`` clusters fitted on ``X``: scikit-learn's
    :class:`~sklearn.cluster.KMeans`, k-means++ starts, ``restarts`` restarts, the best kept, seeded
    from the ``init`` stream of ``seed``. The one seeding rule of every centralized k-means reference
    (the FedSC baseline, the unlabelled benchmark's reference objective)."""
    # scikit-learn's clustering loads when a reference is fitted, not at every import
    from sklearn.cluster import KMeans

    km = KMeans(n_clusters=int(k), n_init=restarts, random_state=torch_seed(stream(seed, "init")) % (2**31 - 1))
    return km.fit(X)


def reference_kmeans_objective(X, k: int, seed: int = 0, restarts: int = REFERENCE_RESTARTS) -> float:
    """The k-means objective (:func:`kmeans_objective`) of non-private centralized k-means with ``k``
    clusters on ``X`` (:func:`fit_centralized_kmeans`). ``k`` is capped at the number of rows."""
    X = np.asarray(X, dtype=np.float64)
    k = max(1, min(int(k), X.shape[0]))
    return kmeans_objective(X, centers=fit_centralized_kmeans(X, k, seed, restarts).cluster_centers_)


def objective_scores(X, centers=None, labels=None, reference: float | None = None) -> dict[str, float]:
    """What a clustering of unlabelled data ``X`` reports: ``objective`` (the k-means objective of
    ``centers``, or, without usable centres, of the means of the clusters of ``labels``:
    :func:`kmeans_objective`), ``objective_kmeans`` (``reference``, or else
    :func:`reference_kmeans_objective` with as many clusters: the centres' count, or the number of
    distinct labels) and ``objective_ratio`` = objective / objective_kmeans (about 1 or more; lower
    is better; 1 = as good as centralized k-means). Centres count as usable when they are a 2-D array
    with ``X``'s columns and at least one finite row."""
    X = np.asarray(X, dtype=np.float64)
    C = None if centers is None else np.asarray(centers, dtype=np.float64)
    if C is not None and C.ndim == 2 and C.shape[1] == X.shape[1] and np.isfinite(C).all(axis=1).any():
        own = kmeans_objective(X, centers=C)
        k = int(C.shape[0])
    else:
        if labels is None:
            raise ValueError("objective_scores needs centres with X's columns or labels")
        own = kmeans_objective(X, labels=labels)
        k = int(np.unique(np.asarray(labels)).size)
    base = float(reference) if reference is not None else reference_kmeans_objective(X, k)
    ratio = own / base if base > 0 else (1.0 if own == 0 else math.inf)
    return {"objective": float(own), "objective_kmeans": float(base), "objective_ratio": float(ratio)}
