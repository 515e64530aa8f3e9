"""Option groups shared by the federated data clustering methods.

A method's options class (``FKMOptions``, ``DKPPOptions``, ...) is a frozen
:class:`~fedclust.options.MethodConfig` built from these groups and the method's own fields; it
validates itself when it is built (kinds, bounds, choices, the checks between fields). Every
method's ``run`` takes ``run(X, client, k, options=None, *, y=None, progress=None, **settings)``:

* ``X``: (n, m) data, rows are samples; ``client``: (n,) client of every sample; ``k``: number
  of clusters;
* ``options``: the method's options object (``None``: its defaults), and ``settings``: keyword
  values laid over it (``fkm.run(X, client, 4, rounds=5)``); an unknown name is an error naming the
  nearest valid one (:meth:`~fedclust.options.MethodConfig.build`);
* ``y``: true labels, used only to log per-round ACC/NMI; ``progress``: optional
  ``progress(round, history)`` called after every round.

It returns a :class:`~fedclust.clustering.base.ClusteringResult`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fedclust.options import MethodConfig, param
from fedclust.privacy.release import TRUST_MODELS

_frozen = dataclasses.dataclass(frozen=True)

#: how W^0 is drawn when no ``init_centroids`` are given
INITS = ("data", "uniform_box", "uniform_ball")
#: the k-means family (FKM, FZKM, DK++, DKM) may also start from the server's public points
KMEANS_INITS = INITS + ("server",)
#: how a per-round (epsilon, delta) becomes a noise multiplier in the baselines
MECHANISMS = ("classical", "analytic")


@_frozen
class SampledRounds(MethodConfig):
    """Rounds, sampled clients and seed (the baselines' defaults: 100 rounds of 30 clients)."""

    rounds: int = param(100, "int", count=True, doc="communication rounds R", loop="round", conf_default=20)
    clients_per_round: int | None = param(
        30, "int", count=True, doc="K clients sampled per round; None = all", conf_default=None
    )
    seed: int = param(0, "int", doc="seed of every random stream of the run", conf=False)


@_frozen
class NoiseOptions(MethodConfig):
    """The Gaussian noise of the uploads and the public bound that makes it DP."""

    noise_multiplier: float = param(0.0, "float", ge=0, doc="z >= 0; 0 = not private", conf=False)
    clip: float | None = param(
        None,
        "float",
        gt=0,
        doc="public L2 bound on every sample (required when private); a pipeline run's null: the public rule "
        "(fedclust.clustering.defaults: the server sample's median row norm, else a DP estimate)",
    )


@_frozen
class BaselineNoiseOptions(NoiseOptions):
    """:class:`NoiseOptions`, or a per-round (epsilon, delta) calibrated by ``mechanism`` at unit
    sensitivity (``epsilon`` wins when given)."""

    epsilon: float | None = param(
        None, "float", gt=0, doc="per-round epsilon (instead of noise_multiplier)", conf=False
    )
    delta: float = param(1e-4, "float", gt=0, lt=1, doc="per-round delta with epsilon", conf=False)
    mechanism: str = param("classical", "str", choices=MECHANISMS, doc="Gaussian mechanism of the calibration")


@_frozen
class InitOptions(MethodConfig):
    """How the initial centres W^0 are chosen."""

    init_centroids: Any = param(
        None, "any", doc="(k, m) shared initial centres, taken as public; overrides init", conf=False
    )
    init: str | None = param(
        None,
        "str",
        choices=INITS,
        doc="None: k data rows when not private (the papers' choice), uniform_box when private; "
        "data in a private run releases private rows (epsilon = inf)",
    )
    init_domain: list | None = param(
        None, "list", doc="[low, high] public feature domain of uniform_box (None: [0, 1])"
    )


@_frozen
class KMeansInitOptions(InitOptions):
    """:class:`InitOptions` of the k-means family, plus the server's public points: held-out rows of
    ``X`` (``server_rows``, taken out of the clients' data) or a separate array (``server_data``).
    ``init="server"`` starts from k-means on them (k-means++ restarts, then Lloyd; seeded by the run's
    seed); it is the default when server points are given."""

    init: str | None = param(
        None,
        "str",
        choices=KMEANS_INITS,
        doc="None: server when server points are given, else k data rows when not private (the papers' "
        "choice) and uniform_box when private; data in a private run releases private rows (epsilon = inf)",
    )
    server_rows: Any = param(
        None, "any", doc="indices of rows of X the server holds (public); taken out of the clients' data", conf=False
    )
    server_data: Any = param(None, "any", doc="or a separate public (n_s, m) array the server holds", conf=False)

    def problems(self, where: str) -> list[str]:
        found = list(super().problems(where))
        if self.server_rows is not None and self.server_data is not None:
            found.append(f"{where}: give server_rows or server_data, not both")
        if self.init == "server" and self.server_rows is None and self.server_data is None:
            found.append(f"{where}.init='server' needs the server's points: server_rows or server_data")
        return found


@_frozen
class ReleaseOptions(MethodConfig):
    """Where the noise is added and how the released totals are post-processed
    (:mod:`fedclust.privacy.release`, :mod:`fedclust.clustering.lloyd`)."""

    trust_model: str = param(
        "secure_aggregation",
        "str",
        choices=TRUST_MODELS,
        doc="local (every client, the papers' protocol) | secure_aggregation (once, on the sum) | central",
    )
    count_threshold: float = param(
        3.0, "float", ge=0, doc="a centre moves only when its noisy count >= max(1, this x the count noise std)"
    )
    project: bool = param(True, "bool", doc="released centres are projected onto the clip ball")
