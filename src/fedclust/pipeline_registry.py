"""Project pipelines.

``kedro run`` (the ``__default__`` pipeline) is a quick tour: data loading, partitioning and a
small run of every method on the default data. ``kedro run --pipeline=<method>`` runs one method
(with loading and partitioning in front of it).
"""

from __future__ import annotations

from kedro.pipeline import Pipeline

from fedclust.pipelines import data_processing, partitioning
from fedclust.pipelines.grids import GRID_PIPELINES
from fedclust.pipelines.clustered_fl.pipeline import rotation_pipeline
from fedclust.pipelines.methods import CLUSTERED_FL_PIPELINES, METHOD_PIPELINES


def register_pipelines() -> dict[str, Pipeline]:
    front = data_processing.create_pipeline() + partitioning.create_pipeline()
    pipelines: dict[str, Pipeline] = {
        "data_processing": data_processing.create_pipeline(),
        "partitioning": data_processing.create_pipeline() + partitioning.create_pipeline(),
    }
    tour = front
    for name, (factory, in_tour) in METHOD_PIPELINES.items():
        method = factory()
        pipelines[name] = front + method
        if in_tour:
            tour = tour + method
    rotated = data_processing.create_pipeline() + rotation_pipeline()
    pipelines["rotation"] = rotated
    tour = tour + rotation_pipeline()
    for name, (factory, in_tour) in CLUSTERED_FL_PIPELINES.items():
        method = factory()
        pipelines[name] = rotated + method
        if in_tour:
            tour = tour + method
    for name, factory in GRID_PIPELINES.items():
        pipelines[name] = factory()
    pipelines["__default__"] = tour
    return pipelines
