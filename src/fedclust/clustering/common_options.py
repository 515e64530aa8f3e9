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
#: how a per-round (epsilon, delta) becomes a noise multiplier in the baselines
MECHANISMS = ("classical", "analytic")


@_frozen
class SampledRounds(MethodConfig):
    """Rounds, sampled clients and seed (the baselines' defaults: 100 rounds of 30 clients)."""

    rounds: int = param(100, "int", count=True, doc="communication rounds R")
    clients_per_round: int | None = param(30, "int", count=True, doc="K clients sampled per round; None = all")
    seed: int = param(0, "int", doc="seed of every random stream of the run")


@_frozen
class NoiseOptions(MethodConfig):
    """The Gaussian noise of the uploads and the public bound that makes it DP."""

    noise_multiplier: float = param(0.0, "float", ge=0, doc="z >= 0; 0 = not private")
    clip: float | None = param(None, "float", gt=0, doc="public L2 bound on every sample (required when private)")


@_frozen
class BaselineNoiseOptions(NoiseOptions):
    """:class:`NoiseOptions`, or a per-round (epsilon, delta) calibrated by ``mechanism`` at unit
    sensitivity (``epsilon`` wins when given)."""

    epsilon: float | None = param(None, "float", gt=0, doc="per-round epsilon (instead of noise_multiplier)")
    delta: float = param(1e-4, "float", gt=0, lt=1, doc="per-round delta with epsilon")
    mechanism: str = param("classical", "str", choices=MECHANISMS, doc="Gaussian mechanism of the calibration")


@_frozen
class InitOptions(MethodConfig):
    """How the initial centres W^0 are chosen."""

    init_centroids: Any = param(None, "any", doc="(k, m) shared initial centres, taken as public; overrides init")
    init: str | None = param(
        None,
        "str",
        choices=INITS,
        doc="None: k data rows when not private (the papers' choice), uniform_box when private; "
        "data in a private run releases private rows (epsilon = inf)",
    )
    init_domain: Any = param(None, "any", doc="[low, high] public feature domain of uniform_box (None: [0, 1])")


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
