"""Client data on disk, memory-mapped (``FederatedTensors.from_npy``): the engine gives the same numbers
as with the data in memory, and a round reads only the rows of the clients it samples."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from cfl_synthetic import two_group_clients

from fedclust.clustered_fl import MLP, ClusteredFLEngine, EngineConfig, FederatedTensors
from fedclust.clustered_fl.engine import ChunkRunner, bytes_per_client
from fedclust.clustered_fl.engine.data import write_client_npy

N_CLIENTS, N_MAX, D, N_CLASSES = 40, 10, 8, 3


def _data(seed=0):
    return two_group_clients(seed, N_CLIENTS, N_MAX, D, N_CLASSES, 3)


def _mapped_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_npy_round_trip_is_memory_mapped(tmp_path):
    data = _data()
    data.to_npy(tmp_path, block_clients=7)  # blocks that do not divide the clients
    m = FederatedTensors.from_npy(tmp_path)
    assert m.memory_mapped and not data.memory_mapped
    for f in ("X_train", "y_train", "n_train", "X_test", "y_test", "n_test"):
        assert torch.equal(getattr(m, f), getattr(data, f)), f
    np.testing.assert_array_equal(m.group, data.group)
    np.testing.assert_array_equal(m.test_group, data.test_group)
    # a view of the file, not a copy: a change of the file shows through the opened tensor
    mm = np.load(tmp_path / "X_train.npy", mmap_mode="r+")
    mm[3, 1, 2] = 123.0
    mm.flush()
    assert float(m.X_train[3, 1, 2]) == 123.0


@pytest.mark.parametrize("runner", [None, ChunkRunner()], ids=["serial", "runner"])
def test_memory_mapped_run_equals_in_memory_run_bit_for_bit(tmp_path, runner):
    data = _data(1)
    data.to_npy(tmp_path)
    model = MLP(D, 6, N_CLASSES)
    mb = 4.5 * bytes_per_client(model, model.init(2, 0), N_MAX, D, beta=0.5, batch_size=3) / 2**20
    kw = dict(
        rounds=3,
        lr=0.3,
        beta=0.5,
        local_steps=3,
        batch_size=3,
        participation=0.5,
        seed=4,
        eval_every=1,
        max_chunk_mb=mb,
        chunk_runner=runner,
    )
    a = ClusteredFLEngine(data, MLP(D, 6, N_CLASSES), EngineConfig(k=2, **kw)).run()
    b = ClusteredFLEngine(FederatedTensors.from_npy(tmp_path), MLP(D, 6, N_CLASSES), EngineConfig(k=2, **kw)).run()
    assert a.info["chunks_per_round"] == b.info["chunks_per_round"] > 1
    for n in a.params:
        assert torch.equal(a.params[n], b.params[n]), n
        assert torch.equal(a.momentum[n], b.momentum[n]), n
    np.testing.assert_array_equal(a.assignment, b.assignment)
    assert a.history == b.history


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc/self/smaps")
def test_a_round_reads_only_the_sampled_clients_rows(tmp_path):
    # 31 kB of X per client, a 125 MB file; the kernel maps file pages in folios of up to 2 MB, so
    # S clients map at most about 2 * S * 2 MB
    n, n_max, d, S = 4000, 10, 784, 4
    rng = np.random.default_rng(0)

    def blocks():
        for _ in range(0, n, 1000):
            yield {
                "X_train": rng.random((1000, n_max, d), dtype=np.float32),
                "y_train": rng.integers(0, N_CLASSES, (1000, n_max)),
                "n_train": np.full(1000, n_max),
            }

    write_client_npy(tmp_path, n, blocks())
    path = (tmp_path / "X_train.npy").resolve()
    data = FederatedTensors.from_npy(tmp_path)
    file_kb = path.stat().st_size // 1024
    assert _mapped_kb(path) < file_kb // 100  # opening reads nothing (no whole-array check or copy)
    eng = ClusteredFLEngine(
        data,
        MLP(d, 8, N_CLASSES),
        EngineConfig(k=2, clients_per_round=S, local_steps=2, batch_size=5, max_chunk_mb=0.5),
    )
    st, upd, _ = eng.step(eng.init_state())
    assert eng.chunk_clients < S  # a chunked round: every chunk gathers its own rows
    # the S sampled clients' rows (plus the pages the kernel maps around each fault), not the file
    assert 0 < _mapped_kb(path) <= 2 * S * 2048 < file_kb // 3
    assert len(upd.clients) == S


def test_non_finite_rows_are_caught_when_their_client_is_gathered(tmp_path):
    data = _data()
    X = data.X_train.clone()
    X[5, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        FederatedTensors(X_train=X, y_train=data.y_train, n_train=data.n_train)
    write_client_npy(tmp_path, N_CLIENTS, [{"X_train": X, "y_train": data.y_train, "n_train": data.n_train}])
    m = FederatedTensors.from_npy(tmp_path)  # opening does not read the rows
    eng = ClusteredFLEngine(m, MLP(D, 6, N_CLASSES), EngineConfig(k=2, participation=1.0))
    eng.init_state()
    eng.client_data(np.array([0, 1, 2]))  # clean rows
    with pytest.raises(ValueError, match="NaN or infinite"):
        eng.client_data(np.array([4, 5]))


def test_writer_checks_its_blocks(tmp_path):
    X = np.zeros((4, 3, 2), dtype=np.float32)
    y = np.zeros((4, 3), dtype=np.int64)
    n = np.full(4, 3)
    with pytest.raises(ValueError, match="hold 4 clients, expected n_clients=5"):
        write_client_npy(tmp_path, 5, [{"X_train": X, "y_train": y, "n_train": n}])
    with pytest.raises(ValueError, match="more than n_clients=6"):
        write_client_npy(tmp_path, 6, [{"X_train": X, "y_train": y, "n_train": n}] * 2)
    with pytest.raises(ValueError, match="X_train: block of shape"):
        write_client_npy(
            tmp_path,
            8,
            [{"X_train": X, "y_train": y, "n_train": n}, {"X_train": X[:, :, :1], "y_train": y, "n_train": n}],
        )
    with pytest.raises(ValueError, match="same number of clients"):
        write_client_npy(tmp_path, 4, [{"X_train": X, "y_train": y[:3], "n_train": n}])
    with pytest.raises(ValueError, match="unknown fields"):
        write_client_npy(tmp_path, 4, [{"X_train": X, "labels": y}])
