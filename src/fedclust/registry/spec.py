"""The method registry: one :class:`MethodSpec` per method, read by the Kedro pipelines, the grids and
the benchmark (no second dispatch table).

A spec names the method's config class (its parameters, defaults and checks), its ``calibrate``
(privacy budget -> noise; a non-private method's records epsilon = inf) and its ``run`` adapter,
and what it releases. Adding a method: its library ``run`` and options class, an adapter here and its
config generated from the options class (:mod:`fedclust.registry.configs`), and a
``conf/base/parameters_<name>.yml`` with the same defaults (``tests/registry`` checks the two agree).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np

from fedclust.memory import require_memory
from fedclust.options import MethodConfig
from fedclust.params_check import _nearest
from fedclust.registry import clustered_fl as cfl
from fedclust.registry import clustering as cl
from fedclust.registry import configs as C
from fedclust.registry.helpers import log_work, n_clients_of


@dataclass(frozen=True)
class MethodSpec:
    """One method: what the pipelines and grids need to run it.

    ``calibrate(privacy, config, *data) -> noise`` and ``run(*data, noise, config, seed) -> result``,
    with ``data`` = ``(dataset, partition)`` for ``family="clustering"`` and ``(rotated,)`` for
    ``family="clustered_fl"``.
    """

    name: str
    family: Literal["clustering", "clustered_fl"]
    #: the config class, or its name in :mod:`fedclust.registry.configs` (generated when first used)
    config_ref: type[MethodConfig] | str
    calibrate: Callable
    run: Callable
    #: does it have a differentially private variant (else its report says epsilon = inf)
    private: bool
    #: the privacy unit (``sample`` or ``client``) and what a private run releases
    unit: str = "sample"
    releases: str = ""
    #: Gaussians released per round, when fixed (the accountant composes rounds x this); None otherwise
    mechanisms_per_round: int | None = None
    #: ``(config) -> [steps that are not DP]`` for a method some of whose settings are not DP
    non_dp_steps: Callable[[MethodConfig], list[str]] | None = None
    #: part of the default quick tour (``kedro run``)
    in_tour: bool = False
    #: the library function the adapter calls, ``"module:function"`` (imported on first use)
    library: str = ""
    #: the trust models a private run can use (:mod:`fedclust.privacy.release`), the default first
    trust_models: tuple[str, ...] = ()

    @property
    def config(self) -> type[MethodConfig]:
        """The method's config class (its parameters, defaults and checks)."""
        ref = self.config_ref
        return getattr(C, ref) if isinstance(ref, str) else ref

    @property
    def default_trust_model(self) -> str | None:
        return self.trust_models[0] if self.trust_models else None

    @property
    def library_run(self) -> Callable:
        """The library ``run`` of the method (for grids that pass their own keyword arguments)."""

        module, _, fn = self.library.partition(":")
        return getattr(importlib.import_module(module), fn)

    def config_from(self, params: dict | None) -> MethodConfig:
        """The validated config of ``<name>.train`` (an error names every bad key)."""
        cfg = self.config.from_params(params, where=f"{self.name}.train")
        tm = getattr(cfg, "trust_model", None)
        if tm is not None and self.trust_models and tm not in self.trust_models:
            raise ValueError(f"{self.name}.train.trust_model={tm!r}: {self.name} supports {list(self.trust_models)}")
        return cfg


def _clustering(name, config, calibrate, run, **kw) -> MethodSpec:
    return MethodSpec(name, "clustering", config, calibrate, run, **kw)


_ALL_MODELS = ("secure_aggregation", "central", "local")


def _kmeans(name, config, releases, private=True) -> MethodSpec:
    return _clustering(
        name,
        config,
        cl.kmeans_calibrate(name),
        cl.kmeans_run(name),
        private=private,
        trust_models=_ALL_MODELS if private else (),
        library=f"fedclust.clustering.{name}:run",
        mechanisms_per_round=cl.KMEANS_MECHANISMS[name],
        releases=releases,
        non_dp_steps=lambda cfg, name=name: cl.non_dp_steps(name, cfg),
    )


def _clustered(name, config, in_tour=True) -> MethodSpec:
    return MethodSpec(
        name,
        "clustered_fl",
        config,
        cfl.clustered_calibrate(name),
        cfl.clustered_run(name),
        private=False,
        library=f"fedclust.clustered_fl.{name}:run",
        unit="client",
        releases="client models every round (not private)",
        in_tour=in_tour,
    )


_SPECS = [
    _clustering(
        "fkm",
        "FKMConfig",
        cl.fkm_calibrate,
        cl.fkm_run,
        private=True,
        mechanisms_per_round=1,
        releases="noisy per-cluster sums and counts every round",
        in_tour=True,
        library="fedclust.clustering.fkm:run",
        trust_models=_ALL_MODELS,
        non_dp_steps=lambda cfg: cl.non_dp_steps("fkm", cfg),
    ),
    _clustering(
        "fedsc",
        "FedSCConfig",
        cl.fedsc_calibrate,
        cl.fedsc_run,
        private=True,
        releases="perturbed data once (data) or noisy Z every round and C once (factors)",
        in_tour=True,
        library="fedclust.clustering.fedsc:run",
        trust_models=("local",),
    ),
    _clustering(
        "dp_fedc",
        "DPFedCConfig",
        cl.dp_fedc_calibrate,
        cl.dp_fedc_run,
        private=True,
        releases="noisy W gradients of the sampled clients, per-round sigma from eq. (29)",
        in_tour=True,
        library="fedclust.clustering.dp_fedc:run",
        trust_models=("local", "secure_aggregation"),
    ),
    _clustering(
        "fed_dp_kmeans",
        "FedDPKMeansConfig",
        cl.fed_dp_kmeans_calibrate,
        cl.fed_dp_kmeans_run,
        private=True,
        releases="noisy sums over clients once per stage: server-point weights, (projection, lift,) "
        "Lloyd sums and counts",
        in_tour=True,
        library="fedclust.clustering.fed_dp_kmeans:run",
        trust_models=_ALL_MODELS,
    ),
    _kmeans("fzkm", "FZKMConfig", "noisy fuzzy sums and weights every round"),
    _kmeans("dk_pp", "DKPPConfig", "noisy sums and counts every round (k-means|| seeding not DP)"),
    # DKM has no DP variant: a private run adds the calibrated noise but reports epsilon = inf
    _kmeans("dkm", "DKMConfig", "coresets and local centres (no DP variant)", private=False),
    _clustering(
        "fedc_avg",
        "FedCAvgConfig",
        cl.fedc_mf_calibrate("fedc_avg"),
        cl.fedc_mf_run("fedc_avg"),
        private=False,
        releases="local W models every round (not private)",
        in_tour=True,
        library="fedclust.clustering.fedc_mf:run_fedcavg",
    ),
    _clustering(
        "fedc_gds",
        "FedCGdsConfig",
        cl.fedc_mf_calibrate("fedc_gds"),
        cl.fedc_mf_run("fedc_gds"),
        private=False,
        releases="W gradients every round (not private)",
        in_tour=True,
        library="fedclust.clustering.fedc_mf:run_fedcgds",
    ),
    _clustered("ifca", "IFCAConfig"),
    _clustered("cfl_mgd", "CFLMGDConfig"),
    _clustered("fedavg", "FedAvgConfig"),
    MethodSpec(
        "rr_cluster",
        "clustered_fl",
        "RRClusterConfig",
        cfl.rr_calibrate,
        cfl.rr_run,
        private=True,
        unit="client",
        releases="noisy cluster identifiers and clipped, noisy model updates every round",
        in_tour=True,
        library="fedclust.clustered_fl.rr_cluster:run",
        trust_models=("central",),
    ),
]

#: name -> spec, in the order of the quick tour
REGISTRY: dict[str, MethodSpec] = {s.name: s for s in _SPECS}


def get(name: str) -> MethodSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        near = _nearest(name, list(REGISTRY))
        raise ValueError(
            f"unknown method {name!r}"
            + (f"; did you mean {near!r}?" if near else "")
            + f" (valid: {', '.join(REGISTRY)})"
        ) from None


def trust_model_of(method: str, chosen: str | None, private: bool) -> str:
    """The trust model a run of ``method`` uses: ``chosen`` (a configured ``trust_model``) where the
    method supports it, else its default; ``"none"`` when the run is not private or the method has
    no DP variant."""
    spec = REGISTRY.get(method)
    if not private or spec is None or not spec.private or not spec.trust_models:
        return "none"
    return chosen if chosen in spec.trust_models else spec.default_trust_model


def clustering_methods() -> list[str]:
    return [n for n, s in REGISTRY.items() if s.family == "clustering"]


def clustered_fl_methods() -> list[str]:
    return [n for n, s in REGISTRY.items() if s.family == "clustered_fl"]


def memory_parts(spec: MethodSpec, cfg: MethodConfig, *data) -> dict[str, float]:
    """The big arrays of a run (name -> bytes, float64 for data clustering, float32 for clustered FL):
    rough, and meant to catch the settings that cannot fit (a huge ``d``, ``k`` or model), not to
    budget a run to the megabyte. :func:`memory_parts_of` on the sizes of the data."""
    groups = None if spec.family == "clustering" else len(data[0].angles)
    return memory_parts_of(spec, cfg, data_sizes(spec, *data), groups)


def memory_parts_of(
    spec: MethodSpec, cfg: MethodConfig, sizes: WorkSizes, groups: int | None = None
) -> dict[str, float]:
    """:func:`memory_parts` from the sizes of the data (known before it is built); ``groups``: the
    rotation groups of clustered FL (its default k)."""
    n, m, N = max(sizes.n, 1), max(sizes.m, 1), max(sizes.clients, 1)
    if spec.family == "clustering":
        # k and d beyond n are refused by the method with a sharper message (refuse_absurd)
        k = min(int(getattr(cfg, "k", None) or sizes.classes or 1), n)
        clients = int(getattr(cfg, "clients_per_round", None) or N)
        parts = {
            "working copies of the data (3 x n x m)": 3.0 * n * m * 8,
            "per-client centres (clients x k x m, 4 copies)": 4.0 * clients * k * m * 8,
        }
        if spec.name == "dp_fedc":
            parts["soft assignments H (n x k, 3 copies)"] = 3.0 * n * k * 8
        if spec.name == "fedsc":
            d = min(int(cfg.d or min(cfg.d_max or n, n)), n)
            parts["dictionary factors (n x d, 4 copies)"] = 4.0 * n * d * 8
        return parts
    M, d, n_classes = N, m, max(sizes.classes, 1)
    n_max = int(np.ceil(n / M))
    model = dict(getattr(cfg, "model", None) or {})
    kind, hidden = model.get("type", "mlp"), int(model.get("hidden", 200) or 200)
    P = {"mlp": d * hidden + hidden + hidden * n_classes + n_classes, "linear": d + 1}.get(kind, 0)
    k = int(getattr(cfg, "k", None) or groups or 1)
    S = max(1, round(float(getattr(cfg, "participation", 1.0) or 1.0) * M))
    width = hidden + n_classes if kind == "mlp" else 16 * d
    per_client = 4.0 * (7 * P + 2 * n_max * (d + 1) + 3 * n_max * width)
    return {
        "models (k x parameters, 7 copies)": 4.0 * 7 * k * P,
        "one sampled client's working set (chunked rounds hold at least one)": per_client,
        "the clients' losses and states (clients x k)": 8.0 * S * k * 4,
    }


def require_run_memory(spec: MethodSpec, cfg: MethodConfig, sizes: WorkSizes, groups: int | None = None) -> float:
    """Refuse (:class:`fedclust.memory.MemoryEstimateError`, with the estimate) a run whose big arrays
    (:func:`memory_parts_of`) cannot fit in the memory available; return the estimate in bytes."""
    return require_memory(
        f"{spec.name} with these settings",
        memory_parts_of(spec, cfg, sizes, groups),
        f"use smaller settings ({spec.name}.train: k, d, clients_per_round, the model's size) or "
        "fewer samples (dataset.n_total), and run again",
    )


def protected_units(spec: MethodSpec, *data) -> int:
    """The number of units a private run of ``spec`` protects: its clients for client-level DP, else
    the samples the clients hold (what ``delta`` is compared with: it must stay below 1 / this)."""
    if spec.family == "clustering":
        dataset, partition = data
        if partition is None:  # no partition (a calibration called alone): every sample is a client's
            return int(np.asarray(dataset.X).shape[0])
        client = np.asarray(partition.client)
        return int(client.max()) + 1 if spec.unit == "client" else int((client >= 0).sum())
    (rotated,) = data
    return int(rotated.group.size) if spec.unit == "client" else int(len(rotated.y_train))


#: the least work of one iteration of a loop body (a client's step, a server iteration), in the
#: estimate's unit: a handful of numpy calls on small arrays. Measured: an FKM round on digits with
#: 10 clients takes 1.9 ms, about 1.1e6 of these units at the ~1.7 ns per unit of its whole run.
ITERATION_FLOOR = 1e5


@dataclass(frozen=True)
class WorkSizes:
    """The sizes a run's work depends on, known before the data is built (from the parameters) or
    read off the data: ``n`` samples (clustered FL: training samples in all) of ``m`` features,
    held by ``clients`` clients, ``classes`` classes."""

    n: int
    m: int
    clients: int
    classes: int


def _loop_values(cfg: MethodConfig, kind: str, private: bool) -> dict[str, float]:
    """The values of the fields of ``cfg`` that bound loops of ``kind`` (``param(loop=...)``), a
    null resolved by its documented rule. Every bound counts, whether or not the run's other
    settings use it (``Q2`` next to a diminishing ``q_hat``): the estimate errs on the large side."""
    out = {}
    private_rounds = getattr(cfg, "private_rounds", None) if private else None
    for name, f in cfg.fields().items():
        if f.metadata.get("loop") != kind:
            continue
        value = getattr(cfg, name)
        if (name == "private_rounds" and not private) or (name == "rounds" and private_rounds):
            continue  # a private run has private_rounds rounds, when set (rounds_for)
        if name == "seeding_rounds" and value is None:
            value = cfg.seeding_for(private)
        if name == "coreset_size" and value is None:
            value = 20 * int(getattr(cfg, "k", None) or 10)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # a choice (q2 = "diminishing": Qhat bounds it) or an unset optional bound
        out[name] = float(value)
    return out


def _iterations(name: str, value: float) -> float:
    """The iterations a bound's value allows: a diminishing schedule's first, floor(Qhat / 1) + 1."""
    return value + 1 if name in ("Qhat", "q_hat") else value


def work_of(spec: MethodSpec, cfg: MethodConfig, sizes: WorkSizes, private: bool) -> dict:
    """A rough estimate of the work of a run, covering every loop bound of the method (its config
    fields declared with ``param(loop=...)``): ``rounds x (clients per round x per-client cost +
    server cost) + one-off cost``, every iteration costing at least :data:`ITERATION_FLOOR`.

    * rounds: the largest ``round`` bound (``rounds``; ``private_rounds`` in a private run; FedDP-KMeans's
      ``steps``);
    * per client and round: its data pass (``n / clients x m x k``, FedSC's dictionary size for k; in
      clustered FL its samples x ``6 x`` the model's parameters) times the sum of the ``client``
      bounds, sequential phases of a round (``Q1`` H steps, then the ``Q2`` W steps);
    * per round on the server: the product of the nested ``server`` bounds (restarts x iterations x
      coreset points) times the uploaded statistics (``clients x k x m``);
    * once: the product of the ``once`` bounds (k-means restarts on the server) times ``n x k x m``.

    Returns ``{"rounds", "clients", "cost", "server", "once", "unit", "total", "bounds"}``;
    ``bounds`` are the loop bounds that entered it (name -> value)."""
    n, m, N = max(sizes.n, 1), max(sizes.m, 1), max(sizes.clients, 1)
    loops = {kind: _loop_values(cfg, kind, private) for kind in ("round", "client", "server", "once")}
    its = {kind: [_iterations(name, v) for name, v in values.items()] for kind, values in loops.items()}
    rounds = max([1.0, *its["round"]])
    inner = max(1.0, sum(its["client"]))
    if spec.family == "clustering":
        k = float(getattr(cfg, "k", None) or sizes.classes or 1)
        clients = float(getattr(cfg, "clients_per_round", None) or N)
        if spec.name == "fedsc":
            clients = max(1.0, round(cfg.participation * N))
            k = float(cfg.d or min(cfg.d_max or n, n))  # the dictionary size plays k's part
        clients = min(clients, N)
        per_pass, unit = n / N * m * k, "sample x feature x cluster ops"
        server_pass, once_pass = N * k * m, n * k * m
    else:
        model = dict(getattr(cfg, "model", None) or {})
        kind, hidden = model.get("type", "mlp"), int(model.get("hidden", 200) or 200)
        P = {"mlp": m * hidden + hidden + hidden * sizes.classes + sizes.classes, "linear": m + 1}.get(kind, 16 * m)
        clients = float(max(1, round(float(getattr(cfg, "participation", 1.0)) * N)))
        per_pass, unit = n / N * 6.0 * P, "ops (6 x parameters per sample-gradient step)"
        server_pass, once_pass = N * P, 0.0
    cost = inner * max(per_pass, ITERATION_FLOOR)
    server = float(np.prod(its["server"])) * max(server_pass, ITERATION_FLOOR) if its["server"] else 0.0
    once = float(np.prod(its["once"])) * max(once_pass, ITERATION_FLOOR) if its["once"] else 0.0
    total = rounds * (clients * cost + server) + once
    bounds = {name: value for kind in loops.values() for name, value in kind.items()}
    return {
        "rounds": rounds,
        "clients": clients,
        "cost": cost,
        "server": server,
        "once": once,
        "unit": unit,
        "total": total,
        "bounds": bounds,
    }


def data_sizes(spec: MethodSpec, *data) -> WorkSizes:
    """The :class:`WorkSizes` of the data of a run (``dataset, partition`` or ``rotated``)."""
    if spec.family == "clustering":
        dataset, partition = data
        n, m = (int(s) for s in dataset.X.shape[:2])
        classes = int(dataset.n_classes) if getattr(dataset, "labelled", True) else 1  # unlabelled: k is set
        return WorkSizes(n, m, max(n_clients_of(partition), 1), classes)
    (rotated,) = data
    n_classes = int(max(rotated.y_train.max(), rotated.y_test.max())) + 1
    return WorkSizes(len(rotated.y_train), int(np.prod(rotated.X_train.shape[1:])), int(rotated.group.size), n_classes)


def check_work(spec: MethodSpec, cfg: MethodConfig, sizes: WorkSizes, private: bool) -> float:
    """Log (one line) and return the work estimate (:func:`work_of`); one beyond ``compute.max_work``
    is refused (:class:`fedclust.registry.helpers.WorkLimitError`, naming the largest loop bound)."""
    w = work_of(spec, cfg, sizes, private)
    fields = cfg.fields()

    def growth(item):  # how far a bound is above its default: the first one names the culprit
        default = fields[item[0]].default
        return item[1] / float(default) if isinstance(default, int) and default > 0 else item[1]

    # the bounds raised above their defaults, furthest first: the first is named as the one to lower
    bounds = {k: v for k, v in sorted(w["bounds"].items(), key=growth, reverse=True) if growth((k, v)) > 1}
    return log_work(
        spec.name,
        w["rounds"],
        w["clients"],
        w["cost"],
        w["unit"],
        server=w["server"],
        once=w["once"],
        bounds=bounds,
    )


def estimate_work(spec: MethodSpec, cfg: MethodConfig, *data, private: bool = False) -> float:
    """Log (one line) and return a rough work estimate of a run (:func:`work_of` on the sizes of its
    data). First, a run whose big arrays (:func:`memory_parts`) cannot fit in the memory available is
    refused with the estimate (:func:`require_run_memory`)."""
    sizes = data_sizes(spec, *data)
    require_run_memory(spec, cfg, sizes, None if spec.family == "clustering" else len(data[0].angles))
    return check_work(spec, cfg, sizes, private)
