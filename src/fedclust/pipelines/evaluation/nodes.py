"""Evaluation: final ACC/NMI/ARI of a clustering, their chance line, plus cost figures of the run.

A data set without labels has no ACC/NMI/ARI: its runs report the k-means objective instead
(:func:`fedclust.metrics.objective_scores`), relative to non-private centralized k-means on the same data."""

from __future__ import annotations

import math

from fedclust.clustering.base import ClusteringResult
from fedclust.data import Dataset
from fedclust.metrics import objective_scores, scores_with_chance, time_to_90pct
from fedclust.pipelines.mlflow_io import schema_metrics

#: history keys reported under another name: FedCAvg/FedCGds's ``eps`` is the relative change of the
#: objective (a convergence figure), not a privacy budget
_RENAMED = {"eps": "rel_objective_change"}


def evaluate_clustering(result: ClusteringResult, dataset: Dataset) -> dict:
    """Final metrics of a federated data clustering run (the reporting contract's metrics.json).

    Next to ACC/NMI/ARI: the chance line of this result (``ACC_chance``, ``ACC_chance_hi``,
    ``NMI_chance``, ``NMI_chance_hi``: a random assignment with the same cluster sizes,
    :func:`fedclust.metrics.chance_scores`, NMI's from the same shuffles as ACC's), the majority
    baseline ``ACC_majority`` (the largest class share), ``at_chance`` (1.0 when ACC is within noise
    of its chance line, else 0.0; a number so that MLflow logs it) and ``collapsed`` (1.0 when ACC is
    above chance but NMI is not, or ACC does not beat the majority baseline:
    :func:`fedclust.metrics.is_collapsed`). A data set without labels gets
    :func:`fedclust.metrics.objective_scores` instead of ACC/NMI/ARI and their chance lines."""
    if getattr(dataset, "labelled", True):
        out = scores_with_chance(dataset.y, result.labels)
    else:
        out = objective_scores(dataset.X, centers=getattr(result, "centroids", None), labels=result.labels)
    out["uploaded_reals"] = int(result.uploaded_reals)
    for key in ("wall_time_s", "rounds"):
        if key in result.info:
            out[key] = float(result.info[key])
    out.update(time_to_90pct(result.history, float(result.info.get("wall_time_s", 0.0))))
    out.update({k: float(v) for k, v in (result.info.get("metrics") or {}).items()})  # method-specific extras
    for key, hist in result.history.items():
        if hist and key not in ("ACC", "NMI", "ARI") and isinstance(hist[-1], (int, float)) and math.isfinite(hist[-1]):
            out[f"final_{_RENAMED.get(key, key)}"] = float(hist[-1])
    return out


def to_mlflow_metrics(metrics: dict, privacy: dict) -> dict:
    """What the method's MLflow run gets (:class:`fedclust.pipelines.mlflow_io.MlflowMethodRunDataset`):
    the final metrics in the schema shared with grid cells (``ACC``, ..., ``epsilon`` accounted,
    ``epsilon_paper``, ``private``, ``wall_time_s``: :func:`fedclust.pipelines.mlflow_io.schema_metrics`)
    and ``metrics.json``/``privacy.json`` as artifacts."""

    numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    return {
        "metrics": schema_metrics(numbers, privacy),
        "artifacts": {"metrics.json": dict(metrics), "privacy.json": dict(privacy)},
    }


def history_steps(history: dict, hist: list) -> list[int]:
    """The round of every entry of ``hist``: the result's own ``round`` list where the history is
    recorded at evaluation rounds only (clustered FL), else 1, 2, ... (one entry per round)."""
    rounds = history.get("round") or []
    return [int(r) for r in rounds] if len(rounds) == len(hist) else list(range(1, len(hist) + 1))


def numeric_histories(history: dict) -> dict[str, list]:
    """The per-round metric histories worth logging or plotting (numbers only; not round/lr)."""
    return {
        k: v
        for k, v in history.items()
        if k not in ("round", "lr") and len(v) and all(isinstance(x, (int, float)) for x in v)
    }


def history_to_mlflow(result) -> dict:
    """Per-round histories as MLflow metric histories (step = round)."""
    out = {}
    for key, hist in numeric_histories(result.history).items():
        vals = [
            {"value": float(v), "step": step}
            for step, v in zip(history_steps(result.history, hist), hist)
            if math.isfinite(float(v)) and abs(float(v)) <= 1e300
        ]
        if vals:
            out[f"round.{_RENAMED.get(key, key)}"] = vals
    return out
