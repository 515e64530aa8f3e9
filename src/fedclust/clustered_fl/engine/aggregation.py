"""Server side: :class:`ServerState`, :class:`ClientUpdates`, :class:`RoundContext`, the
:class:`Aggregator` protocol (whole round or chunked) and the built-in strategies
(:class:`ModelAveraging`, :class:`GradientAveraging`, :class:`DeltaAveraging`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from fedclust.clustered_fl.engine.data import GatheredParams, Params
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

    def rows(self, lo: int, hi: int) -> "ClientUpdates":
        """The updates of rows ``lo:hi`` (views of the stacks)."""
        sl = slice(lo, hi)
        return ClientUpdates(
            clients=self.clients[sl],
            chosen=self.chosen[sl],
            losses=self.losses[sl],
            start_params=self.start_params.rows(sl)
            if isinstance(self.start_params, GatheredParams)
            else {n: v[sl] for n, v in self.start_params.items()},
            params={n: v[sl] for n, v in self.params.items()},
            momentum=None if self.momentum is None else {n: v[sl] for n, v in self.momentum.items()},
            n_samples=self.n_samples[sl],
            chunked=self.chunked,
        )


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

    def for_workers(self) -> "RoundContext":
        """This context without the run's random streams and release list (a worker folding a chunk's
        sums must not draw or release: that stays with the driver, once per round)."""
        return replace(self, rngs={}, dp_events=[])


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
    so a chunked round is the unchunked one (bit for bit with the fixed order below). A strategy
    that does not (the default) gets the whole round's stacked updates at once.

    **Sums in a fixed order** (:meth:`splits_sums`, :class:`SumTree`): a strategy whose accumulator
    is made of dicts of tensors that :meth:`accumulate` adds into and of counters (numbers) it
    increments can fold any range of a round's rows into a fresh :meth:`partial` accumulator and
    :meth:`merge` partials. The built-in strategies do. Their rows are then summed in a fixed tree:
    blocks of :data:`SUM_BLOCK` consecutive rows of the round, each summed row by row from zero, and
    the blocks' sums added pairwise along the aligned binary tree over the block numbers
    (:class:`SumTree`). The tree depends only on the number of clients in the round, not on how the
    round is cut into chunks or where the chunks run, so the whole round, a chunked round, and the
    chunks summed on worker processes or Ray tasks (each worker returns its chunk's per-cluster sums,
    one per chunk) agree bit for bit. A round of at most :data:`SUM_BLOCK` clients is one block:
    the row-by-row sum.
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

    def splits_sums(self) -> bool:
        """True when :meth:`partial` and :meth:`merge` fold this strategy's sums block by block (see
        the class docstring); otherwise a chunked round folds its rows one after another."""
        return False

    def partial(self, acc: dict, rows: slice) -> dict:
        """A fresh accumulator for the rows ``rows`` of the round (its groups ``acc["g"][rows]``):
        :meth:`accumulate` fills it with those rows (``rows`` then counted from 0) and :meth:`merge`
        adds it to another."""
        raise NotImplementedError

    def merge(self, acc: dict, part: dict) -> None:
        """Add the sums and counters of ``part`` into ``acc`` (in place)."""
        raise NotImplementedError

    def _fold(self, state, updates, ctx) -> Aggregation:
        acc = self.begin(state, updates, ctx)
        fold = BlockFold(self, acc, len(updates.clients), ctx)
        fold.add(updates, slice(0, len(updates.clients)))
        fold.finish()
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
    the whole round at once, e.g. RR-Cluster's server) does not support chunks.

    Their accumulators split (:meth:`partial`, :meth:`merge`): a partial has the groups of its rows
    under ``"g"``, an empty dict for every dict of sums, a zero for every counter, and shares every
    other entry (read-only settings such as parameter names) with the round's accumulator. A subclass
    whose :meth:`accumulate` writes anything else keeps this only if it overrides both."""

    def supports_chunks(self):
        return type(self).__call__ is _SumAggregator.__call__

    def splits_sums(self):
        return self.supports_chunks()

    def partial(self, acc, rows):
        out = {}
        for key, v in acc.items():
            if key == "g":
                out[key] = v[rows].clone()  # its own storage: a partial travels to workers alone
            elif key == "counts":
                continue
            elif isinstance(v, dict):
                out[key] = {}
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[key] = type(v)(0)
            else:
                out[key] = v
        return out

    def merge(self, acc, part):
        for key, v in part.items():
            if key == "g":
                continue
            if isinstance(v, dict):
                for n, t in v.items():
                    if n in acc[key]:
                        acc[key][n].add_(t)
                    else:
                        acc[key][n] = t
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                acc[key] += v

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


#: rows of a round summed one after another into one block sum (see :class:`Aggregator`); rounds of at
#: most this many clients are summed row by row, as before the blocks
SUM_BLOCK = 32


def block_pieces(a: int, b: int, n_rows: int, block: int = SUM_BLOCK) -> list[tuple[int, int, bool]]:
    """Rows ``a:b`` of a round of ``n_rows`` rows cut at the block boundaries: ``(lo, hi, whole)`` with
    ``whole`` True when ``lo:hi`` is a complete block (it starts a block and ends it, or ends the round)."""
    out, lo = [], a
    while lo < b:
        end = min(n_rows, (lo // block + 1) * block)
        hi = min(b, end)
        out.append((lo, hi, lo % block == 0 and hi == end))
        lo = hi
    return out


def chunk_size(clients: int, block: int = SUM_BLOCK) -> int:
    """The clients per chunk that a memory budget for ``clients`` allows, cut to a whole subtree of the
    summation tree: ``block * 2**j`` (the largest that fits) when at least one block fits, else
    ``clients``. Chunks of that size start at subtree boundaries, so a worker returns one sum per chunk."""
    if clients < block:
        return max(1, clients)
    return block * (1 << ((clients // block).bit_length() - 1))


class SumTree:
    """The per-block partial accumulators of a round added along the aligned binary tree over the block
    numbers: node ``[j 2^m, (j+1) 2^m)`` = left half + right half, a node whose right half lies past the
    round's last block is its left half. :meth:`push` takes complete subtrees (a block is level 0) in
    order and adds two as soon as they are the halves of one node, so at most one partial per level
    waits; :meth:`result` adds what waits from the right. The additions depend only on the number of
    blocks, not on how the blocks were grouped when pushed (a worker's chunk of ``2^m`` aligned blocks
    arrives as one subtree)."""

    def __init__(self, aggregator: Aggregator):
        self.aggregator = aggregator
        self.stack: list[tuple[int, int, dict]] = []  # (level, first block, partial), in block order

    def push(self, level: int, first: int, part: dict) -> None:
        while self.stack:
            lv, f, left = self.stack[-1]
            if not (lv == level and f + (1 << level) == first and f % (2 << level) == 0):
                break
            self.stack.pop()
            self.aggregator.merge(left, part)
            level, first, part = level + 1, f, left
        self.stack.append((level, first, part))

    def extend(self, entries: list[tuple[int, int, dict]]) -> None:
        for level, first, part in entries:
            self.push(level, first, part)

    def result(self) -> dict | None:
        """The sum of everything pushed (None if nothing was); the tree is empty afterwards."""
        if not self.stack:
            return None
        *_, total = self.stack.pop()
        while self.stack:
            *_, left = self.stack.pop()
            self.aggregator.merge(left, total)
            total = left
        return total


class BlockFold:
    """Folds a round's rows into the round's accumulator ``acc``: through :class:`SumTree` in blocks of
    ``block`` rows when the strategy :meth:`~Aggregator.splits_sums`, else row by row as they come.
    :meth:`add` takes the updates of consecutive rows (a chunk; it may end inside a block, whose partial
    waits for the next chunk), :meth:`add_sums` the subtrees a worker summed (:func:`fold_sums`);
    :meth:`finish` adds the tree's total into ``acc``."""

    def __init__(self, aggregator: Aggregator, acc: dict, n_rows: int, ctx: RoundContext, block: int = SUM_BLOCK):
        self.aggregator, self.acc, self.n_rows, self.ctx, self.block = aggregator, acc, n_rows, ctx, block
        self.split = aggregator.splits_sums()
        self.tree = SumTree(aggregator)
        self._open: dict | None = None  # the partial of a block that a chunk boundary cut

    def add(self, chunk: ClientUpdates, rows: slice) -> None:
        if not self.split:
            self.aggregator.accumulate(self.acc, chunk, rows, self.ctx)
            return
        for lo, hi, _ in block_pieces(rows.start, rows.stop, self.n_rows, self.block):
            first = lo - lo % self.block
            end = min(self.n_rows, first + self.block)
            if self._open is None:
                if lo != first:
                    raise RuntimeError(f"rows {lo}:{hi} continue a block that was not started")
                self._open = self.aggregator.partial(self.acc, slice(first, end))
            piece = chunk.rows(lo - rows.start, hi - rows.start)
            self.aggregator.accumulate(self._open, piece, slice(lo - first, hi - first), self.ctx)
            if hi == end:
                self.tree.push(0, first // self.block, self._open)
                self._open = None

    def templates(self, rows: slice) -> list[tuple[int, int, int, dict | None]]:
        """For a chunk of rows ``rows`` sent to a worker, per piece (:func:`block_pieces`): its rows
        within the chunk, its block number and a fresh partial for a complete block (None for a piece
        of a block cut by the chunk's edge, which comes back as rows)."""
        return [
            (lo - rows.start, hi - rows.start, lo // self.block, self.aggregator.partial(self.acc, slice(lo, hi)))
            if whole
            else (lo - rows.start, hi - rows.start, lo // self.block, None)
            for lo, hi, whole in block_pieces(rows.start, rows.stop, self.n_rows, self.block)
        ]

    def add_sums(self, entries: list[tuple[int, int, dict]]) -> None:
        if self._open is not None:
            raise RuntimeError("a worker's block sums arrived while a block was still open")
        self.tree.extend(entries)

    def finish(self) -> None:
        if not self.split:
            return
        if self._open is not None:
            raise RuntimeError("the round ended inside a block")
        total = self.tree.result()
        if total is not None:
            self.aggregator.merge(self.acc, total)


def fold_sums(aggregator: Aggregator, chunk: ClientUpdates, templates: list, ctx: RoundContext) -> list:
    """A worker's side of :class:`BlockFold`: the chunk's complete blocks (those with a partial in
    ``templates``) summed into :class:`SumTree` subtrees; the rows of cut blocks are left to the driver.
    Returns the pieces in order: ``("sums", [(level, first block, partial), ...])`` for a run of
    complete blocks, ``("rows", lo, hi)`` for rows (within the chunk) that the driver folds itself."""
    out, tree = [], SumTree(aggregator)
    for lo, hi, b, part in templates:
        if part is None:
            if tree.stack:
                out.append(("sums", tree.stack))
                tree = SumTree(aggregator)
            out.append(("rows", lo, hi))
        else:
            aggregator.accumulate(part, chunk.rows(lo, hi), slice(0, hi - lo), ctx)
            tree.push(0, b, part)
    if tree.stack:
        out.append(("sums", tree.stack))
    return out
