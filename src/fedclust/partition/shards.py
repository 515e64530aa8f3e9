"""Shard partition: every client holds exactly ``c`` labels (the "two digits per client" split).

DP-FedC and FedCAvg/FedCGds
follow Li et al. [26] ("On the convergence of FedAvg on non-IID data", ICLR 2020), whose code does:

1. for every label, split that label's samples (in data order) into contiguous shards whose sizes
   differ by at most one;
2. for every client in turn, choose ``c`` DISTINCT labels uniformly among the labels that still have
   shards, and pop one shard of each.

With 100 clients, c = 2 and 10 labels, each label has 20 shards and all 200 shards are used.

Guard for the last clients: the plain random draw can leave a
client with fewer than ``c`` labels that still have shards. Here a label whose remaining shard count
equals the number of clients still to serve is *forced* into the current client's choice, and the
rest of the ``c`` labels are drawn uniformly among the other labels with shards left. With
``sum(shards) == n_clients * c`` and no label having more than ``n_clients`` shards this never fails
(Gale-Ryser), and it changes nothing in the draw until the end is near. Every client therefore holds
exactly ``c`` labels.

``equalize=True`` first truncates every label to the same count (the smallest label count, chosen at
random within each label), as FedCAvg/FedCGds's MNIST_bals needs (equal sizes across clients).
``pairing="cyclic"`` replaces the random choice with a deterministic one (client p gets
labels p, p+1, ..., p+c-1 mod L), which needs ``n_clients * c`` to be a multiple of the number of labels.
"""

from __future__ import annotations

import numpy as np

from fedclust.options import check_int
from fedclust.partition._checks import check_label_scheme
from fedclust.partition.base import Partition
from fedclust.rng import stream

PAIRINGS = ("random", "cyclic")


def shards(
    y,
    n_clients: int,
    labels_per_client: int = 2,
    seed: int = 0,
    shards_per_label=None,
    equalize: bool = False,
    pairing: str = "random",
) -> Partition:
    """Shard partition of labels ``y``: ``n_clients`` clients with exactly ``labels_per_client`` labels each.

    * ``shards_per_label``: None (default) gives ``n_clients * c`` shards in all, spread as evenly as
      possible over the labels (labels that get one extra shard are chosen at random when it does
      not divide; with fewer shards than labels some labels get none and stay unused). An int
      gives every label that many shards; it needs ``L * shards_per_label >= n_clients * c`` and
      ``shards_per_label <= n_clients``. Surplus shards are dropped at random
      and their samples get client -1 (recorded in ``meta["dropped_shards"]``).

    * ``equalize``: truncate every label to the smallest label count first.
    * ``pairing``: "random" (the [26] code, with the guard above) or "cyclic".

    Returns a :class:`Partition`; ``meta["client_labels"]`` is the (n_clients, c) label choice.
    """
    y, n, n_clients, labels, L, c = check_label_scheme(y, n_clients, labels_per_client)
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    rng = stream(seed, "partition")
    total = n_clients * c
    # samples of each label, in data order (optionally truncated to the smallest label count)
    per_label = [np.flatnonzero(y == k) for k in labels]
    if equalize:
        m = min(len(ix) for ix in per_label)
        per_label = [np.sort(rng.choice(ix, m, replace=False)) for ix in per_label]
    n_shards = _shard_counts(per_label, labels, total, n_clients, shards_per_label, rng)
    # the shards of each label: contiguous pieces of the label's samples, sizes differing by <= 1
    shard_idx = [np.array_split(ix, s) if s else [] for ix, s in zip(per_label, n_shards)]
    use, surplus = _shards_used(n_shards, total, rng)
    if pairing == "cyclic":
        choice = _cyclic_choice(n_shards, n_clients, c, shards_per_label)
    else:
        choice = _random_choice(use, n_clients, c, rng)
    client = _pop_shards(n, choice, shard_idx, n_shards, use, rng)
    return Partition(
        client=client,
        n_clients=n_clients,
        meta={
            "scheme": "shards",
            "seed": int(seed),
            "n_clients": n_clients,
            "labels_per_client": c,
            "shards_per_label": n_shards.tolist(),
            "dropped_shards": int(surplus),
            "equalize": bool(equalize),
            "pairing": pairing,
            "client_labels": labels[np.sort(choice, axis=1)].tolist(),
        },
    )


def _shard_counts(per_label, labels, total: int, n_clients: int, shards_per_label, rng) -> np.ndarray:
    """The number of shards of every label: ``total`` spread evenly (the extra shards on random labels),
    or ``shards_per_label`` each; every label must have at least one sample per shard."""
    L = len(per_label)
    if shards_per_label is None:
        n_shards = np.full(L, total // L, dtype=np.int64)
        n_shards[rng.choice(L, total % L, replace=False)] += 1
    else:
        spl = check_int("shards_per_label", shards_per_label, 1, n_clients)
        if L * spl < total:
            raise ValueError(
                f"shards_per_label must be >= ceil(n_clients * labels_per_client / n_labels) = "
                f"{-(-total // L)}, got {spl}"
            )
        n_shards = np.full(L, spl, dtype=np.int64)
    counts = np.array([len(ix) for ix in per_label])
    bad = np.flatnonzero(counts < n_shards)
    if bad.size:
        k = labels[bad[0]]
        raise ValueError(
            f"label {k} has {counts[bad[0]]} samples, fewer than its {n_shards[bad[0]]} shards; lower "
            f"n_clients or labels_per_client (or shards_per_label)"
        )
    return n_shards


def _shards_used(n_shards: np.ndarray, total: int, rng) -> tuple[np.ndarray, int]:
    """The number of shards of each label that clients take (surplus shards dropped at random) and
    the number dropped."""
    use = n_shards.copy()
    surplus = int(use.sum()) - total
    if surplus > 0:
        pool = np.repeat(np.arange(len(n_shards)), use)
        drop = np.bincount(rng.choice(pool, surplus, replace=False), minlength=len(n_shards))
        use -= drop
        # any label above n_clients after the drop would break feasibility: impossible since spl <= n_clients
    return use, surplus


def _cyclic_choice(n_shards: np.ndarray, n_clients: int, c: int, shards_per_label) -> np.ndarray:
    """(n_clients, c) label indices of ``pairing="cyclic"``: client p gets labels p, ..., p+c-1 mod L."""
    L, total = len(n_shards), n_clients * c
    if total % L:
        raise ValueError(
            f"pairing='cyclic' needs n_clients * labels_per_client to be a multiple of the number of "
            f"labels ({L}), got {total}"
        )
    if shards_per_label is not None and int(n_shards[0]) != total // L:
        raise ValueError("pairing='cyclic' needs shards_per_label=None or n_clients*labels_per_client/n_labels")
    return (np.arange(n_clients)[:, None] + np.arange(c)[None, :]) % L


def _pop_shards(n: int, choice: np.ndarray, shard_idx, n_shards, use, rng) -> np.ndarray:
    """Every sample's client (-1: a dropped shard): the j-th time label l is chosen, that client gets
    shard j of label l (in order of the kept shards, a random subset when there was a surplus)."""
    n_clients, c = choice.shape
    client = np.full(n, -1, dtype=np.int64)
    flat = choice.ravel()
    owner = np.repeat(np.arange(n_clients), c)
    for l in range(len(n_shards)):  # loop over labels (few)
        who = owner[flat == l]
        kept = np.sort(rng.choice(n_shards[l], use[l], replace=False)) if use[l] < n_shards[l] else np.arange(use[l])
        for j, s in enumerate(kept):
            client[shard_idx[l][s]] = who[j]
    return client


def _random_choice(use: np.ndarray, n_clients: int, c: int, rng) -> np.ndarray:
    """(n_clients, c) label indices: c distinct labels per client, label l used exactly use[l] times.

    Sequential over clients (each choice depends on the shards left); a one-off O(n_clients * L) cost.
    """
    left = use.copy()
    choice = np.empty((n_clients, c), dtype=np.int64)
    for i in range(n_clients):
        to_serve = n_clients - i
        forced = np.flatnonzero(left == to_serve)  # must be taken now or it cannot be used up
        others = np.flatnonzero((left > 0) & (left < to_serve))
        pick = rng.choice(others, c - forced.size, replace=False) if c > forced.size else forced[:0]
        chosen = np.concatenate([forced, pick])
        choice[i] = chosen
        left[chosen] -= 1
    return choice
