"""Server side: :class:`ServerState`, :class:`ClientUpdates`, :class:`RoundContext`, the
:class:`Aggregator` protocol (whole round or chunked) and the built-in strategies
(:class:`ModelAveraging`, :class:`GradientAveraging`, :class:`DeltaAveraging`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedclust.clustered_fl.engine.data import Params
from fedclust.clustered_fl.engine.kernels import segment_counts


@dataclass
class ServerState:
    """Stacked cluster models ``params`` {name: (k, ...)} and server momentum ``momentum`` (same
    shapes; zeros when unused), after ``round`` completed rounds."""

    params: Params
    momentum: Params
    round: int = 0

    @property
    def k(self) -> int:
        return int(next(iter(self.params.values())).shape[0])


@dataclass
class ClientUpdates:
    """What the sampled clients send in one round (all stacked over the S sampled clients).

    * ``clients`` (S,) client ids; ``chosen`` (S,) the cluster each client estimated (argmin loss) and
      trained from; ``losses`` (S, k) its loss under every model (before the update);
    * ``start_params`` the model each client started from (``chi_{chosen}``), ``params`` its model after
      local training (Option I: unchanged), ``momentum`` its momentum/gradient message ``u_i`` (None
      when ``beta == 0`` under Option II);
    * ``n_samples`` (S,) local sample counts;
    * ``chunked``: True when the round was processed in chunks of clients (``max_chunk_mb``): the
      per-client stacks ``start_params``/``params``/``momentum`` were folded into the aggregation chunk
      by chunk and are empty here (``{}``/None); ``clients``, ``chosen``, ``losses`` and ``n_samples``
      are complete.
    """

    clients: np.ndarray
    chosen: torch.Tensor
    losses: torch.Tensor
    start_params: Params
    params: Params
    momentum: Params | None
    n_samples: torch.Tensor
    chunked: bool = False

    def deltas(self) -> Params:
        """``Delta_i = chi~_i - chi_{chosen_i}`` (S, ...)."""
        return {k: self.params[k] - self.start_params[k] for k in self.params}


@dataclass
class RoundContext:
    """Round facts for a server strategy: round ``t`` (1-based), ``lr`` (= lr_t), ``k``, total
    ``n_clients`` (m), ``n_sampled`` (|M_t|), ``beta``, the run's numpy streams ``rngs`` (use
    ``rngs["noise"]`` for privacy noise) and the run's ``dp_events`` list (append releases there)."""

    round: int
    lr: float
    k: int
    n_clients: int
    n_sampled: int
    beta: float
    rngs: dict[str, np.random.Generator]
    dp_events: list


@dataclass
class Aggregation:
    """A strategy's output: new ``params``/``momentum`` (k, ...), ``groups`` (S,) the cluster each
    update was finally aggregated into, ``cluster_sizes`` (k,), and strategy ``info`` (logged)."""

    params: Params
    momentum: Params
    groups: torch.Tensor
    cluster_sizes: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)


class Aggregator:
    """A server-side aggregation strategy (replaceable).

    Subclasses implement :meth:`__call__`. :meth:`groups` is the hook that maps client updates to
    clusters (default: the clients' own choices; RR-Cluster privatizes and rebalances here), and
    :meth:`finish` returns the DP releases of the whole run (default: none).

    **Chunked rounds** (bounded memory, ``max_chunk_mb`` of the engine): a strategy that can fold the
    clients' updates in one chunk of clients at a time implements :meth:`begin` (once per round, with
    the round's :class:`ClientUpdates` *without* per-client parameters: ``clients``, ``chosen``,
    ``losses``, ``n_samples``), :meth:`accumulate` (once per chunk, with that chunk's full updates and
    its row positions in the round) and :meth:`end`, and returns True from :meth:`supports_chunks`.
    The built-in strategies do, and their :meth:`__call__` is ``begin`` + one ``accumulate`` + ``end``,
    so a chunked round is the unchunked one up to the order of floating-point additions. A strategy
    that does not (the default) gets the whole round's stacked updates at once.
    """

    name = "aggregator"
    #: parameter-sized copies of each client's update that :meth:`accumulate` holds at once beyond the
    #: engine's own (a clipping strategy: the deltas and their clipped copies); the engine sizes its
    #: chunks with them (:func:`~fedclust.clustered_fl.engine.kernels.bytes_per_client`)
    working_copies = 0

    def groups(self, updates: ClientUpdates, ctx: RoundContext) -> torch.Tensor:
        return updates.chosen

    def __call__(self, state: ServerState, updates: ClientUpdates, ctx: RoundContext) -> Aggregation:
        raise NotImplementedError

    def finish(self, rounds: int, n_clients: int, n_sampled: int) -> list:
        return []

    # chunked protocol -------------------------------------------------------------------------
    def supports_chunks(self) -> bool:
        """True when :meth:`begin`/:meth:`accumulate`/:meth:`end` implement this strategy's ``__call__``."""
        return False

    def begin(self, state: ServerState, updates: ClientUpdates, ctx: RoundContext) -> dict:
        raise NotImplementedError

    def accumulate(self, acc: dict, chunk: ClientUpdates, rows: slice, ctx: RoundContext) -> None:
        raise NotImplementedError

    def end(self, state: ServerState, acc: dict, ctx: RoundContext) -> Aggregation:
        raise NotImplementedError

    def _fold(self, state, updates, ctx) -> Aggregation:
        acc = self.begin(state, updates, ctx)
        self.accumulate(acc, updates, slice(0, len(updates.clients)), ctx)
        return self.end(state, acc, ctx)

    @staticmethod
    def _start(state, g, k) -> dict:
        """Accumulator of the linear strategies: groups, counts, per-cluster sums (lazily allocated)."""
        return {"g": g, "counts": segment_counts(g, k), "sums": {}, "mom": {}}

    @staticmethod
    def _add(sums: dict, name: str, values: torch.Tensor, g: torch.Tensor, k: int) -> None:
        if name not in sums:
            sums[name] = torch.zeros((k,) + tuple(values.shape[1:]), dtype=values.dtype, device=values.device)
        sums[name].index_add_(0, g.to(values.device), values)  # groups live on the CPU, updates on the device

    def _add_momentum(self, acc, chunk, g, k):
        if chunk.momentum is not None:
            for n, v in chunk.momentum.items():
                self._add(acc["mom"], n, v, g, k)

    @staticmethod
    def _momentum_end(state, acc):
        """``u_p = mean_{i in S_p} u_i`` (an empty cluster, or no momentum messages: kept)."""
        if not acc["mom"]:
            return state.momentum
        return {n: _mean_or_keep(acc["mom"][n], acc["counts"], old) for n, old in state.momentum.items()}


def _mean_or_keep(
    sums: torch.Tensor, counts: torch.Tensor, old: torch.Tensor, scale: float = 1.0, base: torch.Tensor | None = None
) -> torch.Tensor:
    """``sums / counts`` per cluster, or ``base + scale * sums / counts`` when ``base`` is given; an
    empty cluster keeps its row of ``old``."""
    c = counts.to(old.device, old.dtype).reshape(-1, *([1] * (old.ndim - 1)))
    new = sums / c.clamp(min=1) if base is None else base + scale * sums / c.clamp(min=1)
    return torch.where(c > 0, new, old)


class _SumAggregator(Aggregator):
    """The built-in strategies: per-cluster running sums (:meth:`Aggregator._start`), so a round is
    ``begin`` + ``accumulate`` per chunk + ``end``. A subclass that overrides ``__call__`` (it needs
    the whole round at once, e.g. RR-Cluster's server) does not support chunks."""

    def supports_chunks(self):
        return type(self).__call__ is _SumAggregator.__call__

    def __call__(self, state, updates, ctx):
        return self._fold(state, updates, ctx)

    def begin(self, state, updates, ctx):
        return self._start(state, self.groups(updates, ctx), ctx.k)


class ModelAveraging(_SumAggregator):
    """Option II / IFCA / FedAvg: per-cluster mean of the clients' models and momenta."""

    name = "model_averaging"

    def accumulate(self, acc, chunk, rows, ctx):
        g = acc["g"][rows]
        for n, v in chunk.params.items():
            self._add(acc["sums"], n, v, g, ctx.k)
        self._add_momentum(acc, chunk, g, ctx.k)

    def end(self, state, acc, ctx):
        c, params = acc["counts"], {}
        for n, old in state.params.items():
            params[n] = _mean_or_keep(acc["sums"][n], c, old) if n in acc["sums"] else old
        return Aggregation(params, self._momentum_end(state, acc), acc["g"], c.numpy().copy())


class GradientAveraging(_SumAggregator):
    """Option I: ``chi_p <- chi_p - (lr_t/norm) sum_{i in S_p} u_i``, ``u_p = mean u_i``.

    ``normalization="total"`` (spec: ``norm = m``, the total number of clients; the cluster step is
    then ``lr*|S_p|/m``) or ``"sampled"`` (``norm = |M_t|``; equal under full participation).
    """

    name = "gradient_averaging"

    def __init__(self, normalization: str = "total"):
        if normalization not in ("total", "sampled"):
            raise ValueError(f"normalization must be 'total' or 'sampled', got {normalization!r}")
        self.normalization = normalization

    def accumulate(self, acc, chunk, rows, ctx):
        if chunk.momentum is None:
            raise ValueError(
                "GradientAveraging needs the clients' momentum/gradient messages (local_update='gradient')"
            )
        self._add_momentum(acc, chunk, acc["g"][rows], ctx.k)

    def end(self, state, acc, ctx):
        norm = ctx.n_clients if self.normalization == "total" else ctx.n_sampled
        params = {
            n: (state.params[n] - (ctx.lr / norm) * acc["mom"][n]) if n in acc["mom"] else state.params[n]
            for n in state.params
        }  # empty cluster: the sum is 0, so the model is kept
        return Aggregation(params, self._momentum_end(state, acc), acc["g"], acc["counts"].numpy().copy())


class DeltaAveraging(_SumAggregator):
    """``chi_p <- chi_p + server_lr * privatize(sum_{i in S_p} clip(Delta_i)) / |S_p|`` (empty: kept).

    With the default hooks (no clip, no noise, the clients' own choices) and ``server_lr=1`` this
    equals :class:`ModelAveraging`. RR-Cluster overrides
    :meth:`groups` (identifier noise + random rebalancing), :meth:`clip_deltas` and
    :meth:`privatize_sums`. Momentum buffers (if any) are averaged per final group. In a chunked
    round :meth:`clip_deltas` sees one chunk of clients at a time (it must act per client) and
    :meth:`privatize_sums` runs once, on the complete sums.
    """

    name = "delta_averaging"

    def __init__(self, server_lr: float = 1.0):
        if not server_lr > 0:
            raise ValueError(f"server_lr must be > 0, got {server_lr}")
        self.server_lr = float(server_lr)

    def clip_deltas(self, deltas: Params, updates: ClientUpdates, ctx: RoundContext) -> Params:
        return deltas

    def privatize_sums(self, sums: Params, counts: torch.Tensor, ctx: RoundContext) -> Params:
        return sums

    def accumulate(self, acc, chunk, rows, ctx):
        g = acc["g"][rows]
        for n, v in self.clip_deltas(chunk.deltas(), chunk, ctx).items():
            self._add(acc["sums"], n, v, g, ctx.k)
        self._add_momentum(acc, chunk, g, ctx.k)

    def end(self, state, acc, ctx):
        counts = acc["counts"]
        sums = {n: acc["sums"][n] if n in acc["sums"] else torch.zeros_like(v) for n, v in state.params.items()}
        sums = self.privatize_sums(sums, counts, ctx)
        params = {n: _mean_or_keep(sums[n], counts, old, self.server_lr, base=old) for n, old in state.params.items()}
        return Aggregation(params, self._momentum_end(state, acc), acc["g"], counts.numpy().copy())
