"""Project pipelines.

``kedro run`` (the ``__default__`` pipeline) is a quick tour: data loading, partitioning and a
small run of every method on the default data without privacy, then a private slice of the
benchmark (``tour_benchmark``: the k-means family and FedDP-KMeans at two budgets). ``kedro run --pipelines=<method>`` runs one method
(with loading and partitioning in front of it).

Only the requested pipelines are built: ``kedro run --pipelines=fkm`` imports the FKM nodes and
not, say, torch for the clustered-FL ones (Kedro 1.x tells the registry which pipelines a run
asked for; ``kedro registry list``, Kedro-Viz and an unknown name get all of them).
"""

from __future__ import annotations

from typing import Callable

from kedro.pipeline import Pipeline

from fedclust.gc_pause import long_lived


def _requested() -> set[str] | None:
    """The pipeline names of the current ``kedro run``, or None for all of them."""
    try:
        # each pipeline is built (and its methods imported) only when Kedro asks for the pipelines
        from kedro.framework.project import pipelines

        names = pipelines._requested_pipelines  # set by KedroSession.run (Kedro >= 1.7)
    except Exception:  # another Kedro: build everything
        return None
    return None if names is None else set(names)


def _factories(grids: bool = True) -> dict[str, Callable[[], Pipeline]]:
    """name -> a function that builds the pipeline (importing its nodes only when called);
    ``grids=False`` leaves out the grid pipelines (and the import of their module)."""
    # each pipeline is built (and its methods imported) only when Kedro asks for the pipelines
    from fedclust.pipelines.methods import CLUSTERED_FL_PIPELINES, METHOD_PIPELINES

    def front() -> Pipeline:
        # each pipeline is built (and its methods imported) only when Kedro asks for the pipelines
        from fedclust.pipelines import data_processing, partitioning

        return data_processing.create_pipeline() + partitioning.create_pipeline()

    def rotated_stage() -> Pipeline:
        # each pipeline is built (and its methods imported) only when Kedro asks for the pipelines
        from fedclust.pipelines.clustered_fl.pipeline import rotation_pipeline

        return rotation_pipeline()

    def rotated() -> Pipeline:
        # each pipeline is built (and its methods imported) only when Kedro asks for the pipelines
        from fedclust.pipelines import data_processing

        return data_processing.create_pipeline() + rotated_stage()

    def tour() -> Pipeline:
        out = front()
        for factory, in_tour in METHOD_PIPELINES.values():
            if in_tour:
                out = out + factory()
        out = out + rotated_stage()
        for factory, in_tour in CLUSTERED_FL_PIPELINES.values():
            if in_tour:
                out = out + factory()
        from fedclust.pipelines.grids import tour_benchmark  # the private slice: some methods at two budgets

        return out + tour_benchmark()

    def data_processing() -> Pipeline:
        # each pipeline is built (and its methods imported) only when Kedro asks for the pipelines
        from fedclust.pipelines import data_processing as dp

        return dp.create_pipeline()

    factories: dict[str, Callable[[], Pipeline]] = {"data_processing": data_processing, "partitioning": front}
    for name, (factory, _) in METHOD_PIPELINES.items():
        factories[name] = lambda factory=factory: front() + factory()
    factories["rotation"] = rotated
    for name, (factory, _) in CLUSTERED_FL_PIPELINES.items():
        factories[name] = lambda factory=factory: rotated() + factory()
    if grids:
        # each pipeline is built (and its methods imported) only when Kedro asks for the pipelines
        from fedclust.pipelines.grids import GRID_PIPELINES

        factories.update(GRID_PIPELINES)
    factories["__default__"] = tour
    return factories


def register_pipelines() -> dict[str, Pipeline]:
    # building the pipelines imports their nodes (and matplotlib with the plots): objects kept until
    # the process ends, which the garbage collector need not walk (fedclust.gc_pause)
    with long_lived():
        return _build()


def _build() -> dict[str, Pipeline]:
    requested = _requested()
    if requested is not None:
        factories = _factories(grids=False)
        if not requested <= set(factories):
            factories = _factories()
        if requested <= set(factories):
            return {name: factories[name]() for name in requested}
    return {name: factory() for name, factory in _factories().items()}
