"""IID partition: a random permutation split into near-equal parts.

Used by DP-FedC and as
option (b) of the FedCAvg/FedCGds ``syn_unf`` split.
"""

from __future__ import annotations

import numpy as np

from fedclust.options import check_int
from fedclust.partition._checks import check_n_clients
from fedclust.partition.base import Partition
from fedclust.rng import stream


def iid(n_samples: int, n_clients: int, seed: int = 0) -> Partition:
    """Give every sample to one of ``n_clients`` clients, uniformly at random, in near-equal parts.

    Client sizes are ``n_samples // n_clients`` or one more (the larger ones come first).
    Raises ValueError when ``n_clients`` exceeds ``n_samples``.
    """
    n_samples = check_int("n_samples", n_samples, 1)
    n_clients = check_n_clients(n_clients, n_samples)
    perm = stream(seed, "partition").permutation(n_samples)
    # position j of the permutation goes to client floor(j * n_clients / n_samples) ... but written
    # so that sizes match np.array_split: the first n % N clients get one extra sample.
    base, extra = divmod(n_samples, n_clients)
    sizes = np.full(n_clients, base, dtype=np.int64)
    sizes[:extra] += 1
    client = np.empty(n_samples, dtype=np.int64)
    client[perm] = np.repeat(np.arange(n_clients, dtype=np.int64), sizes)
    return Partition(
        client=client, n_clients=n_clients, meta={"scheme": "iid", "seed": int(seed), "n_clients": n_clients}
    )
