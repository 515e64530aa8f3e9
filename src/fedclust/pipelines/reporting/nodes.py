"""Plots for MLflow and data/08_reporting."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fedclust.pipelines.evaluation.nodes import history_steps, numeric_histories


def plot_history(result, method: str):
    """One panel per per-round metric (objective, ACC, test_accuracy, ...), metric against round."""
    hists = numeric_histories(result.history)
    n = max(len(hists), 1)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n, 3.0), squeeze=False)
    for ax, (key, hist) in zip(axes[0], hists.items()):
        ax.plot(history_steps(result.history, hist), hist, marker="." if len(hist) < 40 else None)
        ax.set_xlabel("round")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{method}: per-round metrics")
    # amendment A-1: evaluation on raw data is not a release
    fig.text(0.5, 0.005, "experimenter-side evaluation on raw data: outside the DP guarantee",
             ha="center", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig
