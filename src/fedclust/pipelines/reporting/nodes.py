"""Plots for MLflow and data/08_reporting."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fedclust.clustering.base import ClusteringResult


def plot_history(result: ClusteringResult, method: str):
    """One panel per per-round metric (objective, ACC, NMI, ...), metric against round."""
    keys = [k for k, v in result.history.items() if len(v) and all(isinstance(x, (int, float)) for x in v)]
    n = max(len(keys), 1)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n, 3.0), squeeze=False)
    for ax, key in zip(axes[0], keys):
        hist = result.history[key]
        ax.plot(range(1, len(hist) + 1), hist, marker="." if len(hist) < 40 else None)
        ax.set_xlabel("round")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{method}: per-round metrics")
    fig.tight_layout()
    return fig
