import numpy as np
import pytest
from matplotlib.figure import Figure

from fedclust.partition import Partition, heatmap_figure, label_matrix, partition_stats, shards


@pytest.fixture
def tiny():
    # 3 clients; sample 6 unused (-1); client 2 empty
    y = np.array([0, 1, 1, 2, 0, 0, 2])
    p = Partition(client=np.array([0, 0, 1, 1, 1, 0, -1]), n_clients=3, meta={"scheme": "hand"})
    return p, y


def test_label_matrix_by_hand(tiny):
    p, y = tiny
    M = label_matrix(p, y)
    assert M.tolist() == [[2, 1, 0], [1, 1, 1], [0, 0, 0]]
    assert label_matrix(p, y, n_classes=5).shape == (3, 5)
    with pytest.raises(ValueError, match="n_classes"):
        label_matrix(p, y, n_classes=2)


def test_partition_stats_by_hand(tiny):
    p, y = tiny
    s = partition_stats(p, y)
    assert s["n_clients"] == 3 and s["n_samples"] == 6 and s["n_unused"] == 1
    assert s["sizes"] == [3, 3, 0] and s["size_min"] == 0 and s["size_max"] == 3
    assert s["size_mean"] == pytest.approx(2.0) and s["size_std"] == pytest.approx(np.std([3, 3, 0]))
    assert s["labels_per_client"] == [2, 3, 0] and s["labels_min"] == 0 and s["labels_max"] == 3
    assert s["labels_mean"] == pytest.approx(5 / 3)
    assert s["n_empty_clients"] == 1 and s["scheme"] == "hand"
    assert "test_sizes" not in s and "group_sizes" not in s


def test_stats_with_test_split_and_groups():
    y = np.array([0, 1, 0, 1, 0, 1])
    p = Partition(
        client=np.array([0, 1, -1, -1, -1, 0]),
        n_clients=2,
        group=np.array([1, 0]),
        test_client=np.array([-1, -1, 0, 1, -1, -1]),
    )
    s = partition_stats(p, y)
    assert s["test_sizes"] == [1, 1] and s["n_test"] == 2 and s["n_unused"] == 1 and s["group_sizes"] == [1, 1]


def test_heatmap_has_clients_by_labels_data(digits):
    _, y, _ = digits
    p = shards(y, 30, labels_per_client=2, seed=0)
    fig = heatmap_figure(p, y)
    assert isinstance(fig, Figure)
    data = fig.axes[0].images[0].get_array()
    assert data.shape == (30, 10)
    assert np.array_equal(np.asarray(data), label_matrix(p, y))
    assert len(fig.axes) == 2  # heatmap + colorbar
    assert fig.axes[0].get_xlabel() == "label" and fig.axes[0].get_ylabel() == "client"
    small = heatmap_figure(p, y, max_clients=12)
    assert small.axes[0].images[0].get_array().shape == (12, 10)
    assert "first 12 of 30" in small.axes[0].get_title()


def test_report_rejects_mismatched_labels(tiny):
    p, y = tiny
    with pytest.raises(ValueError, match="one label per sample"):
        partition_stats(p, y[:-1])
    with pytest.raises(ValueError, match="max_clients"):
        heatmap_figure(p, y, max_clients=0)
