"""The method registry: every method's run adapter, typed config and privacy calibration, in one place.

``REGISTRY[name]`` is a :class:`MethodSpec`; ``spec.config_from(params)`` validates a ``<name>.train``
group; ``spec.calibrate`` and ``spec.run`` are what the Kedro pipelines, the grids and the benchmark
call. Plain Python (no Kedro).
"""

from fedclust.options import MethodConfig, param
from fedclust.registry.checks import check_limits, method_problems
from fedclust.registry.references import REFERENCES, Reference
from fedclust.registry.spec import (
    REGISTRY,
    MethodSpec,
    clustered_fl_methods,
    clustering_methods,
    get,
    trust_model_of,
)

__all__ = [
    "REGISTRY",
    "REFERENCES",
    "Reference",
    "MethodSpec",
    "MethodConfig",
    "param",
    "get",
    "clustering_methods",
    "clustered_fl_methods",
    "trust_model_of",
    "method_problems",
    "check_limits",
]
