"""DP-FedC with the server's public sample from a separate array (a public file) instead of held-out rows."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.clustering import dp_fedc
from fedclust.clustering.fed_dp_kmeans import holdout_rows
from fedclust.data.registry import prepare_dataset
from fedclust.partition import make_partition
from fedclust.registry import REGISTRY
from fedclust.registry.clustering import server_points
from fedclust.registry.configs import server_file_scale


@pytest.mark.parametrize("eps_bar", [None, 2.0])
def test_a_public_array_gives_the_run_of_the_same_rows_held_out(eps_bar):
    # the same public rows, held out of X or passed apart with X left without them: the clients hold
    # the same data, so W^0, the schedule, the noise and the final centroids agree exactly
    ds = prepare_dataset("iris", scale="minmax")
    client = make_partition("iid", y=ds.y, n_clients=5, seed=0).client
    rows = holdout_rows(ds.n_samples, 0.1, 0)
    keep = np.ones(ds.n_samples, dtype=bool)
    keep[rows] = False
    kw = dict(rounds=3, clients_per_round=5, seed=1)
    if eps_bar is not None:
        kw.update(eps_bar=eps_bar, delta=1e-5, G=1.0)
    held = dp_fedc.run(ds.X, client, 3, server_rows=rows, **kw)
    apart = dp_fedc.run(ds.X[keep], client[keep], 3, server_data=ds.X[rows], **kw)
    np.testing.assert_array_equal(held.centroids, apart.centroids)
    assert apart.info["init"] == "public_sample" and apart.info["server_data_rows"] == rows.size


def test_server_rows_and_an_array_together_are_refused():
    ds = prepare_dataset("iris", scale="minmax")
    with pytest.raises(ValueError, match="server_rows or server_data, not both"):
        dp_fedc.run(ds.X, np.arange(ds.n_samples) % 3, 3, server_rows=[0, 1, 2], server_data=ds.X[:5], rounds=1)


def test_the_registry_reads_a_server_file_for_dp_fedc():
    spec = {"name": "csv", "path": "tests/data/wine.csv", "options": {"label": "label"}, "scale": "minmax"}
    ds = prepare_dataset("csv", path="tests/data/wine.csv", options={"label": "label"}, scale="minmax")
    part = make_partition("iid", y=ds.y, n_clients=5, seed=0)
    method = REGISTRY["dp_fedc"]
    cfg = method.config_from({"server_data": spec, "rounds": 2})
    noise = method.calibrate({"epsilon": 4.0, "delta": 1e-5, "accountant": "rdp"}, cfg, ds, part)
    assert any("public file: wine" in note for note in noise["notes"])
    res = method.run(ds, part, noise, cfg, 0)
    # every row stays client data (the file is apart), and W^0 is the file's k-means start
    assert res.info["server_rows"] == 0 and res.info["server_data_rows"] == ds.n_samples
    assert res.info["init"] == "public_sample"


def test_a_server_file_with_declared_bounds_is_scaled_by_them_and_bad_bounds_are_refused_first():
    bounds = {"label": "label", "bounds": [0, 2000]}
    ds = prepare_dataset("csv", path="tests/data/wine.csv", options=bounds)
    spec = {"name": "csv", "path": "tests/data/wine.csv", "options": bounds}
    # bounds declared: min-max by them (the clients' scale), without them the file's own scale
    assert server_file_scale(spec) == "minmax" and server_file_scale({"name": "csv"}) == "none"
    assert server_file_scale({**spec, "scale": "none"}) == "none"
    cfg = REGISTRY["fed_dp_kmeans"].config_from({"server_data": spec})
    _, public = server_points(cfg, ds, 0)
    np.testing.assert_array_equal(public, ds.X)  # the same file, the same declared bounds
    with pytest.raises(ValueError, match="server_data: bounds: hi must be above lo"):
        REGISTRY["fed_dp_kmeans"].config_from({"server_data": {**spec, "options": {"bounds": [5, 1]}}})
