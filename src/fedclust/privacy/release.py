"""Where the noise of a federated sum is added: the trust model of a release.

A federated round of the k-means family (and of FedDP-KMeans) releases a *sum over clients* of
clipped per-client statistics. Who adds the Gaussian noise, and where, is the trust model:

``local``
    Every client perturbs its own upload with ``N(0, std^2)`` per entry; the server may be
    untrusted and sees each noisy upload. The sum of ``K`` uploads carries ``K`` independent draws:
    ``N(0, K std^2)`` per entry.
``secure_aggregation``
    The clients' uploads are combined by a secure-aggregation protocol, so the server only sees
    their sum (the protocol is simulated here). The noise is added once to the sum, ``N(0, std^2)``,
    or, with ``distributed=True``, split into ``K`` shares ``N(0, std^2 / K)``, one per client, whose
    sum carries the same total (distributed DP).
``central``
    A trusted server sees the raw uploads and adds ``N(0, std^2)`` to their sum itself.

With the same per-release noise multiplier, all three give every sample the same (epsilon, delta):
one sample sits in one client's upload, so the sum's sensitivity is that of one upload, and the
noise on the sum is at least ``std``. What differs is who must be trusted and how much noise the
result carries: ``local`` adds ``sqrt(K)`` times the noise of the other two (10x at K = 100). Every
private result names its model (``TRUST_MODELS``); a report never claims more than its model gives.
"""

from __future__ import annotations

import numpy as np

TRUST_MODELS = ("local", "secure_aggregation", "central")

#: One line per model: who sees what (printed in privacy reports; docs/explanations/trust-models.md).
DESCRIPTIONS = {
    "local": "each client adds the noise to what it sends; the server is untrusted and sees every noisy upload",
    "secure_aggregation": "the server sees only the sum of the clients' uploads (secure aggregation, simulated "
    "here); the noise is added once to that sum, or split across the clients",
    "central": "a trusted server sees the raw uploads and adds the noise to their sum itself",
}


def check_trust_model(trust_model: str, supported=TRUST_MODELS, *, method: str = "") -> str:
    """``trust_model`` validated against the models a method supports."""
    if trust_model not in TRUST_MODELS:
        raise ValueError(f"trust_model must be one of {list(TRUST_MODELS)}, got {trust_model!r}")
    if trust_model not in supported:
        who = f"{method} " if method else ""
        raise ValueError(f"{who}supports the trust models {list(supported)}, not {trust_model!r}")
    return trust_model


def sum_noise_std(std: float, n_contributors: int, trust_model: str) -> float:
    """The std of the noise that the released sum of ``n_contributors`` uploads carries, per entry,
    when one release has noise std ``std`` (its noise multiplier times its sensitivity)."""
    check_trust_model(trust_model)
    if trust_model == "local":
        return float(std) * float(np.sqrt(n_contributors))
    return float(std)


def release_sum(
    total: np.ndarray,
    std: float,
    n_contributors: int,
    trust_model: str,
    rng: np.random.Generator | None,
    *,
    distributed: bool = False,
) -> np.ndarray:
    """The released, noisy version of ``total``, the exact sum over ``n_contributors`` clients of
    their per-client statistics, under ``trust_model`` (see the module docstring).

    The sum of independent Gaussian draws is drawn in one go where the distribution is the same
    (``K`` local draws as one ``N(0, K std^2)``); ``distributed=True`` under ``secure_aggregation``
    draws the ``K`` shares one by one, as the clients would. ``std <= 0`` or no ``rng``: no noise.
    """
    check_trust_model(trust_model)
    total = np.asarray(total, dtype=np.float64)
    if std <= 0 or rng is None:
        return total
    K = max(int(n_contributors), 1)
    if distributed and trust_model == "secure_aggregation":
        shares = rng.normal(0.0, std / np.sqrt(K), size=(K,) + total.shape)
        return total + shares.sum(0)
    return total + rng.normal(0.0, sum_noise_std(std, K, trust_model), size=total.shape)
