"""The start of a run without needless garbage-collector passes (:mod:`fedclust.gc_pause`).

Two steps of a ``kedro run`` import libraries and build objects that live until the process ends:
kedro-mlflow's set-up when the context is created (MLflow's SQL tracking store, its database
models, the migrations check) and the opening of the MLflow run before the first node.
:class:`StartupGCHook` wraps both hook calls, all plugins' implementations included, in
:func:`fedclust.gc_pause.long_lived`.
"""

from __future__ import annotations

from kedro.framework.hooks import hook_impl

from fedclust.environment import no_notebook_probe
from fedclust.gc_pause import long_lived


class StartupGCHook:
    """Pauses the cyclic collector around the set-up hooks of a run and, in a ``kedro`` command,
    freezes what they built."""

    @hook_impl(wrapper=True)
    def after_context_created(self, context):
        with long_lived():
            return (yield)

    @hook_impl(wrapper=True)
    def before_pipeline_run(self, run_params, pipeline, catalog):
        with long_lived():
            return (yield)


class NotebookProbeHook:
    """Wraps the opening of the run's MLflow run (kedro-mlflow's ``before_pipeline_run``, all
    plugins' implementations included) in :func:`fedclust.environment.no_notebook_probe`: MLflow
    learns that a run outside a notebook is not in one without importing IPython (a third of a
    second); inside a notebook, where IPython is loaded, nothing changes."""

    @hook_impl(wrapper=True)
    def before_pipeline_run(self, run_params, pipeline, catalog):
        with no_notebook_probe():
            return (yield)
