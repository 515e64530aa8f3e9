"""``<method>.train.chunk_runner``: a single registry run of a clustered-FL method trains the chunks of
its rounds on the runner the parameter names, built when the run starts and closed when it ends, and
gets the serial run's models bit for bit; a bad spec is refused in one line naming the key."""

from __future__ import annotations

import pytest
import torch
from sklearn.datasets import load_digits

from fedclust.clustered_fl import options as cfl_options
from fedclust.clustered_fl.engine import ChunkRunner, bytes_per_client
from fedclust.params_check import ParameterError
from fedclust.partition.rotation import rotation
from fedclust.registry import REGISTRY
from fedclust.registry.helpers import tensors_and_model

MODEL = {"type": "mlp", "hidden": 8}


@pytest.fixture(scope="module")
def rotated():
    d = load_digits()
    return rotation(
        d.images / 16.0, d.target, n_groups=2, n_clients=12, samples_per_client=10, test_per_client=5, seed=0
    )


@pytest.fixture(scope="module")
def chunk_mb(rotated):
    """A budget of about two clients per chunk: the 6 clients of a round train in several chunks."""
    data, model = tensors_and_model(rotated, MODEL)
    per_client = bytes_per_client(model, model.init(1, 0), int(data.n_train.max()), data.d, batch_size=4)
    return 2.5 * per_client / 2**20


def _run(rotated, method="ifca", **train):
    spec = REGISTRY[method]
    cfg = spec.config_from({"rounds": 3, "participation": 0.5, "eval_every": 1, "model": MODEL, **train})
    return spec.run(rotated, spec.calibrate({"epsilon": None, "delta": 1e-3}, cfg, rotated), cfg, 1)


def _assert_identical(a, b):
    assert a.info["chunks_per_round"] == b.info["chunks_per_round"] > 1  # the rounds were chunked
    assert a.params.keys() == b.params.keys()
    for name in a.params:
        assert torch.equal(a.params[name], b.params[name]), name
        assert torch.equal(a.momentum[name], b.momentum[name]), name
    assert a.history.keys() == b.history.keys()
    for key in a.history:
        assert a.history[key] == b.history[key], key


class _Spy(ChunkRunner):
    """An in-process runner that records what the run did with it."""

    made: list = []
    fail = False

    def __init__(self, workers=2, max_in_flight=None, threads_per_task=1):
        self.settings = {"workers": workers, "max_in_flight": max_in_flight, "threads_per_task": threads_per_task}
        self.calls, self.closed = 0, 0
        _Spy.made.append(self)

    def map(self, fn, shared, per_chunk):
        for out in super().map(fn, shared, per_chunk):
            self.calls += 1
            if self.fail:
                raise RuntimeError("a worker died")
            yield out

    def close(self):
        self.closed += 1


@pytest.fixture
def spy(monkeypatch):
    _Spy.made = []
    monkeypatch.setitem(cfl_options.CHUNK_RUNNERS, "processes", (cfl_options.ProcessRunnerOptions, _Spy))
    return _Spy


def test_the_run_trains_its_chunks_on_the_runner_it_builds_and_closes_it(rotated, chunk_mb, spy):
    serial = _run(rotated, max_chunk_mb=chunk_mb)
    spread = _run(rotated, max_chunk_mb=chunk_mb, chunk_runner={"kind": "processes", "workers": 3})
    (runner,) = spy.made
    assert runner.settings == {"workers": 3, "max_in_flight": None, "threads_per_task": 1}
    # two passes per round (cluster estimate, training), one task per chunk
    assert runner.calls == 2 * 3 * spread.info["chunks_per_round"]
    assert runner.closed == 1
    _assert_identical(serial, spread)
    assert serial.info["chunk_runner"] == "serial"
    assert spread.info["chunk_runner"] == "processes(workers=3)"


def test_the_runner_is_closed_when_the_run_fails(rotated, chunk_mb, spy, monkeypatch):
    monkeypatch.setattr(_Spy, "fail", True)
    with pytest.raises(RuntimeError, match="a worker died"):
        _run(rotated, max_chunk_mb=chunk_mb, chunk_runner={"kind": "processes"})
    assert [r.closed for r in spy.made] == [1]


def test_a_private_rr_cluster_run_on_the_runner_equals_the_serial_run(rotated, chunk_mb, spy):
    # the identifier noise, the rebalancing and the model noise stay on the driver; the workers return
    # clipped per-cluster sums and clip counts
    def run(**train):
        spec = REGISTRY["rr_cluster"]
        cfg = spec.config_from({"rounds": 2, "participation": 0.5, "B": 1, "max_chunk_mb": chunk_mb, **train})
        noise = spec.calibrate({"epsilon": 8.0, "delta": 1e-3}, cfg, rotated)
        assert noise["private"] and noise["sigma_theta"] > 0
        return spec.run(rotated, noise, cfg, 2)

    a = run()
    b = run(chunk_runner={"kind": "processes", "workers": 2})
    (runner,) = spy.made
    assert runner.calls > 0 and runner.closed == 1
    assert a.info["chunks_per_round"] == b.info["chunks_per_round"] > 1
    for name in a.params:
        assert torch.equal(a.params[name], b.params[name]), name
    assert a.history["n_clipped"] == b.history["n_clipped"]
    assert [e.__dict__ for e in a.dp_events] == [e.__dict__ for e in b.dp_events]
    assert b.info["chunk_runner"] == "processes(workers=2)"


def test_a_runner_with_nothing_to_spread_says_so(rotated, spy, caplog):
    # the default chunk budget holds a tiny round in one chunk, which trains in the driver
    with caplog.at_level("WARNING", logger="fedclust.registry.clustered_fl"):
        res = _run(rotated, chunk_runner={"kind": "processes"})
    assert res.info["chunks_per_round"] == 1
    assert [(r.closed, r.calls) for r in spy.made] == [(1, 0)]
    assert "ifca.train.chunk_runner: every round fit in one chunk" in caplog.text


@pytest.mark.parametrize(
    "method, train, message",
    [
        (
            "ifca",
            {"chunk_runner": {"kind": "threads"}},
            "ifca.train.chunk_runner.kind must be one of ['serial', 'processes', 'ray'], got 'threads'",
        ),
        (
            "cfl_mgd",
            {"chunk_runner": {"kind": "processes", "workers": 0}},
            "cfl_mgd.train.chunk_runner.workers must be null (the default) or an integer >= 1, got 0",
        ),
        (
            "fedavg",
            {"chunk_runner": {"kind": "processes", "workers": 2}, "device": "cuda"},
            "fedavg.train.chunk_runner trains the chunks on CPU workers: it needs fedavg.train.device=cpu, got 'cuda'",
        ),
        (
            "ifca",
            {"chunk_runner": {"kind": "processes", "address": "auto"}},
            "unknown parameter 'ifca.train.chunk_runner.address' (valid keys: max_in_flight, threads_per_task, "
            "workers)",
        ),
        (
            "rr_cluster",
            {"chunk_runner": {"workers": 2}},
            "rr_cluster.train.chunk_runner needs a kind: one of ['serial', 'processes', 'ray'] "
            "(or chunk_runner: null, serial)",
        ),
    ],
)
def test_a_bad_spec_is_refused_in_one_line(method, train, message):
    with pytest.raises(ParameterError) as err:
        REGISTRY[method].config_from(train)
    assert str(err.value) == f"invalid parameter: {message}"


def test_null_and_serial_build_no_runner():
    assert REGISTRY["ifca"].config().chunk_runner is None  # the default: the engine's own serial chunks
    assert cfl_options.make_chunk_runner(None) is None
    assert cfl_options.make_chunk_runner({"kind": "serial"}) is None
    runner = cfl_options.make_chunk_runner({"kind": "ray", "address": "auto", "num_cpus": 3})
    assert (runner.address, runner.num_cpus, runner._started) == ("auto", 3, None)  # Ray starts with the first chunk
    runner.close()


@pytest.mark.slow
def test_worker_processes_give_the_serial_run_bit_for_bit(rotated, chunk_mb):
    """Two spawned worker processes (a few seconds: each imports torch)."""
    train = {"max_chunk_mb": chunk_mb, "beta": 0.5, "batch_size": 4}
    serial = _run(rotated, "cfl_mgd", **train)
    spread = _run(rotated, "cfl_mgd", **train, chunk_runner={"kind": "processes", "workers": 2})
    _assert_identical(serial, spread)
    assert spread.info["chunk_runner"] == "processes(workers=2)"


@pytest.mark.slow
def test_a_local_ray_instance_gives_the_serial_run_and_is_shut_down(rotated, chunk_mb):
    """Starts a local Ray instance of 2 CPUs (tens of seconds)."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    serial = _run(rotated, max_chunk_mb=chunk_mb)
    try:
        spread = _run(rotated, max_chunk_mb=chunk_mb, chunk_runner={"kind": "ray", "num_cpus": 2})
        assert not ray.is_initialized()  # the runner started it, the run's end shut it down
    finally:
        ray.shutdown()
    _assert_identical(serial, spread)
    assert spread.info["chunk_runner"] == "ray(num_cpus=2)"
