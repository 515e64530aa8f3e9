"""Sums in a fixed order: a round's rows are summed in blocks of ``SUM_BLOCK`` and the blocks along one
binary tree, so the whole round, chunked rounds of any size and chunks whose workers return per-cluster
sums (``train_chunk_sums``) give the same models bit for bit, for every built-in strategy (model and
gradient averaging, RR-Cluster's clipped and noised sums)."""

from __future__ import annotations

import pytest
import torch
from cfl_synthetic import two_group_clients

from fedclust.clustered_fl import (
    MLP,
    ClusteredFLEngine,
    EngineConfig,
    FederatedTensors,
    GradientAveraging,
    rr_cluster,
)
from fedclust.clustered_fl.engine import ChunkRunner, ProcessChunkRunner, RayChunkRunner
from fedclust.clustered_fl.engine.aggregation import (
    SUM_BLOCK,
    Aggregator,
    ModelAveraging,
    SumTree,
    block_pieces,
    chunk_size,
)

N_CLIENTS, N_MAX, D, N_CLASSES = 100, 8, 6, 3  # a round of 100 clients: blocks of 32, 32, 32 and 4


def _data():
    return two_group_clients(7, N_CLIENTS, N_MAX, D, N_CLASSES, 2)


class _Recording(ChunkRunner):
    """The in-process runner that keeps what every chunk sent back."""

    def __init__(self):
        self.returned = []

    def map(self, fn, shared, per_chunk):
        for out in super().map(fn, shared, per_chunk):
            self.returned.append(out)
            yield out


def _engine_cls(chunk):
    class _Fixed(ClusteredFLEngine):
        def _set_chunk(self, params):  # a chunk size that is not a whole subtree, to cut blocks
            super()._set_chunk(params)
            if chunk is not None:
                self.chunk_clients = chunk

    return _Fixed


COMMON = {"rounds": 2, "lr": 0.3, "local_steps": 2, "participation": 1.0, "seed": 3, "device": "cpu"}
RELEASE = rr_cluster.ReleaseSettings(sigma_s=1.0, sigma_theta=0.8, clip=0.2)
CASES = {
    "momentum_minibatch": lambda d, cls, **kw: cls(
        d, MLP(D, 5, N_CLASSES), EngineConfig(k=2, beta=0.6, batch_size=3, **kw)
    ).run(),
    "option_I": lambda d, cls, **kw: cls(
        d, MLP(D, 5, N_CLASSES), EngineConfig(k=2, local_update="gradient", aggregator=GradientAveraging(), **kw)
    ).run(),
    "rr_cluster": lambda d, cls, **kw: rr_cluster.build_engine(
        d, MLP(D, 5, N_CLASSES), EngineConfig(k=2, batch_size=3, **kw), RELEASE, B=3, engine_cls=cls
    ).run(),
}


@pytest.mark.parametrize("chunk,runner", [(3, None), (3, "runner"), (48, "runner"), (64, None), (64, "runner")])
@pytest.mark.parametrize("case", list(CASES))
def test_whole_chunked_and_worker_sums_are_bit_identical(case, chunk, runner):
    data = _data()
    whole = CASES[case](data, _engine_cls(None), **COMMON)
    rec = _Recording() if runner else None
    other = CASES[case](data, _engine_cls(chunk), chunk_runner=rec, **COMMON)
    assert whole.info["chunks_per_round"] == 1 and other.info["chunks_per_round"] == -(-N_CLIENTS // chunk)
    for n in whole.params:
        assert torch.equal(whole.params[n], other.params[n]), n
        assert torch.equal(whole.momentum[n], other.momentum[n]), n
    assert whole.history == other.history
    if rec is not None and chunk == 64:
        # chunks of two aligned blocks: every chunk returns ONE per-cluster sum and no model
        trained = [out for out in rec.returned if isinstance(out, list)]
        assert len(trained) == 2 * COMMON["rounds"]
        for pieces in trained:
            assert [p[0] for p in pieces] == ["sums"] and len(pieces[0][1]) == 1
            sums = pieces[0][1][0][2]["sums"] or pieces[0][1][0][2]["mom"]
            assert all(v.shape[0] == 2 for v in sums.values())  # k rows, not one per client


class _RowByRow(Aggregator):
    """A chunk-capable strategy without split sums (the protocol of a third-party strategy): model
    averaging, its rows added one after another."""

    def __init__(self):
        self.inner = ModelAveraging()

    def supports_chunks(self):
        return True

    def __call__(self, state, updates, ctx):
        return self._fold(state, updates, ctx)

    def begin(self, state, updates, ctx):
        return self.inner.begin(state, updates, ctx)

    def accumulate(self, acc, chunk, rows, ctx):
        self.inner.accumulate(acc, chunk, rows, ctx)

    def end(self, state, acc, ctx):
        return self.inner.end(state, acc, ctx)


def test_a_strategy_without_split_sums_gets_the_models_back_row_by_row():
    data = _data()
    runs = {}
    for name, (chunk, rec) in {"whole": (None, None), "serial": (48, None), "runner": (48, _Recording())}.items():
        eng = _engine_cls(chunk)(
            data, MLP(D, 5, N_CLASSES), EngineConfig(k=2, aggregator=_RowByRow(), chunk_runner=rec, **COMMON)
        )
        runs[name] = (eng.run(), rec)
    (whole, _), (serial, _), (remote, rec) = runs.values()
    for n in whole.params:  # row by row in every case: the same order, so the same bits
        assert torch.equal(whole.params[n], serial.params[n]) and torch.equal(whole.params[n], remote.params[n]), n
    trained = [out for out in rec.returned if isinstance(out, tuple)]
    assert len(trained) == 3 * COMMON["rounds"]  # the workers returned each chunk's models
    assert all(out[0]["0.weight"].shape[0] in (48, 4) for out in trained)


def test_worker_sums_read_memory_mapped_rows_themselves(tmp_path):
    data = _data()
    data.to_npy(tmp_path)
    kw = {**COMMON, "beta": 0.6, "batch_size": 3}
    a = _engine_cls(64)(data, MLP(D, 5, N_CLASSES), EngineConfig(k=2, chunk_runner=ChunkRunner(), **kw)).run()
    b = _engine_cls(64)(
        FederatedTensors.from_npy(tmp_path), MLP(D, 5, N_CLASSES), EngineConfig(k=2, chunk_runner=ChunkRunner(), **kw)
    )
    sent = []
    orig = b._worker_rows
    b._worker_rows = lambda clients: sent.append(orig(clients)) or sent[-1]
    b = b.run()
    assert sent and all(type(s).__name__ == "ClientRows" for s in sent)  # ids, not rows
    for n in a.params:
        assert torch.equal(a.params[n], b.params[n]), n


def test_sum_tree_adds_along_one_tree_whatever_the_grouping():
    # values where float32 addition order shows: 6 + 1e8 rounds to 1e8 + 8, 1e8 - 1e8 is exact
    vals = [3.0, 3.0, 1e8, -1e8, 1.0, 3.0, 1.0]
    agg = ModelAveraging()

    def part(v):
        return {"g": torch.zeros(1, dtype=torch.long), "sums": {"w": torch.tensor([v], dtype=torch.float32)}}

    def tree_of(groups):
        t = SumTree(agg)
        first = 0
        for g in groups:  # a group of 2^m aligned blocks, summed first (as a worker does)
            sub = SumTree(agg)
            for j in range(g):
                sub.push(0, first + j, part(vals[first + j]))
            t.extend(sub.stack)
            first += g
        return float(t.result()["sums"]["w"][0])

    f = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    b = [f(v) for v in vals]
    expected = float(((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + b[6]))
    got = {tree_of(gs) for gs in ([1] * 7, [2, 2, 2, 1], [4, 2, 1], [4, 3], [2, 1, 1, 2, 1])}
    assert got == {expected}
    assert expected != float(sum(b[1:], b[0]))  # the row-by-row order gives other bits here


def test_block_pieces_and_chunk_size():
    assert block_pieces(0, 100, 100) == [(0, 32, True), (32, 64, True), (64, 96, True), (96, 100, True)]
    assert block_pieces(30, 70, 100) == [(30, 32, False), (32, 64, True), (64, 70, False)]
    assert [chunk_size(c) for c in (1, 3, 31, 32, 63, 64, 158, 1000)] == [1, 3, 31, 32, 32, 64, 128, 512]
    assert SUM_BLOCK == 32


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["processes", "ray"])
def test_worker_processes_and_ray_return_the_serial_sums_bit_for_bit(backend):
    if backend == "ray":
        ray = pytest.importorskip("ray")
        runner = RayChunkRunner(num_cpus=2, max_in_flight=2)
    else:
        runner = ProcessChunkRunner(2)
    data = _data()
    try:
        for case in ("momentum_minibatch", "rr_cluster"):
            whole = CASES[case](data, _engine_cls(None), **COMMON)
            other = CASES[case](data, _engine_cls(64), chunk_runner=runner, **COMMON)
            for n in whole.params:
                assert torch.equal(whole.params[n], other.params[n]), (case, n)
            assert whole.history == other.history
    finally:
        if backend == "ray":
            ray.shutdown()
        else:
            runner.close()
