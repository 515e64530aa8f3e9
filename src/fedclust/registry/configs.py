"""One frozen config class per method: the keys of ``<method>.train`` with their defaults.

``conf/base/parameters_<...>.yml`` shows the same defaults (``tests/registry`` checks that they
agree). ``None`` as a default means "resolved by the method's documented rule" (``k``: the number
of classes / rotation groups; ``clients_per_round``: all clients; ``init``: data rows when not
private, ``uniform_box`` when private; ...).
"""

from __future__ import annotations

import dataclasses

from fedclust.clustering.common_options import INITS, KMEANS_INITS, MECHANISMS
from fedclust.clustering.fed_dp_kmeans import PROJECTIONS
from fedclust.data.registry import SPEC_KEYS
from fedclust.options import MethodConfig, param
from fedclust.privacy.release import TRUST_MODELS

_frozen = dataclasses.dataclass(frozen=True)

K = dict(kind="int", count=True)
_KMEANS_INIT_DOC = (
    "W^0: null = server with server_data: holdout, else data rows when not private and uniform_box when "
    "private; server = k-means on the server's public sample"
)
_SERVER_DATA = dict(
    choices=("holdout", "none"),
    doc="holdout: a held-out slice of the data set is the server's public sample (never also client data); "
    "none: the server holds no data; or a public file {name, path, options, scale, label}",
)
_CLIP_DOC = (
    "L2 bound on every sample when private; null: the public rule (the median row norm of the server's "
    "sample with server_data, else sqrt(m) for minmax / standardize scaling)"
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
_TM = dict(
    choices=TRUST_MODELS,
    doc="where the noise is added: local (every client, the paper's baseline) | "
    "secure_aggregation (once on the sum) | central",
)
_PRIVATE_ROUNDS = dict(doc="rounds of a private run (the budget is split over them)")
_THRESH = dict(doc="a centre moves only when its noisy count >= max(1, this x the count noise std)")

#: The named kinds of server data; a mapping instead names a public file (:func:`server_file_problems`).
SERVER_DATA_CHOICES = ("holdout", "none")


def server_file_problems(spec, where: str) -> list[str]:
    """What is wrong with a server-data file spec (none for the named kinds)."""
    if not isinstance(spec, dict):
        return []
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        return [f"{where}: unknown key(s) {unknown} of a server-data file (valid: {list(SPEC_KEYS)})"]
    if not spec.get("name"):
        return [f"{where}: a server-data file needs a data set name (e.g. name: csv, path: ...)"]
    return []


# ---- federated data clustering -------------------------------------------------------------------


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
class FKMConfig(_ServerDataMixin, _RoundsMixin, MethodConfig):
    k: int | None = param(None, **K, doc="null = number of classes")
    rounds: int = param(20, **K, loop="round")
    private_rounds: int | None = param(5, **K, **_PRIVATE_ROUNDS, loop="round")
    clients_per_round: int | None = param(None, **K, doc="null = all clients every round")
    clip: float | None = param(None, "float", gt=0, doc=_CLIP_DOC)
    init: str | None = param(None, "str", choices=KMEANS_INITS, doc=_KMEANS_INIT_DOC)
    server_data: str | dict = param("none", ("str", "dict"), **_SERVER_DATA)
    server_fraction: float = param(0.05, "float", **_SERVER_FRACTION)
    init_domain: list | None = param(None, "list", doc="[low, high] public feature domain (null = [0, 1])")
    trust_model: str = param("secure_aggregation", "str", **_TM)
    count_threshold: float = param(3.0, "float", ge=0, **_THRESH)
    project: bool = param(True, "bool", doc="released centres projected onto the clip ball")
    backend: str = param("simulation", "str", **_BACKEND)
    secagg_threshold: float = param(0.8, "float", **_SECAGG_T)

    def problems(self, where):
        return super().problems(where) + backend_problems(self, where)


@_frozen
class _KMeansBaselineConfig(_ServerDataMixin, _RoundsMixin, MethodConfig):
    k: int | None = param(None, **K)
    rounds: int = param(20, **K, loop="round")
    private_rounds: int | None = param(5, **K, **_PRIVATE_ROUNDS, loop="round")
    clients_per_round: int | None = param(None, **K)
    mechanism: str = param("classical", "str", choices=MECHANISMS)
    clip: float | None = param(None, "float", gt=0, doc=_CLIP_DOC)
    init: str | None = param(None, "str", choices=KMEANS_INITS, doc=_KMEANS_INIT_DOC)
    server_data: str | dict = param("none", ("str", "dict"), **_SERVER_DATA)
    server_fraction: float = param(0.05, "float", **_SERVER_FRACTION)
    init_domain: list | None = param(None, "list")


@_frozen
class FZKMConfig(_KMeansBaselineConfig):
    fuzzifier: float | None = param(
        None, "float", gt=1, doc="null = 1 + 1/sqrt(m) (a rule on the dimension); 2 = the usual FCM"
    )
    local_iters: int = param(1, **K, doc="> 1 is not DP", loop="client")
    server_iters: int = param(20, **K, loop="server")
    server_restarts: int = param(2, **K, loop="server")
    trust_model: str = param("secure_aggregation", "str", **_TM)
    count_threshold: float = param(3.0, "float", ge=0, **_THRESH)
    project: bool = param(True, "bool")


@_frozen
class DKPPConfig(_KMeansBaselineConfig):
    seeding_rounds: int | None = param(
        None,
        "int",
        ge=0,
        doc="k-means|| rounds; null: 5 (at most rounds - 2) without DP, 0 (the DP variant) with DP",
        loop="round",
    )
    oversampling: float | None = param(None, "float", gt=0, doc="null = 2k")
    trust_model: str = param("secure_aggregation", "str", **_TM)
    count_threshold: float = param(3.0, "float", ge=0, **_THRESH)
    project: bool = param(True, "bool")

    def seeding_for(self, private: bool) -> int:
        """The k-means|| rounds of a run: as set, else 0 in a private run (the seeding uploads
        data-selected private rows, so only 0 is DP) and 5 (Bahmani et al.; at most ``rounds - 2``,
        leaving a weighting and a Lloyd round) otherwise."""
        if self.seeding_rounds is not None:
            return int(self.seeding_rounds)
        return 0 if private else max(0, min(5, self.rounds_for(False) - 2))


@_frozen
class FedDPKMeansConfig(MethodConfig):
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
    steps: int = param(1, "int", ge=0, doc="private Lloyd steps after the initialisation", loop="round")
    projection: str | None = param(
        None,
        "str",
        choices=PROJECTIONS,
        doc="dp_pca (the paper's) | server_pca (no release) | none (data space); "
        "null = server_pca when the server holds >= 4m points and k < m, else none (dp_pca without server data)",
    )
    n_components: int | None = param(None, **K, doc="projection dimension; null = k")
    clip: float | None = param(
        None, "float", gt=0, doc="null = median row norm of the server's public sample (sqrt(m) bound without one)"
    )
    trust_model: str = param("secure_aggregation", "str", **_TM)
    count_threshold: float = param(3.0, "float", ge=0, **_THRESH)
    weight_threshold: float | None = param(
        None, "float", ge=0, doc="server points kept at noisy weight >= this x sigma; null = z_{1-1/n_s}"
    )
    shares: dict | None = param(
        None, "dict", doc="split of the budget: {projection, weighting, lift, steps}; null = {0.1, 0.1, 0.3, 0.5}"
    )
    count_share: float = param(0.3, "float", gt=0, lt=1, doc="share of a sums-and-counts release spent on the counts")
    server_restarts: int = param(10, **K, loop="once")
    backend: str = param("simulation", "str", **_BACKEND)
    secagg_threshold: float = param(0.8, "float", **_SECAGG_T)

    def problems(self, where):
        if self.server_data == "none" and self.projection not in ("dp_pca", None):
            return [f"{where}.server_data=none needs {where}.projection=dp_pca (the candidates come from it)"]
        return server_file_problems(self.server_data, f"{where}.server_data") + backend_problems(self, where)


@_frozen
class DKMConfig(_KMeansBaselineConfig):
    coreset_size: int | None = param(None, **K, doc="null = 20k", loop="server")
    local_iters: int = param(5, **K, loop="client")
    server_iters: int = param(10, **K, loop="server")
    server_restarts: int = param(1, **K, loop="server")


@_frozen
class DPFedCConfig(MethodConfig):
    k: int | None = param(None, **K)
    rounds: int = param(30, **K, loop="round")
    clients_per_round: int | None = param(5, **K)
    Q1: int = param(10, **K, loop="client")
    q2: int | str = param("diminishing", ("int", "str"), choices=("diminishing",), loop="client")
    Qhat: int = param(10, **K, loop="client")
    b: int = param(50, **K)
    rho_factor: float = param(1.0e-2, "float", gt=0)
    mu_h_factor: float = param(1.0e-10, "float", ge=0)
    mu_w: float = param(0.0, "float", ge=0)
    h_step: str = param("stable", "str", choices=("stable", "fast", "paper_literal"))
    alpha_1: float | None = param(None, "float", gt=0)
    eta_rule: str = param("per_client", "str", choices=("per_client", "rms"))
    alpha_2: float | None = param(None, "float", gt=0)
    budget: str = param("accountant", "str", choices=("accountant", "paper"))
    G: float = param(0.03, "float", gt=0)
    c0: float = param(1.0, "float", gt=0)
    q_cap: float = param(0.99, "float", gt=0, lt=1)
    all_clients_update_H: bool = param(True, "bool")
    literal_2rho: bool = param(False, "bool")
    h_init: str | None = param(
        None, "str", choices=("uniform", "nearest"), doc="null = nearest from the public sample's W^0, else uniform"
    )
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
    trust_model: str = param("local", "str", choices=("local", "secure_aggregation"))
    constants: str | None = param(None, "str", choices=("public", "data"))
    clip: float | None = param(None, "float", gt=0)
    init: str | None = param(None, "str", choices=INITS)
    init_domain: list | None = param(None, "list")

    def problems(self, where):
        found = server_file_problems(self.server_data, f"{where}.server_data")
        if isinstance(self.q2, int) and self.q2 < 1:
            found.append(f"{where}.q2 must be 'diminishing' or an integer >= 1, got {self.q2}")
        return found


@_frozen
class FedSCConfig(MethodConfig):
    k: int | None = param(None, **K)
    rounds: int = param(20, **K, loop="round")
    d: int | None = param(None, **K, doc="dictionary size; null = eigenvalue rule (eq. 43)")
    d_tol: float = param(0.99, "float", gt=0, le=1, doc="the eigenvalue rule's share")
    d_max: int | None = param(500, **K)
    r: float | None = param(None, "float", gt=0)
    lam: float = param(1.0e-3, "float", gt=0)
    z_step: str = param("official", "str", choices=("official", "fixed_point", "gradient", "gd"))
    z_lr: float | None = param(None, "float", gt=0)
    participation: float = param(1.0, "float", gt=0, le=1)
    n_init: int = param(50, **K, loop="once")
    graph: str = param("min_connected_k", "str", choices=("paper", "min_connected_k", "mst"))
    final_c: str = param(
        "projection",
        "str",
        choices=("projection", "paper"),
        doc="the C sent to Stage II: final C-step with a 1e-6 jitter, or the paper's lam",
    )
    privacy_variant: str = param("data", "str", choices=("data", "factors"))
    clip_tau: float | None = param(None, "float", gt=0, doc="row clip; null = sqrt(m) max|data_domain| / 2")
    data_domain: list | None = param(
        [0.0, 1.0], "list", doc="declared feature domain [low, high]; null = none (the paper's 2 clip_tau)"
    )
    data_sensitivity: str = param(
        "domain", "str", choices=("domain", "paper"), doc="domain (smallest bound of the declared domain) | paper"
    )
    mechanism: str = param("accountant", "str", choices=("accountant", "classical", "analytic"))
    tau_z: float | None = param(None, "float", gt=0)
    tau_c: float | None = param(None, "float", gt=0)
    factor_budget_z: float = param(0.5, "float", gt=0, lt=1)
    factor_calibration: str = param("accountant", "str", choices=("accountant", "paper"))
    kernel_constants: str = param("public", "str", choices=("public", "data"))
    data_noise_beta: float = param(0.0, "float", ge=0)
    z_noise_alpha: float = param(0.0, "float", ge=0)
    c_noise_alpha: float = param(0.0, "float", ge=0)

    def problems(self, where):
        if self.d is not None and self.d_max is not None and self.d > self.d_max:
            return [f"{where}.d={self.d} exceeds {where}.d_max={self.d_max}"]
        return []


@_frozen
class _FedCMFConfig(MethodConfig):
    k: int | None = param(None, **K)
    rounds: int = param(60, **K, loop="round")
    Q1: int = param(10, **K, loop="client")


_CONT = dict(choices=("sncp", "none"), doc="sncp (rho-continuation) | none")


@_frozen
class FedCAvgConfig(_FedCMFConfig):
    Q2: int = param(1, **K, loop="client")
    q_hat: int = param(10, "int", ge=0, doc="diminishing Q2^s = floor(q_hat/s)+1; 0 = constant Q2", loop="client")
    gamma: float = param(1.1, "float", gt=0)
    step_rule: str = param("lipschitz", "str", choices=("lipschitz", "paper"))
    rho: float = param(1.0e-8, "float", gt=0)
    nu: float = param(1.0e-10, "float", ge=0)
    continuation: str = param("sncp", "str", **_CONT)
    rho_tol: float = param(8.0e-5, "float", gt=0)


@_frozen
class FedCGdsConfig(_FedCMFConfig):
    Q2: int = param(100, **K, loop="server")
    clients_per_round: int | None = param(None, **K)
    gamma: float = param(1.1, "float", gt=0)
    step_rule: str = param("lipschitz", "str", choices=("lipschitz", "paper"))
    rho: float = param(1.0e-8, "float", gt=0)
    nu: float = param(1.0e-10, "float", ge=0)
    continuation: str = param("sncp", "str", **_CONT)
    rho_tol: float = param(8.0e-5, "float", gt=0)
    rho_trigger: str = param("round", "str", choices=("round", "epoch"))


# ---- clustered federated learning ----------------------------------------------------------------

_MLP = {"type": "mlp", "hidden": 32}


@_frozen
class _EngineConfig(MethodConfig):
    rounds: int = param(60, **K, loop="round")
    lr: float = param(0.1, "float", gt=0)
    local_steps: int = param(10, **K, loop="client")
    participation: float = param(0.25, "float", gt=0, le=1)
    eval_every: int = param(5, "int", ge=0)
    max_chunk_mb: float | None = param(None, "float", gt=0, doc="null = 256")
    defer_updates: bool = param(True, "bool", doc="false = local steps one by one (last-bit differences)")
    device: str = param(
        "cpu", "str", choices=("cpu", "cuda", "auto"), doc="where the engine trains; auto = CUDA when present"
    )
    model: dict = param(_MLP, "dict", doc="mlp | cnn | linear")

    def problems(self, where):
        kind = self.model.get("type", "mlp")
        if kind not in ("mlp", "cnn", "linear"):
            return [f"{where}.model.type must be one of ['mlp', 'cnn', 'linear'], got {kind!r}"]
        return []


@_frozen
class CFLMGDConfig(_EngineConfig):
    k: int | None = param(None, **K, doc="null = number of rotation groups")
    option: str = param("II", "str", choices=("I", "II"))
    beta: float = param(0.9, "float", ge=0, lt=1)
    lr_decay: float = param(1.0, "float", gt=0)
    batch_size: int | None = param(None, **K)


@_frozen
class IFCAConfig(_EngineConfig):
    k: int | None = param(None, **K)
    aggregation: str = param("model", "str", choices=("model", "gradient"))


@_frozen
class FedAvgConfig(_EngineConfig):
    pass


RR_METHODS = ("rr_cluster", "dp_ifca", "dp_fesem", "dp_fedcam", "dp_fedavg", "dp_fedprox", "dp_fedper")


@_frozen
class RRClusterConfig(MethodConfig):
    method: str = param("rr_cluster", "str", choices=RR_METHODS)
    base: str = param("ifca", "str", choices=("ifca", "fesem", "fedcam"))
    k: int | None = param(None, **K)
    B: int = param(4, "int", ge=0, doc="every cluster gets >= B updates (B <= participation * clients / k)")
    rho_s: float = param(0.5, "float", ge=0, lt=1)
    C_s: float = param(0.1, "float", gt=0, le=1)
    clip: float = param(0.3, "float", gt=0)
    noise_calibration: str = param("replace_one", "str", choices=("replace_one", "paper_literal"))
    calibration_bound: str = param("accountant", "str", choices=("accountant", "wang_general"))
    server_lr: float = param(1.0, "float", gt=0)
    mu: float = param(0.01, "float", ge=0)
    rounds: int = param(30, **K, loop="round")
    lr: float = param(0.1, "float", gt=0)
    local_steps: int = param(5, **K, loop="client")
    participation: float = param(0.5, "float", gt=0, le=1)
    eval_every: int = param(5, "int", ge=0)
    model: dict = param(_MLP, "dict")

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
