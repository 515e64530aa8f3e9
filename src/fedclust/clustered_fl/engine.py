"""Vectorized engine for clustered federated learning (IFCA, CFL-MGD, FedAvg, and RR-Cluster later).

One communication round ``t = 1..T`` (spec 004, section 2.4, one time index per round):

1. ``lr_t = lr * lr_decay**(t-1)``; the server samples a fixed-size set ``M_t`` of ``round(q*m)``
   clients without replacement (stream ``"sampling"`` of :mod:`fedclust.rng`; spec 002, 2.8;
   ``sampling="poisson"`` is the alternative).
2. **Cluster estimation** (spec 004 eq. 8): every sampled client evaluates the loss of all ``k``
   current cluster models on its local training data, in ONE batched forward
   (:meth:`~fedclust.clustered_fl.models.BatchedModel.forward_shared`), and picks the argmin; ties go
   to the lowest index (``torch.argmin`` returns the first minimum).
3. **Local update**, all sampled clients at once, from the chosen model ``chi_{p_i}`` and the chosen
   cluster's server-side momentum ``u_{p_i}`` (spec 004, 2.4 and ambiguity 5):

   * ``local_update="model"`` (Option II, eq. 4 / Alg. 1 lines 19-21): ``H`` heavy-ball steps
     ``u <- beta*u + grad phi_i(w; batch)``; ``w <- w - lr_t*u`` (u computed first; no dampening, no
     Nesterov: the same as ``torch.optim.SGD(momentum=beta)`` with the buffer injected);
   * ``local_update="gradient"`` (Option I, eq. 3): ``u_i = beta*u_{p_i} + grad phi_i(chi_{p_i})``.

   Parameters of the k models are gathered per client into stacked tensors ``(S, ...)`` and trained
   with :meth:`~fedclust.clustered_fl.models.BatchedModel.forward_paired` (``torch.baddbmm`` or
   ``vmap(functional_call)``); per-client gradients come from
   :meth:`~fedclust.clustered_fl.models.BatchedModel.loss_and_grad` (one ``autograd.grad`` of the
   summed per-client losses, or the MLP's hand-written batched backward). There is no Python loop
   over clients.
4. **Server aggregation**: a replaceable :class:`Aggregator` receives the :class:`ClientUpdates`
   (sampled ids, chosen clusters, start and trained parameters, momentum) and returns the new cluster
   models and momentum buffers. Built in, all with segment sums (``index_add_``) and "an empty cluster
   keeps its model and momentum" (spec 004, 2.4 [A]):

   * :class:`ModelAveraging` (eq. 6): ``chi_p = mean_{i in S_p} chi~_i``, ``u_p = mean_{i in S_p} u_i``;
   * :class:`GradientAveraging` (eq. 5): ``chi_p <- chi_p - (lr_t/m) sum_{i in S_p} u_i`` with ``m`` the
     TOTAL number of clients (spec 004, 6.1 item 4), ``u_p = mean u_i``;
   * :class:`DeltaAveraging`: ``chi_p <- chi_p + gamma * (sum_{i in S_p} clip(Delta_i) [+ noise]) / |S_p|``
     with hooks :meth:`Aggregator.groups` (privatize / reassign / rebalance the identifiers),
     :meth:`DeltaAveraging.clip_deltas` and :meth:`DeltaAveraging.privatize_sums` (add noise to the
     per-cluster sums). This is the shape of RR-Cluster's server (spec 002, Alg. 1 lines 7-13); a
     private strategy records its releases in ``ctx.dp_events`` or returns them from
     :meth:`Aggregator.finish`.

5. **Evaluation** (spec 004, 4.4) every ``eval_every`` rounds: training loss (min over clusters,
   mean over clients), pooled test accuracy where every test client uses its lowest-loss model on its
   own data (:func:`fedclust.metrics.pooled_accuracy`), client-clustering ACC/NMI against the true
   groups (:func:`fedclust.metrics.client_clustering_scores`) and the cluster sizes used by the server.
   By default (``train_eval="sampled"``) the train-side metrics come for free from step 2 on the
   round's sampled clients (IFCA's CIFAR code does the same); ``train_eval="all"`` re-evaluates every
   training client after the update. The final result always has the assignment of all clients.

Data come in as :class:`FederatedTensors`: padded per-client tensors ``(n_clients, n_max, d)`` with
the true per-client sample counts (padding is masked out of every loss).

**Memory** (issue 16): steps 2-4 hold parameter-sized tensors for every sampled client (start model,
trained model, gradient, momentum), so a round of S clients costs about S times one client's working
set. The engine therefore processes the sampled clients in chunks sized to ``max_chunk_mb``
(:func:`bytes_per_client`): the cluster estimate of all S clients first (an (S, k) loss table), then,
chunk by chunk, local training and the aggregator's running per-cluster sums
(:meth:`Aggregator.accumulate`). Minibatch draws are taken for all S clients in the unchunked order
(:class:`_DrawTape`), so a chunked round is the unchunked round up to the order of float additions.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedclust.clustered_fl.models import BatchedModel
from fedclust.metrics import client_clustering_scores, pooled_accuracy
from fedclust.rng import stream

logger = logging.getLogger(__name__)

__all__ = [
    "FederatedTensors", "ServerState", "ClientUpdates", "RoundContext", "Aggregation",
    "Aggregator", "ModelAveraging", "GradientAveraging", "DeltaAveraging",
    "segment_sum", "segment_counts", "segment_mean_keep", "client_norms",
    "client_model_losses", "assign_clusters", "local_train", "local_gradient",
    "ClusteredFLResult", "ClusteredFLEngine", "run_clustered_fl", "evaluate", "bytes_per_client",
    "DEFAULT_CHUNK_MB",
]

Params = dict[str, torch.Tensor]


# ================================================================================================
# Data
# ================================================================================================
def _flat_rows(split: str, X, y, client, n_clients, group):
    """Rows = samples (images flattened), labels and client ids of one split (``"train"``/``"test"``),
    checked to have one entry per row; ``n_clients`` defaults to ``len(group)`` or ``max(client)+1``."""
    X = np.asarray(X)
    X = X.reshape(X.shape[0], -1)
    y = np.asarray(y)
    client = np.asarray(client).astype(np.int64)
    if y.shape != (X.shape[0],) or client.shape != (X.shape[0],):
        raise ValueError(f"y_{split} and client_{split} must have one entry per row of X_{split}")
    if n_clients is None:
        n_clients = len(group) if group is not None else int(client.max()) + 1
    return X, y, client, int(n_clients)


def _pad_by_client(X: np.ndarray, y: np.ndarray, client: np.ndarray, n_clients: int):
    """Group rows by client into padded arrays (no loop over clients)."""
    keep = client >= 0
    X, y, client = X[keep], y[keep], client[keep]
    if client.size and client.max() >= n_clients:
        raise ValueError(f"client ids must be < n_clients={n_clients}, got max {client.max()}")
    counts = np.bincount(client, minlength=n_clients)
    order = np.argsort(client, kind="stable")
    cs = client[order]
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.arange(cs.size) - offsets[cs]
    n_max = max(int(counts.max(initial=0)), 1)
    Xp = np.zeros((n_clients, n_max) + X.shape[1:], dtype=X.dtype)
    yp = np.zeros((n_clients, n_max), dtype=y.dtype)
    Xp[cs, pos] = X[order]
    yp[cs, pos] = y[order]
    return Xp, yp, counts


@dataclass
class FederatedTensors:
    """Per-client padded data for the engine.

    * ``X_train`` (N, n_max, d) float, ``y_train`` (N, n_max) int64 labels (or float targets for
      regression), ``n_train`` (N,) true number of samples of each training client (rows past it are
      padding and never enter a loss);
    * ``X_test``/``y_test``/``n_test`` the same for the ``M`` test clients (optional);
    * ``group`` (N,) true group of every training client; ``test_group`` (M,) of every test client.
    """

    X_train: torch.Tensor
    y_train: torch.Tensor
    n_train: torch.Tensor
    X_test: torch.Tensor | None = None
    y_test: torch.Tensor | None = None
    n_test: torch.Tensor | None = None
    group: np.ndarray | None = None
    test_group: np.ndarray | None = None

    def __post_init__(self):
        if self.X_train.ndim != 3:
            raise ValueError(f"X_train must be (n_clients, n_max, d), got shape {tuple(self.X_train.shape)}")
        N, n_max = self.X_train.shape[:2]
        if tuple(self.y_train.shape) != (N, n_max):
            raise ValueError(f"y_train must be (n_clients, n_max) = {(N, n_max)}, got {tuple(self.y_train.shape)}")
        self.n_train = torch.as_tensor(self.n_train, dtype=torch.long)
        if tuple(self.n_train.shape) != (N,):
            raise ValueError(f"n_train must have one entry per client ({N}), got {tuple(self.n_train.shape)}")
        if (self.n_train < 0).any() or (self.n_train > n_max).any():
            raise ValueError(f"n_train entries must be in [0, n_max={n_max}]")
        if self.group is not None:
            self.group = np.asarray(self.group).astype(np.int64)
            if self.group.shape != (N,):
                raise ValueError(f"group must have one entry per training client ({N}), got {self.group.shape}")
        if self.X_test is not None:
            if self.X_test.ndim != 3 or self.X_test.shape[2] != self.X_train.shape[2]:
                raise ValueError("X_test must be (n_test_clients, m_max, d) with the same d as X_train")
            M = self.X_test.shape[0]
            self.n_test = torch.as_tensor(self.n_test, dtype=torch.long)
            if tuple(self.n_test.shape) != (M,):
                raise ValueError(f"n_test must have one entry per test client ({M})")
            if self.test_group is None and self.group is not None and M == N:
                self.test_group = self.group
            if self.test_group is not None:
                self.test_group = np.asarray(self.test_group).astype(np.int64)
        if not torch.isfinite(self.X_train).all():
            raise ValueError("X_train contains NaN or infinite values")

    @property
    def n_clients(self) -> int:
        return int(self.X_train.shape[0])

    @property
    def n_test_clients(self) -> int:
        return 0 if self.X_test is None else int(self.X_test.shape[0])

    @property
    def d(self) -> int:
        return int(self.X_train.shape[2])

    @classmethod
    def from_arrays(cls, X_train, y_train, client_train, X_test=None, y_test=None, client_test=None,
                    group=None, test_group=None, *, n_clients: int | None = None,
                    n_test_clients: int | None = None, dtype=torch.float32) -> "FederatedTensors":
        """Build from flat arrays, rows = samples (the layout of ``fedclust.partition.rotation``).

        ``client_train`` (n,) gives the training client of every row (-1 = unused); ``client_test``
        the test client of every test row. Images (n, H, W[, C]) are flattened. Integer ``y`` are class
        labels; float ``y`` are regression targets. ``n_clients`` defaults to ``len(group)`` or
        ``max(client_train)+1``.
        """
        X_train, y_train, client_train, n_clients = _flat_rows("train", X_train, y_train, client_train, n_clients,
                                                               group)
        if client_train.max(initial=-1) >= n_clients:
            raise ValueError(f"client_train has ids up to {client_train.max()} but there are only n_clients="
                             f"{n_clients} clients (the length of group when given)")
        is_cls = np.issubdtype(y_train.dtype, np.integer)
        ydt = torch.long if is_cls else dtype
        Xp, yp, cnt = _pad_by_client(X_train, y_train, client_train, int(n_clients))
        kw: dict[str, Any] = {}
        if X_test is not None:
            if y_test is None or client_test is None:
                raise ValueError("X_test needs y_test and client_test")
            X_test, y_test, client_test, n_test_clients = _flat_rows("test", X_test, y_test, client_test,
                                                                     n_test_clients, test_group)
            Xq, yq, cq = _pad_by_client(X_test, y_test, client_test, n_test_clients)
            kw = dict(X_test=torch.as_tensor(Xq, dtype=dtype), y_test=torch.as_tensor(yq, dtype=ydt),
                      n_test=torch.as_tensor(cq))
        return cls(X_train=torch.as_tensor(Xp, dtype=dtype), y_train=torch.as_tensor(yp, dtype=ydt),
                   n_train=torch.as_tensor(cnt), group=group, test_group=test_group, **kw)

    @classmethod
    def from_rotated(cls, data, dtype=torch.float32) -> "FederatedTensors":
        """From an object with the fields of ``fedclust.partition.rotation``'s ``RotatedData``
        (``X_train, y_train, client_train, X_test, y_test, client_test, group``)."""
        return cls.from_arrays(data.X_train, data.y_train, data.client_train, data.X_test, data.y_test,
                               data.client_test, data.group, getattr(data, "test_group", None), dtype=dtype)


def _mask(n: torch.Tensor, n_max: int) -> torch.Tensor:
    return torch.arange(n_max, device=n.device).unsqueeze(0) < n.unsqueeze(1)


# ================================================================================================
# Batched building blocks
# ================================================================================================
@torch.no_grad()
def client_model_losses(model: BatchedModel, params: Params, X: torch.Tensor, y: torch.Tensor,
                        n: torch.Tensor, *, with_correct: bool = False, max_rows: int = 1 << 16):
    """Loss of every one of the k models on every client's data, batched.

    ``X`` (C, n_max, d), ``y`` (C, n_max), ``n`` (C,) -> ``losses`` (C, k) (mean over each client's
    samples) and, with ``with_correct``, ``correct`` (C, k) numbers of correct predictions. Clients are
    processed in chunks of at most ``max_rows`` rows (memory bound), each chunk in one forward of all k
    models (:meth:`BatchedModel.forward_shared`).
    """
    C, n_max = X.shape[:2]
    k = next(iter(params.values())).shape[0]
    losses = torch.empty(C, k, dtype=X.dtype)
    correct = torch.empty(C, k, dtype=torch.long) if with_correct else None
    step = max(1, max_rows // max(n_max, 1))
    for a in range(0, C, step):  # memory chunks of many clients each (not one client at a time)
        b = min(C, a + step)
        Xc, yc, nc = X[a:b], y[a:b], n[a:b]
        c = b - a
        out = model.forward_shared(params, Xc.reshape(c * n_max, -1))  # (k, c*n_max, o)
        yk = yc.reshape(1, -1).expand(k, -1)
        m = _mask(nc, n_max).reshape(1, c, n_max).to(X.dtype)
        ls = model.sample_losses(out, yk).reshape(k, c, n_max)
        losses[a:b] = ((ls * m).sum(-1) / nc.clamp(min=1).to(X.dtype)).t()
        if with_correct:
            cr = model.correct(out, yk).reshape(k, c, n_max) & m.bool()
            correct[a:b] = cr.sum(-1).t()
    return losses, correct


def assign_clusters(losses: torch.Tensor) -> torch.Tensor:
    """argmin over models of (C, k) losses; ties go to the lowest index (first minimum)."""
    return torch.argmin(losses, dim=1)


class _Batcher:
    """Per-step (mini)batches for all sampled clients at once.

    ``batch_size=None``: full local batch every step. Otherwise every client draws ``batch_size`` of
    its own samples: per step without replacement (``epochs=None``), or from one fresh permutation
    per local epoch (``epochs`` given; IFCA's CIFAR protocol). Draws come from the numpy stream
    ``gen`` ("minibatch").
    """

    def __init__(self, X, y, n, batch_size, epochs, gen):
        self.X, self.y, self.n = X, y, n
        self.B, self.n_max = X.shape[0], X.shape[1]
        self.bs, self.epochs, self.gen = batch_size, epochs, gen
        self.full_mask = _mask(n, self.n_max).to(X.dtype)
        self.perm = None
        if batch_size is not None:
            self.per_epoch = math.ceil(self.n_max / batch_size)

    def _perm(self):
        keys = self.gen.random((self.B, self.n_max))
        keys[~_mask(self.n, self.n_max).numpy()] = np.inf  # padding goes last
        return torch.as_tensor(np.argsort(keys, axis=1, kind="stable"))

    def __call__(self, s: int):
        if self.bs is None or self.bs >= self.n_max:
            return self.X, self.y, self.full_mask, self.n
        if self.epochs is None:
            idx = self._perm()[:, : self.bs]
            nb = self.n.clamp(max=self.bs)
        else:
            j = s % self.per_epoch
            if j == 0:
                self.perm = self._perm()
            lo = j * self.bs
            idx = self.perm[:, lo: lo + self.bs]
            nb = (self.n - lo).clamp(min=0, max=self.bs)
        d = self.X.shape[2:]
        Xb = torch.gather(self.X, 1, idx.reshape(self.B, -1, *([1] * len(d))).expand(-1, -1, *d))
        yb = torch.gather(self.y, 1, idx)
        mb = _mask(nb, idx.shape[1]).to(self.X.dtype)
        return Xb, yb, mb, nb


class _DrawTape:
    """The minibatch draws of a whole round, shared by its chunks of clients.

    :class:`_Batcher` draws ``gen.random((B, n_max))`` keys (one row per client) per step or per epoch.
    An unchunked round draws them for all S sampled clients at once; a chunked round must consume the
    stream identically, so the first chunk that asks for draw ``j`` draws it for all S clients and every
    chunk reads its own rows. Memory: S x n_max doubles per draw (steps draws at most), small next to
    the padded data (S x n_max x d floats).
    """

    def __init__(self, gen: np.random.Generator, S: int):
        self.gen, self.S, self.draws = gen, S, []

    def view(self, rows: slice) -> "_TapeView":
        return _TapeView(self, rows)


class _TapeView:
    def __init__(self, tape: _DrawTape, rows: slice):
        self.tape, self.rows, self.j = tape, rows, 0

    def random(self, shape):
        t = self.tape
        if self.j == len(t.draws):
            t.draws.append(t.gen.random((t.S,) + tuple(shape[1:])))
        out = t.draws[self.j][self.rows]
        self.j += 1
        if out.shape != tuple(shape):
            raise RuntimeError(f"minibatch draw {self.j - 1}: a chunk asked for {tuple(shape)}, the tape holds {out.shape}")
        return out


#: Default memory budget of one chunk of clients (``max_chunk_mb=None``).
DEFAULT_CHUNK_MB = 1024.0


def bytes_per_client(model: BatchedModel, params: Params, n_max: int, d: int, *, beta: float = 0.0,
                     batch_size: int | None = None) -> int:
    """Estimated working memory of ONE sampled client in a round (bytes), used to size the chunks.

    Per client: the parameter-sized stacks of a round (start model, trained model, gradient, momentum
    and its start, the aggregator's delta and a temporary: 7 copies of the P parameters of one model,
    5 without momentum), its padded data gathered twice (the client's rows and the step's batch), and
    the activations of the local step (MLP: the widths of its layers; other models: 16 x d per sample,
    a generous guess for small CNNs) for the forward and backward pass. An estimate, not a bound: the
    allocator, BLAS buffers and the model's own temporaries come on top.
    """
    itemsize = next(iter(params.values())).element_size()
    k = next(iter(params.values())).shape[0]
    P = sum(int(v.numel()) for v in params.values()) // max(k, 1)
    copies = 7 if beta > 0 else 5
    rows = n_max if batch_size is None else min(batch_size, n_max)
    sizes = getattr(model, "sizes", None)
    width = int(sum(sizes[1:])) if sizes is not None else 16 * d
    return int(itemsize * (copies * P + (n_max + rows) * (d + 1) + 3 * rows * width))


def local_train(model: BatchedModel, params: Params, momentum: Params | None, X: torch.Tensor,
                y: torch.Tensor, n: torch.Tensor, *, steps: int, lr: float, beta: float = 0.0,
                batch_size: int | None = None, local_epochs: int | None = None,
                gen: np.random.Generator | None = None) -> tuple[Params, Params | None]:
    """``steps`` heavy-ball steps for all B clients at once (spec 004, Alg. 1 LocalUpdate):

    ``u <- beta*u + grad phi_b(w_b; batch_b)``; ``w_b <- w_b - lr*u`` (no dampening/Nesterov). With
    ``beta == 0`` this is plain (S)GD and the returned momentum is None. ``params``/``momentum`` are
    stacked (B, ...) and are not modified. A client whose batch is empty (only with ``local_epochs``
    and unequal sizes) skips that step.
    """
    w = {k: v.detach().clone() for k, v in params.items()}
    u = None
    if beta > 0:
        u = ({k: v.detach().clone() for k, v in momentum.items()} if momentum is not None
             else {k: torch.zeros_like(v) for k, v in params.items()})
    if batch_size is not None and gen is None:
        raise ValueError("local_train with batch_size needs a numpy Generator gen (stream 'minibatch')")
    batcher = _Batcher(X, y, n, batch_size, local_epochs, gen)
    for s in range(steps):
        Xb, yb, mb, nb = batcher(s)
        skip = (nb == 0)
        any_skip = bool(skip.any())
        if not any_skip and model.fused_step_(w, u, Xb, yb, mb, nb, lr, beta):
            continue  # the model did the whole step in place (same arithmetic, fewer memory passes)
        _, grads = model.loss_and_grad(w, Xb, yb, mb, nb)
        with torch.no_grad():
            for k, g in grads.items():
                if u is not None:
                    if any_skip:
                        keep = skip.reshape(-1, *([1] * (g.ndim - 1)))
                        u[k] = torch.where(keep, u[k], u[k] * beta + g)
                        w[k].sub_(torch.where(keep, torch.zeros_like(g), u[k]), alpha=lr)
                    else:
                        torch.add(g, u[k], alpha=beta, out=u[k])  # u <- beta*u + g (one pass)
                        w[k].sub_(u[k], alpha=lr)  # w <- w - lr*u
                else:
                    w[k].sub_(g, alpha=lr)  # g is 0 for an empty batch
    return w, u


def local_gradient(model: BatchedModel, params: Params, momentum: Params | None, X, y, n, *,
                   beta: float = 0.0, batch_size: int | None = None,
                   gen: np.random.Generator | None = None) -> Params:
    """Option I (spec 004 eq. 3 with the index fix of 2.4): ``u_i = beta*u_{p_i} + grad phi_i(chi_{p_i})``
    for all B clients at once (full local batch, or one minibatch of ``batch_size``)."""
    if batch_size is not None and gen is None:
        raise ValueError("local_gradient with batch_size needs a numpy Generator gen (stream 'minibatch')")
    Xb, yb, mb, nb = _Batcher(X, y, n, batch_size, None, gen)(0)
    _, grads = model.loss_and_grad(params, Xb, yb, mb, nb)
    out = {}
    for k, g in grads.items():
        out[k] = g if (beta == 0 or momentum is None) else momentum[k] * beta + g
    return out


# ================================================================================================
# Server side: segment sums and aggregation strategies
# ================================================================================================
def segment_sum(values: torch.Tensor, index: torch.Tensor, k: int) -> torch.Tensor:
    """Sum of the rows of ``values`` (S, ...) per segment ``index`` (S,) in [0, k): (k, ...)."""
    out = torch.zeros((k,) + tuple(values.shape[1:]), dtype=values.dtype)
    return out.index_add_(0, index, values)


def client_norms(values: Params) -> torch.Tensor:
    """(S,) L2 norm of every client's message over all parameters (for clipping, e.g. RR-Cluster)."""
    sq = None
    for v in values.values():
        t = v.reshape(v.shape[0], -1).pow(2).sum(1)
        sq = t if sq is None else sq + t
    return sq.sqrt()


def segment_counts(index: torch.Tensor, k: int) -> torch.Tensor:
    """(k,) number of rows in every segment."""
    return torch.bincount(index, minlength=k)


def segment_mean_keep(values: torch.Tensor, index: torch.Tensor, old: torch.Tensor,
                      counts: torch.Tensor | None = None) -> torch.Tensor:
    """Per-segment mean of ``values``; a segment with no rows keeps its row of ``old``."""
    k = old.shape[0]
    if counts is None:
        counts = segment_counts(index, k)
    sums = segment_sum(values, index, k)
    c = counts.to(values.dtype).reshape(-1, *([1] * (values.ndim - 1)))
    return torch.where(c > 0, sums / c.clamp(min=1), old)


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
            sums[name] = torch.zeros((k,) + tuple(values.shape[1:]), dtype=values.dtype)
        sums[name].index_add_(0, g, values)

    def _add_momentum(self, acc, chunk, g, k):
        if chunk.momentum is not None:
            for n, v in chunk.momentum.items():
                self._add(acc["mom"], n, v, g, k)

    @staticmethod
    def _momentum_end(state, acc):
        """``u_p = mean_{i in S_p} u_i`` (an empty cluster, or no momentum messages: kept)."""
        if not acc["mom"]:
            return state.momentum
        c = acc["counts"]
        out = {}
        for n, old in state.momentum.items():
            cc = c.to(old.dtype).reshape(-1, *([1] * (old.ndim - 1)))
            out[n] = torch.where(cc > 0, acc["mom"][n] / cc.clamp(min=1), old)
        return out

    @staticmethod
    def _momentum(state, updates, g, counts):
        if updates.momentum is None:
            return state.momentum
        return {n: segment_mean_keep(updates.momentum[n], g, state.momentum[n], counts) for n in state.momentum}


class ModelAveraging(Aggregator):
    """Option II / IFCA / FedAvg (spec 004 eq. 6): per-cluster mean of the clients' models and momenta."""

    name = "model_averaging"

    def supports_chunks(self):
        return type(self).__call__ is ModelAveraging.__call__

    def __call__(self, state, updates, ctx):
        return self._fold(state, updates, ctx)

    def begin(self, state, updates, ctx):
        return self._start(state, self.groups(updates, ctx), ctx.k)

    def accumulate(self, acc, chunk, rows, ctx):
        g = acc["g"][rows]
        for n, v in chunk.params.items():
            self._add(acc["sums"], n, v, g, ctx.k)
        self._add_momentum(acc, chunk, g, ctx.k)

    def end(self, state, acc, ctx):
        c, params = acc["counts"], {}
        for n, old in state.params.items():
            if n not in acc["sums"]:
                params[n] = old
                continue
            cc = c.to(old.dtype).reshape(-1, *([1] * (old.ndim - 1)))
            params[n] = torch.where(cc > 0, acc["sums"][n] / cc.clamp(min=1), old)
        return Aggregation(params, self._momentum_end(state, acc), acc["g"], c.numpy().copy())


class GradientAveraging(Aggregator):
    """Option I (spec 004 eq. 5): ``chi_p <- chi_p - (lr_t/norm) sum_{i in S_p} u_i``, ``u_p = mean u_i``.

    ``normalization="total"`` (spec: ``norm = m``, the total number of clients; the cluster step is
    then ``lr*|S_p|/m``) or ``"sampled"`` (``norm = |M_t|``; equal under full participation).
    """

    name = "gradient_averaging"

    def __init__(self, normalization: str = "total"):
        if normalization not in ("total", "sampled"):
            raise ValueError(f"normalization must be 'total' or 'sampled', got {normalization!r}")
        self.normalization = normalization

    def supports_chunks(self):
        return type(self).__call__ is GradientAveraging.__call__

    def __call__(self, state, updates, ctx):
        if updates.momentum is None:
            raise ValueError("GradientAveraging needs the clients' momentum/gradient messages (local_update='gradient')")
        return self._fold(state, updates, ctx)

    def begin(self, state, updates, ctx):
        return self._start(state, self.groups(updates, ctx), ctx.k)

    def accumulate(self, acc, chunk, rows, ctx):
        if chunk.momentum is None:
            raise ValueError("GradientAveraging needs the clients' momentum/gradient messages (local_update='gradient')")
        self._add_momentum(acc, chunk, acc["g"][rows], ctx.k)

    def end(self, state, acc, ctx):
        norm = ctx.n_clients if self.normalization == "total" else ctx.n_sampled
        params = {n: (state.params[n] - (ctx.lr / norm) * acc["mom"][n]) if n in acc["mom"] else state.params[n]
                  for n in state.params}  # empty cluster: the sum is 0, so the model is kept
        return Aggregation(params, self._momentum_end(state, acc), acc["g"], acc["counts"].numpy().copy())


class DeltaAveraging(Aggregator):
    """``chi_p <- chi_p + server_lr * privatize(sum_{i in S_p} clip(Delta_i)) / |S_p|`` (empty: kept).

    With the default hooks (no clip, no noise, the clients' own choices) and ``server_lr=1`` this
    equals :class:`ModelAveraging`. RR-Cluster (spec 002, Alg. 1 lines 7-13) overrides
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

    def supports_chunks(self):
        return type(self).__call__ is DeltaAveraging.__call__

    def __call__(self, state, updates, ctx):
        return self._fold(state, updates, ctx)

    def begin(self, state, updates, ctx):
        return self._start(state, self.groups(updates, ctx), ctx.k)

    def accumulate(self, acc, chunk, rows, ctx):
        g = acc["g"][rows]
        for n, v in self.clip_deltas(chunk.deltas(), chunk, ctx).items():
            self._add(acc["sums"], n, v, g, ctx.k)
        self._add_momentum(acc, chunk, g, ctx.k)

    def end(self, state, acc, ctx):
        counts = acc["counts"]
        sums = {n: acc["sums"][n] if n in acc["sums"] else torch.zeros_like(v) for n, v in state.params.items()}
        sums = self.privatize_sums(sums, counts, ctx)
        params = {}
        for n, old in state.params.items():
            c = counts.to(old.dtype).reshape(-1, *([1] * (old.ndim - 1)))
            params[n] = torch.where(c > 0, old + self.server_lr * sums[n] / c.clamp(min=1), old)
        return Aggregation(params, self._momentum_end(state, acc), acc["g"], counts.numpy().copy())


# ================================================================================================
# Evaluation
# ================================================================================================
def evaluate(model: BatchedModel, params: Params, data: FederatedTensors, *, train: bool = True,
             test: bool = True, test_select: str = "test", max_rows: int = 1 << 16) -> dict[str, Any]:
    """Full evaluation of k cluster models (spec 004, section 4.4).

    Returns a dict with (where applicable):

    * ``train_loss``: mean over ALL training clients of min_p (local loss under model p);
      ``assignment`` (N,) argmin cluster of every training client; ``client_ACC``/``client_NMI`` of
      that assignment against ``data.group``;
    * ``test_accuracy``: pooled over test images, every test client using its lowest-loss model on its
      own test data (``test_select="test"``) or on the training data of the training client with the
      same index (``"train"``); ``test_loss``: pooled mean loss under the chosen models;
      ``test_assignment`` (M,).
    """
    out: dict[str, Any] = {}
    tr_losses = None
    if train or (test and test_select == "train"):
        tr_losses, _ = client_model_losses(model, params, data.X_train, data.y_train, data.n_train, max_rows=max_rows)
    if train:
        a = assign_clusters(tr_losses)
        out["train_loss"] = float(tr_losses.min(dim=1).values.mean())
        out["assignment"] = a.numpy()
        if data.group is not None:
            out.update(client_clustering_scores(data.group, out["assignment"]))
    if test and data.X_test is not None:
        losses, correct = client_model_losses(model, params, data.X_test, data.y_test, data.n_test,
                                              with_correct=model.loss == "cross_entropy", max_rows=max_rows)
        if test_select == "train":
            if data.n_test_clients != data.n_clients:
                raise ValueError("test_select='train' needs one test client per training client")
            sel = tr_losses
        else:
            sel = losses
        choice = assign_clusters(sel)
        counts = data.n_test.to(losses.dtype)
        picked = losses[torch.arange(len(choice)), choice]
        out["test_loss"] = float((picked * counts).sum() / counts.sum().clamp(min=1))
        out["test_assignment"] = choice.numpy()
        if correct is not None:
            # pooled_accuracy picks the lowest-loss column of its first argument
            out["test_accuracy"] = pooled_accuracy(sel.numpy(), correct.numpy(), data.n_test.numpy())
        else:
            out["test_accuracy"] = float("nan")
        if data.test_group is not None:
            sc = client_clustering_scores(data.test_group, out["test_assignment"])
            out["test_client_ACC"], out["test_client_NMI"] = sc["client_ACC"], sc["client_NMI"]
    return out


# ================================================================================================
# The engine
# ================================================================================================
@dataclass
class ClusteredFLResult:
    """Output of a clustered-FL run.

    * ``params``/``momentum``: final stacked cluster models {name: (k, ...)} (see :meth:`state_dicts`);
    * ``assignment`` (N,): final argmin cluster of every training client; ``test_assignment`` (M,);
    * ``history``: per evaluated round, lists under ``"round"``, ``"lr"``, ``"train_loss"``,
      ``"test_accuracy"``, ``"test_loss"``, ``"client_ACC"``, ``"client_NMI"``, ``"cluster_sizes"``
      (list of k ints per round) and the aggregator's numeric info;
    * ``dp_events``: DP releases made (empty for the non-private methods);
    * ``info``: method, hyperparameters, init restarts, wall times per phase, final full evaluation.
    """

    params: Params
    momentum: Params
    assignment: np.ndarray
    test_assignment: np.ndarray | None
    history: dict[str, list]
    dp_events: list = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def state_dicts(self) -> list[dict[str, torch.Tensor]]:
        """One ``nn.Module``-style state dict per cluster model."""
        k = next(iter(self.params.values())).shape[0]
        return [{n: v[j].clone() for n, v in self.params.items()} for j in range(k)]

    def final_metrics(self) -> dict[str, float]:
        return {k: float(v[-1]) for k, v in self.history.items()
                if len(v) and isinstance(v[-1], (int, float, np.floating, np.integer))}


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


class ClusteredFLEngine:
    """Configured clustered-FL run on one data set; see the module docstring for a round.

    Parameters (validated up front; every error names the parameter):

    * ``k`` clusters (1 = FedAvg); ``rounds`` T; ``lr`` eta0 with ``lr_decay`` per round;
    * ``beta`` heavy-ball momentum in [0, 1) (0 = IFCA/FedAvg);
    * ``local_update`` ``"model"`` (Option II, H = ``local_steps`` steps) or ``"gradient"`` (Option I);
    * ``batch_size`` None = full local batch, else minibatches (``local_epochs`` given: epochs x
      ceil(n_max/batch_size) steps over per-epoch permutations, overriding ``local_steps``);
    * ``participation`` q (round(q*m) clients per round) or ``clients_per_round``; ``sampling``
      ``"fixed"`` (that many without replacement) or ``"poisson"`` (each client with probability q);
    * ``aggregator``: an :class:`Aggregator` (default :class:`ModelAveraging` for Option II,
      :class:`GradientAveraging` for Option I);
    * ``init_params``/``init_momentum``: start from given stacked tensors (else ``k`` independent random
      inits from stream "init"); ``init_min_fraction``: IFCA's restart heuristic (redraw the init until
      every cluster gets at least this fraction of a sampled set of clients under the initial argmin;
      IFCA used 0.35 for k=2 and 0.10 for k=4), at most ``init_max_restarts`` redraws;
    * ``eval_every`` evaluate every this many rounds (0 = only after the last round; the last round is
      always evaluated); ``train_eval`` ``"sampled"`` or ``"all"``; ``test_select`` ``"test"`` or
      ``"train"``; ``progress(round, record)`` optional callback;
    * ``max_chunk_mb`` memory budget (MB) of one chunk of sampled clients (None = ``DEFAULT_CHUNK_MB``,
      1024): the round's clients are evaluated, trained and folded into the aggregation
      ``chunk_clients`` at a time (:func:`bytes_per_client` sizes the chunk), so the memory of a round
      does not grow with the clients per round. Chunks consume the random streams exactly as one
      batch does; a chunked round equals the unchunked one up to float summation order. A round that
      fits in one chunk runs unchanged. An aggregator without the chunked protocol
      (:meth:`Aggregator.supports_chunks`), or an engine subclass with its own ``client_round``,
      still gets the whole round at once (a warning says the budget is not kept).
    """

    def __init__(self, data: FederatedTensors, model: BatchedModel, k: int, *, rounds: int = 300,
                 lr: float = 0.1, lr_decay: float = 1.0, beta: float = 0.0, local_update: str = "model",
                 local_steps: int = 10, batch_size: int | None = None, local_epochs: int | None = None,
                 participation: float = 0.1, clients_per_round: int | None = None, sampling: str = "fixed",
                 aggregator: Aggregator | None = None, seed: int = 0,
                 init_params: Params | None = None, init_momentum: Params | None = None,
                 init_min_fraction: float | None = None, init_max_restarts: int = 20,
                 eval_every: int = 1, train_eval: str = "sampled", test_select: str = "test",
                 max_rows: int = 1 << 16, max_chunk_mb: float | None = None, method: str = "clustered_fl",
                 progress: Callable[[int, dict], None] | None = None):
        if not isinstance(data, FederatedTensors):
            raise ValueError(f"data must be a FederatedTensors, got {type(data).__name__}")
        if not isinstance(model, BatchedModel):
            raise ValueError(f"model must be a BatchedModel, got {type(model).__name__}")
        if model.n_inputs != data.d:
            raise ValueError(f"model expects {model.n_inputs} input features but the data have d={data.d}")
        N = data.n_clients
        self.k = _num("k", k, 1, integer=True)
        self.rounds = _num("rounds", rounds, 1, integer=True)
        self.lr = _num("lr", lr, 0, lo_open=True)
        self.lr_decay = _num("lr_decay", lr_decay, 0, 1, lo_open=True)
        self.beta = _num("beta", beta, 0, 1, hi_open=True)
        if local_update not in _OPTIONS:
            raise ValueError(f"local_update must be one of 'model' (Option II) or 'gradient' (Option I), got {local_update!r}")
        self.local_update = _OPTIONS[local_update]
        self.local_steps = _num("local_steps", local_steps, 1, integer=True)
        self.batch_size = None if batch_size is None else _num("batch_size", batch_size, 1, integer=True)
        self.local_epochs = None if local_epochs is None else _num("local_epochs", local_epochs, 1, integer=True)
        if self.local_epochs is not None:
            if self.batch_size is None:
                raise ValueError("local_epochs needs a batch_size (minibatches per epoch)")
            self.local_steps = self.local_epochs * math.ceil(int(data.X_train.shape[1]) / self.batch_size)
        if clients_per_round is not None:
            self.S = _num("clients_per_round", clients_per_round, 1, N, integer=True)
        else:
            q = _num("participation", participation, 0, 1, lo_open=True)
            self.S = max(1, int(round(q * N)))
        self.participation = self.S / N
        if sampling not in ("fixed", "poisson"):
            raise ValueError(f"sampling must be 'fixed' or 'poisson', got {sampling!r}")
        if sampling == "poisson" and clients_per_round is not None:
            raise ValueError("sampling='poisson' takes participation (the rate q), not clients_per_round")
        self.sampling = sampling
        if self.k > self.S and init_min_fraction is not None:
            raise ValueError(f"init_min_fraction needs k <= clients per round ({self.S}), got k={self.k}")
        if aggregator is None:
            aggregator = GradientAveraging() if self.local_update == "gradient" else ModelAveraging()
        if not isinstance(aggregator, Aggregator):
            raise ValueError(f"aggregator must be an Aggregator, got {type(aggregator).__name__}")
        self.aggregator = aggregator
        self.seed = _num("seed", seed, 0, integer=True)
        if init_min_fraction is not None:
            init_min_fraction = _num("init_min_fraction", init_min_fraction, 0, 1.0 / self.k, lo_open=True)
        self.init_min_fraction = init_min_fraction
        self.init_max_restarts = _num("init_max_restarts", init_max_restarts, 0, integer=True)
        self.eval_every = _num("eval_every", eval_every, 0, integer=True)
        if train_eval not in ("sampled", "all"):
            raise ValueError(f"train_eval must be 'sampled' or 'all', got {train_eval!r}")
        if test_select not in ("test", "train"):
            raise ValueError(f"test_select must be 'test' or 'train', got {test_select!r}")
        self.train_eval, self.test_select = train_eval, test_select
        self.max_rows = _num("max_rows", max_rows, 1, integer=True)
        self.max_chunk_mb = DEFAULT_CHUNK_MB if max_chunk_mb is None else _num("max_chunk_mb", max_chunk_mb, 0,
                                                                               lo_open=True)
        self.chunk_clients: int | None = None  # set by init_state from the budget and the model size
        self._warned_unbounded = False
        self.data, self.model, self.method, self.progress = data, model, method, progress
        self.init_params, self.init_momentum = init_params, init_momentum
        self.rngs = {name: stream(self.seed, name) for name in ("init", "sampling", "minibatch", "noise")}
        self.dp_events: list = []
        self.timing = {"assign": 0.0, "local": 0.0, "aggregate": 0.0, "eval": 0.0}
        self.n_local_samples = 0  # sum over rounds and steps of the samples processed in local training

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
                logger.warning("IFCA restart heuristic: no init reached min fraction %.3f in %d redraws "
                               "(best %.3f); using the best", self.init_min_fraction, self.init_max_restarts, best_frac)
            if self.init_min_fraction is not None:
                params = best
                info["init_min_fraction_reached"] = best_frac
        if self.init_momentum is not None:
            momentum = self._check_stacked("init_momentum", self.init_momentum, params)
        else:
            momentum = {n: torch.zeros_like(v) for n, v in params.items()}
        self.init_info = info
        self._set_chunk(params)
        return ServerState(params=params, momentum=momentum, round=0)

    def _set_chunk(self, params: Params) -> None:
        per = bytes_per_client(self.model, params, int(self.data.X_train.shape[1]), self.data.d, beta=self.beta,
                               batch_size=self.batch_size)
        self.bytes_per_client = per
        self.chunk_clients = max(1, int(self.max_chunk_mb * 2**20 // per))

    def _losses(self, params: Params, clients: np.ndarray) -> torch.Tensor:
        """(len(clients), k) losses of every model on the given clients, gathering their data one chunk
        of ``chunk_clients`` at a time (the gathered copy of a round's data stays bounded)."""
        if self.chunk_clients is None:
            self._set_chunk(params)
        d, step = self.data, self.chunk_clients
        out = []
        for a in range(0, len(clients), step):
            idx = torch.as_tensor(clients[a:a + step], dtype=torch.long)
            out.append(client_model_losses(self.model, params, d.X_train[idx], d.y_train[idx], d.n_train[idx],
                                           max_rows=self.max_rows)[0])
        return torch.cat(out) if out else torch.zeros(0, self.k, dtype=d.X_train.dtype)

    def lr_at(self, t: int) -> float:
        """``lr * lr_decay**(t-1)`` for round t = 1..T."""
        return self.lr * self.lr_decay ** (t - 1)

    # --------------------------------------------------------------------------------------------
    def client_round(self, state: ServerState, clients: np.ndarray, lr: float) -> ClientUpdates:
        """Steps 2-3 for the given clients: batched cluster estimation, then batched local update."""
        d = self.data
        idx = torch.as_tensor(clients, dtype=torch.long)
        X, y, n = d.X_train[idx], d.y_train[idx], d.n_train[idx]
        t0 = time.perf_counter()
        # eq. (8): every client evaluates all k models on its local data, one batched forward
        losses, _ = client_model_losses(self.model, state.params, X, y, n, max_rows=self.max_rows)
        chosen = assign_clusters(losses)
        t1 = time.perf_counter()
        start = {k: v.index_select(0, chosen) for k, v in state.params.items()}
        mom0 = {k: v.index_select(0, chosen) for k, v in state.momentum.items()} if self.beta > 0 else None
        if self.local_update == "model":
            params, mom = local_train(self.model, start, mom0, X, y, n, steps=self.local_steps, lr=lr,
                                      beta=self.beta, batch_size=self.batch_size, local_epochs=self.local_epochs,
                                      gen=self.rngs["minibatch"])
            steps = self.local_steps
        else:
            mom = local_gradient(self.model, start, mom0, X, y, n, beta=self.beta, batch_size=self.batch_size,
                                 gen=self.rngs["minibatch"])
            params, steps = start, 1
        per_step = n if self.batch_size is None else n.clamp(max=self.batch_size)
        self.n_local_samples += int(per_step.sum()) * steps
        t2 = time.perf_counter()
        self.timing["assign"] += t1 - t0
        self.timing["local"] += t2 - t1
        return ClientUpdates(clients=clients, chosen=chosen, losses=losses, start_params=start, params=params,
                             momentum=mom, n_samples=n)

    def _chunked(self, n_sampled: int) -> bool:
        """Whether this round runs in chunks (more clients than one chunk, and a chunk-capable setup)."""
        if self.chunk_clients is None or n_sampled <= self.chunk_clients:
            return False
        ok = self.aggregator.supports_chunks() and type(self).client_round is ClusteredFLEngine.client_round
        if not ok and not self._warned_unbounded:
            logger.warning("max_chunk_mb=%g: %d clients per round need %d chunks, but %s cannot aggregate in "
                           "chunks; the round runs at once (its memory grows with the clients per round)",
                           self.max_chunk_mb, n_sampled, math.ceil(n_sampled / self.chunk_clients),
                           type(self.aggregator).__name__ if not self.aggregator.supports_chunks()
                           else type(self).__name__)
            self._warned_unbounded = True
        return ok

    def chunked_round(self, state: ServerState, clients: np.ndarray, lr: float,
                      ctx: RoundContext) -> tuple[ClientUpdates, Aggregation]:
        """Steps 2-4 in chunks of ``chunk_clients`` clients: (i) the cluster estimate of every sampled
        client (losses only, chunk by chunk), (ii) the aggregator's :meth:`~Aggregator.begin` with the
        round's choices, (iii) per chunk: gather its data, start models and momenta, local training
        (minibatch draws from the round's :class:`_DrawTape`), :meth:`~Aggregator.accumulate`; then
        :meth:`~Aggregator.end`. Peak memory: one chunk's working set plus the (S, k) losses."""
        d = self.data
        S = len(clients)
        t0 = time.perf_counter()
        losses = self._losses(state.params, clients)  # eq. (8), chunk by chunk
        chosen = assign_clusters(losses)
        n_all = d.n_train[torch.as_tensor(clients, dtype=torch.long)]
        updates = ClientUpdates(clients=clients, chosen=chosen, losses=losses, start_params={}, params={},
                                momentum=None, n_samples=n_all, chunked=True)
        t1 = time.perf_counter()
        self.timing["assign"] += t1 - t0
        acc = self.aggregator.begin(state, updates, ctx)
        self.timing["aggregate"] += time.perf_counter() - t1
        tape = _DrawTape(self.rngs["minibatch"], S)
        for a in range(0, S, self.chunk_clients):
            rows = slice(a, min(S, a + self.chunk_clients))
            t1 = time.perf_counter()
            idx = torch.as_tensor(clients[rows], dtype=torch.long)
            X, y, n = d.X_train[idx], d.y_train[idx], d.n_train[idx]
            ch = chosen[rows]
            start = {k: v.index_select(0, ch) for k, v in state.params.items()}
            mom0 = {k: v.index_select(0, ch) for k, v in state.momentum.items()} if self.beta > 0 else None
            if self.local_update == "model":
                params, mom = local_train(self.model, start, mom0, X, y, n, steps=self.local_steps, lr=lr,
                                          beta=self.beta, batch_size=self.batch_size, local_epochs=self.local_epochs,
                                          gen=tape.view(rows))
                steps = self.local_steps
            else:
                mom = local_gradient(self.model, start, mom0, X, y, n, beta=self.beta, batch_size=self.batch_size,
                                     gen=tape.view(rows))
                params, steps = start, 1
            per_step = n if self.batch_size is None else n.clamp(max=self.batch_size)
            self.n_local_samples += int(per_step.sum()) * steps
            t2 = time.perf_counter()
            chunk = ClientUpdates(clients=clients[rows], chosen=ch, losses=losses[rows], start_params=start,
                                  params=params, momentum=mom, n_samples=n)
            self.aggregator.accumulate(acc, chunk, rows, ctx)
            del chunk, params, mom, start, mom0, X, y
            self.timing["local"] += t2 - t1
            self.timing["aggregate"] += time.perf_counter() - t2
        t2 = time.perf_counter()
        agg = self.aggregator.end(state, acc, ctx)
        self.timing["aggregate"] += time.perf_counter() - t2
        return updates, agg

    def sample_clients(self) -> np.ndarray:
        """Sorted client ids of one round (stream "sampling"): a fixed-size uniform sample of
        ``round(q*m)`` clients without replacement (default; spec 002, 2.8), or Poisson sampling (every
        client independently with probability q; the number varies and may be 0)."""
        rng = self.rngs["sampling"]
        if self.sampling == "poisson":
            return np.flatnonzero(rng.random(self.data.n_clients) < self.participation)
        return np.sort(rng.choice(self.data.n_clients, self.S, replace=False))

    def step(self, state: ServerState) -> tuple[ServerState, ClientUpdates, Aggregation]:
        """One full communication round; returns the new state, the client updates and the aggregation."""
        t = state.round + 1
        lr = self.lr_at(t)
        clients = self.sample_clients()
        if len(clients) == 0:  # Poisson sampling drew nobody: nothing is sent, nothing changes
            empty = {k: v[:0] for k, v in state.params.items()}
            updates = ClientUpdates(clients=clients, chosen=torch.zeros(0, dtype=torch.long),
                                    losses=torch.zeros(0, self.k), start_params=empty, params=empty,
                                    momentum=None, n_samples=torch.zeros(0, dtype=torch.long))
            agg = Aggregation(state.params, state.momentum, updates.chosen, np.zeros(self.k, dtype=np.int64))
            return ServerState(params=state.params, momentum=state.momentum, round=t), updates, agg
        ctx = RoundContext(round=t, lr=lr, k=self.k, n_clients=self.data.n_clients, n_sampled=len(clients),
                           beta=self.beta, rngs=self.rngs, dp_events=self.dp_events)
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

    def _record(self, history, t, lr, state, updates, agg):
        t0 = time.perf_counter()
        rec: dict[str, Any] = {"round": t, "lr": lr}
        ev = evaluate(self.model, state.params, self.data, train=self.train_eval == "all", test=True,
                      test_select=self.test_select, max_rows=self.max_rows)
        if self.train_eval == "all":
            rec["train_loss"] = ev["train_loss"]
            rec["client_ACC"], rec["client_NMI"] = ev.get("client_ACC", float("nan")), ev.get("client_NMI", float("nan"))
        else:
            rec["train_loss"] = (float(updates.losses.min(dim=1).values.mean()) if len(updates.clients)
                                 else float("nan"))
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
        history: dict[str, list] = {k: [] for k in ("round", "lr", "train_loss", "test_accuracy", "test_loss",
                                                    "client_ACC", "client_NMI", "cluster_sizes")}
        for t in range(1, self.rounds + 1):
            lr = self.lr_at(t)
            state, updates, agg = self.step(state)
            if (self.eval_every and t % self.eval_every == 0) or t == self.rounds:
                rec = self._record(history, t, lr, state, updates, agg)
                logger.info("%s round %d/%d: train_loss=%.4f test_acc=%.4f client_ACC=%.3f sizes=%s",
                            self.method, t, self.rounds, rec["train_loss"], rec["test_accuracy"],
                            rec["client_ACC"], rec["cluster_sizes"])
                if self.progress is not None:
                    self.progress(t, rec)
        t0 = time.perf_counter()
        final = evaluate(self.model, state.params, self.data, train=True, test=True,
                         test_select=self.test_select, max_rows=self.max_rows)
        self.timing["final_eval"] = time.perf_counter() - t0
        self.dp_events.extend(self.aggregator.finish(self.rounds, self.data.n_clients, self.S))
        info = {
            "method": self.method, "k": self.k, "rounds": self.rounds, "lr": self.lr, "lr_decay": self.lr_decay,
            "beta": self.beta, "local_update": self.local_update, "local_steps": self.local_steps,
            "batch_size": self.batch_size, "clients_per_round": self.S, "sampling": self.sampling, "participation": self.participation,
            "n_clients": self.data.n_clients, "aggregator": self.aggregator.name, "seed": self.seed,
            "init": "given" if self.init_params is not None else (
                "random+ifca_restart" if self.init_min_fraction is not None else "random"),
            **self.init_info,
            "final": {k: v for k, v in final.items() if not isinstance(v, np.ndarray)},
            "timing": dict(self.timing), "wall_time": time.perf_counter() - wall0,
            "local_samples": self.n_local_samples,
            "max_chunk_mb": self.max_chunk_mb, "chunk_clients": self.chunk_clients,
            "chunks_per_round": math.ceil(self.S / self.chunk_clients) if self.chunk_clients else 1,
        }
        return ClusteredFLResult(params=state.params, momentum=state.momentum, assignment=final["assignment"],
                                 test_assignment=final.get("test_assignment"), history=history,
                                 dp_events=list(self.dp_events), info=info)


def run_clustered_fl(data: FederatedTensors, model: BatchedModel, k: int, **kwargs) -> ClusteredFLResult:
    """``ClusteredFLEngine(data, model, k, **kwargs).run()``."""
    return ClusteredFLEngine(data, model, k, **kwargs).run()
