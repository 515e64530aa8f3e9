"""The engine loop: :class:`ClusteredFLEngine` (validation, init, client sampling, one round whole or
in chunks, evaluation records) and :func:`run_clustered_fl`."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedclust.clustered_fl.engine.aggregation import (
    Aggregation,
    Aggregator,
    BlockFold,
    ClientUpdates,
    GradientAveraging,
    ModelAveraging,
    RoundContext,
    ServerState,
    chunk_size,
)
from fedclust.clustered_fl.engine.config import EngineConfig
from fedclust.clustered_fl.engine.data import ClientRows, FederatedTensors, GatheredParams, Params, gather_train
from fedclust.clustered_fl.engine.distributed import (
    ChunkInput,
    ChunkRunner,
    chunk_losses_of,
    n_draws,
    train_chunk,
    train_chunk_sums,
)
from fedclust.clustered_fl.engine.evaluation import ClusteredFLResult
from fedclust.clustered_fl.engine.kernels import (
    DEFAULT_CHUNK_MB,
    LocalTraining,
    _DrawTape,
    assign_clusters,
    bytes_per_client,
    client_model_losses,
    local_gradient,
    local_train,
    segment_counts,
)
from fedclust.clustered_fl.models import BatchedModel
from fedclust.memory import large_blocks_kept, release_free_memory, resident_bytes
from fedclust.metrics import client_clustering_scores
from fedclust.progress import report as report_round
from fedclust.rng import stream

logger = logging.getLogger(__name__)


_OPTIONS = {"model": "model", "ii": "model", "II": "model", "gradient": "gradient", "i": "gradient", "I": "gradient"}


def _num(name, v, lo=None, hi=None, lo_open=False, hi_open=False, integer=False):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {v!r}")
    if integer and int(v) != v:
        raise ValueError(f"{name} must be an integer, got {v!r}")
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    bad = (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and (v >= hi if hi_open else v > hi))
    if bad:
        rng = f"{'(' if lo_open else '['}{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}{')' if hi_open else ']'}"
        raise ValueError(f"{name} must be in {rng}, got {v!r}")
    return int(v) if integer else float(v)


@dataclass(frozen=True)
class _RemoteRound:
    """What the chunks of one round trained by a ``chunk_runner`` share: the round's state, clients,
    choices, losses and minibatch keys, the local training settings and the chunks' row slices."""

    state: ServerState
    clients: np.ndarray
    chosen: torch.Tensor
    losses: torch.Tensor
    n_train: torch.Tensor
    draws: list
    settings: dict
    slices: list

    def updates_of(self, rows: slice, params, mom) -> ClientUpdates:
        """The driver's :class:`ClientUpdates` of ``rows`` from their trained models (or None)."""
        ch = self.chosen[rows]
        start = GatheredParams(self.state.params, ch)
        n = self.n_train[torch.as_tensor(self.clients[rows], dtype=torch.long)]
        return ClientUpdates(
            clients=self.clients[rows],
            chosen=ch,
            losses=self.losses[rows],
            start_params=start,
            params=params if params is not None else start,
            momentum=mom,
            n_samples=n,
        )


def _check_data_and_model(data, model) -> None:
    """A :class:`FederatedTensors` and a :class:`BatchedModel` whose inputs match its dimension."""
    if not isinstance(data, FederatedTensors):
        raise ValueError(f"data must be a FederatedTensors, got {type(data).__name__}")
    if not isinstance(model, BatchedModel):
        raise ValueError(f"model must be a BatchedModel, got {type(model).__name__}")
    if model.n_inputs != data.d:
        raise ValueError(f"model expects {model.n_inputs} input features but the data have d={data.d}")


class ClusteredFLEngine:
    """Configured clustered-FL run on one data set; see the package docstring for a round.

    ``ClusteredFLEngine(data, model, config)``: ``data`` a :class:`FederatedTensors`, ``model`` a
    :class:`~fedclust.clustered_fl.models.BatchedModel` whose inputs match the data, ``config`` an
    :class:`~fedclust.clustered_fl.engine.config.EngineConfig` (every setting and its meaning). The
    settings are validated up front, in stages (schedule, local update, sampling, initialisation,
    evaluation, execution); every error names the setting. The validated values are attributes of the
    engine (``k``, ``rounds``, ``lr``, ``S`` the clients per round, ``device``...), ``config`` the
    settings as given.
    """

    def __init__(self, data: FederatedTensors, model: BatchedModel, config: EngineConfig):
        if not isinstance(config, EngineConfig):
            raise ValueError(f"config must be an EngineConfig (e.g. EngineConfig(k=2)), got {type(config).__name__}")
        _check_data_and_model(data, model)
        self.config = config
        self._set_schedule(config)
        self._set_local_update(config, data)
        self._set_sampling(config, data.n_clients)
        self._set_aggregator(config)
        self._set_init(config)
        self._set_evaluation(config)
        self._set_execution(config)
        self._device_train: tuple | None = None  # (X, y, n) on the GPU, or () when they stay on the host
        self.chunk_clients: int | None = None  # set by init_state from the budget and the model size
        self._warned_unbounded = False
        self.data, self.model, self.method, self.progress = data, model, config.method, config.progress
        self.rngs = {name: stream(self.seed, name) for name in ("init", "sampling", "minibatch", "noise")}
        self.dp_events: list = []
        self.timing = {"assign": 0.0, "local": 0.0, "aggregate": 0.0, "eval": 0.0}
        self.n_local_samples = 0  # sum over rounds and steps of the samples processed in local training

    def _set_schedule(self, c: EngineConfig) -> None:
        """Validated k, rounds, learning rate, its decay and the momentum."""
        self.k = _num("k", c.k, 1, integer=True)
        self.rounds = _num("rounds", c.rounds, 1, integer=True)
        self.lr = _num("lr", c.lr, 0, lo_open=True)
        self.lr_decay = _num("lr_decay", c.lr_decay, 0, 1, lo_open=True)
        self.beta = _num("beta", c.beta, 0, 1, hi_open=True)

    def _set_local_update(self, c: EngineConfig, data: FederatedTensors) -> None:
        """Validated local update option, local steps, batch size and epochs (epochs set the steps)."""
        if c.local_update not in _OPTIONS:
            raise ValueError(
                f"local_update must be one of 'model' (Option II) or 'gradient' (Option I), got {c.local_update!r}"
            )
        self.local_update = _OPTIONS[c.local_update]
        self.local_steps = _num("local_steps", c.local_steps, 1, integer=True)
        self.batch_size = None if c.batch_size is None else _num("batch_size", c.batch_size, 1, integer=True)
        self.local_epochs = None if c.local_epochs is None else _num("local_epochs", c.local_epochs, 1, integer=True)
        if self.local_epochs is not None:
            if self.batch_size is None:
                raise ValueError("local_epochs needs a batch_size (minibatches per epoch)")
            self.local_steps = self.local_epochs * math.ceil(int(data.X_train.shape[1]) / self.batch_size)

    def _set_sampling(self, c: EngineConfig, N: int) -> None:
        """Validated clients per round ``S``, the participation rate and the sampling scheme."""
        if c.clients_per_round is not None:
            self.S = _num("clients_per_round", c.clients_per_round, 1, N, integer=True)
        else:
            q = _num("participation", c.participation, 0, 1, lo_open=True)
            self.S = max(1, int(round(q * N)))
        self.participation = self.S / N
        if c.sampling not in ("fixed", "poisson"):
            raise ValueError(f"sampling must be 'fixed' or 'poisson', got {c.sampling!r}")
        if c.sampling == "poisson" and c.clients_per_round is not None:
            raise ValueError("sampling='poisson' takes participation (the rate q), not clients_per_round")
        self.sampling = c.sampling
        if self.k > self.S and c.init_min_fraction is not None:
            raise ValueError(f"init_min_fraction needs k <= clients per round ({self.S}), got k={self.k}")

    def _set_aggregator(self, c: EngineConfig) -> None:
        """The server strategy: the given one, else the default of the local update option."""
        aggregator = c.aggregator
        if aggregator is None:
            aggregator = GradientAveraging() if self.local_update == "gradient" else ModelAveraging()
        if not isinstance(aggregator, Aggregator):
            raise ValueError(f"aggregator must be an Aggregator, got {type(aggregator).__name__}")
        self.aggregator = aggregator

    def _set_init(self, c: EngineConfig) -> None:
        """Validated seed, given initial tensors and IFCA's restart heuristic settings."""
        self.seed = _num("seed", c.seed, 0, integer=True)
        init_min_fraction = c.init_min_fraction
        if init_min_fraction is not None:
            init_min_fraction = _num("init_min_fraction", init_min_fraction, 0, 1.0 / self.k, lo_open=True)
        self.init_min_fraction = init_min_fraction
        self.init_max_restarts = _num("init_max_restarts", c.init_max_restarts, 0, integer=True)
        self.init_params, self.init_momentum = c.init_params, c.init_momentum

    def _set_evaluation(self, c: EngineConfig) -> None:
        """Validated evaluation cadence, train-side and test-side selection and block rows."""
        self.eval_every = _num("eval_every", c.eval_every, 0, integer=True)
        if c.train_eval not in ("sampled", "all"):
            raise ValueError(f"train_eval must be 'sampled' or 'all', got {c.train_eval!r}")
        if c.test_select not in ("test", "train"):
            raise ValueError(f"test_select must be 'test' or 'train', got {c.test_select!r}")
        self.train_eval, self.test_select = c.train_eval, c.test_select
        self.max_rows = _num("max_rows", c.max_rows, 1, integer=True)

    def _set_execution(self, c: EngineConfig) -> None:
        """Validated chunk budget, client blocks, device, chunk runner, deferral and evaluator."""
        self.max_chunk_mb = (
            DEFAULT_CHUNK_MB if c.max_chunk_mb is None else _num("max_chunk_mb", c.max_chunk_mb, 0, lo_open=True)
        )
        self.client_block = None if c.client_block is None else _num("client_block", c.client_block, 1, integer=True)
        self.device = resolve_device(c.device)
        if c.chunk_runner is not None and not isinstance(c.chunk_runner, ChunkRunner):
            raise ValueError(
                f"chunk_runner must be a ChunkRunner (e.g. RayChunkRunner()), got {type(c.chunk_runner).__name__}"
            )
        if c.chunk_runner is not None and self.device.type != "cpu":
            raise ValueError("chunk_runner sends chunks to CPU workers: use device='cpu' with it")
        self.chunk_runner = c.chunk_runner
        self.defer_updates = bool(c.defer_updates)
        if not callable(c.evaluator):
            raise ValueError(f"evaluator must be callable (like engine.evaluate), got {c.evaluator!r}")
        self.evaluator = c.evaluator

    # --------------------------------------------------------------------------------------------
    def _check_stacked(self, name, p: Params, like: Params | None = None) -> Params:
        if not isinstance(p, dict) or not p:
            raise ValueError(f"{name} must be a non-empty dict of stacked tensors")
        out = {}
        for n, v in p.items():
            v = torch.as_tensor(v, dtype=self.data.X_train.dtype).clone()
            if v.shape[0] != self.k:
                raise ValueError(f"{name}[{n!r}] must have k={self.k} rows, got shape {tuple(v.shape)}")
            if like is not None and (n not in like or like[n].shape != v.shape):
                raise ValueError(f"{name}[{n!r}] does not match the parameter shapes")
            out[n] = v
        if like is not None and set(out) != set(like):
            raise ValueError(f"{name} must have the same names as the parameters")
        return out

    def init_state(self) -> ServerState:
        """k independent random inits (stream "init"), optionally IFCA's restart heuristic."""
        dt = self.data.X_train.dtype
        info = {"init_restarts": 0, "init_min_fraction_reached": None}
        if self.init_params is not None:
            params = self._check_stacked("init_params", self.init_params)
        else:
            rng = self.rngs["init"]
            best, best_frac = None, -1.0
            for attempt in range(self.init_max_restarts + 1):
                params = self.model.init(self.k, rng, dtype=dt)
                if self.init_min_fraction is None:
                    break
                idx = np.sort(rng.choice(self.data.n_clients, self.S, replace=False))
                losses = self._losses(params, idx)
                frac = float(segment_counts(assign_clusters(losses), self.k).min()) / self.S
                if frac > best_frac:
                    best, best_frac = params, frac
                info["init_restarts"] = attempt
                if frac >= self.init_min_fraction:
                    break
            else:
                logger.warning(
                    "IFCA restart heuristic: no init reached min fraction %.3f in %d redraws "
                    "(best %.3f); using the best",
                    self.init_min_fraction,
                    self.init_max_restarts,
                    best_frac,
                )
            if self.init_min_fraction is not None:
                params = best
                info["init_min_fraction_reached"] = best_frac
        if self.init_momentum is not None:
            momentum = self._check_stacked("init_momentum", self.init_momentum, params)
        else:
            momentum = {n: torch.zeros_like(v) for n, v in params.items()}
        params = {n: v.to(self.device) for n, v in params.items()}
        momentum = {n: v.to(self.device) for n, v in momentum.items()}
        self.init_info = info
        self._set_chunk(params)
        return ServerState(params=params, momentum=momentum, round=0)

    def _set_chunk(self, params: Params) -> None:
        per = bytes_per_client(
            self.model,
            params,
            int(self.data.X_train.shape[1]),
            self.data.d,
            beta=self.beta,
            batch_size=self.batch_size,
            extra_copies=getattr(self.aggregator, "working_copies", 0),
        )
        self.bytes_per_client = per
        # cut to a whole subtree of the summation tree (aggregation.chunk_size): a worker then returns
        # one sum per chunk
        self.chunk_clients = chunk_size(max(1, int(self.max_chunk_mb * 2**20 // per)))

    def _memory_ceiling(self) -> int | None:
        """Resident bytes past which a chunk loop hands freed memory back: the resident memory when the
        loop starts plus a quarter of a chunk budget (None where it cannot be read). Below it, freed
        memory stays for the next chunk to reuse without page faults; above it, the allocator holds
        more than the chunks need (:func:`fedclust.memory.release_free_memory`). A round's peak is
        then about its start, one chunk's working set and this quarter budget."""
        rss = resident_bytes()
        return None if rss is None else rss + int(self.max_chunk_mb * 2**20 / 4)

    def _losses(self, params: Params, clients: np.ndarray) -> torch.Tensor:
        """(len(clients), k) losses of every model on the given clients, gathering their data one chunk
        of ``chunk_clients`` at a time (the gathered copy of a round's data stays bounded)."""
        if self.chunk_clients is None:
            self._set_chunk(params)
        d, step = self.data, self.chunk_clients
        ceiling = self._memory_ceiling()
        out = []
        for a in range(0, len(clients), step):
            out.append(
                client_model_losses(
                    self.model, params, *self.client_data(clients[a : a + step]), max_rows=self.max_rows
                )[0]
            )
            if len(clients) > step:  # freed tensors held past the ceiling go back (fedclust.memory)
                release_free_memory(above=ceiling)
        return torch.cat(out) if out else torch.zeros(0, self.k, dtype=d.X_train.dtype)

    def lr_at(self, t: int) -> float:
        """``lr * lr_decay**(t-1)`` for round t = 1..T."""
        return self.lr * self.lr_decay ** (t - 1)

    # --------------------------------------------------------------------------------------------
    def client_round(self, state: ServerState, clients: np.ndarray, lr: float) -> ClientUpdates:
        """Steps 2-3 for the given clients: batched cluster estimation, then batched local update."""
        X, y, n = self.client_data(clients)
        t0 = time.perf_counter()
        # eq. (8): every client evaluates all k models on its local data, one batched forward
        losses, _ = client_model_losses(self.model, state.params, X, y, n, max_rows=self.max_rows)
        chosen = assign_clusters(losses)
        t1 = time.perf_counter()
        start, params, mom = self._local_update(state, chosen, X, y, n, lr, self.rngs["minibatch"], clients)
        t2 = time.perf_counter()
        self.timing["assign"] += t1 - t0
        self.timing["local"] += t2 - t1
        return ClientUpdates(
            clients=clients, chosen=chosen, losses=losses, start_params=start, params=params, momentum=mom, n_samples=n
        )

    def _local_update(self, state: ServerState, chosen: torch.Tensor, X, y, n, lr: float, gen, clients):
        """Step 3 for the ``clients`` that chose ``chosen``: gather their start models and momenta, train
        (Option II) or take the momentum-gradient (Option I) with minibatch draws from ``gen``, and
        count the local samples. Returns (start, params, momentum). The one hook of a round that
        subclasses override (FedProx's anchor, FedPer's personal heads): a chunked round calls it once
        per chunk, a whole round once."""
        ch = chosen.to(self.device)
        start = GatheredParams(state.params, ch)  # copies made where read (not by a plain average)
        mom0 = {k: v.index_select(0, ch) for k, v in state.momentum.items()} if self.beta > 0 else None
        if self.local_update == "model":
            params, mom = self.train_models(start, mom0, X, y, n, lr, gen)
            steps = self.local_steps
        else:
            mom = local_gradient(self.model, start, mom0, X, y, n, beta=self.beta, batch_size=self.batch_size, gen=gen)
            params, steps = start, 1
        self.count_local_samples(n, steps)
        return start, params, mom

    def train_models(
        self, start: Params | GatheredParams, mom0: dict | None, X, y, n, lr: float, gen, beta: float | None = None
    ):
        """Local training (Option II) of the gathered clients from ``start`` (and momenta ``mom0``) with
        the engine's settings (:meth:`local_training`); ``beta`` overrides the engine's momentum;
        ``start`` as :class:`GatheredParams` of the cluster models lets the kernel read each distinct
        start once (same results). Returns (params, momentum) as :func:`local_train`."""
        settings = self.local_training(lr, beta)
        return local_train(self.model, start, mom0, X, y, n, settings, gen=gen)

    def local_training(self, lr: float, beta: float | None = None) -> LocalTraining:
        """The engine's local training settings (steps, batch size, epochs, client blocks, deferred
        updates) at step size ``lr``, with momentum ``beta`` (None: the engine's)."""
        return LocalTraining(
            steps=self.local_steps,
            lr=lr,
            beta=self.beta if beta is None else beta,
            batch_size=self.batch_size,
            local_epochs=self.local_epochs,
            client_block=self.client_block,
            defer_updates=self.defer_updates,
        )

    def client_data(self, clients) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The padded training data ``X, y, n`` of the given clients (a gathered copy, on the engine's
        device; the data set itself stays in host memory)."""
        d, dev = self.data, self.device
        if self._device_train is None and dev.type == "cuda":
            self._device_train = _device_copy(d, dev)
        if self._device_train:  # the training data already live on the GPU: gather there
            X, y, n = self._device_train
            idx = torch.as_tensor(clients, dtype=torch.long).to(dev)
            return X[idx], y[idx], n[idx]
        return gather_train(d, clients, dev)  # memory-mapped data: reads these clients' rows only

    def _worker_rows(self, clients):
        """What a worker needs to get these clients' training rows: the client ids when the data set
        is in ``.npy`` files (:class:`ClientRows`: the worker reads the rows itself, the driver neither
        reads nor sends them), else the gathered rows."""
        d = self.data
        if d.memory_mapped and d.directory is not None:
            return ClientRows(d.directory, np.asarray(clients))
        return self.client_data(clients)

    def count_local_samples(self, n: torch.Tensor, steps: int) -> None:
        """Add the samples that ``steps`` local steps on clients with ``n`` samples touch (a full
        batch, or at most ``batch_size`` per step) to ``n_local_samples``."""
        per_step = n.cpu() if self.batch_size is None else n.cpu().clamp(max=self.batch_size)
        self.n_local_samples += int(per_step.sum()) * steps

    def _chunked(self, n_sampled: int) -> bool:
        """Whether this round runs in chunks (more clients than one chunk, and a chunk-capable setup)."""
        if self.chunk_clients is None or n_sampled <= self.chunk_clients:
            return False
        ok = self.aggregator.supports_chunks() and type(self).client_round is ClusteredFLEngine.client_round
        if not ok and not self._warned_unbounded:
            logger.warning(
                "max_chunk_mb=%g: %d clients per round need %d chunks, but %s cannot aggregate in "
                "chunks; the round runs at once (its memory grows with the clients per round)",
                self.max_chunk_mb,
                n_sampled,
                math.ceil(n_sampled / self.chunk_clients),
                type(self.aggregator).__name__ if not self.aggregator.supports_chunks() else type(self).__name__,
            )
            self._warned_unbounded = True
        return ok

    def chunked_round(
        self, state: ServerState, clients: np.ndarray, lr: float, ctx: RoundContext
    ) -> tuple[ClientUpdates, Aggregation]:
        """Steps 2-4 in chunks of ``chunk_clients`` clients: (i) the cluster estimate of every sampled
        client (losses only, chunk by chunk), (ii) the aggregator's :meth:`~Aggregator.begin` with the
        round's choices, (iii) per chunk: gather its data, start models and momenta, local training
        (minibatch draws from the round's :class:`_DrawTape`), :meth:`~Aggregator.accumulate`; then
        :meth:`~Aggregator.end`. Peak memory: one chunk's working set plus the (S, k) losses."""
        d = self.data
        S = len(clients)
        t0 = time.perf_counter()
        remote = self.chunk_runner is not None and type(self)._local_update is ClusteredFLEngine._local_update
        if remote:  # eq. (8) on the workers too, chunk by chunk (the same chunks, so the same numbers)
            losses = self._remote_losses(state.params, clients)
        else:
            losses = self._losses(state.params, clients)  # eq. (8), chunk by chunk
        chosen = assign_clusters(losses)
        n_all = d.n_train[torch.as_tensor(clients, dtype=torch.long)]  # host copy (bookkeeping)
        updates = ClientUpdates(
            clients=clients,
            chosen=chosen,
            losses=losses,
            start_params={},
            params={},
            momentum=None,
            n_samples=n_all,
            chunked=True,
        )
        t1 = time.perf_counter()
        self.timing["assign"] += t1 - t0
        acc = self.aggregator.begin(state, updates, ctx)
        fold = BlockFold(self.aggregator, acc, S, ctx)
        self.timing["aggregate"] += time.perf_counter() - t1
        if remote:
            self._run_chunks_remotely(state, clients, chosen, losses, lr, ctx, fold)
            t2 = time.perf_counter()
            fold.finish()
            agg = self.aggregator.end(state, acc, ctx)
            self.timing["aggregate"] += time.perf_counter() - t2
            return updates, agg
        tape = _DrawTape(self.rngs["minibatch"], S)
        ceiling = self._memory_ceiling()
        for a in range(0, S, self.chunk_clients):
            rows = slice(a, min(S, a + self.chunk_clients))
            t1 = time.perf_counter()
            X, y, n = self.client_data(clients[rows])
            ch = chosen[rows]
            start, params, mom = self._local_update(state, ch, X, y, n, lr, tape.view(rows), clients[rows])
            t2 = time.perf_counter()
            chunk = ClientUpdates(
                clients=clients[rows],
                chosen=ch,
                losses=losses[rows],
                start_params=start,
                params=params,
                momentum=mom,
                n_samples=n,
            )
            fold.add(chunk, rows)
            del chunk, params, mom, start, X, y
            release_free_memory(above=ceiling)  # freed tensors held past the ceiling go back (fedclust.memory)
            self.timing["local"] += t2 - t1
            self.timing["aggregate"] += time.perf_counter() - t2
        t2 = time.perf_counter()
        fold.finish()
        agg = self.aggregator.end(state, acc, ctx)
        self.timing["aggregate"] += time.perf_counter() - t2
        return updates, agg

    def _remote_losses(self, params: Params, clients: np.ndarray) -> torch.Tensor:
        """:meth:`_losses` with every chunk's loss table computed by ``chunk_runner``."""
        step = self.chunk_clients

        def per_chunk():
            for a in range(0, len(clients), step):
                yield self._worker_rows(clients[a : a + step]), self.max_rows

        out = list(self.chunk_runner.map(chunk_losses_of, (self.model, params), per_chunk()))
        return torch.cat(out) if out else torch.zeros(0, self.k, dtype=self.data.X_train.dtype)

    def _run_chunks_remotely(self, state, clients, chosen, losses, lr, ctx, fold: BlockFold) -> None:
        """The chunk loop of :meth:`chunked_round` through ``chunk_runner``: the round's minibatch
        keys are drawn here up front (the stream positions of a serial round), every chunk gets its
        rows of them, and the chunks are folded into the round's sums in chunk order. A strategy whose
        sums split (:meth:`Aggregator.splits_sums`, the built-in ones) has every worker fold its chunk
        into per-cluster sums (:func:`train_chunk_sums`), so the driver adds one sum per chunk and
        never holds a chunk's models; the driver then folds only the rows of blocks cut by a chunk's
        edge (chunks smaller than a block). Otherwise the workers return the trained models."""
        S = len(clients)
        t0 = time.perf_counter()
        job = _RemoteRound(
            state=state,
            clients=clients,
            chosen=chosen,
            losses=losses,
            n_train=self.data.n_train,
            draws=self._round_draws(S),
            settings=self._chunk_settings(lr),
            slices=[slice(a, min(S, a + self.chunk_clients)) for a in range(0, S, self.chunk_clients)],
        )
        if fold.split:
            t_agg = self._fold_worker_sums(job, ctx, fold)
        else:
            t_agg = self._fold_worker_models(job, fold)
        self.timing["aggregate"] += t_agg
        self.timing["local"] += time.perf_counter() - t0 - t_agg

    def _round_draws(self, S: int) -> list[np.ndarray]:
        """The round's minibatch keys for ``S`` clients, drawn from stream "minibatch" as a serial round draws them."""
        n_max = int(self.data.X_train.shape[1])
        gen = self.rngs["minibatch"]
        n = n_draws(self.batch_size, self.local_epochs, n_max, self.local_steps, self.local_update)
        return [gen.random((S, n_max)) for _ in range(n)]

    def _chunk_settings(self, lr: float) -> dict:
        """The local update a worker runs on one chunk of this round: the option and its settings."""
        return {"local_update": self.local_update, "training": self.local_training(lr)}

    def _fold_worker_sums(self, job: _RemoteRound, ctx: RoundContext, fold: BlockFold) -> float:
        """Chunks whose workers return per-cluster sums (and the rows of cut blocks) folded in chunk
        order; returns the driver's folding time."""
        ceiling = self._memory_ceiling()
        momentum = job.state.momentum if self.beta > 0 else None
        shared = (self.model, job.state.params, momentum, self.aggregator, ctx.for_workers())

        def per_chunk():
            for rows in job.slices:
                chunk = ChunkInput(
                    clients=job.clients[rows],
                    chosen=job.chosen[rows],
                    losses=job.losses[rows],
                    rows=self._worker_rows(job.clients[rows]),
                    draws=[dr[rows] for dr in job.draws],
                )
                yield chunk, job.settings, fold.templates(rows)

        t_agg = 0.0
        for rows, pieces in zip(job.slices, self.chunk_runner.map(train_chunk_sums, shared, per_chunk())):
            t1 = time.perf_counter()
            n = job.n_train[torch.as_tensor(job.clients[rows], dtype=torch.long)]
            self.count_local_samples(n, self.local_steps if self.local_update == "model" else 1)
            for piece in pieces:
                if piece[0] == "sums":
                    fold.add_sums(piece[1])
                else:
                    _, lo, hi, params, mom = piece
                    cut = slice(rows.start + lo, rows.start + hi)
                    fold.add(job.updates_of(cut, params, mom), cut)
            del pieces
            release_free_memory(above=ceiling)  # freed tensors held past the ceiling go back (fedclust.memory)
            t_agg += time.perf_counter() - t1
        return t_agg

    def _fold_worker_models(self, job: _RemoteRound, fold: BlockFold) -> float:
        """Chunks whose workers return the trained models, folded here in chunk order; returns the
        driver's folding time."""
        ceiling = self._memory_ceiling()
        momentum = job.state.momentum if self.beta > 0 else None

        def per_chunk():
            for rows in job.slices:
                X, y, n = self.client_data(job.clients[rows])
                yield job.chosen[rows], X, y, n, [dr[rows] for dr in job.draws], job.settings

        shared = (self.model, job.state.params, momentum)
        t_agg = 0.0
        for rows, (params, mom) in zip(job.slices, self.chunk_runner.map(train_chunk, shared, per_chunk())):
            t1 = time.perf_counter()
            chunk = job.updates_of(rows, params, mom)
            self.count_local_samples(chunk.n_samples, self.local_steps if params is not None else 1)
            fold.add(chunk, rows)
            del chunk, params, mom
            release_free_memory(above=ceiling)  # freed tensors held past the ceiling go back (fedclust.memory)
            t_agg += time.perf_counter() - t1
        return t_agg

    def sample_clients(self) -> np.ndarray:
        """Sorted client ids of one round (stream "sampling"): a fixed-size uniform sample of
        ``round(q*m)`` clients without replacement (default), or Poisson sampling (every
        client independently with probability q; the number varies and may be 0)."""
        rng = self.rngs["sampling"]
        if self.sampling == "poisson":
            return np.flatnonzero(rng.random(self.data.n_clients) < self.participation)
        return np.sort(rng.choice(self.data.n_clients, self.S, replace=False))

    def step(self, state: ServerState) -> tuple[ServerState, ClientUpdates, Aggregation]:
        """One full communication round; returns the new state, the client updates and the aggregation.
        Its blocks of hundreds of MB are reused from the heap instead of mapped anew for every chunk
        (:func:`fedclust.memory.large_blocks_kept`)."""
        with large_blocks_kept():
            return self._step(state)

    def _step(self, state: ServerState) -> tuple[ServerState, ClientUpdates, Aggregation]:
        """:meth:`step`'s round."""
        t = state.round + 1
        lr = self.lr_at(t)
        clients = self.sample_clients()
        if len(clients) == 0:  # Poisson sampling drew nobody: nothing is sent, nothing changes
            empty = {k: v[:0] for k, v in state.params.items()}
            updates = ClientUpdates(
                clients=clients,
                chosen=torch.zeros(0, dtype=torch.long),
                losses=torch.zeros(0, self.k),
                start_params=empty,
                params=empty,
                momentum=None,
                n_samples=torch.zeros(0, dtype=torch.long),
            )
            agg = Aggregation(state.params, state.momentum, updates.chosen, np.zeros(self.k, dtype=np.int64))
            return ServerState(params=state.params, momentum=state.momentum, round=t), updates, agg
        ctx = RoundContext(
            round=t,
            lr=lr,
            k=self.k,
            n_clients=self.data.n_clients,
            n_sampled=len(clients),
            beta=self.beta,
            rngs=self.rngs,
            dp_events=self.dp_events,
        )
        if self.chunk_clients is None:  # a state built by the caller, not by init_state
            self._set_chunk(state.params)
        if self._chunked(len(clients)):
            updates, agg = self.chunked_round(state, clients, lr, ctx)
        else:
            updates = self.client_round(state, clients, lr)
            t0 = time.perf_counter()
            agg = self.aggregator(state, updates, ctx)
            self.timing["aggregate"] += time.perf_counter() - t0
        return ServerState(params=agg.params, momentum=agg.momentum, round=t), updates, agg

    def _evaluate(self, params: Params, train: bool) -> dict[str, Any]:
        """``evaluator`` on the cluster models: the test clients, and every training client when ``train``."""
        return self.evaluator(
            self.model, params, self.data, train=train, test=True, test_select=self.test_select, max_rows=self.max_rows
        )

    def _record(self, history, t, lr, state, updates, agg, ev: dict[str, Any] | None = None):
        """Append round ``t``'s record to ``history``. ``ev``: an evaluation of ``state.params`` already
        made with ``train=True`` (the final one; its test side is the same call's, and it holds the
        train side that ``train_eval="all"`` reads), else one is made here."""
        t0 = time.perf_counter()
        rec: dict[str, Any] = {"round": t, "lr": lr}
        if ev is None:
            ev = self._evaluate(state.params, train=self.train_eval == "all")
        if self.train_eval == "all":
            rec["train_loss"] = ev["train_loss"]
            rec["client_ACC"], rec["client_NMI"] = (
                ev.get("client_ACC", float("nan")),
                ev.get("client_NMI", float("nan")),
            )
        else:
            rec["train_loss"] = float(updates.losses.min(dim=1).values.mean()) if len(updates.clients) else float("nan")
            if self.data.group is not None and len(updates.clients):
                sc = client_clustering_scores(self.data.group[updates.clients], updates.chosen.numpy())
                rec["client_ACC"], rec["client_NMI"] = sc["client_ACC"], sc["client_NMI"]
            else:
                rec["client_ACC"] = rec["client_NMI"] = float("nan")
        rec["test_accuracy"] = ev.get("test_accuracy", float("nan"))
        rec["test_loss"] = ev.get("test_loss", float("nan"))
        rec["cluster_sizes"] = [int(c) for c in agg.cluster_sizes]
        for key, v in agg.info.items():
            if isinstance(v, (int, float, np.integer, np.floating)):
                rec[key] = float(v)
        for key, v in rec.items():
            history.setdefault(key, []).append(v)
        self.timing["eval"] += time.perf_counter() - t0
        return rec

    def run(self) -> ClusteredFLResult:
        """Run all rounds and return a :class:`ClusteredFLResult`."""
        wall0 = time.perf_counter()
        state = self.init_state()
        history: dict[str, list] = {
            k: []
            for k in (
                "round",
                "lr",
                "train_loss",
                "test_accuracy",
                "test_loss",
                "client_ACC",
                "client_NMI",
                "cluster_sizes",
            )
        }
        final = None
        for t in range(1, self.rounds + 1):
            lr = self.lr_at(t)
            state, updates, agg = self.step(state)
            report_round("round", t, self.rounds)
            if (self.eval_every and t % self.eval_every == 0) or t == self.rounds:
                if t == self.rounds:  # the final model: one evaluation serves the record and the result
                    t0 = time.perf_counter()
                    final = self._evaluate(state.params, train=True)
                    self.timing["final_eval"] = time.perf_counter() - t0
                rec = self._record(history, t, lr, state, updates, agg, ev=final)
                logger.info(
                    "%s round %d/%d: train_loss=%.4f test_acc=%.4f client_ACC=%.3f sizes=%s",
                    self.method,
                    t,
                    self.rounds,
                    rec["train_loss"],
                    rec["test_accuracy"],
                    rec["client_ACC"],
                    rec["cluster_sizes"],
                )
                if self.progress is not None:
                    self.progress(t, rec)
        self.dp_events.extend(self.aggregator.finish(self.rounds, self.data.n_clients, self.S))
        info = {
            "method": self.method,
            "k": self.k,
            "rounds": self.rounds,
            "lr": self.lr,
            "lr_decay": self.lr_decay,
            "beta": self.beta,
            "local_update": self.local_update,
            "local_steps": self.local_steps,
            "batch_size": self.batch_size,
            "clients_per_round": self.S,
            "sampling": self.sampling,
            "participation": self.participation,
            "n_clients": self.data.n_clients,
            "aggregator": self.aggregator.name,
            "device": self.device.type,
            "seed": self.seed,
            "init": "given"
            if self.init_params is not None
            else ("random+ifca_restart" if self.init_min_fraction is not None else "random"),
            **self.init_info,
            "final": {k: v for k, v in final.items() if not isinstance(v, np.ndarray)},
            "timing": dict(self.timing),
            "wall_time": time.perf_counter() - wall0,
            "local_samples": self.n_local_samples,
            "max_chunk_mb": self.max_chunk_mb,
            "chunk_clients": self.chunk_clients,
            "chunks_per_round": math.ceil(self.S / self.chunk_clients) if self.chunk_clients else 1,
        }
        params, momentum = ({n: v.cpu() for n, v in p.items()} for p in (state.params, state.momentum))  # on the CPU
        return ClusteredFLResult(
            params=params,
            momentum=momentum,
            assignment=final["assignment"],
            test_assignment=final.get("test_assignment"),
            history=history,
            dp_events=list(self.dp_events),
            info=info,
        )


def _device_copy(data: FederatedTensors, dev: torch.device) -> tuple:
    """The training tensors on ``dev`` when they take at most a quarter of its free memory (the chunks
    are then gathered on the GPU, with no host copy and transfer per chunk) and are not memory-mapped,
    else ``()``."""
    if data.memory_mapped:  # streamed from its files chunk by chunk, never copied whole
        return ()
    size = sum(t.numel() * t.element_size() for t in (data.X_train, data.y_train, data.n_train))
    free, _ = torch.cuda.mem_get_info(dev)
    if size > free // 4:
        return ()
    return (data.X_train.to(dev), data.y_train.to(dev), data.n_train.to(dev))


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``"auto"``/None: CUDA when ``torch.cuda.is_available()``, else the CPU; otherwise ``torch.device(device)``.
    The engine runs the same code on either: data are gathered per chunk and moved to the device, the
    bookkeeping (choices, groups, counts, losses) stays on the CPU."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r}, but torch.cuda.is_available() is False")
    return dev


def run_clustered_fl(data: FederatedTensors, model: BatchedModel, k: int, **settings) -> ClusteredFLResult:
    """``ClusteredFLEngine(data, model, EngineConfig(k=k, **settings)).run()``."""
    return ClusteredFLEngine(data, model, EngineConfig(k=k, **settings)).run()
