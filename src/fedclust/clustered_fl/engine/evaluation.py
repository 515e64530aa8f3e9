"""Evaluation of k cluster models and the result of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedclust.clustered_fl.engine.data import FederatedTensors, Params
from fedclust.clustered_fl.engine.kernels import assign_clusters, client_model_losses
from fedclust.clustered_fl.models import BatchedModel
from fedclust.metrics import client_clustering_scores, pooled_accuracy


def evaluate(
    model: BatchedModel,
    params: Params,
    data: FederatedTensors,
    *,
    train: bool = True,
    test: bool = True,
    test_select: str = "test",
    max_rows: int = 1 << 16,
) -> dict[str, Any]:
    """Full evaluation of k cluster models.

    Returns a dict with (where applicable):

    * ``train_loss``: mean over ALL training clients of min_p (local loss under model p);
      ``assignment`` (N,) argmin cluster of every training client; ``client_ACC``/``client_NMI`` of
      that assignment against ``data.group``;
    * ``test_accuracy``: pooled over test images, every test client using its lowest-loss model on its
      own test data (``test_select="test"``) or on the training data of the training client with the
      same index (``"train"``); ``test_loss``: pooled mean loss under the chosen models;
      ``test_assignment`` (M,).
    """
    out: dict[str, Any] = {}
    tr_losses = None
    if train or (test and test_select == "train"):
        tr_losses, _ = client_model_losses(model, params, data.X_train, data.y_train, data.n_train, max_rows=max_rows)
    if train:
        a = assign_clusters(tr_losses)
        out["train_loss"] = float(tr_losses.min(dim=1).values.mean())
        out["assignment"] = a.numpy()
        if data.group is not None:
            out.update(client_clustering_scores(data.group, out["assignment"]))
    if test and data.X_test is not None:
        losses, correct = client_model_losses(
            model,
            params,
            data.X_test,
            data.y_test,
            data.n_test,
            with_correct=model.loss == "cross_entropy",
            max_rows=max_rows,
        )
        if test_select == "train":
            if data.n_test_clients != data.n_clients:
                raise ValueError("test_select='train' needs one test client per training client")
            sel = tr_losses
        else:
            sel = losses
        choice = assign_clusters(sel)
        counts = data.n_test.to(losses.dtype)
        picked = losses[torch.arange(len(choice)), choice]
        out["test_loss"] = float((picked * counts).sum() / counts.sum().clamp(min=1))
        out["test_assignment"] = choice.numpy()
        if correct is not None:
            # pooled_accuracy picks the lowest-loss column of its first argument
            out["test_accuracy"] = pooled_accuracy(sel.numpy(), correct.numpy(), data.n_test.numpy())
        else:
            out["test_accuracy"] = float("nan")
        if data.test_group is not None:
            sc = client_clustering_scores(data.test_group, out["test_assignment"])
            out["test_client_ACC"], out["test_client_NMI"] = sc["client_ACC"], sc["client_NMI"]
    return out


@dataclass
class ClusteredFLResult:
    """Output of a clustered-FL run.

    * ``params``/``momentum``: final stacked cluster models {name: (k, ...)} (see :meth:`state_dicts`);
    * ``assignment`` (N,): final argmin cluster of every training client; ``test_assignment`` (M,);
    * ``history``: per evaluated round, lists under ``"round"``, ``"lr"``, ``"train_loss"``,
      ``"test_accuracy"``, ``"test_loss"``, ``"client_ACC"``, ``"client_NMI"``, ``"cluster_sizes"``
      (list of k ints per round) and the aggregator's numeric info;
    * ``dp_events``: DP releases made (empty for the non-private methods);
    * ``info``: method, hyperparameters, init restarts, wall times per phase, final full evaluation.
    """

    params: Params
    momentum: Params
    assignment: np.ndarray
    test_assignment: np.ndarray | None
    history: dict[str, list]
    dp_events: list = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def state_dicts(self) -> list[dict[str, torch.Tensor]]:
        """One ``nn.Module``-style state dict per cluster model."""
        k = next(iter(self.params.values())).shape[0]
        return [{n: v[j].clone() for n, v in self.params.items()} for j in range(k)]

    def final_metrics(self) -> dict[str, float]:
        return {
            k: float(v[-1])
            for k, v in self.history.items()
            if len(v) and isinstance(v[-1], (int, float, np.floating, np.integer))
        }
