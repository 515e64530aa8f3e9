"""Chunks of a round trained elsewhere (``chunk_runner``): the driver draws the round's minibatch keys
up front and folds the trained chunks in order, so the aggregate equals the engine's own serial
chunked round bit for bit; with Ray (slow: starts a local Ray instance) as well as in process."""

from __future__ import annotations

import pytest
import torch
from cfl_synthetic import two_group_clients

from fedclust.clustered_fl import (
    MLP,
    ClusteredFLEngine,
    EngineConfig,
    GradientAveraging,
    rr_cluster,
)
from fedclust.clustered_fl.engine import ChunkRunner, RayChunkRunner, bytes_per_client

N_CLIENTS, N_MAX, D, N_CLASSES = 36, 10, 8, 3


def _data(seed=0):
    return two_group_clients(seed, N_CLIENTS, N_MAX, D, N_CLASSES, 3)


def _mb(data, clients, **kw):
    model = MLP(D, 6, N_CLASSES)
    return (clients + 0.5) * bytes_per_client(model, model.init(1, 0), N_MAX, D, **kw) / 2**20


CASES = {
    "minibatch": {"batch_size": 3},
    "epochs_momentum": {"beta": 0.7, "batch_size": 4, "local_epochs": 2},
    "option_I": {"beta": 0.5, "local_update": "gradient", "batch_size": 3, "aggregator": GradientAveraging("sampled")},
    "full_batch": {},
}


def _pair(kw, runner):
    data = _data()
    common = {
        "rounds": 3,
        "lr": 0.3,
        "local_steps": 3,
        "participation": 0.5,
        "seed": 5,
        "eval_every": 1,
        "device": "cpu",
    }
    mb = _mb(data, 4, beta=kw.get("beta", 0.0), batch_size=kw.get("batch_size"))
    out = []
    for r in (None, runner):
        kw2 = dict(kw)
        if "aggregator" in kw2:
            kw2["aggregator"] = GradientAveraging("sampled")
        eng = ClusteredFLEngine(
            data, MLP(D, 6, N_CLASSES), EngineConfig(k=2, max_chunk_mb=mb, chunk_runner=r, **common, **kw2)
        )
        out.append((eng, eng.run()))
    return out


def _assert_identical(pair):
    (e1, a), (e2, b) = pair
    assert a.info["chunks_per_round"] == b.info["chunks_per_round"] > 1
    for n in a.params:
        assert torch.equal(a.params[n], b.params[n]), n
        assert torch.equal(a.momentum[n], b.momentum[n]), n
    assert a.history["cluster_sizes"] == b.history["cluster_sizes"]
    assert a.info["local_samples"] == b.info["local_samples"]
    for name in ("minibatch", "sampling", "noise"):
        assert e1.rngs[name].bit_generator.state == e2.rngs[name].bit_generator.state, name


@pytest.mark.parametrize("case", list(CASES))
def test_runner_round_equals_serial_chunked_round(case):
    _assert_identical(_pair(CASES[case], ChunkRunner()))


def test_runner_with_rr_cluster_server_equals_serial():
    data = _data(1)
    kw = {
        "B": 2,
        "sigma_s": 1.0,
        "sigma_theta": 0.5,
        "clip": 0.3,
        "rounds": 2,
        "participation": 0.5,
        "seed": 3,
        "local_steps": 2,
        "batch_size": 3,
        "max_chunk_mb": _mb(data, 4, batch_size=3),
        "device": "cpu",
    }
    a = rr_cluster.run(data, MLP(D, 6, N_CLASSES), 2, **kw)
    b = rr_cluster.run(data, MLP(D, 6, N_CLASSES), 2, chunk_runner=ChunkRunner(), **kw)
    for n in a.params:
        assert torch.equal(a.params[n], b.params[n])
    assert a.history["n_clipped"] == b.history["n_clipped"]


def test_chunk_runner_is_validated():
    with pytest.raises(ValueError, match="chunk_runner"):
        ClusteredFLEngine(_data(), MLP(D, 6, N_CLASSES), EngineConfig(k=2, chunk_runner="ray"))


@pytest.mark.slow
def test_ray_round_equals_serial_round_bit_for_bit():
    ray = pytest.importorskip("ray")
    try:
        _assert_identical(
            _pair({"beta": 0.7, "batch_size": 4, "local_epochs": 2}, RayChunkRunner(num_cpus=2, max_in_flight=2))
        )
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_process_round_equals_serial_round_bit_for_bit():
    from fedclust.clustered_fl.engine import ProcessChunkRunner

    runner = ProcessChunkRunner(2)
    try:
        _assert_identical(_pair({"batch_size": 3}, runner))
    finally:
        runner.close()
