"""One seed, separate streams (DESIGN.md, principle 3).

A run has one integer ``seed``. Every source of randomness gets its own generator, derived with
:class:`numpy.random.SeedSequence` and keyed by a *name*, so that adding a new stream never shifts
the draws of an existing one, and a private and a non-private run share every draw but the noise.
"""

from __future__ import annotations

import hashlib

import numpy as np

#: The streams every method should use for the matching purpose.
STANDARD_STREAMS = ("partition", "init", "sampling", "minibatch", "noise", "data")


def _name_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode("utf8")).digest()[:4], "little")


def stream(seed: int, name: str) -> np.random.Generator:
    """The generator for stream ``name`` of run ``seed``.

    The same ``(seed, name)`` always gives the same generator state; different names give
    statistically independent streams.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng(np.random.SeedSequence([int(seed), _name_key(name)]))


def streams(seed: int, names=STANDARD_STREAMS) -> dict[str, np.random.Generator]:
    """A dict ``name -> Generator`` with one independent stream per name."""
    return {n: stream(seed, n) for n in names}


def torch_seed(rng: np.random.Generator) -> int:
    """An integer seed for a ``torch.Generator``, drawn from a numpy stream."""
    return int(rng.integers(0, 2**62))
