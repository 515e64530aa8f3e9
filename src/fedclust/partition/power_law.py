"""Power-law (lognormal) client sizes with exactly ``c`` labels per client.

FedCAvg/FedCGds ``MNIST_ubls``, modelled on the FedProx MNIST generator that
Li et al. [13] build on, scaled to any number of clients:

* client p holds labels ``(p + j) mod L`` for ``j = 0..c-1`` (a cyclic pairing; with
  ``shuffle_labels=True`` the label order is a random permutation first, so which labels pair up
  depends on the seed);
* every (client, label) pair first gets ``base`` samples of that label (FedProx: 5 per digit);
* the rest of each label is split over the pairs that hold it in proportion to
  ``props ~ lognormal(0, sigma)`` (one draw per pair), rounded down;
* the samples that rounding leaves over go to the pair with the largest proportion of that label,
  so every sample of a
  held label is used. Labels that no client holds (possible when ``n_clients * c < L``) are left
  unused (client -1).

Every client holds exactly ``c`` labels (``base >= 1``), and client sizes are heavy tailed.
"""

from __future__ import annotations

import numpy as np

from fedclust.options import check_int, check_number
from fedclust.partition._checks import check_label_scheme
from fedclust.partition.base import Partition
from fedclust.rng import stream


def power_law(
    y,
    n_clients: int,
    labels_per_client: int = 2,
    seed: int = 0,
    sigma: float = 2.0,
    base: int = 5,
    shuffle_labels: bool = False,
) -> Partition:
    """Lognormal(0, ``sigma``) client sizes, ``labels_per_client`` labels per client.

    Raises ValueError when a label has fewer than ``base`` samples per client holding it, for
    ``sigma <= 0``, ``labels_per_client`` outside 1..L, or ``n_clients`` > samples.
    """
    y, n, n_clients, labels, L, c = check_label_scheme(y, n_clients, labels_per_client)
    sigma = check_number("sigma", sigma, gt=0)
    base = check_int("base", base, 1)
    rng = stream(seed, "partition")

    order = rng.permutation(L) if shuffle_labels else np.arange(L)
    pair_label = order[(np.arange(n_clients)[:, None] + np.arange(c)[None, :]) % L]  # (N, c) label index
    flat_label = pair_label.ravel()
    flat_client = np.repeat(np.arange(n_clients), c)
    props = rng.lognormal(0.0, sigma, size=flat_label.size)

    counts = np.array([np.count_nonzero(y == k) for k in labels])
    holders = np.bincount(flat_label, minlength=L)
    short = np.flatnonzero(counts < base * holders)
    if short.size:
        l = short[0]
        raise ValueError(
            f"label {labels[l]} has {counts[l]} samples but {holders[l]} clients hold it with base={base} "
            f"samples each; lower base, n_clients or labels_per_client"
        )

    # per pair: base + floor(share of the rest), the leftovers to the largest-proportion pair of the label
    label_mass = np.bincount(flat_label, weights=props, minlength=L)
    rest = counts - base * holders
    take = base + np.floor(props / label_mass[flat_label] * rest[flat_label]).astype(np.int64)
    has = holders > 0
    client = np.full(n, -1, dtype=np.int64)
    for l in np.flatnonzero(has):  # loop over labels (few)
        idx = rng.permutation(np.flatnonzero(y == labels[l]))
        pairs = np.flatnonzero(flat_label == l)
        take[pairs[np.argmax(props[pairs])]] += idx.size - int(take[pairs].sum())  # rounding leftovers
        client[idx] = np.repeat(flat_client[pairs], take[pairs])
    return Partition(
        client=client,
        n_clients=n_clients,
        meta={
            "scheme": "power_law",
            "seed": int(seed),
            "n_clients": n_clients,
            "labels_per_client": c,
            "sigma": sigma,
            "base": base,
            "shuffle_labels": bool(shuffle_labels),
            "client_labels": np.sort(labels[pair_label], axis=1).tolist(),
            "n_unused": int(np.count_nonzero(client < 0)),
        },
    )
