"""Dirichlet label-skew partition.

Two constructions, both in common use; they draw different things:

* ``method="client"`` (default; RR-Cluster's EMNIST split, after TFF) draws, for every client, a
  *label mix*. Every client gets the same number of samples (near-equal, ``n // n_clients`` or one
  more). For client i draw label proportions ``p_i ~ Dir(alpha * prior)`` (``prior`` is the global
  label distribution, or uniform), then draw its samples by label according to ``p_i`` *without
  replacement*. When a label runs out, its share is re-drawn from ``p_i`` renormalized over the labels
  that still have samples (and, if ``p_i`` puts no mass on any of them, from the remaining label
  counts, in proportion: an iid-like fill).
* ``method="label"`` (Hsu et al. 2019 / Yurochkin et al. 2019) draws, for every label, *how its
  samples are shared among the clients*: for every label k split its samples across the clients with
  proportions ``q_k ~ Dir(alpha * 1_N)``. Client sizes vary (a small alpha gives a few large clients).

Note the two conventions for ``alpha``: in ``"client"`` the concentration vector ``alpha * prior`` sums
to ``alpha`` (Hsu et al.'s ``Dir(alpha p)``; with 10 balanced labels, alpha = 1 means 0.1 per label),
whereas ``"label"`` puts ``alpha`` on every client. The same alpha is thus more skewed under ``"client"``.

``"client"`` has a floor: below an alpha of about 0.05 (10 balanced labels) every ``p_i`` is one-hot,
so clients that pick the same label exhaust it and fill the rest of their (fixed) size from the
labels left, in proportion. A smaller alpha then gives *more* labels per client, not fewer (on
digits with 10 clients: about 1.9 labels per client at alpha 0.05, 4.3 at alpha 1e-9, as at alpha
1). When a fifth or more of the samples were placed by that fill, one line is logged saying what the
clients look like, and pointing to ``method="label"``.

In both, the draw is repeated (up to ``max_retries`` times, with fresh randomness from the same
stream) until every client holds at least ``min_size`` samples; then a ValueError says so. Smaller
``alpha`` means fewer labels per client (more skew), down to the floor above.
"""

from __future__ import annotations

import logging

import numpy as np

from fedclust.options import check_int, check_number
from fedclust.partition._checks import check_labels, check_n_clients
from fedclust.partition.base import Partition
from fedclust.rng import stream

logger = logging.getLogger(__name__)

METHODS = ("client", "label")
#: the share of samples placed by the iid-like fill (one-hot label mixes run out) from which a
#: ``method="client"`` partition is reported as degenerate
DEGENERATE_FILL = 0.2
PRIORS = ("global", "uniform")


def dirichlet(
    y,
    n_clients: int,
    alpha: float,
    seed: int = 0,
    min_size: int = 1,
    max_retries: int = 100,
    method: str = "client",
    prior: str = "global",
) -> Partition:
    """Label-skewed partition of labels ``y`` over ``n_clients`` clients with concentration ``alpha``.

    Returns a :class:`Partition` that uses every sample; ``meta["attempts"]`` records how many draws
    were needed. Raises ValueError for ``alpha <= 0``, ``n_clients`` > samples, ``min_size`` larger than
    ``n // n_clients`` (impossible), an unknown ``method``/``prior``, or when ``max_retries`` draws all
    leave a client below ``min_size``.
    """
    y = check_labels(y)
    n = y.size
    n_clients = check_n_clients(n_clients, n)
    alpha = check_number("alpha", alpha, gt=0)
    min_size = check_int("min_size", min_size, 0, n // n_clients)
    max_retries = check_int("max_retries", max_retries, 1)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")

    rng = stream(seed, "partition")
    counts = np.bincount(y)
    present = np.flatnonzero(counts)
    for attempt in range(1, max_retries + 1):
        refilled = 0
        if method == "label":
            client = _by_label(y, n_clients, alpha, rng)
        else:
            pri = counts[present] / n if prior == "global" else np.full(present.size, 1.0 / present.size)
            client, refilled = _by_client(y, present, n_clients, alpha * pri, rng)
        sizes = np.bincount(client, minlength=n_clients)
        if sizes.min() >= min_size:
            if refilled >= DEGENERATE_FILL * n:
                logger.warning(_degenerate_line(y, client, n_clients, alpha, refilled / n))
            return Partition(
                client=client,
                n_clients=n_clients,
                meta={
                    "scheme": "dirichlet",
                    "seed": int(seed),
                    "n_clients": n_clients,
                    "alpha": alpha,
                    "min_size": min_size,
                    "method": method,
                    "prior": prior,
                    "attempts": attempt,
                },
            )
    raise ValueError(
        f"dirichlet: after max_retries={max_retries} draws some client still held fewer than "
        f"min_size={min_size} samples (alpha={alpha}, n_clients={n_clients}); raise alpha or max_retries, "
        f"or lower min_size"
    )


def _degenerate_line(y, client, n_clients: int, alpha: float, fill: float) -> str:
    """One line on a ``method="client"`` partition whose one-hot label mixes ran out."""
    sizes = np.bincount(client, minlength=n_clients)
    labels = np.array([np.unique(y[client == i]).size for i in range(n_clients)])
    return (
        f"dirichlet (method: client, alpha={alpha:g}): the label mixes are one-hot and run out, so "
        f"{fill:.0%} of the samples were placed in proportion to the labels left (iid-like): the "
        f"{n_clients} clients hold {sizes.min()}-{sizes.max()} samples and {labels.min()}-{labels.max()} "
        f"labels each ({labels.mean():.1f} on average); a smaller alpha gives no more skew here. For "
        "clients with fewer labels and unequal sizes, use method: label (partition.options.method=label)"
    )


def _by_label(y, n_clients, alpha, rng) -> np.ndarray:
    """Hsu et al.: per label, Dir(alpha) proportions over the clients, cut the shuffled label indices."""
    client = np.empty(y.size, dtype=np.int64)
    for k in np.unique(y):  # loop over labels (few), not clients
        idx = rng.permutation(np.flatnonzero(y == k))
        q = rng.dirichlet(np.full(n_clients, alpha))
        cuts = np.floor(np.cumsum(q) * idx.size).astype(np.int64)
        cuts[-1] = idx.size
        owner = np.searchsorted(cuts, np.arange(idx.size), side="right")
        client[idx] = owner
    return client


def _by_client(y, present, n_clients, conc, rng) -> np.ndarray:
    """TFF-style: each client draws Dir(alpha*prior) label proportions, then samples without replacement.

    A loop over clients is needed here: each client's draw depends on what earlier clients used up.
    It runs once per partition (not per training round) and costs O(n_clients * n_labels).
    """
    n = y.size
    L = present.size
    remaining = np.bincount(y)[present].astype(np.int64)
    base, extra = divmod(n, n_clients)
    sizes = np.full(n_clients, base, dtype=np.int64)
    sizes[:extra] += 1
    take = np.zeros((n_clients, L), dtype=np.int64)
    refilled = 0  # samples drawn from the remaining label counts, p_i having no mass left on them
    for i in range(n_clients):
        p = rng.dirichlet(conc) if L > 1 else np.ones(1)
        need = int(sizes[i])
        got = np.zeros(L, dtype=np.int64)
        while need > 0:
            avail = remaining - got
            w = p * (avail > 0)
            fallback = w.sum() <= 0
            if fallback:  # p_i has no mass left on the remaining labels
                w = avail.astype(float)
            draw = rng.multinomial(need, w / w.sum())
            draw = np.minimum(draw, avail)
            refilled += int(draw.sum()) if fallback else 0
            got += draw
            need -= int(draw.sum())
        take[i] = got
        remaining -= got
    # hand out the shuffled indices of each label in blocks of the counts in ``take``
    client = np.empty(n, dtype=np.int64)
    owners = np.arange(n_clients, dtype=np.int64)
    for j, k in enumerate(present):
        idx = rng.permutation(np.flatnonzero(y == k))
        client[idx] = np.repeat(owners, take[:, j])
    return client, refilled
