"""The Flower backend without the network: the same server, client and SecAgg+ arithmetic in one process.

A privacy audit reruns a release thousands of times; through Flower's engine every run costs
seconds. :func:`run` runs the Flower backend's own server code (:func:`fedclust.deploy.flower.
serve_fed_dp_kmeans`, :func:`~fedclust.deploy.flower.serve_fkm`), its own release
(:class:`~fedclust.deploy.server_app.SecAggRelease`: threshold, noise shares, encoding, exact
sums) and every client's own upload (:func:`fedclust.deploy.protocol.client_upload`: statistic and
noise share), and replaces only the transport: :class:`LocalSecAgg` encodes each upload with
Flower's quantizer, sums the integers modulo the modulus and decodes the sum exactly as
``SecAggPlusWorkflow`` does after unmasking. The masks are left out: they cancel exactly modulo the
modulus, which is what makes SecAgg+ correct, so the sum the server sees is the same.

The clients' noise shares come from generators seeded by the run (``seed``), so that an audit can
be repeated; a real client draws them from fresh entropy.
"""

from __future__ import annotations

import numpy as np
from flwr.common import parameters_to_ndarrays
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    factor_combine,
    factor_extract,
    parameters_addition,
    parameters_mod,
)
from flwr.common.secure_aggregation.quantization import dequantize, quantize

from fedclust.deploy.flower import SERVE, build_job
from fedclust.deploy.protocol import client_upload
from fedclust.deploy.server_app import SecAggRelease


def secagg_sum(uploads: list[list[np.ndarray]], enc) -> list[np.ndarray]:
    """SecAgg+'s arithmetic on the uploads of the clients that reached the sum, masks left out: each
    client's weight (1, as ``R`` on the grid) and its arrays quantized as ``secaggplus_mod`` does,
    the sum modulo the modulus, and the workflow's decoding to the weighted average."""
    R, c, M = enc.quantization_range, enc.clipping_range, enc.modulus_range
    total = None
    for arrays in uploads:
        # weight num_examples / max_weight = 1; int64 as the masked vectors are (int32 sums would wrap)
        q = [np.asarray(a, dtype=np.int64) for a in factor_combine(R, quantize(arrays, c, R))]
        total = q if total is None else parameters_addition(total, q)
    q_ratio, q_sum = factor_extract(parameters_mod(total, M))
    out = dequantize(q_sum, c, R)
    offset = -(len(uploads) - 1) * c
    return [(v + offset) * (R / q_ratio) for v in out]


class LocalSecAgg(SecAggRelease):
    """:class:`SecAggRelease` whose transport is :func:`secagg_sum` over in-process clients (``rows``:
    every client's raw rows; ``drop``: the clients, by partition, whose uploads are lost)."""

    def __init__(self, method: str, rows: list[np.ndarray], settings: dict, seed: int, drop=()):
        super().__init__(None, None, method, {i: i for i in range(len(rows))}, settings)
        self.rows_of, self.seed, self.drop = rows, int(seed), set(drop)

    def aggregate(self, node_ids, fit_ins, t, enc):
        config, arrays = dict(fit_ins.config), parameters_to_ndarrays(fit_ins.parameters)
        live = [p for p in node_ids if p not in self.drop]
        if len(live) < t:
            return None, 0
        uploads = [
            client_upload(
                self.rows_of[p], config, arrays, np.random.default_rng([self.seed, int(config["release"]), p])
            )
            for p in live
        ]
        return secagg_sum(uploads, enc), len(live)


def run(method: str, X, client, k: int, options=None, *, y=None, threshold=None, clip_noise=None, drop=(), **settings):
    """The Flower backend's run of ``method`` in this process (see the module docstring)."""
    job, rows = build_job(method, X, client, k, options, settings, y=y, threshold=threshold, clip_noise=clip_noise)
    release = LocalSecAgg(method, rows, job.settings(), job.plan.o.seed, drop)
    return SERVE[method](job, release)
