"""Audit cases of the Flower backend: FKM and FedDP-KMeans with every sum through SecAgg+.

The cases are those of :mod:`fedclust.audits.kmeans` (same data, canary, statistic, claim and
mutant) with the Flower backend's run in place of the simulation's: the server's stage code, its
SecAgg+ release (threshold, a ``N(0, sigma^2 / t)`` share per client, the encoding, the exact sum)
and every client's own upload, with SecAgg+'s arithmetic done in one process
(:mod:`fedclust.deploy.local`: Flower's quantizer, the modular sum and the workflow's decoding; the
masks, which cancel, left out). Through Flower's engine a run costs seconds and an audit thousands
of runs; the protocol's transport is the one part this path does not exercise, and
``tests/deploy`` runs it.

The statistic reads the totals the server received from SecAgg+ (the release observers of the
stage code), so the measured noise is the noise on the aggregate: the sum of the 4 clients' shares
(t = 4 of 4 here, so the noise present is the accounted one).
"""

from __future__ import annotations

from functools import partial

from fedclust.audits.kmeans import fed_dp_kmeans_audit, fkm_audit
from fedclust.deploy import local
from fedclust.privacy.audit import AuditCase


def _fkm_flower_case(
    epsilon: float = 1.0,
    delta: float = 1e-5,
    clip: float = 1.0,
    rounds: int = 1,
    n_runs: int = 1000,
    noise_scale: float = 1.0,
) -> AuditCase:
    return fkm_audit(epsilon, delta, clip, rounds, n_runs, noise_scale, partial(local.run, "fkm"), "fkm_flower")


def _fed_dp_kmeans_flower_case(
    epsilon: float = 1.0,
    delta: float = 1e-5,
    clip: float = 1.0,
    steps: int = 1,
    n_runs: int = 1000,
    noise_scale: float = 1.0,
) -> AuditCase:
    run = partial(local.run, "fed_dp_kmeans")
    return fed_dp_kmeans_audit(epsilon, delta, clip, steps, n_runs, noise_scale, run, "fed_dp_kmeans_flower")


CASES = {"fkm_flower": _fkm_flower_case, "fed_dp_kmeans_flower": _fed_dp_kmeans_flower_case}
