"""RR-Cluster's DP baselines: client-level DP, trusted
server, the same fixed-size client sampling, neighbouring relation, rounds and (eps, delta) as RR-Cluster.

The method, our choices and measured numbers: ``docs/methods/dp_baselines.md``.

One relation for the whole comparison (derivation in :mod:`fedclust.clustered_fl.rr_cluster`):
a fixed number m of the M clients is sampled without replacement each round, so every method is
accounted under **replace-one** neighbours (one client's data replaced by any other) with the WBK19
bound for sampling without replacement, and every Gaussian is calibrated to its replace-one
sensitivity: a sum of updates clipped to ``C_theta`` moves by up to ``2 C_theta`` (the old update out,
the new one in), a clipped one-hot identifier by ``sqrt(2) C_s``. The paper's baseline noise (for
``C_theta`` while sampling a fixed number of clients) is not used by default; ``noise_calibration="paper_literal"``
still adds that noise, labelled, and the report then gives the larger epsilon it really spends.

Clustering baselines (Alg. 1/2 without the rebalancing lines, B = 0, "directly privatized"; the
identifiers are privatized exactly as in RR-Cluster):

* :func:`dp_ifca` (Ghosh et al. 2020, IFCA), :func:`dp_fesem` (Long et al. 2023, FeSEM),
  :func:`dp_fedcam` (Ma et al. 2023, FedCAM; three Gaussians): :func:`fedclust.clustered_fl.rr_cluster.run`
  with ``B = 0``: noise ``N(0, (2 C_theta sigma_theta)^2)`` on every cluster sum, ``sqrt(2) C_s sigma_s``
  on every identifier coordinate. An empty cluster skips its update.

Single-model baselines (no identifier; the whole budget on one Gaussian, ``rho_s = 0``):

* :func:`dp_fedavg` (McMahan et al. 2018, DP-FedAvg): ``w <- w + gamma (sum_i clip(Delta_i) +
  N(0, (2 C_theta sigma)^2 I)) / |M^t|``;
* :func:`dp_fedprox` (FedProx, Li et al. 2020, privatized like DP-FedAvg): local objective
  ``F_i(w) + (mu/2) ||w - w^t||^2`` (:class:`ProximalModel`);
* :func:`dp_fedper` (Arivazhagan et al. 2019, FedPer): the last layer is each client's personal head,
  trained locally and never released; the base layers are DP-FedAvg. Test client i uses the shared base
  with training client i's head (:class:`FedPerEngine`; experimenter-side evaluation: the heads are
  client-side state, outside the guarantee).

All return a :class:`~fedclust.clustered_fl.engine.ClusteredFLResult` with the DP releases in
``dp_events`` (replace-one, fixed-size sampling, client level).
"""

from __future__ import annotations

import torch

from fedclust.clustered_fl import rr_cluster
from fedclust.clustered_fl.engine import (
    ClusteredFLEngine,
    ClusteredFLResult,
    EngineConfig,
    FederatedTensors,
)
from fedclust.clustered_fl.models import BatchedModel

__all__ = [
    "dp_ifca",
    "dp_fesem",
    "dp_fedcam",
    "dp_fedavg",
    "dp_fedprox",
    "dp_fedper",
    "ProximalModel",
    "FedPerEngine",
    "last_layer_keys",
]


def _clustered(base, data, model, k, kwargs):
    if kwargs.get("B", 0) != 0:
        raise ValueError(f"dp_{base} has no rebalancing (B = 0); use rr_cluster.run(base={base!r}, B=...)")
    kwargs.pop("B", None)
    return rr_cluster.run(data, model, k, base=base, B=0, **kwargs)


def dp_ifca(data: FederatedTensors, model: BatchedModel, k: int, **kwargs) -> ClusteredFLResult:
    """DP-IFCA = Algorithm 2 without rebalancing; keyword arguments as :func:`rr_cluster.run`."""
    return _clustered("ifca", data, model, k, kwargs)


def dp_fesem(data: FederatedTensors, model: BatchedModel, k: int, **kwargs) -> ClusteredFLResult:
    """DP-FeSEM (distance E-step, client-side last assignment); keyword arguments as :func:`rr_cluster.run`."""
    return _clustered("fesem", data, model, k, kwargs)


def dp_fedcam(data: FederatedTensors, model: BatchedModel, k: int, **kwargs) -> ClusteredFLResult:
    """DP-FedCAM (additive global + cluster models, three Gaussians; ``sigma_g`` for the global part)."""
    return _clustered("fedcam", data, model, k, kwargs)


# ------------------------------------------------------------------------------------------------
class ProximalModel(BatchedModel):
    """``base`` with FedProx's proximal term ``(mu/2) ||w - anchor||^2`` added to the TRAINING loss and
    gradient (not to the losses used for assignment or evaluation). ``anchor`` {name: (1 or B, ...)} is
    set by the engine before local training (the round's global model)."""

    def __init__(self, base: BatchedModel, mu: float):
        if not mu >= 0:
            raise ValueError(f"mu must be >= 0, got {mu!r}")
        self.base, self.mu = base, float(mu)
        self.loss, self.n_inputs, self.n_outputs = base.loss, base.n_inputs, base.n_outputs
        self.anchor = None

    def init(self, k, seed, dtype=torch.float32):
        return self.base.init(k, seed, dtype)

    def forward_paired(self, params, X):
        return self.base.forward_paired(params, X)

    def forward_shared(self, params, X):
        return self.base.forward_shared(params, X)

    def penalty(self, params):
        return self.base.penalty(params)

    def module(self):
        return self.base.module()

    def loss_and_grad(self, params, X, y, mask, n):
        loss, grads = self.base.loss_and_grad(params, X, y, mask, n)
        if self.mu > 0 and self.anchor is not None:
            loss = loss.clone()
            for name, w in params.items():
                diff = w - self.anchor[name]
                grads[name] = grads[name] + self.mu * diff
                loss = loss + 0.5 * self.mu * diff.reshape(diff.shape[0], -1).pow(2).sum(1)
        return loss, grads


class _ProxEngine(ClusteredFLEngine):
    def _local_update(self, state, *args):
        self.model.anchor = state.params  # k = 1: (1, ...) broadcasts over the sampled clients
        try:
            return super()._local_update(state, *args)
        finally:
            self.model.anchor = None


def _single(data, model, kind, *, sigma: float = 0.0, engine_cls=None, aggregator_kwargs=None, **settings):
    """The one-model DP baselines on the engine: clip C_theta = ``clip``, noise
    ``N(0, (2 C_theta sigma)^2)`` on the sum of the sampled clients' updates (the replace-one
    sensitivity), divided by |M^t| (sigma = 0: no noise, optional clipping), a server step
    ``server_lr``; the other release settings, the local training settings (``lr``, ``local_steps``,
    ``batch_size``) and the sampling (``participation`` or ``clients_per_round``) with their defaults
    as in :func:`fedclust.clustered_fl.rr_cluster.run`."""
    for bad in ("k", "B", "sigma_s", "sigma_theta", "base"):
        if bad in settings:
            raise ValueError(f"{kind} does not take {bad!r} (one model, no identifier, no rebalancing)")
    settings.setdefault("method", kind)
    release, engine_settings = rr_cluster.split_settings({**settings, "sigma_s": None, "sigma_theta": sigma})
    config = EngineConfig(k=1, **{**rr_cluster.TRAINING_DEFAULTS, **engine_settings})
    eng = rr_cluster.build_engine(
        data, model, config, release, base="ifca", B=0, engine_cls=engine_cls, aggregator_kwargs=aggregator_kwargs
    )
    eng.aggregator.label = kind
    return rr_cluster.finalize(eng, eng.run())


def dp_fedavg(data: FederatedTensors, model: BatchedModel, **settings) -> ClusteredFLResult:
    """DP-FedAvg: one model, clip C_theta = ``clip``, noise ``N(0, (2 C_theta sigma)^2)`` on the sum (the
    replace-one sensitivity), divided by |M^t| (sigma = 0: FedAvg with optional clipping). Settings and
    defaults as in :func:`_single` (``sigma`` 0, ``lr`` 0.05, ``local_steps`` 5, ``rounds`` 100,
    ``participation`` 0.1, ``server_lr`` 1), plus the engine's keywords."""
    return _single(data, model, "dp_fedavg", **settings)


def dp_fedprox(data: FederatedTensors, model: BatchedModel, *, mu: float = 0.01, **settings) -> ClusteredFLResult:
    """DP-FedProx: DP-FedAvg (same settings) with the local objective ``F_i(w) + (mu/2)||w - w^t||^2``
    (mu in {0.01, 0.1})."""
    return _single(data, ProximalModel(model, mu), "dp_fedprox", engine_cls=_ProxEngine, **settings)


# ------------------------------------------------------------------------------------------------
def last_layer_keys(params: dict) -> tuple[str, ...]:
    """Names of the parameters of the last layer (the module prefix of the last parameter name)."""
    names = list(params)
    prefix = names[-1].rsplit(".", 1)[0] if "." in names[-1] else names[-1]
    return tuple(n for n in names if (n.rsplit(".", 1)[0] if "." in n else n) == prefix)


class FedPerEngine(ClusteredFLEngine):
    """FedPer on the engine (k = 1): every client keeps its own copy of the ``head_keys`` parameters
    (initialised from the initial global head); local training updates base and head jointly from
    (global base, own head); only the base deltas go to the server (the head deltas are zero in the
    :class:`ClientUpdates`, and the aggregator freezes the head keys). Test accuracy is personalized:
    test client i uses training client i's head (needs as many test clients as training clients)."""

    def __init__(self, data, model, config, head_keys=None):
        super().__init__(data, model, config)
        if self.k != 1:
            raise ValueError("FedPer has one shared base model (k must be 1)")
        if self.data.X_test is not None and self.data.n_test_clients != self.data.n_clients:
            raise ValueError("FedPer's personalized test needs one test client per training client")
        self.head_keys = head_keys
        self.heads = None

    def init_state(self):
        state = super().init_state()
        if self.head_keys is None:
            self.head_keys = last_layer_keys(state.params)
        missing = [n for n in self.head_keys if n not in state.params]
        if missing:
            raise ValueError(f"head_keys {missing} are not parameters of the model")
        if set(self.head_keys) >= set(state.params):
            raise ValueError("head_keys cover every parameter: FedPer needs at least one shared (base) layer")
        N = self.data.n_clients
        self.heads = {n: state.params[n].expand(N, *state.params[n].shape[1:]).clone() for n in self.head_keys}
        return state

    def _local_update(self, state, chosen, X, y, n, lr, gen, clients):
        """Local training from (global base, own head); the trained head stays on the client (written
        back to ``heads``) and the update sent has the start head, so its head delta is zero."""
        idx = torch.as_tensor(clients, dtype=torch.long)
        S = len(clients)
        start = {}
        for name, v in state.params.items():
            start[name] = self.heads[name][idx] if name in self.head_keys else v.expand(S, *v.shape[1:])
        params, _ = self.train_models(start, None, X, y, n, lr, gen, beta=0.0)
        for name in self.head_keys:  # the head stays on the client
            self.heads[name][idx] = params[name]
            params[name] = start[name]
        self.count_local_samples(n, self.local_steps)
        return start, params, None

    @torch.no_grad()
    def personalized_accuracy(self, state) -> float:
        """Pooled test accuracy, test client i with the shared base and client i's head."""
        d = self.data
        if d.X_test is None:
            return float("nan")
        N = d.n_clients
        per = {
            name: (self.heads[name] if name in self.head_keys else v.expand(N, *v.shape[1:]))
            for name, v in state.params.items()
        }
        correct = 0
        step = max(1, self.max_rows // max(d.X_test.shape[1], 1))
        for a in range(0, N, step):  # memory chunks of many clients
            b = min(N, a + step)
            dev = per[next(iter(per))].device
            out = self.model.forward_paired({k: v[a:b] for k, v in per.items()}, d.X_test[a:b].to(dev)).cpu()
            ok = self.model.correct(out, d.y_test[a:b])
            mask = torch.arange(d.X_test.shape[1]).unsqueeze(0) < d.n_test[a:b].unsqueeze(1)
            correct += int((ok & mask).sum())
        return correct / max(int(d.n_test.sum()), 1)

    def _record(self, history, t, lr, state, updates, agg, ev=None):
        rec = super()._record(history, t, lr, state, updates, agg, ev=ev)
        acc = self.personalized_accuracy(state)
        history.setdefault("global_head_test_accuracy", []).append(rec["test_accuracy"])
        history["test_accuracy"][-1] = rec["test_accuracy"] = acc
        return rec

    def run(self):
        res = super().run()
        acc = res.history["test_accuracy"][-1]  # the last round's record: the final model's personalized accuracy
        res.info["final"]["global_head_test_accuracy"] = res.info["final"].get("test_accuracy")
        res.info["final"]["test_accuracy"] = acc
        res.info["head_keys"] = list(self.head_keys)
        return res


def dp_fedper(data: FederatedTensors, model: BatchedModel, *, head_keys=None, **settings) -> ClusteredFLResult:
    """DP-FedPer: DP-FedAvg (same settings) on the base layers, personal last layer (``head_keys``;
    default the last layer). Clipping and noise cover the base layers only (the head is never released)."""
    if head_keys is None:
        head_keys = last_layer_keys(model.init(1, 0))

    class _Eng(FedPerEngine):
        def __init__(self, data, model, config):
            super().__init__(data, model, config, head_keys=tuple(head_keys))

    frozen = {"frozen_keys": tuple(head_keys)}
    return _single(data, model, "dp_fedper", engine_cls=_Eng, aggregator_kwargs=frozen, **settings)
