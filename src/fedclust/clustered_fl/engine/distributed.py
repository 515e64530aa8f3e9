"""Chunks of one round on other processes or machines (Ray).

A chunked round (:meth:`~fedclust.clustered_fl.engine.ClusteredFLEngine.chunked_round`) trains its
chunks of clients one after another. The local update of a chunk is a pure function of its inputs
(:func:`train_chunk`: the model, the round's cluster models and momenta, the chunk's choices, data and
minibatch draws), and so is the cluster estimate of a chunk (:func:`chunk_losses`), so both phases of
a round run anywhere while the driver keeps the server side: it draws the round's minibatch keys for
all sampled clients up front (the same stream positions as a serial round), groups the clients
(:meth:`~fedclust.clustered_fl.engine.Aggregator.begin`: a private strategy's noisy identifiers stay
here), and hands every chunk its rows.

**Workers return sums.** With a strategy whose sums split (the built-in ones,
:meth:`~fedclust.clustered_fl.engine.Aggregator.splits_sums`) a worker folds its trained chunk into
the strategy's per-cluster sums itself (:func:`train_chunk_sums`: model or delta sums, momentum sums,
a private strategy's clipped sums and clip counts) and returns those, k rows per parameter instead of
one per client; the noise is added by the driver, once, on the complete sums. The sums follow one
fixed order (:class:`~fedclust.clustered_fl.engine.aggregation.SumTree`: blocks of
:data:`~fedclust.clustered_fl.engine.aggregation.SUM_BLOCK` rows, then an aligned binary tree over the
blocks) and the engine cuts a round into chunks that are whole subtrees of it, so a chunk comes back
as one sum and the driver adds one sum per chunk; the result is the serial round's, and the whole
round's, bit for bit (on machines with the same CPU kernels; a cluster of mixed CPUs can differ in
the last bits). A memory-mapped data set (:meth:`~fedclust.clustered_fl.engine.FederatedTensors.from_npy`)
is not read by the driver at all: a chunk carries its client ids (:class:`ClientRows`) and the worker
reads the rows from the files. Other strategies get the trained models back and fold them on the driver.

* :class:`ChunkRunner`: runs the chunks in this process (the reference; the engine's serial path
  gives the same numbers);
* :class:`ProcessChunkRunner`: the chunks on local worker processes (no Ray needed);
* :class:`RayChunkRunner`: one Ray task per chunk, at most ``max_in_flight`` chunks outstanding (the
  driver's memory holds that many chunks' results, not the round's), results consumed in order.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedclust.clustered_fl.engine.aggregation import Aggregator, ClientUpdates, RoundContext, fold_sums
from fedclust.clustered_fl.engine.data import ClientRows, GatheredParams, Params
from fedclust.clustered_fl.engine.kernels import (
    client_model_losses,
    local_gradient,
    local_train,
)
from fedclust.memory import keep_large_blocks


class FixedDraws:
    """Minibatch draws given up front (rows of the round's draws for one chunk), served in order
    with the ``random(shape)`` call that :class:`~fedclust.clustered_fl.engine.kernels._Batcher` makes."""

    def __init__(self, draws: list[np.ndarray]):
        self.draws, self.j = draws, 0

    def random(self, shape):
        if self.j >= len(self.draws):
            raise RuntimeError(f"chunk asked for minibatch draw {self.j}, only {len(self.draws)} were drawn")
        out = self.draws[self.j]
        if out.shape != tuple(shape):
            raise RuntimeError(f"minibatch draw {self.j}: asked for {tuple(shape)}, have {out.shape}")
        self.j += 1
        return out


def n_draws(batch_size: int | None, local_epochs: int | None, n_max: int, steps: int, local_update: str) -> int:
    """How many ``(S, n_max)`` key draws one round's local updates take (see ``_Batcher``)."""
    if batch_size is None or batch_size >= n_max:
        return 0
    if local_update == "gradient":
        return 1
    if local_epochs is None:
        return steps
    return -(-steps // -(-n_max // batch_size))  # one permutation per local epoch


def train_chunk(
    model,
    params: Params,
    momentum: Params | None,
    chosen: torch.Tensor,
    X,
    y,
    n,
    draws,
    cfg: dict,
    threads: int | None = None,
) -> tuple[Params, Params | None]:
    """The local update of one chunk: start from the chosen cluster models (and momenta), train
    (``cfg["local_update"] == "model"``, with the :class:`LocalTraining` ``cfg["training"]``) or take
    the momentum-gradient, with the given draws. Returns
    ``(trained params, momentum)`` (Option I: ``(None, momentum)``); the driver re-gathers the start
    models itself."""
    keep_large_blocks()  # a worker's chunks reuse their blocks (in the driver: inside the round's own setting)
    if threads:
        torch.set_num_threads(int(threads))
    start = GatheredParams(params, chosen)  # copies made where read
    mom0 = {k: v.index_select(0, chosen) for k, v in momentum.items()} if momentum is not None else None
    gen = FixedDraws(draws) if draws else None
    training = cfg["training"]
    if cfg["local_update"] == "model":
        return local_train(model, start, mom0, X, y, n, training, gen=gen)
    mom = local_gradient(model, start, mom0, X, y, n, beta=training.beta, batch_size=training.batch_size, gen=gen)
    return None, mom  # Option I: the model is the start model


def chunk_losses(model, params: Params, X, y, n, max_rows: int, threads: int | None = None) -> torch.Tensor:
    """The (chunk, k) losses of every cluster model on one chunk's data (the cluster estimate)."""
    if threads:
        torch.set_num_threads(int(threads))
    return client_model_losses(model, params, X, y, n, max_rows=max_rows)[0]


def _rows(rows) -> tuple:
    """``(X, y, n)`` of a chunk: given, or read from the data set's files (:class:`ClientRows`)."""
    return rows.gather() if isinstance(rows, ClientRows) else rows


def chunk_losses_of(model, params: Params, rows, max_rows: int, threads: int | None = None) -> torch.Tensor:
    """:func:`chunk_losses` on ``rows``: the chunk's ``(X, y, n)`` or its :class:`ClientRows`."""
    keep_large_blocks()  # a worker's chunks reuse their blocks (in the driver: inside the round's own setting)
    return chunk_losses(model, params, *_rows(rows), max_rows, threads=threads)


@dataclass(frozen=True)
class ChunkInput:
    """One chunk of a round as a worker gets it: its client ids, their chosen clusters and losses,
    their training rows (``(X, y, n)`` or :class:`ClientRows`) and their rows of the round's
    minibatch keys."""

    clients: np.ndarray
    chosen: torch.Tensor
    losses: torch.Tensor
    rows: Any
    draws: list


def train_chunk_sums(
    model,
    params: Params,
    momentum: Params | None,
    aggregator: Aggregator,
    ctx: RoundContext,
    chunk_in: ChunkInput,
    cfg: dict,
    templates: list,
    threads: int | None = None,
) -> list:
    """The local update of one chunk (:func:`train_chunk`) folded here into the strategy's per-cluster
    sums (and counts of what it counts; a private strategy's clipped sums) block by block
    (:func:`~fedclust.clustered_fl.engine.aggregation.fold_sums` with the driver's ``templates``).
    Returns the chunk's pieces in order: ``("sums", subtrees)``, and for a block cut by the chunk's
    edge ``("rows", lo, hi, trained params, momentum)`` of those rows for the driver to fold."""
    keep_large_blocks()  # a worker's chunks reuse their blocks (in the driver: inside the round's own setting)
    X, y, n = _rows(chunk_in.rows)
    chosen = chunk_in.chosen
    trained, mom = train_chunk(model, params, momentum, chosen, X, y, n, chunk_in.draws, cfg, threads=threads)
    start = GatheredParams(params, chosen)  # copies made where read (a private strategy's deltas)
    chunk = ClientUpdates(
        clients=chunk_in.clients,
        chosen=chosen,
        losses=chunk_in.losses,
        start_params=start,
        params=trained if trained is not None else start,
        momentum=mom,
        n_samples=n,
    )
    out = []
    for piece in fold_sums(aggregator, chunk, templates, ctx):
        if piece[0] == "rows":
            _, lo, hi = piece
            cut = chunk.rows(lo, hi)
            mom_rows = None if cut.momentum is None else {k: v.clone() for k, v in cut.momentum.items()}
            trained_rows = None if trained is None else {k: v.clone() for k, v in cut.params.items()}
            out.append(("rows", lo, hi, trained_rows, mom_rows))
        else:
            out.append(piece)
    return out


class ChunkRunner:
    """Runs ``fn(*shared, *args)`` for every ``args`` of ``per_chunk`` in this process, in order.

    A runner may hold workers (a process pool, a Ray instance it started): :meth:`close` lets them go,
    and ``with runner:`` closes it on the way out. The engine never closes a runner it was given;
    whoever built it does."""

    name = "serial"

    def map(self, fn, shared: tuple, per_chunk: Iterable[tuple]) -> Iterator:
        for args in per_chunk:
            yield fn(*shared, *args)

    def workers(self) -> int:
        return 1

    def close(self) -> None:
        """Let the runner's workers go (nothing to do in this process)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RayChunkRunner(ChunkRunner):
    """One Ray task per chunk (1 CPU and ``threads_per_task`` torch threads each) on a local Ray
    instance (``num_cpus``) or an existing cluster (``address``). ``shared`` arguments (the model, the
    round's cluster models) go to the object store once per round; at most ``max_in_flight`` chunks
    (default twice the cluster's CPUs) are outstanding, and results are consumed in submission order.
    Ray starts when the first chunk is sent (not when the runner is built); :meth:`close` shuts down
    a Ray instance this runner started and leaves one that was running before alone."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        max_in_flight: int | None = None,
        threads_per_task: int = 1,
        init_options: dict | None = None,
    ):
        self.address, self.num_cpus = address, num_cpus
        self.max_in_flight, self.threads_per_task = max_in_flight, int(threads_per_task)
        self.init_options = dict(init_options or {})
        self._remote: dict = {}
        self._started = None  # the ray module, once this runner has started Ray

    def _ray(self):
        # Ray is optional and takes seconds to import: only a run that asks for it pays for it
        import ray

        if not ray.is_initialized():
            kw = {"include_dashboard": False, "log_to_driver": False, **self.init_options}
            if self.address:
                kw["address"] = self.address
            elif self.num_cpus:
                kw["num_cpus"] = int(self.num_cpus)
            ray.init(**kw)
            self._started = ray
        return ray

    def close(self) -> None:
        """Shut Ray down if this runner started it (a local instance, or this driver's connection to a
        cluster); the cluster itself keeps running."""
        ray, self._started = self._started, None
        self._remote = {}
        if ray is not None and ray.is_initialized():
            ray.shutdown()

    def workers(self) -> int:
        return int(self._ray().cluster_resources().get("CPU", 1))

    def map(self, fn, shared: tuple, per_chunk: Iterable[tuple]) -> Iterator:
        ray = self._ray()
        if fn not in self._remote:
            self._remote[fn] = ray.remote(num_cpus=1, max_retries=0)(fn)
        remote = self._remote[fn]
        refs = tuple(ray.put(v) for v in shared)
        window = self.max_in_flight or 2 * self.workers()
        pending: deque = deque()
        for args in per_chunk:
            pending.append(remote.remote(*refs, *args, threads=self.threads_per_task))
            if len(pending) >= window:
                yield ray.get(pending.popleft())
        while pending:
            yield ray.get(pending.popleft())


class ProcessChunkRunner(ChunkRunner):
    """The chunks on ``workers`` local processes (``concurrent.futures``, spawned once and kept for the
    run; 1 torch thread each): the same protocol as :class:`RayChunkRunner` on one machine without
    Ray. ``shared`` arguments travel with every chunk (pickled), at most ``max_in_flight`` (default
    twice the workers) chunks are outstanding, results are consumed in order."""

    name = "processes"

    def __init__(self, workers: int = 2, max_in_flight: int | None = None, threads_per_task: int = 1):
        self.n_workers, self.max_in_flight = int(workers), max_in_flight
        self.threads_per_task = int(threads_per_task)
        self._pool = None

    def workers(self) -> int:
        return self.n_workers

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def map(self, fn, shared: tuple, per_chunk: Iterable[tuple]) -> Iterator:
        if self._pool is None:
            # spawn, not fork: the parent may hold torch's thread pools
            self._pool = ProcessPoolExecutor(self.n_workers, mp_context=multiprocessing.get_context("spawn"))
        window = self.max_in_flight or 2 * self.n_workers
        pending: deque = deque()
        for args in per_chunk:
            pending.append(self._pool.submit(fn, *shared, *args, threads=self.threads_per_task))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
