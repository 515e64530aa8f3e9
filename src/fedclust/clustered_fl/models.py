"""Models for the clustered-FL engine, written for *batched* evaluation.

The engine never holds an ``nn.Module`` per client. A model here is a :class:`BatchedModel`: a
description of the parameters (names and shapes, the names of ``nn.Module.state_dict``) plus two
batched forward functions over *stacked* parameters (one leading axis for the copies):

* :meth:`BatchedModel.forward_paired` ``(params (B, ...), X (B, n, d)) -> (B, n, out)``: copy ``b``
  of the parameters on the inputs of client ``b`` (local training: every sampled client trains its
  own copy of the model it chose);
* :meth:`BatchedModel.forward_shared` ``(params (k, ...), X (N, d)) -> (k, N, out)``: all ``k``
  cluster models on the same inputs (cluster assignment and evaluation: every client evaluates every
  cluster model).

Per-client gradients come from one backward pass of the *sum* of the per-client losses: the copies
share nothing, so the gradient of the sum with respect to copy ``b`` is the gradient of client ``b``'s
own loss.

Models:

* :class:`MLP`: ``d_in -> hidden -> ... -> n_classes`` with ReLU (784-200-10 is the rotated-MNIST MLP
  of CFL-MGD and IFCA). Two implementations of the same function: ``impl="bmm"`` (hand-batched
  with ``torch.baddbmm``; ``forward_shared`` turns the first layer of all k models into one ``torch.mm``)
  and ``impl="vmap"`` (``torch.func.functional_call`` + ``torch.func.vmap`` over an ``nn.Sequential``).
  ``benchmarks/bench_cfl_engine.py`` measures both; ``bmm`` is the default because it was faster.
* :class:`ModuleModel`: any ``nn.Module`` factory, batched with ``functional_call`` + ``vmap``.
* :func:`ifca_cnn`: the 2-conv + 2-FC CIFAR network of CFL-MGD and IFCA (IFCA's TF CIFAR-10
  tutorial network: conv5x5-64, max-pool 3/2, LRN, conv5x5-64, LRN, max-pool 3/2, FC 384, FC 192,
  linear 10, with its truncated-normal init and the L2 weight decay 0.004 * 1/2 ||W||^2 on the two FC
  weight matrices, returned by :meth:`BatchedModel.penalty`).
* :class:`LinearRegression`: ``y = <x, w> (+ b)`` with the squared loss ``1/2 (y_hat - y)^2`` (a
  mixed-linear-regression sanity check; not in the papers).

Inputs are always flattened rows (``d`` features); models that need images reshape internally.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

__all__ = [
    "BatchedModel",
    "MLP",
    "ModuleModel",
    "IFCACNN",
    "ifca_cnn",
    "LinearRegression",
    "stack_module_params",
    "LOSSES",
]

#: loss kinds: per-sample cross-entropy on logits, or 1/2 squared error on a scalar output
LOSSES = ("cross_entropy", "squared")


def _torch_seeds(seed, k: int) -> list[int]:
    """k independent torch seeds from an int seed or a numpy Generator (stream "init")."""
    if isinstance(seed, np.random.Generator):
        rng = seed
    else:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an int >= 0 or a numpy Generator, got {seed!r}")
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x1F17]))
    return [int(s) for s in rng.integers(0, 2**62, size=k)]


def stack_module_params(factory: Callable[[], nn.Module], k: int, seed, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """Build ``k`` modules with independent random initializations and stack their parameters.

    Each module is built under its own torch seed (drawn from ``seed``), so the k models are
    independent draws of the module's own initializer; the global torch RNG is left untouched.
    """
    if k < 1:
        raise ValueError(f"k (number of models) must be >= 1, got {k}")
    states = []
    for s in _torch_seeds(seed, k):  # k model inits: a loop over models, not over clients
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s)
            mod = factory()
        states.append({n: p.detach().to(dtype) for n, p in mod.named_parameters()})
    return {n: torch.stack([st[n] for st in states]).contiguous() for n in states[0]}


class BatchedModel:
    """Base class: parameter layout + batched forward functions (see the module docstring)."""

    loss: str = "cross_entropy"
    n_outputs: int = 1
    n_inputs: int = 1

    def init(self, k: int, seed, dtype=torch.float32) -> dict[str, torch.Tensor]:
        """``k`` independently initialized copies, stacked: ``{name: (k, *shape)}``."""
        raise NotImplementedError

    def forward_paired(self, params: dict[str, torch.Tensor], X: torch.Tensor) -> torch.Tensor:
        """``params`` (B, ...) and ``X`` (B, n, d) -> outputs (B, n, n_outputs)."""
        raise NotImplementedError

    def forward_shared(self, params: dict[str, torch.Tensor], X: torch.Tensor) -> torch.Tensor:
        """``params`` (k, ...) and ``X`` (N, d) -> outputs (k, N, n_outputs)."""
        raise NotImplementedError

    def penalty(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Per-copy regularization added to the training loss, (B,), or None."""
        return None

    def flops_per_sample(self) -> dict[str, float] | None:
        """Multiply-add FLOPs (2 per MAC) per sample: ``{"forward", "train_step"}`` (None if unknown).

        ``train_step`` counts the forward pass plus the backward pass that the engine needs (no gradient
        with respect to the inputs).
        """
        return None

    def module(self) -> nn.Module | None:
        """A fresh ``nn.Module`` with the same parameter names (for state dicts and loop references)."""
        return None

    def per_client_loss(
        self, params: dict[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, n: torch.Tensor
    ) -> torch.Tensor:
        """(B,) training loss of copy b on client b's batch: mean over the ``mask``ed samples (``n`` of
        them) plus :meth:`penalty`."""
        ls = self.sample_losses(self.forward_paired(params, X), y)
        loss = (ls * mask).sum(-1) / n.clamp(min=1).to(ls.dtype)
        pen = self.penalty(params)
        return loss if pen is None else loss + pen

    def deferred_steps_(
        self, w: dict[str, torch.Tensor], X: torch.Tensor, steps: list, lr: float, starts: tuple | None = None
    ) -> bool:
        """Optional fast path: all plain-SGD steps in place (``X`` every client's samples, one ``(idx, y,
        mask, n)`` per step: ``idx`` the rows of the step's minibatch, None for all of them), with
        weight updates deferred where that saves work. False (nothing done) when not implemented.

        ``starts`` (optional) ``(models, index)``: the clients start from few distinct models, ``w``
        being ``{name: models[name][index]}``; a model may then read each distinct start once instead
        of every client's copy (same arithmetic)."""
        return False

    def deferred_keys(self) -> tuple[str, ...]:
        """Parameters that :meth:`deferred_steps_` reads and then replaces in ``w`` without modifying
        them in place (so the caller need not copy them first)."""
        return ()

    def fused_step_(
        self,
        w: dict[str, torch.Tensor],
        u: dict[str, torch.Tensor] | None,
        X: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        n: torch.Tensor,
        lr: float,
        beta: float,
    ) -> bool:
        """Optional fast path: one in-place heavy-ball step ``u <- beta*u + g; w <- w - lr*u`` (plain
        ``w <- w - lr*g`` when ``u`` is None). Return False when not implemented (the default)."""
        return False

    def loss_and_grad(
        self, params: dict[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, n: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Per-client losses (B,) and per-client gradients {name: (B, ...)} (contiguous).

        Default: one ``autograd.grad`` of the summed per-client losses (copies share nothing, so the
        gradient w.r.t. copy b is client b's own gradient). Subclasses may hand-write it.
        """
        w = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        loss = self.per_client_loss(w, X, y, mask, n)
        grads = torch.autograd.grad(loss.sum(), list(w.values()))
        return loss.detach(), {k: g.contiguous() for k, g in zip(w, grads)}

    # ---- losses -------------------------------------------------------------------------------
    def sample_losses(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample losses: ``out`` (..., n_outputs), ``y`` (...) -> (...)."""
        if self.loss == "cross_entropy":
            flat = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="none")
            return flat.reshape(y.shape)
        return 0.5 * (out.squeeze(-1) - y) ** 2

    @staticmethod
    def correct(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample 0/1 correctness of the argmax prediction (classification only)."""
        return out.argmax(-1) == y


# ------------------------------------------------------------------------------------------------
class MLP(BatchedModel):
    """ReLU MLP ``d_in -> hidden... -> n_classes`` with PyTorch's default ``nn.Linear`` init.

    Parameter names follow ``nn.Sequential(Linear, ReLU, Linear, ...)``: ``"0.weight"``, ``"0.bias"``,
    ``"2.weight"``, ... (weights stored as ``(out, in)`` like ``nn.Linear``).
    """

    def __init__(self, d_in: int = 784, hidden: int | Sequence[int] = 200, n_classes: int = 10, impl: str = "bmm"):
        if isinstance(hidden, (int, np.integer)):
            hidden = (int(hidden),)
        hidden = tuple(int(h) for h in hidden)
        for name, v in (("d_in", d_in), ("n_classes", n_classes)):
            if int(v) < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        if any(h < 1 for h in hidden):
            raise ValueError(f"hidden sizes must be >= 1, got {hidden}")
        if impl not in ("bmm", "vmap"):
            raise ValueError(f"impl must be 'bmm' or 'vmap', got {impl!r}")
        self.d_in, self.hidden, self.n_classes, self.impl = int(d_in), hidden, int(n_classes), impl
        self.n_inputs, self.n_outputs = self.d_in, self.n_classes
        self.loss = "cross_entropy"
        self.sizes = (self.d_in, *hidden, self.n_classes)
        self._layers = [str(2 * i) for i in range(len(self.sizes) - 1)]
        self._vmod = self.module()

    def module(self) -> nn.Module:
        layers: list[nn.Module] = []
        for i in range(len(self.sizes) - 1):
            layers.append(nn.Linear(self.sizes[i], self.sizes[i + 1]))
            if i < len(self.sizes) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    def init(self, k, seed, dtype=torch.float32):
        return stack_module_params(self.module, k, seed, dtype)

    def forward_paired(self, params, X):
        if self.impl == "vmap":
            return vmap(lambda p, x: functional_call(self._vmod, p, (x,)))(params, X)
        h = X
        last = len(self._layers) - 1
        for i, name in enumerate(self._layers):
            W, b = params[name + ".weight"], params[name + ".bias"]
            h = torch.baddbmm(b.unsqueeze(1), h, W.transpose(1, 2))
            if i < last:
                h = torch.relu(h)
        return h

    def forward_shared(self, params, X):
        if self.impl == "vmap":
            return vmap(lambda p: functional_call(self._vmod, p, (X,)))(params)
        W0, b0 = params["0.weight"], params["0.bias"]
        k, h0 = W0.shape[0], W0.shape[1]
        # first layer of all k models as ONE mm: X (N, d) @ [W0_1; ...; W0_k]^T (d, k*h0)
        h = (X @ W0.reshape(k * h0, -1).t()).reshape(X.shape[0], k, h0).transpose(0, 1) + b0.unsqueeze(1)
        last = len(self._layers) - 1
        if last == 0:
            return h
        h = torch.relu(h)
        for i, name in enumerate(self._layers[1:], start=1):
            W, b = params[name + ".weight"], params[name + ".bias"]
            h = torch.baddbmm(b.unsqueeze(1), h, W.transpose(1, 2))
            if i < last:
                h = torch.relu(h)
        return h

    def _forward_backward(self, params, X, y, mask, n):
        """Forward pass and the output-layer error of the hand-written backward (impl="bmm")."""
        hs = [X]
        h = X
        last = len(self._layers) - 1
        for i, name in enumerate(self._layers):
            h = torch.baddbmm(params[name + ".bias"].unsqueeze(1), h, params[name + ".weight"].transpose(1, 2))
            if i < last:
                h = torch.relu(h)
                hs.append(h)
        logp = torch.log_softmax(h, dim=-1)
        nl = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        scale = mask / n.clamp(min=1).to(X.dtype).unsqueeze(1)  # (B, n_max)
        loss = (nl * scale).sum(-1)
        dA = logp.exp_()  # softmax
        dA.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(nl, -1.0).unsqueeze(-1))
        dA.mul_(scale.unsqueeze(-1))  # d loss_b / d logits
        return hs, loss, dA

    def loss_and_grad(self, params, X, y, mask, n):
        """Hand-written backward for ``impl="bmm"`` (cross-entropy + ReLU layers).

        Weight gradients come out directly in the ``(out, in)`` layout of the weights as
        ``bmm(dA^T, h_prev)``, contiguous, and no gradient is formed for the inputs (autograd's
        gradient of ``W.transpose`` is a strided view that makes the in-place updates slow).
        """
        if self.impl != "bmm":
            return super().loss_and_grad(params, X, y, mask, n)
        with torch.no_grad():
            hs, loss, dA = self._forward_backward(params, X, y, mask, n)
            grads: dict[str, torch.Tensor] = {}
            for i in range(len(self._layers) - 1, -1, -1):
                name = self._layers[i]
                h_prev = hs[i]
                grads[name + ".weight"] = torch.bmm(dA.transpose(1, 2), h_prev)
                grads[name + ".bias"] = dA.sum(1)
                if i > 0:
                    dA = torch.bmm(dA, params[name + ".weight"]).mul_(h_prev > 0)
        return loss, {k: grads[k] for k in params}

    def fused_step_(self, w, u, X, y, mask, n, lr: float, beta: float) -> bool:
        """One heavy-ball step IN PLACE with the weight update fused into the gradient GEMM.

        ``u <- beta*u + dA^T h`` is one ``baddbmm_`` on the momentum (``beta=0``/``u is None``: ``w <- w -
        lr * dA^T h`` is one ``baddbmm_`` on the weights), so the gradient is never stored and the
        memory-bound update passes drop from three to one (or zero). Same arithmetic as
        :meth:`loss_and_grad` + ``u = beta*u + g; w -= lr*u``. Returns False (nothing done) for
        ``impl="vmap"``.
        """
        if self.impl != "bmm":
            return False
        with torch.no_grad():
            hs, _, dA = self._forward_backward(w, X, y, mask, n)
            for i in range(len(self._layers) - 1, -1, -1):
                name = self._layers[i]
                Wn, bn = name + ".weight", name + ".bias"
                h_prev = hs[i]
                dA_prev = torch.bmm(dA, w[Wn]).mul_(h_prev > 0) if i > 0 else None  # before W changes
                gb = dA.sum(1)
                if u is None:
                    w[Wn].baddbmm_(dA.transpose(1, 2), h_prev, beta=1.0, alpha=-lr)
                    w[bn].sub_(gb, alpha=lr)
                else:
                    u[Wn].baddbmm_(dA.transpose(1, 2), h_prev, beta=beta, alpha=1.0)
                    w[Wn].sub_(u[Wn], alpha=lr)
                    torch.add(gb, u[bn], alpha=beta, out=u[bn])
                    w[bn].sub_(u[bn], alpha=lr)
                dA = dA_prev
        return True

    def deferred_steps_(self, w, X, steps, lr: float, starts: tuple | None = None) -> bool:
        """All plain-SGD steps IN PLACE with the first layer's weight updates deferred to one product at
        the end (impl="bmm"; returns False, having changed nothing, otherwise or when deferring would
        cost more arithmetic than it saves, see :meth:`deferred_plan`).

        ``X`` (B, n_max, d) holds every client's samples; ``steps`` has one ``(idx, y, mask, n)`` per
        local step: ``idx`` (B, b) the rows of ``X`` in the step's minibatch (None: all n_max rows,
        the full local batch), ``y``/``mask`` (B, b) its labels and mask, ``n`` (B,) its sizes.

        Step t's update of the first weight matrix is ``-lr * D_t^T X_t`` (D_t the step's errors at
        the first layer's outputs), so its pre-activations are ``X_t W_0^T + b_t - lr * sum_{s<t}
        (X_t X_s^T) D_s``. Two ways to run that, the cheaper one chosen:

        * ``"samples"``: the sums run over the client's own samples: ``X W_0^T`` and ``X X^T`` once per
          client, step t reads its rows of both, and the errors of every step are added into one
          (n_max, hidden) matrix ``E`` at their samples' rows; at the end ``W = W_0 - lr E^T X``. Pays
          when the steps together draw more rows than the client holds (several passes over its data,
          or the full batch at every step): the first layer then costs about two products over the
          client's data instead of two per step.
        * ``"rows"``: the steps' rows stacked (``sum of batch sizes`` rows): one product for all steps'
          ``X_t W_0^T``, small (batch x batch) products for the corrections, one product at the end.

        Same mathematics as :meth:`fused_step_` step after step; floating-point results differ in the
        last bits. The big weight matrix is read twice and written once per local update instead of
        three passes per step.

        ``starts`` = ``(models, index)`` (clients that start from few distinct models, as in a round of
        IFCA: ``w`` holds ``models[name][index]``): the first products ``X_b W_0^T`` and the final
        ``W_0 - lr E^T X`` read each distinct start matrix once (the clients that share it multiplied
        together, see :func:`_start_products`) instead of every client's copy. Every client gets the
        bits of its own product, so the results are the same bits as without ``starts``.
        """
        if self.impl != "bmm" or not steps:
            return False
        n_max = int(X.shape[1])
        rows_total = sum(n_max if s[0] is None else int(s[0].shape[1]) for s in steps)
        plan = self.deferred_plan(n_max, rows_total)
        if plan is None:
            return False
        W0n, b0n = self._layers[0] + ".weight", self._layers[0] + ".bias"
        with torch.no_grad():
            shared = None
            if starts is not None:
                models, index = starts
                shared = _shared_starts((models[W0n], index), int(X.shape[0]))
            # with shared starts the clients' own copies of W_0 are never read (nor made, when ``w``
            # gathers them on first read: see local_train)
            tab = _DeferredTables.build(plan, X, None if shared else w[W0n], steps, shared)
            scales: dict = {}  # d loss / d logits per sample: mask / batch size, once per distinct (mask, n)
            lo = 0
            for t, (idx, yb, mb, nb) in enumerate(steps):
                hi = lo + (n_max if idx is None else int(idx.shape[1]))
                h, where = tab.first_layer(t, idx, lo, hi, w[b0n], lr)
                h, hs = self._upper_forward(w, h)
                dA = self._output_errors(h, yb, mb, nb, scales, X.dtype)
                dA = self._upper_backward_(w, dA, hs, lr)
                w[b0n].sub_(dA.sum(1), alpha=lr)
                tab.add_errors(dA, idx, where, lo, hi)
                lo = hi
            # out of place: the start weights may be the caller's (see deferred_keys)
            w[W0n] = tab.deferred_weight(lr)
        return True

    def _upper_forward(self, w, h):
        """The layers above the first from its pre-activations ``h``: the logits and the ReLU outputs
        ``hs`` (``hs[i]`` the input of layer i; ``hs[0]`` unused)."""
        L = len(self._layers)
        hs = [None]
        for i in range(L):
            if i > 0:
                name = self._layers[i]
                h = torch.baddbmm(w[name + ".bias"].unsqueeze(1), h, w[name + ".weight"].transpose(1, 2))
            if i < L - 1:
                h = torch.relu_(h)
                hs.append(h)
        return h, hs

    @staticmethod
    def _output_errors(h, yb, mb, nb, scales: dict, dtype):
        """d loss / d logits of cross-entropy at the logits ``h`` (``scales`` caches mask / batch size)."""
        key = (id(mb), id(nb))
        if key not in scales:
            sc = (mb / nb.clamp(min=1).to(dtype).unsqueeze(1)).unsqueeze(-1)
            scales[key] = (sc, torch.full_like(sc, -1.0))
        scale, minus_one = scales[key]
        dA = torch.softmax(h, dim=-1)
        dA.scatter_add_(-1, yb.unsqueeze(-1), minus_one)
        dA.mul_(scale)
        return dA

    def _upper_backward_(self, w, dA, hs, lr: float):
        """The SGD step of the layers above the first, IN PLACE, from the output errors ``dA``; returns
        the errors at the first layer's outputs."""
        for i in range(len(self._layers) - 1, 0, -1):
            Wn, bn = self._layers[i] + ".weight", self._layers[i] + ".bias"
            # the error below the ReLU, before W changes (one op: zero where the unit was off)
            dA_prev = torch.ops.aten.threshold_backward(torch.bmm(dA, w[Wn]), hs[i], 0.0)
            w[Wn].baddbmm_(dA.transpose(1, 2), hs[i], beta=1.0, alpha=-lr)
            w[bn].sub_(dA.sum(1), alpha=lr)
            dA = dA_prev
        return dA

    def deferred_plan(self, n_max: int, rows_total: int) -> str | None:
        """How :meth:`deferred_steps_` runs a local update of ``rows_total`` minibatch rows (over all
        steps) on clients of ``n_max`` samples: ``"samples"``, ``"rows"`` or None (step by step).

        Multiply-adds per client of the first layer (d inputs, h outputs, R = rows_total): step by step
        ``2 R d h`` (forward and weight gradient, and three passes over the weights per step);
        ``"rows"`` ``2 R d h + R^2 (d + h) / 2``; ``"samples"`` ``2 n d h + n^2 d + R n h``. The cheaper
        deferred way is taken when it needs at most 1.25 x the multiply-adds of the steps (the passes
        over the weights it saves pay for the rest).
        """
        if self.impl != "bmm":
            return None
        d, h = self.sizes[0], self.sizes[1]
        R, n = float(rows_total), float(n_max)
        step = 2 * R * d * h
        costs = {"samples": 2 * n * d * h + n * n * d + R * n * h, "rows": step + R * R * (d + h) / 2}
        best = min(costs, key=costs.get)
        return best if costs[best] <= 1.25 * step else None

    def deferred_keys(self) -> tuple[str, ...]:
        """Parameters that :meth:`deferred_steps_` only reads and then replaces (never modifies in place)."""
        return (self._layers[0] + ".weight",) if self.impl == "bmm" else ()

    def flops_per_sample(self):
        macs = [a * b for a, b in zip(self.sizes[:-1], self.sizes[1:])]
        fwd = 2.0 * sum(macs)
        # backward: weight gradients of every layer (2*MACs) + input gradients of every layer but the first
        bwd = 2.0 * sum(macs) + 2.0 * sum(macs[1:])
        return {"forward": fwd, "train_step": fwd + bwd}


# ------------------------------------------------------------------------------------------------
class _DeferredTables:
    """The first layer's tables of :meth:`MLP.deferred_steps_` under its ``plan``: ``"samples"``:
    ``P = X W_0^T``, ``G = X X^T`` and the per-sample error sums ``E`` (with flat views); ``"rows"``:
    the steps' rows ``Xall``, ``P = Xall W_0^T`` and their errors ``Dall``."""

    def __init__(self, plan: str, X, W0, shared=None, **tables):
        self.plan, self.X, self.W0, self.shared = plan, X, W0, shared
        self.B, self.n_max = int(X.shape[0]), int(X.shape[1])
        self.h0 = int((W0 if shared is None else shared[0]).shape[1])
        self.cl = torch.arange(self.B, device=X.device).unsqueeze(1)
        self.first_row = self.cl * self.n_max  # (B, 1): each client's first row in the flat tables
        for name, v in tables.items():
            setattr(self, name, v)

    @classmethod
    def build(cls, plan: str, X, W0, steps, shared=None) -> _DeferredTables:
        """The tables of ``plan`` for the clients' samples ``X`` at the start weights ``W0`` (``shared``:
        ``(Wk, index, distinct)`` of :func:`_shared_starts`, with ``W0 = Wk[index]``, which is then
        not read and may be None; see :func:`_start_products`)."""
        B, n_max = int(X.shape[0]), int(X.shape[1])
        h0 = int((W0 if shared is None else shared[0]).shape[1])
        if plan == "samples":
            P = _start_products(X, W0, shared)  # (B, n_max, h0): the first layer of every sample at W_0
            G = torch.bmm(X, X.transpose(1, 2)) if len(steps) > 1 else None  # (B, n_max, n_max)
            E = torch.zeros_like(P)  # the errors so far, summed per sample
            Gf = G.view(B * n_max, n_max) if G is not None else None
            Pf, Ef = P.view(B * n_max, h0), E.view(B * n_max, h0)
            return cls(plan, X, W0, shared, P=P, G=G, E=E, Pf=Pf, Ef=Ef, Gf=Gf)
        cl = torch.arange(B, device=X.device).unsqueeze(1)
        full = torch.arange(n_max, device=X.device).expand(B, n_max)
        idx_all = torch.cat([full if s[0] is None else s[0] for s in steps], 1)  # (B, rows_total)
        Xall = X[cl, idx_all]  # (B, rows_total, d): whole sample rows in one indexing
        P = _start_products(Xall, W0, shared)
        return cls(plan, X, W0, shared, Xall=Xall, P=P, Dall=torch.empty_like(P))

    def first_layer(self, t: int, idx, lo: int, hi: int, b0, lr: float):
        """Step t's first-layer pre-activations (its rows ``lo:hi`` of all steps' rows, or ``idx`` of
        the samples) with the earlier steps' deferred updates; and the flat sample rows it read
        (``"samples"`` with a minibatch, else None)."""
        if self.plan == "samples" and idx is None:  # the full batch: every sample, in order
            h = self.P + b0.unsqueeze(1)
            if t > 0:
                h.baddbmm_(self.G, self.E, alpha=-lr)
            return h, None
        if self.plan == "samples":  # the step's rows of X W0^T and X X^T (flat row numbers)
            where = (self.first_row + idx).reshape(-1)
            b = int(idx.shape[1])
            h = self.Pf.index_select(0, where).view(self.B, b, self.h0).add_(b0.unsqueeze(1))
            if t > 0:
                h.baddbmm_(self.Gf.index_select(0, where).view(self.B, b, self.n_max), self.E, alpha=-lr)
            return h, where
        h = self.P[:, lo:hi] + b0.unsqueeze(1)
        if lo > 0:  # the earlier steps' deferred updates, seen through this step's inputs
            Xb = self.Xall[:, lo:hi]
            h.baddbmm_(torch.bmm(Xb, self.Xall[:, :lo].transpose(1, 2)), self.Dall[:, :lo], alpha=-lr)
        return h, None

    def add_errors(self, dA, idx, where, lo: int, hi: int) -> None:
        """Keep step t's errors at the first layer's outputs for the later steps and the final update."""
        if self.plan == "rows":
            self.Dall[:, lo:hi] = dA
        elif idx is None:
            self.E.add_(dA)
        else:  # the step's rows of a client are distinct: one add per sample row
            self.Ef.index_add_(0, where, dA.reshape(-1, self.h0))

    def deferred_weight(self, lr: float):
        """The first weight matrix after all steps: ``W_0 - lr E^T X`` (or ``- lr Dall^T Xall``), out of
        place (with shared starts the copy of ``W_0`` is gathered from the few start matrices, which
        stay in cache, instead of read from every client's copy; the same values)."""
        D, Xs = (self.E, self.X) if self.plan == "samples" else (self.Dall, self.Xall)
        if self.shared is None:
            return torch.baddbmm(self.W0, D.transpose(1, 2), Xs, beta=1.0, alpha=-lr)
        Wk, index, _ = self.shared
        # what the out-of-place product does: the start weights copied into the result, then the
        # product added in place (one batched product, the same bits)
        return Wk.index_select(0, index).baddbmm_(D.transpose(1, 2), Xs, beta=1.0, alpha=-lr)


def _shared_starts(shared, B: int):
    """``(Wk, index, distinct starts)`` from ``shared`` = ``(Wk, index)`` when it pays to read each
    distinct start once (on average at least two clients per start), else None (every client's own
    copy is read)."""
    Wk, index = shared
    if int(index.shape[0]) != B:
        raise ValueError(f"shared starts: {int(index.shape[0])} indices for {B} clients")
    distinct = torch.unique(index)
    return (Wk, index, distinct.tolist()) if 2 * len(distinct) <= B else None


#: most rows of one product over the stacked rows of clients that share a start matrix (bounds the
#: copy of their rows that the product needs to a few MB)
STACK_ROWS = 4096


def _start_products(X, W0, shared):
    """``X_b W0_b^T`` of every client b: (B, rows, h). Without ``shared`` one batched product over the
    clients' own start matrices ``W0``; with ``shared`` = ``(Wk, index, distinct)`` (``W0_b =
    Wk[index_b]``) the products of the clients that start from the same matrix together, at most
    :data:`STACK_ROWS` rows at a time (:func:`_group_products`), each start matrix read once per such
    group (from cache) instead of once per client."""
    if shared is None:
        return torch.bmm(X, W0.transpose(1, 2))
    Wk, index, distinct = shared
    B, rows = int(X.shape[0]), int(X.shape[1])
    step = max(1, STACK_ROWS // max(rows, 1))
    if len(distinct) == 1 and B <= step:  # one start matrix: the clients' rows as they are
        return _group_products(X, Wk[distinct[0]])
    out = torch.empty(B, rows, int(Wk.shape[1]), dtype=X.dtype, device=X.device)
    for j in distinct:
        g = (index == j).nonzero().squeeze(1)
        for a in range(0, int(g.shape[0]), step):
            part = g[a : a + step]
            out.index_copy_(0, part, _group_products(X.index_select(0, part), Wk[j]))
    return out


#: (rows, d, h, clients, dtype, device type, threads) -> whether :func:`_stacked_products` gave the bits
#: of the per-client products on this machine (checked once per key, see :func:`_group_products`)
_STACKED_SAME: dict[tuple, bool] = {}


def _group_products(Xg, W):
    """``Xg_b W^T`` for the m clients ``Xg`` (m, rows, d) that start from the same matrix ``W`` (h, d).

    The reference is one batched product with ``W`` broadcast over the clients (stride 0): the GEMM
    call of every client is the one it gets with its own copy, so the bits are the per-client ones
    (on one thread; with more, the BLAS may split a batch by its size, as it may for chunks of
    clients). Faster is one product over the clients' stacked rows (:func:`_stacked_products`: W
    packed once for all of them instead of once per client), but a BLAS may pick another kernel for
    more rows and round differently. So the first time a shape (and dtype, device, thread count)
    comes up both are computed; the stacked product is used from then on only if it gave exactly the
    reference's bits (on this machine's MKL it does for clients of 10 samples or more, not for 1-3).
    Either way the results are the per-client products' bits."""
    m, _, d = (int(v) for v in Xg.shape)
    key = (*Xg.shape[1:], int(W.shape[0]), m, Xg.dtype, Xg.device.type, torch.get_num_threads())
    same = _STACKED_SAME.get(key)
    if same:
        return _stacked_products(Xg, W)
    ref = torch.bmm(Xg, W.t().expand(m, d, int(W.shape[0])))
    if same is None:
        _STACKED_SAME[key] = bool(torch.equal(_stacked_products(Xg, W), ref))
    return ref


def _stacked_products(Xg, W):
    """One product of the stacked rows of the m clients ``Xg`` (m, rows, d) with ``W`` (h, d)."""
    m, rows, d = (int(v) for v in Xg.shape)
    return (Xg.reshape(m * rows, d) @ W.t()).view(m, rows, int(W.shape[0]))


class ModuleModel(BatchedModel):
    """Any ``nn.Module`` (built by ``factory``) batched with ``functional_call`` + ``vmap``.

    ``input_shape`` reshapes the flattened rows before the module (e.g. ``(3, 24, 24)``);
    ``penalty_fn(params_of_one_copy) -> scalar`` is vmapped over copies when given.
    """

    def __init__(
        self,
        factory: Callable[[], nn.Module],
        n_inputs: int,
        n_outputs: int,
        loss: str = "cross_entropy",
        input_shape: Sequence[int] | None = None,
        penalty_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None,
        flops: dict[str, float] | None = None,
    ):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
        self.factory, self.loss = factory, loss
        self.n_inputs, self.n_outputs = int(n_inputs), int(n_outputs)
        self.input_shape = tuple(input_shape) if input_shape is not None else None
        if self.input_shape is not None and int(np.prod(self.input_shape)) != self.n_inputs:
            raise ValueError(f"input_shape {self.input_shape} does not have n_inputs={n_inputs} entries")
        self._mod = factory()
        self._penalty_fn = penalty_fn
        self._flops = flops

    def module(self):
        return self.factory()

    def init(self, k, seed, dtype=torch.float32):
        return stack_module_params(self.factory, k, seed, dtype)

    def _call(self, p, x):
        if self.input_shape is not None:
            x = x.reshape(x.shape[0], *self.input_shape)
        return functional_call(self._mod, p, (x,))

    def forward_paired(self, params, X):
        return vmap(self._call)(params, X)

    def forward_shared(self, params, X):
        return vmap(lambda p: self._call(p, X))(params)

    def penalty(self, params):
        if self._penalty_fn is None:
            return None
        return vmap(self._penalty_fn)(params)

    def flops_per_sample(self):
        return self._flops


# ------------------------------------------------------------------------------------------------
def _trunc_normal_(t: torch.Tensor, std: float) -> torch.Tensor:
    # TF's truncated_normal: redraw outside 2 std
    return nn.init.trunc_normal_(t, mean=0.0, std=std, a=-2 * std, b=2 * std)


class IFCACNN(nn.Module):
    """The 2-conv + 2-FC CNN of CFL-MGD's CIFAR experiments (TF CIFAR-10 tutorial network used by IFCA).

    conv5x5(C->64, SAME) + ReLU -> maxpool 3/2 -> LRN -> conv5x5(64->64, SAME) + ReLU -> LRN ->
    maxpool 3/2 -> FC 384 + ReLU -> FC 192 + ReLU -> linear n_classes. For 24x24 inputs the flattened
    feature has 6*6*64 = 2304 entries. Max-pool "SAME" is mapped to ``padding=1``.
    ``nn.LocalResponseNorm(size=9, alpha=0.001, beta=0.75, k=1.0)`` equals TF's
    ``lrn(depth_radius=4, bias=1, alpha=0.001/9, beta=0.75)``.
    """

    def __init__(self, in_channels: int = 3, image_size: int = 24, n_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 5, padding=2)
        self.conv2 = nn.Conv2d(64, 64, 5, padding=2)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.lrn = nn.LocalResponseNorm(size=9, alpha=0.001, beta=0.75, k=1.0)
        s = image_size
        s = (s + 2 - 3) // 2 + 1
        s = (s + 2 - 3) // 2 + 1
        self.flat = 64 * s * s
        self.fc1 = nn.Linear(self.flat, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, n_classes)
        with torch.no_grad():
            _trunc_normal_(self.conv1.weight, 0.05)
            self.conv1.bias.zero_()
            _trunc_normal_(self.conv2.weight, 0.05)
            self.conv2.bias.fill_(0.1)
            _trunc_normal_(self.fc1.weight, 0.04)
            self.fc1.bias.fill_(0.1)
            _trunc_normal_(self.fc2.weight, 0.04)
            self.fc2.bias.fill_(0.1)
            _trunc_normal_(self.fc3.weight, 1.0 / 192)
            self.fc3.bias.zero_()

    def forward(self, x):
        x = self.lrn(self.pool(torch.relu(self.conv1(x))))
        x = self.pool(self.lrn(torch.relu(self.conv2(x))))
        x = x.flatten(-3)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def ifca_cnn(
    in_channels: int = 3, image_size: int = 24, n_classes: int = 10, weight_decay: float = 0.004
) -> ModuleModel:
    """IFCA's CIFAR CNN as a :class:`ModuleModel` (vmap over copies), with the L2 penalty
    ``weight_decay * 1/2 (||W_fc1||^2 + ||W_fc2||^2)`` added to the training loss (not to the
    loss used for cluster assignment)."""
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")

    def factory():
        return IFCACNN(in_channels, image_size, n_classes)

    def penalty(p):
        return 0.5 * weight_decay * ((p["fc1.weight"] ** 2).sum() + (p["fc2.weight"] ** 2).sum())

    return ModuleModel(
        factory,
        n_inputs=in_channels * image_size * image_size,
        n_outputs=n_classes,
        loss="cross_entropy",
        input_shape=(in_channels, image_size, image_size),
        penalty_fn=penalty if weight_decay > 0 else None,
    )


# ------------------------------------------------------------------------------------------------
class LinearRegression(BatchedModel):
    """``y_hat = <x, w> (+ b)``, loss ``1/2 (y_hat - y)^2``; parameter names of ``nn.Linear(d, 1)``.

    ``init_std``: weights drawn i.i.d. N(0, init_std^2) (bias 0); None = ``nn.Linear``'s default.
    """

    def __init__(self, d: int, bias: bool = False, init_std: float | None = 1.0):
        if int(d) < 1:
            raise ValueError(f"d must be >= 1, got {d}")
        if init_std is not None and not init_std > 0:
            raise ValueError(f"init_std must be > 0 or None, got {init_std}")
        self.d, self.bias, self.init_std = int(d), bool(bias), init_std
        self.n_inputs, self.n_outputs, self.loss = self.d, 1, "squared"

    def module(self):
        return nn.Linear(self.d, 1, bias=self.bias)

    def _factory(self):
        m = self.module()
        if self.init_std is not None:
            with torch.no_grad():
                m.weight.normal_(0.0, self.init_std)
                if self.bias:
                    m.bias.zero_()
        return m

    def init(self, k, seed, dtype=torch.float32):
        return stack_module_params(self._factory, k, seed, dtype)

    def forward_paired(self, params, X):
        out = torch.bmm(X, params["weight"].transpose(1, 2))
        if self.bias:
            out = out + params["bias"].unsqueeze(1)
        return out

    def forward_shared(self, params, X):
        out = torch.matmul(params["weight"], X.t()).transpose(1, 2)  # (k, N, 1)
        if self.bias:
            out = out + params["bias"].unsqueeze(1)
        return out

    def flops_per_sample(self):
        return {"forward": 2.0 * self.d, "train_step": 4.0 * self.d}
