"""Vectorized engine for clustered federated learning (IFCA, CFL-MGD, FedAvg, and RR-Cluster later).

One communication round ``t = 1..T``:

1. ``lr_t = lr * lr_decay**(t-1)``; the server samples a fixed-size set ``M_t`` of ``round(q*m)``
   clients without replacement (stream ``"sampling"`` of :mod:`fedclust.rng`;
   ``sampling="poisson"`` is the alternative).
2. **Cluster estimation**: every sampled client evaluates the loss of all ``k``
   current cluster models on its local training data, in ONE batched forward
   (:meth:`~fedclust.clustered_fl.models.BatchedModel.forward_shared`), and picks the argmin; ties go
   to the lowest index (``torch.argmin`` returns the first minimum).
3. **Local update**, all sampled clients at once, from the chosen model ``chi_{p_i}`` and the chosen
   cluster's server-side momentum ``u_{p_i}``:

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
   keeps its model and momentum":

   * :class:`ModelAveraging` (eq. 6): ``chi_p = mean_{i in S_p} chi~_i``, ``u_p = mean_{i in S_p} u_i``;
   * :class:`GradientAveraging` (eq. 5): ``chi_p <- chi_p - (lr_t/m) sum_{i in S_p} u_i`` with ``m`` the
     TOTAL number of clients, ``u_p = mean u_i``;
   * :class:`DeltaAveraging`: ``chi_p <- chi_p + gamma * (sum_{i in S_p} clip(Delta_i) [+ noise]) / |S_p|``
     with hooks :meth:`Aggregator.groups` (privatize / reassign / rebalance the identifiers),
     :meth:`DeltaAveraging.clip_deltas` and :meth:`DeltaAveraging.privatize_sums` (add noise to the
     per-cluster sums). This is the shape of RR-Cluster's server; a
     private strategy records its releases in ``ctx.dp_events`` or returns them from
     :meth:`Aggregator.finish`.

5. **Evaluation** every ``eval_every`` rounds: training loss (min over clusters,
   mean over clients), pooled test accuracy where every test client uses its lowest-loss model on its
   own data (:func:`fedclust.metrics.pooled_accuracy`), client-clustering ACC/NMI against the true
   groups (:func:`fedclust.metrics.client_clustering_scores`) and the cluster sizes used by the server.
   By default (``train_eval="sampled"``) the train-side metrics come for free from step 2 on the
   round's sampled clients (IFCA's CIFAR code does the same); ``train_eval="all"`` re-evaluates every
   training client after the update. The final result always has the assignment of all clients.

Data come in as :class:`FederatedTensors`: padded per-client tensors ``(n_clients, n_max, d)`` with
the true per-client sample counts (padding is masked out of every loss).

**Memory**: steps 2-4 hold parameter-sized tensors for every sampled client (start model,
trained model, gradient, momentum), so a round of S clients costs about S times one client's working
set. The engine therefore processes the sampled clients in chunks sized to ``max_chunk_mb``
(:func:`bytes_per_client`): the cluster estimate of all S clients first (an (S, k) loss table), then,
chunk by chunk, local training and the aggregator's running per-cluster sums
(:meth:`Aggregator.accumulate`). Minibatch draws are taken for all S clients in the unchunked order
(:class:`_DrawTape`), and the built-in strategies add the clients' updates in one fixed order (blocks
of 32 clients of the round, the blocks' sums along a binary tree: :class:`~.aggregation.SumTree`) that
does not depend on the chunks, so a chunked round equals the unchunked round bit for bit, and so do
chunks trained and summed on worker processes or Ray tasks (:mod:`.distributed`).

**Layout** of this package (everything is re-exported here): :mod:`.data` (:class:`FederatedTensors`,
the padded per-client layout), :mod:`.kernels` (batched losses, cluster estimation, minibatch draws,
local training, segment sums), :mod:`.aggregation` (server state, client updates and the
aggregators), :mod:`.evaluation` (:func:`evaluate`, :class:`ClusteredFLResult`), :mod:`.config`
(:class:`EngineConfig`, the settings of a run), :mod:`.loop`
(:class:`ClusteredFLEngine`, :func:`run_clustered_fl`, :func:`resolve_device`) and :mod:`.distributed`
(the chunks of a round on worker processes or Ray tasks: :class:`ProcessChunkRunner`,
:class:`RayChunkRunner`).
"""

from __future__ import annotations

from fedclust.clustered_fl.engine.aggregation import (
    Aggregation,
    Aggregator,
    ClientUpdates,
    DeltaAveraging,
    GradientAveraging,
    ModelAveraging,
    RoundContext,
    ServerState,
)
from fedclust.clustered_fl.engine.config import EngineConfig
from fedclust.clustered_fl.engine.data import FederatedTensors, GatheredParams, Params, write_client_npy
from fedclust.clustered_fl.engine.distributed import ChunkRunner, ProcessChunkRunner, RayChunkRunner, train_chunk
from fedclust.clustered_fl.engine.evaluation import ClusteredFLResult, evaluate
from fedclust.clustered_fl.engine.kernels import (
    DEFAULT_CHUNK_MB,
    LocalTraining,
    _Batcher,
    _DrawTape,
    assign_clusters,
    bytes_per_client,
    client_model_losses,
    client_norms,
    local_gradient,
    local_train,
    segment_counts,
    segment_sum,
)
from fedclust.clustered_fl.engine.loop import ClusteredFLEngine, resolve_device, run_clustered_fl

__all__ = [
    "FederatedTensors",
    "GatheredParams",
    "write_client_npy",
    "ServerState",
    "ClientUpdates",
    "RoundContext",
    "Aggregation",
    "Aggregator",
    "ModelAveraging",
    "GradientAveraging",
    "DeltaAveraging",
    "segment_sum",
    "segment_counts",
    "client_norms",
    "client_model_losses",
    "assign_clusters",
    "local_train",
    "LocalTraining",
    "local_gradient",
    "ClusteredFLResult",
    "ClusteredFLEngine",
    "EngineConfig",
    "run_clustered_fl",
    "resolve_device",
    "evaluate",
    "bytes_per_client",
    "DEFAULT_CHUNK_MB",
    "ChunkRunner",
    "ProcessChunkRunner",
    "RayChunkRunner",
    "train_chunk",
]
