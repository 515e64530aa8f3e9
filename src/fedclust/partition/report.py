"""Partition statistics: client sizes, labels per client, and a clients x labels heatmap.

Only training samples (``partition.client >= 0``) are counted; a partition with a held-out test split
also reports the test sizes. The figure is built with the object-oriented matplotlib API on the Agg
canvas (no pyplot state, never shown), ready for an MLflow artifact or a Kedro MatplotlibWriter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedclust.options import check_int
from fedclust.partition._checks import check_labels
from fedclust.partition.base import Partition

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _check(partition: Partition, y) -> np.ndarray:
    y = check_labels(y)
    if y.shape != partition.client.shape:
        raise ValueError(f"y must have one label per sample of the partition ({partition.client.size}), got {y.size}")
    return y


def label_matrix(partition: Partition, y, n_classes: int | None = None) -> np.ndarray:
    """(n_clients, n_classes) int64 counts: entry (i, k) = training samples of label k on client i."""
    y = _check(partition, y)
    K = int(y.max()) + 1 if n_classes is None else check_int("n_classes", n_classes, int(y.max()) + 1)
    used = partition.client >= 0
    flat = partition.client[used] * K + y[used]
    return np.bincount(flat, minlength=partition.n_clients * K).reshape(partition.n_clients, K)


def partition_stats(partition: Partition, y) -> dict:
    """Summary of a partition as plain Python numbers (JSON-ready).

    Keys: n_clients, n_samples (training samples held by clients), n_unused (client -1 and not test),
    size_min/size_mean/size_max/size_std, labels_min/labels_mean/labels_max (distinct labels per client),
    n_empty_clients, sizes (list), labels_per_client (list), scheme; with a test split also
    test_sizes (list) and n_test; with groups also group_sizes (clients per group).
    """
    M = label_matrix(partition, y)
    sizes = M.sum(axis=1)
    nlab = np.count_nonzero(M, axis=1)
    out = {
        "scheme": partition.meta.get("scheme", ""),
        "n_clients": int(partition.n_clients),
        "n_samples": int(sizes.sum()),
        "n_unused": int(
            np.count_nonzero(partition.client < 0)
            - (0 if partition.test_client is None else np.count_nonzero(partition.test_client >= 0))
        ),
        "size_min": int(sizes.min()),
        "size_mean": float(sizes.mean()),
        "size_max": int(sizes.max()),
        "size_std": float(sizes.std()),
        "labels_min": int(nlab.min()),
        "labels_mean": float(nlab.mean()),
        "labels_max": int(nlab.max()),
        "n_empty_clients": int(np.count_nonzero(sizes == 0)),
        "sizes": sizes.tolist(),
        "labels_per_client": nlab.tolist(),
    }
    if partition.test_client is not None:
        t = partition.test_client[partition.test_client >= 0]
        out["test_sizes"] = np.bincount(t, minlength=partition.n_clients).tolist()
        out["n_test"] = int(t.size)
    if partition.group is not None:
        out["group_sizes"] = np.bincount(partition.group).tolist()
    return out


def heatmap_figure(partition: Partition, y, max_clients: int = 100, class_names=None) -> "Figure":
    """Clients x labels heatmap of the sample counts (first ``max_clients`` clients), with a colorbar.

    Rows are clients (ordered by id; with groups, white lines separate the groups),
    columns are labels. The image data is ``label_matrix(...)[:max_clients]``.
    """
    max_clients = check_int("max_clients", max_clients, 1)
    M = label_matrix(partition, y)
    shown = M[:max_clients]
    n_rows, K = shown.shape
    # on first use: matplotlib costs half a second at every kedro start, and only this figure needs it
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(4.0, 0.35 * K + 2.5), max(3.0, min(12.0, 0.12 * n_rows + 2.0))), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap="viridis")
    cbar = fig.colorbar(im, ax=ax)
    cbar.set_label("samples")
    ax.set_xlabel("label")
    ax.set_ylabel("client")
    ax.set_xticks(np.arange(K))
    ax.set_xticklabels(
        [str(c) for c in (class_names if class_names is not None else range(K))],
        rotation=90 if K > 20 else 0,
        fontsize=8 if K > 20 else 10,
    )
    if partition.group is not None:
        g = partition.group[:n_rows]
        for b in np.flatnonzero(np.diff(g) != 0):
            ax.axhline(b + 0.5, color="white", linewidth=1.0)
    step = max(1, int(np.ceil(n_rows / 20)))
    ax.set_yticks(np.arange(0, n_rows, step))
    scheme = partition.meta.get("scheme", "partition")
    more = f" (first {n_rows} of {partition.n_clients} clients)" if n_rows < partition.n_clients else ""
    ax.set_title(f"{scheme}: samples per client and label{more}")
    fig.tight_layout()
    return fig
