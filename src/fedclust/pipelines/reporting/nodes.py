"""Plots for MLflow and data/08_reporting (the figures themselves are in :mod:`fedclust.plots`)."""

from __future__ import annotations

import logging
import math
import os

import mlflow
import numpy as np

from fedclust import plots
from fedclust.data.registry import dataset_label
from fedclust.grids import report
from fedclust.pipelines.mlflow_io import run_address
from fedclust.pipelines.reporting.datasets import SAVED
from fedclust.registry.clustered_fl import ONE_MODEL


def describe_partition(partition) -> str:
    """A short name of the client split: the ``partition`` parameters (scheme and options) or the
    clustered-FL rotated clients."""
    if isinstance(partition, dict):
        opts = partition.get("options") or {}
        n = partition.get("n_clients")
        inner = [f"{k}={v}" for k, v in opts.items()] + ([f"{n} clients"] if n else [])
        return str(partition.get("scheme", "?")) + (f"({', '.join(inner)})" if inner else "")
    angles = getattr(partition, "angles", None)
    if angles is not None:
        group = getattr(partition, "group", None)
        n = f", {len(group)} clients" if group is not None else ""
        return f"rotation({len(angles)} groups{n})"
    return str(partition)


def _accounted_epsilon(privacy: dict) -> float:
    eps = (privacy or {}).get("epsilon_accountant", (privacy or {}).get("epsilon"))
    return plots.eps_value(eps)


def plot_history(result, privacy: dict, dataset: dict, partition, method: str):
    """Per-round metrics of one run in a grid of panels (empty and constant histories left out), titled
    with the method, data, partition and the accounted epsilon; a private run adds epsilon spent
    against rounds (the accountant on the first t rounds' releases)."""
    eps = _accounted_epsilon(privacy)
    eps_rounds = None
    if math.isfinite(eps) and result.dp_events:
        rounds = result.info.get("rounds")
        eps_rounds = (
            plots.epsilon_by_round(
                result.dp_events,
                float(privacy.get("delta", 1e-5)),
                privacy.get("accountant", "rdp"),
                rounds=int(rounds) if rounds else None,
            )
            or None
        )
    name = dataset_label(dataset) if isinstance(dataset, dict) and dataset.get("name") else str(dataset or "?")
    return plots.history_figure(
        result.history,
        method=method,
        dataset=name,
        partition=describe_partition(partition),
        epsilon=eps,
        eps_rounds=eps_rounds,
    )


def plot_centroids(result, dataset, privacy: dict, partition, method: str):
    """The learned centroids: as images where the data are images (digits 8x8, MNIST 28x28), else
    as a cluster x feature heatmap; a method without centroids gets a figure that says so."""
    title = (
        f"{method} · {getattr(dataset, 'name', '?')} / {describe_partition(partition)} · "
        f"ε = {plots.eps_text(_accounted_epsilon(privacy))}: learned centroids"
    )
    C = getattr(result, "centroids", None)
    if C is None:
        return plots.message_figure(f"{method} has no centroids", title)
    images = getattr(dataset, "images", None)
    if images is not None and int(np.prod(images.shape[1:])) == C.shape[1]:
        return plots.centroid_images_figure(C, images.shape[1:], title)
    return plots.centroid_heatmap_figure(C, title)


def _chance_text(metrics: dict, key: str) -> str:
    """`` (chance 0.132)`` after a metric that has a chance line in ``metrics`` (``<key>_chance``)."""
    chance = metrics.get(f"{key}_chance")
    return f" (chance {float(chance):.3f})" if isinstance(chance, (int, float)) and math.isfinite(chance) else ""


def summarize_run(metrics: dict, privacy: dict, *reports, method: str) -> None:
    """The last node of a method pipeline: one log line with the headline numbers (ACC and NMI with
    their chance line, the majority baseline, ``AT CHANCE`` when the result is within noise of its
    chance line and ``COLLAPSED`` when :func:`fedclust.metrics.is_collapsed` holds) and where the
    reports are. It reads every reporting output of the method (metrics, privacy, the MLflow
    datasets and the plots), so in Kedro-Viz they stay inside the method's modular pipeline
    instead of hanging off it as free outputs."""

    one_model = method in ONE_MODEL  # one model for every client: no client clustering to score
    shown = [
        f"{key} {float(metrics[key]):.3f}" + _chance_text(metrics, key)
        for key in ("ACC", "NMI", "test_accuracy", "client_ACC", "objective_ratio")
        if isinstance(metrics.get(key), (int, float)) and not (one_model and key == "client_ACC")
    ]
    majority = metrics.get("ACC_majority")
    if isinstance(majority, (int, float)) and math.isfinite(majority):
        shown.append(f"majority ACC {float(majority):.3f}")
    if method in ONE_MODEL and "client_ACC" in metrics:
        shown.append(f"client clustering {report.ONE_MODEL_FLAG}")
    elif metrics.get("at_chance") or metrics.get("client_at_chance"):
        shown.append("AT CHANCE")
    if metrics.get("collapsed"):
        shown.append("COLLAPSED (ACC above chance with NMI at chance, or ACC not above the majority baseline)")
    eps = _accounted_epsilon(privacy)
    budget = (
        f"ε {plots.eps_text(eps)} (accounted, {privacy.get('trust_model', 'none')})" if math.isfinite(eps) else "no DP"
    )
    logging.getLogger(__name__).info(
        "%s: %s · %s · reports in data/08_reporting/%s/", method, " · ".join(shown) or "no metrics", budget, method
    )


def grid_report_lines(grid: str, records: list[dict], run_id: str | None) -> list[str]:
    """What the terminal shows after a benchmark (or the tour's slice): its table, every method of
    it (``n/a`` where not applicable), sorted by epsilon then ACC (a data set without labels: its
    objective ratio, lowest first) in 100 columns, with the rule of
    its marks (:func:`fedclust.grids.report.terminal_lines`), the report's path (the latest report,
    a file) and the MLflow address of its run."""

    _, label_of = report.protection_legend(records)
    table = report.method_table(records)
    unlabelled = bool(report.is_ratio(table).any())
    lines = [
        "",
        f"{grid}: ACC per method, sorted by ε then ACC (* best, ≈ tied for best at that ε; prot: what a "
        "run protects, see the report)"
        + ("; a data set without labels: its objective ratio, lowest first" if unlabelled else ""),
        *report.terminal_lines(table, label_of=label_of),
    ]
    path = next(
        (p for key, p in SAVED.items() if key.endswith(f"/{grid}/report.html")), f"data/08_reporting/{grid}/report.html"
    )
    lines.append(f"report: {os.path.relpath(path) if os.path.isabs(path) else path}")
    if run_id:
        exp = mlflow.get_run(run_id).info.experiment_id
        lines.append("MLflow: " + run_address(mlflow.get_tracking_uri(), exp, run_id))
    return lines
