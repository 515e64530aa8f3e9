"""The ServerApp: the same stages as the simulation backend, every sum released through SecAgg+.

The server runs the method's own stage code (:func:`fedclust.clustering.fed_dp_kmeans.run_stages`,
:func:`fedclust.clustering.fkm.run_rounds`) with :class:`SecAggRelease` as the release: each stage
becomes one run of Flower's :class:`~flwr.server.workflow.SecAggPlusWorkflow`, whose collect stage
carries the stage's broadcast to the sampled clients and whose unmask stage gives the server the sum
of their uploads, and nothing else.

Distributed noise. With ``n`` clients sampled and reconstruction threshold ``t``, every client adds
a Gaussian share of variance ``sigma^2 / t`` (``sigma``: the std the simulation backend adds once to
the sum). SecAgg+ only completes when at least ``t`` clients' vectors reach the sum, so the sum
always carries at least ``t`` shares: variance ``>= sigma^2``, the accounted noise. When ``s >= t``
clients reach the sum, the noise present is ``sigma * sqrt(s / t)``, and the run accounts exactly
that (a noise multiplier ``z * sqrt(s / t)``, with ``s`` the fewest clients of the release's
repeats). Fewer than ``t`` clients: SecAgg+ halts, and :class:`SecAggFailure` says so in one line.
"""

from __future__ import annotations

import math
import time

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.serverapp import Grid

from fedclust.deploy.protocol import pack, release_config, unit
from fedclust.deploy.quantize import choose_encoding, exact_sum, max_error

PROTOCOL = "SecAgg+"


class SecAggFailure(RuntimeError):
    """A release that SecAgg+ could not complete (fewer than ``t`` clients stayed)."""


class _Collect(Strategy):
    """The one piece of Flower's legacy Strategy that SecAgg+'s workflow calls: it addresses our
    instruction to the chosen nodes and keeps the unmasked aggregate it is handed."""

    def __init__(self, grid: Grid, node_ids: list[int], fit_ins: FitIns):
        self.grid, self.node_ids, self.fit_ins = grid, node_ids, fit_ins
        self.average: list[np.ndarray] | None = None
        self.n_results = 0

    def initialize_parameters(self, client_manager):
        return None

    def configure_fit(self, server_round, parameters, client_manager):
        run_id = self.grid.run.run_id
        return [(GridClientProxy(node_id=n, grid=self.grid, run_id=run_id), self.fit_ins) for n in self.node_ids]

    def aggregate_fit(self, server_round, results, failures):
        if results:  # the workflow sets every result's parameters to the unmasked weighted average
            self.average = parameters_to_ndarrays(results[0][1].parameters)
            self.n_results = len(results)
        return None, {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None


class SecAggRelease:
    """The release of a stage through SecAgg+ (the Flower backend's counterpart of the simulation's
    :class:`fedclust.clustering.fed_dp_kmeans.SimulatedSums`): ``release(stage, broadcast, stds,
    clients)`` returns the sum over the (chosen) clients of their noisy statistics.

    ``nodes``: partition id -> Flower node id; ``threshold``: SecAgg+'s reconstruction threshold as
    a fraction of a release's clients (``t = max(2, ceil(threshold * n))``); ``rows``: a public bound
    on a client's number of samples (the encoding's range, :mod:`fedclust.deploy.quantize`);
    ``scale``: the unit of sums (the clip)."""

    def __init__(self, grid: Grid, context: Context, method: str, nodes: dict[int, int], settings: dict):
        self.grid, self.context, self.method, self.nodes = grid, context, method, dict(sorted(nodes.items()))
        self.threshold = float(settings.get("threshold", 0.8))
        self.rows = int(settings["rows"])
        self.clip, self.scale = settings.get("clip"), float(settings.get("scale") or 1.0)
        self.timeout = settings.get("timeout")
        self.n_contributors = len(self.nodes)
        self.releases: list[dict] = []

    def t_of(self, n: int) -> int:
        return min(n, max(2, math.ceil(self.threshold * n)))

    def __call__(self, stage: str, broadcast: dict, stds: dict[str, float], clients=None) -> dict[str, np.ndarray]:
        parts = list(self.nodes) if clients is None else [int(c) for c in clients]
        node_ids = [self.nodes[p] for p in parts]
        n = len(node_ids)
        t = self.t_of(n)
        shares = {name: float(s) / math.sqrt(t) for name, s in stds.items()}
        share_units = max((shares[name] / unit(name, self.scale) for name in shares), default=0.0)
        enc = choose_encoding(self.rows, share_units, n)
        arrays, names = pack(broadcast)
        config = release_config(self.method, stage, self.clip, self.scale, names, shares)
        config["release"] = len(self.releases) + 1
        fit_ins = FitIns(ndarrays_to_parameters(arrays), config)
        average, s = self.aggregate(node_ids, fit_ins, t, enc)
        if average is None:
            raise SecAggFailure(
                f"SecAgg+ could not complete the {stage} release: fewer than t={t} of the {n} sampled clients "
                "stayed in the protocol, so the sum cannot be unmasked and the round is lost"
            )
        self.releases.append(
            {
                "stage": stage,
                "clients_sampled": n,
                "clients_in_sum": s,
                "threshold_t": t,
                "clipping_range": enc.clipping_range,
                "quantization_range": enc.quantization_range,
                "modulus_range": enc.modulus_range,
                "max_quantization_error": {nm: max_error(enc, s) * unit(nm, self.scale) for nm in stds},
                "noise_std_present": {nm: shares[nm] * math.sqrt(s) for nm in stds},
                "noise_std_accounted": {nm: float(v) for nm, v in stds.items()},
            }
        )
        return {nm: exact_sum(a, s, enc) * unit(nm, self.scale) for nm, a in zip(stds, average)}

    def aggregate(self, node_ids: list[int], fit_ins: FitIns, t: int, enc):
        """One run of Flower's SecAgg+ workflow over ``node_ids``: the unmasked weighted average of the
        uploads and the number of clients in it (None, 0 when the protocol halted)."""
        collect = _Collect(self.grid, node_ids, fit_ins)
        legacy = LegacyContext(self.context, strategy=collect)
        legacy.state.config_records["config"] = ConfigRecord({"current_round": int(fit_ins.config["release"])})
        legacy.state.array_records["parameters"] = ArrayRecord()  # read by the workflow; we send our own
        kw = enc.workflow_kwargs()
        SecAggPlusWorkflow(num_shares=1.0, reconstruction_threshold=t, timeout=self.timeout, **kw)(self.grid, legacy)
        return collect.average, collect.n_results

    def summary(self) -> dict:
        """What the run's info and privacy report say about the aggregation."""
        fewest = min((r["clients_in_sum"] for r in self.releases), default=0)
        return {
            "protocol": PROTOCOL,
            "threshold_fraction": self.threshold,
            "threshold_t": max((r["threshold_t"] for r in self.releases), default=0),
            "clients": self.n_contributors,
            "fewest_clients_in_sum": fewest,
            "noise": "each client adds N(0, sigma^2 / t) per entry; the sum of s >= t shares has std sigma sqrt(s / t)",
            "releases": self.releases,
        }

    def noise_factor(self, stage: str) -> float:
        """``sqrt(s / t)`` for the fewest clients ``s`` in any release of ``stage``: the factor by which
        the noise present exceeds the planned one (1 when every release had exactly t)."""
        rel = [r for r in self.releases if r["stage"] == stage]
        if not rel:
            return 1.0
        return min(math.sqrt(r["clients_in_sum"] / r["threshold_t"]) for r in rel)


def wait_for_nodes(grid: Grid, n: int, timeout: float = 120.0) -> list[int]:
    """The ids of ``n`` connected nodes, waiting up to ``timeout`` seconds for them."""
    deadline = time.monotonic() + timeout
    while True:
        ids = sorted(grid.get_node_ids())
        if len(ids) >= n:
            return ids
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(ids)} of the {n} SuperNodes connected within {timeout:.0f} s")
        time.sleep(0.2)


def partitions(grid: Grid, node_ids: list[int], timeout: float = 60.0) -> dict[int, int]:
    """partition id -> node id, asked of every node (a query message; no data)."""
    msgs = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in node_ids]
    out = {}
    for reply in grid.send_and_receive(msgs, timeout=timeout):
        if reply.has_error():
            raise RuntimeError(f"node {reply.metadata.src_node_id} did not say its partition: {reply.error}")
        out[int(reply.content.config_records["node"]["partition-id"])] = reply.metadata.src_node_id
    if len(out) != len(node_ids) or min(out) < 0:
        raise RuntimeError(f"the nodes' partition ids {sorted(out)} are not one per node")
    return out
