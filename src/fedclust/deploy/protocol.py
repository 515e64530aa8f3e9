"""What travels between our ServerApp and ClientApp in one release, and what a client computes.

A release is one run of Flower's SecAgg+ workflow. The server's instruction to the clients (the
``FitIns`` of the workflow's collect stage) carries

* the **broadcast**: the public state the stage needs (centres, projection, server points), as
  arrays named in the config entry ``broadcast``;
* the config: the method and stage, the clip, the names of the arrays to upload (``outputs``) and,
  per output, its unit (``unit:<name>``) and the std of the client's Gaussian noise share
  (``share_std:<name>``).

The client answers with the stage's statistic of its own clipped rows (the library's client-side
function, :data:`fedclust.clustering.fed_dp_kmeans.STATISTICS` or
:func:`fedclust.clustering.fkm.client_statistic`), adds its noise share to every entry, divides by
the unit and hands the arrays to ``secaggplus_mod``, which encodes and masks them. The noise is
drawn from the client's own fresh entropy: nobody else, the server included, can reproduce it.
"""

from __future__ import annotations

import numpy as np

from fedclust.clustering import fed_dp_kmeans, fkm
from fedclust.clustering._common import clip_data
from fedclust.clustering.defaults import norm_counts

METHODS = ("fed_dp_kmeans", "fkm")

#: The power of the clip that is the unit of every uploaded array: a sum of clipped samples is at
#: most clip per sample, a second moment clip^2, a count or a histogram 1. In these units every
#: entry of a client's statistic is at most its number of samples.
UNIT_POWER = {"sums": 1, "sum": 1, "second_moment": 2, "counts": 0, "weights": 0, "size": 0, "norm_counts": 0}


def unit(name: str, scale: float) -> float:
    """The unit of the uploaded array ``name``: ``scale`` (the clip; without one, as in non-private
    FKM, a public bound on the norm of a sample) to the power of :data:`UNIT_POWER`."""
    return float(scale) ** UNIT_POWER[name]


def pack(broadcast: dict[str, np.ndarray]) -> tuple[list[np.ndarray], str]:
    """The broadcast's arrays in order and their names, comma-joined."""
    names = list(broadcast)
    return [np.asarray(broadcast[n], dtype=np.float64) for n in names], ",".join(names)


def unpack(arrays: list[np.ndarray], names: str) -> dict[str, np.ndarray]:
    """The inverse of :func:`pack`."""
    keys = [n for n in names.split(",") if n]
    if len(keys) != len(arrays):
        raise ValueError(f"the broadcast names {keys} do not match its {len(arrays)} arrays")
    return dict(zip(keys, arrays))


def release_config(method: str, stage: str, clip, scale: float, broadcast_names: str, share_stds: dict) -> dict:
    """The config of one release's instruction (see the module docstring); ``scale``: see :func:`unit`."""
    cfg = {
        "method": method,
        "stage": stage,
        "clip": float(clip) if clip else 0.0,
        "broadcast": broadcast_names,
        "outputs": ",".join(share_stds),
    }
    for name, s in share_stds.items():
        cfg[f"share_std:{name}"] = float(s)
        cfg[f"unit:{name}"] = unit(name, scale)
    return cfg


def statistic(method: str, stage: str, X_raw: np.ndarray, clip, broadcast: dict) -> dict[str, np.ndarray]:
    """One client's statistic of a stage, before noise, by the library's client-side function."""
    Xc = clip_data(X_raw, clip or None)
    if method == "fed_dp_kmeans":
        return fed_dp_kmeans.STATISTICS[stage](Xc, broadcast)
    if method == "fkm" and stage == "clip":  # the DP clip estimate: the histogram of the raw row norms
        return {"norm_counts": norm_counts(X_raw)}
    if method == "fkm":
        return fkm.client_statistic(X_raw, Xc, broadcast["centres"])
    raise ValueError(f"the Flower backend runs {list(METHODS)}, not {method!r}")


def noise_share(shape, share_std: float, rng: np.random.Generator) -> np.ndarray:
    """One client's Gaussian noise share: ``N(0, share_std^2)`` per entry (none at std 0)."""
    if share_std <= 0:
        return np.zeros(shape)
    return rng.normal(0.0, share_std, size=shape)


def client_upload(X_raw: np.ndarray, config: dict, arrays: list[np.ndarray], rng=None) -> list[np.ndarray]:
    """What one client hands to SecAgg+: every output of the stage's statistic plus its noise share,
    in units (``rng``: the client's generator; None draws from fresh OS entropy)."""
    rng = np.random.default_rng() if rng is None else rng
    broadcast = unpack(arrays, str(config["broadcast"]))
    clip = float(config["clip"]) or None
    stats = statistic(str(config["method"]), str(config["stage"]), X_raw, clip, broadcast)
    out = []
    for name in str(config["outputs"]).split(","):
        value = np.asarray(stats[name], dtype=np.float64)
        value = value + noise_share(value.shape, float(config[f"share_std:{name}"]), rng)
        out.append(value / float(config[f"unit:{name}"]))
    return out
