"""RR-Cluster: client-level DP clustered FL with random rebalancing.

The method, our choices and measured numbers: ``docs/methods/rr_cluster.md``.

Paper: Xiyuan Yang, Shengyuan Hu, Soyeon Kim, Tian Li, "Differentially Private Federated Clustering with
Random Rebalancing". Algorithm 1 (generic RR-Cluster),
Algorithm 2 (RR-Cluster(IFCA)), Prop. 4.1 / Theorem 4.2 (RDP accounting, the paper's formula in
:mod:`fedclust.privacy.paper.rr_cluster`; the reported epsilon comes from
:mod:`fedclust.privacy.accountants`).

One round t, in this exact order, on the vectorized
:class:`~fedclust.clustered_fl.engine.ClusteredFLEngine`:

1. a fixed-size sample M^t of m = round(qM) clients (without replacement, stream "sampling");
   every sampled client picks its cluster ``j_hat = argmin_j F(theta_j, D_i)`` (IFCA; FeSEM and FedCAM
   below) and trains locally from ``theta_{j_hat}``: ``Delta_i = theta_i - theta_{j_hat}`` (Alg. 2);
2. the server privatizes the one-hot identifiers ``s~_i = s_i / max(1, ||s_i||/C_s) + N(0, (sqrt(2) C_s
   sigma_s)^2 I_k)`` (Alg. 2 with the replace-one sensitivity, see below; stream "noise");
3. assigns ``i -> argmax_j s~_i[j]``;
4. random rebalancing (Alg. 1 lines 9-10, :func:`~fedclust.clustered_fl.rebalance.random_rebalance`,
   own stream "rebalance"): every cluster gets >= B updates, moved (never copied) uniformly from the
   pooled updates of clusters with surplus;
5. clips every update: ``Delta_bar_i = Delta_i * min(1, C_theta/||Delta_i||)`` (Alg. 1 line 11, whose
   ||s|| we read as ||Delta||, a typo; the norm is over all parameters of the released part);
6. ``Delta~_j = (sum_{i in S_j} Delta_bar_i + N(0, (2 C_theta sigma_theta)^2 I_d)) / |S_j|`` (Alg. 1
   line 12: the paper's 2 C_theta, which is also the replace-one sensitivity of every method here);
   noise is drawn for each of the k clusters independently (stream "noise"); an empty cluster skips
   its update;
7. ``theta_j <- theta_j + gamma Delta~_j`` (Alg. 1 line 13).

``B = 0`` is the directly privatized base algorithm (DP-IFCA etc.): the rebalancing draws come from their
own stream, so B = 0 and B > 0 share every other random draw.

Base algorithms:

* ``base="ifca"``: the engine's own client step (argmin-loss, local training from the chosen model);
* ``base="fesem"``: :class:`FeSEMEngine`: the client starts from the centre of its last assignment
  (first participation: the argmin-loss model), trains, picks ``j_hat = argmin_j ||theta_i - theta_j||``
  (FeSEM's E-step) and sends ``Delta_i = theta_i - theta_{j_hat}`` with one-hot(j_hat);
* ``base="fedcam"``: :class:`AdditiveModel` (logits ``h(x; g) + f(x; theta_j)``), the client picks the
  argmin loss of the additive model and trains ``(g, theta_j)`` jointly; the server runs three
  Gaussians: identifiers (sigma_s), the global part (sum over all of M^t clipped to C_theta, noise
  ``2 C_theta sigma_g``, divided by |M^t|; never rebalanced) and the cluster part as above.

Privacy. Every method of the comparison (RR-Cluster
and all its DP baselines) samples a fixed number m of the M clients without replacement, so the
guarantee is client-level (eps, delta)-DP under **replace-one** neighbours (one client's whole data
set replaced by any other), accounted with the subsampled-RDP bound for sampling without replacement
(Wang, Balle & Kasiviswanathan 2019, Thm 27, in ``dp-accounting``; the paper's Theorem 4.2 is the
general Thm 9 form of the same replace-one analysis). Sensitivities under that relation:

* identifiers: replacing the client changes its clipped one-hot ``C_s e_j`` into ``C_s e_j'``:
  ``||C_s (e_j - e_j')|| <= sqrt(2) C_s`` (C_s <= 1, so the clip is ``s -> C_s s``); noise std
  ``sqrt(2) C_s sigma_s`` per coordinate, noise multiplier sigma_s;
* cluster sums, with or without rebalancing: condition on the released noisy identifiers (adaptive
  composition, Prop. 4.1). The sample has m clients on both sides, so the noisy argmax partition is
  the same, and the rebalancing draws are data-independent given that partition: coupling them, the
  final partition S_1..S_k is identical and the replaced client's update sits in the same cluster on
  both sides. Only that cluster's sum changes, by ``||Delta_bar_i - Delta_bar_i'|| <= 2 C_theta``,
  and the sizes ``|S_j|`` (post-processing of the identifiers) do not change. Sensitivity of the k
  sums together: ``2 C_theta`` for RR-Cluster (any B) and for the baselines alike; noise std
  ``2 C_theta sigma_theta``, multiplier sigma_theta. (Under add/remove the size of the sample
  would change, a rebalancing move could change a donor and a receiver at once, up to ``sqrt(5)
  C_theta``, and fixed-size sampling would not be the Poisson sampling of the add/remove bound; the
  replace-one relation avoids all three.)
* FedCAM's global sum over M^t and the single-model baselines' sum (DP-FedAvg/FedProx/FedPer):
  ``2 C_theta``; noise ``2 C_theta sigma`` (multiplier sigma).
* full participation (q = 1, m = M) is the same analysis without amplification: the accountant
  accounts an unsampled Gaussian (the rebalancing's sqrt(5) C_theta of add/remove does not arise).

The Gaussians of one round act on the same sample: they are one Gaussian with the effective multiplier
``(sum_i sigma_i^-2)^-1/2``. :meth:`PrivateClusterAggregator.finish` returns one
:class:`~fedclust.privacy.events.GaussianRelease` (replace-one, fixed-size sampling, client level, T
rounds) whose multipliers are the noise stds divided by these true sensitivities.

``noise_calibration="paper_literal"`` (clearly labelled, for reproducing the paper's text) adds the
noise the paper writes: identifiers ``C_s sigma_s`` (sensitivity
C_s), sums ``2 C_theta sigma_theta`` with RR and ``C_theta sigma_theta`` without (baselines), FedCAM's
global part ``C_theta sigma_g``. Under fixed-size sampling that is not the (eps, delta) the
calibration asked for, so it is accounted at its true multipliers ``sigma_s/sqrt(2)``,
``f sigma_theta/2``, ``sigma_g/2``: the report gives the larger epsilon it really spends.

Not a release (experimenter-side evaluation, outside the guarantee): test accuracy, client ACC/NMI,
training loss, ``identifier_flips`` and ``n_clipped`` (they read the clients' raw choices and update
norms). ``sizes_before_rr``, ``sizes_after_rr`` and ``n_moved`` are post-processing of the accounted
identifiers and the rebalancing draws. In a private run the initial models must be public: the engine's
random init (default) or ``init_params`` that the caller vouches for; IFCA's data-dependent restart
heuristic (``init_min_fraction``) is refused.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from fedclust.clustered_fl.engine import (
    Aggregation,
    ClientUpdates,
    ClusteredFLEngine,
    ClusteredFLResult,
    DeltaAveraging,
    EngineConfig,
    FederatedTensors,
    GatheredParams,
    Params,
    assign_clusters,
    client_model_losses,
    client_norms,
    segment_counts,
    segment_sum,
)
from fedclust.clustered_fl.models import BatchedModel
from fedclust.clustered_fl.rebalance import check_threshold, random_rebalance
from fedclust.privacy._validate import check_delta, check_epsilon, check_steps
from fedclust.privacy.accountants import CalibrationSearch, calibrate_noise_multiplier
from fedclust.privacy.events import GaussianRelease
from fedclust.privacy.mechanisms import add_gaussian_noise
from fedclust.privacy.observe import observing, report
from fedclust.privacy.paper import rr_cluster as paper
from fedclust.rng import stream

logger = logging.getLogger(__name__)

__all__ = [
    "BASES",
    "PrivateClusterAggregator",
    "AdditiveModel",
    "FeSEMEngine",
    "build_engine",
    "ReleaseSettings",
    "TRAINING_DEFAULTS",
    "split_settings",
    "run",
    "finalize",
    "calibrate",
    "calibrate_fedcam",
    "privatize_identifiers",
    "noisy_cluster_sums",
    "release_cluster_sum",
    "NOISE_CALIBRATIONS",
    "CALIBRATION_BOUNDS",
    "RELATION",
]

BASES = ("ifca", "fesem", "fedcam")
GLOBAL_PREFIX, CLUSTER_PREFIX = "g.", "c."


# ================================================================================================
# Calibration: the project's accountant, replace-one, fixed-size sampling
# ================================================================================================
CALIBRATION_BOUNDS = ("accountant",) + paper.BOUNDS
NOISE_CALIBRATIONS = ("replace_one", "paper_literal")
#: The neighbouring relation and sampling of every release of this module.
RELATION = {"neighbouring": "replace_one", "sampling": "without_replacement", "unit": "client"}


def _sample_of(q, M) -> tuple[int, int]:
    if M is None or isinstance(M, bool) or int(M) != M or M < 1:
        raise ValueError(f"M (number of clients) must be an integer >= 1, got {M!r}")
    if q is None or not 0 < float(q) <= 1:
        raise ValueError(f"q (client sampling ratio) must be in (0, 1], got {q!r}")
    m = max(1, int(round(float(q) * int(M))))
    return int(M), m


@functools.lru_cache(maxsize=256)
def _accountant_multiplier(epsilon: float, delta: float, T: int, M: int, m: int, weights: tuple) -> float:

    return calibrate_noise_multiplier(
        epsilon,
        delta,
        steps=T,
        sampling="without_replacement",
        population=M,
        sample_size=m,
        neighbouring="replace_one",
        weights=weights,
        search=CalibrationSearch(rtol=1e-4),
    )


def _calibrate_shares(epsilon, delta, q, T, M, shares, bound) -> tuple[float, ...]:
    """Noise multipliers for Gaussians sharing each round's budget with ``shares`` (positive, sum 1):
    ``sigma_x = sigma_eff / sqrt(share_x)``."""
    if bound not in CALIBRATION_BOUNDS:
        raise ValueError(f"bound must be one of {CALIBRATION_BOUNDS}, got {bound!r}")
    if bound == "accountant":
        eps, d, T = check_epsilon(epsilon, "target_epsilon"), check_delta(delta), check_steps(T, "T")
        M, m = _sample_of(q, M)
        s_eff = _accountant_multiplier(float(eps), float(d), int(T), M, m, (1.0,))
    else:  # the paper's own formula (Thm 4.2 + eq. 9): a replace-one bound looser than the accountant's
        _, s_eff = paper.calibrate_sigmas(epsilon, delta, q, T, M, 0.0, bound=bound)
    return tuple(float(s_eff / math.sqrt(w)) for w in shares)


def calibrate(
    epsilon: float,
    delta: float = paper.DEFAULT_DELTA,
    q: float | None = None,
    T: int | None = None,
    M: int | None = None,
    rho_s: float = 0.5,
    *,
    bound: str = "accountant",
) -> tuple[float, float]:
    """``(sigma_s, sigma_theta)`` spending ``epsilon`` at ``delta`` over T rounds of fixed-size sampling of
    ``m = round(qM)`` of M clients, client level, replace-one neighbours (module docstring).

    ``rho_s`` in [0, 1) is the identifiers' share of the per-round RDP (0.5: ``sigma_s = sigma_theta``;
    0: no identifier, DP-FedAvg/FedPer/FedProx, ``sigma_s = inf``). Both are noise multipliers relative to
    the replace-one sensitivities (sqrt(2) C_s and 2 C_theta). ``bound="accountant"`` (default) bisects
    the project's accountant (dp-accounting, WBK19 Thm 27), so the reported epsilon equals the target;
    the paper's bounds (``"wang_general"``: Theorem 4.2, ``"wang_improved"``) give more noise (the
    accountant then reports less than the target); ``"poisson_rdp"`` is the add/remove Poisson bound,
    not valid for fixed-size sampling: kept for comparison, its runs report the larger epsilon they
    really spend. ``epsilon = inf`` gives (0, 0): no noise."""
    if epsilon is not None and math.isinf(float(epsilon)):
        return 0.0, 0.0
    if not 0.0 <= float(rho_s) < 1.0:
        raise ValueError(f"rho_s must be in [0, 1), got {rho_s!r}")
    if float(rho_s) == 0.0:
        return math.inf, _calibrate_shares(epsilon, delta, q, T, M, (1.0,), bound)[0]
    ss, st = _calibrate_shares(epsilon, delta, q, T, M, (float(rho_s), 1.0 - float(rho_s)), bound)
    return ss, st


def calibrate_fedcam(
    epsilon: float,
    delta: float = paper.DEFAULT_DELTA,
    q: float | None = None,
    T: int | None = None,
    M: int | None = None,
    shares=(1 / 3, 1 / 3, 1 / 3),
    *,
    bound: str = "accountant",
) -> tuple[float, float, float]:
    """``(sigma_s, sigma_g, sigma_theta)`` for DP-FedCAM's three Gaussians: per-round RDP
    ``alpha/(2 sigma_eff^2)`` split with ``shares`` (identifier, global, cluster; positive, summing to 1):
    ``1/sigma_x^2 = share_x / sigma_eff^2``; calibration as :func:`calibrate`."""
    sh = np.asarray(shares, dtype=float)
    if sh.shape != (3,) or np.any(sh <= 0) or abs(sh.sum() - 1) > 1e-9:
        raise ValueError(f"shares must be 3 positive numbers summing to 1, got {shares!r}")
    if epsilon is not None and math.isinf(float(epsilon)):
        return 0.0, 0.0, 0.0
    s = _calibrate_shares(epsilon, delta, q, T, M, tuple(float(v) for v in sh), bound)
    return float(s[0]), float(s[1]), float(s[2])


# ================================================================================================
# The two private server steps, as plain functions (tested directly)
# ================================================================================================
def identifier_sensitivity(C_s: float) -> float:
    """Replace-one L2 sensitivity of one clipped one-hot identifier: ``||C_s (e_j - e_j')|| = sqrt(2) C_s``."""
    return math.sqrt(2.0) * float(C_s)


def privatize_identifiers(
    chosen: torch.Tensor, k: int, sigma_s: float, C_s: float, rng: np.random.Generator, *, literal: bool = False
) -> tuple[torch.Tensor, np.ndarray]:
    """Alg. 2: ``s~ = s/max(1, ||s||/C_s) + N(0, std^2)`` for the one-hots of ``chosen`` (m,) with
    ``std = sqrt(2) C_s sigma_s`` (the replace-one sensitivity times the multiplier), or the paper's
    literal ``C_s sigma_s`` when ``literal``; returns ``(argmax s~ (m,), s~ (m, k))``. ``sigma_s = 0``
    adds nothing (and draws nothing)."""
    if not 0 < C_s <= 1:
        raise ValueError(f"C_s (identifier clip) must be in (0, 1], got {C_s!r}")
    m = int(chosen.shape[0])
    s = np.zeros((m, k))
    s[np.arange(m), chosen.numpy()] = 1.0
    s = s / max(1.0, 1.0 / C_s)  # ||s|| = 1 -> C_s
    std = (C_s if literal else identifier_sensitivity(C_s)) * sigma_s
    s = add_gaussian_noise(s, std, rng)
    return torch.as_tensor(np.argmax(s, axis=1), dtype=torch.long), s


def release_cluster_sum(s: torch.Tensor, std: float, rng: np.random.Generator) -> torch.Tensor:
    """The released form of one parameter's k per-cluster sums: ``s`` plus i.i.d. ``N(0, std^2)`` on
    every coordinate (``s`` itself when ``std`` is 0). Every cluster-sum release of RR-Cluster and
    its DP baselines goes through here, and it reports the noise it added (``"cluster_sum_noise"``,
    :mod:`fedclust.privacy.observe`) to an audit that observes it."""
    out = add_gaussian_noise(s, std, rng) if std > 0 else s
    if observing("cluster_sum_noise"):
        report("cluster_sum_noise", (out - s).double().numpy().ravel())
    return out


def noisy_cluster_sums(deltas: Params, groups: torch.Tensor, k: int, std: float, rng: np.random.Generator) -> Params:
    """Alg. 1 line 12 (before the division): per-cluster sums of the (clipped) updates plus i.i.d.
    ``N(0, std^2)`` on every coordinate of every one of the k sums (drawn per parameter, in dict order)."""
    out = {}
    for n, v in deltas.items():
        out[n] = release_cluster_sum(segment_sum(v, groups, k), std, rng)
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
      must be 0 too when k > 1, i.e. a non-private run); ``C_s`` identifier clip in (0, 1] (0.1;
      irrelevant to the argmax); noise std ``sqrt(2) C_s sigma_s``;
    * ``sigma_theta``: cluster-sum noise multiplier, noise std ``2 C_theta sigma_theta`` (the replace-one
      sensitivity, module docstring); ``clip`` = C_theta (None: no clipping; only allowed without noise);
    * ``noise_calibration``: ``"replace_one"`` (default) or ``"paper_literal"`` (the paper's noise,
      accounted at its true, smaller multipliers; module docstring);
    * ``B``: rebalancing threshold (0 = off);
    * ``global_keys`` (FedCAM): names of the global-model parameters, aggregated over all of M^t with
      noise std ``2 C_theta sigma_g`` and clipped separately; ``frozen_keys`` (FedPer's personal head):
      never aggregated; all other parameters are the cluster part;
    * ``server_lr`` gamma.

    ``log`` holds per-round lists: ``round``, ``n_moved``, ``sizes_before_rr``, ``sizes_after_rr``
    (post-processing of the accounted identifiers), ``identifier_flips`` (fraction of sampled clients
    whose noisy argmax differs from their choice) and ``n_clipped`` (experimenter-side diagnostics from
    raw data, outside the guarantee).
    """

    working_copies = 2  # accumulate: the chunk's deltas and their clipped copies

    name = "rr_cluster"

    def __init__(
        self,
        *,
        sigma_s: float | None,
        sigma_theta: float,
        clip: float | None,
        B: int = 0,
        C_s: float = 0.1,
        noise_calibration: str = "replace_one",
        sigma_g: float | None = None,
        global_keys=(),
        frozen_keys=(),
        server_lr: float = 1.0,
        label: str = "rr_cluster",
    ):
        super().__init__(server_lr=server_lr)
        if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 0:
            raise ValueError(f"B (rebalancing threshold) must be an integer >= 0, got {B!r}")
        self.B = int(B)
        if noise_calibration not in NOISE_CALIBRATIONS:
            raise ValueError(f"noise_calibration must be one of {NOISE_CALIBRATIONS}, got {noise_calibration!r}")
        self.noise_calibration = noise_calibration
        self.literal = noise_calibration == "paper_literal"
        # noise std of a cluster sum (and FedCAM's global sum) in units of C_theta * multiplier
        self.factor = (2 if self.B >= 1 else 1) if self.literal else 2
        self.global_factor = 1 if self.literal else 2
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
            raise ValueError(
                "clip (C_theta) must be given when sigma_theta or sigma_g > 0 (the noise is "
                "calibrated to the clipped sensitivity)"
            )
        if not 0 < C_s <= 1:
            raise ValueError(f"C_s (identifier clip) must be in (0, 1], got {C_s!r}")
        self.clip, self.C_s = (None if clip is None else float(clip)), float(C_s)
        self.global_keys, self.frozen_keys = tuple(global_keys), tuple(frozen_keys)
        if self.global_keys and self.sigma_theta > 0 and self.sigma_g <= 0:
            raise ValueError("sigma_g must be > 0 for the global part when sigma_theta > 0 (FedCAM)")
        self.label = label
        self.log: dict[str, list] = {
            k: [] for k in ("round", "n_moved", "sizes_before_rr", "sizes_after_rr", "identifier_flips", "n_clipped")
        }

    @property
    def private(self) -> bool:
        return self.sigma_theta > 0

    # noise stds actually added (used by __call__ and, divided by the true sensitivities, by finish)
    @property
    def identifier_std(self) -> float:
        return (self.C_s if self.literal else identifier_sensitivity(self.C_s)) * self.sigma_s

    @property
    def sum_std(self) -> float:
        return self.factor * (self.clip or 0.0) * self.sigma_theta

    @property
    def global_std(self) -> float:
        return self.global_factor * (self.clip or 0.0) * self.sigma_g

    def groups(self, updates: ClientUpdates, ctx) -> torch.Tensor:
        """Steps 2-4: noisy one-hot identifiers, argmax, random rebalancing."""
        chosen = updates.chosen
        if ctx.k > 1 and self.sigma_s > 0:
            noisy, _ = privatize_identifiers(
                chosen, ctx.k, self.sigma_s, self.C_s, ctx.rngs["noise"], literal=self.literal
            )
        else:
            if ctx.k > 1 and self.private:
                raise ValueError(
                    "sigma_s must be > 0 when sigma_theta > 0 and k > 1 (the identifiers are released too)"
                )
            noisy = chosen.clone()
        rr = random_rebalance(noisy.numpy(), ctx.k, self.B, ctx.rngs["rebalance"])
        self.log["round"].append(ctx.round)
        self.log["n_moved"].append(rr.n_moved)
        self.log["sizes_before_rr"].append(rr.sizes_before.tolist())
        self.log["sizes_after_rr"].append(rr.sizes_after.tolist())
        self.log["identifier_flips"].append(float((noisy != chosen).float().mean()) if len(chosen) else 0.0)
        return torch.as_tensor(rr.groups, dtype=torch.long)

    # A round is begin (identifiers, rebalancing), one accumulate per chunk of clients (clip every
    # update, add it to its group's running sum) and end (noise on the complete sums, server step), so
    # the engine can fold a round of any size in chunks; the whole round is the same three calls with
    # one chunk (Aggregator._fold). The clipped sums follow the engine's fixed order (blocks of rows
    # added with index_add_, blocks along aggregation.SumTree; the accumulator splits as
    # _SumAggregator.partial describes), so on the CPU the chunked sums, and the sums workers return,
    # are the unchunked sums bit for bit.
    def supports_chunks(self):
        return True

    def __call__(self, state, updates, ctx):
        return self._fold(state, updates, ctx)

    def begin(self, state, updates, ctx):
        g = self.groups(updates, ctx)
        names = list(state.params)
        return {
            "g": g,
            "counts": segment_counts(g, ctx.k),
            "sums": {},
            "gsums": {},
            "n_clip": 0,
            "gl": [n for n in names if n in self.global_keys],
            "cl": [n for n in names if n not in self.global_keys and n not in self.frozen_keys],
        }

    def accumulate(self, acc, chunk, rows, ctx):
        g = acc["g"][rows]
        # steps 5-6 (before the noise) for the cluster part
        dc, n_clip = _clip({n: chunk.params[n] - chunk.start_params[n] for n in acc["cl"]}, self.clip)
        for n, v in dc.items():
            self._add(acc["sums"], n, v, g, ctx.k)
        # FedCAM's global part: one sum over all sampled clients (one segment), never rebalanced
        if acc["gl"]:
            dg, n_clip_g = _clip({n: chunk.params[n] - chunk.start_params[n] for n in acc["gl"]}, self.clip)
            zero = torch.zeros(len(g), dtype=torch.long)
            for n, v in dg.items():
                self._add(acc["gsums"], n, v, zero, 1)
            n_clip += n_clip_g
        acc["n_clip"] += n_clip

    def end(self, state, acc, ctx):
        counts, rng = acc["counts"], ctx.rngs["noise"]
        params = dict(state.params)
        for n in acc["cl"]:  # noise on each of the k sums, per parameter in dict order (noisy_cluster_sums)
            old = state.params[n]
            s = release_cluster_sum(acc["sums"].get(n, torch.zeros_like(old)), self.sum_std, rng)
            c = counts.to(old.device, old.dtype).reshape(-1, *([1] * (old.ndim - 1)))
            params[n] = torch.where(c > 0, old + self.server_lr * s / c.clamp(min=1), old)
        if acc["gl"]:
            m = max(len(acc["g"]), 1)
            for n in acc["gl"]:
                s = acc["gsums"].get(n, torch.zeros_like(state.params[n][:1]))[0]
                if self.global_std > 0:
                    noisy = add_gaussian_noise(s, self.global_std, rng)
                    if observing("global_sum_noise"):  # FedCAM's global part, seen by an audit too
                        report("global_sum_noise", (noisy - s).double().numpy().ravel())
                    s = noisy
                params[n] = state.params[n] + self.server_lr * (s / m).unsqueeze(0)  # same g in every row
        self.log["n_clipped"].append(acc["n_clip"])
        return Aggregation(params, state.momentum, acc["g"], counts.numpy().copy())

    def noise_multipliers(self) -> tuple[float, ...]:
        """The release's noise multipliers: each noise std added divided by its replace-one sensitivity
        (identifiers ``sqrt(2) C_s``, sums ``2 C_theta``), in the order (identifier, global, cluster)."""
        z = []
        if self.sigma_s > 0:
            z.append(self.identifier_std / identifier_sensitivity(self.C_s))
        if self.global_keys:
            z.append(self.global_std / (2.0 * self.clip))
        z.append(self.sum_std / (2.0 * self.clip))
        return tuple(float(v) for v in z)

    def finish(self, rounds: int, n_clients: int, n_sampled: int) -> list:
        """The run's DP release (empty for a non-private run): replace-one, fixed-size sampling of
        ``n_sampled`` of ``n_clients``, client level, ``rounds`` steps (module docstring)."""
        if not self.private:
            return []
        label = self.label + (" [paper_literal noise]" if self.literal else "")
        return [
            GaussianRelease(
                self.noise_multipliers(),
                count=int(rounds),
                population=int(n_clients),
                sample_size=int(n_sampled),
                label=label,
                **RELATION,
                extra={
                    "noise_calibration": self.noise_calibration,
                    "C_theta": self.clip,
                    "C_s": self.C_s,
                    "sum_noise_std": self.sum_std,
                    "identifier_noise_std": self.identifier_std,
                    "global_noise_std": self.global_std if self.global_keys else None,
                    "sensitivities": {"identifier": identifier_sensitivity(self.C_s), "sum": 2.0 * self.clip},
                },
            )
        ]


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
    """FeSEM (Long et al. 2023, "Multi-center federated learning") under sampling + DP.

    Client i keeps the index of its last assignment; it starts local training from that centre (first
    participation: the argmin-loss model), then picks ``j_hat = argmin_j ||theta_i - theta_j||_2`` over
    the current centres (E-step) and sends ``Delta_i = theta_i - theta_{j_hat}`` with one-hot(j_hat).
    The server side (M-step) is the aggregator's. Everything is batched over the sampled clients.
    """

    def __init__(self, data, model, config):
        super().__init__(data, model, config)
        if self.beta != 0 or self.local_update != "model":
            raise ValueError("FeSEM runs local model training without momentum (beta=0, local_update='model')")
        self.last_center = np.full(self.data.n_clients, -1, dtype=np.int64)

    def client_round(self, state, clients, lr):
        X, y, n = self.client_data(clients)
        t0 = time.perf_counter()
        losses, _ = client_model_losses(self.model, state.params, X, y, n, max_rows=self.max_rows)
        last = torch.as_tensor(self.last_center[clients])
        start_j = torch.where(last >= 0, last, assign_clusters(losses))
        sj = start_j.to(next(iter(state.params.values())).device)
        start = GatheredParams(state.params, sj)
        t1 = time.perf_counter()
        params, _ = self.train_models(start, None, X, y, n, lr, self.rngs["minibatch"], beta=0.0)
        # E-step: L2 distance of every trained model to every centre, (S, k) in one cdist
        flat_i = torch.cat([v.reshape(v.shape[0], -1) for v in params.values()], 1)
        flat_c = torch.cat([v.reshape(v.shape[0], -1) for v in state.params.values()], 1)
        chosen_d = torch.argmin(torch.cdist(flat_i.double(), flat_c.double()), dim=1)
        chosen = chosen_d.cpu()
        self.last_center[clients] = chosen.numpy()
        anchor = {k: v.index_select(0, chosen_d) for k, v in state.params.items()}
        self.count_local_samples(n, self.local_steps)
        self.timing["assign"] += t1 - t0
        self.timing["local"] += time.perf_counter() - t1
        return ClientUpdates(
            clients=clients,
            chosen=chosen,
            losses=losses,
            start_params=anchor,
            params=params,
            momentum=None,
            n_samples=n,
        )


# ================================================================================================
# Building and running
# ================================================================================================
def _sample_size(data: FederatedTensors, participation, clients_per_round) -> int:
    if clients_per_round is not None:
        return int(clients_per_round)
    if not 0 < participation <= 1:
        raise ValueError(f"participation must be in (0, 1], got {participation!r}")
    return max(1, int(round(participation * data.n_clients)))


PRIVACY_NOTES = (
    "client-level DP under replace-one neighbours (one client's data replaced by any other) with fixed-size "
    "client sampling without replacement (WBK19 Thm 27 in dp-accounting)",
    "noise calibrated to the replace-one sensitivities: identifiers sqrt(2) C_s, cluster sums 2 C_theta with "
    "or without rebalancing (the partition is post-processing of the noisy identifiers)",
    "outside the guarantee (experimenter-side, raw data): test accuracy, client ACC/NMI, training loss, "
    "identifier_flips, n_clipped",
)


@dataclass(frozen=True)
class ReleaseSettings:
    """The noise, clipping and server step of RR-Cluster's releases (see :func:`run`): identifier noise
    multiplier ``sigma_s`` with its clip ``C_s``, model noise multiplier ``sigma_theta`` with the clip
    ``clip`` = C_theta, FedCAM's global-part multiplier ``sigma_g``, the ``noise_calibration`` and the
    server step ``server_lr``."""

    sigma_s: float | None = 0.0
    sigma_theta: float = 0.0
    sigma_g: float | None = None
    clip: float | None = None
    C_s: float = 0.1
    noise_calibration: str = "replace_one"
    server_lr: float = 1.0


#: local training settings of RR-Cluster and the DP baselines where they differ from the engine's defaults
TRAINING_DEFAULTS = {"lr": 0.05, "local_steps": 5, "rounds": 100}


def split_settings(settings: dict) -> tuple[ReleaseSettings, dict]:
    """The :class:`ReleaseSettings` named in the keyword ``settings`` and the rest (the engine's)."""
    if "sensitivity_factor" in settings:
        raise ValueError(
            "sensitivity_factor was removed: every method adds noise for its "
            "replace-one sensitivity; noise_calibration='paper_literal' reproduces the paper's noise"
        )
    names = {f.name for f in fields(ReleaseSettings)}
    release = ReleaseSettings(**{n: v for n, v in settings.items() if n in names})
    return release, {n: v for n, v in settings.items() if n not in names}


def _check_private_setup(data: FederatedTensors, config: EngineConfig, release: ReleaseSettings, B: int) -> None:
    """Refuse a setup the replace-one accounting does not cover, or a threshold ``B`` out of range."""
    if config.sampling != "fixed":
        raise ValueError(
            "sampling must be 'fixed' (fixed-size sampling without replacement; the replace-one accounting assumes it)"
        )
    k, sigma_s, sigma_theta = config.k, release.sigma_s, release.sigma_theta
    m = _sample_size(data, config.participation, config.clients_per_round)
    check_threshold(B, m, k)
    if k > 1 and sigma_theta and sigma_theta > 0 and not (sigma_s and 0 < sigma_s < math.inf):
        raise ValueError(
            f"sigma_s must be > 0 when sigma_theta > 0 and k={k} > 1 (the identifiers are released "
            f"too), got sigma_s={sigma_s!r}"
        )
    if sigma_theta and sigma_theta > 0 and config.init_min_fraction is not None:
        raise ValueError(
            "init_min_fraction must be None in a private run: IFCA's restart heuristic picks the "
            "initial models with the clients' raw losses, a release without a DP mechanism; "
            "private runs use the public random init"
        )


def build_engine(
    data: FederatedTensors,
    model: BatchedModel,
    config: EngineConfig,
    release: ReleaseSettings,
    *,
    base: str = "ifca",
    B: int = 8,
    engine_cls=None,
    aggregator_kwargs: dict | None = None,
) -> ClusteredFLEngine:
    """A configured engine for RR-Cluster(``base``) (B >= 1) or DP-``base`` (B = 0); see :func:`run`.

    ``config`` holds the engine's settings (its ``aggregator`` must be None: the private aggregator
    is built here from ``release``; a ``method`` left at the engine's default becomes
    ``rr_cluster_<base>``, or ``dp_<base>`` for B = 0); ``model`` is the base model (FedCAM wraps it in
    :class:`AdditiveModel`). The engine's numpy streams get an extra ``"rebalance"`` stream
    (composition: the engine itself is unchanged).
    """
    if base not in BASES:
        raise ValueError(f"base must be one of {BASES}, got {base!r}")
    if config.aggregator is not None:
        raise ValueError("RR-Cluster builds its own aggregator: config.aggregator must be None")
    _check_private_setup(data, config, release, B)
    agg_kw = dict(aggregator_kwargs or {})
    if base == "fedcam":
        model = AdditiveModel(model)
        agg_kw["global_keys"] = tuple(GLOBAL_PREFIX + n for n in model.base.init(1, 0))
        agg_kw["sigma_g"] = release.sigma_g
    agg = PrivateClusterAggregator(
        sigma_s=release.sigma_s,
        sigma_theta=release.sigma_theta,
        clip=release.clip,
        B=B,
        C_s=release.C_s,
        noise_calibration=release.noise_calibration,
        server_lr=release.server_lr,
        label=f"{'rr_cluster' if B else 'dp'}_{base}",
        **agg_kw,
    )
    if engine_cls is None:
        engine_cls = FeSEMEngine if base == "fesem" else ClusteredFLEngine
    method = config.method if config.method != EngineConfig.method else f"rr_cluster_{base}" if B else f"dp_{base}"
    eng = engine_cls(data, model, replace(config, aggregator=agg, method=method))
    eng.rngs["rebalance"] = stream(eng.seed, "rebalance")
    return eng


def finalize(eng: ClusteredFLEngine, res: ClusteredFLResult) -> ClusteredFLResult:
    """Copy the aggregator's per-round log into ``res.history`` (keys ``rr_round``, ``n_moved``,
    ``sizes_before_rr``, ``sizes_after_rr``, ``identifier_flips``, ``n_clipped``: one entry per
    training round) and the privacy settings into ``res.info`` (``privacy_notes`` for the report)."""
    agg = eng.aggregator
    if isinstance(agg, PrivateClusterAggregator):
        for key, v in agg.log.items():
            res.history["rr_round" if key == "round" else key] = list(v)
        res.info.update(
            {
                "B": agg.B,
                "sigma_s": agg.sigma_s,
                "sigma_theta": agg.sigma_theta,
                "sigma_g": agg.sigma_g,
                "clip": agg.clip,
                "C_s": agg.C_s,
                "noise_calibration": agg.noise_calibration,
                "sum_noise_std": agg.sum_std,
                "identifier_noise_std": agg.identifier_std,
                "server_lr": agg.server_lr,
                "total_moved": int(sum(agg.log["n_moved"])),
            }
        )
        if agg.private:
            notes = list(PRIVACY_NOTES)
            if agg.literal:
                notes.append(
                    "noise_calibration='paper_literal': the paper's noise (identifiers C_s sigma_s, sums "
                    f"{agg.factor} C_theta sigma_theta) is accounted at its true replace-one multipliers "
                    f"{agg.noise_multipliers()}, so epsilon exceeds the calibration target"
                )
            res.info["privacy_notes"] = notes
    return res


def run(
    data: FederatedTensors,
    model: BatchedModel,
    k: int,
    *,
    base: str = "ifca",
    B: int = 8,
    **settings,
) -> ClusteredFLResult:
    """Run RR-Cluster(``base``) with threshold ``B`` (``B = 0``: DP-``base`` without rebalancing).

    * ``base`` in {"ifca", "fesem", "fedcam"}; ``k`` clusters; ``B`` integer in [0, m/k] with
      m = round(q M) clients per round (ValueError naming B otherwise);
    * the release settings (:class:`ReleaseSettings`): ``sigma_s`` identifier noise multiplier (noise
      ``sqrt(2) C_s sigma_s`` per coordinate, ``C_s`` in (0, 1], default 0.1); ``sigma_theta`` model
      noise multiplier (std ``2 C_theta sigma_theta`` on each cluster sum); ``sigma_g`` FedCAM's
      global-part multiplier; ``clip`` = C_theta; all multipliers relative to the replace-one
      sensitivities (module docstring); ``noise_calibration="paper_literal"``: the paper's noise,
      accounted at its true multipliers; all zero (default): the non-private algorithm (eps = inf);
      server step ``server_lr`` gamma (default 1);
    * the other keyword arguments are settings of :class:`~fedclust.clustered_fl.engine.EngineConfig`,
      with :data:`TRAINING_DEFAULTS` for local training: ``lr`` 0.05, ``local_steps`` 5 (S)GD steps
      (``batch_size`` None = full batch), ``rounds`` T = 100; ``participation`` q (0.1) or
      ``clients_per_round`` (fixed-size sample; q = 1 is full participation), ``seed`` 0
      (``init_min_fraction`` is refused in a private run).

    Returns a :class:`ClusteredFLResult` whose ``dp_events`` is the list of DP releases and whose
    ``history`` has the per-round RR log (see :func:`finalize`).
    """
    release, engine_settings = split_settings(settings)
    config = EngineConfig(k=k, **{**TRAINING_DEFAULTS, **engine_settings})
    eng = build_engine(data, model, config, release, base=base, B=B)
    res = finalize(eng, eng.run())
    logger.info(
        "%s: B=%d, %d updates moved in %d rounds, final test accuracy %.4f",
        res.info["method"],
        B,
        res.info.get("total_moved", 0),
        config.rounds,
        res.info["final"].get("test_accuracy", float("nan")),
    )
    return res
