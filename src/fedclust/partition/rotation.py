"""Rotation partition: clients in G groups, group g's images rotated by its angle.

The clustered-FL benchmark of IFCA, used by CFL-MGD and RR-Cluster. Every client belongs to one group; all its images (training and held-out test) are
rotated counter-clockwise by the group's angle with ``np.rot90`` over the last two (spatial) axes, so it
works for (n, H, W) and (n, C, H, W) images. Labels are unchanged. Clients are numbered group-major
(clients 0..n_0-1 are group 0, and so on).

Default angles: g * 90 degrees for G <= 4 (0/90/180/270 for the balanced four groups; 0/90/180 for the
imbalanced 2:1:1 case of RR-Cluster), and 0/180 for G = 2 (CIFAR in CFL-MGD). ``angles`` overrides
them (multiples of 90 only). ``ratios`` sets the group sizes, e.g. (2, 1, 1) gives 500/250/250 of 1000
clients (largest-remainder rounding).

Two constructions of the training data:

* ``reuse=True`` (default; as IFCA's code): every group draws its *own* random
  permutation of the whole training pool and cuts it into its clients' chunks. A pool image is
  therefore used at most once per group, but may appear in several groups, each time under that group's
  rotation (with MNIST, 2400 clients x 100 = 240,000 = 60,000 x 4: every image appears once in every
  group). No client holds the same pool image twice, and within a group no two clients share one.
* ``reuse=False`` (RR-Cluster's paper: "randomly divide the whole dataset into clients, then group
  the clients"): one permutation of the pool is cut into all clients' chunks; no pool image is used twice.

Held-out test sets: every client also gets ``test_per_client`` test images with its group's rotation.
They come from the test images of ``test`` (a :class:`HeldOut`) when given (e.g. the official test
split), else a random test pool is first carved out of ``images`` and never used for training. Test
images are drawn from the test pool in the same way as the training images (independent permutation
per group when ``reuse=True``; with ``HeldOut(shuffle=False)`` the test pool is used in order, as
the IFCA code does). A client's test set
is thus always disjoint from every client's training set in terms of source images.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedclust.options import check_int
from fedclust.partition._checks import check_labels
from fedclust.partition.base import Partition
from fedclust.rng import stream


@dataclass
class RotatedData:
    """The rotated samples created by :func:`rotation`, with their clients.

    Training rows are ordered by client. ``X_*`` is the flattened image (a view of ``images_*``).
    ``source_train`` / ``source_test`` give the row of each sample in its source pool (``images`` for
    training; ``images_test`` if given, else ``images``, for test). ``group`` is the (n_clients,) group
    of each client, ``angles`` the rotation (degrees) of each group.
    """

    X_train: np.ndarray
    images_train: np.ndarray
    y_train: np.ndarray
    client_train: np.ndarray
    X_test: np.ndarray
    images_test: np.ndarray
    y_test: np.ndarray
    client_test: np.ndarray
    group: np.ndarray
    angles: tuple[int, ...]
    source_train: np.ndarray
    source_test: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_clients(self) -> int:
        return int(self.group.size)

    @property
    def X(self) -> np.ndarray:
        """All samples, training rows first, then test rows (matches :meth:`partition`)."""
        return np.concatenate([self.X_train, self.X_test])

    @property
    def y(self) -> np.ndarray:
        """All labels, training rows first, then test rows (matches :meth:`partition`)."""
        return np.concatenate([self.y_train, self.y_test])

    @property
    def images(self) -> np.ndarray:
        return np.concatenate([self.images_train, self.images_test])

    def partition(self) -> Partition:
        """A :class:`Partition` over ``X``/``y`` (training rows, then test rows) with groups and test split."""
        n_tr, n_te = self.y_train.size, self.y_test.size
        client = np.concatenate([self.client_train, np.full(n_te, -1, dtype=np.int64)])
        test_client = np.concatenate([np.full(n_tr, -1, dtype=np.int64), self.client_test])
        return Partition(
            client=client,
            n_clients=self.n_clients,
            group=self.group.copy(),
            test_client=test_client,
            meta=dict(self.meta),
        )

    def train_partition(self) -> Partition:
        """A :class:`Partition` over the training rows only (``X_train``/``y_train``)."""
        return Partition(
            client=self.client_train.copy(), n_clients=self.n_clients, group=self.group.copy(), meta=dict(self.meta)
        )


def default_angles(n_groups: int) -> tuple[int, ...]:
    """0/180 for two groups, else g * 90 degrees (G <= 4)."""
    if n_groups == 2:
        return (0, 180)
    if n_groups > 4:
        raise ValueError(
            f"n_groups must be <= 4 for distinct 90-degree rotations, got {n_groups}; pass angles explicitly"
        )
    return tuple(90 * g for g in range(n_groups))


def group_sizes(n_clients: int, ratios) -> np.ndarray:
    """Clients per group in proportion to ``ratios`` (largest remainder), each at least one."""
    r = np.asarray(ratios, dtype=float)
    exact = n_clients * r / r.sum()
    sizes = np.floor(exact).astype(np.int64)
    rem = n_clients - int(sizes.sum())
    sizes[np.argsort(-(exact - sizes), kind="stable")[:rem]] += 1
    if sizes.min() < 1:
        raise ValueError(f"n_clients={n_clients} is too small for ratios {tuple(r)}: a group would have no client")
    return sizes


@dataclass(frozen=True)
class HeldOut:
    """Where the held-out test images come from: ``images``/``y`` (e.g. the official test split), else a
    test pool carved out of the training images, a ``fraction`` of the per-client pool share when
    neither per-client count is given; ``shuffle`` False takes the test pool in order (IFCA's code)."""

    images: Any = None
    y: Any = None
    fraction: float = 0.2
    shuffle: bool = True


def rotation(
    images,
    y,
    n_groups: int = 4,
    ratios=None,
    n_clients: int | None = None,
    samples_per_client: int | None = None,
    test_per_client: int | None = None,
    angles=None,
    seed: int = 0,
    reuse: bool = True,
    test: HeldOut = HeldOut(),
) -> RotatedData:
    """Rotated-groups partition (see the module docstring).

    * ``n_clients`` (required): total clients, split over the groups by ``ratios`` (default balanced).
    * ``samples_per_client`` / ``test_per_client``: default to the most the pools allow, with a
      ``test.fraction`` share held out for test when no test images are given (:class:`HeldOut`).

    Returns :class:`RotatedData`. Raises ValueError naming the parameter when the pools are too small,
    a ratio is not positive, an angle is not a multiple of 90, or a 90/270 rotation meets non-square images.
    """
    images, y = _checked_images(images, y)
    n = images.shape[0]
    G = check_int("n_groups", n_groups, 1)
    if n_clients is None:
        raise ValueError("n_clients is required (total number of clients over all groups)")
    N = check_int("n_clients", n_clients, G)
    ratios = _checked_ratios(ratios, G)
    angles, turns = _checked_angles(angles, G, images.shape[-2:])
    if not 0 <= float(test.fraction) < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test.fraction}")
    sizes = group_sizes(N, ratios)
    units = int(sizes.max()) if reuse else N  # clients that share one copy of the pool
    rng = stream(seed, "partition")
    spc = None if samples_per_client is None else check_int("samples_per_client", samples_per_client, 1)
    tpc = None if test_per_client is None else check_int("test_per_client", test_per_client, 0)
    images_test, y_test = _checked_test_images(test, images)
    spc, tpc = _per_client_counts(n, units, spc, tpc, test, images_test)
    train_pool, test_pool, test_images, test_y = _pools(images, y, images_test, y_test, units, spc, tpc, reuse, rng)
    group = np.repeat(np.arange(G, dtype=np.int64), sizes)
    src_tr, src_te = _draw_sources(rng, train_pool, test_pool, sizes, spc, tpc, reuse, test.shuffle)
    client_tr = np.repeat(np.arange(N, dtype=np.int64), spc)
    client_te = np.repeat(np.arange(N, dtype=np.int64), tpc)
    img_tr = _rotate_rows(images, src_tr, group[client_tr], turns)
    img_te = _rotate_rows(test_images, src_te, group[client_te], turns)
    meta = {
        "scheme": "rotation",
        "seed": int(seed),
        "n_clients": N,
        "n_groups": G,
        "ratios": ratios.tolist(),
        "group_sizes": sizes.tolist(),
        "angles": list(angles),
        "samples_per_client": spc,
        "test_per_client": tpc,
        "reuse": bool(reuse),
        "test_source": "images_test" if images_test is not None else "carved from images",
        "first_client_of_group": np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist(),
    }
    return RotatedData(
        X_train=_flat(img_tr),
        images_train=img_tr,
        y_train=y[src_tr],
        client_train=client_tr,
        X_test=_flat(img_te),
        images_test=img_te,
        y_test=test_y[src_te],
        client_test=client_te,
        group=group,
        angles=angles,
        source_train=src_tr,
        source_test=src_te,
        meta=meta,
    )


def _checked_images(images, y) -> tuple[np.ndarray, np.ndarray]:
    """The images as an (n, H, W) or (n, C, H, W) array and their n labels."""
    images = np.asarray(images)
    if images.ndim not in (3, 4):
        raise ValueError(f"images must be (n, H, W) or (n, C, H, W), got shape {images.shape}")
    y = check_labels(y)
    if y.size != images.shape[0]:
        raise ValueError(f"y has {y.size} labels but images has {images.shape[0]} samples")
    return images, y


def _checked_ratios(ratios, G: int) -> np.ndarray:
    """The group-size ratios (default balanced): one positive entry per group."""
    if ratios is None:
        ratios = np.ones(G)
    ratios = np.asarray(ratios, dtype=float)
    if ratios.shape != (G,):
        raise ValueError(f"ratios must have one entry per group (n_groups={G}), got {ratios.shape}")
    if not np.all(np.isfinite(ratios)) or np.any(ratios <= 0):
        raise ValueError(f"ratios must all be > 0, got {ratios.tolist()}")
    return ratios


def _checked_angles(angles, G: int, hw) -> tuple[tuple[int, ...], list[int]]:
    """The groups' angles (default :func:`default_angles`) and their numbers of quarter turns."""
    if angles is None:
        angles = default_angles(G)
    angles = tuple(int(a) for a in angles)
    if len(angles) != G:
        raise ValueError(f"angles must have one entry per group (n_groups={G}), got {len(angles)}")
    if any(a % 90 for a in angles):
        raise ValueError(f"angles must be multiples of 90 degrees, got {angles}")
    turns = [(a // 90) % 4 for a in angles]
    H, W = hw
    if H != W and any(k % 2 for k in turns):
        raise ValueError(f"images must be square for 90/270-degree rotations, got H={H}, W={W}")
    return angles, turns


def _checked_test_images(test: HeldOut, images: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The given test images and labels (None, None without them), with the training images' shape."""
    if test.images is None:
        return None, test.y
    images_test = np.asarray(test.images)
    if images_test.shape[1:] != images.shape[1:]:
        raise ValueError(f"images_test must have image shape {images.shape[1:]}, got {images_test.shape[1:]}")
    if test.y is None:
        raise ValueError("y_test is required with images_test")
    y_test = check_labels(test.y, "y_test")
    if y_test.size != images_test.shape[0]:
        raise ValueError("y_test and images_test differ in number of samples")
    return images_test, y_test


def _per_client_counts(n: int, units: int, spc, tpc, test: HeldOut, images_test) -> tuple[int, int]:
    """Training and test images per client: the given counts, else the most the pools allow (with a
    ``test.fraction`` share held out for test when the test pool is carved from the images)."""
    if images_test is not None:
        spc = n // units if spc is None else spc
        tpc = images_test.shape[0] // units if tpc is None else tpc
    else:
        tot = n // units  # pool images per client
        if spc is None and tpc is None:
            tpc = int(round(tot * test.fraction))
            spc = tot - tpc
        elif spc is None:
            spc = tot - tpc
        elif tpc is None:
            tf = float(test.fraction)
            tpc = min(int(round(spc * tf / (1 - tf))), max(tot - spc, 0))
    return check_int("samples_per_client", spc, 1), check_int("test_per_client", tpc, 0)


def _pools(images, y, images_test, y_test, units: int, spc: int, tpc: int, reuse: bool, rng) -> tuple:
    """``(train pool, test pool, test images, test labels)``: the pools' row indices (the test pool
    carved at random out of ``images`` when no test images are given), after checking they are big
    enough for ``units`` clients sharing a pool."""
    n = images.shape[0]
    how = "per group" if reuse else "in all"
    if images_test is not None:
        n_test_pool = images_test.shape[0]
        if units * spc > n:
            raise ValueError(
                f"samples_per_client must be <= {n // units} ({units} clients {how} share "
                f"{n} training images), got {spc}"
            )
        if units * tpc > n_test_pool:
            raise ValueError(
                f"test_per_client must be <= {n_test_pool // units} ({units} clients {how} share "
                f"{n_test_pool} test images), got {tpc}"
            )
        return np.arange(n), np.arange(n_test_pool), images_test, y_test
    if units * (spc + tpc) > n:
        raise ValueError(
            f"samples_per_client + test_per_client must be <= {n // units} ({units} clients {how} share "
            f"{n} images), got {spc} + {tpc}"
        )
    perm = rng.permutation(n)
    return perm[units * tpc :], np.sort(perm[: units * tpc]), images, y


def _draw_sources(rng, train_pool, test_pool, sizes, spc: int, tpc: int, reuse: bool, shuffle: bool) -> tuple:
    """The source rows of every client's training and test images, client after client: one
    permutation of each pool per group (``reuse``) or one for all clients."""
    if reuse:
        # one independent permutation of the pool per group (loop over groups, not clients)
        src_tr = np.concatenate([rng.permutation(train_pool)[: s * spc] for s in sizes])
        src_te = np.concatenate([(rng.permutation(test_pool) if shuffle else test_pool)[: s * tpc] for s in sizes])
    else:
        N = int(np.sum(sizes))
        src_tr = rng.permutation(train_pool)[: N * spc]
        src_te = (rng.permutation(test_pool) if shuffle else test_pool)[: N * tpc]
    return src_tr, src_te


def _rotate_rows(images, src, row_group, turns) -> np.ndarray:
    """float32 array of images[src], each row rotated by its group's number of quarter turns."""
    out = np.empty((src.size,) + images.shape[1:-2] + _rot_shape(images.shape[-2:], turns), dtype=np.float32)
    for g, k in enumerate(turns):  # loop over groups (<= a few)
        rows = np.flatnonzero(row_group == g)
        if rows.size:
            out[rows] = np.rot90(images[src[rows]], k=k, axes=(-2, -1))
    return out


def _rot_shape(hw, turns):
    H, W = hw
    return (H, W) if all(k % 2 == 0 for k in turns) or H == W else (W, H)


def _flat(images) -> np.ndarray:
    """(n, prod(image shape)) view of the images (also for n = 0)."""
    return images.reshape(images.shape[0], int(np.prod(images.shape[1:])))
