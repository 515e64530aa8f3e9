"""One frozen config class per method: the keys of ``<method>.train`` with their defaults.

A method's config is generated from its library options class (:func:`fedclust.options.config_class`;
``fedclust.clustering.<method>``, ``fedclust.clustered_fl.options``), which is the one home of each
default, bound, choice and doc; the registry adds only the keys of a pipeline run (``k``, the server's data as a file spec, the
calibration's choices). ``conf/base/parameters_<...>.yml`` shows the same defaults (``tests/registry``
checks that they agree and names every difference). ``None`` as a default means "resolved by the method's documented rule" (``k``: the number
of classes / rotation groups; ``clients_per_round``: all clients; ``init``: data rows when not
private, ``uniform_box`` when private; ...).
"""

from __future__ import annotations

import dataclasses
import importlib
import threading

from fedclust.data.registry import SPEC_KEYS, check_dataset_params
from fedclust.options import MethodConfig, config_class, param

_frozen = dataclasses.dataclass(frozen=True)

K = dict(kind="int", count=True)
_SERVER_DATA = dict(
    choices=("holdout", "none"),
    doc="holdout: a held-out slice of the data set is the server's public sample (never also client data); "
    "none: the server holds no data; or a public file {name, path, options, scale, label}",
)
_SERVER_FRACTION = dict(gt=0, lt=1, doc="share of the data set held out for the server with server_data: holdout")
#: Where a k-means-family run executes (FKM, FedDP-KMeans): in this process, or on Flower with SecAgg+.
BACKENDS = ("simulation", "flower")
_BACKEND = dict(
    choices=BACKENDS,
    doc="simulation (sums computed and noised in this process) | flower (a Flower ServerApp and ClientApp on "
    "Flower's simulation engine; every sum through SecAgg+, each client adding a noise share)",
)


def backend_problems(cfg, where: str) -> list[str]:
    """The Flower backend implements one trust model: SecAgg+ is secure aggregation."""
    if cfg.backend == "flower" and cfg.trust_model != "secure_aggregation":
        return [f"{where}.backend=flower releases every sum through SecAgg+: it needs trust_model=secure_aggregation"]
    return []


_SECAGG_T = dict(
    gt=0,
    le=1,
    doc="flower backend: SecAgg+'s reconstruction threshold t as a share of a release's clients; each client "
    "adds noise variance sigma^2/t, so any t survivors carry the accounted noise",
)
_PRIVATE_ROUNDS = dict(doc="rounds of a private run (the budget is split over them)")

#: The named kinds of server data; a mapping instead names a public file (:func:`server_file_problems`).
SERVER_DATA_CHOICES = ("holdout", "none")


def server_file_scale(spec: dict) -> str:
    """The scaling of a server-data file: its ``scale``, else none (the file must be on the clients'
    scale), or min-max when it declares ``options.bounds`` (the clients' declared bounds)."""
    if spec.get("scale"):
        return str(spec["scale"])
    return "minmax" if (spec.get("options") or {}).get("bounds") is not None else "none"


def server_file_problems(spec, where: str) -> list[str]:
    """What is wrong with a server-data file spec (none for the named kinds)."""
    if not isinstance(spec, dict):
        return []
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        return [f"{where}: unknown key(s) {unknown} of a server-data file (valid: {list(SPEC_KEYS)})"]
    if not spec.get("name"):
        return [f"{where}: a server-data file needs a data set name (e.g. name: csv, path: ...)"]
    options = spec.get("options")
    try:  # its name, scale and declared bounds, before any file is read
        check_dataset_params(
            spec["name"], scale=server_file_scale(spec), options=options if isinstance(options, dict) else None
        )
    except ValueError as exc:
        return [f"{where}: {exc}"]
    return []


# ---- federated data clustering -------------------------------------------------------------------
# A method's config is generated from its library options class (the one home of every default,
# bound, choice and doc, :func:`fedclust.options.config_class`); the classes below hold only the keys
# that a pipeline run adds (k, the server's data as a file spec, the calibration's choices) and the
# checks between keys.


class _RoundsMixin:
    def rounds_for(self, private: bool) -> int:
        """The rounds of a run: ``private_rounds`` when private (and set), else ``rounds``."""
        return int(self.private_rounds) if private and self.private_rounds else int(self.rounds)


class _ServerDataMixin:
    def problems(self, where):
        if self.init == "server" and self.server_data == "none":
            return [f"{where}.init=server needs {where}.server_data=holdout (the server's public sample)"]
        return server_file_problems(self.server_data, f"{where}.server_data")


@_frozen
class _KMeansKeys(_ServerDataMixin, _RoundsMixin, MethodConfig):
    k: int | None = param(None, **K)
    private_rounds: int | None = param(5, **K, **_PRIVATE_ROUNDS, loop="round")
    server_data: str | dict = param("none", ("str", "dict"), **_SERVER_DATA)
    server_fraction: float = param(0.05, "float", **_SERVER_FRACTION)


@_frozen
class _FKMKeys(_KMeansKeys):
    backend: str = param("simulation", "str", **_BACKEND)
    secagg_threshold: float = param(0.8, "float", **_SECAGG_T)

    def problems(self, where):
        return super().problems(where) + backend_problems(self, where)


@_frozen
class _DKPPKeys(_KMeansKeys):
    def seeding_for(self, private: bool) -> int:
        """The k-means|| rounds of a run: as set, else 0 in a private run (the seeding uploads
        data-selected private rows, so only 0 is DP) and 5 (Bahmani et al.; at most ``rounds - 2``,
        leaving a weighting and a Lloyd round) otherwise."""
        if self.seeding_rounds is not None:
            return int(self.seeding_rounds)
        return 0 if private else max(0, min(5, self.rounds_for(False) - 2))


@_frozen
class _FedDPKMeansKeys(MethodConfig):
    k: int | None = param(None, **K)
    server_fraction: float = param(
        0.05,
        "float",
        gt=0,
        lt=1,
        doc="share of the data set held out as the server's public sample (never also client data)",
    )
    server_data: str | dict = param(
        "holdout",
        ("str", "dict"),
        choices=SERVER_DATA_CHOICES,
        doc="holdout: a held-out slice; none: DP candidates (needs projection dp_pca); "
        "or a public file {name, path, options, scale, label}",
    )
    shares: dict | None = param(
        None,
        "dict",
        doc="split of the budget: {projection, weighting, lift, steps}; null = {0.1, 0.1, 0.3, 0.5}; "
        "clip: the DP clip estimate's share (no clip, no server data; default: the weighting share)",
    )
    count_share: float = param(0.3, "float", gt=0, lt=1, doc="share of a sums-and-counts release spent on the counts")
    backend: str = param("simulation", "str", **_BACKEND)
    secagg_threshold: float = param(0.8, "float", **_SECAGG_T)

    def problems(self, where):
        if self.server_data == "none" and self.projection not in ("dp_pca", None):
            return [f"{where}.server_data=none needs {where}.projection=dp_pca (the candidates come from it)"]
        return server_file_problems(self.server_data, f"{where}.server_data") + backend_problems(self, where)


@_frozen
class _DPFedCKeys(MethodConfig):
    k: int | None = param(None, **K)
    budget: str = param("accountant", "str", choices=("accountant", "paper"))
    server_data: str | dict = param(
        "holdout",
        ("str", "dict"),
        choices=("holdout", "none"),
        doc="holdout: the server holds a public slice of the data set and starts W^0 from it; none: no public "
        "sample; or a public file {name, path, options, scale, label}",
    )
    server_fraction: float = param(
        0.05, "float", gt=0, lt=1, doc="share of the data set held out as the server's sample"
    )

    def problems(self, where):
        found = server_file_problems(self.server_data, f"{where}.server_data")
        if isinstance(self.q2, int) and self.q2 < 1:
            found.append(f"{where}.q2 must be 'diminishing' or an integer >= 1, got {self.q2}")
        return found


@_frozen
class _FedSCKeys(MethodConfig):
    k: int | None = param(None, **K)
    privacy_variant: str = param("data", "str", choices=("data", "factors"))
    data_sensitivity: str = param(
        "domain", "str", choices=("domain", "paper"), doc="domain (smallest bound of the declared domain) | paper"
    )
    mechanism: str = param("accountant", "str", choices=("accountant", "classical", "analytic"))
    factor_budget_z: float = param(0.5, "float", gt=0, lt=1)
    factor_calibration: str = param("accountant", "str", choices=("accountant", "paper"))
    kernel_constants: str = param("public", "str", choices=("public", "data"))

    def problems(self, where):
        if self.d is not None and self.d_max is not None and self.d > self.d_max:
            return [f"{where}.d={self.d} exceeds {where}.d_max={self.d_max}"]
        return []


@_frozen
class _FedCMFKeys(MethodConfig):
    k: int | None = param(None, **K)
    #: the YAML spelling of the library's ``continuation=None`` is ``none`` (null means the default)
    continuation: str = param("sncp", "str", choices=("sncp", "none"), doc="sncp (rho-continuation) | none")


#: ``config name: (library module, options class, registry keys, options fields that are no keys)``;
#: FedDP-KMeans always projects its released centres (``project`` is no key of fed_dp_kmeans.train)
_GENERATED = {
    "FKMConfig": ("fedclust.clustering.fkm", "FKMOptions", _FKMKeys, ()),
    "FZKMConfig": ("fedclust.clustering.fzkm", "FZKMOptions", _KMeansKeys, ()),
    "DKPPConfig": ("fedclust.clustering.dk_pp", "DKPPOptions", _DKPPKeys, ()),
    "DKMConfig": ("fedclust.clustering.dkm", "DKMOptions", _KMeansKeys, ()),
    "FedDPKMeansConfig": ("fedclust.clustering.fed_dp_kmeans", "FedDPKMeansOptions", _FedDPKMeansKeys, ("project",)),
    "DPFedCConfig": ("fedclust.clustering.dp_fedc", "DPFedCOptions", _DPFedCKeys, ()),
    "FedSCConfig": ("fedclust.clustering.fedsc", "FedSCOptions", _FedSCKeys, ()),
    "FedCAvgConfig": ("fedclust.clustering.fedc_mf", "FedCAvgOptions", _FedCMFKeys, ()),
    "FedCGdsConfig": ("fedclust.clustering.fedc_mf", "FedCGdsOptions", _FedCMFKeys, ()),
}
_GENERATING = threading.Lock()


def __getattr__(name: str):
    """A method's config, generated from its options class when first asked for: the method's
    module (and what it imports: SciPy, scikit-learn, torch) loads when the method is used, not at
    every start of the registry."""
    if name not in _GENERATED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _GENERATING:
        if name not in globals():
            module, options, keys, drop = _GENERATED[name]
            options = getattr(importlib.import_module(module), options)
            globals()[name] = config_class(name, options, keys, module=__name__, drop=drop)
    return globals()[name]


# ---- clustered federated learning ----------------------------------------------------------------
# Generated from the options classes of :mod:`fedclust.clustered_fl.options` (loaded, with torch, when
# a clustered-FL method's config is first asked for); the keys below are a pipeline run's own: ``k``,
# the model spec, and RR-Cluster's method and calibration choices.

_MLP = {"type": "mlp", "hidden": 32}


def _options_problems(cfg, where: str) -> list[str]:
    """The checks between fields that the library options class declares (the chunk runner against
    the device), on a generated config that holds those fields: one home for them too."""
    return cfg.OPTIONS.problems(cfg, where) if cfg.OPTIONS is not None else []


@_frozen
class _EngineKeys(MethodConfig):
    model: dict = param(_MLP, "dict", doc="mlp | cnn | linear")

    def problems(self, where):
        kind = self.model.get("type", "mlp")
        if kind not in ("mlp", "cnn", "linear"):
            return [f"{where}.model.type must be one of ['mlp', 'cnn', 'linear'], got {kind!r}"]
        return _options_problems(self, where)


@_frozen
class _CFLMGDKeys(_EngineKeys):
    k: int | None = param(None, **K, doc="null = number of rotation groups")


@_frozen
class _IFCAKeys(_EngineKeys):
    k: int | None = param(None, **K)


RR_METHODS = ("rr_cluster", "dp_ifca", "dp_fesem", "dp_fedcam", "dp_fedavg", "dp_fedprox", "dp_fedper")


@_frozen
class _RRKeys(MethodConfig):
    method: str = param("rr_cluster", "str", choices=RR_METHODS)
    k: int | None = param(None, **K)
    rho_s: float = param(0.5, "float", ge=0, lt=1)
    calibration_bound: str = param("accountant", "str", choices=("accountant", "wang_general"))
    mu: float = param(0.01, "float", ge=0)
    model: dict = param(_MLP, "dict")

    def problems(self, where):
        return _options_problems(self, where)

    def feasibility(self, n_clients: int, k: int, where: str = "rr_cluster.train") -> list[str]:
        """``B <= m / k`` with ``m = round(participation * n_clients)`` sampled clients."""
        if self.method != "rr_cluster" or self.B == 0:
            return []
        m = max(1, int(round(self.participation * n_clients)))
        if self.B * k > m:
            return [
                f"{where}.B={self.B} is infeasible: every one of k={k} clusters needs B updates but a round samples "
                f"only m = round(participation*clients) = round({self.participation}*{n_clients}) = {m} clients "
                f"(needs B <= m/k = {m // k}): lower B or raise participation / clustered_fl.data.n_clients"
            ]
        return []


_GENERATED.update(
    {
        "CFLMGDConfig": ("fedclust.clustered_fl.options", "CFLMGDOptions", _CFLMGDKeys, ()),
        "IFCAConfig": ("fedclust.clustered_fl.options", "IFCAOptions", _IFCAKeys, ()),
        "FedAvgConfig": ("fedclust.clustered_fl.options", "FedAvgOptions", _EngineKeys, ()),
        "RRClusterConfig": ("fedclust.clustered_fl.options", "RRClusterOptions", _RRKeys, ()),
    }
)
