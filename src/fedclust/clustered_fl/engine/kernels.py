"""Engine kernels: batched losses of k models on many clients, cluster estimation (eq. 8), minibatch
draws (:class:`_Batcher`, the round's :class:`_DrawTape`), batched local training (Options I and II),
the memory estimate of one client, and segment sums for the server."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from fedclust.clustered_fl.engine.data import GatheredParams, Params, _mask
from fedclust.clustered_fl.models import BatchedModel


@torch.no_grad()
def client_model_losses(
    model: BatchedModel,
    params: Params,
    X: torch.Tensor,
    y: torch.Tensor,
    n: torch.Tensor,
    *,
    with_correct: bool = False,
    max_rows: int = 1 << 16,
):
    """Loss of every one of the k models on every client's data, batched.

    ``X`` (C, n_max, d), ``y`` (C, n_max), ``n`` (C,) -> ``losses`` (C, k) (mean over each client's
    samples) and, with ``with_correct``, ``correct`` (C, k) numbers of correct predictions. Clients are
    processed in chunks of at most ``max_rows`` rows (memory bound), each chunk in one forward of all k
    models (:meth:`BatchedModel.forward_shared`).
    """
    C, n_max = X.shape[:2]
    first = next(iter(params.values()))
    k, dev = first.shape[0], first.device
    losses = torch.empty(C, k, dtype=X.dtype)
    correct = torch.empty(C, k, dtype=torch.long) if with_correct else None
    step = max(1, max_rows // max(n_max, 1))
    for a in range(0, C, step):  # memory chunks of many clients each (not one client at a time)
        b = min(C, a + step)
        # the data go to the models' device one chunk at a time; the (C, k) tables stay on the CPU
        Xc, yc, nc = X[a:b].to(dev), y[a:b].to(dev), n[a:b].to(dev)
        c = b - a
        out = model.forward_shared(params, Xc.reshape(c * n_max, -1))  # (k, c*n_max, o)
        yk = yc.reshape(1, -1).expand(k, -1)
        m = _mask(nc, n_max).reshape(1, c, n_max).to(X.dtype)
        ls = model.sample_losses(out, yk).reshape(k, c, n_max)
        losses[a:b] = ((ls * m).sum(-1) / nc.clamp(min=1).to(X.dtype)).t().cpu()
        if with_correct:
            cr = model.correct(out, yk).reshape(k, c, n_max) & m.bool()
            correct[a:b] = cr.sum(-1).t().cpu()
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
        self._valid = None  # the mask as a numpy array, for the draws' keys (made at the first draw)
        self.perm = None
        if batch_size is not None:
            self.per_epoch = math.ceil(self.n_max / batch_size)

    def _perm(self):
        return torch.as_tensor(self._sort(self.gen.random((self.B, self.n_max)))).to(self.X.device)

    def _sort(self, keys: np.ndarray) -> np.ndarray:
        """Every client's samples in the order of its keys (last axis), padding last."""
        if self._valid is None:
            self._valid = _mask(self.n, self.n_max).cpu().numpy()
        # padding goes last; a new array, since the keys may be a read-only view of the round's draws
        keys = np.where(self._valid, keys, np.inf)
        return np.argsort(keys, axis=-1, kind="stable")

    def __call__(self, s: int):
        if self.bs is None or self.bs >= self.n_max:
            return self.X, self.y, self.full_mask, self.n
        idx, nb = self.indices(s)
        # advanced indexing copies whole sample rows (gather with an index expanded over the features
        # reads one index per float and was a tenth of a training step)
        rows = torch.arange(self.B, device=idx.device).unsqueeze(1)
        Xb = self.X[rows, idx]
        yb = self.y[rows, idx]
        mb = _mask(nb, idx.shape[1]).to(self.X.dtype)
        return Xb, yb, mb, nb

    def all_indices(self, steps: int) -> list:
        """The minibatches of steps ``0..steps-1`` as indices, drawn in order (the same draws as calling
        the batcher per step): per step ``(idx, y, mask, n)`` with ``idx`` (B, b) the rows of ``X`` in
        the minibatch, or None (and ``y`` = all labels) for the full local batch. No sample rows are
        copied."""
        if self.bs is None or self.bs >= self.n_max:
            return [(None, self.y, self.full_mask, self.n) for _ in range(steps)]
        if self.epochs is None and isinstance(self.gen, np.random.Generator) and steps > 0:
            # all steps' keys in one call and one sort: the same numbers, in the same order, as one
            # (B, n_max) call per step (the generator fills an array in order)
            first = self._sort(self.gen.random((steps, self.B, self.n_max)))[:, :, : self.bs]
            nb = self.n.clamp(max=self.bs)
            drawn = [(i, nb) for i in torch.as_tensor(first).to(self.X.device).unbind(0)]
        else:
            drawn = [self.indices(s) for s in range(steps)]
        idx_all = torch.cat([i for i, _ in drawn], 1)
        y_all = self.y[torch.arange(self.B, device=self.X.device).unsqueeze(1), idx_all]  # one gather
        same = None
        if self.epochs is None:  # every step has the same sizes: one (n, mask) pair for all of them
            nb = drawn[0][1]
            same = (nb, _mask(nb, drawn[0][0].shape[1]).to(self.X.dtype))
        out, lo = [], 0
        for idx, nb in drawn:
            hi = lo + idx.shape[1]
            nb, mb = same if same is not None else (nb, _mask(nb, idx.shape[1]).to(self.X.dtype))
            out.append((idx, y_all[:, lo:hi], mb, nb))
            lo = hi
        return out

    def gather(self, drawn) -> tuple:
        """The batch ``(X, y, mask, n)`` of one step drawn by :meth:`all_indices` (its sample rows copied
        now, one step at a time, as :meth:`__call__` does)."""
        idx, yb, mb, nb = drawn
        if idx is None:
            return self.X, yb, mb, nb
        return self.X[torch.arange(self.B, device=idx.device).unsqueeze(1), idx], yb, mb, nb

    def indices(self, s: int):
        """Step ``s``'s minibatch: sample indices (B, b) into every client's rows and batch sizes (B,)."""
        if self.epochs is None:
            idx = self._perm()[:, : self.bs]
            nb = self.n.clamp(max=self.bs)
        else:
            j = s % self.per_epoch
            if j == 0:
                self.perm = self._perm()
            lo = j * self.bs
            idx = self.perm[:, lo : lo + self.bs]
            nb = (self.n - lo).clamp(min=0, max=self.bs)
        return idx, nb


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
            raise RuntimeError(
                f"minibatch draw {self.j - 1}: a chunk asked for {tuple(shape)}, the tape holds {out.shape}"
            )
        return out


#: Default memory budget of one chunk of clients (``max_chunk_mb=None``). The estimate below leaves out
#: the allocator's slack and the model's temporaries, so a chunk's working set runs above it; with 256 MB
#: (and the engine's 16,384-row evaluation blocks) a round of 10,000 clients of an MLP 784-200-10 peaked
#: at 1.7-1.9 GB, of which 1.66 GB are the data (``benchmarks/bench_cfl_memory.py``).
DEFAULT_CHUNK_MB = 256.0


def bytes_per_client(
    model: BatchedModel,
    params: Params,
    n_max: int,
    d: int,
    *,
    beta: float = 0.0,
    batch_size: int | None = None,
    extra_copies: int = 0,
) -> int:
    """Estimated working memory of ONE sampled client in a round (bytes), used to size the chunks.

    Per client: the parameter-sized stacks of a round (start model, trained model, gradient, momentum
    and its start, the aggregator's delta and a temporary: 7 copies of the P parameters of one model,
    5 without momentum, plus the aggregator's ``extra_copies``: a clipping aggregator's deltas and
    their clipped copies), its padded data gathered twice (the client's rows and the step's batch), and
    the activations of the local step (MLP: the widths of its layers; other models: 16 x d per sample,
    a generous guess for small CNNs) for the forward and backward pass, and with plain SGD on a model
    that defers its first layer's updates (the MLP) the deferred update's tables over the client's
    samples (``X X^T`` and two (n_max, hidden) matrices). An estimate, not a bound: the allocator,
    BLAS buffers and the model's own temporaries come on top.
    """
    itemsize = next(iter(params.values())).element_size()
    k = next(iter(params.values())).shape[0]
    P = sum(int(v.numel()) for v in params.values()) // max(k, 1)
    copies = (7 if beta > 0 else 5) + int(extra_copies)
    rows = n_max if batch_size is None else min(batch_size, n_max)
    sizes = getattr(model, "sizes", None)
    width = int(sum(sizes[1:])) if sizes is not None else 16 * d
    defers = beta == 0 and sizes is not None and bool(model.deferred_keys())
    deferred = n_max * n_max + 2 * n_max * int(sizes[1]) if defers else 0
    return int(itemsize * (copies * P + (n_max + rows) * (d + 1) + 3 * rows * width + deferred))


@dataclass(frozen=True)
class LocalTraining:
    """The settings of :func:`local_train`: ``steps`` heavy-ball steps of step size ``lr`` with
    momentum ``beta``, minibatches of ``batch_size`` (None: the full local batch) over
    ``local_epochs`` epochs (None: independent draws per step), clients trained in blocks of
    ``client_block`` (None: all at once), first-layer updates deferred when ``defer_updates``."""

    steps: int
    lr: float
    beta: float = 0.0
    batch_size: int | None = None
    local_epochs: int | None = None
    client_block: int | None = None
    defer_updates: bool = True


def local_train(
    model: BatchedModel,
    params: Params,
    momentum: Params | None,
    X: torch.Tensor,
    y: torch.Tensor,
    n: torch.Tensor,
    settings: LocalTraining,
    gen: np.random.Generator | None = None,
) -> tuple[Params, Params | None]:
    """``settings.steps`` heavy-ball steps for all B clients at once (the LocalUpdate of CFL-MGD's
    Algorithm 1), minibatch draws from ``gen``:

    ``u <- beta*u + grad phi_b(w_b; batch_b)``; ``w_b <- w_b - lr*u`` (no dampening/Nesterov). With
    ``beta == 0`` this is plain (S)GD and the returned momentum is None. ``params``/``momentum`` are
    stacked (B, ...) and are not modified. A client whose batch is empty (only with ``local_epochs``
    and unequal sizes) skips that step.

    ``client_block`` (None: all B at once) trains the clients in blocks of that many, every block
    through all its steps before the next (client-major loop order): a block's weights, momenta and
    activations then stay in the CPU cache across its steps instead of streaming all B clients'
    weights through memory at every step. Minibatch draws come from one :class:`_DrawTape` of the B
    clients, so every client gets the draws it would get with all B at once.

    ``defer_updates`` (default; plain SGD only, models with :meth:`~BatchedModel.deferred_steps_`,
    i.e. the MLP): the minibatches of all steps are drawn first and the model runs them with its first
    layer's updates deferred to one product, when its cost model says that saves work
    (:meth:`~fedclust.clustered_fl.models.MLP.deferred_plan`). Same mathematics; the float results
    differ from the step-by-step path (``defer_updates=False``) in the last bits.

    ``params`` given as :class:`~fedclust.clustered_fl.engine.data.GatheredParams` ``(models, index)``
    says that the clients start from few distinct models (a round of IFCA: k cluster models, ``index``
    the clusters the clients chose). The deferred path then reads each distinct start once instead of
    every client's copy (:meth:`~fedclust.clustered_fl.models.MLP.deferred_steps_`), and the copies it
    does not read are never made; the results are the same bits as with the copies.
    """
    B = int(X.shape[0])
    client_block, beta = settings.client_block, settings.beta
    blk = B if client_block is None or client_block >= B else max(1, int(client_block))
    defer = bool(settings.defer_updates) and beta == 0
    # the deferred path replaces these without writing into them: no copy needed (one pass less)
    borrowed = set(model.deferred_keys()) if (defer and blk >= B) else set()
    w = _Borrowing(params)  # borrowed entries: the caller's, read (gathered) only if the path needs them
    for k in params:
        if k not in borrowed:
            w[k] = params[k].detach().clone()
    u = None
    if beta > 0:
        u = (
            {k: v.detach().clone() for k, v in momentum.items()}
            if momentum is not None
            else {k: torch.zeros_like(v) for k, v in params.items()}
        )
    if settings.batch_size is not None and gen is None:
        raise ValueError("local_train with batch_size needs a numpy Generator gen (stream 'minibatch')")
    starts = (params.models, params.index) if isinstance(params, GatheredParams) else None
    if starts is not None and int(starts[1].shape[0]) != B:
        raise ValueError(f"local_train: the start models' index has {int(starts[1].shape[0])} entries for {B} clients")
    if blk >= B:
        _train_steps(model, w, u, (X, y, n), settings, gen, defer, borrowed, starts)
        return {k: w[k] for k in params}, u  # every entry set by now; the caller's order
    tape = _DrawTape(gen, B) if gen is not None else None
    for a in range(0, B, blk):
        r = slice(a, min(B, a + blk))
        # slices along the client axis of contiguous stacks are contiguous views: trained in place
        wb = {k: v[r] for k, v in w.items()}
        ub = None if u is None else {k: v[r] for k, v in u.items()}
        sb = None if starts is None else (starts[0], starts[1][r])
        _train_steps(
            model, wb, ub, (X[r], y[r], n[r]), settings, tape.view(r) if tape is not None else None, defer, (), sb
        )
        for k, v in wb.items():
            if v.data_ptr() != w[k][r].data_ptr():  # replaced (deferred path), not updated in place
                w[k][r].copy_(v)
    return dict(w), u


class _Borrowing(dict):
    """The weights :func:`local_train` trains: its own copies, plus the caller's ``params`` entries
    that the deferred path reads without writing (:meth:`~BatchedModel.deferred_keys`), taken from
    ``params`` when first read. When ``params`` gathers the clients' start models on first read
    (:class:`~fedclust.clustered_fl.engine.data.GatheredParams`) and the deferred path reads the
    distinct starts instead, the clients' copies of those entries are never made."""

    def __init__(self, params):
        super().__init__()
        self._params = params

    def __missing__(self, k):
        v = self[k] = self._params[k].detach()
        return v


def _train_steps(model, w, u, data: tuple, settings: LocalTraining, gen, defer=False, borrowed=(), starts=None) -> None:
    """The steps of :func:`local_train` on one block of clients with training rows ``data`` =
    ``(X, y, n)``, updating ``w`` and ``u`` in place (the deferred path replaces ``w``'s entries
    instead; ``borrowed`` entries are the caller's and are copied before any in-place step;
    ``starts`` the block's shared starts, for the deferred path)."""
    X, y, n = data
    steps, lr, beta = settings.steps, settings.lr, settings.beta
    batcher = _Batcher(X, y, n, settings.batch_size, settings.local_epochs, gen)
    drawn = None
    if defer and u is None and model.deferred_keys():
        drawn = batcher.all_indices(steps)
        sizes = {id(d[3]): d[3] for d in drawn}.values()  # the steps often share one sizes tensor
        if not any(bool((nb == 0).any()) for nb in sizes) and model.deferred_steps_(w, X, drawn, lr, starts=starts):
            return
    for k in borrowed:
        w[k] = w[k].clone()
    for s in range(steps):
        Xb, yb, mb, nb = batcher(s) if drawn is None else batcher.gather(drawn[s])  # the same draws
        skip = nb == 0
        any_skip = bool(skip.any())
        if not any_skip and model.fused_step_(w, u, Xb, yb, mb, nb, lr, beta):
            continue  # the model did the whole step in place (same arithmetic, fewer memory passes)
        _, grads = model.loss_and_grad(w, Xb, yb, mb, nb)
        with torch.no_grad():
            for k, g in grads.items():
                if u is not None:
                    if any_skip:
                        keep = skip.reshape(-1, *([1] * (g.ndim - 1)))
                        u[k].copy_(torch.where(keep, u[k], u[k] * beta + g))
                        w[k].sub_(torch.where(keep, torch.zeros_like(g), u[k]), alpha=lr)
                    else:
                        torch.add(g, u[k], alpha=beta, out=u[k])  # u <- beta*u + g (one pass)
                        w[k].sub_(u[k], alpha=lr)  # w <- w - lr*u
                else:
                    w[k].sub_(g, alpha=lr)  # g is 0 for an empty batch


def local_gradient(
    model: BatchedModel,
    params: Params,
    momentum: Params | None,
    X,
    y,
    n,
    *,
    beta: float = 0.0,
    batch_size: int | None = None,
    gen: np.random.Generator | None = None,
) -> Params:
    """Option I: ``u_i = beta*u_{p_i} + grad phi_i(chi_{p_i})``
    for all B clients at once (full local batch, or one minibatch of ``batch_size``)."""
    if batch_size is not None and gen is None:
        raise ValueError("local_gradient with batch_size needs a numpy Generator gen (stream 'minibatch')")
    Xb, yb, mb, nb = _Batcher(X, y, n, batch_size, None, gen)(0)
    _, grads = model.loss_and_grad(params, Xb, yb, mb, nb)
    out = {}
    for k, g in grads.items():
        out[k] = g if (beta == 0 or momentum is None) else momentum[k] * beta + g
    return out


def segment_sum(values: torch.Tensor, index: torch.Tensor, k: int) -> torch.Tensor:
    """Sum of the rows of ``values`` (S, ...) per segment ``index`` (S,) in [0, k): (k, ...)."""
    out = torch.zeros((k,) + tuple(values.shape[1:]), dtype=values.dtype, device=values.device)
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
