"""Chunked rounds of RR-Cluster and its DP baselines: a round folded a few clients at a time
(``max_chunk_mb``) gives the same models, groups, clip counts, releases and random-stream positions as
the round taken at once, so their memory no longer grows with the clients per round."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from cfl_synthetic import two_group_clients

from fedclust.clustered_fl import MLP, ClusteredFLEngine, EngineConfig, rr_cluster
from fedclust.clustered_fl import dp_baselines as dpb
from fedclust.clustered_fl.engine import bytes_per_client
from fedclust.clustered_fl.engine.aggregation import SUM_BLOCK, chunk_size

N_CLIENTS, N_MAX, D, N_CLASSES = 40, 12, 10, 4


def _data(seed=0):
    return two_group_clients(seed, N_CLIENTS, N_MAX, D, N_CLASSES, 4)


def _budget(model, data, clients, batch_size=None):
    per = bytes_per_client(
        model, model.init(1, 0), int(data.X_train.shape[1]), data.d, batch_size=batch_size, extra_copies=2
    )
    return (clients + 0.5) * per / 2**20


COMMON = {"rounds": 3, "lr": 0.3, "local_steps": 3, "participation": 0.5, "seed": 4, "eval_every": 1, "batch_size": 4}
PRIVATE = {"sigma_theta": 0.8, "sigma_s": 1.0, "clip": 0.2}
METHODS = {
    "rr_cluster_ifca": lambda d, m, **kw: rr_cluster.run(d, m, 2, B=3, **PRIVATE, **kw),
    "dp_ifca": lambda d, m, **kw: dpb.dp_ifca(d, m, 2, **PRIVATE, **kw),
    "rr_cluster_fedcam": lambda d, m, **kw: rr_cluster.run(d, m, 2, base="fedcam", B=2, sigma_g=0.9, **PRIVATE, **kw),
    "dp_fedavg": lambda d, m, **kw: dpb.dp_fedavg(d, m, sigma=0.8, clip=0.2, **kw),
    "dp_fedprox": lambda d, m, **kw: dpb.dp_fedprox(d, m, mu=0.1, sigma=0.8, clip=0.2, **kw),
    "dp_fedper": lambda d, m, **kw: dpb.dp_fedper(d, m, sigma=0.8, clip=0.2, **kw),
}


@pytest.mark.parametrize("method", list(METHODS))
def test_private_method_chunked_equals_whole_round(method, caplog):
    data = _data()
    model = MLP(D, 8, N_CLASSES)
    whole = METHODS[method](data, model, **COMMON)
    with caplog.at_level(logging.WARNING, logger="fedclust.clustered_fl.engine"):
        chunked = METHODS[method](data, model, max_chunk_mb=_budget(model, data, 3, 4), **COMMON)
    assert "cannot aggregate in chunks" not in caplog.text
    assert whole.info["chunks_per_round"] == 1 and chunked.info["chunks_per_round"] >= 7  # 20 clients, <= 3 a chunk
    # Bit for bit: the chunks consume every random stream in the same order (minibatch draws from the
    # round's tape, identifier and sum noise once per round), every client's training is the same
    # per-client arithmetic, and index_add_ accumulates rows in order. allclose would hide a chunk
    # that was left out or added twice only when its update is tiny, so demand equality.
    for n in whole.params:
        assert torch.equal(whole.params[n], chunked.params[n]), n
    for key in ("cluster_sizes", "sizes_after_rr", "n_moved", "n_clipped", "identifier_flips", "test_accuracy"):
        assert whole.history[key] == chunked.history[key], key
    assert max(whole.history["n_clipped"]) > 0  # the clip is active, so clipping per chunk is exercised
    assert [e.noise_multipliers for e in whole.dp_events] == [e.noise_multipliers for e in chunked.dp_events]
    np.testing.assert_array_equal(whole.assignment, chunked.assignment)


def test_fedper_heads_are_kept_per_client_across_chunks():
    """FedPer's personal heads are written back chunk by chunk: the same heads as the whole round."""
    data = _data(1)
    model = MLP(D, 8, N_CLASSES)
    kw = {**COMMON, "rounds": 2, "participation": 1.0}
    engines = []
    for mb in (None, _budget(model, data, 6, 4)):
        eng = rr_cluster.build_engine(
            data,
            model,
            EngineConfig(k=1, max_chunk_mb=mb, **kw),
            rr_cluster.ReleaseSettings(sigma_s=None, sigma_theta=0.5, clip=0.2),
            base="ifca",
            B=0,
            engine_cls=_fedper_engine(model),
            aggregator_kwargs={"frozen_keys": dpb.last_layer_keys(model.init(1, 0))},
        )
        eng.run()
        engines.append(eng)
    a, b = engines
    assert b.chunk_clients == 6
    for n in a.heads:
        assert torch.equal(a.heads[n], b.heads[n])
        assert not torch.equal(a.heads[n][0], a.heads[n][1])  # trained: every client has its own head


def _fedper_engine(model):
    keys = dpb.last_layer_keys(model.init(1, 0))

    class _Eng(dpb.FedPerEngine):
        def __init__(self, *a, **kw):
            super().__init__(*a, head_keys=keys, **kw)

    return _Eng


def test_fesem_still_runs_whole_rounds_with_a_warning(caplog):
    """FeSEM picks its cluster after local training, so a round cannot be grouped before its chunks
    are trained: it keeps the whole round (and says so) and its numbers do not change."""
    data = _data()
    model = MLP(D, 8, N_CLASSES)
    kw = {
        "base": "fesem",
        "B": 2,
        "sigma_s": 1.0,
        "sigma_theta": 1.0,
        "clip": 0.3,
        "rounds": 2,
        "participation": 0.5,
        "seed": 1,
        "local_steps": 2,
    }
    ref = rr_cluster.run(data, model, 2, **kw)
    with caplog.at_level(logging.WARNING, logger="fedclust.clustered_fl.engine"):
        small = rr_cluster.run(data, model, 2, max_chunk_mb=_budget(model, data, 3), **kw)
    assert "cannot aggregate in chunks" in caplog.text
    for n in ref.params:
        assert torch.equal(ref.params[n], small.params[n])


def test_a_clipping_aggregator_sizes_smaller_chunks():
    """PrivateClusterAggregator holds each client's delta and its clipped copy at once: two more
    parameter-sized copies per client in the chunk estimate, so the same budget takes fewer clients."""
    model = MLP(D, 8, N_CLASSES)
    params = model.init(1, 0)
    P = sum(int(v.numel()) for v in params.values())
    base = bytes_per_client(model, params, N_MAX, D)
    assert bytes_per_client(model, params, N_MAX, D, extra_copies=2) - base == 2 * P * 4  # float32
    data = _data()
    n_max = int(data.X_train.shape[1])
    per = bytes_per_client(model, params, n_max, D, batch_size=COMMON["batch_size"])
    mb = 64 * per / 2**20  # room for 64 clients by the engine's own estimate (two blocks of the sums)
    ifca = ClusteredFLEngine(data, model, EngineConfig(k=2, max_chunk_mb=mb, **COMMON))
    config = EngineConfig(k=2, max_chunk_mb=mb, **COMMON)
    private = rr_cluster.build_engine(data, model, config, rr_cluster.ReleaseSettings(**PRIVATE), B=3)
    ifca._set_chunk(params)
    private._set_chunk(params)
    assert ifca.chunk_clients == 64
    assert private.aggregator.working_copies == 2
    room = int(mb * 2**20 // (per + 2 * P * 4))
    assert SUM_BLOCK <= room < 64  # cut to a whole subtree of the summation tree: one block
    assert private.chunk_clients == chunk_size(room) == SUM_BLOCK
