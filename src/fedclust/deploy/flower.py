"""The Flower backend of FedDP-KMeans and FKM: the same stages, run as a Flower ServerApp and ClientApp.

:func:`run` runs a method on Flower's simulation engine (one virtual SuperNode per client, in Ray
workers): the ServerApp (:func:`make_server_app`) runs the method's stage code with every sum
released through SecAgg+ (:class:`fedclust.deploy.server_app.SecAggRelease`), and the ClientApp
(:func:`fedclust.deploy.client_app.make_client_app`) holds one client's rows each. The result is the
method's :class:`~fedclust.clustering.base.ClusteringResult`, with ``info["aggregation"]``
describing the secure aggregation and the noise that reached every sum, and ``dp_events``
accounting that noise.

:data:`server_app` is the ServerApp of a real deployment (``flwr run`` against a SuperLink; see
``docs/howto/flower.md``): it reads its job from the run config and writes its result as JSON.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from fedclust.clustering import fed_dp_kmeans, fkm
from fedclust.clustering._common import client_rows, new_history, round_logger, server_split
from fedclust.clustering.base import check_inputs
from fedclust.clustering.defaults import DP_CLIP_RULE, clip_from_counts, clip_release
from fedclust.clustering.lloyd import update_centres
from fedclust.deploy import digits
from fedclust.deploy.client_app import make_client_app, partition_of
from fedclust.deploy.server_app import PROTOCOL, SecAggRelease, partitions, wait_for_nodes
from fedclust.metrics import clustering_scores
from fedclust.privacy.observe import report
from fedclust.privacy.report import privacy_report

#: The default reconstruction threshold of SecAgg+, as a fraction of a release's clients.
DEFAULT_THRESHOLD = 0.8

#: Ray's resources for the simulation engine: one CPU per virtual client, no GPU, no dashboard.
RAY_CONFIG = {
    "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
    "init_args": {"num_cpus": 2, "num_gpus": 0, "include_dashboard": False, "logging_level": "error"},
}

# the stage of every release of FedDP-KMeans (fed_dp_kmeans.release_names)
_STAGE_OF = {"projection": "projection", "mean": "projection", "size": "projection", "weighting": "weighting"}


def _stage_of(name: str) -> str:
    return _STAGE_OF.get(name) or name.split("_")[0]


def serve_fed_dp_kmeans(job: Job, release: SecAggRelease) -> object:
    """FedDP-KMeans's server: :func:`fed_dp_kmeans.run_stages` with SecAgg+ releases."""
    if job.plan.clip_stage:  # no clip, no server data: the DP clip estimate through SecAgg+ first
        clip = fed_dp_kmeans.clip_stage(job.plan, release)
        job.plan = job.plan.with_clip(clip)
        release.clip = release.scale = clip
    plan = job.plan
    hist = new_history(job.y)
    log_step = round_logger("fed_dp_kmeans", hist, job.X, job.y, plan.o.steps + 1, job.progress)
    C, state = fed_dp_kmeans.run_stages(plan, release, log_step)
    z_present = {name: float(z) * release.noise_factor(_stage_of(name)) for name, z in plan.z.items()}
    result = fed_dp_kmeans.result_of(job.X, plan, C, state, hist, events_z=z_present)
    return with_aggregation(result, release, z_present)


def clip_stage(job: Job, release: SecAggRelease):
    """FKM's DP clip estimate through SecAgg+ (a private run with neither a clip nor server data): the
    clients' norm histograms, summed with noise multiplier ``job.clip_noise``; the run's plan is then
    made with the estimated clip. Returns the estimate's accountable event."""
    z = float(job.clip_noise)
    noisy = release("clip", {}, {"norm_counts": z})["norm_counts"]
    clip = clip_from_counts(noisy, z)
    job.plan = fkm.plan_run(job.X, job.client, job.k, dataclasses.replace(job.plan.o, clip=clip))
    release.clip = release.scale = clip
    job.clip_rule = DP_CLIP_RULE
    return clip_release(z * release.noise_factor("clip"), "secure_aggregation")


def serve_fkm(job: Job, release: SecAggRelease) -> object:
    """FKM's server: :func:`fkm.run_rounds`, each round's totals through SecAgg+ (after the DP clip
    estimate, when the run needs one)."""
    clip_event = clip_stage(job, release) if job.clip_noise else None
    plan = job.plan
    std = plan.release.sum_std

    def update(C, chosen, _labels):
        out = release("lloyd", {"centres": C}, {"sums": std, "counts": std}, clients=chosen)
        report("lloyd_totals", (out["sums"], out["counts"]))
        return update_centres(C, out["sums"], out["counts"], plan.release, len(chosen))

    C, labels, history = fkm.run_rounds(job.X, plan, update, job.y, job.progress)
    z = plan.o.noise_multiplier * release.noise_factor("lloyd")
    result = fkm.result_of(plan, C, labels, history, noise_multiplier=z)
    if clip_event is not None:
        result.dp_events.insert(0, clip_event)
        result.info.update(clip=plan.o.clip, clip_rule=job.clip_rule)
    return with_aggregation(result, release, {"fkm": z} if plan.private else {})


def with_aggregation(result, release: SecAggRelease, z_present: dict):
    result.info["backend"] = "flower"
    result.info["aggregation_protocol"] = PROTOCOL
    result.info["aggregation"] = {**release.summary(), "noise_multipliers_present": z_present}
    return result


SERVE = {"fed_dp_kmeans": serve_fed_dp_kmeans, "fkm": serve_fkm}


@dataclasses.dataclass
class Job:
    """One run on the server: the method's plan, the data it is scored on (experimenter-side, as in
    the simulation backend), and the SecAgg+ settings (``threshold``, ``rows``, ``timeout``)."""

    method: str
    plan: object
    X: np.ndarray
    y: np.ndarray | None
    n_clients: int
    threshold: float = DEFAULT_THRESHOLD
    rows: int = 0
    timeout: float | None = None
    progress: Callable | None = None
    client: np.ndarray | None = None
    k: int = 0
    clip_noise: float | None = None  # FKM: the noise multiplier of a DP clip estimate to release first
    clip_rule: str | None = None

    def settings(self) -> dict:
        """The release settings of :class:`SecAggRelease`: the clip, and the unit of sums (the clip;
        without one, non-private FKM, a bound on a sample's norm from the data's largest entry)."""
        X = self.X
        clip = self.plan.clip if self.method == "fed_dp_kmeans" else self.plan.o.clip
        scale = clip or float(np.abs(X).max() * np.sqrt(X.shape[1])) or 1.0
        return {"threshold": self.threshold, "rows": self.rows, "clip": clip, "scale": scale, "timeout": self.timeout}

    def serve(self, grid: Grid, context: Context):
        """The method's server on a Flower grid, once its nodes are connected."""
        ids = wait_for_nodes(grid, self.n_clients)
        # which node holds which partition matters only when the server samples some of them (FKM with
        # clients_per_round), to sample the clients the simulation samples; a query round costs seconds
        sampled = self.method == "fkm" and self.plan.K < self.plan.n_clients
        nodes = partitions(grid, ids) if sampled else dict(enumerate(ids))
        return SERVE[self.method](self, SecAggRelease(grid, context, self.method, nodes, self.settings()))


def make_server_app(serve: Callable[[Grid, Context], None]) -> ServerApp:
    """A ServerApp whose main is ``serve(grid, context)``, run in the caller's context variables (the
    simulation engine runs it in a thread, where the caller's release observers would be lost)."""
    app = ServerApp()
    caller = contextvars.copy_context()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        caller.copy().run(serve, grid, context)

    return app


def client_partitions(method: str, X, client, k: int, o) -> list[np.ndarray]:
    """Every client's raw rows, in client order, exactly as the method's plan numbers the clients."""
    if method == "fed_dp_kmeans":
        is_server, _ = fed_dp_kmeans.server_points(X, o, k)
        _, cl = np.unique(client[~is_server], return_inverse=True)
        Xp = X[~is_server]
    else:
        Xp, cl, _ = client_rows(X, client, server_split(X, k, o.server_rows, o.server_data))
    return [Xp[cl == i] for i in range(int(cl.max()) + 1)]


def build_job(method: str, X, client, k: int, options, settings: dict, *, y=None, threshold=None, clip_noise=None):
    """The server's job of a run and every client's raw rows (for the simulation engine's ClientApps);
    ``clip_noise`` (FKM): release a DP clip estimate at this noise multiplier before the rounds."""
    mod = {"fed_dp_kmeans": fed_dp_kmeans, "fkm": fkm}[method]
    Options = mod.FedDPKMeansOptions if method == "fed_dp_kmeans" else mod.FKMOptions
    if clip_noise and method == "fkm":  # a placeholder clip until the clip stage has released the estimate
        settings = {**settings, "clip": 1.0}
    o = Options.build(options, settings)
    X, client, _ = check_inputs(X, client, k)
    if o.trust_model != "secure_aggregation":
        raise ValueError(
            f"the Flower backend releases through SecAgg+ (trust_model secure_aggregation), not {o.trust_model!r}"
        )
    plan = mod.plan_run(X, client, k, o)
    per_release = plan.K if method == "fkm" else plan.n_contributors
    if per_release < 2:
        raise ValueError(
            f"SecAgg+ sums the uploads of at least 2 clients; this {method} run has {per_release} per release"
        )
    rows = client_partitions(method, X, client, k, o)
    t = DEFAULT_THRESHOLD if threshold is None else float(threshold)
    job = Job(method, plan, X, y, len(rows), t, X.shape[0], client=client, k=k, clip_noise=clip_noise)
    return job, rows


def run(method: str, X, client, k: int, options=None, *, y=None, progress=None, flower: dict | None = None, **kw):
    """Run ``method`` (``fed_dp_kmeans`` or ``fkm``) on Flower's simulation engine; ``options`` and
    ``kw`` as the method's ``run``; ``flower``: ``threshold`` (SecAgg+'s t as a fraction of the
    clients), ``clip_noise`` (FKM: release a DP clip estimate at this multiplier first), ``drop``
    (tests: ``drop(partition, config) -> bool`` makes a client fail a release)."""
    flower = dict(flower or {})
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # nothing leaves the machine
    job, rows = build_job(
        method, X, client, k, options, kw, y=y, threshold=flower.get("threshold"), clip_noise=flower.get("clip_noise")
    )
    job.progress = progress
    holder: dict = {}

    def serve(grid, context):
        try:
            holder["result"] = job.serve(grid, context)
        except BaseException as err:  # handed to the caller below, whatever the engine does with it
            holder["error"] = err

    client_app = make_client_app(lambda ctx: rows[partition_of(ctx)], flower.get("drop"))
    run_simulation(make_server_app(serve), client_app, num_supernodes=len(rows), backend_config=RAY_CONFIG)
    if "error" in holder:
        raise holder["error"]
    if "result" not in holder:
        raise RuntimeError(f"Flower's simulation engine ended without a {method} result")
    return holder["result"]


# ---- the deployment's ServerApp ----------------------------------------------------------------------
def deployment_job(cfg: dict) -> Job:
    """The FedDP-KMeans job of a one-machine deployment on digits, from the run config."""
    n_parts = int(cfg.get("num-partitions", 3))
    seed = int(cfg.get("seed", 0))
    X, y = digits.scaled()
    server, client = digits.split(n_parts, int(cfg.get("data-seed", 0)), float(cfg.get("server-fraction", 0.05)))
    client = np.where(client < 0, 0, client)  # the server's rows are taken out by server_rows
    k, steps = int(cfg.get("k", 10)), int(cfg.get("steps", 1))
    base = dict(server_rows=server, steps=steps, seed=seed)
    plan = fed_dp_kmeans.plan_run(X, client, k, fed_dp_kmeans.FedDPKMeansOptions.build(None, base))
    eps = float(cfg.get("epsilon", 0.0))
    if eps > 0:
        z = fed_dp_kmeans.noise_multipliers(eps, float(cfg.get("delta", 1e-5)), projection=plan.projection, steps=steps)
        o = fed_dp_kmeans.FedDPKMeansOptions.build(None, {**base, "noise": z, "projection": plan.projection})
        plan = fed_dp_kmeans.plan_run(X, client, k, o)
    job = Job("fed_dp_kmeans", plan, X, y, n_parts, float(cfg.get("threshold", DEFAULT_THRESHOLD)), X.shape[0])
    job.timeout = float(cfg.get("timeout", 120.0))
    return job


def _serve_deployment(grid: Grid, context: Context) -> None:
    cfg = dict(context.run_config)
    job = deployment_job(cfg)
    result = job.serve(grid, context)
    delta = float(cfg.get("delta", 1e-5))
    rep = privacy_report(list(result.dp_events), delta, method="fed_dp_kmeans", mechanism="gaussian", accountant="pld")
    out = {
        "ACC": clustering_scores(job.y, result.labels)["ACC"],
        "centres": np.asarray(result.centroids).tolist(),
        "epsilon": rep["epsilon"],
        "delta": delta,
        "aggregation": result.info["aggregation"],
    }
    path = Path(str(cfg.get("out", "fedclust-flower-result.json")))
    path.write_text(json.dumps(out, indent=1, default=float), encoding="utf-8")


#: The deployment's ServerApp (``[tool.flwr.app.components] serverapp`` of the Flower App).
server_app = make_server_app(_serve_deployment)
