"""What the hooks share about the pipeline run in progress: its name and tags, the parent MLflow run,
and the nested run of each method when a run has several (the tour)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import mlflow

logger = logging.getLogger(__name__)

#: namespaces that are shared stages, not methods
STAGES = ("data_processing", "partitioning", "clustered_fl")


def method_of(node) -> str | None:
    """The method (or grid) a node belongs to: its top namespace, unless that is a shared stage."""
    top = node.namespace.split(".")[0] if node.namespace else None
    return None if top in STAGES else top


def methods_of(pipeline) -> tuple[list[str], list[str]]:
    """The methods of a pipeline and, among them, its grids (whose cells are nested runs)."""
    namespaces = sorted({n.namespace.split(".")[0] for n in pipeline.nodes if n.namespace})
    methods = [m for m in namespaces if m not in STAGES]
    grids = [m for m in methods if m.endswith("_grid") or m in ("benchmark", "privacy_audit")]
    return methods, grids


def is_grid_run(pipeline) -> bool:
    methods, grids = methods_of(pipeline)
    return bool(grids) and len(grids) == len(methods)


@dataclass
class RunState:
    """The pipeline run in progress (reset by :class:`fedclust.hooks.tags.RunTagsHook` at its start)."""

    name: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    parent_id: str | None = None
    nested: bool = False  # one nested MLflow run per method
    method_tags: dict[str, dict[str, str]] = field(default_factory=dict)
    method_names: dict[str, str] = field(default_factory=dict)
    method_run_ids: dict[str, str] = field(default_factory=dict)
    open_method: str | None = None  # the method whose nested run is active

    def reset(self) -> None:
        self.__init__()

    def run_id(self, method: str) -> str:
        """The MLflow run a method's results went to: its nested run, else the pipeline's run."""
        return self.method_run_ids.get(method) or self.parent_id or ""

    def close_method_run(self, status: str = "FINISHED") -> None:
        if self.open_method is None:
            return
        self.open_method = None
        try:
            mlflow.end_run(status=status)
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not end a method's MLflow run: %s", exc)


RUN = RunState()

#: the MLflow run of the pipeline run in progress (empty when none, or once it ended): an exit handler
#: marks it KILLED if the process leaves while it is still open (:mod:`fedclust.hooks.interrupts`)
OPEN_RUNS: list[str] = []
