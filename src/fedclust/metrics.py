"""Evaluation metrics for both method families.

* Federated data clustering: ACC (best one-to-one matching of clusters to classes, Hungarian
  algorithm via :func:`scipy.optimize.linear_sum_assignment`), NMI (arithmetic normalization) and ARI.
* Clustered federated learning: client-clustering ACC/NMI against the true groups, and test accuracy
  where every test client uses the model with the lowest loss on its own data.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score


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
    table = contingency(y_true, y_pred)
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
