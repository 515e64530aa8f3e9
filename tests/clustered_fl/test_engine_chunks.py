"""Chunked rounds of the clustered-FL engine (issue 16, section 1): a round processed ``chunk_clients``
clients at a time (``max_chunk_mb``) equals the round processed at once, for every built-in
aggregation, minibatch protocol and sampling scheme, and the budget really splits the round."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cfl_synthetic import two_group_clients

from fedclust.clustered_fl import MLP, ClusteredFLEngine, DeltaAveraging, EngineConfig, GradientAveraging
from fedclust.clustered_fl.engine import bytes_per_client
from fedclust.privacy.mechanisms import add_gaussian_noise

N_CLIENTS, N_MAX, D, N_CLASSES = 40, 12, 10, 4


def _data(seed=0):
    # unequal sizes (3..N_MAX): padding and empty epoch batches occur
    return two_group_clients(seed, N_CLIENTS, N_MAX, D, N_CLASSES, 4)


def _budget(model, data, clients, **kw):
    """max_chunk_mb that gives chunks of ``clients`` clients."""
    per = bytes_per_client(model, model.init(1, 0), int(data.X_train.shape[1]), data.d, **kw)
    return (clients + 0.5) * per / 2**20


def _run(data, chunk_mb, **kw):
    model = MLP(D, 8, N_CLASSES)
    kw = {"rounds": 4, "lr": 0.2, "local_steps": 3, "participation": 0.5, "eval_every": 2, "seed": 3, **kw}
    eng = ClusteredFLEngine(data, model, EngineConfig(k=2, max_chunk_mb=chunk_mb, **kw))
    return eng, eng.run()


def _assert_same(a, b, atol=1e-5):
    for n in a.params:
        torch.testing.assert_close(a.params[n], b.params[n], atol=atol, rtol=1e-5)
        torch.testing.assert_close(a.momentum[n], b.momentum[n], atol=atol, rtol=1e-5)
    np.testing.assert_array_equal(a.assignment, b.assignment)
    assert a.history["cluster_sizes"] == b.history["cluster_sizes"]
    np.testing.assert_allclose(a.history["test_accuracy"], b.history["test_accuracy"])
    np.testing.assert_allclose(a.history["train_loss"], b.history["train_loss"], rtol=1e-5)
    assert a.info["local_samples"] == b.info["local_samples"]


CASES = {
    "option_II_momentum_minibatch": dict(beta=0.9, batch_size=4),
    "option_II_full_batch": dict(beta=0.0),
    "local_epochs": dict(beta=0.5, batch_size=5, local_epochs=2),
    "option_I_gradient": dict(beta=0.9, local_update="gradient", batch_size=4),
    "option_I_sampled_norm": dict(local_update="gradient", aggregator=GradientAveraging("sampled")),
    "poisson": dict(beta=0.9, batch_size=4, sampling="poisson"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_chunked_round_equals_unchunked(case):
    data = _data()
    kw = dict(CASES[case])
    model = MLP(D, 8, N_CLASSES)
    mb = _budget(model, data, 3, beta=kw.get("beta", 0.0), batch_size=kw.get("batch_size"))
    agg = kw.pop("aggregator", None)
    e1, whole = _run(data, None, aggregator=agg, **kw)
    if agg is not None:
        kw["aggregator"] = GradientAveraging("sampled")
    e2, chunked = _run(data, mb, **kw)
    assert e1.chunk_clients >= N_CLIENTS  # the default budget: one chunk
    assert e2.chunk_clients == 3 and chunked.info["chunks_per_round"] == 7  # 20 clients in 7 chunks
    _assert_same(whole, chunked)
    # every stream was consumed identically: the next draws agree
    for name in ("sampling", "minibatch", "noise"):
        assert e1.rngs[name].random() == e2.rngs[name].random(), name


class _ClipNoise(DeltaAveraging):
    """A private-style strategy: per-client clip, then noise on the complete sums (stream "noise")."""

    def clip_deltas(self, deltas, updates, ctx):
        sq = sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in deltas.values())
        scale = torch.clamp(0.05 / sq.sqrt().clamp(min=1e-12), max=1.0)
        return {n: v * scale.reshape(-1, *([1] * (v.ndim - 1))) for n, v in deltas.items()}

    def privatize_sums(self, sums, counts, ctx):
        return {n: add_gaussian_noise(v, 0.01, ctx.rngs["noise"]) for n, v in sums.items()}


def test_chunked_delta_averaging_with_clip_and_noise_equals_unchunked():
    data = _data(1)
    mb = _budget(MLP(D, 8, N_CLASSES), data, 4)
    _, whole = _run(data, None, aggregator=_ClipNoise(server_lr=0.7))
    e2, chunked = _run(data, mb, aggregator=_ClipNoise(server_lr=0.7))
    assert chunked.info["chunks_per_round"] == 5
    _assert_same(whole, chunked)


def test_chunked_round_keeps_updates_without_the_per_client_stack():
    data = _data()
    e, _ = _run(data, _budget(MLP(D, 8, N_CLASSES), data, 3), rounds=1)
    state = e.init_state()
    new, updates, agg = e.step(state)
    assert updates.chunked and updates.params == {} and updates.start_params == {}
    assert updates.losses.shape == (20, 2) and len(updates.clients) == 20
    assert torch.equal(agg.groups, updates.chosen)
    assert int(agg.cluster_sizes.sum()) == 20


def test_max_chunk_mb_is_validated_and_bounds_the_chunk():
    data = _data()
    with pytest.raises(ValueError, match="max_chunk_mb"):
        ClusteredFLEngine(data, MLP(D, 8, N_CLASSES), EngineConfig(k=2, max_chunk_mb=0))
    with pytest.raises(ValueError, match="max_chunk_mb"):
        ClusteredFLEngine(data, MLP(D, 8, N_CLASSES), EngineConfig(k=2, max_chunk_mb="big"))
    # a bigger model gets proportionally fewer clients per chunk under the same budget
    small = ClusteredFLEngine(data, MLP(D, 8, N_CLASSES), EngineConfig(k=2, max_chunk_mb=0.5))
    big = ClusteredFLEngine(data, MLP(D, 256, N_CLASSES), EngineConfig(k=2, max_chunk_mb=0.5))
    small.init_state(), big.init_state()
    assert 1 <= big.chunk_clients < small.chunk_clients
    assert big.chunk_clients * big.bytes_per_client <= 0.5 * 2**20


@pytest.mark.parametrize("method", ["ifca", "cfl_mgd", "fedavg"])
def test_pipeline_node_passes_max_chunk_mb(method):
    """``<method>.train.max_chunk_mb`` reaches the engine (null = the default budget, one chunk here)."""
    from sklearn.datasets import load_digits

    from fedclust.partition.rotation import rotation
    from fedclust.pipelines.methods import node_functions

    d = load_digits()
    rd = rotation(d.images / 16.0, d.target, n_groups=2, n_clients=20, samples_per_client=20, test_per_client=5, seed=0)
    train = {
        "rounds": 2,
        "participation": 0.5,
        "local_steps": 2,
        "eval_every": 1,
        "model": {"type": "mlp", "hidden": 8},
    }
    _, train_node = node_functions(method)
    small = train_node(rd, {}, {**train, "max_chunk_mb": 0.02}, 0)
    default = train_node(rd, {}, {**train, "max_chunk_mb": None}, 0)
    assert small.info["max_chunk_mb"] == 0.02 and small.info["chunks_per_round"] > 1
    assert default.info["chunks_per_round"] == 1
    for n in default.params:
        torch.testing.assert_close(small.params[n], default.params[n], atol=1e-5, rtol=1e-5)


def test_every_chunk_hands_its_freed_memory_back(monkeypatch):
    """The chunk loops offer the allocator's free memory back after each chunk
    (fedclust.memory.release_free_memory, above a ceiling): once per loss chunk and once per
    training chunk, every round; a one-chunk round does not."""
    import fedclust.clustered_fl.engine.loop as loop  # the module whose name the engine calls

    calls = []
    monkeypatch.setattr(loop, "release_free_memory", lambda above=None: calls.append(above) or True)
    data = _data()
    model = MLP(D, 8, N_CLASSES)
    eng, _ = _run(data, _budget(model, data, 3), rounds=2)
    assert eng.chunk_clients == 3
    # 2 rounds x (7 loss chunks + 7 training chunks) of the 20 sampled clients, each against a
    # ceiling above the resident memory when its loop started
    assert len(calls) == 2 * (7 + 7)
    assert all(c is not None and c > 0 for c in calls)
    calls.clear()
    _run(data, None, rounds=2)
    assert calls == []
