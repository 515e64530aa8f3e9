"""RR-Cluster: client-level DP clustered FL with random rebalancing.

Paper: Xiyuan Yang, Shengyuan Hu, Soyeon Kim, Tian Li, "Differentially Private Federated Clustering with
Random Rebalancing" (spec ``specs/002_rr_cluster.md``). Algorithm 1 (generic RR-Cluster), Algorithm 2
(RR-Cluster(IFCA)), Prop. 4.1 / Theorem 4.2 (RDP accounting, in
:mod:`fedclust.privacy.paper.rr_cluster`).

One round t, in this exact order (spec 002, section 7 item 1), on the vectorized
:class:`~fedclust.clustered_fl.engine.ClusteredFLEngine`:

1. a fixed-size sample M^t of m = round(qM) clients (without replacement, stream "sampling");
   every sampled client picks its cluster ``j_hat = argmin_j F(theta_j, D_i)`` (IFCA; FeSEM and FedCAM
   below) and trains locally from ``theta_{j_hat}``: ``Delta_i = theta_i - theta_{j_hat}`` (Alg. 2);
2. the server privatizes the one-hot identifiers ``s~_i = s_i / max(1, ||s_i||/C_s) + N(0, C_s^2
   sigma_s^2 I_k)`` (Alg. 2; stream "noise");
3. assigns ``i -> argmax_j s~_i[j]``;
4. random rebalancing (Alg. 1 lines 9-10, :func:`~fedclust.clustered_fl.rebalance.random_rebalance`,
   own stream "rebalance"): every cluster gets >= B updates, moved (never copied) uniformly from the
   pooled updates of clusters with surplus;
5. clips every update: ``Delta_bar_i = Delta_i * min(1, C_theta/||Delta_i||)`` (Alg. 1 line 11 with the
   spec's typo fix ||s|| -> ||Delta||; the norm is over all parameters of the released part);
6. ``Delta~_j = (sum_{i in S_j} Delta_bar_i + N(0, (f C_theta sigma_theta)^2 I_d)) / |S_j|`` with the
   sensitivity factor ``f = 2`` under RR (Alg. 1 line 12; the paper's 2 C_theta) and, by default,
   ``f = 1`` for the baselines without RR (RESOLUTION 2.4 / A2; ``sensitivity_factor`` overrides it);
   noise is drawn for each of the k clusters independently (stream "noise"); an empty cluster skips
   its update (A9);
7. ``theta_j <- theta_j + gamma Delta~_j`` (Alg. 1 line 13).

``B = 0`` is the directly privatized base algorithm (DP-IFCA etc.): the rebalancing draws come from their
own stream, so B = 0 and B > 0 share every other random draw.

Base algorithms (spec 002, 2.5, RESOLUTIONs for sampling + DP):

* ``base="ifca"``: the engine's own client step (argmin-loss, local training from the chosen model);
* ``base="fesem"``: :class:`FeSEMEngine`: the client starts from the centre of its last assignment
  (first participation: the argmin-loss model), trains, picks ``j_hat = argmin_j ||theta_i - theta_j||``
  (FeSEM's E-step) and sends ``Delta_i = theta_i - theta_{j_hat}`` with one-hot(j_hat);
* ``base="fedcam"``: :class:`AdditiveModel` (logits ``h(x; g) + f(x; theta_j)``), the client picks the
  argmin loss of the additive model and trains ``(g, theta_j)`` jointly; the server runs three
  Gaussians: identifiers (sigma_s), the global part (sum over all of M^t clipped to C_theta, noise
  ``C_theta sigma_g``, divided by |M^t|; never rebalanced) and the cluster part as above.

Privacy: :meth:`PrivateClusterAggregator.finish` returns the run's release (``privacy.paper.rr_cluster
.release``: noise multipliers (sigma_s, sigma_theta), T rounds, fixed-size sampling without replacement,
client level, add/remove); noise multipliers are relative to the sensitivity, so the factor f does
not appear in them. Noise stds are inputs; :func:`calibrate` / :func:`calibrate_fedcam` turn a target
(eps, delta) into them (RESOLUTION 3.4).
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import torch

from fedclust.clustered_fl.engine import (
    Aggregation, ClientUpdates, ClusteredFLEngine, ClusteredFLResult, DeltaAveraging, FederatedTensors, Params,
    client_model_losses, assign_clusters, client_norms, local_train, segment_counts, segment_sum,
)
from fedclust.clustered_fl.models import BatchedModel
from fedclust.clustered_fl.rebalance import check_threshold, random_rebalance
from fedclust.privacy.events import GaussianRelease
from fedclust.privacy.mechanisms import add_gaussian_noise
from fedclust.privacy.paper import rr_cluster as paper
from fedclust.rng import stream

logger = logging.getLogger(__name__)

__all__ = [
    "BASES", "PrivateClusterAggregator", "AdditiveModel", "FeSEMEngine", "build_engine", "run",
    "finalize", "calibrate", "calibrate_fedcam", "privatize_identifiers", "noisy_cluster_sums",
]

BASES = ("ifca", "fesem", "fedcam")
GLOBAL_PREFIX, CLUSTER_PREFIX = "g.", "c."


# ================================================================================================
# Calibration (RESOLUTION 3.4): thin wrappers over privacy.paper.rr_cluster
# ================================================================================================
def calibrate(epsilon: float, delta: float = paper.DEFAULT_DELTA, q: float | None = None, T: int | None = None,
              M: int | None = None, rho_s: float = 0.5, *, bound: str = "wang_general") -> tuple[float, float]:
    """``(sigma_s, sigma_theta)`` spending ``epsilon`` at ``delta`` over T rounds of fixed-size sampling
    ``round(qM)`` of M (Theorem 4.2 + eq. 9); ``rho_s`` = the identifiers' share of the per-round RDP
    (0 = no identifier: DP-FedAvg/FedPer/FedProx, ``sigma_s = inf``). ``epsilon = inf`` gives (0, 0), no noise."""
    if epsilon is not None and math.isinf(float(epsilon)):
        return 0.0, 0.0
    return paper.calibrate_sigmas(epsilon, delta, q, T, M, rho_s, bound=bound)


def calibrate_fedcam(epsilon: float, delta: float = paper.DEFAULT_DELTA, q: float | None = None,
                     T: int | None = None, M: int | None = None, shares=(1 / 3, 1 / 3, 1 / 3), *,
                     bound: str = "wang_general") -> tuple[float, float, float]:
    """``(sigma_s, sigma_g, sigma_theta)`` for DP-FedCAM's three Gaussians (spec 002, 2.5): per-round RDP
    ``alpha/(2 sigma_eff^2)`` split with ``shares`` (identifier, global, cluster; positive, summing to 1):
    ``1/sigma_x^2 = share_x / sigma_eff^2``."""
    sh = np.asarray(shares, dtype=float)
    if sh.shape != (3,) or np.any(sh <= 0) or abs(sh.sum() - 1) > 1e-9:
        raise ValueError(f"shares must be 3 positive numbers summing to 1, got {shares!r}")
    if epsilon is not None and math.isinf(float(epsilon)):
        return 0.0, 0.0, 0.0
    _, s_eff = paper.calibrate_sigmas(epsilon, delta, q, T, M, 0.0, bound=bound)
    s = s_eff / np.sqrt(sh)
    return float(s[0]), float(s[1]), float(s[2])


# ================================================================================================
# The two private server steps, as plain functions (tested directly)
# ================================================================================================
def privatize_identifiers(chosen: torch.Tensor, k: int, sigma_s: float, C_s: float,
                          rng: np.random.Generator) -> tuple[torch.Tensor, np.ndarray]:
    """Alg. 2: ``s~ = s/max(1, ||s||/C_s) + N(0, C_s^2 sigma_s^2)`` for the one-hots of ``chosen`` (m,);
    returns ``(argmax s~ (m,), s~ (m, k))``. ``sigma_s = 0`` adds nothing (and draws nothing)."""
    m = int(chosen.shape[0])
    s = np.zeros((m, k))
    s[np.arange(m), chosen.numpy()] = 1.0
    s = s / max(1.0, 1.0 / C_s)  # ||s|| = 1
    s = add_gaussian_noise(s, C_s * sigma_s, rng)
    return torch.as_tensor(np.argmax(s, axis=1), dtype=torch.long), s


def noisy_cluster_sums(deltas: Params, groups: torch.Tensor, k: int, std: float,
                       rng: np.random.Generator) -> Params:
    """Alg. 1 line 12 (before the division): per-cluster sums of the (clipped) updates plus i.i.d.
    ``N(0, std^2)`` on every coordinate of every one of the k sums (drawn per parameter, in dict order)."""
    out = {}
    for n, v in deltas.items():
        out[n] = add_gaussian_noise(segment_sum(v, groups, k), std, rng) if std > 0 else segment_sum(v, groups, k)
    return out


def _clip(deltas: Params, C: float | None) -> tuple[Params, int]:
    if C is None or not deltas:
        return deltas, 0
    norms = client_norms(deltas)
    scale = torch.clamp(C / norms.clamp(min=torch.finfo(norms.dtype).tiny), max=1.0)
    n_clipped = int((norms > C).sum())
    return {n: v * scale.reshape(-1, *([1] * (v.ndim - 1))).to(v.dtype) for n, v in deltas.items()}, n_clipped


# ================================================================================================
# Server strategy
# ================================================================================================
class PrivateClusterAggregator(DeltaAveraging):
    """RR-Cluster's server (Alg. 1 lines 7-13) and the directly privatized baselines (B = 0).

    * ``sigma_s``: identifier noise multiplier (None/0: identifiers not privatized; then ``sigma_theta``
      must be 0 too when k > 1, i.e. a non-private run); ``C_s`` identifier clip (0.1; irrelevant to the argmax);
    * ``sigma_theta``: cluster-sum noise multiplier, noise std ``f C_theta sigma_theta``; ``clip`` =
      C_theta (None: no clipping; only allowed without noise); ``sensitivity_factor`` f in {1, 2}
      (None: 2 if B >= 1 else 1);
    * ``B``: rebalancing threshold (0 = off);
    * ``global_keys`` (FedCAM): names of the global-model parameters, aggregated over all of M^t with
      noise std ``C_theta sigma_g`` and clipped separately; ``frozen_keys`` (FedPer's personal head):
      never aggregated; all other parameters are the cluster part;
    * ``server_lr`` gamma.

    ``log`` holds per-round lists: ``round``, ``n_moved``, ``sizes_before_rr``, ``sizes_after_rr``,
    ``identifier_flips`` (fraction of sampled clients whose noisy argmax differs from their choice),
    ``n_clipped``.
    """

    name = "rr_cluster"

    def __init__(self, *, sigma_s: float | None, sigma_theta: float, clip: float | None, B: int = 0,
                 C_s: float = 0.1, sensitivity_factor: int | None = None, sigma_g: float | None = None,
                 global_keys=(), frozen_keys=(), server_lr: float = 1.0, label: str = "rr_cluster"):
        super().__init__(server_lr=server_lr)
        if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 0:
            raise ValueError(f"B (rebalancing threshold) must be an integer >= 0, got {B!r}")
        self.B = int(B)
        if sensitivity_factor is None:
            sensitivity_factor = 2 if self.B >= 1 else 1
        if sensitivity_factor not in (1, 2):
            raise ValueError(f"sensitivity_factor must be 1 or 2, got {sensitivity_factor!r}")
        self.factor = int(sensitivity_factor)
        for name, v in (("sigma_theta", sigma_theta), ("sigma_s", sigma_s), ("sigma_g", sigma_g)):
            bad_inf = math.isinf(v) and name != "sigma_s" if v is not None else False  # sigma_s = inf: no identifier
            if v is not None and (math.isnan(v) or v < 0 or bad_inf):
                raise ValueError(f"{name} must be >= 0 and finite, got {v!r}")
        self.sigma_theta = float(sigma_theta or 0.0)
        self.sigma_s = 0.0 if sigma_s is None or math.isinf(sigma_s) else float(sigma_s)
        self.sigma_g = float(sigma_g or 0.0)
        if clip is not None and not clip > 0:
            raise ValueError(f"clip (C_theta) must be > 0 or None, got {clip!r}")
        if clip is None and (self.sigma_theta > 0 or self.sigma_g > 0):
            raise ValueError("clip (C_theta) must be given when sigma_theta or sigma_g > 0 (the noise is "
                             "calibrated to the clipped sensitivity)")
        if not C_s > 0:
            raise ValueError(f"C_s must be > 0, got {C_s!r}")
        self.clip, self.C_s = (None if clip is None else float(clip)), float(C_s)
        self.global_keys, self.frozen_keys = tuple(global_keys), tuple(frozen_keys)
        if self.global_keys and self.sigma_theta > 0 and self.sigma_g <= 0:
            raise ValueError("sigma_g must be > 0 for the global part when sigma_theta > 0 (FedCAM)")
        self.label = label
        self.log: dict[str, list] = {k: [] for k in ("round", "n_moved", "sizes_before_rr", "sizes_after_rr",
                                                     "identifier_flips", "n_clipped")}

    @property
    def private(self) -> bool:
        return self.sigma_theta > 0

    def groups(self, updates: ClientUpdates, ctx) -> torch.Tensor:
        """Steps 2-4: noisy one-hot identifiers, argmax, random rebalancing."""
        chosen = updates.chosen
        if ctx.k > 1 and self.sigma_s > 0:
            noisy, _ = privatize_identifiers(chosen, ctx.k, self.sigma_s, self.C_s, ctx.rngs["noise"])
        else:
            if ctx.k > 1 and self.private:
                raise ValueError("sigma_s must be > 0 when sigma_theta > 0 and k > 1 (the identifiers are "
                                 "released too)")
            noisy = chosen.clone()
        rr = random_rebalance(noisy.numpy(), ctx.k, self.B, ctx.rngs["rebalance"])
        self.log["round"].append(ctx.round)
        self.log["n_moved"].append(rr.n_moved)
        self.log["sizes_before_rr"].append(rr.sizes_before.tolist())
        self.log["sizes_after_rr"].append(rr.sizes_after.tolist())
        self.log["identifier_flips"].append(float((noisy != chosen).float().mean()) if len(chosen) else 0.0)
        return torch.as_tensor(rr.groups, dtype=torch.long)

    def __call__(self, state, updates, ctx):
        k = ctx.k
        g = self.groups(updates, ctx)
        counts = segment_counts(g, k)
        names = list(state.params)
        gl = [n for n in names if n in self.global_keys]
        cl = [n for n in names if n not in self.global_keys and n not in self.frozen_keys]
        deltas = updates.deltas()
        # steps 5-7 for the cluster part
        dc, n_clip = _clip({n: deltas[n] for n in cl}, self.clip)
        std = self.factor * (self.clip or 0.0) * self.sigma_theta
        sums = noisy_cluster_sums(dc, g, k, std, ctx.rngs["noise"])
        params = dict(state.params)
        for n in cl:
            old = state.params[n]
            c = counts.to(old.dtype).reshape(-1, *([1] * (old.ndim - 1)))
            params[n] = torch.where(c > 0, old + self.server_lr * sums[n] / c.clamp(min=1), old)
        # FedCAM's global part: one Gaussian over all sampled clients, never rebalanced
        if gl:
            dg, n_clip_g = _clip({n: deltas[n] for n in gl}, self.clip)
            m = max(len(updates.clients), 1)
            std_g = (self.clip or 0.0) * self.sigma_g
            for n in gl:
                s = dg[n].sum(0)
                if std_g > 0:
                    s = add_gaussian_noise(s, std_g, ctx.rngs["noise"])
                params[n] = state.params[n] + self.server_lr * (s / m).unsqueeze(0)  # same g in every row
            n_clip += n_clip_g
        self.log["n_clipped"].append(n_clip)
        return Aggregation(params, state.momentum, g, counts.numpy().copy())

    def finish(self, rounds: int, n_clients: int, n_sampled: int) -> list:
        """The run's DP release (empty for a non-private run)."""
        if not self.private:
            return []
        ident = self.sigma_s if self.sigma_s > 0 else None
        if self.global_keys:
            z = tuple(v for v in (ident, self.sigma_g, self.sigma_theta) if v is not None)
            return [GaussianRelease(z, count=int(rounds), sampling="without_replacement", population=int(n_clients),
                                    sample_size=int(n_sampled), neighbouring="add_remove", unit="client",
                                    label=self.label)]
        return [paper.release(ident, self.sigma_theta, T=rounds, M=n_clients, sample_size=n_sampled, label=self.label)]


# ================================================================================================
# FedCAM: additive global + cluster model
# ================================================================================================
class AdditiveModel(BatchedModel):
    """FedCAM's model (Ma et al., NeurIPS 2023): outputs ``h(x; g) + f(x; theta_j)`` of a global and a
    cluster copy of ``base``. Parameters are ``"g.<name>"`` (identical in all k rows; the server keeps
    them so) and ``"c.<name>"`` (one per cluster). Gradients by autograd through ``base``'s forward."""

    def __init__(self, base: BatchedModel):
        if not isinstance(base, BatchedModel):
            raise ValueError(f"base must be a BatchedModel, got {type(base).__name__}")
        self.base = base
        self.loss, self.n_inputs, self.n_outputs = base.loss, base.n_inputs, base.n_outputs

    def init(self, k, seed, dtype=torch.float32):
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        g = self.base.init(1, rng, dtype=dtype)
        c = self.base.init(k, rng, dtype=dtype)
        out = {GLOBAL_PREFIX + n: v.expand(k, *v.shape[1:]).clone() for n, v in g.items()}
        out.update({CLUSTER_PREFIX + n: v for n, v in c.items()})
        return out

    @staticmethod
    def _split(params):
        g = {n[2:]: v for n, v in params.items() if n.startswith(GLOBAL_PREFIX)}
        c = {n[2:]: v for n, v in params.items() if n.startswith(CLUSTER_PREFIX)}
        return g, c

    def forward_paired(self, params, X):
        g, c = self._split(params)
        return self.base.forward_paired(g, X) + self.base.forward_paired(c, X)

    def forward_shared(self, params, X):
        g, c = self._split(params)
        return self.base.forward_shared(g, X) + self.base.forward_shared(c, X)

    def global_keys(self, params) -> tuple[str, ...]:
        return tuple(n for n in params if n.startswith(GLOBAL_PREFIX))


# ================================================================================================
# FeSEM: distance-based E-step with client-side state
# ================================================================================================
class FeSEMEngine(ClusteredFLEngine):
    """FeSEM (Long et al. 2023, "Multi-center federated learning") under sampling + DP (spec 002, 2.5).

    Client i keeps the index of its last assignment; it starts local training from that centre (first
    participation: the argmin-loss model), then picks ``j_hat = argmin_j ||theta_i - theta_j||_2`` over
    the current centres (E-step) and sends ``Delta_i = theta_i - theta_{j_hat}`` with one-hot(j_hat).
    The server side (M-step) is the aggregator's. Everything is batched over the sampled clients.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.beta != 0 or self.local_update != "model":
            raise ValueError("FeSEM runs local model training without momentum (beta=0, local_update='model')")
        self.last_center = np.full(self.data.n_clients, -1, dtype=np.int64)

    def client_round(self, state, clients, lr):
        d = self.data
        idx = torch.as_tensor(clients, dtype=torch.long)
        X, y, n = d.X_train[idx], d.y_train[idx], d.n_train[idx]
        t0 = time.perf_counter()
        losses, _ = client_model_losses(self.model, state.params, X, y, n, max_rows=self.max_rows)
        last = torch.as_tensor(self.last_center[clients])
        start_j = torch.where(last >= 0, last, assign_clusters(losses))
        start = {k: v.index_select(0, start_j) for k, v in state.params.items()}
        t1 = time.perf_counter()
        params, _ = local_train(self.model, start, None, X, y, n, steps=self.local_steps, lr=lr, beta=0.0,
                                batch_size=self.batch_size, local_epochs=self.local_epochs, gen=self.rngs["minibatch"])
        # E-step: L2 distance of every trained model to every centre, (S, k) in one cdist
        flat_i = torch.cat([v.reshape(v.shape[0], -1) for v in params.values()], 1)
        flat_c = torch.cat([v.reshape(v.shape[0], -1) for v in state.params.values()], 1)
        chosen = torch.argmin(torch.cdist(flat_i.double(), flat_c.double()), dim=1)
        self.last_center[clients] = chosen.numpy()
        anchor = {k: v.index_select(0, chosen) for k, v in state.params.items()}
        per_step = n if self.batch_size is None else n.clamp(max=self.batch_size)
        self.n_local_samples += int(per_step.sum()) * self.local_steps
        self.timing["assign"] += t1 - t0
        self.timing["local"] += time.perf_counter() - t1
        return ClientUpdates(clients=clients, chosen=chosen, losses=losses, start_params=anchor, params=params,
                             momentum=None, n_samples=n)


# ================================================================================================
# Building and running
# ================================================================================================
def _sample_size(data: FederatedTensors, participation, clients_per_round) -> int:
    if clients_per_round is not None:
        return int(clients_per_round)
    if not 0 < participation <= 1:
        raise ValueError(f"participation must be in (0, 1], got {participation!r}")
    return max(1, int(round(participation * data.n_clients)))


def build_engine(data: FederatedTensors, model: BatchedModel, k: int, *, base: str = "ifca", B: int = 8,
                 sigma_s: float | None = 0.0, sigma_theta: float = 0.0, sigma_g: float | None = None,
                 clip: float | None = None, C_s: float = 0.1, sensitivity_factor: int | None = None,
                 server_lr: float = 1.0, participation: float = 0.1, clients_per_round: int | None = None,
                 engine_cls=None, aggregator_kwargs: dict | None = None, **engine_kwargs) -> ClusteredFLEngine:
    """A configured engine for RR-Cluster(``base``) (B >= 1) or DP-``base`` (B = 0); see :func:`run`.

    ``model`` is the base model (FedCAM wraps it in :class:`AdditiveModel`). The engine's numpy streams
    get an extra ``"rebalance"`` stream (composition: the engine itself is unchanged).
    """
    if base not in BASES:
        raise ValueError(f"base must be one of {BASES}, got {base!r}")
    if engine_kwargs.get("sampling", "fixed") != "fixed":
        raise ValueError("sampling must be 'fixed' (fixed-size sampling without replacement, spec 002, 2.8; "
                         "the accountant assumes it)")
    m = _sample_size(data, participation, clients_per_round)
    check_threshold(B, m, k)
    if k > 1 and sigma_theta and sigma_theta > 0 and not (sigma_s and 0 < sigma_s < math.inf):
        raise ValueError(f"sigma_s must be > 0 when sigma_theta > 0 and k={k} > 1 (the identifiers are released "
                         f"too), got sigma_s={sigma_s!r}")
    agg_kw = dict(aggregator_kwargs or {})
    if base == "fedcam":
        model = AdditiveModel(model)
        agg_kw["global_keys"] = tuple(GLOBAL_PREFIX + n for n in model.base.init(1, 0))
        agg_kw["sigma_g"] = sigma_g
    agg = PrivateClusterAggregator(sigma_s=sigma_s, sigma_theta=sigma_theta, clip=clip, B=B, C_s=C_s,
                                   sensitivity_factor=sensitivity_factor, server_lr=server_lr,
                                   label=f"{'rr_cluster' if B else 'dp'}_{base}", **agg_kw)
    if engine_cls is None:
        engine_cls = FeSEMEngine if base == "fesem" else ClusteredFLEngine
    engine_kwargs.setdefault("method", f"rr_cluster_{base}" if B else f"dp_{base}")
    eng = engine_cls(data, model, k, participation=participation, clients_per_round=clients_per_round,
                     aggregator=agg, **engine_kwargs)
    eng.rngs["rebalance"] = stream(eng.seed, "rebalance")
    return eng


def finalize(eng: ClusteredFLEngine, res: ClusteredFLResult) -> ClusteredFLResult:
    """Copy the aggregator's per-round log into ``res.history`` (keys ``rr_round``, ``n_moved``,
    ``sizes_before_rr``, ``sizes_after_rr``, ``identifier_flips``, ``n_clipped``: one entry per
    training round) and the privacy settings into ``res.info``."""
    agg = eng.aggregator
    if isinstance(agg, PrivateClusterAggregator):
        for key, v in agg.log.items():
            res.history["rr_round" if key == "round" else key] = list(v)
        res.info.update({"B": agg.B, "sigma_s": agg.sigma_s, "sigma_theta": agg.sigma_theta, "sigma_g": agg.sigma_g,
                         "clip": agg.clip, "C_s": agg.C_s, "sensitivity_factor": agg.factor,
                         "server_lr": agg.server_lr, "total_moved": int(sum(agg.log["n_moved"]))})
    return res


def run(data: FederatedTensors, model: BatchedModel, k: int, *, base: str = "ifca", B: int = 8,
        sigma_s: float | None = 0.0, sigma_theta: float = 0.0, sigma_g: float | None = None,
        clip: float | None = None, C_s: float = 0.1, sensitivity_factor: int | None = None,
        server_lr: float = 1.0, lr: float = 0.05, local_steps: int = 5, batch_size: int | None = None,
        rounds: int = 100, participation: float = 0.1, clients_per_round: int | None = None, seed: int = 0,
        **engine_kwargs) -> ClusteredFLResult:
    """Run RR-Cluster(``base``) with threshold ``B`` (``B = 0``: DP-``base`` without rebalancing).

    * ``base`` in {"ifca", "fesem", "fedcam"}; ``k`` clusters; ``B`` integer in [0, m/k] with
      m = round(q M) clients per round (ValueError naming B otherwise);
    * ``sigma_s`` identifier noise multiplier (C_s sigma_s per coordinate); ``sigma_theta`` model noise
      multiplier (std ``f C_theta sigma_theta`` on each cluster sum); ``sigma_g`` FedCAM's global-part
      multiplier; ``clip`` = C_theta; ``sensitivity_factor`` f in {1, 2} (default 2 with RR, 1 without);
      all zero: the non-private algorithm (eps = inf);
    * local training: ``lr``, ``local_steps`` (S)GD steps (``batch_size`` None = full batch); server step
      ``server_lr`` gamma; ``rounds`` T; ``participation`` q or ``clients_per_round``;
    * other keyword arguments go to :class:`~fedclust.clustered_fl.engine.ClusteredFLEngine`.

    Returns a :class:`ClusteredFLResult` whose ``dp_events`` is the list of DP releases and whose
    ``history`` has the per-round RR log (see :func:`finalize`).
    """
    eng = build_engine(data, model, k, base=base, B=B, sigma_s=sigma_s, sigma_theta=sigma_theta, sigma_g=sigma_g,
                       clip=clip, C_s=C_s, sensitivity_factor=sensitivity_factor, server_lr=server_lr,
                       participation=participation, clients_per_round=clients_per_round, lr=lr,
                       local_steps=local_steps, batch_size=batch_size, rounds=rounds, seed=seed, **engine_kwargs)
    res = finalize(eng, eng.run())
    logger.info("%s: B=%d, %d updates moved in %d rounds, final test accuracy %.4f", res.info["method"], B,
                res.info.get("total_moved", 0), rounds, res.info["final"].get("test_accuracy", float("nan")))
    return res

