"""The settings of one clustered-FL run: :class:`EngineConfig`, the one object
:class:`~fedclust.clustered_fl.engine.ClusteredFLEngine` is configured with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fedclust.clustered_fl.engine.aggregation import Aggregator
from fedclust.clustered_fl.engine.data import Params
from fedclust.clustered_fl.engine.distributed import ChunkRunner
from fedclust.clustered_fl.engine.evaluation import evaluate


@dataclass(frozen=True)
class EngineConfig:
    """Settings of a :class:`~fedclust.clustered_fl.engine.ClusteredFLEngine` run, as given; the engine
    validates them against its data and model (every error names the setting).

    * ``k`` clusters (1 = FedAvg); ``rounds`` T; ``lr`` eta0 with ``lr_decay`` per round;
    * ``beta`` heavy-ball momentum in [0, 1) (0 = IFCA/FedAvg);
    * ``local_update`` ``"model"`` (Option II, H = ``local_steps`` steps) or ``"gradient"`` (Option I);
    * ``batch_size`` None = full local batch, else minibatches (``local_epochs`` given: epochs x
      ceil(n_max/batch_size) steps over per-epoch permutations, overriding ``local_steps``);
    * ``participation`` q (round(q*m) clients per round) or ``clients_per_round``; ``sampling``
      ``"fixed"`` (that many without replacement) or ``"poisson"`` (each client with probability q);
    * ``aggregator``: an :class:`~fedclust.clustered_fl.engine.Aggregator` (default
      :class:`~fedclust.clustered_fl.engine.ModelAveraging` for Option II,
      :class:`~fedclust.clustered_fl.engine.GradientAveraging` for Option I);
    * ``seed``: the seed of the run's random streams (init, sampling, minibatch, noise);
    * ``init_params``/``init_momentum``: start from given stacked tensors (else ``k`` independent random
      inits from stream "init"); ``init_min_fraction``: IFCA's restart heuristic (redraw the init until
      every cluster gets at least this fraction of a sampled set of clients under the initial argmin;
      IFCA used 0.35 for k=2 and 0.10 for k=4), at most ``init_max_restarts`` redraws;
    * ``eval_every`` evaluate every this many rounds (0 = only after the last round; the last round is
      always evaluated); ``train_eval`` ``"sampled"`` or ``"all"``; ``test_select`` ``"test"`` or
      ``"train"``; ``progress(round, record)`` optional callback; ``method`` the name in the records;
    * ``max_rows`` rows (clients x padded samples) of one block of the loss tables and evaluations
      (default 16,384): an MLP 784-200-10 with k = 4 holds about 3 x k x 200 floats per row while a
      block runs (40 MB per 16,384 rows at k = 1, 160 MB at k = 4), on top of the chunk budget, and the
      evaluation of every client runs in such blocks;
    * ``max_chunk_mb`` memory budget (MB) of one chunk of sampled clients (None = ``DEFAULT_CHUNK_MB``,
      512): the round's clients are evaluated, trained and folded into the aggregation
      ``chunk_clients`` at a time (:func:`~fedclust.clustered_fl.engine.bytes_per_client` sizes the
      chunk, cut down to ``32 * 2**j`` clients when 32 or more fit: a whole subtree of the summation
      order, :func:`~fedclust.clustered_fl.engine.aggregation.chunk_size`), so the memory of a round
      does not grow with the clients per round. Chunks consume the random streams exactly as one batch
      does, and the built-in strategies sum in a fixed order: a chunked round equals the unchunked one
      bit for bit. A round that fits in one chunk runs unchanged. An aggregator without the chunked
      protocol (:meth:`Aggregator.supports_chunks`), or an engine subclass with its own
      ``client_round``, still gets the whole round at once (a warning says the budget is not kept).
    * ``client_block``: train the clients of a chunk in blocks of this many, each block through all its
      local steps before the next (:func:`~fedclust.clustered_fl.engine.local_train`; None = the
      whole chunk at once, step by step). Same draws and same per-client arithmetic either way.
    * ``device``: ``"cpu"`` (default), ``"auto"`` (CUDA when available, else CPU), ``"cuda"``...
      (:func:`~fedclust.clustered_fl.engine.resolve_device`). The CPU is the default because it is
      bit-for-bit reproducible: on CUDA the per-cluster sums use atomic adds, so the same seed gives the
      same numbers only up to float rounding (on an H100, 18 of the clustered-FL tests that compare runs
      bit for bit fail there). Same code on both; models and each chunk's data live on the device,
      the data set and the round's bookkeeping in host memory; results come back on the CPU.
    * ``chunk_runner``: where the chunks of a chunked round train
      (:mod:`~fedclust.clustered_fl.engine.distributed`; None = here, one after another;
      :class:`~fedclust.clustered_fl.engine.RayChunkRunner` = one Ray task per chunk). The workers
      return their chunks' per-cluster sums (built-in strategies), the server side (grouping, noise,
      the model step) stays here, and the aggregate equals the serial one bit for bit. Engines that
      override ``_local_update`` (FedProx, FedPer) train their chunks here.
    * ``defer_updates`` (default True): plain-SGD local training with the MLP's first-layer updates
      deferred to one product per local update where that saves work
      (:meth:`~fedclust.clustered_fl.models.MLP.deferred_steps_`; same mathematics, fewer passes over
      the big weight matrix, and over each client's data once instead of once per step when the steps
      draw more rows than it holds). ``defer_updates=False`` runs the steps one after another: the
      float results then differ in the last bits (the numbers of runs made before deferral was the
      default come back bit for bit with it). The engine passes the clients' start models as
      ``GatheredParams`` of the round's cluster models and the clients' choices, so the kernel reads
      each start matrix once instead of every client's copy; same bits.
    * ``evaluator``: the function that evaluates the cluster models (default
      :func:`~fedclust.clustered_fl.engine.evaluate`, same signature). The final model is evaluated
      once: the last round's record and the result's ``info["final"]`` come from the same call (on
      all training clients and the test clients), so they cannot disagree.

    Derive a variant with :func:`dataclasses.replace`.
    """

    k: int
    rounds: int = 300
    lr: float = 0.1
    lr_decay: float = 1.0
    beta: float = 0.0
    local_update: str = "model"
    local_steps: int = 10
    batch_size: int | None = None
    local_epochs: int | None = None
    participation: float = 0.1
    clients_per_round: int | None = None
    sampling: str = "fixed"
    aggregator: Aggregator | None = None
    seed: int = 0
    init_params: Params | None = None
    init_momentum: Params | None = None
    init_min_fraction: float | None = None
    init_max_restarts: int = 20
    eval_every: int = 1
    train_eval: str = "sampled"
    test_select: str = "test"
    max_rows: int = 1 << 14
    max_chunk_mb: float | None = None
    method: str = "clustered_fl"
    progress: Callable[[int, dict], None] | None = None
    client_block: int | None = None
    device: str | torch.device | None = "cpu"
    chunk_runner: ChunkRunner | None = None
    defer_updates: bool = True
    evaluator: Callable[..., dict] = evaluate
