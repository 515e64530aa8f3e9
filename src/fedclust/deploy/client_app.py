"""The ClientApp a data owner runs: it answers each release with its noisy statistic, through SecAgg+.

Every instruction of our ServerApp reaches :func:`train` through Flower's ``secaggplus_mod``, which
runs the client's side of SecAgg+ (key agreement, secret shares of its masks, masking, unmasking)
around it; :func:`train` itself only computes the stage's statistic of the owner's rows, adds the
owner's Gaussian noise share and returns the arrays in public units
(:func:`fedclust.deploy.protocol.client_upload`). The raw rows never leave the process; what leaves
is masked, and only the sum over clients is ever unmasked.

Two ways to build it: :func:`make_client_app` with a function that gives the rows of a node
(the simulation engine: a factory holding the partitions), and the module-level :data:`app` of a
real deployment, whose SuperNode names its partition with ``--node-config`` (see
:mod:`fedclust.deploy.digits`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat

from fedclust.deploy import digits
from fedclust.deploy.protocol import client_upload

#: The node-config key naming a SuperNode's partition (Flower's simulation engine sets it too).
PARTITION = "partition-id"


class SimulatedDropout(RuntimeError):
    """Raised by a client told to drop out (tests): Flower counts its reply as a failure."""


def partition_of(context: Context) -> int:
    return int(context.node_config.get(PARTITION, -1))


def make_client_app(rows_of: Callable[[Context], np.ndarray], drop: Callable | None = None) -> ClientApp:
    """A ClientApp whose node's rows are ``rows_of(context)``; ``drop(partition, config)`` (tests
    only) makes a node fail a release, as a client that goes offline mid-protocol."""
    app = ClientApp()

    @app.query()
    def identify(msg: Message, context: Context) -> Message:
        """The node's partition, so that the server can address the clients it samples."""
        return Message(RecordDict({"node": ConfigRecord({PARTITION: partition_of(context)})}), reply_to=msg)

    @app.train(mods=[secaggplus_mod])
    def train(msg: Message, context: Context) -> Message:
        fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        config = dict(fitins.config)
        if drop is not None and drop(partition_of(context), config):
            raise SimulatedDropout(f"partition {partition_of(context)} drops out of release {config.get('release')}")
        arrays = parameters_to_ndarrays(fitins.parameters)
        upload = client_upload(rows_of(context), config, arrays)
        fitres = FitRes(Status(Code.OK, "ok"), ndarrays_to_parameters(upload), num_examples=1, metrics={})
        return Message(compat.fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)

    return app


def _deployment_rows(context: Context) -> np.ndarray:
    cfg = context.node_config
    return digits.client_rows(
        partition_of(context),
        int(cfg.get("num-partitions", 1)),
        seed=int(cfg.get("data-seed", 0)),
        server_fraction=float(cfg.get("server-fraction", digits.SERVER_FRACTION)),
    )


#: The deployment's ClientApp (``[tool.flwr.app.components] clientapp`` of the Flower App).
app = make_client_app(_deployment_rows)
